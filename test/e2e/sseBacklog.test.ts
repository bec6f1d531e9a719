/**
 * Per-session SSE backlog (seed "Reading Events": "Each session has its own live
 * backlog; unrelated traffic cannot make a subscriber lag"): a reader of one session that stops
 * reading is cut off once it falls SUBSCRIBER_BACKLOG_RECORDS (4,096) Events or
 * BRAIN_SSE_BACKLOG_BYTES (16 MiB) behind, told so by a `stream_lagged` control frame (no `id:`)
 * naming the cursor to resume after, while a reader of another session keeps receiving everything,
 * live.
 *
 * The stream is server → socket, so a reader that stops reading first fills the socket buffers
 * (several MiB on loopback) and the response's write buffer; only then does its backlog fill. The
 * stalled session's turn therefore emits many large Events (BACKLOG_EVENTS × BACKLOG_PAD bytes),
 * far more than the buffers hold plus the backlog.
 *
 * Under a small heap (256 MiB), a stalled reader of a session whose Events carry 1 MiB each is cut
 * off by bytes long before it could hold enough to exhaust the heap: the server keeps serving.
 *
 * The stalled readers here read again only after the flood, long after they were cut off, to see
 * the `stream_lagged` frame: their servers keep a cut-off stream's connection open until it
 * drains (BRAIN_SSE_CLOSE_GRACE_MS=0; by default it is closed after 5 s, sseStall.test.ts).
 *
 * No claim here is a wall-clock bound: on a 2-core machine shared with other suites (load 20-30)
 * the server and this process each get a fraction of a core. "Live" is said by order instead: the
 * other reader has each of its turns while the flood is still running, so it waited neither for the
 * flood nor for the stalled reader. Every wait is for a condition, with a deadline (WAIT_MS) that
 * only guards against a hang.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import { ensureBuilt, request, type ServerProcess, sleep, startServer } from "../support/server.js"
import { openSse } from "../support/sse.js"

/** Events the stalled session's turn emits, and the padding of each (bytes). */
const BACKLOG_EVENTS = Number(process.env.BRAIN_TEST_BACKLOG_EVENTS ?? 8_000)
const BACKLOG_PAD = Number(process.env.BRAIN_TEST_BACKLOG_PAD ?? 3_000)
/** Events per turn of the session whose reader keeps up, and how many such turns run meanwhile. */
const OTHER_EVENTS = 200
const OTHER_TURNS = 3
/**
 * Milliseconds any one wait here may take before the test gives up on it (the flood's send among
 * them), and each test: hang guards, not timing claims. Alone each test takes under 20 s; at load
 * 20-30 the small-heap one has taken past 160 s, a resumed reader alone past 60 s of it, and at
 * load 35-40 the first test's flood took its send past 300 s and the small-heap test 390 s.
 */
const WAIT_MS = 600_000
const TEST_MS = 900_000

