/**
 * docs/api.md, 400: a number beyond a double's range (`1e400`, which JSON.parse reads as Infinity
 * and JSON writes as `null`) anywhere in a request body is refused `invalid_request`, its issue
 * naming where it is, and nothing is written — in free-form JSON (a tool's `input_schema`, a
 * scripted call's `input`, a transcript part, a host's result or Event payload) as in a typed
 * field. Never kept as `null`, a value of another type than the one sent. Numbers within a
 * double's range are taken as doubles. Checked on a real server process, through the gate and
 * through the routes taken at the socket (a host's results).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { type Reply, request, type RequestOptions, sharedServer } from "../support/server.js"

const JSON_TYPE = { "content-type": "application/json" }

/** A 400 invalid_request whose first issue has `where` as its path. */
const expectRefusedAt = (r: Reply, where: ReadonlyArray<string | number>, what: string) => {
  expect(r.status, `${what}: ${r.text}`).toBe(400)
  expect(r.body?.code, what).toBe("invalid_request")
  expect(r.body?.details?.[0]?.path, `${what}: ${r.text}`).toEqual(where)
  expect(r.body?.message, what).toMatch(/double/)
}

/** Every file under `dir` with its size: what a refusal must leave as it was. */
const snapshot = (dir: string): Record<string, number> => {
  const out: Record<string, number> = {}
  const walk = (d: string) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, entry.name)
      if (entry.isDirectory()) walk(p)
      else if (!p.includes("idempotency")) out[path.relative(dir, p)] = fs.statSync(p).size
    }
  }
  walk(dir)
  return out
}

describe("a number beyond a double's range in a request body is refused where it is, never kept as null", () => {
  const server = sharedServer()
  const call = (p: string, options: RequestOptions = {}) => request(server().baseUrl, p, options)

  it("in a create's free-form JSON (a tool's input_schema, a scripted call's input, a transcript part) and in a typed field: 400 naming where, and no session made", async () => {
    const before = await call("/v1/sessions?limit=1000")
    const files = snapshot(server().dataDir)
    const cases: ReadonlyArray<readonly [string, ReadonlyArray<string | number>]> = [
      ['{"model":{"provider":"scripted"},"tools":[{"name":"t","input_schema":{"type":"object","maximum":1e400}}]}', ["tools", 0, "input_schema", "maximum"]],
      ['{"model":{"provider":"scripted","replies":[{"tool_calls":[{"name":"t","input":{"n":[1,-1E+400]}}]}]},"tools":[{"name":"t","input_schema":{"type":"object"}}]}', ["model", "replies", 0, "tool_calls", 0, "input", "n", 1]],
      ['{"model":{"provider":"scripted"},"transcript":[{"role":"user","content":[{"type":"text","text":"a","v":1e400}]}]}', ["transcript", 0, "content", 0, "v"]],
      [`{"model":{"provider":"scripted"},"idle_ttl_ms":${"9".repeat(400)}}`, ["idle_ttl_ms"]]
    ]
    for (const [body, where] of cases) expectRefusedAt(await call("/v1/sessions", { raw: body, headers: JSON_TYPE }), where, body.slice(0, 120))
    expect((await call("/v1/sessions?limit=1000")).body).toEqual(before.body)
    expect(snapshot(server().dataDir)).toEqual(files)
  })

  it("numbers within a double's range in free-form JSON are taken, as doubles", async () => {
    const r = await call("/v1/sessions", {
      raw: '{"model":{"provider":"scripted"},"tools":[{"name":"t","input_schema":{"type":"object","maximum":1e308,"m":1.50,"big":12345678901234567890123,"s":"1e400"}}]}',
      headers: JSON_TYPE
    })
    expect(r.status, r.text).toBe(201)
    const page = await call(`/v1/sessions/${r.body.session_id}/events?limit=1`)
    expect(page.text).toContain('"input_schema":{"type":"object","maximum":1e+308,"m":1.5,"big":1.2345678901234568e+22,"s":"1e400"}')
  })

  it("in a host's result (taken at the socket) and a host's Event payload: 400 naming where, before the call is looked for", async () => {
    const host = (await call("/v1/hosts", { method: "POST" })).body as { host_id: string; token: string }
    const asHost = (route: string, raw: string) =>
      call(`/v1/hosts/${host.host_id}/${route}`, { raw, headers: { ...JSON_TYPE, authorization: `Bearer ${host.token}` } })
    const call0 = '"session_id":"ses_00000000000000000000000000","sequence":1'
    expectRefusedAt(await asHost("results", `{${call0},"ok":{"x":1e400}}`), ["ok", "x"], "a result")
    expectRefusedAt(await asHost("results", `{"results":[{${call0},"ok":1},{${call0},"error":[1e999]}]}`), ["results", 1, "error", 0], "a batch")
    expectRefusedAt(await asHost("events", `{${call0},"kind":"progress","payload":{"done":-1e400}}`), ["payload", "done"], "an Event")
    // Within range, the same bodies reach the call's check.
    expect((await asHost("results", `{${call0},"ok":{"x":1e300}}`)).status).toBe(409)
  })
})
