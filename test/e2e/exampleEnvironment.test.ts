/**
 * The README's Environment example, as the README runs it: `examples/environment.mjs` as its own
 * process, a real server with BRAIN_ENVIRONMENTS naming it, and the README's create body (read
 * from the README itself, so the two cannot drift). The tool runs there once with the words
 * counted, and the session's end and delete reach the Environment. It keeps the protocol's rules
 * (docs/environments.md) for what a client other than Brain sends it: a request that is not an
 * operation is refused with a JSON error and the process keeps serving; a cancel that arrives
 * before its call is confirmed and the call is then refused with 409, never run.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import * as readline from "node:readline"
import { afterAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, ROOT, type ServerProcess, startServer } from "../support/server.js"

/** The create body the README's "Tools in an Environment" section sends (its `-d '…'` with an `environments` member). */
const readmeCreateBody = () => {
  const readme = fs.readFileSync(path.join(ROOT, "README.md"), "utf8")
  const section = readme.slice(readme.indexOf("## Tools in an Environment"))
  const body = /-d '(\{"model".*?"environments".*?)'/.exec(section)?.[1]
  if (body === undefined) throw new Error("the README's Environment section has no create body")
  return JSON.parse(body)
}

describe("the README's example http Environment", () => {
  let environment: ChildProcess | undefined
  let server: ServerProcess | undefined
  afterAll(async () => {
    await server?.dispose()
    environment?.kill()
  })

  it("runs the README's session: word_count is called there once with its answer journaled, then end and delete reach it", async () => {
    ensureBuilt()
    environment = spawn(process.execPath, [path.join(ROOT, "examples/environment.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] })
    const line = await new Promise<string>((resolve) => readline.createInterface({ input: environment!.stdout! }).once("line", resolve))
    const url = /environment on (http:\/\/[\d.:]+)/.exec(line)?.[1]
    expect(url, line).toBeDefined()
    server = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify({ local: { driver: "http", base_url: url } }) } })

    const created = await request(server.baseUrl, "/v1/sessions", { json: readmeCreateBody() })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "count" } } })
    expect(sent.status, sent.text).toBe(200)
    expect(sent.body.turn).toMatchObject({ status: "ended", result: { text: "counted" } })
    const events = (await request(server.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; data: any }>
    expect(events.filter((e) => e.kind === "tool_call_ended").map((e) => e.data)).toEqual([
      expect.objectContaining({ outcome: "ok", output: { words: 3 }, is_error: false })
    ])
    expect(events.filter((e) => e.kind === "environment_setup_ended")).toHaveLength(1)

    expect((await request(server.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
    const ended = (await request(server.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string }>
    expect(ended.filter((e) => e.kind.startsWith("environment_detach")).map((e) => e.kind)).toEqual(["environment_detach_started", "environment_detach_ended"])
    // A teardown the Environment failed would answer 409 teardown_failed and keep the session.
    expect((await request(server.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })).status).toBe(204)
    expect((await request(server.baseUrl, `/v1/sessions/${id}`)).status).toBe(404)

    // What a health probe or a stray client sends: a JSON refusal, and the Environment lives on.
    const probe = await request(url!, "/")
    expect([probe.status, probe.body?.code], probe.text).toEqual([404, "not_found"])
    const notJson = await request(url!, "/tools/call", { method: "POST", raw: "not json", headers: { "content-type": "application/json" } })
    expect([notJson.status, notJson.body?.code], notJson.text).toEqual([400, "invalid_request"])
    // A cancel that overtakes its call: confirmed, and the call is refused unrun (409).
    const op = { session_id: "ses_x", sequence: 7, environment: "local" }
    const cancel = await request(url!, "/tools/cancel", { json: { ...op, name: "word_count", reason: "cancel" } })
    expect([cancel.status, cancel.body], cancel.text).toEqual([200, { stopped: true }])
    const late = await request(url!, "/tools/call", { json: { ...op, name: "word_count", call_id: "c", input: { text: "a b" }, deadline_at_ms: 0 } })
    expect(late.status, late.text).toBe(409)
    // A call that finished before its cancel: not stopped (its own answer carried its outcome).
    const done = { session_id: "ses_x", sequence: 9, environment: "local" }
    const ran = await request(url!, "/tools/call", { json: { ...done, name: "word_count", call_id: "d", input: { text: "a b" }, deadline_at_ms: 0 } })
    expect([ran.status, ran.body]).toEqual([200, { ok: { words: 2 } }])
    expect((await request(url!, "/tools/cancel", { json: { ...done, name: "word_count", reason: "cancel" } })).body).toEqual({ stopped: false })
    expect(environment.exitCode).toBeNull()
  }, 60_000)
})
