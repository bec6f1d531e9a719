/**
 * The bound on live idempotency keys (BRAIN_MAX_IDEMPOTENCY_KEYS), in a real server process with a
 * bound of 3 and a retention of a few seconds: at the bound a request with a new key is 503
 * `overloaded` (retryable) and changes nothing — no session created or cancelled, nothing written
 * to the idempotency log, a delete that would hand keys over refused with its session kept — while
 * every key already held replays, requests without a key are served and keyed sends still run
 * (their keys live in their sessions' journals). Once the keys' retention has passed, new keys are
 * taken again.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type Reply, ServerProcess, sleep } from "../support/server.js"

const MAX_KEYS = 3
const RETENTION_SECS = 8

describe("idempotency: the bound on live keys", () => {
  let server: ServerProcess | undefined
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("at the bound a new key is 503 overloaded and changes nothing; held keys replay, keyless requests and keyed sends are served; after retention new keys are taken again", async () => {
    server = await new ServerProcess({
      // One session's share of the log is the whole log here, and deletes get no reserve past it:
      // this test is about the bound itself (the share and the reserve: test/contracts).
      env: {
        BRAIN_MAX_IDEMPOTENCY_KEYS: String(MAX_KEYS),
        BRAIN_MAX_SESSION_LOG_KEYS: String(MAX_KEYS),
        BRAIN_DELETE_RESERVE_KEYS: "0",
        BRAIN_REQUEST_RETENTION_SECS: String(RETENTION_SECS)
      }
    }).start()
    const s = server
    const model = { model: { provider: "scripted" } }
    const keyed = (key: string) => ({ "idempotency-key": key })
    const create = (key?: string) => request(s.baseUrl, "/v1/sessions", { json: model, headers: key === undefined ? {} : keyed(key) })
    const post = (p: string, key?: string, json?: unknown) =>
      request(s.baseUrl, p, { method: "POST", ...(json === undefined ? {} : { json }), headers: key === undefined ? {} : keyed(key) })
    const count = async () => (await request(s.baseUrl, "/v1/sessions?limit=100")).body.sessions.length as number
    const log = path.join(s.dataDir, "idempotency", "claims.log")
    const expectFull = (r: Reply) => {
      expect(r.status, r.text).toBe(503)
      expect(r.body).toMatchObject({ code: "overloaded", retryable: true })
      expect(r.body.message).toContain("BRAIN_MAX_IDEMPOTENCY_KEYS")
    }

    const a = (await create()).body.session_id as string
    const b = (await create()).body.session_id as string
    const cancel1 = await post(`/v1/sessions/${a}/cancel`, "cancel-1")
    expect(cancel1.status, cancel1.text).toBe(200)
    const cancel2 = await post(`/v1/sessions/${a}/cancel`, "cancel-2")
    expect(cancel2.status, cancel2.text).toBe(200)
    const created = await create("create-1")
    expect(created.status, created.text).toBe(201)
    const sessions = await count()
    expect(sessions).toBe(3)
    const logBytes = fs.statSync(log).size

    // Full: new keys are refused, on every route, and nothing is done or written.
    expectFull(await post(`/v1/sessions/${a}/cancel`, "cancel-3"))
    expectFull(await create("create-2"))
    expect(await count()).toBe(sessions)
    expect(fs.statSync(log).size).toBe(logBytes)
    // Keys held replay byte for byte.
    expect((await post(`/v1/sessions/${a}/cancel`, "cancel-1")).text).toBe(cancel1.text)
    const again = await create("create-1")
    expect([again.status, again.text]).toEqual([201, created.text])
    // A keyed send runs: its key lives in the session's journal, and replays from there.
    const sent = await post(`/v1/sessions/${a}/messages`, "send-1", { input: { message: "hi" } })
    expect(sent.status, sent.text).toBe(200)
    // Every key held was answered by now: their retention ends by this time plus RETENTION_SECS.
    const lastAnsweredMs = Date.now()
    expect((await post(`/v1/sessions/${a}/messages`, "send-1", { input: { message: "hi" } })).text).toBe(sent.text)
    // A keyed send refused before its turn started would have kept its refusal: it cannot, so it
    // is overloaded (nothing happened); without a key it is the refusal itself.
    expect((await post(`/v1/sessions/${b}/end`)).status).toBe(200)
    expectFull(await post(`/v1/sessions/${b}/messages`, "send-ended", { input: { message: "hi" } }))
    expect((await post(`/v1/sessions/${b}/messages`, undefined, { input: { message: "hi" } })).body.code).toBe("session_ended")
    // A delete that must hand a send's key over to the log is refused, and its session stays.
    expect((await post(`/v1/sessions/${a}/end`)).status).toBe(200)
    expectFull(await request(s.baseUrl, `/v1/sessions/${a}`, { method: "DELETE" }))
    expect((await request(s.baseUrl, `/v1/sessions/${a}`)).status).toBe(200)
    expect((await post(`/v1/sessions/${a}/messages`, "send-1", { input: { message: "hi" } })).text).toBe(sent.text)
    // Keyless requests are served.
    expect((await create()).status).toBe(201)
    expect(fs.statSync(log).size).toBe(logBytes)

    // Once the keys have lived their retention, new keys are taken again.
    const taken = await eventually("a new key taken after retention", async () => {
      const r = await create("create-2")
      if (r.status === 503) return undefined
      return r
    }, (RETENTION_SECS + 10) * 1000, 250)
    expect(taken.status, taken.text).toBe(201)
    // The first key to expire made room for it; once every earlier key has expired, the refusals
    // kept and the keys handed over need room too.
    await sleep(Math.max(0, lastAnsweredMs + RETENTION_SECS * 1000 + 100 - Date.now()))
    expect((await post(`/v1/sessions/${b}/messages`, "send-ended", { input: { message: "hi" } })).body.code).toBe("session_ended")
    const deleted = await request(s.baseUrl, `/v1/sessions/${a}`, { method: "DELETE" })
    expect(deleted.status, deleted.text).toBe(204)
  }, 60_000)

  it("one session's keyed cancels take at most its share of the log (503 naming BRAIN_MAX_SESSION_LOG_KEYS past it); another session's keyed create, cancel and keyed delete, with its sends' keys handed over, still succeed, also once other sessions have filled the log", async () => {
    await server?.dispose()
    server = await new ServerProcess({
      env: { BRAIN_MAX_IDEMPOTENCY_KEYS: "6", BRAIN_MAX_SESSION_LOG_KEYS: "3", BRAIN_DELETE_RESERVE_KEYS: "4" }
    }).start()
    const s = server
    const model = { model: { provider: "scripted" } }
    const headers = (key: string) => ({ "idempotency-key": key })
    const create = async () => (await request(s.baseUrl, "/v1/sessions", { json: model })).body.session_id as string
    const post = (p: string, key: string, json?: unknown) =>
      request(s.baseUrl, p, { method: "POST", ...(json === undefined ? {} : { json }), headers: headers(key) })

    const victim = await create()
    for (const k of ["v1", "v2"]) expect((await post(`/v1/sessions/${victim}/messages`, k, { input: { message: "hi" } })).status).toBe(200)
    // One session fills its share, and no more.
    const attacker = await create()
    for (let i = 0; i < 3; i++) expect((await post(`/v1/sessions/${attacker}/cancel`, `a${i}`)).status).toBe(200)
    for (let i = 3; i < 6; i++) {
      const r = await post(`/v1/sessions/${attacker}/cancel`, `a${i}`)
      expect(r.status, r.text).toBe(503)
      expect(r.body).toMatchObject({ code: "overloaded", retryable: true, details: { setting: "BRAIN_MAX_SESSION_LOG_KEYS", keys: 3, max_keys: 3 } })
    }
    // A keyed cancel of a made-up session keeps nothing: the log still has room for the others.
    const madeUp = await post(`/v1/sessions/ses_01m98hrntcf99pwj6h1b0sfdjw/cancel`, "m1")
    expect(madeUp.status, madeUp.text).toBe(404)
    // Others are served: a keyed create and a keyed cancel of another session (the log: 3 + 2 of 6).
    const created = await request(s.baseUrl, "/v1/sessions", { json: model, headers: headers("c1") })
    expect(created.status, created.text).toBe(201)
    expect((await post(`/v1/sessions/${victim}/cancel`, "vc1")).status).toBe(200)
    // A second session of the attacker's fills the log.
    const second = await create()
    expect((await post(`/v1/sessions/${second}/cancel`, "b0")).status).toBe(200)
    const full = await request(s.baseUrl, "/v1/sessions", { json: model, headers: headers("c2") })
    expect(full.status, full.text).toBe(503)
    expect(full.body.message).toContain("BRAIN_MAX_IDEMPOTENCY_KEYS")
    // The victim's keyed delete still succeeds, handing its two sends' keys over (the reserve: 3 of 4).
    expect((await post(`/v1/sessions/${victim}/end`, "ve1")).status).toBe(503)
    expect((await request(s.baseUrl, `/v1/sessions/${victim}/end`, { method: "POST" })).status).toBe(200)
    const deleted = await request(s.baseUrl, `/v1/sessions/${victim}`, { method: "DELETE", headers: headers("vd1") })
    expect(deleted.status, deleted.text).toBe(204)
    expect((await request(s.baseUrl, `/v1/sessions/${victim}`)).status).toBe(404)
    // Its keys still answer: the sends' from the log now, and the delete's.
    const replay = await post(`/v1/sessions/${victim}/messages`, "v1", { input: { message: "hi" } })
    expect(replay.status, replay.text).toBe(200)
    expect((await request(s.baseUrl, `/v1/sessions/${victim}`, { method: "DELETE", headers: headers("vd1") })).status).toBe(204)
  }, 60_000)
})
