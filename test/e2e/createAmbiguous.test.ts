/**
 * A keyed create whose answer was lost: a real server is killed (`kill -9`) between the create's
 * claim and its answer (while its Environment's setup hangs), and restarted. The retry under the
 * same key is 409 `ambiguous` and is never run again (docs/api.md, "Idempotency"), past the
 * retention (BRAIN_REQUEST_RETENTION_SECS) too, and it names the
 * session the first request minted (`details.session_id`, the SDK's `BrainError.sessionId`), so
 * the client can inspect what the create left and clean it up. The id is recorded with the claim,
 * before the session's journal exists.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as readline from "node:readline"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Brain, BrainError } from "../../src/sdk/index.js"
import { FAKE_ENVIRONMENT, type LogLine } from "../support/httpEnvironment.js"
import { ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"

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

describe("a keyed create killed between its claim and its answer", () => {
  let env: FakeProcess
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    // Every setup hangs: the create is in flight, claimed and unanswered, for as long as the test needs.
    env = await startFake({ HTTP_ENV_LIFECYCLE: JSON.stringify({ setup: "hang" }) })
    // A short retention: the unanswered claim must outlive it.
    server = await startServer({
      env: { BRAIN_ENVIRONMENTS: JSON.stringify({ boxes: { driver: "http", base_url: env.url } }), BRAIN_REQUEST_RETENTION_SECS: "2" }
    })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
    env?.child.kill()
  })

  it("the retry under its key is 409 ambiguous naming the minted session (in flight, and after the kill -9), never runs the create again, and the session can be inspected and deleted", async () => {
    const body = { model: { provider: "scripted" }, environments: [{ name: "box", driver: "http", binding: "boxes" }] }
    const key = { "idempotency-key": "create-lost" }
    const first = request(server.baseUrl, "/v1/sessions", { json: body, headers: key }).then((r) => r, (e: unknown) => e)
    const setup = await eventually("the create's setup to reach the Environment", async () => env.requests().find((r) => r.path === "/setup"), 30_000)
    const id = setup.session_id

    // While it runs: in flight, retryable, and already naming the session.
    const running = await request(server.baseUrl, "/v1/sessions", { json: body, headers: key })
    expect(running.status, running.text).toBe(409)
    expect(running.body).toMatchObject({ code: "ambiguous", retryable: true, details: { ambiguous: true, in_flight: true, session_id: id } })

    expect((await server.kill()).signal).toBe("SIGKILL")
    expect(await first).toBeInstanceOf(Error)
    await server.start()

    const retried = await request(server.baseUrl, "/v1/sessions", { json: body, headers: key })
    expect(retried.status, retried.text).toBe(409)
    expect(retried.body).toMatchObject({ code: "ambiguous", retryable: false, details: { ambiguous: true, in_flight: false, session_id: id } })
    expect(retried.body.message).toContain(id)

    // The SDK's error names it too; it is final (never retried, never run again).
    const brain = new Brain({ baseUrl: server.baseUrl })
    try {
      const refused: unknown = await brain.sessions.create(body as never, { idempotencyKey: "create-lost" }).then(() => undefined, (e) => e)
      expect(refused).toBeInstanceOf(BrainError)
      const e = refused as BrainError
      expect({ code: e.code, status: e.status, retryable: e.retryable, sessionId: e.sessionId, key: e.idempotencyKey }).toEqual({
        code: "ambiguous",
        status: 409,
        retryable: false,
        sessionId: id,
        key: "create-lost"
      })
      expect(e.details).toMatchObject({ session_id: id })
    } finally {
      await brain.close()
    }

    // What the create left: its creation was interrupted, recorded failed at the first access.
    const left = await request(server.baseUrl, `/v1/sessions/${id}`)
    expect(left.status, left.text).toBe(200)
    expect(left.body).toMatchObject({ session_id: id, status: "failed" })
    const listed = (await request(server.baseUrl, "/v1/sessions")).body.sessions as Array<{ session_id: string }>
    expect(listed.map((s) => s.session_id)).toEqual([id])
    // Never set up again; the delete tears down what the first setup may have made.
    const deleted = await request(server.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })
    expect(deleted.status, deleted.text).toBe(204)
    expect(env.requests().map((r) => [r.path, r.session_id])).toEqual([["/setup", id], ["/teardown", id]])
    // The key still answers the same, the session gone or not, past the retention and a restart too.
    const after = await request(server.baseUrl, "/v1/sessions", { json: body, headers: key })
    expect(after.text).toBe(retried.text)
    await server.restart()
    await sleep(2_500)
    const long = await request(server.baseUrl, "/v1/sessions", { json: body, headers: key })
    expect(long.text).toBe(retried.text)
    expect(env.requests().map((r) => r.path)).toEqual(["/setup", "/teardown"])
  }, 90_000)
})
