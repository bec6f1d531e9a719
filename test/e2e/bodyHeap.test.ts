/**
 * The in-flight body bound (BRAIN_INFLIGHT_BODY_BYTES) unset, in a real server process under a
 * small heap (`--max-old-space-size=128`): a burst of legal requests, each under the default
 * BRAIN_MAX_INPUT_BYTES, used to kill the process with a V8 heap OOM (the operator audit's
 * finding: twelve 4 MiB sends, or twelve creates with 4 MiB opening transcripts, at once). The
 * bodies admitted waited for their working-memory share parsed, beside the turn running alone,
 * and the default allowance let more of them in than the heap holds. Each request now either
 * succeeds or is refused 503 `overloaded`, the server stays up, and what was acknowledged reads
 * back whole. Half the messages end with a character beyond Latin-1, so that V8 holds them at two
 * bytes a character: the costlier case (a 4 MiB turn of one took up to 106 MiB of a 128 MiB heap).
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

const BURST = 12
/** Just under the default BRAIN_MAX_INPUT_BYTES (4 MiB) with the JSON around it. */
const MESSAGE_BYTES = 4 * 1024 * 1024 - 100
/** A create's opening transcript: 16 messages of 256 KiB, 4 MiB in all. */
const OPENING_MESSAGES = 16
const OPENING_MESSAGE_BYTES = 256 * 1024 - 40

/** An answer, or how its connection failed. */
interface Outcome {
  readonly kind: string
  readonly body?: any
}

const outcome = (p: Promise<{ status: number; body: any }>): Promise<Outcome> =>
  p.then(
    (r) => ({ kind: r.status === 503 ? `503 ${r.body?.code} retryable=${r.body?.retryable}` : String(r.status), body: r.body }),
    (e) => ({ kind: `connection lost: ${String(e?.cause?.code ?? e)}` })
  )

const tally = (outcomes: ReadonlyArray<Outcome>) => {
  const t: Record<string, number> = {}
  for (const o of outcomes) t[o.kind] = (t[o.kind] ?? 0) + 1
  return t
}

/** `node --max-old-space-size=128 bin/brain.js serve` with the defaults (no disk watermark: this is about memory). */
const smallHeapServer = () => {
  const server: { current?: ServerProcess } = {}
  beforeAll(async () => {
    ensureBuilt()
    server.current = await startServer({
      entry: "product",
      nodeArgs: ["--max-old-space-size=128"],
      env: { BRAIN_MIN_FREE_DISK_BYTES: "0" }
    })
  }, 120_000)
  afterAll(async () => {
    await server.current?.dispose()
  })
  return server
}

/** Message i: 4 MiB of one letter; the odd ones end with a character beyond Latin-1. */
const message = (i: number) => String.fromCharCode(97 + i).repeat(MESSAGE_BYTES - 3) + (i % 2 === 1 ? "漢" : "zzz")

describe("concurrent large sends under a small heap, with the defaults", () => {
  const held = smallHeapServer()

  it("twelve concurrent 4 MiB sends each end or get 503 overloaded, the server stays up, and every ended turn's message reads back", async () => {
    const server = held.current!
    const ids: Array<string> = []
    for (let i = 0; i < BURST; i++) {
      const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
      expect(created.status, created.text.slice(0, 200)).toBe(201)
      ids.push(created.body.session_id)
    }
    const outcomes = await Promise.all(ids.map((id, i) =>
      outcome(request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: message(i) } } }))
    ))
    const seen = `${JSON.stringify(tally(outcomes))} ${server.output.slice(-1500)}`
    expect(server.exited, seen).toBeUndefined()
    expect(outcomes.every((o) => o.kind === "200" || o.kind === "503 overloaded retryable=true"), seen).toBe(true)
    expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
    for (let i = 0; i < BURST; i++) {
      const t = await request(server.baseUrl, `/v1/sessions/${ids[i]}/transcript`)
      expect(t.status).toBe(200)
      if (outcomes[i]!.kind === "200") {
        expect(outcomes[i]!.body.turn.status).toBe("ended")
        expect(t.body.messages[0].content === message(i), `session ${i}'s acknowledged message`).toBe(true)
      } else {
        expect(t.body.messages).toEqual([])
      }
    }
  }, 300_000)
})

describe("concurrent large creates under a small heap, with the defaults", () => {
  const held = smallHeapServer()

  it("twelve concurrent creates with 4 MiB opening transcripts each answer 201 or 503 overloaded, the server stays up, and every created session reads back whole", async () => {
    const transcript = (i: number) =>
      Array.from({ length: OPENING_MESSAGES }, (_, k) => ({
        role: k % 2 === 0 ? "user" : "assistant",
        content: String.fromCharCode(97 + ((i + k) % 26)).repeat(OPENING_MESSAGE_BYTES - 3) + (i % 2 === 1 ? "漢" : "zzz")
      }))
    const server = held.current!
    const outcomes = await Promise.all(Array.from({ length: BURST }, (_, i) =>
      outcome(request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" }, transcript: transcript(i) } }))
    ))
    const seen = `${JSON.stringify(tally(outcomes))} ${server.output.slice(-1500)}`
    expect(server.exited, seen).toBeUndefined()
    expect(outcomes.every((o) => o.kind === "201" || o.kind === "503 overloaded retryable=true"), seen).toBe(true)
    expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
    for (let i = 0; i < BURST; i++) {
      if (outcomes[i]!.kind !== "201") continue
      const t = await request(server.baseUrl, `/v1/sessions/${outcomes[i]!.body.session_id}/transcript`)
      expect(t.status).toBe(200)
      expect(t.body.messages.length).toBe(OPENING_MESSAGES)
      expect(t.body.messages.every((m: { content: string }, k: number) => m.content === transcript(i)[k]!.content)).toBe(true)
    }
  }, 300_000)
})
