/**
 * Readers that hang up mid-read give back every descriptor the server opened for them, on a real
 * server process: hundreds of clients asking for a page of Events, or an SSE stream catching up,
 * and going away at once or a few milliseconds in (a client timeout, a user pressing Ctrl-C).
 * Afterwards the server holds no more descriptors on the session's segment files than before, and
 * about as many descriptors in all. (Before, each aborted read could keep its segment open for the
 * life of the process: 1 → 174 descriptors on one segment after 1,200 aborted reads, and at the
 * process's open-file limit every read answered 500 `journal_corrupt` and every create 500
 * `journal_write_failed`.)
 *
 * Counted from /proc/PID/fd of the server.
 */
import * as fs from "node:fs"
import * as net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"

/** Events of the session and the padding of each: a page is ~4 MB, read from the segment file (beyond the recent tail). */
const EVENTS = 40
const PAD = 100_000
/** Readers of each kind that go away. */
const READERS = 300
/** Readers started at once (each on its own connection). */
const WAVE = 30
/** Descriptors beyond the baseline a quiet server may hold a moment later (its log, a timer's, a late close). */
const SLACK = 8

const descriptors = (pid: number) => {
  let segments = 0
  const all = fs.readdirSync(`/proc/${pid}/fd`)
  for (const fd of all) {
    try {
      if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`).endsWith(".seg")) segments++
    } catch {
      // closed while listed
    }
  }
  return { all: all.length, segments }
}

/** Sends `head` on a new connection and hangs up after `afterMs` (0: as soon as it is written). */
const hangUp = (port: number, head: string, afterMs: number) =>
  new Promise<void>((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      socket.write(head)
      setTimeout(() => socket.destroy(), afterMs)
    })
    socket.on("data", () => {})
    socket.on("error", () => resolve())
    socket.on("close", () => resolve())
  })

describe("readers that hang up mid-read", () => {
  let server: ServerProcess
  let port: number
  let session: string
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_MAX_EMITTED_BYTES: "0" } })
    port = Number(new URL(server.baseUrl).port)
    const created = await request(server.baseUrl, "/v1/sessions", { json: { agentloop: "emitter", model: { provider: "scripted" } } })
    expect(created.status, created.text).toBe(201)
    session = created.body.session_id
    const turn = await request(server.baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: `${EVENTS} ${PAD}` } } })
    expect(turn.status, turn.text).toBe(200)
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  /** Runs `READERS` readers, `WAVE` at a time, each hanging up after a different delay; then the server's descriptors are back to `before`. */
  const abortAndCount = async (head: (i: number) => string) => {
    // One read to the end first, so that whatever the server keeps open for good (the write descriptor) is in the baseline.
    const page = await request(server.baseUrl, `/v1/sessions/${session}/events?after=0&limit=1000`)
    expect(page.status, page.text.slice(0, 300)).toBe(200)
    await sleep(200)
    const before = descriptors(server.pid)
    for (let i = 0; i < READERS; i += WAVE) {
      await Promise.all(Array.from({ length: WAVE }, (_, k) => hangUp(port, head(i + k), (i + k) % 25)))
    }
    const after = await eventually("the server's descriptors back to their baseline", async () => {
      const now = descriptors(server.pid)
      return now.segments <= before.segments && now.all <= before.all + SLACK ? now : undefined
    }, 15_000, 100).catch(() => descriptors(server.pid))
    expect(after.segments, `segment descriptors before ${before.segments}, after ${after.segments}`).toBeLessThanOrEqual(before.segments)
    expect(after.all, `descriptors before ${before.all}, after ${after.all}`).toBeLessThanOrEqual(before.all + SLACK)
    // And the journal reads whole.
    const again = await request(server.baseUrl, `/v1/sessions/${session}/events?after=0&limit=1000`)
    expect(again.status).toBe(200)
    expect(again.body.events.filter((e: { kind: string }) => e.kind === "tick")).toHaveLength(EVENTS)
  }

  it(`${READERS} page readers that hang up leave no segment descriptor open`, async () => {
    await abortAndCount((i) => `GET /v1/sessions/${session}/events?after=${i % 20}&limit=1000 HTTP/1.1\r\nhost: x\r\n\r\n`)
  }, 120_000)

  it(`${READERS} SSE readers that hang up during catch-up leave no segment descriptor open`, async () => {
    await abortAndCount((i) => `GET /v1/sessions/${session}/events?after=${i % 20} HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n`)
  }, 120_000)
})
