/**
 * The Events iterator across a server restart (seed "Reading Events"): a live reader whose server
 * is killed (SIGKILL) and started again on the same address and data directory reopens its stream
 * after its cursor and goes on, yielding every Event once: no duplicate, no gap, in order.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Brain, type Event } from "../../src/sdk/index.js"
import { ensureBuilt, ServerProcess } from "../support/server.js"
import { freePort, history, RecordingFetch, takeUntil } from "./support.js"

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
})
