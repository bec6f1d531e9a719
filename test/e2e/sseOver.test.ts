/**
 * The events stream of a session that is over, against a real server process (docs/api.md,
 * "Events"): a reader whose cursor is at the session's last record has nothing more to receive,
 * and is answered 204 with no body, which the WHATWG EventSource algorithm takes as "stop"; a 200
 * that ends at once would make it reconnect every few seconds for ever. A reader with Events still
 * to receive gets them and then the stream ends, and the paging form answers an empty page.
 */
import { EventSource } from "undici"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type ServerProcess, startServer } from "../support/server.js"
import { openSse } from "../support/sse.js"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess
beforeAll(async () => {
  server = await startServer()
}, 60_000)
afterAll(async () => {
  await server?.dispose()
})

const stream = (p: string, headers: Record<string, string> = {}) =>
  fetch(server.url(p), { headers: { accept: "text/event-stream", ...headers } })

/** A session that ran one turn and ended; its Events. */
const endedSession = async () => {
  const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies: [{ text: "hi" }] } } })
  expect(created.status, created.text).toBe(201)
  const id: string = created.body.session_id
  expect((await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "a" } } })).status).toBe(200)
  expect((await request(server.baseUrl, `/v1/sessions/${id}/end`, { json: {} })).status).toBe(200)
  const events: Array<{ sequence: number; kind: string }> = (await request(server.baseUrl, `/v1/sessions/${id}/events?after=0`)).body.events
  expect(events.at(-1)?.kind).toBe("session_ended")
  return { id, events, last: events.at(-1)!.sequence }
}

describe("the events stream of a session that is over", () => {
  it("a stream request whose cursor (after, or Last-Event-ID) is at an ended session's final Event is answered 204 with no body; one before it gets the rest and then ends; the page form answers an empty page", async () => {
    const { events, id, last } = await endedSession()
    for (const [what, p, headers] of [
      ["Last-Event-ID at the final Event (an EventSource's reconnect)", `/v1/sessions/${id}/events?after=0`, { "last-event-id": String(last) }],
      ["after at the final Event", `/v1/sessions/${id}/events?after=${last}`, {}]
    ] as const) {
      const r = await stream(p, headers)
      expect(r.status, what).toBe(204)
      expect(await r.text(), what).toBe("")
    }

    // One Event short of the end: the final Event, then the stream ends.
    const rest = await openSse(server.url(`/v1/sessions/${id}/events?after=0`), { "last-event-id": String(events.at(-2)!.sequence) })
    await rest.done
    expect(rest.status).toBe(200)
    expect(rest.ended).toBe("end")
    expect(rest.frames.map((f) => f.event)).toEqual(["session_ended"])

    // The page form is unchanged: a JSON page, empty at the end.
    const page = await request(server.baseUrl, `/v1/sessions/${id}/events?after=${last}`)
    expect(page.status, page.text).toBe(200)
    expect(page.body.events).toEqual([])

    // A cursor past the end is still refused.
    const past = await stream(`/v1/sessions/${id}/events?after=${last + 1}`)
    expect(past.status).toBe(400)
  })

  it("a stream of a live session at its last Event is still a 200 stream that stays open", async () => {
    const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    const id: string = created.body.session_id
    const { last_sequence } = (await request(server.baseUrl, `/v1/sessions/${id}`)).body
    const live = await openSse(server.url(`/v1/sessions/${id}/events?after=${last_sequence}`), {}, true)
    expect(live.status).toBe(200)
    expect(live.ended).toBeUndefined()
    live.close()
  })

  it("an EventSource following a session through its end stops once it has session_ended (readyState CLOSED), instead of reconnecting for ever", async () => {
    const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies: [{ text: "hi" }] } } })
    const id: string = created.body.session_id
    const source = new EventSource(server.url(`/v1/sessions/${id}/events?after=0`))
    try {
      const seen: Array<string> = []
      let closedOnError = false
      source.addEventListener("session_ended", (e) => seen.push((e as MessageEvent).lastEventId))
      source.onerror = () => {
        if (source.readyState === EventSource.CLOSED) closedOnError = true
      }
      await eventually("the stream to open", async () => (source.readyState === EventSource.OPEN ? true : undefined))
      expect((await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "a" } } })).status).toBe(200)
      expect((await request(server.baseUrl, `/v1/sessions/${id}/end`, { json: {} })).status).toBe(200)
      await eventually("session_ended to arrive", async () => (seen.length > 0 ? true : undefined))
      // The stream ends after session_ended; the EventSource reconnects once with that id, is
      // answered 204, and stops for good.
      await eventually("the EventSource to stop", async () => (closedOnError ? true : undefined), 30_000)
      expect(seen).toHaveLength(1)
      expect(source.readyState).toBe(EventSource.CLOSED)
    } finally {
      source.close()
    }
  }, 60_000)
})
