/**
 * What the http Environment driver (src/layers/EnvironmentsHttp.ts) makes of answers that are
 * unusual but whole, against a node:http Environment in this process: every one is the call's (or
 * the step's) typed outcome at once, the same with a secret configured as without one, and never
 * a wait for a deadline.
 *
 * - A tool call's 200 `{"ok": v}` nested far past any stack is its answer (the bound of 64 levels
 *   is the outcome record's, ToolVerdicts.ts: `invalid_output`, checked end to end in
 *   test/e2e/environmentAnswers.test.ts). A lifecycle step's or a cancel's answer, and an error
 *   response's body, are held to the 64 levels here, before they are parsed.
 * - Members named `__proto__`, `constructor`, `prototype` are the output's own, as sent.
 * - An exception while reading an answer is a typed failure, never lost.
 * - A 100 Continue Brain never asked for, and a body in a content coding, are refused by name.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import * as http from "node:http"
import type * as net from "node:net"
import * as zlib from "node:zlib"
import { Effect, Either, Exit, Layer } from "effect"
import { type AdmittedEnvironment, type EnvironmentBindings, parseEnvironmentBindings, readAnswer, readCancelAnswer } from "../../src/domain/Environment.js"
import { MAX_JSON_DEPTH } from "../../src/domain/Limits.js"
import type { SessionId } from "../../src/domain/Ids.js"
import { readReply } from "../../src/layers/environments/Answers.js"
import * as EnvironmentsHttp from "../../src/layers/EnvironmentsHttp.js"
import { type EnvironmentFailed, Environments } from "../../src/services/Environments.js"

const SESSION = "ses_0000000000aaaaaaaaaaaaaaaa" as SessionId
const TOKEN = "tok-answers-9c41d07e2b"
const DEPTH = 20_000

/** What the Environment does with a request: by the tool's name for a call, by the path otherwise. */
const answer = (name: string, req: http.IncomingMessage, res: http.ServerResponse) => {
  const json = (status: number, text: string) => res.writeHead(status, { "content-type": "application/json" }).end(text)
  switch (name) {
    case "deep":
      return json(200, `{"ok":${"[".repeat(DEPTH)}"${TOKEN}"${"]".repeat(DEPTH)}}`)
    case "proto":
      return json(200, `{"ok":{"__proto__":{"x":"${TOKEN}"},"constructor":{"prototype":1},"y":2}}`)
    case "continue":
      // Informational, unasked (Brain sends no `Expect: 100-continue`), then the real answer.
      res.writeContinue()
      return setTimeout(() => json(200, `{"ok":"after continue"}`), 20)
    case "gzip": {
      const body = zlib.gzipSync(`{"ok":"compressed"}`)
      return res.writeHead(200, { "content-type": "application/json", "content-encoding": "gzip", "content-length": body.length }).end(body)
    }
    default:
      return json(200, `{"ok":${JSON.stringify({ seen: req.headers["accept-encoding"] ?? null })}}`)
  }
}

/** A node:http Environment on loopback for the scope; every request is answered by `answer`. */
const environment = Effect.acquireRelease(
  Effect.async<http.Server>((resume) => {
    const server = http.createServer((req, res) => {
      let text = ""
      req.setEncoding("utf8")
      req.on("data", (c: string) => (text += c))
      req.on("end", () => {
        const body = JSON.parse(text) as { name?: string }
        answer(req.url === "/tools/call" ? body.name ?? "" : req.url === "/setup" ? "deep" : "", req, res)
      })
    })
    server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
  }),
  (server) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)).closeAllConnections())
).pipe(Effect.map((server) => `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`))

const bindingsOf = (baseUrl: string, secured: boolean): EnvironmentBindings =>
  Either.getOrThrow(parseEnvironmentBindings(
    { source: "test", text: JSON.stringify({ sandboxes: { driver: "http", base_url: baseUrl, ...(secured ? { token_env: "T" } : {}) } }) },
    (n) => (n === "T" ? TOKEN : undefined)
  ))

const sandbox = (baseUrl: string): AdmittedEnvironment => ({
  name: "sandbox",
  driver: "http",
  binding: "sandboxes",
  resolved: { base_url: baseUrl, lifecycle_timeout_ms: 60_000 }
})

const withDriver = <A, E>(bindings: EnvironmentBindings, body: Effect.Effect<A, E, Environments>) =>
  body.pipe(
    Effect.provide(
      EnvironmentsHttp.layer({ bindings, maxResponseBytes: 4 * 1024 * 1024, graceMs: 30_000 }).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))
    )
  )

