/**
 * A keyed send or submit keeps its `Idempotency-Key` in its session's journal, in a real server
 * process: the claim shares the append of the turn's `turn_started`, a send's answer is its
 * turn's closing append, and the server-wide idempotency log is not written at all. Retries
 * replay the first answer byte for byte, before and after a restart (from a checkpoint plus the
 * journal's tail), and a key past retention is free again.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { framesOf } from "../support/frames.js"
import { ensureBuilt, eventually, request, ServerProcess, sleep } from "../support/server.js"

const SCRIPTED = { model: { provider: "scripted" } }

/** The kinds of a session's journal records, in order, read from its segment files. */
const journalKinds = (dataDir: string, session: string): Array<string> => {
  const dir = path.join(dataDir, "sessions", session)
  const files: Array<string> = []
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (p.includes(`${path.sep}journal${path.sep}`)) files.push(p)
    }
  }
  walk(dir)
  return files.sort().flatMap((f) => framesOf(fs.readFileSync(f)).sort((a, b) => a.sequence - b.sequence).map((fr) => fr.kind))
}

/** Sends `message` to the session, under `key` when given, with more headers when given (wherever the server listens now). */
const sender = (server: ServerProcess, id: string) => (message: string, key?: string, headers: Record<string, string> = {}) =>
  request(server.baseUrl, `/v1/sessions/${id}/messages`, {
    json: { input: { message } },
    headers: { ...(key ? { "idempotency-key": key } : {}), ...headers }
  })

