/**
 * The idempotency store under memory pressure, in a real server process with a small heap
 * (`node --max-old-space-size=128`): keyed sync sends whose answers are megabytes each (the
 * scripted model echoes the message, so the answer is as big as the message), their sessions
 * then ended and deleted. Kept answers live in the log, not in memory; an answer above
 * BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES is recorded as not kept. The server keeps serving, its log
 * holds what the maximum allows, a restart reads the log back, and replays are byte-identical.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request as rawRequest, type RequestOptions, ServerProcess } from "../support/server.js"

/** Megabytes of V8 old space the server gets: the kept answers together are well above it. */
const HEAP_MB = 128
const MAX_ANSWER_BYTES = 4 * 1024 * 1024
/** Kept answers: about 3 MB each, under the maximum. */
const KEPT = 16
const KEPT_MESSAGE_BYTES = 3 * 1024 * 1024
/** Answers above the maximum: recorded as not kept. */
const NOT_KEPT = 2
const BIG_MESSAGE_BYTES = 5 * 1024 * 1024
/** Bytes a claim, a bounded answer and a record's framing take at most in the log (generous). */
const RECORD_SLACK = 4096

const sha = (s: string) => crypto.createHash("sha256").update(s).digest("hex")

describe("idempotency under a small heap", () => {
  let server: ServerProcess | undefined
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("multi-MB keyed answers under a 128 MB heap: the server keeps serving, the log holds only what the answer maximum allows, a restart succeeds and replays are byte-identical", async () => {
    server = await new ServerProcess({
      nodeArgs: [`--max-old-space-size=${HEAP_MB}`],
      env: { BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES: String(MAX_ANSWER_BYTES), BRAIN_MAX_REQUEST_BYTES: String(16 * 1024 * 1024) }
    }).start()
    const s = server
    // A server that died of its heap shows why, instead of a bare "fetch failed".
    const request = (baseUrl: string, p: string, options?: RequestOptions) =>
      rawRequest(baseUrl, p, options).catch(async (err: Error) => {
        const exited = await s.waitExit(2_000).catch(() => undefined)
        throw new Error(`${p}: ${err.message}; server exited: ${JSON.stringify(exited)}\n${s.stderr.slice(-1500)}`)
      })
    const log = path.join(s.dataDir, "idempotency", "claims.log")
    const kept = new Map<string, { readonly id: string; readonly message: string; readonly sha: string; readonly bytes: number }>()
    const notKept = new Map<string, { readonly id: string; readonly message: string }>()

    const send = (id: string, message: string, key: string) =>
      request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message } }, headers: { "idempotency-key": key } })

    for (let i = 0; i < KEPT + NOT_KEPT; i++) {
      const big = i % 9 === 8
      const created = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
      expect(created.status, `${created.status} ${created.text}\n${s.output}`).toBe(201)
      const id = created.body.session_id as string
      const key = `send-${i}`
      const message = `${i}:`.padEnd(big ? BIG_MESSAGE_BYTES : KEPT_MESSAGE_BYTES, "m")
      const first = await send(id, message, key)
      expect(first.status, `${first.status} ${first.text.slice(0, 300)}\n${s.output}`).toBe(200)
      // The first response is always the full answer.
      expect(first.body.turn.result.text).toBe(message)
      if (big) {
        expect(first.text.length).toBeGreaterThan(MAX_ANSWER_BYTES)
        notKept.set(key, { id, message })
      } else {
        kept.set(key, { id, message, sha: sha(first.text), bytes: first.text.length })
        if (i % 4 === 0) {
          // Read back from the log by this process too, not only after the restart.
          const again = await send(id, message, key)
          expect(again.status).toBe(200)
          expect(sha(again.text)).toBe(sha(first.text))
        }
      }
      expect((await request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
      expect((await request(s.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })).status).toBe(204)
    }
    expect(kept.size).toBe(KEPT)
    expect(notKept.size).toBe(NOT_KEPT)

    // Still serving, and the log holds the kept answers plus small records only.
    expect((await request(s.baseUrl, "/health/ready")).status, s.output).toBe(204)
    const keptBytes = [...kept.values()].reduce((n, k) => n + k.bytes, 0)
    const size = fs.statSync(log).size
    expect(size).toBeGreaterThan(keptBytes)
    expect(size).toBeLessThan(keptBytes + (KEPT + NOT_KEPT) * RECORD_SLACK)

    const expectNotKept = async (key: string) => {
      const { id, message } = notKept.get(key)!
      const r = await send(id, message, key)
      expect(r.status, r.text).toBe(409)
      expect(r.body).toMatchObject({ code: "ambiguous", retryable: false, details: { ambiguous: false, status: 200 } })
      expect(r.body.details.answer_bytes).toBeGreaterThan(MAX_ANSWER_BYTES)
      return r.text
    }
    const notKeptBefore = await Promise.all([...notKept.keys()].map(expectNotKept))

    await s.stop()
    expect(s.exited?.code, s.output).toBe(0)
    await s.start()
    for (const [key, k] of kept) {
      const r = await send(k.id, k.message, key)
      expect(r.status, `${key}: ${r.text.slice(0, 300)}`).toBe(200)
      expect(sha(r.text), key).toBe(k.sha)
    }
    expect(await Promise.all([...notKept.keys()].map(expectNotKept))).toEqual(notKeptBefore)
    // A different body under a kept key is still a conflict after the restart.
    const [firstKey, first] = [...kept.entries()][0]!
    expect((await send(first.id, "other", firstKey)).status).toBe(409)
    expect((await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } }, headers: { "idempotency-key": "after" } })).status).toBe(201)
  }, 180_000) // 18 multi-MB turns through the Wasm loop and a restart: about 35 s alone on 2 cores, more beside the suite
})
