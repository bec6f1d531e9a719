/**
 * A create in flight during a graceful stop (seed, Lifecycle: SIGTERM "stops admitting work and
 * drains admitted operations"): it is treated as a running turn is. The drain waits for it, so a
 * create whose Environment's setup takes a few seconds answers 201 before the process exits; past
 * BRAIN_DRAIN_DEADLINE_MS it is interrupted, however long its Environment's lifecycle timeout: the
 * setup in flight is abandoned and recorded `interrupted` (ambiguous: it was sent), nothing more is
 * sent, the creation is recorded failed `interrupted`, and the caller is answered 502
 * `creation_failed` naming the failed session, which a delete tears down after the restart (as
 * after a crash, the stop sends no teardown). Against a real server process and the fake http
 * Environment (test/fixtures/httpEnvironment.mjs).
 */
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { type FakeProcess, startFake } from "../support/httpEnvironment.js"
import { ensureBuilt, eventually, request, type ServerProcess, startServer } from "../support/server.js"

/** Milliseconds the slow setup takes: longer than a stop lets answers still in flight be written once its drain is over (2 s). */
const SLOW_SETUP_MS = 3_500
/**
 * The hanging Environment's lifecycle timeout: far beyond the test and the harness's wait for an
 * exit (a hang guard), so a stop that waited for it, not for the drain deadline, fails the wait.
 */
const LIFECYCLE_TIMEOUT_MS = 120_000


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

const eventsOf = async (s: ServerProcess, id: string) =>
  (await request(s.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; data: any }>

describe("a create in flight during a graceful stop", () => {
  it("is drained like a running turn: its slow setup finishes, the create answers 201 idle, and then the process exits 0", async () => {
    const f = (fake = await startFake({ setup: { behaviour: "slow", ms: SLOW_SETUP_MS } }))
    const s = (server = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify({ box: { driver: "http", base_url: f.url } }) } }))
    const creating = request(s.baseUrl, "/v1/sessions", { json: createBody })
    await eventually("the setup to reach the Environment", async () => (f.log().some((l) => l.path === "/setup") ? true : undefined))
    s.signal("SIGTERM")
    const created = await creating
    expect(created.status, created.text).toBe(201)
    expect(created.body).toMatchObject({ status: "idle" })
    expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })

    await s.start()
    const id: string = created.body.session_id
    expect((await eventsOf(s, id)).map((e) => e.kind)).toEqual([
      "session_creation_started",
      "environment_setup_started",
      "environment_setup_ended",
      "session_creation_ended"
    ])
  }, 60_000)

  it("past the drain deadline it is interrupted whatever its lifecycle timeout: recorded failed `interrupted` with its setup abandoned, answered 502 creation_failed naming the session (replayed for its key), and a delete after the restart tears the Environment down", async () => {
    const f = (fake = await startFake({ setup: { behaviour: "hang", times: 1 } }))
    const bindings = { box: { driver: "http", base_url: f.url, lifecycle_timeout_ms: LIFECYCLE_TIMEOUT_MS } }
    const s = (server = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify(bindings), BRAIN_DRAIN_DEADLINE_MS: "300" } }))
    const key = { "idempotency-key": "create-during-stop" }
    const creating = request(s.baseUrl, "/v1/sessions", { json: createBody, headers: key })
    await eventually("the setup to reach the Environment", async () => (f.log().some((l) => l.path === "/setup") ? true : undefined))
    s.signal("SIGTERM")
    const answered = await creating
    expect(answered.status, answered.text).toBe(502)
    expect(answered.body).toMatchObject({
      code: "creation_failed",
      details: { session_id: expect.any(String), environment: "sandbox", failure: { code: "interrupted", ambiguous: true } }
    })
    expect(answered.body.message).toContain("the server is stopping")
    const id: string = answered.body.details.session_id
    expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })
    // The setup's request was closed by Brain, and nothing else was sent.
    expect(f.log().filter((l) => l.event === undefined).map((l) => l.path)).toEqual(["/setup"])
    expect(f.log().some((l) => l.event === "closed" && l.path === "/setup")).toBe(true)
    expect(s.output).not.toContain('"logLevel":"ERROR"')

    await s.start()
    const events = await eventsOf(s, id)
    // Recorded by the stop itself: the restart's recovery had nothing left to add.
    expect(events.map((e) => e.kind)).toEqual([
      "session_creation_started",
      "environment_setup_started",
      "environment_setup_failed",
      "session_creation_failed"
    ])
    // Both name the Environment and are ambiguous, as recovery records them after a kill -9.
    expect(events[2]!.data.failure).toMatchObject({ code: "interrupted", ambiguous: true, details: { environment: "sandbox" } })
    expect(events[3]!.data.failure).toMatchObject({ code: "interrupted", ambiguous: true, details: { environment: "sandbox" } })
    expect((await request(s.baseUrl, `/v1/sessions/${id}`)).body).toMatchObject({ status: "failed" })

    const replayed = await request(s.baseUrl, "/v1/sessions", { json: createBody, headers: key })
    expect(replayed.status).toBe(502)
    expect(replayed.body).toEqual(answered.body)

    const deleted = await request(s.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })
    expect(deleted.status, deleted.text).toBe(204)
    expect(f.log().filter((l) => l.event === undefined).map((l) => l.path)).toEqual(["/setup", "/teardown"])
  }, 60_000)
})
