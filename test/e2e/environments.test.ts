/**
 * An http Environment end to end: a real server process with BRAIN_ENVIRONMENTS naming the fake
 * Environment (test/fixtures/httpEnvironment.mjs) on loopback. A session is created with the
 * Environment, a turn's scripted model calls a tool that runs there, the session ends and is
 * deleted: each operation reaches the fake once, with the token, and the token is found nowhere
 * in the data directory or the server's output. Failures answer over HTTP as docs/api.md says
 * (a failed setup: 502 `creation_failed`; a failed teardown: 409 `teardown_failed`, replayed for
 * the same key, tried again for a new one), and an unusable binding refuses the start.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as readline from "node:readline"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { FAKE_ENVIRONMENT, type LogLine } from "../support/httpEnvironment.js"
import { ensureBuilt, eventually, request, ServerProcess, startServer } from "../support/server.js"

const TOKEN = "tok-e2e-DO-NOT-LEAK-3b7e19c0d4"

interface FakeProcess {
  readonly url: string
  readonly child: ChildProcess
  readonly requests: () => ReadonlyArray<LogLine>
}

const startFake = async (env: Record<string, string>): Promise<FakeProcess> => {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "brain-e2e-env-")), "requests.jsonl")
  const child = spawn(process.execPath, [FAKE_ENVIRONMENT], { env: { ...process.env, HTTP_ENV_LOG: file, ...env }, stdio: ["ignore", "pipe", "inherit"] })
  const first = await new Promise<string>((resolve) => readline.createInterface({ input: child.stdout! }).once("line", resolve))
  const requests = () =>
    fs.existsSync(file)
      ? fs.readFileSync(file, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as LogLine).filter((l) => l.event === undefined)
      : []
  return { url: `http://127.0.0.1:${JSON.parse(first).port}`, child, requests }
}

const filesUnder = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(path.join(dir, e.name)) : [path.join(dir, e.name)]))

describe("an http Environment through a real server", () => {
  let fake: FakeProcess
  let failing: FakeProcess
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    fake = await startFake({ HTTP_ENV_TOKEN: TOKEN, HTTP_ENV_LIFECYCLE: JSON.stringify({ teardown: { behaviour: "leak", times: 1 } }) })
    failing = await startFake({ HTTP_ENV_LIFECYCLE: JSON.stringify({ setup: "server_error" }) })
    const bindings = {
      sandboxes: { driver: "http", base_url: fake.url, token_env: "E2E_SANDBOX_TOKEN" },
      broken: { driver: "http", base_url: failing.url }
    }
    server = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify(bindings), E2E_SANDBOX_TOKEN: TOKEN } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
    fake?.child.kill()
    failing?.child.kill()
  })

  it("create sets the Environment up, a turn's tool runs there once, end detaches, delete tears down (a failed teardown is 409 until a new key)", async () => {
    const created = await request(server.baseUrl, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "ok", input: { q: 42 } }] }, { text: "done" }] },
        environments: [{ name: "sandbox", driver: "http", binding: "sandboxes", options: { image: "python:3.12" } }],
        tools: [{ name: "ok", description: "echoes", environment: "sandbox" }]
      }
    })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id
    const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    expect(sent.status, sent.text).toBe(200)
    expect(sent.body.turn).toMatchObject({ status: "ended", result: { text: "done" } })
    const events = (await request(server.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; data: any }>
    expect(events.find((e) => e.kind === "tool_call_ended")?.data).toMatchObject({ outcome: "ok", output: { echo: { q: 42 } } })
    expect(events[0]!.data.configuration.environments[0].resolved).toEqual({ base_url: fake.url, lifecycle_timeout_ms: 60_000 })

    expect((await request(server.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
    const refused = await request(server.baseUrl, `/v1/sessions/${id}`, { method: "DELETE", headers: { "idempotency-key": "del-1" } })
    expect(refused.status, refused.text).toBe(409)
    expect(refused.body).toMatchObject({ code: "teardown_failed", details: { environments: ["sandbox"] } })
    const replayed = await request(server.baseUrl, `/v1/sessions/${id}`, { method: "DELETE", headers: { "idempotency-key": "del-1" } })
    expect(replayed.text).toBe(refused.text)
    expect((await request(server.baseUrl, `/v1/sessions/${id}`)).body.status).toBe("ended")
    const deleted = await request(server.baseUrl, `/v1/sessions/${id}`, { method: "DELETE", headers: { "idempotency-key": "del-2" } })
    expect(deleted.status, deleted.text).toBe(204)
    expect((await request(server.baseUrl, `/v1/sessions/${id}`)).status).toBe(404)

    const mine = fake.requests().filter((r) => r.session_id === id)
    expect(mine.map((r) => r.path)).toEqual(["/setup", "/tools/call", "/detach", "/teardown", "/teardown"])
    for (const r of mine) expect(r).toMatchObject({ count: 1, auth: true, protocol: "1" })

    for (const file of filesUnder(server.dataDir)) expect(fs.readFileSync(file).indexOf(TOKEN), file).toBe(-1)
    expect(server.output).not.toContain(TOKEN)
    expect(refused.text).not.toContain(TOKEN)
  }, 60_000)

  it("a failed setup answers 502 creation_failed naming the Environment and the failed session, replayed for the same key", async () => {
    const body = { model: { provider: "scripted" }, environments: [{ name: "box", driver: "http", binding: "broken" }] }
    const failed = await request(server.baseUrl, "/v1/sessions", { json: body, headers: { "idempotency-key": "create-broken" } })
    expect(failed.status, failed.text).toBe(502)
    expect(failed.body).toMatchObject({ code: "creation_failed", details: { environment: "box", failure: { code: "environment_failed" } } })
    const id = failed.body.details.session_id
    expect((await request(server.baseUrl, `/v1/sessions/${id}`)).body.status).toBe("failed")
    const again = await request(server.baseUrl, "/v1/sessions", { json: body, headers: { "idempotency-key": "create-broken" } })
    expect(again.text).toBe(failed.text)
    expect(failing.requests().map((r) => r.path)).toEqual(["/setup", "/teardown"])
    expect((await request(server.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })).status).toBe(204)
  }, 60_000)

  it("kill -9 while a tool call waits in the Environment: the restart records it unknown (ambiguous), never sends it again, and the session goes on, ends and is torn down", async () => {
    // Its own Environment and server: this one is killed.
    const env = await startFake({ HTTP_ENV_TOKEN: TOKEN })
    const crashing = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify({ sandboxes: { driver: "http", base_url: env.url, token_env: "E2E_SANDBOX_TOKEN" } }), E2E_SANDBOX_TOKEN: TOKEN } })
    try {
      const created = await request(crashing.baseUrl, "/v1/sessions", {
        json: {
          model: { provider: "scripted", replies: [{ tool_calls: [{ name: "hang", input: {} }] }, { text: "after the crash" }] },
          environments: [{ name: "sandbox", driver: "http", binding: "sandboxes" }],
          tools: [{ name: "hang", description: "never answers", environment: "sandbox" }]
        }
      })
      expect(created.status, created.text).toBe(201)
      const id = created.body.session_id as string
      const calls = () => env.requests().filter((r) => r.session_id === id && r.path === "/tools/call")
      const receipt = await request(crashing.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } }, headers: { prefer: "respond-async" } })
      expect(receipt.status, receipt.text).toBe(202)
      await eventually("the call to reach the Environment", async () => (calls().length > 0 ? true : undefined), 30_000)
      expect((await crashing.kill()).signal).toBe("SIGKILL")
      await crashing.start()

      const events = (await request(crashing.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; sequence: number; data: any }>
      const started = events.filter((e) => e.kind === "tool_call_started")
      expect(started).toHaveLength(1)
      const outcomes = events.filter((e) => e.data?.sequence === started[0]!.sequence)
      expect(outcomes).toHaveLength(1)
      expect(outcomes[0]).toMatchObject({ kind: "tool_call_failed", data: { outcome: "unknown", failure: { ambiguous: true } } })
      expect(events.find((e) => e.data?.sequence === receipt.body.sequence)).toMatchObject({ kind: "turn_failed", data: { failure: { code: "interrupted" } } })
      expect(calls().map((c) => [c.sequence, c.count])).toEqual([[started[0]!.sequence, 1]])

      const next = await request(crashing.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "and now?" } } })
      expect(next.status, next.text).toBe(200)
      expect(next.body.turn).toMatchObject({ status: "ended", result: { text: "after the crash" } })
      expect((await request(crashing.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
      const deleted = await request(crashing.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })
      expect(deleted.status, deleted.text).toBe(204)
      const all = env.requests()
      expect(all.map((r) => r.path)).toEqual(["/setup", "/tools/call", "/detach", "/teardown"])
      for (const r of all) expect(r).toMatchObject({ session_id: id, count: 1 })
    } finally {
      await crashing.dispose()
      env.child.kill()
    }
  }, 90_000)

  it("an unknown binding is 400 invalid_request listing the configured ones, and nothing is created", async () => {
    const r = await request(server.baseUrl, "/v1/sessions", {
      json: { model: { provider: "scripted" }, environments: [{ name: "x", driver: "http", binding: "nowhere" }] }
    })
    expect(r.status).toBe(400)
    expect(r.body.code).toBe("invalid_request")
    expect(r.body.message).toContain(`the configured bindings are "broken", "sandboxes"`)
  })

  it("a BRAIN_ENVIRONMENTS with a pasted token refuses the start naming the field, never the value", async () => {
    const refused = new ServerProcess({ entry: "product", env: { BRAIN_ENVIRONMENTS: JSON.stringify({ bad: { driver: "http", base_url: "http://127.0.0.1:1", token: TOKEN } }) } })
    try {
      const r = await refused.spawn()
      expect(r.listening).toBe(false)
      expect(refused.output).toContain("BRAIN_ENVIRONMENTS (inline JSON): bad.token: unexpected field")
      expect(refused.output).not.toContain(TOKEN)
    } finally {
      await refused.dispose()
    }
  }, 60_000)
})
