/**
 * The bound on the idempotency keys one session holds (BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS), over
 * HTTP in a real server process with a bound of 3 and a retention of a few seconds: at the bound a
 * keyed send or submit with a new key is 503 `overloaded` (retryable, details naming the setting
 * and the session's count) and nothing is journaled or kept — the session's last sequence and
 * Events stay as they were, the idempotency log gains nothing. Keys the session holds still
 * replay, sends without a key and other sessions' keys are served. A restart finds the same keys;
 * once they have expired, new keys are taken again.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type Reply, ServerProcess } from "../support/server.js"

const MAX_KEYS = 3
// Long enough that a restart on a loaded machine (seconds) ends well inside it: the checks after
// the restart need the keys still held. The test then waits this long for them to expire.
const RETENTION_SECS = 30

describe("idempotency: the bound on a session's keys", () => {
  let server: ServerProcess | undefined
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("at the bound a keyed send or submit with a new key is 503 overloaded and journals nothing, across a restart; held keys replay, keyless sends and other sessions are served; expired keys make room", async () => {
    server = await new ServerProcess({
      env: { BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS: String(MAX_KEYS), BRAIN_REQUEST_RETENTION_SECS: String(RETENTION_SECS) }
    }).start()
    const s = server
    const create = async () => {
      const r = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
      expect(r.status, r.text).toBe(201)
      return r.body.session_id as string
    }
    const send = (id: string, message: string, key?: string, async = false) =>
      request(s.baseUrl, `/v1/sessions/${id}/messages`, {
        json: { input: { message } },
        headers: { ...(key === undefined ? {} : { "idempotency-key": key }), ...(async ? { prefer: "respond-async" } : {}) }
      })
    /** What the session's journal shows: its summary (`last_sequence` counts every record) and its Events. */
    const journalOf = async (id: string) => {
      const summary = await request(s.baseUrl, `/v1/sessions/${id}`)
      const events = await request(s.baseUrl, `/v1/sessions/${id}/events?after=0&limit=1000`)
      return { summary: summary.body, events: events.text }
    }
    const log = path.join(s.dataDir, "idempotency", "claims.log")
    const logBytes = () => (fs.existsSync(log) ? fs.statSync(log).size : 0)
    const expectFull = (r: Reply) => {
      expect(r.status, r.text).toBe(503)
      expect(r.body).toMatchObject({
        code: "overloaded",
        retryable: true,
        details: { setting: "BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS", keys: MAX_KEYS, max_keys: MAX_KEYS }
      })
      expect(r.body.message).toContain("BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS")
    }

    const a = await create()
    const sent1 = await send(a, "one", "k1")
    expect(sent1.status, sent1.text).toBe(200)
    expect((await send(a, "two", "k2")).status).toBe(200)
    const submitted = await send(a, "three", "k3", true)
    expect(submitted.status, submitted.text).toBe(202)
    await eventually("the submitted turn's end", async () => ((await journalOf(a)).summary.status === "idle" ? true : undefined))
    const before = await journalOf(a)
    const logBefore = logBytes()

    const refusedNothingDone = async () => {
      expectFull(await send(a, "four", "k4"))
      expectFull(await send(a, "four", "k4", true))
      // Refused again on retry: the 503 kept nothing under the key.
      expectFull(await send(a, "four", "k4"))
      expect(await journalOf(a)).toEqual(before)
      expect(logBytes()).toBe(logBefore)
      // Keys held replay byte for byte.
      const again = await send(a, "one", "k1")
      expect([again.status, again.text]).toEqual([200, sent1.text])
      const resubmitted = await send(a, "three", "k3", true)
      expect([resubmitted.status, resubmitted.text]).toEqual([202, submitted.text])
      expect((await send(a, "other body", "k1")).body.code).toBe("conflict")
      expect(await journalOf(a)).toEqual(before)
    }
    await refusedNothingDone()

    // The session's keys are what its journal holds: a restart finds the same ones.
    await s.restart()
    await refusedNothingDone()

    // A send without a key runs, and another session has its own bound.
    const keyless = await send(a, "five")
    expect(keyless.status, keyless.text).toBe(200)
    const b = await create()
    expect((await send(b, "four", "k4")).status).toBe(200)

    // Once the session's keys have expired (and the prune's slack has passed), new keys are taken.
    const taken = await eventually("a new key taken after retention", async () => {
      const r = await send(a, "four", "k4")
      return r.status === 503 ? undefined : r
    }, (RETENTION_SECS + 10) * 1000, 250)
    expect(taken.status, taken.text).toBe(200)
    expect((await send(a, "five", "k5")).status).toBe(200)
    expect((await send(a, "six", "k6")).status).toBe(200)
    expectFull(await send(a, "seven", "k7"))
  }, 150_000)
})
