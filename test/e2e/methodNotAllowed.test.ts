/**
 * A method a path does not take (RFC 9110 §15.5.6): 405 `method_not_allowed` in Brain's error body,
 * with an `Allow` header (and `details.allow`) naming the methods the path takes, answered before
 * the body is read or checked and after the token is; an unknown path stays 404 `not_found`.
 * Checked on a real server process with an API token.
 */
import { describe, expect, it } from "@effect/vitest"
import { type Reply, request, type RequestOptions, sharedServer } from "../support/server.js"

const TOKEN = "method-not-allowed-token"
const MODULE_ID = "0".repeat(64)
const HOST_ID = `host_${"0".repeat(26)}`

const expectNotAllowed = (r: Reply, allow: ReadonlyArray<string>, what: string) => {
  expect(r.status, `${what}: ${r.text}`).toBe(405)
  expect(r.headers.get("allow"), what).toBe(allow.join(", "))
  expect(r.headers.get("content-type") ?? "", what).toMatch(/^application\/json/)
  expect(r.body, what).toEqual({ code: "method_not_allowed", message: expect.any(String), retryable: false, details: { allow } })
}

describe("a method the path does not take is 405 with Allow", () => {
  const server = sharedServer({ env: { BRAIN_API_TOKEN: TOKEN } })
  const call = (p: string, options: RequestOptions = {}) =>
    request(server().baseUrl, p, { ...options, headers: { authorization: `Bearer ${TOKEN}`, ...options.headers } })
  const created = async () => {
    const r = await call("/v1/sessions", { json: { model: { provider: "scripted" } } })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }

  it("every route's path answers another method with 405 and the methods it takes; HEAD is taken wherever GET is", async () => {
    const id = await created()
    expectNotAllowed(await call(`/v1/sessions/${id}`, { method: "PUT" }), ["DELETE", "GET", "HEAD"], "PUT a session")
    expectNotAllowed(await call(`/v1/sessions/${id}/messages`), ["POST"], "GET messages")
    expectNotAllowed(await call(`/v1/sessions/${id}/events`, { method: "DELETE" }), ["GET", "HEAD"], "DELETE events")
    expectNotAllowed(await call(`/v1/sessions/${id}/transcript`, { method: "POST" }), ["GET", "HEAD"], "POST transcript")
    expectNotAllowed(await call(`/v1/sessions/${id}/cancel`), ["POST"], "GET cancel")
    expectNotAllowed(await call(`/v1/sessions/${id}/end`, { method: "DELETE" }), ["POST"], "DELETE end")
    expectNotAllowed(await call("/v1/sessions", { method: "OPTIONS" }), ["GET", "HEAD", "POST"], "OPTIONS sessions")
    expectNotAllowed(await call("/v1/sessions", { method: "DELETE" }), ["GET", "HEAD", "POST"], "DELETE sessions")
    expectNotAllowed(await call("/v1/agentloops", { method: "PUT" }), ["GET", "HEAD", "POST"], "PUT agentloops")
    expectNotAllowed(await call(`/v1/agentloops/${MODULE_ID}`), ["DELETE"], "GET a module")
    expectNotAllowed(await call("/v1/hosts"), ["POST"], "GET hosts")
    expectNotAllowed(await call(`/v1/hosts/${HOST_ID}`, { method: "PATCH" }), ["DELETE"], "PATCH a host")
    expectNotAllowed(await call(`/v1/hosts/${HOST_ID}/commands`, { method: "POST" }), ["GET", "HEAD"], "POST commands")
    expectNotAllowed(await call(`/v1/hosts/${HOST_ID}/results`), ["POST"], "GET results")
    expectNotAllowed(await call(`/v1/hosts/${HOST_ID}/events`, { method: "PUT" }), ["POST"], "PUT a host's events")
    expectNotAllowed(await call("/health/live", { method: "POST" }), ["GET", "HEAD"], "POST health")
    expectNotAllowed(await call("/openapi.json", { method: "DELETE" }), ["GET", "HEAD"], "DELETE openapi")
    expectNotAllowed(await call(`/v1/sessions/${id}/messages/`), ["POST"], "a trailing slash")
    expect((await call(`/v1/sessions/${id}`, { method: "HEAD" })).status).toBe(200)
    expect((await call("/health/live", { method: "HEAD" })).status).toBe(204)
  })

  it("the 405 comes before the body is read or checked, and changes nothing", async () => {
    const id = await created()
    const before = (await call(`/v1/sessions/${id}`)).body.last_sequence
    expectNotAllowed(
      await call(`/v1/sessions/${id}`, { method: "PUT", raw: "not json", headers: { "content-type": "text/plain" } }),
      ["DELETE", "GET", "HEAD"],
      "a body of another media type"
    )
    expectNotAllowed(
      await call(`/v1/sessions/${id}/events`, { method: "PATCH", raw: "{", headers: { "content-type": "application/json" } }),
      ["GET", "HEAD"],
      "malformed JSON"
    )
    expect((await call(`/v1/sessions/${id}`)).body.last_sequence).toBe(before)
  })

  it("the token is checked first, and an unknown path is still 404 not_found", async () => {
    const id = await created()
    const anonymous = await request(server().baseUrl, `/v1/sessions/${id}`, { method: "PUT" })
    expect(anonymous.status, anonymous.text).toBe(401)
    for (const path of ["/v1/nowhere", `/v1/sessions/${id}/nothing`, "/v1/sessions/a/b/c/d"]) {
      for (const method of ["GET", "PUT"]) {
        const r = await call(path, { method })
        expect(r.status, `${method} ${path}: ${r.text}`).toBe(404)
        expect(r.body.code).toBe("not_found")
        expect(r.headers.get("allow")).toBeNull()
      }
    }
  })
})