describe("idempotency keys in the session's journal", () => {
  const servers: Array<ServerProcess> = []
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    for (const s of servers) await s.dispose()
  })

  it("a keyed send and submit write nothing to the idempotency log; their retries replay the first bytes, also after a restart from a checkpoint; another body is 409 conflict", async () => {
    const s = await new ServerProcess().start()
    servers.push(s)
    const created = await request(s.baseUrl, "/v1/sessions", { json: SCRIPTED })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const log = path.join(s.dataDir, "idempotency", "claims.log")
    const logSize = () => fs.statSync(log).size
    const before = logSize()
    const send = sender(s, id)

    const sent = await send("hello", "send-1")
    expect(sent.status, sent.text).toBe(200)
    expect(sent.body.turn.status).toBe("ended")
    const submitted = await send("later", "submit-1", { prefer: "respond-async" })
    expect(submitted.status, submitted.text).toBe(202)
    await eventually("the submitted turn's end", async () => (await request(s.baseUrl, `/v1/sessions/${id}`)).body.status === "idle" || undefined)
    expect(logSize()).toBe(before)

    // The claims are in the journal, with their turns; the send's answer with its close.
    const kinds = journalKinds(s.dataDir, id)
    expect(kinds.filter((k) => k === "request_claimed").length).toBe(2)
    expect(kinds.filter((k) => k === "request_answered").length).toBe(1)
    const claimAt = kinds.indexOf("request_claimed")
    expect(kinds.slice(claimAt - 2, claimAt + 1)).toEqual(["turn_started", "activation_started", "request_claimed"])
    expect(kinds[kinds.indexOf("request_answered") - 1]).toBe("turn_ended")
    // Private: no Event shows them.
    const events = (await request(s.baseUrl, `/v1/sessions/${id}/events?limit=1000`)).body.events as Array<{ kind: string }>
    expect(events.some((e) => e.kind.startsWith("request_"))).toBe(false)

    const replays = async () => {
      const again = await send("hello", "send-1")
      expect([again.status, again.text]).toEqual([200, sent.text])
      const again2 = await send("later", "submit-1", { prefer: "respond-async" })
      expect([again2.status, again2.text]).toEqual([202, submitted.text])
      expect(again2.headers.get("preference-applied")).toBe("respond-async")
      const other = await send("not hello", "send-1")
      expect([other.status, other.body.code]).toEqual([409, "conflict"])
      // The same key in the other mode is another request.
      const crossed = await send("hello", "send-1", { prefer: "respond-async" })
      expect(crossed.status, crossed.text).toBe(202)
      await eventually("the crossed turn's end", async () => (await request(s.baseUrl, `/v1/sessions/${id}`)).body.status === "idle" || undefined)
    }
    await replays()

    // Enough unkeyed turns for a checkpoint (one per 256 records), so the restart folds from it.
    for (let i = 0; i < 40; i++) expect((await send(`filler ${i}`)).status).toBe(200)
    await s.stop()
    expect(fs.existsSync(path.join(s.dataDir, "sessions", id, "checkpoint"))).toBe(true)
    await s.start()
    const again = await send("hello", "send-1")
    expect([again.status, again.text]).toEqual([200, sent.text])
    const again2 = await send("later", "submit-1", { prefer: "respond-async" })
    expect([again2.status, again2.text]).toEqual([202, submitted.text])
    expect((await send("not hello", "send-1")).status).toBe(409)
    const turns = (await request(s.baseUrl, `/v1/sessions/${id}/events?limit=1000`)).body.events.filter((e: { kind: string }) => e.kind === "turn_started")
    expect(turns.length).toBe(3 + 40)
    expect(logSize()).toBe(before)
  }, 60_000)

  it("a deleted session's send and submit keys outlive it (DESIGN §7): retries replay the first bytes, also after a restart; another body is 409 conflict; a new key is 404", async () => {
    const s = await new ServerProcess().start()
    servers.push(s)
    const replies = [{ text: "hi" }, { fail: { code: "scripted_failure", message: "as scripted" } }, { text: "later" }]
    const created = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies } } })
    const id = created.body.session_id as string
    const send = sender(s, id)
    const sent = await send("hello", "send-1")
    expect(sent.status, sent.text).toBe(200)
    // A failed turn's outcome is kept as well: the second reply fails the model call.
    const failing = await send("fail", "send-2")
    expect([failing.status, failing.body.turn?.status], failing.text).toEqual([200, "failed"])
    const submitted = await send("later", "submit-1", { prefer: "respond-async" })
    expect(submitted.status, submitted.text).toBe(202)
    await eventually("the submitted turn's end", async () => (await request(s.baseUrl, `/v1/sessions/${id}`)).body.status === "idle" || undefined)
    expect((await request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
    const deleted = await request(s.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })
    expect(deleted.status, deleted.text).toBe(204)
    expect((await request(s.baseUrl, `/v1/sessions/${id}`)).status).toBe(404)

    const replays = async () => {
      const again = await send("hello", "send-1")
      expect([again.status, again.text]).toEqual([200, sent.text])
      const againFailing = await send("fail", "send-2")
      expect([againFailing.status, againFailing.text]).toEqual([failing.status, failing.text])
      const again2 = await send("later", "submit-1", { prefer: "respond-async" })
      expect([again2.status, again2.text]).toEqual([202, submitted.text])
      expect(again2.headers.get("preference-applied")).toBe("respond-async")
      const other = await send("not hello", "send-1")
      expect([other.status, other.body.code]).toEqual([409, "conflict"])
      const fresh = await send("hello", "send-new")
      expect([fresh.status, fresh.body.code]).toEqual([404, "not_found"])
    }
    await replays()
    await s.restart()
    await replays()
  }, 60_000)

  it("a retry of an answered keyed send or submit to a warm session that has since ended replays the first bytes, never 409 session_ended, and the delete keeps that answer", async () => {
    const s = await new ServerProcess().start()
    servers.push(s)
    // idle_ttl_ms keeps the ended session in memory, as a retry soon after its end finds it.
    const created = await request(s.baseUrl, "/v1/sessions", { json: { ...SCRIPTED, idle_ttl_ms: 60_000 } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const send = sender(s, id)
    const sent = await send("hello", "send-1")
    expect(sent.status, sent.text).toBe(200)
    const submitted = await send("later", "submit-1", { prefer: "respond-async" })
    expect(submitted.status, submitted.text).toBe(202)
    await eventually("the submitted turn to end", async () => ((await request(s.baseUrl, `/v1/sessions/${id}`)).body.status === "idle" ? true : undefined))
    expect((await request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)

    for (const round of ["ended", "deleted"]) {
      const again = await send("hello", "send-1")
      expect([round, again.status, again.text]).toEqual([round, 200, sent.text])
      const resubmitted = await send("later", "submit-1", { prefer: "respond-async" })
      expect([round, resubmitted.status, resubmitted.text]).toEqual([round, 202, submitted.text])
      if (round === "ended") expect((await request(s.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })).status).toBe(204)
    }
  })

  it("a keyed send cut by kill -9 is never run again, however long after: past BRAIN_REQUEST_RETENTION_SECS its retry is still 409 ambiguous, while an answered key is free", async () => {
    const s = await new ServerProcess({ env: { BRAIN_REQUEST_RETENTION_SECS: "1" } }).start()
    servers.push(s)
    const replies = [{ text: "first" }, { delay_ms: 60_000, text: "never" }, { text: "again" }]
    const created = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies } } })
    const id = created.body.session_id as string
    const send = sender(s, id)
    const answered = await send("hello", "answered")
    expect(answered.status, answered.text).toBe(200)
    const cut = send("slow", "cut").then((r) => r, (e: unknown) => e)
    // Killed once its model call is durably started (an Event is served once it is committed), so
    // the key is in the journal: "running" alone can be seen before the turn's first commit lands,
    // and a send killed before it was never started and may rightly run on its retry.
    await eventually("the keyed turn's model call to be started", async () => {
      const page = await request(s.baseUrl, `/v1/sessions/${id}/events?limit=1000`)
      return page.body.events.filter((e: { kind: string }) => e.kind === "model_call_started").length === 2 || undefined
    })
    await s.kill()
    expect(await cut).toBeInstanceOf(Error)
    await s.start()
    await sleep(1_500)
    for (let i = 0; i < 2; i++) {
      const retried = await send("slow", "cut")
      expect(retried.status, retried.text).toBe(409)
      expect(retried.body).toMatchObject({ code: "ambiguous", details: { ambiguous: true, in_flight: false } })
    }
    // The answered key has lived its retention: the same send runs again.
    const rerun = await send("hello", "answered")
    expect(rerun.status, rerun.text).toBe(200)
    expect(rerun.body.turn.sequence).toBeGreaterThan(answered.body.turn.sequence)
    // And after another restart, past the retention again, the cut send is still refused.
    await s.restart()
    await sleep(1_100)
    expect((await send("slow", "cut")).status).toBe(409)
    const turns = (await request(s.baseUrl, `/v1/sessions/${id}/events?limit=1000`)).body.events.filter((e: { kind: string }) => e.kind === "turn_started")
    expect(turns.length).toBe(3)
  }, 120_000)

  it("a key past BRAIN_REQUEST_RETENTION_SECS is free: the same send runs again as a new turn", async () => {
    const s = await new ServerProcess({ env: { BRAIN_REQUEST_RETENTION_SECS: "1" } }).start()
    servers.push(s)
    const created = await request(s.baseUrl, "/v1/sessions", { json: SCRIPTED })
    const id = created.body.session_id as string
    const send = () => request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "again" } }, headers: { "idempotency-key": "k" } })
    const first = await send()
    expect(first.status, first.text).toBe(200)
    expect((await send()).text).toBe(first.text)
    await sleep(1_100)
    const later = await send()
    expect(later.status, later.text).toBe(200)
    expect(later.body.turn.sequence).toBeGreaterThan(first.body.turn.sequence)
    expect((await send()).text).toBe(later.text)
  }, 30_000)
})
