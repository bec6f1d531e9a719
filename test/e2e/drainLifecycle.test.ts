/**
 * What a graceful stop does with the lifecycle requests it has taken (seed, Lifecycle: SIGTERM
 * "stops admitting work and drains admitted operations"; docs/operations.md, "Stopping"):
 * - an `end` or a `delete` in flight is drained as a turn is: its Environment's detach or
 *   teardown finishes and the caller is answered; past BRAIN_DRAIN_DEADLINE_MS the step in flight
 *   is abandoned and recorded `interrupted` (ambiguous: it was sent), never `connection_lost` (Brain
 *   closed it, not the Environment's network), and the caller is still answered;
 * - a create the server took just before the stop is either drained (answered as any create) or,
 *   when it reaches the sessions only after the stop began, answered 503 `overloaded` having done
 *   nothing: no session is journaled and nothing is sent to its Environment after "admitting no
 *   new work".
 * Against a real server process, SIGTERM, and the fake http Environment (a node:http server,
 * test/fixtures/httpEnvironment.mjs) delaying or hanging its lifecycle steps.
 */
import * as fs from "node:fs"
import * as http from "node:http"
import * as path from "node:path"
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { type FakeProcess, startFake } from "../support/httpEnvironment.js"
import { ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"

/** Milliseconds a slow step takes: longer than a stop lets answers still in flight be written once its drain is over (2 s). */
const SLOW_STEP_MS = 3_000
/**
 * The hanging Environment's lifecycle timeout: far beyond the test and the harness's wait for an
 * exit (a hang guard), so a stop that waited for it, not for the drain deadline, fails the wait.
 */
const LIFECYCLE_TIMEOUT_MS = 120_000
/** What the server logs when it stops admitting work. */
const STOPPING = "admitting no new work"


beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
let fake: FakeProcess | undefined
afterEach(async () => {
  await server?.dispose()
  fake?.child.kill()
  server = undefined
  fake = undefined
})

const createBody = { model: { provider: "scripted" }, environments: [{ name: "sandbox", driver: "http", binding: "box" }] }

const serverFor = (f: FakeProcess, env: Record<string, string> = {}) =>
  startServer({
    env: {
      BRAIN_ENVIRONMENTS: JSON.stringify({ box: { driver: "http", base_url: f.url, lifecycle_timeout_ms: LIFECYCLE_TIMEOUT_MS } }),
      ...env
    }
  })

const eventsOf = async (s: ServerProcess, id: string) =>
  (await request(s.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; data: any }>

/** The requests the fake received (not its `closed` events), by path. */
const sent = (f: FakeProcess) => f.log().filter((l) => l.event === undefined).map((l) => l.path)

/** A created session (its setup answered at once by the fake). */
const created = async (s: ServerProcess) => {
  const c = await request(s.baseUrl, "/v1/sessions", { json: createBody })
  expect(c.status, c.text).toBe(201)
  return c.body.session_id as string
}

/** An answer, or how its connection failed: a caller left without an answer shows as `error`. */
const settle = (p: Promise<{ status: number; text: string; body: any }>) =>
  p.then((r) => ({ ...r, error: undefined }), (e: unknown) => ({ status: 0, text: "", body: undefined, error: String((e as Error)?.cause ?? e) }))

const sessionsOnDisk = (s: ServerProcess) => {
  const dir = path.join(s.dataDir, "sessions")
  return fs.existsSync(dir) ? fs.readdirSync(dir) : []
}

describe("an end in flight during a graceful stop", () => {
  it("is drained: its slow detach finishes, the end answers 200 ended, and then the process exits 0", async () => {
    const f = (fake = await startFake({ detach: { behaviour: "slow", ms: SLOW_STEP_MS } }))
    const s = (server = await serverFor(f))
    const id = await created(s)
    const ending = settle(request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" }))
    await eventually("the detach to reach the Environment", async () => (sent(f).includes("/detach") ? true : undefined))
    s.signal("SIGTERM")
    const ended = await ending
    expect(ended.error, s.output).toBeUndefined()
    expect(ended.status, ended.text).toBe(200)
    expect(ended.body).toMatchObject({ session_id: id, status: "ended" })
    expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })

    await s.start()
    expect((await eventsOf(s, id)).map((e) => e.kind).slice(-4)).toEqual([
      "session_end_started",
      "environment_detach_started",
      "environment_detach_ended",
      "session_ended"
    ])
  }, 60_000)

  it("past the drain deadline its hanging detach is recorded `interrupted` (ambiguous), never connection_lost, and the end still answers 200 ended", async () => {
    const f = (fake = await startFake({ detach: "hang" }))
    const s = (server = await serverFor(f, { BRAIN_DRAIN_DEADLINE_MS: "300" }))
    const id = await created(s)
    const ending = settle(request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" }))
    await eventually("the detach to reach the Environment", async () => (sent(f).includes("/detach") ? true : undefined))
    s.signal("SIGTERM")
    const ended = await ending
    expect(ended.error, s.output).toBeUndefined()
    expect(ended.status, ended.text).toBe(200)
    expect(ended.body).toMatchObject({ session_id: id, status: "ended" })
    expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })
    // Brain closed the detach's request itself, and sent nothing after it.
    expect(f.log().some((l) => l.event === "closed" && l.path === "/detach")).toBe(true)
    expect(sent(f)).toEqual(["/setup", "/detach"])

    await s.start()
    const events = await eventsOf(s, id)
    // Recorded by the stop itself: the restart's recovery had nothing left to add.
    expect(events.map((e) => e.kind).slice(-4)).toEqual([
      "session_end_started",
      "environment_detach_started",
      "environment_detach_failed",
      "session_ended"
    ])
    const failed = events.find((e) => e.kind === "environment_detach_failed")!
    expect(failed.data.failure).toMatchObject({ code: "interrupted", ambiguous: true })
    expect(failed.data.failure.message).toContain("the server is stopping")
    expect(JSON.stringify(failed.data.failure)).not.toContain("connection_lost")
  }, 60_000)
})

