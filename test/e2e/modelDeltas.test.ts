/**
 * Live model deltas (seed "Reading Events": "Model token deltas are live-only and have no journal
 * sequence; reconnecting yields the completed committed model result"), against a real server:
 * a subscriber sees `model_delta` frames, without `id:`, between the call's `model_call_started`
 * and `model_call_ended` while a slow streamed call runs; they join to the recorded text; a page
 * read afterwards and a stream that reconnects have none; the journal has one `model_call_ended`
 * with the full text.
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer } from "../support/server.js"
import { openSse } from "../support/sse.js"

const TEXT = "one two three four five six seven eight nine ten eleven twelve"

describe("live model deltas", () => {
  const server = sharedServer()

  it("reach a live subscriber during a slow streamed call, in order, after the call's start and before its end, and are never recorded", async () => {
    // The scripted model streams its reply word by word over 600 ms.
    const created = await request(server().baseUrl, "/v1/sessions", {
      json: { model: { provider: "scripted", replies: [{ text: TEXT, delay_ms: 600 }] } }
    })
    const id = created.body.session_id
    const live = await openSse(server().url(`/v1/sessions/${id}/events?after=0`))
    await live.until("the catch-up", () => live.frames.some((f) => f.event === "session_creation_ended"))
    const sent = await request(server().baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    expect(sent.status).toBe(200)
    await live.until("the turn's end", () => live.frames.some((f) => f.event === "turn_ended"))
    live.close()

    const names = live.frames.map((f) => f.event)
    const started = names.indexOf("model_call_started")
    const ended = names.indexOf("model_call_ended")
    const deltas = live.frames.filter((f) => f.event === "model_delta")
    expect(deltas.length).toBe(TEXT.split(" ").length)
    for (const d of deltas) {
      const at = live.frames.indexOf(d)
      expect(at).toBeGreaterThan(started)
      expect(at).toBeLessThan(ended)
      expect(d.id).toBeUndefined()
      expect(d.json).toMatchObject({ session_id: id, model_call: Number(live.frames[started]!.id), type: "text" })
    }
    expect(deltas.map((d) => d.json.text).join("")).toBe(TEXT)
    expect(live.frames[ended]!.json.data.result.text).toBe(TEXT)

    // History has the committed result only: no delta in a page, none when a reader comes back.
    const page = await request(server().baseUrl, `/v1/sessions/${id}/events?after=0`)
    expect(page.body.events.map((e: any) => e.kind)).not.toContain("model_delta")
    expect(page.body.events.filter((e: any) => e.kind === "model_call_ended")).toHaveLength(1)
    const again = await openSse(server().url(`/v1/sessions/${id}/events?after=0`))
    await again.until("the catch-up", () => again.frames.some((f) => f.event === "turn_ended"))
    again.close()
    expect(again.frames.filter((f) => f.event === "model_delta")).toHaveLength(0)
  }, 60_000)
})
