/**
 * docs/api.md, 400: a request body nesting objects and arrays deeper than MAX_JSON_DEPTH is refused
 * `invalid_request` before anything parses it, its issue naming where (the keys and indexes down to
 * the first object or array past the bound), and nothing is written — a create's free-form fields,
 * a turn's input, a host's result and Event (taken at the socket, then refused by the gate). Checked
 * on a real server process at 10,000 and 100,000 levels; it keeps serving.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { MAX_JSON_DEPTH } from "../../src/domain/Limits.js"
import { request, type RequestOptions, sharedServer } from "../support/server.js"

const JSON_TYPE = { "content-type": "application/json" }

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

const arrays = (levels: number) => `${"[".repeat(levels)}1${"]".repeat(levels)}`
const objects = (levels: number) => `${'{"k":'.repeat(levels)}1${"}".repeat(levels)}`
/** The path the refusal names: `prefix`, then the deep value's own keys or indexes down to the bound. */
const named = (prefix: ReadonlyArray<string | number>, segment: string | number) => [...prefix, ...Array(MAX_JSON_DEPTH - prefix.length).fill(segment)]

describe(`a request body nested deeper than MAX_JSON_DEPTH (${MAX_JSON_DEPTH})`, () => {
  const server = sharedServer()
  const call = (p: string, options: RequestOptions = {}) => request(server().baseUrl, p, options)

  it("is 400 invalid_request naming where, wherever it is, at 10,000 and 100,000 levels; nothing is written and the server keeps serving", async () => {
    const host = (await call("/v1/hosts", { method: "POST" })).body as { host_id: string; token: string }
    const session = (await call("/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id as string
    const before = await call("/v1/sessions?limit=1000")
    const files = snapshot(server().dataDir)
    const hostAuth = { ...JSON_TYPE, authorization: `Bearer ${host.token}` }
    for (const levels of [10_000, 100_000]) {
      const cases: ReadonlyArray<readonly [string, string, Record<string, string>, ReadonlyArray<string | number>]> = [
        ["/v1/sessions", `{"model":{"provider":"scripted","replies":[{"tool_calls":[{"name":"t","input":${arrays(levels)}}]}]}}`, JSON_TYPE, named(["model", "replies", 0, "tool_calls", 0, "input"], 0)],
        ["/v1/sessions", `{"model":{"provider":"scripted"},"tools":[{"name":"t","input_schema":${objects(levels)}}]}`, JSON_TYPE, named(["tools", 0, "input_schema"], "k")],
        ["/v1/sessions", `{"system":${arrays(levels)}}`, JSON_TYPE, named(["system"], 0)],
        [`/v1/sessions/${session}/messages`, `{"input":{"message":"x","media":[{"type":"t","v":${arrays(levels)}}]}}`, JSON_TYPE, named(["input", "media", 0, "v"], 0)],
        [`/v1/hosts/${host.host_id}/results`, `{"session_id":"${session}","sequence":5,"ok":${arrays(levels)}}`, hostAuth, named(["ok"], 0)],
        [`/v1/hosts/${host.host_id}/results`, `{"results":[{"session_id":"${session}","sequence":5,"ok":{"a":[1,${objects(levels)}]}}]}`, hostAuth, named(["results", 0, "ok", "a", 1], "k")],
        [`/v1/hosts/${host.host_id}/events`, `{"session_id":"${session}","sequence":5,"kind":"k","payload":${arrays(levels)}}`, hostAuth, named(["payload"], 0)]
      ]
      for (const [route, body, headers, where] of cases) {
        const what = `${levels}: ${body.slice(0, 100)}`
        const r = await call(route, { method: "POST", raw: body, headers })
        expect(r.status, `${what}: ${r.text.slice(0, 300)}`).toBe(400)
        expect(r.body.code, what).toBe("invalid_request")
        expect(r.body.message, what).toContain(`nests deeper than ${MAX_JSON_DEPTH} levels`)
        expect(r.body.details[0].path, what).toEqual(where)
      }
    }
    expect((await call("/v1/sessions?limit=1000")).body).toEqual(before.body)
    expect(snapshot(server().dataDir)).toEqual(files)
    expect((await call("/health/live")).status).toBe(204)
  })
})
