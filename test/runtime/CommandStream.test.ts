/**
 * A host's command stream body (layers/hosts/CommandStream.ts): the frames offered together reach
 * the socket as one chunk, in order, and the backlog stays bounded in commands.
 */
import { describe, expect, it } from "vitest"
import { CommandStreamBody } from "../../src/layers/hosts/CommandStream.js"

const bytes = (s: string) => Buffer.from(s)
const chunksOf = (body: CommandStreamBody) => {
  const chunks: Array<string> = []
  body.on("data", (c: Buffer) => chunks.push(c.toString()))
  return chunks
}
const tick = () => new Promise((r) => setImmediate(r))

describe("a host's command stream body", () => {
  it("frames offered in one step go out as one chunk, in order; a later frame is a chunk of its own", async () => {
    const body = new CommandStreamBody({ commands: 16, heartbeatMs: 0 }, () => {})
    const chunks = chunksOf(body)
    await tick()
    expect(["a\n\n", "b\n\n", "c\n\n"].map((f) => body.offer(bytes(f)))).toEqual([true, true, true])
    await tick()
    expect(chunks).toEqual(["a\n\nb\n\nc\n\n"])
    body.offer(bytes("d\n\n"))
    await tick()
    expect(chunks).toEqual(["a\n\nb\n\nc\n\n", "d\n\n"])
    body.close()
  })

  it("while the socket reads nothing, the backlog holds at most its bound in commands and refuses more; what it took is delivered whole", async () => {
    let gone = 0
    const body = new CommandStreamBody({ commands: 3, heartbeatMs: 0 }, () => void gone++)
    // No reader yet: nothing is asked for, so every offered frame waits in the backlog.
    const offered = ["1", "2", "3", "4"].map((f) => body.offer(bytes(`${f}\n\n`)))
    expect(offered).toEqual([true, true, true, false])
    const chunks = chunksOf(body)
    await tick()
    expect(chunks.join("")).toBe("1\n\n2\n\n3\n\n")
    body.close()
    expect(gone).toBe(1)
    expect(body.offer(bytes("5\n\n"))).toBe(false)
  })
})
