/**
 * A host's command stream body (layers/hosts/CommandStream.ts): the frames offered together reach
 * the socket as one chunk, in order, and the backlog stays bounded in commands — the commands that
 * wait while the socket takes no more (a host that does not read), not those of a burst offered
 * while it takes what it is given. A frame still waiting can be withdrawn and is then never
 * written; one handed over cannot; the body hands over a chunk at a time and buffers nothing, so
 * a reader that stops leaves the rest withdrawable; a closed body writes nothing more.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import type { AdmittedEnvironment } from "../../src/domain/Environment.js"
import type { HostId, SessionId } from "../../src/domain/Ids.js"
import { HOST_COMMAND_CHUNK_BYTES, HOST_COMMAND_QUEUE } from "../../src/domain/Limits.js"
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
/** Whether each offer was taken. */
const taken = (body: CommandStreamBody, frames: ReadonlyArray<string>) => frames.map((f) => body.offer(bytes(f)) !== undefined)

describe("a host's command stream body", () => {
  it("frames offered in one step go out as one chunk, in order; a later frame is a chunk of its own", async () => {
    const body = new CommandStreamBody({ commands: 16, heartbeatMs: 0 }, () => {})
    const chunks = chunksOf(body)
    await tick()
    expect(taken(body, ["a\n\n", "b\n\n", "c\n\n"])).toEqual([true, true, true])
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
    expect(taken(body, ["1\n\n", "2\n\n", "3\n\n", "4\n\n"])).toEqual([true, true, true, false])
    const chunks = chunksOf(body)
    await tick()
    expect(chunks.join("")).toBe("1\n\n2\n\n3\n\n")
    body.close()
    expect(gone).toBe(1)
    expect(body.offer(bytes("5\n\n"))).toBeUndefined()
  })

  it("a burst of more commands than the bound, offered while the socket takes what it is given, is taken whole and goes out as one chunk", async () => {
    const body = new CommandStreamBody({ commands: 3, heartbeatMs: 0 }, () => {})
    const chunks = chunksOf(body)
    await tick()
    const burst = Array.from({ length: 10 }, (_, i) => `${i}\n\n`)
    expect(taken(body, burst)).toEqual(burst.map(() => true))
    await tick()
    expect(chunks).toEqual([burst.join("")])
    body.close()
  })

  it("once the socket takes no more (its reader stopped), at most the bound waits and more is refused; what it took is delivered once the reader reads", async () => {
    const body = new CommandStreamBody({ commands: 3, heartbeatMs: 0 }, () => {})
    const chunks = chunksOf(body)
    await tick()
    body.pause()
    // Once a chunk is handed over, the stream wants no more until it is read.
    expect(taken(body, [`${"x".repeat(HOST_COMMAND_CHUNK_BYTES * 2)}\n\n`])).toEqual([true])
    await tick()
    expect(taken(body, ["1\n\n", "2\n\n", "3\n\n", "4\n\n"])).toEqual([true, true, true, false])
    body.resume()
    await tick()
    await tick()
    expect(chunks.join("").endsWith("1\n\n2\n\n3\n\n")).toBe(true)
    body.close()
  })

  it("a frame withdrawn while it waits is never written and frees its place in the bound; one already handed over cannot be withdrawn", async () => {
    const body = new CommandStreamBody({ commands: 2, heartbeatMs: 0 }, () => {})
    const a = body.offer(bytes("a\n\n"))!
    const b = body.offer(bytes("b\n\n"))!
    expect(body.offer(bytes("c\n\n"))).toBeUndefined()
    expect(b.withdraw()).toBe(true)
    expect(b.withdraw()).toBe(false)
    // Its place is free again.
    expect(body.offer(bytes("d\n\n"))).toBeDefined()
    const chunks = chunksOf(body)
    await tick()
    expect(chunks.join("")).toBe("a\n\nd\n\n")
    expect(a.withdraw()).toBe(false)
    body.close()
  })

  it(`a burst larger than HOST_COMMAND_CHUNK_BYTES (${HOST_COMMAND_CHUNK_BYTES}) to a reader that has stopped is handed over one chunk at a time: the frames not handed over can still be withdrawn, and are never written`, async () => {
    const body = new CommandStreamBody({ commands: 64, heartbeatMs: 0 }, () => {})
    const chunks = chunksOf(body)
    await tick()
    body.pause()
    const frame = (i: number) => `${String(i).padEnd(HOST_COMMAND_CHUNK_BYTES / 2 - 2, "x")}\n\n`
    const queued = Array.from({ length: 10 }, (_, i) => body.offer(bytes(frame(i)))!)
    await tick()
    // The first chunk (two frames) is handed over; the rest still waits in the backlog.
    expect(queued.map((q) => q.withdraw())).toEqual([false, false, true, true, true, true, true, true, true, true])
    body.resume()
    await tick()
    await tick()
    expect(chunks.join("")).toBe(frame(0) + frame(1))
    body.close()
  })

  it("a closed body writes nothing more: what still waits is dropped, and the stream ends", async () => {
    let gone = 0
    const body = new CommandStreamBody({ commands: 8, heartbeatMs: 0 }, () => void gone++)
    const waiting = body.offer(bytes("a\n\n"))!
    body.close()
    expect(gone).toBe(1)
    expect(waiting.withdraw()).toBe(false)
    const chunks = chunksOf(body)
    await new Promise((r) => body.once("end", r))
    expect(chunks).toEqual([])
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