describe("per-session SSE backlog", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_MAX_EMITTED_BYTES: "0", BRAIN_SSE_CLOSE_GRACE_MS: "0" } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  // A flood's send answers when its turn has ended: at load 30-40, past fetch's own 300 s.
  const post = (p: string, json: unknown) => request(server.baseUrl, p, { json, answerDeadlineMs: WAIT_MS })
  const allEvents = async (id: string, after = 0) => {
    const events: Array<any> = []
    let cursor = after
    for (;;) {
      const r = await request(server.baseUrl, `/v1/sessions/${id}/events?after=${cursor}`)
      expect(r.status).toBe(200)
      if (r.body.events.length === 0) return events
      events.push(...r.body.events)
      cursor = r.body.next_cursor
    }
  }

  it("a stalled reader of one session is cut off past the backlog and resumes by cursor; a reader of another session keeps receiving every Event", async () => {
    const stalledId = (await post("/v1/sessions", { agentloop: "emitter", model: { provider: "scripted" } })).body.session_id
    const otherId = (await post("/v1/sessions", { agentloop: "emitter", model: { provider: "scripted" } })).body.session_id

    // The stalled reader: takes the catch-up, then stops reading.
    const stalled = await openSse(server.url(`/v1/sessions/${stalledId}/events?after=0`))
    await stalled.until("the stalled reader's catch-up", () => stalled.frames.length >= 2, WAIT_MS)
    stalled.pause()
    const other = await openSse(server.url(`/v1/sessions/${otherId}/events?after=0`))
    await other.until("the other reader's catch-up", () => other.frames.length >= 2, WAIT_MS)

    // The flood, in the background.
    let floodEnded = false
    const flood = post(`/v1/sessions/${stalledId}/messages`, { input: { message: `${BACKLOG_EVENTS} ${BACKLOG_PAD}` } })
    void flood.finally(() => (floodEnded = true)).catch(() => undefined)

    // Meanwhile the other session's turns reach its reader live, whole: each turn's end reaches it
    // while the flood still runs, so it waited for neither the flood nor the stalled reader.
    for (let turn = 1; turn <= OTHER_TURNS; turn++) {
      const r = await post(`/v1/sessions/${otherId}/messages`, { input: { message: String(OTHER_EVENTS) } })
      expect(r.status, r.text).toBe(200)
      let floodEndedFirst = false
      await other.until(`the other session's turn ${turn} on its stream`, () => {
        const arrived = other.frames.filter((f) => f.event === "turn_ended").length === turn
        if (arrived) floodEndedFirst = floodEnded
        return arrived
      }, WAIT_MS)
      expect(floodEndedFirst, `the other reader had turn ${turn} only after the flood ended: it lagged, or the flood is too short (raise BRAIN_TEST_BACKLOG_EVENTS)`).toBe(false)
      expect(other.ended, "the other reader was cut off").toBeUndefined()
    }

    const flooded = await flood
    expect(flooded.status, flooded.text).toBe(200)
    expect(flooded.body.turn.result).toEqual({ emitted: BACKLOG_EVENTS })

    const otherEvents = await allEvents(otherId)
    expect(other.frames.map((f) => f.json)).toEqual(otherEvents)
    expect(other.frames.filter((f) => f.event === "tick").length).toBe(OTHER_EVENTS * OTHER_TURNS)
    expect(other.ended).toBeUndefined()
    other.close()

    // The stalled reader, read again: what it was sent is a gap-free prefix, then the server ended
    // the stream (it was cut off: the session has not ended).
    const stalledEvents = await allEvents(stalledId)
    const total = stalledEvents.length
    stalled.resume()
    // Cut off, it ends once drained; not cut off, it would take every Event and stay open.
    await stalled.until("the stalled stream's end, or every Event", () => stalled.ended !== undefined || stalled.sequences.length >= total, WAIT_MS)
    expect(stalled.ended, `the stalled reader was not cut off (${stalled.frames.length} of ${total} Events delivered)`).toBe("end")
    const delivered = stalled.sequences
    expect(delivered.length).toBeLessThan(total)
    expect(delivered).toEqual(stalledEvents.slice(0, delivered.length).map((e) => e.sequence))
    expect(stalled.frames.map((f) => f.event)).not.toContain("session_ended")
    expect((await request(server.baseUrl, `/v1/sessions/${stalledId}`)).body.status).toBe("idle")
    // The last frame says why: stream_lagged, with no id, and a cursor no Event was skipped before.
    const lagged = stalled.frames.at(-1)!
    expect(lagged.event).toBe("stream_lagged")
    expect(lagged.id).toBeUndefined()
    expect(stalled.controls).toEqual([lagged])
    expect(lagged.json.after).toBeGreaterThanOrEqual(delivered.at(-1)!)
    expect(stalledEvents.filter((e) => e.sequence > delivered.at(-1)! && e.sequence <= lagged.json.after)).toEqual([])
    expect(lagged.json.message).toMatch(/behind/)

    // It resumes by cursor: the rest, without gaps or duplicates.
    const last = delivered.at(-1)!
    const resumed = await openSse(server.url(`/v1/sessions/${stalledId}/events`), { "last-event-id": String(last) })
    await resumed.until("the rest of the stalled session's Events", () => resumed.frames.some((f) => f.event === "turn_ended"), WAIT_MS)
    expect([...delivered, ...resumed.sequences]).toEqual(stalledEvents.map((e) => e.sequence))
    resumed.close()
  }, TEST_MS)
})

/** Resident memory of a process, in bytes (Linux). */
const rssOf = (pid: number) => {
  const kb = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]
  return kb === undefined ? 0 : Number(kb) * 1024 // a process that has exited has none
}

