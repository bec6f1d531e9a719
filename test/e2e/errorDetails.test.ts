/**
 * docs/api.md, Errors: every 400 `invalid_request` carries `details`. A request that is not well
 * formed — its body (not JSON, not UTF-8, nested too deep, a body on a route that takes none,
 * unknown fields, wrong types), its path parameters, its query, its headers, or a value the
 * server cannot take (an unknown model binding, Agentloop or module, a bad Environment) — lists
 * its issues, each `{path, message}`; a well-formed request the state refuses says what it knows
 * as an object (a cursor past the end: `{last_sequence}`; a host's Event of a reserved kind:
 * `{reason}`). Checked on a real server process, route class by route class, and on the raw
 * answer Node's parser gives a request it cannot read.
 */
import * as net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { type Reply, request, type RequestOptions, sharedServer } from "../support/server.js"

const JSON_TYPE = { "content-type": "application/json" }
const SCRIPTED = { model: { provider: "scripted" } }

/** A 400 invalid_request whose `details` lists issues, each with a path (an array) and a message. */
const expectIssues = (r: Reply, what: string) => {
  expect(r.status, `${what}: ${r.text}`).toBe(400)
  expect(r.body?.code, what).toBe("invalid_request")
  const details = r.body?.details
  expect(Array.isArray(details) && details.length > 0, `${what}: details lists the issues: ${r.text}`).toBe(true)
  for (const issue of details) {
    expect(Array.isArray(issue.path), `${what}: an issue has a path: ${r.text}`).toBe(true)
    expect(typeof issue.message === "string" && issue.message.length > 0, `${what}: an issue has a message: ${r.text}`).toBe(true)
  }
  return details as Array<{ readonly path: Array<string | number>; readonly message: string }>
}