const callOf = (baseUrl: string, sequence: number, name: string) => ({
  session: SESSION,
  sequence,
  environment: sandbox(baseUrl),
  name,
  callId: `call_${sequence}`,
  input: {},
  deadlineAtMs: 0
})

/** A call through `call` (a fiber waits) and through `send` (a callback): both exits. */
const bothWays = (baseUrl: string, sequence: number, name: string) =>
  Effect.gen(function*() {
    const e = yield* Environments
    const called = yield* Effect.exit(e.call(callOf(baseUrl, sequence, name)))
    const sent = e.send!(callOf(baseUrl, sequence + 1, name))
    if (sent === undefined || !("await" in sent)) throw new Error("the http driver did not send the call")
    const awaited = yield* Effect.async<Exit.Exit<unknown, EnvironmentFailed>>((resume) => sent.await((exit) => resume(Effect.succeed(exit))))
    return [called, awaited] as const
  })

/** How deep `v` nests arrays (walked, not recursed), and what is at the bottom. */
const bottomOf = (v: unknown): readonly [number, unknown] => {
  let depth = 0
  while (Array.isArray(v)) {
    depth++
    v = v[0]
  }
  return [depth, v]
}

describe("the http Environment driver: unusual answers", () => {
  it.scopedLive("a tool call's answer nested far past the stack is the call's answer at once, redacted, with a secret configured as without one", () =>
    Effect.gen(function*() {
      const url = yield* environment
      for (const secured of [true, false]) {
        const [called, awaited] = yield* withDriver(bindingsOf(url, secured), bothWays(url, 5, "deep"))
        for (const exit of [called, awaited]) {
          if (!Exit.isSuccess(exit)) throw new Error(`secured ${secured}: ${String(exit)}`)
          const v = exit.value as { outcome: string; output: unknown }
          expect(v.outcome).toBe("ok")
          expect(bottomOf(v.output)).toEqual([DEPTH, secured ? "<redacted>" : TOKEN])
        }
      }
    }))

  it.scopedLive("a setup answered with a result nested past 64 levels is a malformed answer (uncertain bad_shape, ambiguous), never its result", () =>
    Effect.gen(function*() {
      const url = yield* environment
      for (const secured of [true, false]) {
        const setup = yield* withDriver(
          bindingsOf(url, secured),
          Effect.exit(Effect.flatMap(Environments, (e) => e.setup({ session: SESSION, sequence: 2, environment: sandbox(url) })))
        )
        expect(setup).toMatchObject({ _tag: "Failure", cause: { error: { _tag: "EnvironmentUncertain", reason: "bad_shape", status: 200 } } })
        if (!Exit.isFailure(setup) || setup.cause._tag !== "Fail") throw new Error(String(setup))
        expect(setup.cause.error.message).toContain("nested deeper than 64 levels")
        expect(setup.cause.error.failure).toMatchObject({ code: "environment_failed", ambiguous: true })
      }
    }))

  it("every lifecycle answer is held to 64 levels below its one member: 64 is its result, 65 malformed, whatever the member", () => {
    const nested = (levels: number, member: string) => `{"${member}":${"[".repeat(levels)}1${"]".repeat(levels)}}`
    const reading = (path: string) => ({ environment: "sandbox", path, secrets: [TOKEN], shape: readAnswer })
    for (const path of ["/setup", "/detach", "/teardown"]) {
      for (const member of ["ok", "error"]) {
        const at = readReply({ status: 200, body: new TextEncoder().encode(nested(MAX_JSON_DEPTH, member)), truncated: false }, reading(path))
        expect(Either.isRight(at), `${path} ${member}`).toBe(true)
        const past = readReply({ status: 200, body: new TextEncoder().encode(nested(MAX_JSON_DEPTH + 1, member)), truncated: false }, reading(path))
        expect(past, `${path} ${member}`).toMatchObject({ _tag: "Left", left: { _tag: "EnvironmentUncertain", reason: "bad_shape", status: 200 } })
      }
    }
    // A cancel's answer too: only a boolean is read from it, and nothing deeper is parsed.
    const cancel = readReply({ status: 200, body: new TextEncoder().encode(nested(MAX_JSON_DEPTH + 1, "stopped")), truncated: false }, {
      environment: "sandbox",
      path: "/tools/cancel",
      secrets: [],
      shape: readCancelAnswer
    })
    expect(cancel).toMatchObject({ _tag: "Left", left: { _tag: "EnvironmentUncertain", reason: "bad_shape" } })
  })

  it("an error response's body nested past 64 levels is kept as text in the failure's details, not parsed; one within them as JSON", () => {
    const deep = `${"[".repeat(MAX_JSON_DEPTH + 1)}"${TOKEN}"${"]".repeat(MAX_JSON_DEPTH + 1)}`
    const shallow = `${"[".repeat(MAX_JSON_DEPTH)}"x"${"]".repeat(MAX_JSON_DEPTH)}`
    const reading = { environment: "sandbox", path: "/setup", secrets: [TOKEN], shape: readAnswer }
    for (const status of [400, 409, 500]) {
      const past = readReply({ status, body: new TextEncoder().encode(deep), truncated: false }, reading)
      if (Either.isRight(past)) throw new Error(`${status}: answered`)
      expect(past.left.failure.details, `${status}`).toMatchObject({ body: deep.replace(TOKEN, "<redacted>") })
      const within = readReply({ status, body: new TextEncoder().encode(shallow), truncated: false }, reading)
      if (Either.isRight(within)) throw new Error(`${status}: answered`)
      expect(bottomOf((within.left.failure.details as { body: unknown }).body), `${status}`).toEqual([MAX_JSON_DEPTH, "x"])
    }
  })

  it.scopedLive("members named __proto__, constructor and prototype are the output's own, as sent, with a secret configured", () =>
    Effect.gen(function*() {
      const url = yield* environment
      const [called, awaited] = yield* withDriver(bindingsOf(url, true), bothWays(url, 5, "proto"))
      for (const exit of [called, awaited]) {
        if (!Exit.isSuccess(exit)) throw new Error(String(exit))
        const output = (exit.value as { output: unknown }).output
        expect(JSON.stringify(output)).toBe(`{"__proto__":{"x":"<redacted>"},"constructor":{"prototype":1},"y":2}`)
        expect(Object.getPrototypeOf(output)).toBe(Object.prototype)
      }
    }))

  it("an exception while reading an answer is a typed failure of the call (uncertain: it answered), never thrown", () => {
    const throwing = () => {
      throw new RangeError("Maximum call stack size exceeded")
    }
    const read = readReply({ status: 200, body: new TextEncoder().encode(`{"ok":1}`), truncated: false }, {
      environment: "sandbox",
      path: "/tools/call",
      secrets: [TOKEN],
      shape: throwing
    })
    expect(Either.isLeft(read)).toBe(true)
    const failed = Either.getLeft(read).pipe((o) => (o._tag === "Some" ? o.value : undefined))!
    expect(failed).toMatchObject({ _tag: "EnvironmentUncertain", reason: "bad_shape", status: 200 })
    expect(failed.message).toContain("RangeError")
    expect(failed.failure).toMatchObject({ code: "environment_failed", ambiguous: true })
  })

  it.scopedLive("Brain asks for no content coding (Accept-Encoding: identity), and a 200 in one is refused by name: uncertain, not read as JSON", () =>
    Effect.gen(function*() {
      const url = yield* environment
      const [plain] = yield* withDriver(bindingsOf(url, false), bothWays(url, 5, "plain"))
      expect(plain).toEqual(Exit.succeed({ outcome: "ok", output: { seen: "identity" } }))
      const [called, awaited] = yield* withDriver(bindingsOf(url, false), bothWays(url, 7, "gzip"))
      for (const exit of [called, awaited]) {
        expect(exit).toMatchObject({ _tag: "Failure", cause: { error: { _tag: "EnvironmentUncertain", reason: "not_json", status: 200 } } })
        expect(JSON.stringify(exit)).toContain("Content-Encoding gzip")
      }
    }))

  it.scopedLive("a 100 Continue Brain never asked for is uncertain (connection_lost, ambiguous: the call was sent), and its message names it", () =>
    Effect.gen(function*() {
      const url = yield* environment
      const [called, awaited] = yield* withDriver(bindingsOf(url, false), bothWays(url, 5, "continue"))
      for (const exit of [called, awaited]) {
        expect(exit).toMatchObject({ _tag: "Failure", cause: { error: { _tag: "EnvironmentUncertain", reason: "connection_lost" } } })
        expect(JSON.stringify(exit)).toContain("100 Continue")
      }
    }))
})
