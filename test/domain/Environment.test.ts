/**
 * Environments' configuration (docs/environments.md): what a create body may declare, how it is
 * admitted against the tools and the bindings, BRAIN_ENVIRONMENTS and every way it is refused —
 * naming the source, the field and the reason, never quoting a value — and the protocol's answers.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as readline from "node:readline"
import { describe, expect, it } from "@effect/vitest"
import { Either, Redacted, Schema } from "effect"
import {
  AdmittedEnvironment,
  admitEnvironments,
  bindingsSetting,
  type EnvironmentBindings,
  EnvironmentDeclaration,
  noEnvironmentBindings,
  parseEnvironmentBindings,
  placeOf,
  readAnswer,
  readCancelAnswer,
  sameBaseUrl
} from "../../src/domain/Environment.js"

const SECRET = "tok-0123456789abcdef-SECRET"
const inline = (value: unknown) => ({ source: "BRAIN_ENVIRONMENTS (inline JSON)", text: JSON.stringify(value) })
const envOf = (vars: Record<string, string>) => (name: string) => vars[name]
const decodeDeclaration = Schema.decodeUnknownEither(EnvironmentDeclaration, { onExcessProperty: "error" })

const bindings = (value: unknown, vars: Record<string, string> = {}): EnvironmentBindings =>
  Either.getOrThrow(parseEnvironmentBindings(inline(value), envOf(vars)))

const refusal = (value: unknown, vars: Record<string, string> = {}) => {
  const result = parseEnvironmentBindings(inline(value), envOf(vars))
  if (Either.isRight(result)) throw new Error(`accepted ${JSON.stringify(value)}`)
  return result.left
}

describe("environment declarations", () => {
  it("each driver decodes with its own fields; an http Environment needs a binding and the others refuse one", () => {
    expect(Either.isRight(decodeDeclaration({ name: "sandbox", driver: "http", binding: "sandboxes", options: { image: "py" } }))).toBe(true)
    expect(Either.isRight(decodeDeclaration({ name: "wasm", driver: "brain" }))).toBe(true)
    expect(Either.isRight(decodeDeclaration({ name: "app", driver: "host", host: "host_01hzzzzzzzzzzzzzzzzzzzzzzz" }))).toBe(true)
    expect(Either.isLeft(decodeDeclaration({ name: "app", driver: "host" }))).toBe(true)
    expect(Either.isLeft(decodeDeclaration({ name: "app", driver: "host", host: "not-a-host-id" }))).toBe(true)
    expect(Either.isLeft(decodeDeclaration({ name: "sandbox", driver: "http" }))).toBe(true)
    expect(Either.isLeft(decodeDeclaration({ name: "wasm", driver: "brain", binding: "sandboxes" }))).toBe(true)
    expect(Either.isLeft(decodeDeclaration({ name: "x", driver: "docker" }))).toBe(true)
    expect(Either.isLeft(decodeDeclaration({ name: "bad name", driver: "host", host: "host_01hzzzzzzzzzzzzzzzzzzzzzzz" }))).toBe(true)
    // A credential has no place in a create body.
    expect(Either.isLeft(decodeDeclaration({ name: "s", driver: "http", binding: "b", token: SECRET }))).toBe(true)
  })

  it("an admitted http Environment records where its binding pointed, and a recorded one without it is refused", () => {
    const b = bindings({ sandboxes: { driver: "http", base_url: "https://envs.example.com/v1/", token_env: "T" } }, { T: SECRET })
    const admitted = Either.getOrThrow(admitEnvironments(
      [{ name: "sandbox", driver: "http", binding: "sandboxes" }, { name: "wasm", driver: "brain" }],
      [{ name: "run", environment: "sandbox" }, { name: "count", module: "a".repeat(64), environment: "wasm" }],
      b
    ))
    expect(admitted).toEqual([
      { name: "sandbox", driver: "http", binding: "sandboxes", resolved: { base_url: "https://envs.example.com/v1", lifecycle_timeout_ms: 60_000 } },
      { name: "wasm", driver: "brain" }
    ])
    expect(JSON.stringify(admitted)).not.toContain(SECRET)
    const decodeAdmitted = Schema.decodeUnknownEither(AdmittedEnvironment, { onExcessProperty: "error" })
    expect(Either.isRight(decodeAdmitted(admitted[0]))).toBe(true)
    expect(Either.isLeft(decodeAdmitted({ name: "sandbox", driver: "http", binding: "sandboxes" }))).toBe(true)
  })

  it("a binding's base_url is held as the URL parser writes it, so a respelling of the same URL records the same place", () => {
    const spellings = ["https://envs.example.com/v1", "HTTPS://ENVS.Example.COM:443/v1/", "https://envs.example.com/./v1//"]
    const recorded = spellings.map((base_url) => {
      const b = bindings({ sandboxes: { driver: "http", base_url } })
      const [admitted] = Either.getOrThrow(admitEnvironments([{ name: "sandbox", driver: "http", binding: "sandboxes" }], [], b))
      return admitted!.driver === "http" ? admitted!.resolved.base_url : undefined
    })
    expect(recorded).toEqual(spellings.map(() => "https://envs.example.com/v1"))
  })

  it("a recorded base_url and a binding's are the same place when they parse to the same URL, whatever the spelling of either", () => {
    expect(sameBaseUrl("HTTP://127.0.0.1:80/brain/v1/", "http://127.0.0.1/brain/v1")).toBe(true)
    expect(sameBaseUrl("https://Envs.Example.com/v1", "https://envs.example.com:443/v1/")).toBe(true)
    expect(sameBaseUrl("https://envs.example.com/v1", "https://envs.example.com/v2")).toBe(false)
    expect(sameBaseUrl("https://envs.example.com/v1", "http://envs.example.com/v1")).toBe(false)
    expect(sameBaseUrl("https://envs.example.com/v1", "https://envs.example.com:8443/v1")).toBe(false)
    expect(sameBaseUrl("https://envs.example.com/V1", "https://envs.example.com/v1")).toBe(false)
  })

  it("admission refuses duplicate names, unknown bindings (listing the configured ones) and tools an Environment cannot run", () => {
    const b = bindings({ sandboxes: { driver: "http", base_url: "http://127.0.0.1:9" } })
    const refused = (envs: ReadonlyArray<EnvironmentDeclaration>, tools: ReadonlyArray<{ name: string; environment?: string; module?: string }>, using = b) =>
      Either.getLeft(admitEnvironments(envs, tools, using)).pipe((o) => (o._tag === "Some" ? o.value : "admitted"))
    const http = { name: "s", driver: "http", binding: "sandboxes" } as const
    const wasm = { name: "w", driver: "brain" } as const
    expect(refused([wasm, { ...wasm }], [])).toMatch(/two Environments are named "w"/)
    expect(refused([{ ...http, binding: "nope" }], [])).toMatch(/no environment binding named "nope"; the configured bindings are "sandboxes"/)
    expect(refused([{ ...http, binding: "nope" }], [], noEnvironmentBindings)).toMatch(/no bindings are configured \(BRAIN_ENVIRONMENTS\)/)
    expect(refused([http], [{ name: "t", environment: "elsewhere" }])).toMatch(/does not declare/)
    expect(refused([http], [{ name: "t", module: "a".repeat(64), environment: "s" }])).toMatch(/runs only in a "brain" Environment/)
    expect(refused([wasm], [{ name: "t", environment: "w" }])).toMatch(/needs a "module"/)
    expect(refused([http, wasm], [{ name: "t", environment: "s" }, { name: "u" }])).toBe("admitted")
  })

  it("a call goes where its tool's Environment is; a Wasm tool naming none runs built in; any other has no place", () => {
    const envs: ReadonlyArray<AdmittedEnvironment> = [{ name: "w", driver: "brain" }]
    expect(placeOf(envs, { name: "t", environment: "w" })).toEqual(envs[0])
    expect(placeOf(envs, { name: "t", module: "a".repeat(64) })).toBe("builtin")
    expect(placeOf(envs, { name: "t" })).toBe("none")
  })
})

describe("BRAIN_ENVIRONMENTS", () => {
  it("inline JSON loads each binding with its secrets Redacted from the variables it names, sorted by name", () => {
    const b = bindings({
      sandboxes: { driver: "http", base_url: "https://envs.example.com", token_env: "T", lifecycle_timeout_ms: 300_000 },
      gateway: { driver: "http", base_url: "http://10.0.0.7:8080", headers_env: { "X-Api-Key": "K" } }
    }, { T: SECRET, K: "key-value" })
    expect(b.names).toEqual(["gateway", "sandboxes"])
    expect(Redacted.value(b.get("sandboxes")!.token!)).toBe(SECRET)
    expect(b.get("gateway")!.token).toBeUndefined()
    expect(b.get("gateway")!.headers.map(([h, v]) => [h, Redacted.value(v)])).toEqual([["x-api-key", "key-value"]])
    expect(String(b.get("sandboxes")!.token)).not.toContain(SECRET)
    expect(b.get("nope")).toBeUndefined()
  })

  it("the setting is inline JSON when it starts with { or [, a file's path otherwise", () => {
    expect(bindingsSetting(' {"a": 1}')._tag).toBe("inline")
    expect(bindingsSetting("[]")._tag).toBe("inline")
    expect(bindingsSetting("/etc/brain/environments.json")).toEqual({ _tag: "file", source: "/etc/brain/environments.json", path: "/etc/brain/environments.json" })
  })

  it("each unusable binding is refused with the source, the field and the reason, and no value is ever quoted", () => {
    const ok = { driver: "http", base_url: "https://e.example.com" }
    const cases: Array<[unknown, Record<string, string>, string, RegExp]> = [
      [{ a: { ...ok, token: SECRET } }, {}, "a.token", /never holds a secret; .*token_env/],
      [{ a: { ...ok, driver: "grpc" } }, {}, "a.driver", /http/],
      [{ a: { driver: "http" } }, {}, "a.base_url", /missing/i],
      [{ a: { ...ok, base_url: `https://user:${SECRET}@e.example.com` } }, {}, "a.base_url", /must not hold credentials/],
      [{ a: { ...ok, base_url: `https://e.example.com/?key=${SECRET}` } }, {}, "a.base_url", /no query or fragment/],
      [{ a: { ...ok, base_url: `ftp://${SECRET}` } }, {}, "a.base_url", /http/],
      [{ a: { ...ok, base_url: SECRET } }, {}, "a.base_url", /absolute/],
      [{ a: { ...ok, token_env: "NOT_SET_ANYWHERE" } }, {}, "a.token_env", /NOT_SET_ANYWHERE is not set/],
      [{ a: { ...ok, token_env: "T" } }, { T: "" }, "a.token_env", /T is empty/],
      [{ a: { ...ok, token_env: "T" } }, { T: `${SECRET}\r\nX-Evil: 1` }, "a.token_env", /cannot carry/],
      [{ a: { ...ok, headers_env: { "Content-Type": "K" } } }, { K: SECRET }, "a.headers_env.Content-Type", /sets this header itself/],
      [{ a: { ...ok, headers_env: { "Accept-Encoding": "K" } } }, { K: SECRET }, "a.headers_env.Accept-Encoding", /sets this header itself/],
      [{ a: { ...ok, token_env: "T", headers_env: { Authorization: "K" } } }, { T: SECRET, K: SECRET }, "a.headers_env.Authorization", /token_env already sets/],
      [{ a: { ...ok, headers_env: { "X-K": "K", "x-k": "K" } } }, { K: SECRET }, "a.headers_env.x-k", /named twice/],
      [{ a: { ...ok, lifecycle_timeout_ms: 0 } }, {}, "a.lifecycle_timeout_ms", /1/],
      [{ "bad name!": ok }, {}, "bad name!", /binding name/],
      [[1, 2], {}, "", /JSON object/]
    ]
    for (const [value, vars, field, reason] of cases) {
      const e = refusal(value, vars)
      expect(e.source, field).toBe("BRAIN_ENVIRONMENTS (inline JSON)")
      expect(e.field, JSON.stringify(value)).toBe(field)
      expect(e.reason, field).toMatch(reason)
      expect(e.message, field).not.toContain(SECRET)
    }
    expect(parseEnvironmentBindings({ source: "f.json", text: `{"a": ${SECRET}` }, envOf({})).pipe(Either.getLeft)).toMatchObject({
      _tag: "Some",
      value: { source: "f.json", field: "(file)", reason: "not JSON" }
    })
    // Inline JSON that is not JSON is named as inline, not as a file.
    const inline = parseEnvironmentBindings({ source: "BRAIN_ENVIRONMENTS (inline JSON)", text: "{not json" }, envOf({})).pipe(Either.getLeft)
    expect(inline._tag === "Some" && inline.value.message).toBe("BRAIN_ENVIRONMENTS (inline JSON): not JSON")
  })
})

describe("the http protocol", () => {
  it("a 200 answer is an object with exactly one member, ok or error; a cancel answer is exactly {stopped: boolean}", () => {
    expect(readAnswer({ ok: null })).toEqual({ ok: null })
    expect(readAnswer({ error: { message: "no" } })).toEqual({ error: { message: "no" } })
    for (const bad of [{}, { ok: 1, error: 2 }, { ok: 1, extra: 2 }, { result: 1 }, [], null, "ok", 3]) expect(readAnswer(bad)).toBeUndefined()
    expect(readCancelAnswer({ stopped: true })).toBe(true)
    expect(readCancelAnswer({ stopped: false })).toBe(false)
    for (const bad of [{}, { stopped: "yes" }, { stopped: true, why: 1 }, null]) expect(readCancelAnswer(bad)).toBeUndefined()
  })

  it("the OpenAPI document is valid JSON with exactly the endpoints docs/environments.md lists, and the doc's binding example loads", () => {
    const doc = fs.readFileSync(new URL("../../docs/environments.md", import.meta.url), "utf8")
    const api = JSON.parse(fs.readFileSync(new URL("../../docs/environments.openapi.json", import.meta.url), "utf8"))
    expect(api.openapi).toBe("3.1.0")
    const listed = [...doc.matchAll(/^\| `(\/[a-z/]+)` \|/gm)].map((m) => m[1])
    expect(Object.keys(api.paths)).toEqual(listed)
    const example = doc.slice(doc.indexOf("## Bindings")).match(/```json\n([\s\S]*?)```/)![1]!
    expect(bindings(JSON.parse(example), { SANDBOX_TOKEN: SECRET, GATEWAY_KEY: SECRET }).names).toEqual(["gateway", "sandboxes"])
  })

  it("the fake Environment counts every request by {session_id, sequence}, refuses a repeat and a call cancelled before it came", async () => {
    const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "brain-env-")), "requests.jsonl")
    const child = spawn(process.execPath, [new URL("../fixtures/httpEnvironment.mjs", import.meta.url).pathname], {
      env: { ...process.env, HTTP_ENV_LOG: log, HTTP_ENV_TOKEN: SECRET },
      stdio: ["ignore", "pipe", "inherit"]
    })
    try {
      const first = await new Promise<string>((resolve) => readline.createInterface({ input: child.stdout! }).once("line", resolve))
      const base = `http://127.0.0.1:${JSON.parse(first).port}`
      const post = async (p: string, body: unknown, token = SECRET) => {
        const r = await fetch(base + p, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) })
        return [r.status, await r.json()] as const
      }
      const name = { session_id: "ses_0000000000aaaaaaaaaaaaaaaa", environment: "sandbox" }
      expect(await post("/setup", { ...name, sequence: 2, options: {} })).toEqual([200, { ok: { step: "setup", environment: "sandbox" } }])
      const call = { ...name, sequence: 5, name: "ok", call_id: "c1", input: { a: 1 }, deadline_at_ms: 0 }
      expect(await post("/tools/call", call)).toEqual([200, { ok: { echo: { a: 1 }, sequence: 5 } }])
      expect((await post("/tools/call", call))[0]).toBe(409)
      expect(await post("/tools/cancel", { ...name, sequence: 7, name: "ok", reason: "cancel" })).toEqual([200, { stopped: true }])
      expect((await post("/tools/call", { ...call, sequence: 7 }))[0]).toBe(409)
      expect((await post("/teardown", { ...name, sequence: 9 }, "wrong"))[0]).toBe(401)
      const lines = fs.readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      expect(lines.map((l) => [l.path, l.sequence, l.count, l.auth])).toEqual([
        ["/setup", 2, 1, true], ["/tools/call", 5, 1, true], ["/tools/call", 5, 2, true],
        ["/tools/cancel", 7, 1, true], ["/tools/call", 7, 1, true], ["/teardown", 9, 1, false]
      ])
      expect(fs.readFileSync(log, "utf8")).not.toContain(SECRET)
    } finally {
      child.kill()
    }
  })
})
