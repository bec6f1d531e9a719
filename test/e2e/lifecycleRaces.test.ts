/**
 * Lifecycle requests racing each other through a real server, with an http Environment whose
 * steps are slow (test/fixtures/httpEnvironment.mjs, `slow`), so that each race is held open:
 *
 * - requests during a create: reads answer the session `creating` (and its Events so far) and
 *   change nothing; DELETE and end answer 409 `conflict`; the create then answers 201 `idle` and
 *   the journal holds exactly the creation's records;
 * - concurrent ends: one ending, one `/detach`, the same 200 for all;
 * - concurrent DELETEs: one `/teardown`, one 204 and the others 404, and reads during the
 *   teardown 404; never a 5xx.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as readline from "node:readline"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { FAKE_ENVIRONMENT, type LogLine } from "../support/httpEnvironment.js"
import { ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"

const STEP_MS = 1_500

interface FakeProcess {
  readonly url: string
  readonly child: ChildProcess
  readonly requests: () => ReadonlyArray<LogLine>
}

const startFake = async (lifecycle: Record<string, unknown>): Promise<FakeProcess> => {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "brain-e2e-races-")), "requests.jsonl")
  const child = spawn(process.execPath, [FAKE_ENVIRONMENT], {
    env: { ...process.env, HTTP_ENV_LOG: file, HTTP_ENV_LIFECYCLE: JSON.stringify(lifecycle) },
    stdio: ["ignore", "pipe", "inherit"]
  })
  const first = await new Promise<string>((resolve) => readline.createInterface({ input: child.stdout! }).once("line", resolve))
  const requests = () =>
    fs.existsSync(file)
      ? fs.readFileSync(file, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as LogLine).filter((l) => l.event === undefined)
      : []
  return { url: `http://127.0.0.1:${JSON.parse(first).port}`, child, requests }
}

describe("lifecycle races through a real server", () => {
  let slowSetup: FakeProcess
  let slowEnd: FakeProcess
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    slowSetup = await startFake({ setup: { behaviour: "slow", ms: STEP_MS } })
    slowEnd = await startFake({ detach: { behaviour: "slow", ms: STEP_MS / 3 }, teardown: { behaviour: "slow", ms: STEP_MS } })
    const bindings = { slow_setup: { driver: "http", base_url: slowSetup.url }, slow_end: { driver: "http", base_url: slowEnd.url } }
    server = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify(bindings) } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
    slowSetup?.child.kill()
    slowEnd?.child.kill()
  })

  const kindsOf = async (id: string) =>
    ((await request(server.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string }>).map((e) => e.kind)

  it("requests during a create: reads see it creating and change nothing, DELETE and end are 409 conflict, and the create answers 201 idle with only its own records", async () => {
    const creating = request(server.baseUrl, "/v1/sessions", {
      json: { model: { provider: "scripted" }, environments: [{ name: "box", driver: "http", binding: "slow_setup" }] }
    })
    const id = (await eventually("the setup to reach the Environment", async () => slowSetup.requests().find((r) => r.path === "/setup")))
      .session_id
    const base = `/v1/sessions/${id}`

    const summary = await request(server.baseUrl, base)
    expect(summary.status, summary.text).toBe(200)
    expect(summary.body).toMatchObject({ session_id: id, status: "creating" })
    const list = await request(server.baseUrl, "/v1/sessions")
    expect(list.body.sessions).toContainEqual(expect.objectContaining({ session_id: id, status: "creating" }))
    expect(await kindsOf(id)).toEqual(["session_creation_started", "environment_setup_started"])
    expect((await request(server.baseUrl, `${base}/transcript`)).status).toBe(200)

    for (const [method, p] of [["DELETE", base], ["POST", `${base}/end`]] as const) {
      const refused = await request(server.baseUrl, p, { method })
      expect(refused.status, `${method} ${p}: ${refused.text}`).toBe(409)
      expect(refused.body).toMatchObject({ code: "conflict", message: expect.stringContaining("being created") })
    }
    expect(await kindsOf(id)).toEqual(["session_creation_started", "environment_setup_started"])

    const created = await creating
    expect(created.status, created.text).toBe(201)
    expect(created.body).toMatchObject({ session_id: id, status: "idle" })
    expect(await kindsOf(id)).toEqual([
      "session_creation_started",
      "environment_setup_started",
      "environment_setup_ended",
      "session_creation_ended"
    ])
    expect((await request(server.baseUrl, base)).body.status).toBe("idle")
    expect(slowSetup.requests().filter((r) => r.session_id === id).map((r) => r.path)).toEqual(["/setup"])
  }, 60_000)

  /** A session with an Environment whose detach and teardown are slow. */
  const slowEnding = async () => {
    const created = await request(server.baseUrl, "/v1/sessions", {
      json: { model: { provider: "scripted" }, environments: [{ name: "box", driver: "http", binding: "slow_end" }] }
    })
    expect(created.status, created.text).toBe(201)
    return created.body.session_id as string
  }

  it("concurrent ends send one /detach, record one ending and answer one summary", async () => {
    const id = await slowEnding()
    const ends = await Promise.all(Array.from({ length: 3 }, () => request(server.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })))
    for (const e of ends) {
      expect(e.status, e.text).toBe(200)
      expect(e.body).toEqual(ends[0]!.body)
    }
    expect(ends[0]!.body.status).toBe("ended")
    expect((await kindsOf(id)).slice(4)).toEqual([
      "session_end_started",
      "environment_detach_started",
      "environment_detach_ended",
      "session_ended"
    ])
    expect(slowEnd.requests().filter((r) => r.session_id === id).map((r) => r.path)).toEqual(["/setup", "/detach"])
  }, 60_000)

  it("concurrent DELETEs send one /teardown and answer one 204 and 404s, never a 5xx; reads during the teardown are 404", async () => {
    const id = await slowEnding()
    const base = `/v1/sessions/${id}`
    expect((await request(server.baseUrl, `${base}/end`, { method: "POST" })).status).toBe(200)

    const deletes = Promise.all(Array.from({ length: 5 }, () => request(server.baseUrl, base, { method: "DELETE" })))
    await eventually("the teardown to reach the Environment", async () => slowEnd.requests().find((r) => r.path === "/teardown"))
    const during = await Promise.all([base, `${base}/events`, `${base}/transcript`].map((p) => request(server.baseUrl, p)))
    for (const r of during) expect(r.status, r.text).toBe(404)
    expect((await request(server.baseUrl, "/v1/sessions")).body.sessions.map((s: { session_id: string }) => s.session_id)).not.toContain(id)

    const statuses = (await deletes).map((r) => r.status).sort()
    expect(statuses).toEqual([204, 404, 404, 404, 404])
    await sleep(200)
    expect(slowEnd.requests().filter((r) => r.session_id === id).map((r) => r.path)).toEqual(["/setup", "/detach", "/teardown"])
    expect((await request(server.baseUrl, base)).status).toBe(404)
    expect(server.exited).toBeUndefined()
  }, 60_000)
})
