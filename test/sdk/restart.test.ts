/**
 * The client across a server restart: a live Events reader whose server is killed (SIGKILL) and
 * started again on the same address and data directory reopens its stream after its cursor and
 * goes on, yielding every Event once: no duplicate, no gap, in order (seed "Reading Events"). A
 * host tool's call cut off by the kill is recorded `unknown` and never run or answered again,
 * while the client's host reconnects by itself and runs new calls.
 */
import { Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Brain, type Event, tool, type ToolContext } from "../../src/sdk/index.js"
import { ensureBuilt, ServerProcess } from "../support/server.js"
import { MAX_ATTEMPTS } from "../../src/sdk/BrainClient.js"
import { freePort, gate, history, HostFetch, RecordingFetch, takeUntil } from "./support.js"

describe("the Events iterator across a server restart", () => {
  let server: ServerProcess
  let baseUrl: string
  beforeAll(async () => {
    ensureBuilt()
    const port = await freePort()
    baseUrl = `http://127.0.0.1:${port}`
    server = await new ServerProcess({ env: { BRAIN_LISTEN: `127.0.0.1:${port}` } }).start()
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("resumes after kill -9 and a start on the same data directory without duplicates or gaps", async () => {
    const writer = new Brain({ baseUrl })
    const recording = new RecordingFetch()
    const reader = new Brain({ baseUrl, fetch: recording.fetch })
    const session = await writer.sessions.create({ agentloop: "emitter", model: { provider: "scripted" } })
    await session.send("2")

    const live = (await reader.sessions.get(session.id)).events(0)
    const read: Array<Event> = await takeUntil(live, (e) => e.kind === "turn_ended")
    const pending = live.next() // waits on the live stream
    await recording.streams(1)

    await server.kill()
    await server.start()
    expect(server.baseUrl).toBe(baseUrl)
    const after = await writer.sessions.get(session.id)
    await after.send("3")

    read.push((await pending).value as Event)
    read.push(...await takeUntil(live, (e) => e.kind === "turn_ended"))
    await live.return()
    await reader.close()
    await writer.close()

    expect(recording.streamsOpened).toBeGreaterThanOrEqual(2)
    const sequences = read.map((e) => e.sequence)
    expect(new Set(sequences).size).toBe(sequences.length)
    expect(sequences).toEqual([...sequences].sort((a, b) => a - b))
    expect(read).toEqual(await history(new Brain({ baseUrl }), session.id))
    expect(read.filter((e) => e.kind === "turn_ended")).toHaveLength(2)
    expect(read.filter((e) => e.kind === "tick")).toHaveLength(5)
  })

  it("an Events reader whose catch-up meets a server that is down keeps trying past the client's own attempts and, once it is back, yields every Event once", async () => {
    const writer = new Brain({ baseUrl })
    const session = await writer.sessions.create({ agentloop: "emitter", model: { provider: "scripted" } })
    await session.send("3")
    const expected = await history(writer, session.id)
    await writer.close()

    const recording = new RecordingFetch()
    const reader = new Brain({ baseUrl, fetch: recording.fetch })
    const handle = await reader.sessions.get(session.id)
    await server.kill()
    const live = handle.events(0)
    let settled = false
    const read = takeUntil(live, (e) => e.kind === "turn_ended").finally(() => (settled = true))
    // Down for more than the client's own attempts at a request (MAX_ATTEMPTS) and then some (a
    // reader that gives up before then fails the test with its error).
    const pageAsks = () => recording.sent.filter((s) => new URL(s.url).pathname.endsWith("/events")).length
    while (pageAsks() < MAX_ATTEMPTS + 2 && !settled) await new Promise((r) => setTimeout(r, 50))
    await server.start()

    const events = await read
    await live.return()
    await reader.close()
    expect(events).toEqual(expected.slice(0, events.length))
    expect(events.at(-1)?.kind).toBe("turn_ended")
    expect(events.filter((e) => e.kind === "tick")).toHaveLength(3)
  })

  it("a host tool's call in flight at kill -9 is unknown after the restart; the host reconnects by itself and the call is never run or answered again", async () => {
    const recording = new HostFetch()
    const client = new Brain({ baseUrl, fetch: recording.fetch })
    const started = gate<ToolContext>()
    const release = gate()
    const runs: Array<number> = []
    const slow = tool({
      name: "slow",
      input: Schema.Struct({}),
      run: async (_, ctx) => {
        runs.push(ctx.sequence)
        if (runs.length === 1) {
          started.open(ctx)
          await release.promise
        }
        return "answered"
      }
    })
    try {
      const session = await client.sessions.create({
        // The kill ends the first turn after its first model call, so the second turn's first reply is the second.
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "slow", input: {} }] }, { tool_calls: [{ name: "slow", input: {} }] }, { text: "after" }] },
        tools: [slow]
      })
      const first = session.send("go").catch((e) => e) // its answer dies with the server
      const ctx = await started.promise
      await server.kill()
      await server.start()
      await first
      expect(ctx.signal.reason).toMatchObject({ reason: "connection_lost" })
      release.open()
      await recording.streams(2)

      const failed = (await history(client, session.id)).filter((e) => e.kind === "tool_call_failed")
      expect(failed.map((e) => e.data)).toEqual([expect.objectContaining({ sequence: ctx.sequence, outcome: "unknown" })])
      const second = await session.send("again")
      expect(second.turn.status).toBe("ended")
      const ended = (await history(client, session.id)).filter((e) => e.kind === "tool_call_ended")
      expect(ended.map((e) => e.data)).toEqual([expect.objectContaining({ outcome: "ok", output: "answered" })])
      expect(runs).toHaveLength(2)
      expect(runs[1]).toBeGreaterThan(runs[0]!)
      expect(recording.resultsFor(session.id, ctx.sequence), "the lost call was never answered").toEqual([])
    } finally {
      await client.close()
    }
  })
})
