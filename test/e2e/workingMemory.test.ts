/**
 * The working-memory bound (BRAIN_WORKING_MEMORY_BYTES) in a real server process under a small
 * heap: many session opens (or turns) of large records at once used to take more heap than the
 * process has, and V8 killed it with every request in flight. Now each waits for its share in
 * order or is refused 503 `overloaded` (retryable, naming the setting), and the server stays up.
 * (The audit's probes, at a scale for CI: 128 MiB of old space, 2 MiB messages.)
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

const SESSIONS = 8
const MESSAGE_BYTES = 2 * 1024 * 1024

/** An answer's status, or how its connection failed. */
const outcome = (p: Promise<{ status: number; body: any }>) =>
  p.then(
    (r) => {
      if (r.status === 503) {
        expect(r.body?.code).toBe("overloaded")
        expect(r.body?.retryable).toBe(true)
        expect(r.body?.message).toContain("BRAIN_WORKING_MEMORY_BYTES")
      }
      return String(r.status)
    },
    (e) => `connection lost: ${String(e?.cause?.code ?? e)}`
  )

const tally = (outcomes: ReadonlyArray<string>) => {
  const t: Record<string, number> = {}
  for (const o of outcomes) t[o] = (t[o] ?? 0) + 1
  return t
}

describe("the working-memory bound under a small heap", () => {
  let server: ServerProcess
  const ids: Array<string> = []
  beforeAll(async () => {
    ensureBuilt()
    // Room for every turn's body at once (eight of 2 MiB), so that the working memory is what
    // holds the turns back: the default (a 32nd of the heap limit, 5.5 MiB) refuses most bodies
    // before they could wait for their shares (test/e2e/bodyHeap.test.ts).
    server = await startServer({ nodeArgs: ["--max-old-space-size=128"], env: { BRAIN_INFLIGHT_BODY_BYTES: String(SESSIONS * MESSAGE_BYTES + 64 * 1024) } })
    for (let i = 0; i < SESSIONS; i++) {
      const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
      expect(created.status, created.text.slice(0, 200)).toBe(201)
      ids.push(created.body.session_id)
      // The scripted model echoes it: each session's journal holds several copies of it.
      const sent = await request(server.baseUrl, `/v1/sessions/${ids[i]}/messages`, { json: { input: { message: "a".repeat(MESSAGE_BYTES) } } })
      expect(sent.status, sent.text.slice(0, 200)).toBe(200)
    }
    // Nothing of them in memory: every read below opens its session from disk.
    await server.restart()
  }, 180_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("concurrent opens of large sessions past the working-memory bound wait or are refused 503 overloaded, and the server stays up", async () => {
    const outcomes = await Promise.all(ids.map((id) => outcome(request(server.baseUrl, `/v1/sessions/${id}`))))
    expect(server.exited, server.output.slice(-2000)).toBeUndefined()
    expect(Object.keys(tally(outcomes)).every((o) => o === "200" || o === "503"), `${JSON.stringify(tally(outcomes))} ${server.output.slice(-1500)}`).toBe(true)
    expect(outcomes).toContain("200")
    expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
    // A refused open changed nothing: each session reads back, one at a time.
    for (const id of ids) {
      const summary = await request(server.baseUrl, `/v1/sessions/${id}`)
      expect(summary.status, summary.text.slice(0, 300)).toBe(200)
      expect(summary.body.status).toBe("idle")
    }
  }, 120_000)

  it("concurrent turns of large inputs past the working-memory bound wait or are refused 503 overloaded, and the server stays up", async () => {
    const outcomes = await Promise.all(ids.map((id) =>
      outcome(request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "b".repeat(MESSAGE_BYTES) } } }))
    ))
    expect(server.exited, server.output.slice(-2000)).toBeUndefined()
    expect(Object.keys(tally(outcomes)).every((o) => o === "200" || o === "503"), `${JSON.stringify(tally(outcomes))} ${server.output.slice(-1500)}`).toBe(true)
    expect(outcomes).toContain("200")
    expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
    // A refused turn wrote nothing: its session has one turn more only if it was answered 200.
    for (const [i, id] of ids.entries()) {
      const transcript = await request(server.baseUrl, `/v1/sessions/${id}/transcript`)
      expect(transcript.status).toBe(200)
      expect(transcript.body.messages.length).toBe(outcomes[i] === "200" ? 4 : 2)
    }
  }, 120_000)
})