describe("a delete in flight during a graceful stop", () => {
  it("is drained: its slow teardown finishes, the delete answers 204, and then the process exits 0", async () => {
    const f = (fake = await startFake({ teardown: { behaviour: "slow", ms: SLOW_STEP_MS } }))
    const s = (server = await serverFor(f))
    const id = await created(s)
    expect((await request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
    const deleting = settle(request(s.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" }))
    await eventually("the teardown to reach the Environment", async () => (sent(f).includes("/teardown") ? true : undefined))
    s.signal("SIGTERM")
    const deleted = await deleting
    expect(deleted.error, s.output).toBeUndefined()
    expect(deleted.status, deleted.text).toBe(204)
    expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })

    await s.start()
    expect((await request(s.baseUrl, `/v1/sessions/${id}`)).status).toBe(404)
  }, 60_000)

  it("past the drain deadline its hanging teardown is recorded `interrupted` (ambiguous), never connection_lost; the delete answers 409 teardown_failed, and a delete after the restart tears the Environment down", async () => {
    const f = (fake = await startFake({ teardown: { behaviour: "hang", times: 1 } }))
    const s = (server = await serverFor(f, { BRAIN_DRAIN_DEADLINE_MS: "300" }))
    const id = await created(s)
    expect((await request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
    const deleting = settle(request(s.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" }))
    await eventually("the teardown to reach the Environment", async () => (sent(f).includes("/teardown") ? true : undefined))
    s.signal("SIGTERM")
    const deleted = await deleting
    expect(deleted.error, s.output).toBeUndefined()
    expect(deleted.status, deleted.text).toBe(409)
    expect(deleted.body).toMatchObject({
      code: "teardown_failed",
      details: { environments: ["sandbox"], failures: [{ environment: "sandbox", failure: { code: "interrupted", ambiguous: true } }] }
    })
    expect(deleted.body.message).toContain("the server is stopping")
    expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })
    expect(f.log().some((l) => l.event === "closed" && l.path === "/teardown")).toBe(true)
    expect(sent(f)).toEqual(["/setup", "/detach", "/teardown"])

    await s.start()
    const events = await eventsOf(s, id)
    expect(events.map((e) => e.kind).slice(-2)).toEqual(["environment_teardown_started", "environment_teardown_failed"])
    expect(events.at(-1)!.data.failure).toMatchObject({ code: "interrupted", ambiguous: true })
    expect(JSON.stringify(events.at(-1)!.data.failure)).not.toContain("connection_lost")

    const again = await request(s.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })
    expect(again.status, again.text).toBe(204)
    expect(sent(f)).toEqual(["/setup", "/detach", "/teardown", "/teardown"])
  }, 60_000)
})

describe("a create the server took just before a graceful stop", () => {
  it("when it reaches the sessions only after the stop began, is answered 503 overloaded having done nothing: no session journaled, nothing sent to its Environment", async () => {
    const f = (fake = await startFake({ setup: "hang" }))
    const s = (server = await serverFor(f, { BRAIN_DRAIN_DEADLINE_MS: "1000" }))
    const body = Buffer.from(JSON.stringify(createBody))
    const url = new URL("/v1/sessions", s.baseUrl)
    // The gate takes the request on its headers; its body is held back until the stop has begun.
    const req = http.request({
      host: url.hostname,
      port: url.port,
      path: url.pathname,
      method: "POST",
      headers: { "content-type": "application/json", "content-length": String(body.length) }
    })
    const answer = new Promise<{ status: number; text: string; body: any }>((resolve, reject) => {
      req.on("response", (res) => {
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (c: string) => (text += c))
        res.on("end", () => resolve({ status: res.statusCode!, text, body: text ? JSON.parse(text) : undefined }))
        res.on("error", reject)
      })
      req.on("error", reject)
    })
    const answered = settle(answer)
    req.write(body.subarray(0, 10))
    await sleep(300)
    s.signal("SIGTERM")
    await eventually("the server to stop admitting work", async () => (s.lines.some((l) => l.includes(STOPPING)) ? true : undefined))
    req.end(body.subarray(10))
    const a = await answered
    expect(a.error, s.output).toBeUndefined()
    expect(a.status, a.text).toBe(503)
    expect(a.body).toMatchObject({ code: "overloaded", retryable: true })
    expect(a.body.message).toContain("stopping")
    expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })
    expect(sent(f), "nothing reached the Environment after the stop began").toEqual([])
    expect(sessionsOnDisk(s), "no session was journaled").toEqual([])
  }, 60_000)

  it("whatever the moment of the stop, a create the server took is answered, and its setup reaches the Environment only when the create is drained: 502 creation_failed naming the session, or 503 (or a connection never read) with nothing journaled or sent", async () => {
    for (const afterMs of [5, 15, 30, 50]) {
      const f = (fake = await startFake({ setup: "hang" }))
      const s = (server = await serverFor(f, { BRAIN_DRAIN_DEADLINE_MS: "500" }))
      const creating = settle(request(s.baseUrl, "/v1/sessions", { json: createBody }))
      await sleep(afterMs)
      s.signal("SIGTERM")
      const a = await creating
      // A connection closed unanswered is allowed only for a request the server never took (refused
      // at connect, or closed by the stop before a byte of it was read): then it did nothing.
      const untaken = a.error !== undefined
      if (!untaken) expect([502, 503], a.text).toContain(a.status)
      expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })
      if (untaken || a.status === 503) {
        expect(sent(f), `stop ${afterMs} ms after: ${a.error ?? "refused"}, yet its setup was sent`).toEqual([])
        expect(sessionsOnDisk(s)).toEqual([])
      } else {
        expect(a.body).toMatchObject({ code: "creation_failed", details: { session_id: expect.any(String), failure: { code: "interrupted" } } })
        expect(sessionsOnDisk(s)).toEqual([a.body.details.session_id])
      }
      await s.dispose()
      f.child.kill()
      server = undefined
      fake = undefined
    }
  }, 240_000)
})
