/**
 * A host's command stream body (layers/hosts/CommandStream.ts): the frames offered together reach
 * the socket as one chunk, in order, and the backlog stays bounded in commands — the commands that
 * wait while the socket takes no more (a host that does not read), not those of a burst offered
 * while it takes what it is given.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import type { AdmittedEnvironment } from "../../src/domain/Environment.js"
import type { HostId, SessionId } from "../../src/domain/Ids.js"
import { HOST_COMMAND_QUEUE } from "../../src/domain/Limits.js"
import { make } from "../../src/layers/HostsFile.js"
import { CommandStreamBody } from "../../src/layers/hosts/CommandStream.js"
import { EnvironmentNotSent } from "../../src/services/Environments.js"
import { framesOf } from "../support/hosts.js"

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

  it("a burst of more commands than the bound, offered while the socket takes what it is given, is taken whole and goes out as one chunk", async () => {
    const body = new CommandStreamBody({ commands: 3, heartbeatMs: 0 }, () => {})
    const chunks = chunksOf(body)
    await tick()
    const burst = Array.from({ length: 10 }, (_, i) => `${i}\n\n`)
    expect(burst.map((f) => body.offer(bytes(f)))).toEqual(burst.map(() => true))
    await tick()
    expect(chunks).toEqual([burst.join("")])
    body.close()
  })

  it("once the socket takes no more (its reader stopped), at most the bound waits and more is refused; what it took is delivered once the reader reads", async () => {
    const body = new CommandStreamBody({ commands: 3, heartbeatMs: 0 }, () => {})
    const chunks = chunksOf(body)
    await tick()
    body.pause()
    // More than the stream buffers: once handed over, the stream wants no more until it is read.
    expect(body.offer(bytes(`${"x".repeat(body.readableHighWaterMark * 2)}\n\n`))).toBe(true)
    await tick()
    expect(["1", "2", "3", "4"].map((f) => body.offer(bytes(`${f}\n\n`)))).toEqual([true, true, true, false])
    body.resume()
    await tick()
    await tick()
    expect(chunks.join("").endsWith("1\n\n2\n\n3\n\n")).toBe(true)
    body.close()
  })

  it(`a dispatch of more calls than HOST_COMMAND_QUEUE (${HOST_COMMAND_QUEUE}) to a host that reads its stream is sent whole: no host_busy`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-command-burst-"))
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const hosts = yield* make({ dataDir: dir, graceMs: 100, heartbeatMs: 0, maxResultBytes: 1024 })
      const { host_id } = yield* hosts.register
      const stream = yield* hosts.connect(host_id as HostId)
      const frames = framesOf(stream.body)
      yield* Effect.promise(() => frames.expect("ready"))
      const environment = { name: "box", driver: "host", host: host_id } as AdmittedEnvironment
      const n = HOST_COMMAND_QUEUE + 100
      // As a dispatch sends its calls: all in one step.
      const sent = Array.from({ length: n }, (_, i) =>
        hosts.send(host_id, {
          session: "ses_0000000000000000000000000a" as SessionId,
          sequence: i + 1,
          environment,
          name: "echo",
          callId: `call_${i}`,
          input: { i },
          deadlineAtMs: 0
        }))
      const refused = sent.filter((s) => s instanceof EnvironmentNotSent).map((s) => (s as EnvironmentNotSent).reason)
      expect(refused).toEqual([])
      for (let i = 0; i < n; i++) expect((yield* Effect.promise(() => frames.expect("call"))).data.sequence).toBe(i + 1)
      yield* stream.stop
    })))
    fs.rmSync(dir, { recursive: true, force: true })
  })
})
