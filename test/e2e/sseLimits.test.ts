/**
 * SSE subscribers are bounded per session (BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION) and per process
 * (BRAIN_SSE_MAX_SUBSCRIBERS): one more stream is refused before the 200 with 503 `overloaded`,
 * retryable, in a message naming the setting; a stream that closes — the client going away, or
 * the stream ending after `session_ended` — gives its slot back. Pages are not subscribers.
 * A server stop ends every stream with a retryable `stream_error` frame.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type ServerProcess, startServer } from "../support/server.js"
import { openSse, type SseClient } from "../support/sse.js"

const PER_SESSION = 2
const PER_PROCESS = 3

describe("SSE subscriber limits", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({
      env: {
        BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION: String(PER_SESSION),
        BRAIN_SSE_MAX_SUBSCRIBERS: String(PER_PROCESS),
        BRAIN_SSE_HEARTBEAT_MS: "100"
      }
    })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  const created = async () =>
    (await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id as string
  const stream = (id: string) => openSse(server.url(`/v1/sessions/${id}/events?after=0`), {}, true)
  const expectRefused = async (sse: SseClient, setting: string) => {
    expect(sse.status, sse.raw).toBe(503)
    await sse.done
    const body = JSON.parse(sse.raw)
    expect(body).toMatchObject({ code: "overloaded", retryable: true })
    expect(body.message).toContain(setting)
  }
  /** Opens a stream once a slot is free again (the server sees a client go away a moment later). */
  const openWhenFree = (id: string) =>
    eventually(`a free slot on ${id}`, async () => {
      const sse = await stream(id)
      if (sse.status === 200) return sse
      sse.close()
      return undefined
    }, 5_000, 50)

  it("beyond the per-session and per-process limits a stream is refused 503 overloaded naming the setting; closing a stream or the session's end frees its slot; pages are not limited", async () => {
    const a = await created()
    const b = await created()
    const c = await created()
    const a1 = await stream(a)
    const a2 = await stream(a)
    expect([a1.status, a2.status]).toEqual([200, 200])
    await expectRefused(await stream(a), "BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION")

    const b1 = await stream(b)
    expect(b1.status).toBe(200)
    await expectRefused(await stream(c), "BRAIN_SSE_MAX_SUBSCRIBERS")
    await expectRefused(await stream(b), "BRAIN_SSE_MAX_SUBSCRIBERS")
    // Pages do not take a slot.
    expect((await request(server.baseUrl, `/v1/sessions/${c}/events?after=0`)).status).toBe(200)
    // The refused did not take one either: the open streams still get their heartbeats.
    await a1.until("a heartbeat", () => a1.comments.includes("heartbeat"), 3_000)

    // A client that goes away frees its slot.
    a1.close()
    const a3 = await openWhenFree(a)
    await expectRefused(await stream(c), "BRAIN_SSE_MAX_SUBSCRIBERS")

    // A stream that ends after session_ended frees its slot.
    const ended = await request(server.baseUrl, `/v1/sessions/${b}/end`, { method: "POST" })
    expect(ended.status, ended.text).toBe(200)
    await b1.done
    expect(b1.frames.at(-1)?.event).toBe("session_ended")
    const c1 = await openWhenFree(c)

    for (const s of [a2, a3, c1]) s.close()
    const again = await Promise.all([openWhenFree(a), openWhenFree(a), openWhenFree(c)])
    for (const s of again) s.close()
  })

  it("a server stop ends every open stream with a stream_error frame (overloaded, retryable, no id) after what it had sent", async () => {
    const id = await created()
    const sse = await openWhenFree(id)
    await sse.until("the catch-up", () => sse.sequences.length >= 2)
    await server.stop()
    await sse.done
    expect(sse.ended).toBe("end")
    const last = sse.frames.at(-1)!
    expect(last.event).toBe("stream_error")
    expect(last.id).toBeUndefined()
    expect(last.json).toMatchObject({ code: "overloaded", retryable: true })
    expect(sse.sequences).toEqual([1, 2])
  })
})
