/**
 * A host tool's schemas and command stream through a real server, where one session or one
 * client could otherwise harm the others: a pattern that backtracks exponentially in JavaScript
 * is matched in linear time, a schema Brain could not check is refused at create, one session's
 * `$id` does not switch off another's check, and a HEAD of the command stream opens nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Frames, framesOfResponse } from "../support/hosts.js"
import { ensureBuilt, request, type RequestOptions, type ServerProcess, startServer } from "../support/server.js"

const MAX_SCHEMA_BYTES = 4096

interface Registered {
  readonly host_id: string
  readonly token: string
}

describe("host tool schemas and the command stream, one tenant against the others", () => {
  let server: ServerProcess
  const aborts: Array<() => void> = []
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_MAX_TOOL_SCHEMA_BYTES: String(MAX_SCHEMA_BYTES) } })
  }, 120_000)
  afterAll(async () => {
    for (const abort of aborts) abort()
    await server?.dispose()
  })

  const api = (p: string, options: RequestOptions = {}) => request(server.baseUrl, p, options)

  const register = async (): Promise<Registered> => {
    const r = await api("/v1/hosts", { method: "POST" })
    expect(r.status, r.text).toBe(201)
    return r.body
  }

  const open = async (host: Registered): Promise<Frames> => {
    const controller = new AbortController()
    aborts.push(() => controller.abort())
    const response = await fetch(server.url(`/v1/hosts/${host.host_id}/commands`), {
      headers: { authorization: `Bearer ${host.token}`, accept: "text/event-stream" },
      signal: controller.signal
    })
    expect(response.status).toBe(200)
    const frames = framesOfResponse(response)
    await frames.expect("ready")
    return frames
  }

  const createBody = (host: string, tool: object, input: unknown = { q: 1 }) => ({
    model: { provider: "scripted", replies: [{ tool_calls: [{ name: "lookup", input }] }, { text: "done" }] },
    environments: [{ name: "app", driver: "host", host }],
    tools: [{ name: "lookup", description: "looks up", environment: "app", ...tool }]
  })

  const create = async (host: string, tool: object, input?: unknown) => {
    const r = await api("/v1/sessions", { json: createBody(host, tool, input) })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }

  const endedCalls = async (id: string) =>
    ((await api(`/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; data: any }>).filter((e) => e.kind === "tool_call_ended").map((e) => e.data)

  it("a pattern that backtracks exponentially in JavaScript is matched in linear time: the call is refused invalid_input, and the server answers meanwhile", async () => {
    const host = await register()
    const frames = await open(host)
    // 60 characters: about 2^60 steps for a backtracking engine, a few hundred for RE2.
    const id = await create(host.host_id, {
      input_schema: { type: "object", properties: { s: { type: "string", pattern: "^(a+)+$" } } }
    }, { s: `${"a".repeat(60)}!` })
    const turn = await api(`/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    expect(turn.status, turn.text).toBe(200)
    const [ended] = await endedCalls(id)
    expect(ended).toMatchObject({ outcome: "error", output: { code: "invalid_input", issues: [{ path: ["s"], message: 'must match pattern "^(a+)+$"' }] } })
    expect((await api("/health/live")).status).toBe(204)
    expect(frames.all.filter((f) => f.event === "call")).toHaveLength(0)
  })

  it("a create whose host tool schema is above BRAIN_MAX_TOOL_SCHEMA_BYTES, cannot be compiled, or has a pattern RE2 cannot run is 400 at that field, and creates nothing", async () => {
    const host = await register()
    const before = (await api("/v1/sessions?limit=1000")).body.sessions.length
    const cases: ReadonlyArray<readonly [object, string, RegExp]> = [
      [{ input_schema: { type: "object", description: "x".repeat(MAX_SCHEMA_BYTES) } }, "input_schema", /BRAIN_MAX_TOOL_SCHEMA_BYTES/],
      [{ output_schema: { $ref: "#/definitions/missing" } }, "output_schema", /cannot be compiled/],
      [{ input_schema: { type: "string", pattern: "(a)\\1" } }, "input_schema", /linear time/],
      [{ input_schema: "not a schema" }, "input_schema", /not a JSON Schema/]
    ]
    for (const [tool, field, says] of cases) {
      const r = await api("/v1/sessions", { json: createBody(host.host_id, tool) })
      expect(r.status, r.text).toBe(400)
      expect(r.body.code).toBe("invalid_request")
      expect(r.body.message).toMatch(says)
      expect(r.body.details).toEqual([{ path: ["tools", 0, field], message: r.body.message }])
    }
    expect((await api("/v1/sessions?limit=1000")).body.sessions.length).toBe(before)
  })

  it("a schema $id one session used does not switch off another session's check of a different schema with that $id", async () => {
    const host = await register()
    const frames = await open(host)
    const numbers = { $id: "urn:probe:lookup", type: "object", properties: { q: { type: "number" } }, required: ["q"] }
    const strings = { $id: "urn:probe:lookup", type: "object", properties: { q: { type: "string" } }, required: ["q"] }
    const first = await create(host.host_id, { input_schema: numbers }, { q: "str" })
    expect((await api(`/v1/sessions/${first}/messages`, { json: { input: { message: "go" } } })).status).toBe(200)
    const second = await create(host.host_id, { input_schema: strings }, { q: 5 })
    expect((await api(`/v1/sessions/${second}/messages`, { json: { input: { message: "go" } } })).status).toBe(200)
    for (const id of [first, second]) {
      const [ended] = await endedCalls(id)
      expect(ended).toMatchObject({ outcome: "error", output: { code: "invalid_input", issues: [{ path: ["q"] }] } })
    }
    expect(frames.all.filter((f) => f.event === "call")).toHaveLength(0)
  })

  it("a HEAD of a host's command stream answers its headers and opens nothing: the live stream keeps its calls, and with none a call fails host_disconnected at once", async () => {
    const host = await register()
    const frames = await open(host)
    const head = await fetch(server.url(`/v1/hosts/${host.host_id}/commands`), { method: "HEAD", headers: { authorization: `Bearer ${host.token}` } })
    expect(head.status).toBe(200)
    expect(head.headers.get("content-type")).toContain("text/event-stream")
    // Another's HEAD is refused as its GET would be.
    expect((await fetch(server.url(`/v1/hosts/${host.host_id}/commands`), { method: "HEAD" })).status).toBe(401)
    // The GET stream is still the host's: a call reaches it.
    const id = await create(host.host_id, {})
    const turn = api(`/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    const call = await frames.expect("call")
    const answered = await api(`/v1/hosts/${host.host_id}/results`, {
      json: { session_id: call.data.session_id, sequence: call.data.sequence, ok: { answer: 7 } },
      headers: { authorization: `Bearer ${host.token}` }
    })
    expect(answered.status, answered.text).toBe(204)
    expect((await turn).status).toBe(200)
    expect((await endedCalls(id))[0]).toMatchObject({ outcome: "ok" })

    // A host with no GET stream, only a HEAD: its call is not held for a stream nobody reads
    // (the tool's deadline is far past the test's), it fails at once as not sent.
    const idle = await register()
    const alone = await fetch(server.url(`/v1/hosts/${idle.host_id}/commands`), { method: "HEAD", headers: { authorization: `Bearer ${idle.token}` } })
    expect(alone.status).toBe(200)
    const lonely = await create(idle.host_id, { timeout_ms: 3_600_000 })
    expect((await api(`/v1/sessions/${lonely}/messages`, { json: { input: { message: "go" } } })).status).toBe(200)
    const failed = ((await api(`/v1/sessions/${lonely}/events`)).body.events as Array<{ kind: string; data: any }>).filter((e) => e.kind === "tool_call_failed")
    expect(failed.map((e) => e.data)).toMatchObject([{
      outcome: "error",
      failure: { code: "environment_failed", ambiguous: false, details: { reason: "host_disconnected" } }
    }])
  })
})
