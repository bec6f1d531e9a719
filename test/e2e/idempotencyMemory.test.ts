/**
 * Keyed answers under memory pressure, in a real server process with a small heap
 * (`node --max-old-space-size=128`): keyed sync sends whose answers are megabytes each (the
 * scripted model echoes the message, so the answer is as big as the message), their sessions
 * then ended. A send's key and answer live in its session's journal, not in memory and not in
 * the idempotency log: the log stays empty, even answers above BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES
 * (the log's maximum) replay whole, the server keeps serving, and after a restart replays are
 * byte-identical. A deleted session hands its keys to the idempotency log, where they replay.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request as rawRequest, type RequestOptions, ServerProcess } from "../support/server.js"

/** Megabytes of V8 old space the server gets: the answers together are well above it. */
const HEAP_MB = 128
const MAX_ANSWER_BYTES = 4 * 1024 * 1024
/** Answers of about 3 MB each, under the idempotency log's maximum. */
const KEPT = 16
const KEPT_MESSAGE_BYTES = 3 * 1024 * 1024
/** Answers above the log's maximum (which a send's answer, kept in its journal, is not subject to). */
const NOT_KEPT = 2
const BIG_MESSAGE_BYTES = 5 * 1024 * 1024
/** Bytes: the idempotency log holds less than this (the sends wrote nothing to it). */
const RECORD_SLACK = 4096
/**
 * Milliseconds the test may take: a hang guard, not a timing claim. 18 multi-MB turns through the
 * Wasm loop and a restart take about 35 s alone on 2 cores; on one shared with other suites (load
 * 20-30) the server gets a fraction of a core and they have taken past 180 s.
 */
const TEST_MS = 900_000

const sha = (s: string) => crypto.createHash("sha256").update(s).digest("hex")

describe("idempotency under a small heap", () => {
  let server: ServerProcess | undefined
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("multi-MB keyed answers under a 128 MB heap: the server keeps serving, the idempotency log stays empty, answers above its maximum replay whole, a restart succeeds and replays are byte-identical; a deleted session's keys replay from the log", async () => {
    server = await new ServerProcess({
      nodeArgs: [`--max-old-space-size=${HEAP_MB}`],
      env: {
        BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES: String(MAX_ANSWER_BYTES),
        BRAIN_MAX_REQUEST_BYTES: String(16 * 1024 * 1024),
        // Messages of BIG_MESSAGE_BYTES, above the default 4 MiB (their echo still fits a loop's output).
        BRAIN_MAX_INPUT_BYTES: String(2 * BIG_MESSAGE_BYTES)
      }
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
    /** Answers above the log's maximum. */
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
    }
    expect(kept.size).toBe(KEPT)
    expect(notKept.size).toBe(NOT_KEPT)

    // Still serving, and nothing of the sends went to the idempotency log.
    expect((await request(s.baseUrl, "/health/ready")).status, s.output).toBe(204)
    expect(fs.statSync(log).size).toBeLessThan(RECORD_SLACK)

    // Above the log's maximum is not a limit of the journal: those answers replay whole too.
    for (const [key, k] of notKept) {
      const r = await send(k.id, k.message, key)
      expect(r.status, r.text.slice(0, 300)).toBe(200)
      expect(r.body.turn.result.text).toBe(k.message)
    }

    await s.stop()
    expect(s.exited?.code, s.output).toBe(0)
    await s.start()
    for (const [key, k] of kept) {
      const r = await send(k.id, k.message, key)
      expect(r.status, `${key}: ${r.text.slice(0, 300)}`).toBe(200)
      expect(sha(r.text), key).toBe(k.sha)
    }
    // A different body under a kept key is still a conflict after the restart.
    const [firstKey, first] = [...kept.entries()][0]!
    expect((await send(first.id, "other", firstKey)).status).toBe(409)
    // Deleted, a session hands its keys to the idempotency log (DESIGN §7: they outlive it): an
    // answer under the log's maximum replays whole from there, one above it as 409 ambiguous
    // saying the request completed with its status.
    expect((await request(s.baseUrl, `/v1/sessions/${first.id}`, { method: "DELETE" })).status).toBe(204)
    const afterDelete = await send(first.id, first.message, firstKey)
    expect(afterDelete.status, afterDelete.text.slice(0, 300)).toBe(200)
    expect(sha(afterDelete.text)).toBe(first.sha)
    expect(fs.statSync(log).size).toBeGreaterThan(KEPT_MESSAGE_BYTES)
    const [bigKey, big] = [...notKept.entries()][0]!
    expect((await request(s.baseUrl, `/v1/sessions/${big.id}`, { method: "DELETE" })).status).toBe(204)
    const bigAfterDelete = await send(big.id, big.message, bigKey)
    expect([bigAfterDelete.status, bigAfterDelete.body.code, bigAfterDelete.body.details?.status], bigAfterDelete.text.slice(0, 300))
      .toEqual([409, "ambiguous", 200])
    expect((await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } }, headers: { "idempotency-key": "after" } })).status).toBe(201)
  }, TEST_MS)
})