/** Events of the flood under a small heap, each padded with HEAP_PAD bytes: far more than the heap. */
const HEAP_EVENTS = 384
const HEAP_PAD = 1024 * 1024
const HEAP_MIB = 256

describe("SSE backlog bounded in bytes, under a small heap", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({
      // The flood (384 MiB of Events in one turn) passes the turn's bounds on its Events and its writes on purpose.
      env: { BRAIN_MAX_EMITTED_BYTES: "0", BRAIN_MAX_TURN_WRITE_BYTES: "0", BRAIN_SSE_CLOSE_GRACE_MS: "0" },
      nodeArgs: [`--max-old-space-size=${HEAP_MIB}`]
    })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it(`a stalled reader of a session whose turn emits ${HEAP_EVENTS} Events of 1 MiB is cut off by bytes with stream_lagged; the server (${HEAP_MIB} MiB heap) keeps serving with bounded memory, and the reader resumes by cursor`, async () => {
    const post = (p: string, json: unknown) => request(server.baseUrl, p, { json, answerDeadlineMs: WAIT_MS })
    const id = (await post("/v1/sessions", { agentloop: "emitter", model: { provider: "scripted" } })).body.session_id
    const stalled = await openSse(server.url(`/v1/sessions/${id}/events?after=0`))
    await stalled.until("the stalled reader's catch-up", () => stalled.frames.length >= 2, WAIT_MS)
    stalled.pause()

    let peak = rssOf(server.pid)
    let sampling = true
    const sampler = (async () => {
      while (sampling && server.exited === undefined) {
        peak = Math.max(peak, rssOf(server.pid))
        await sleep(50)
      }
    })()
    const flood = post(`/v1/sessions/${id}/messages`, { input: { message: `${HEAP_EVENTS} ${HEAP_PAD}` } })
    // The server keeps answering meanwhile.
    const other = (await post("/v1/sessions", { model: { provider: "scripted" } })).body.session_id
    for (let i = 0; i < 3; i++) {
      const r = await post(`/v1/sessions/${other}/messages`, { input: { message: "still there?" } })
      expect(r.status, r.text).toBe(200)
    }
    const flooded = await flood.catch((err: Error) => ({ status: 0, text: `${err.message}\n${server.output.slice(-2000)}`, body: undefined }))
    sampling = false
    await sampler
    expect(flooded.status, flooded.text.slice(0, 2000)).toBe(200)
    expect(flooded.body.turn.result).toEqual({ emitted: HEAP_EVENTS })
    expect(server.exited).toBeUndefined()
    expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
    // What the stalled reader was sent and the backlog the server held stay far below the flood.
    // About 215 MiB measured with the 16 MiB backlog; about 580 MiB with the byte bound lifted.
    expect(peak, `peak RSS ${Math.round(peak / 2 ** 20)} MiB`).toBeLessThan(400 * 2 ** 20)

    stalled.resume()
    // Cut off, it ends once drained; not cut off, it would take the whole flood and stay open.
    await stalled.until("the stalled stream's end, or the whole flood", () => stalled.ended !== undefined || stalled.frames.some((f) => f.event === "turn_ended"), WAIT_MS)
    expect(stalled.ended, `the stalled reader was not cut off (${stalled.frames.length} frames)`).toBe("end")
    const lagged = stalled.frames.at(-1)!
    expect(lagged.event).toBe("stream_lagged")
    expect(lagged.id).toBeUndefined()
    const delivered = stalled.sequences
    expect(delivered.length).toBeLessThan(HEAP_EVENTS)
    expect(lagged.json.after).toBeGreaterThanOrEqual(delivered.at(-1)!)

    // It resumes after the cursor it was given: the rest, in order, without gaps or duplicates.
    const resumed = await openSse(server.url(`/v1/sessions/${id}/events?after=${lagged.json.after}`))
    await resumed.until("the rest of the flood", () => resumed.frames.some((f) => f.event === "turn_ended"), WAIT_MS)
    resumed.close()
    const ticks = [...stalled.frames, ...resumed.frames].filter((f) => f.event === "tick").map((f) => f.json.data.i)
    expect(ticks).toEqual(Array.from({ length: HEAP_EVENTS }, (_, i) => i))
  }, TEST_MS)
})
