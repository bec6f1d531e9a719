/**
 * SSE never hides a failure: what can be refused is refused before the 200
 * with the same error the page route gives — a corrupt journal (500 journal_corrupt with file and
 * offset), a cursor past the session's last sequence (400 invalid_request with details
 * {last_sequence}) — and a failure after the 200 ends the stream with a `stream_error` control
 * frame (no `id:`, so Last-Event-ID stays at the last recorded Event) instead of a clean end that
 * a reconnecting client would repeat for ever.
 *
 * The journals are damaged by flipping one byte of a committed frame's payload on disk, with the
 * session open in the server: reads from the file see it (the newest records are served from
 * memory, so the damaged frames are far from the end).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { framesOf } from "../support/frames.js"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"
import { openSse } from "../support/sse.js"

describe("SSE failures are told, not hidden", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_MAX_EMITTED_BYTES: "0" } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  const post = (p: string, json: unknown) => request(server.baseUrl, p, { json })
  const emitting = async (ticks: number) => {
    const id = (await post("/v1/sessions", { agentloop: "emitter", model: { provider: "scripted" } })).body.session_id
    const r = await post(`/v1/sessions/${id}/messages`, { input: { message: String(ticks) } })
    expect(r.status, r.text).toBe(200)
    return id as string
  }
  /**
   * Flips a byte in the JSON payload of the committed frame holding `sequence`; answers its file
   * (relative to the data directory, as errors name it) and offset.
   */
  const corrupt = (id: string, sequence: number) => {
    const dir = path.join(server.dataDir, "sessions", id, "journal")
    for (const name of fs.readdirSync(dir).sort()) {
      const file = path.join(dir, name)
      const buf = fs.readFileSync(file)
      const frame = framesOf(buf).find((f) => f.sequence === sequence)
      if (!frame) continue
      const at = frame.end - 3 // inside the payload's JSON, before its closing brace
      buf[at] = buf[at]! ^ 0x20
      fs.writeFileSync(file, buf)
      return { file: path.relative(server.dataDir, file), offset: frame.start }
    }
    throw new Error(`no frame ${sequence} in ${dir}`)
  }

  it("a journal corrupt before the stream starts: SSE is refused 500 journal_corrupt naming file and offset, like the page route, not a 200 that ends at once", async () => {
    const id = await emitting(300)
    const damaged = corrupt(id, 10)
    const page = await request(server.baseUrl, `/v1/sessions/${id}/events?after=0`)
    expect(page.status, page.text).toBe(500)
    expect(page.body.code).toBe("journal_corrupt")
    expect(page.body.message).toContain(damaged.file)
    expect(page.body.message).toContain(`offset ${damaged.offset}`)
    expect(page.body.details).toEqual({ file: damaged.file, offset: damaged.offset, reason: "frame body checksum mismatch" })

    const sse = await openSse(server.url(`/v1/sessions/${id}/events?after=0`), {}, true)
    expect(sse.status, sse.raw).toBe(500)
    await sse.done
    expect(JSON.parse(sse.raw)).toEqual(page.body)
  })

  it("a journal corrupt past the first catch-up page: the stream sends every Event before the damage, then a stream_error frame without id (code, message with file and offset, retryable, details {file, offset, reason}), then ends; reconnecting from there is refused 500, not looped", async () => {
    const id = await emitting(1_500)
    const damaged = corrupt(id, 1_200)
    const sse = await openSse(server.url(`/v1/sessions/${id}/events?after=0`), {}, true)
    expect(sse.status).toBe(200)
    await sse.done
    expect(sse.ended).toBe("end")
    const last = sse.frames.at(-1)!
    expect(last.event).toBe("stream_error")
    expect(last.id).toBeUndefined()
    expect(sse.controls).toEqual([last])
    expect(last.json).toEqual({
      code: "journal_corrupt",
      message: expect.stringContaining(damaged.file),
      retryable: false,
      details: { file: damaged.file, offset: damaged.offset, reason: "frame body checksum mismatch" }
    })
    expect(last.json.message).toContain(`offset ${damaged.offset}`)
    expect(sse.raw).toMatch(/\n\nevent: stream_error\ndata: \{[^\n]*\}\n\n$/)
    // Every Event before the damaged page came, in order, without gaps.
    const delivered = sse.sequences
    expect(delivered[0]).toBe(1)
    expect(delivered.at(-1)!).toBeLessThan(1_200)
    const firstPage = (await request(server.baseUrl, `/v1/sessions/${id}/events?after=0`)).body.events.map((e: any) => e.sequence)
    expect(delivered.slice(0, firstPage.length)).toEqual(firstPage)
    expect(new Set(delivered).size).toBe(delivered.length)

    // What an EventSource does next: reconnect with the last id it saw. The damage is in its way: 500.
    const again = await openSse(server.url(`/v1/sessions/${id}/events?after=0`), { "last-event-id": String(delivered.at(-1)) }, true)
    expect(again.status, again.raw).toBe(500)
    await again.done
    expect(JSON.parse(again.raw).code).toBe("journal_corrupt")
  })

  it("a cursor beyond the session's last sequence is refused 400 invalid_request with details {last_sequence}, on pages (after) and on SSE (after or Last-Event-ID), before any 200; the last sequence itself is a valid cursor", async () => {
    const id = await emitting(3)
    const last = (await request(server.baseUrl, `/v1/sessions/${id}`)).body.last_sequence as number
    expect(last).toBeGreaterThan(3)

    const beyond = await request(server.baseUrl, `/v1/sessions/${id}/events?after=${last + 1}`)
    expect(beyond.status, beyond.text).toBe(400)
    expect(beyond.body).toEqual({
      code: "invalid_request",
      message: expect.stringContaining(String(last)),
      retryable: false,
      details: { last_sequence: last }
    })
    const atEnd = await request(server.baseUrl, `/v1/sessions/${id}/events?after=${last}`)
    expect(atEnd.status).toBe(200)
    expect(atEnd.body).toEqual({ events: [], next_cursor: last })

    for (const [query, headers] of [
      [`?after=${last + 5}`, {}],
      ["", { "last-event-id": String(last + 1) }],
      ["?after=0", { "last-event-id": String(10 ** 12) }]
    ] as const) {
      const sse = await openSse(server.url(`/v1/sessions/${id}/events${query}`), headers, true)
      expect(sse.status, `${query} ${JSON.stringify(headers)}`).toBe(400)
      await sse.done
      expect(JSON.parse(sse.raw)).toEqual({
        code: "invalid_request",
        message: expect.stringContaining(String(last)),
        retryable: false,
        details: { last_sequence: last }
      })
    }

    // At the last sequence: a live stream, which the next turn reaches.
    const live = await openSse(server.url(`/v1/sessions/${id}/events`), { "last-event-id": String(last) })
    expect(live.status).toBe(200)
    expect((await post(`/v1/sessions/${id}/messages`, { input: { message: "1" } })).status).toBe(200)
    await live.until("the next turn", () => live.frames.some((f) => f.event === "turn_ended"))
    expect(live.sequences[0]).toBe(last + 1)
    live.close()
  })
})