describe("every 400 carries the details docs/api.md promises", () => {
  const server = sharedServer()
  const call = (p: string, options: RequestOptions = {}) => request(server().baseUrl, p, options)
  const created = async () => {
    const r = await call("/v1/sessions", { json: SCRIPTED })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }

  it("bodies: malformed JSON, a body that is not UTF-8, JSON nested too deep, a body on a route that takes none, unknown fields and wrong types each list their issues", async () => {
    const id = await created()
    expectIssues(await call("/v1/sessions", { raw: "{", headers: JSON_TYPE }), "malformed JSON")
    expectIssues(await call("/v1/sessions", { raw: new Uint8Array([0x7b, 0xff, 0x7d]), headers: JSON_TYPE }), "not UTF-8")
    expectIssues(await call("/v1/sessions", { raw: "[".repeat(70) + "]".repeat(70), headers: JSON_TYPE }), "nested too deep")
    const unexpected = expectIssues(await call(`/v1/sessions/${id}/cancel`, { json: { force: true } }), "a body on cancel")
    expect(unexpected.map((i) => i.path)).toEqual([["force"]])
    expectIssues(await call(`/v1/sessions/${id}/end`, { json: [1] }), "an array on end")
    const unknown = expectIssues(await call("/v1/sessions", { json: { ...SCRIPTED, colour: "red" } }), "an unknown field")
    expect(unknown.map((i) => i.path)).toEqual([["colour"]])
    expectIssues(await call(`/v1/sessions/${id}/messages`, { json: { input: { message: 7 } } }), "a wrong type in a send")
    expectIssues(await call(`/v1/sessions/${id}/messages`, { raw: "{", headers: JSON_TYPE }), "malformed JSON in a send")
  })

  it("values the server cannot take in a create: an unknown model binding, Agentloop or tool module, and Environments it refuses", async () => {
    expectIssues(await call("/v1/sessions", { json: { model: "no-such-binding" } }), "an unknown model binding")
    expectIssues(await call("/v1/sessions", { json: { ...SCRIPTED, agentloop: "no-such-loop" } }), "an unknown agentloop")
    expectIssues(
      await call("/v1/sessions", {
        json: { ...SCRIPTED, tools: [{ name: "t", input_schema: { type: "object" }, module: "0".repeat(64) }] }
      }),
      "an unknown tool module"
    )
    expectIssues(
      await call("/v1/sessions", {
        json: { ...SCRIPTED, environments: [{ name: "a", driver: "http", binding: "nowhere" }] }
      }),
      "an Environment binding that is not configured"
    )
  })

  it("a malformed id the router cannot take as a parameter (over 100 characters, percent-encoding that does not decode to UTF-8) is 400 naming the id on every id route, not 404", async () => {
    const ids = ["ses_" + "0".repeat(97), "host_" + "0".repeat(120), "%zz", "%C0%AF", "%ED%A0%80"]
    const routes = (x: string): ReadonlyArray<readonly [string, string]> => [
      ["GET", `/v1/sessions/${x}`],
      ["GET", `/v1/sessions/${x}/events`],
      ["GET", `/v1/sessions/${x}/transcript`],
      ["POST", `/v1/sessions/${x}/cancel`],
      ["POST", `/v1/sessions/${x}/end`],
      ["DELETE", `/v1/sessions/${x}`],
      ["GET", `/v1/hosts/${x}/commands`],
      ["DELETE", `/v1/hosts/${x}`],
      ["DELETE", `/v1/agentloops/${x}`]
    ]
    for (const x of ids) {
      for (const [method, p] of routes(x)) {
        const issues = expectIssues(await call(p, { method, headers: { authorization: "Bearer x" } }), `${method} ${p}`)
        expect(issues[0]!.path, `${method} ${p}`).toEqual(["id"])
      }
    }
  })

  it("path parameters, query and headers: a malformed session, module or host id, a bad or unknown query key, a bad Idempotency-Key or Last-Event-ID each list their issues", async () => {
    const id = await created()
    expect(expectIssues(await call("/v1/sessions/nope"), "a malformed session id")[0]!.path).toEqual(["id"])
    expectIssues(await call("/v1/agentloops/nope", { method: "DELETE" }), "a malformed module id")
    expectIssues(await call("/v1/hosts/nope", { method: "DELETE" }), "a malformed host id")
    expect(expectIssues(await call(`/v1/sessions/${id}/events?after=-1`), "a bad cursor")[0]!.path).toEqual(["after"])
    expect(expectIssues(await call(`/v1/sessions/${id}/events?colour=red`), "an unknown query key")[0]!.path).toEqual(["colour"])
    expectIssues(await call("/v1/sessions?limit=0"), "a bad page size")
    const key = expectIssues(await call(`/v1/sessions/${id}/end`, { method: "POST", headers: { "idempotency-key": "k".repeat(257) } }), "a long key")
    expect(key[0]!.path).toEqual(["idempotency-key"])
    expectIssues(await call("/v1/hosts", { method: "POST", headers: { "idempotency-key": "k".repeat(257) } }), "a long key on a host route")
    const lastId = expectIssues(
      await call(`/v1/sessions/${id}/events`, { headers: { accept: "text/event-stream", "last-event-id": "seven" } }),
      "a bad Last-Event-ID"
    )
    expect(lastId.map((i) => i.path)).toEqual([["last-event-id"]])
  })

  it("a bad path parameter, query value or header is refused with a one-line message naming each offending parameter, and one issue per mistake (an optional value's \"Expected undefined\" is not a second one)", async () => {
    const id = await created()
    const cases: ReadonlyArray<readonly [string, Reply, string]> = [
      ["a malformed session id", await call("/v1/sessions/nope"), "id"],
      ["a malformed module id", await call("/v1/agentloops/official", { method: "DELETE" }), "id"],
      ["a malformed host id", await call("/v1/hosts/nope", { method: "DELETE" }), "id"],
      ["a page size of 0", await call("/v1/sessions?limit=0"), "limit"],
      ["a negative cursor", await call(`/v1/sessions/${id}/events?after=-1`), "after"],
      ["an unknown query key", await call(`/v1/sessions/${id}/events?colour=red`), "colour"],
      ["a long key", await call(`/v1/sessions/${id}/end`, { method: "POST", headers: { "idempotency-key": "k".repeat(257) } }), "idempotency-key"],
      ["a key that is not ASCII", await call(`/v1/sessions/${id}/cancel`, { method: "POST", headers: { "idempotency-key": "caf\u00e9" } }), "idempotency-key"],
      ["a long key on a host route", await call("/v1/hosts", { method: "POST", headers: { "idempotency-key": "k".repeat(257) } }), "idempotency-key"]
    ]
    for (const [what, reply, parameter] of cases) {
      const issues = expectIssues(reply, what)
      expect(issues.map((i) => i.path), `${what}: ${reply.text}`).toEqual([[parameter]])
      const message = reply.body.message as string
      expect(message, what).not.toMatch(/\n/)
      expect(message, what).not.toMatch(/readonly|└─|Expected undefined/)
      expect(message, what).toBe(`${parameter}: ${issues[0]!.message}`)
    }
  })

  it("every /v1 route refuses a query key it does not take with 400 invalid_request naming the key, and does nothing; /health and /openapi.json take no input and ignore a query", async () => {
    const id = await created()
    const hostReply = await call("/v1/hosts", { method: "POST" })
    expect(hostReply.status, hostReply.text).toBe(201)
    const host = hostReply.body as { host_id: string; token: string }
    const asHost = { authorization: `Bearer ${host.token}` }
    const before = (await call(`/v1/sessions/${id}`)).body.last_sequence as number
    const sessionsBefore = (await call("/v1/sessions?limit=1000")).body.sessions.length as number
    const routes: ReadonlyArray<readonly [string, string, RequestOptions]> = [
      ["GET", `/v1/sessions/${id}?bogus=1`, {}],
      ["GET", `/v1/sessions/${id}/transcript?after=5`, {}],
      ["GET", "/v1/agentloops?bogus=1", {}],
      ["POST", "/v1/sessions?bogus=1", { json: SCRIPTED }],
      ["POST", `/v1/sessions/${id}/messages?bogus=1`, { json: { input: { message: "hi" } } }],
      ["POST", `/v1/sessions/${id}/cancel?bogus=1`, {}],
      ["POST", `/v1/sessions/${id}/end?bogus=1`, {}],
      ["DELETE", `/v1/sessions/${id}?bogus=1`, {}],
      ["POST", "/v1/agentloops?bogus=1", { raw: "not wasm", headers: { "content-type": "application/wasm" } }],
      ["DELETE", `/v1/agentloops/${"0".repeat(64)}?bogus=1`, {}],
      ["POST", "/v1/hosts?bogus=1", {}],
      ["GET", `/v1/hosts/${host.host_id}/commands?bogus=1`, { headers: asHost }],
      ["POST", `/v1/hosts/${host.host_id}/results?bogus=1`, { json: { session_id: id, sequence: 1, ok: 1 }, headers: asHost }],
      ["POST", `/v1/hosts/${host.host_id}/events?bogus=1`, { json: { session_id: id, sequence: 1, kind: "k", payload: {} }, headers: asHost }],
      ["DELETE", `/v1/hosts/${host.host_id}?bogus=1`, { headers: asHost }]
    ]
    for (const [method, p, options] of routes) {
      const what = `${method} ${p}`
      const issues = expectIssues(await call(p, { ...options, method }), what)
      expect(issues.map((i) => i.path), what).toEqual([[p.includes("after=5") ? "after" : "bogus"]])
    }
    expect((await call(`/v1/sessions/${id}`)).body).toMatchObject({ status: "idle", last_sequence: before })
    expect((await call("/v1/sessions?limit=1000")).body.sessions.length).toBe(sessionsBefore)
    // The host is still registered: its removal with its token is answered 204.
    expect((await call(`/v1/hosts/${host.host_id}`, { method: "DELETE", headers: asHost })).status).toBe(204)
    // Routes that take a query still take theirs, and refuse the others by name.
    expect((await call(`/v1/sessions?limit=1`)).status).toBe(200)
    expect((await call(`/v1/sessions/${id}/events?after=0&limit=1`)).status).toBe(200)
    for (const p of ["/health/live?probe=1", "/health/ready?probe=1"]) expect((await call(p)).status, p).toBe(204)
    expect((await call("/openapi.json?v=1")).status).toBe(200)
  })

  it("a module upload that is not a module lists its issue", async () => {
    expectIssues(await call("/v1/agentloops", { raw: "not wasm", headers: { "content-type": "application/wasm" } }), "not Wasm")
  })

  it("a well-formed request the state refuses says what it knows as an object: a cursor past the end names the last sequence", async () => {
    const id = await created()
    const past = await call(`/v1/sessions/${id}/events?after=1000`)
    expect(past.status, past.text).toBe(400)
    expect(past.body).toMatchObject({ code: "invalid_request", details: { last_sequence: 2 } })
  })

  it("a request Node cannot parse is answered 400 invalid_request with its issue, in the same body", async () => {
    const url = new URL(server().baseUrl)
    const text = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(url.port), url.hostname, () => socket.write("NOT A REQUEST\r\n\r\n"))
      let got = ""
      socket.setEncoding("utf8")
      socket.on("data", (c: string) => void (got += c))
      socket.on("end", () => resolve(got))
      socket.on("error", reject)
    })
    expect(text.split("\r\n")[0]).toBe("HTTP/1.1 400 Bad Request")
    const body = JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4))
    expect(body).toMatchObject({ code: "invalid_request", retryable: false })
    expect(body.details).toEqual([{ path: [], message: body.message }])
  })
})
