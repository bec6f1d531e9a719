/**
 * The `http` Environment driver (src/layers/EnvironmentsHttp.ts) against the fake Environment of
 * test/fixtures/httpEnvironment.mjs, a real process on loopback: each result maps to a value or to
 * exactly the failure docs/environments.md names, every operation is sent once with its
 * `{session_id, sequence}` name and the protocol header (the fake's request log says so), nothing
 * is sent when the binding has moved or the port is closed, and no secret comes back out.
 *
 * Nothing here is timed: a test waits on what the fake logs, never on a clock.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import * as net from "node:net"
import { Duration, Effect, Either, Exit, Fiber, Layer, Option } from "effect"
import { type AdmittedEnvironment, type EnvironmentBindings, parseEnvironmentBindings } from "../../src/domain/Environment.js"
import type { SessionId } from "../../src/domain/Ids.js"
import * as EnvironmentsHttp from "../../src/layers/EnvironmentsHttp.js"
import { type EnvironmentFailed, Environments } from "../../src/services/Environments.js"
import { type Fake, fakeEnvironment as fake, logged } from "../support/httpEnvironment.js"

const SESSION = "ses_0000000000aaaaaaaaaaaaaaaa" as SessionId
const TOKEN = "tok-7f3a9c1e5b2d4068a1c3e5f7"
const bindingsOf = (binding: Record<string, unknown>, env: Record<string, string> = {}): EnvironmentBindings =>
  Either.getOrThrow(parseEnvironmentBindings({ source: "test", text: JSON.stringify({ sandboxes: { driver: "http", ...binding } }) }, (n) => env[n]))

const sandbox = (baseUrl: string, lifecycleTimeoutMs = 60_000, options?: Record<string, unknown>): AdmittedEnvironment => ({
  name: "sandbox",
  driver: "http",
  binding: "sandboxes",
  ...(options !== undefined ? { options } : {}),
  resolved: { base_url: baseUrl, lifecycle_timeout_ms: lifecycleTimeoutMs }
})

interface Setting {
  readonly bindings: EnvironmentBindings
  readonly maxResponseBytes?: number
  readonly graceMs?: number
}

/** Runs `body` with the driver over undici (as main.ts provides it for models). */
const withDriver = <A, E>(setting: Setting, body: Effect.Effect<A, E, Environments>) =>
  body.pipe(
    Effect.provide(
      EnvironmentsHttp.layer({ maxResponseBytes: 4 * 1024 * 1024, graceMs: 30_000, ...setting }).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))
    )
  )

const failureOf = <A>(r: Either.Either<A, EnvironmentFailed>) => Either.getLeft(r).pipe(Option.getOrUndefined)

/** Every request names its operation, carries the protocol header and came once. */
const expectWellFormed = (f: Fake) => {
  for (const r of f.requests()) {
    expect(r).toMatchObject({ session_id: SESSION, protocol: "1", count: 1 })
    expect(Number.isInteger(r.sequence) && r.sequence >= 1).toBe(true)
  }
}

const call = (environment: AdmittedEnvironment, sequence: number, name: string, input: unknown = {}, deadlineAtMs = 0) =>
  Effect.flatMap(Environments, (e) => e.call({ session: SESSION, sequence, environment, name, callId: `call_${sequence}`, input, deadlineAtMs }))

describe("the http Environment driver: lifecycle", () => {
  it.scopedLive("setup POSTs {session_id, sequence, environment, options} once with the protocol header, and its {ok} is the result", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const result = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.flatMap(Environments, (e) => e.setup({ session: SESSION, sequence: 2, environment: sandbox(f.url, 60_000, { image: "python:3.12" }) }))
      )
      expect(result).toEqual({ result: { step: "setup", environment: "sandbox" } })
      expect(f.requests()).toMatchObject([
        { path: "/setup", sequence: 2, environment: "sandbox", fields: ["environment", "options", "sequence", "session_id"] }
      ])
      expectWellFormed(f)
    }))

  it.scopedLive("a setup answered {\"error\": …} is refused, not ambiguous, with the Environment's error as the body", () =>
    Effect.gen(function*() {
      const f = yield* fake({ HTTP_ENV_LIFECYCLE: JSON.stringify({ setup: "error" }) })
      const r = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.flatMap(Environments, (e) => e.setup({ session: SESSION, sequence: 2, environment: sandbox(f.url) })).pipe(Effect.either)
      )
      const failed = failureOf(r)
      expect(failed).toMatchObject({ _tag: "EnvironmentRefused", environment: "sandbox", status: 200, body: { message: "setup failed on purpose" } })
      expect(failed!.failure).toMatchObject({ code: "environment_failed", ambiguous: false })
      expect(f.requests()).toHaveLength(1)
      expectWellFormed(f)
    }))

  it.scopedLive("a setup answered 500 is uncertain (it may have run), with the error body in the failure's details", () =>
    Effect.gen(function*() {
      const f = yield* fake({ HTTP_ENV_LIFECYCLE: JSON.stringify({ setup: "server_error" }) })
      const r = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.flatMap(Environments, (e) => e.setup({ session: SESSION, sequence: 2, environment: sandbox(f.url) })).pipe(Effect.either)
      )
      const failed = failureOf(r)
      expect(failed).toMatchObject({ _tag: "EnvironmentUncertain", reason: "status", status: 500, body: { code: "internal" } })
      expect(failed!.failure).toMatchObject({ code: "environment_failed", ambiguous: true, details: { environment: "sandbox", status: 500 } })
      expect(f.requests()).toHaveLength(1)
      expectWellFormed(f)
    }))

  it.scopedLive("a setup with no answer within the recorded lifecycle_timeout_ms is uncertain (timeout), sent once, and its request is closed", () =>
    Effect.gen(function*() {
      const f = yield* fake({ HTTP_ENV_LIFECYCLE: JSON.stringify({ setup: "hang" }) })
      // The binding says nothing about the timeout: the session's recorded 200 ms is what counts.
      // Closed by the timeout itself, while the driver (and its connections) still live.
      const r = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.flatMap(Environments, (e) => e.setup({ session: SESSION, sequence: 2, environment: sandbox(f.url, 200) })).pipe(
          Effect.either,
          Effect.tap(() => logged(f, (l) => l.event === "closed" && l.path === "/setup"))
        )
      )
      expect(failureOf(r)).toMatchObject({ _tag: "EnvironmentUncertain", reason: "timeout" })
      expect(failureOf(r)!.failure.ambiguous).toBe(true)
      expect(f.requests()).toHaveLength(1)
      expectWellFormed(f)
    }))

  it.scopedLive("a teardown of an instance the Environment never set up ends ok; detach and teardown carry {session_id, sequence, environment} only", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const env = sandbox(f.url, 60_000, { image: "x" })
      const [detached, torn] = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.flatMap(Environments, (e) =>
          Effect.all([e.detach({ session: SESSION, sequence: 8, environment: env }), e.teardown({ session: SESSION, sequence: 9, environment: env })]))
      )
      expect(detached).toEqual({ result: { step: "detach", environment: "sandbox" } })
      expect(torn).toEqual({ result: { step: "teardown", environment: "sandbox" } })
      expect(f.requests()).toMatchObject([
        { path: "/detach", sequence: 8, fields: ["environment", "sequence", "session_id"] },
        { path: "/teardown", sequence: 9, fields: ["environment", "sequence", "session_id"] }
      ])
      expectWellFormed(f)
    }))
})

describe("the http Environment driver: tool calls", () => {
  it.scopedLive("a tool call POSTs {session_id, sequence, environment, name, call_id, input, deadline_at_ms} once and its {ok} is the output", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const answer = yield* withDriver({ bindings: bindingsOf({ base_url: f.url }) }, call(sandbox(f.url), 5, "run_python", { code: "1+1" }))
      expect(answer).toEqual({ outcome: "ok", output: { echo: { code: "1+1" }, sequence: 5 } })
      expect(f.requests()).toMatchObject([{
        path: "/tools/call",
        sequence: 5,
        name: "run_python",
        fields: ["call_id", "deadline_at_ms", "environment", "input", "name", "sequence", "session_id"]
      }])
      expectWellFormed(f)
    }))

  it.scopedLive("a tool's {\"error\": …} answer is a definite error outcome for the model, not a failure", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const answer = yield* withDriver({ bindings: bindingsOf({ base_url: f.url }) }, call(sandbox(f.url), 5, "error", { a: 1 }))
      expect(answer).toEqual({ outcome: "error", output: { message: "the tool failed on purpose", input: { a: 1 } } })
      expectWellFormed(f)
    }))

  it.scopedLive("a call still running at its deadline is left by its caller, and its cancel (reason deadline) is confirmed; each is sent once", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const env = sandbox(f.url)
      yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.gen(function*() {
          // The fake answers a `sleep` call a whole second after its deadline.
          const deadline = Date.now() + 300
          const running = yield* Effect.fork(call(env, 5, "sleep", {}, deadline))
          const before = yield* Fiber.join(running).pipe(Effect.timeoutOption(Duration.millis(Math.max(0, deadline - Date.now()))))
          expect(Option.isNone(before)).toBe(true)
          const cancelled = yield* Effect.flatMap(Environments, (e) => e.cancel({ session: SESSION, sequence: 5, environment: env, name: "sleep", reason: "deadline" }))
          expect(cancelled).toEqual({ confirmed: true })
          yield* Fiber.interrupt(running)
        })
      )
      expect(f.requests().map((r) => [r.path, r.sequence, r.reason])).toEqual([["/tools/call", 5, undefined], ["/tools/cancel", 5, "deadline"]])
      expect(f.requests()[1]!.fields).toEqual(["environment", "name", "reason", "sequence", "session_id"])
      expectWellFormed(f)
    }))

  it.scopedLive("interrupting a call closes its request at the Environment", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.gen(function*() {
          const running = yield* Effect.fork(call(sandbox(f.url), 5, "hang"))
          yield* logged(f, (l) => l.path === "/tools/call" && l.event === undefined)
          const exit = yield* Fiber.interrupt(running)
          expect(Exit.isInterrupted(exit)).toBe(true)
          // Closed by the interrupt itself, while the driver (and its connections) still live.
          yield* logged(f, (l) => l.path === "/tools/call" && l.event === "closed")
        })
      )
      expectWellFormed(f)
    }))

  it.scopedLive("a call sent with no caller's fiber (send) answers by callback as call does, and abandoning one closes its request at the Environment", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.gen(function*() {
          const e = yield* Environments
          const sent = (sequence: number, name: string) =>
            e.send!({ session: SESSION, sequence, environment: sandbox(f.url), name, callId: `call_${sequence}`, input: { n: sequence }, deadlineAtMs: 0 })
          const ok = sent(5, "ok")
          if (ok === undefined || !("await" in ok)) throw new Error("the http driver did not send the call")
          const answer = yield* Effect.async<Exit.Exit<unknown, EnvironmentFailed>>((resume) => ok.await((exit) => resume(Effect.succeed(exit))))
          expect(answer).toEqual(Exit.succeed({ outcome: "ok", output: { echo: { n: 5 }, sequence: 5 } }))
          // The same answer as `call` gives for the same call.
          expect(yield* call(sandbox(f.url), 6, "ok", { n: 6 })).toEqual({ outcome: "ok", output: { echo: { n: 6 }, sequence: 6 } })
          // A binding that points elsewhere now: nothing is sent, and send says so at once.
          const moved = e.send!({ session: SESSION, sequence: 7, environment: sandbox("http://127.0.0.1:9"), name: "ok", callId: "call_7", input: {}, deadlineAtMs: 0 })
          expect(moved).toMatchObject({ _tag: "EnvironmentNotSent", reason: "binding_moved" })
          const hanging = sent(8, "hang")
          if (hanging === undefined || !("await" in hanging)) throw new Error("the http driver did not send the call")
          const late: Array<unknown> = []
          hanging.await((exit) => void late.push(exit))
          yield* logged(f, (l) => l.path === "/tools/call" && l.sequence === 8 && l.event === undefined)
          hanging.abandon()
          yield* logged(f, (l) => l.path === "/tools/call" && l.sequence === 8 && l.event === "closed")
          yield* Effect.sleep(Duration.millis(50))
          expect(late).toEqual([])
        })
      )
      expect(f.requests().filter((r) => r.path === "/tools/call").map((r) => r.sequence)).toEqual([5, 6, 8])
      expectWellFormed(f)
    }))

  it.scopedLive("a hanging call's cancel answered {\"stopped\": false}, or not answered within graceMs, is unconfirmed with a reason; cancel never fails", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const env = sandbox(f.url)
      yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }), graceMs: 300 },
        Effect.gen(function*() {
          const environments = yield* Environments
          const first = yield* Effect.fork(call(env, 5, "hang_unconfirmed"))
          const second = yield* Effect.fork(call(env, 7, "cancel_silent"))
          yield* logged(f, (l) => l.sequence === 5 && l.event === undefined)
          yield* logged(f, (l) => l.sequence === 7 && l.event === undefined)
          const refused = yield* environments.cancel({ session: SESSION, sequence: 5, environment: env, name: "hang_unconfirmed", reason: "cancel" })
          expect(refused).toEqual({ confirmed: false, why: "Environment \"sandbox\" answered {\"stopped\": false}" })
          const silent = yield* environments.cancel({ session: SESSION, sequence: 7, environment: env, name: "cancel_silent", reason: "cancel" })
          expect(silent).toMatchObject({ confirmed: false })
          expect((silent as { why: string }).why).toContain("within 300 ms")
          yield* Fiber.interrupt(first)
          yield* Fiber.interrupt(second)
        })
      )
      expect(f.requests().filter((r) => r.path === "/tools/cancel").map((r) => r.sequence)).toEqual([5, 7])
      expectWellFormed(f)
    }))

  it.scopedLive("a connection reset after the Environment read the call is uncertain (connection_lost), and the call was received exactly once", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const r = yield* withDriver({ bindings: bindingsOf({ base_url: f.url }) }, call(sandbox(f.url), 5, "reset").pipe(Effect.either))
      expect(failureOf(r)).toMatchObject({ _tag: "EnvironmentUncertain", reason: "connection_lost" })
      expect(failureOf(r)!.failure.ambiguous).toBe(true)
      expect(f.requests().filter((l) => l.path === "/tools/call")).toHaveLength(1)
      expectWellFormed(f)
    }))

  it.scopedLive("an answer far above maxResponseBytes is uncertain (too_large): refused on its Content-Length, and an endless body is cut at the bound and closed", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const env = sandbox(f.url)
      const [declared, endless] = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }), maxResponseBytes: 64 * 1024 },
        Effect.all([call(env, 5, "oversized", { bytes: 8 * 1024 * 1024 }).pipe(Effect.either), call(env, 7, "endless").pipe(Effect.either)]).pipe(
          // The endless one closed by the refusal itself, while the driver (and its connections) still live.
          Effect.tap(() => logged(f, (l) => l.sequence === 7 && l.event === "closed"))
        )
      )
      expect(failureOf(declared)).toMatchObject({ _tag: "EnvironmentUncertain", reason: "too_large", status: 200 })
      // A body that never ends would never be read whole: the read stopped at the bound and closed the request.
      expect(failureOf(endless)).toMatchObject({ _tag: "EnvironmentUncertain", reason: "too_large", status: 200 })
      expect(failureOf(endless)!.failure.ambiguous).toBe(true)
      expectWellFormed(f)
    }))

  it.scopedLive("a 200 answer that is not JSON is uncertain (not_json)", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const r = yield* withDriver({ bindings: bindingsOf({ base_url: f.url }) }, call(sandbox(f.url), 5, "not_json").pipe(Effect.either))
      expect(failureOf(r)).toMatchObject({ _tag: "EnvironmentUncertain", reason: "not_json", status: 200 })
      expectWellFormed(f)
    }))

  it.scopedLive("statuses: 3xx and 4xx are refused (not run), 409 and a repeat are uncertain (duplicate), 5xx and 202 are uncertain", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const env = sandbox(f.url)
      const results = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url }) },
        Effect.all([302, 404, 429, 409, 503, 202].map((status, i) => call(env, 10 + i, "status", { status }).pipe(Effect.either)))
      )
      expect(results.map((r) => {
        const e = failureOf(r)!
        return [e._tag, "status" in e ? e.status : undefined, e.failure.ambiguous]
      })).toEqual([
        ["EnvironmentRefused", 302, false],
        ["EnvironmentRefused", 404, false],
        ["EnvironmentRefused", 429, false],
        ["EnvironmentUncertain", 409, true],
        ["EnvironmentUncertain", 503, true],
        ["EnvironmentUncertain", 202, true]
      ])
      expect(failureOf(results[1]!)).toMatchObject({ body: { code: "on_purpose", message: "status 404 on purpose" } })
      expectWellFormed(f)
      // The Environment refuses a repeat of an operation it already received (a proxy's retry).
      const again = yield* withDriver({ bindings: bindingsOf({ base_url: f.url }) }, call(env, 10, "status", { status: 302 }).pipe(Effect.either))
      expect(failureOf(again)).toMatchObject({ _tag: "EnvironmentUncertain", reason: "duplicate", status: 409 })
    }))
})

describe("the http Environment driver: where a request goes, and secrets", () => {
  it.scopedLive("an unreachable port is not sent (unreachable, not ambiguous), and no Environment logs anything", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const port = yield* Effect.promise(() =>
        new Promise<number>((resolve) => {
          const s = net.createServer().listen(0, "127.0.0.1", () => {
            const p = (s.address() as net.AddressInfo).port
            s.close(() => resolve(p))
          })
        })
      )
      const closed = `http://127.0.0.1:${port}`
      const r = yield* withDriver({ bindings: bindingsOf({ base_url: closed }) }, call(sandbox(closed), 5, "ok").pipe(Effect.either))
      expect(failureOf(r)).toMatchObject({ _tag: "EnvironmentNotSent", reason: "unreachable" })
      expect(failureOf(r)!.failure).toMatchObject({ ambiguous: false, details: { reason: "unreachable" } })
      expect(f.log()).toEqual([])
    }))

  it.scopedLive("a TLS handshake that fails (https to a plain-HTTP server, a reset mid-handshake) is not sent (unreachable, not ambiguous): no HTTP byte left", () =>
    Effect.gen(function*() {
      const f = yield* fake()
      const resetting = yield* Effect.acquireRelease(
        Effect.promise(() =>
          new Promise<net.Server>((resolve) => {
            const s = net.createServer((socket) => socket.destroy()).listen(0, "127.0.0.1", () => resolve(s))
          })
        ),
        (s) => Effect.promise(() => new Promise<void>((resolve) => s.close(() => resolve())))
      )
      const reset = `https://127.0.0.1:${(resetting.address() as net.AddressInfo).port}`
      for (const url of [f.url.replace("http:", "https:"), reset]) {
        const r = yield* withDriver({ bindings: bindingsOf({ base_url: url }) }, call(sandbox(url), 5, "ok").pipe(Effect.either))
        expect({ url, failure: failureOf(r) }).toMatchObject({ url, failure: { _tag: "EnvironmentNotSent", reason: "unreachable" } })
        expect(failureOf(r)!.failure).toMatchObject({ ambiguous: false })
      }
      expect(f.log()).toEqual([])
    }))

  it.scopedLive("a binding respelled (scheme case, a trailing /) still points where the session recorded: the call is sent, with the token", () =>
    Effect.gen(function*() {
      const f = yield* fake({ HTTP_ENV_TOKEN: TOKEN })
      const shouted = f.url.replace(/^http:/, "HTTP:")
      // A session recorded by an earlier server kept the binding's spelling; one recorded now keeps the parsed form.
      const pairs = [[`${shouted}`, f.url], [f.url, `${shouted}/`]] as const
      let sequence = 5
      for (const [recorded, now] of pairs) {
        const r = yield* withDriver(
          { bindings: bindingsOf({ base_url: now, token_env: "T" }, { T: TOKEN }) },
          call(sandbox(recorded), sequence++, "ok").pipe(Effect.either)
        )
        expect({ recorded, now, ok: Either.isRight(r), failure: failureOf(r) }).toMatchObject({ recorded, now, ok: true })
      }
      expect(f.requests().map((r) => r.path)).toEqual(["/tools/call", "/tools/call"])
      expectWellFormed(f)
    }))

  it.scopedLive("a binding that now points elsewhere, or is gone, fails before anything is sent (binding_moved, binding_missing)", () =>
    Effect.gen(function*() {
      const f = yield* fake({ HTTP_ENV_TOKEN: TOKEN })
      const env = sandbox(f.url)
      // The binding now names another path of the same server, which logs every request it gets.
      const moved = bindingsOf({ base_url: `${f.url}/v2`, token_env: "T" }, { T: TOKEN })
      const results = yield* withDriver(
        { bindings: moved },
        Effect.flatMap(Environments, (e) =>
          Effect.all([
            e.setup({ session: SESSION, sequence: 2, environment: env }).pipe(Effect.either),
            call(env, 5, "ok").pipe(Effect.either),
            e.cancel({ session: SESSION, sequence: 5, environment: env, name: "ok", reason: "cancel" })
          ]))
      )
      expect(failureOf(results[0])).toMatchObject({ _tag: "EnvironmentNotSent", reason: "binding_moved" })
      expect(failureOf(results[1])).toMatchObject({ _tag: "EnvironmentNotSent", reason: "binding_moved" })
      expect(results[2]).toMatchObject({ confirmed: false })
      const gone = yield* withDriver({ bindings: { names: [], get: () => undefined } }, call(env, 6, "ok").pipe(Effect.either))
      expect(failureOf(gone)).toMatchObject({ _tag: "EnvironmentNotSent", reason: "binding_missing" })
      expect(f.log()).toEqual([])
    }))

  it.scopedLive("a non-http Environment is not this driver's: not sent (driver_unavailable)", () =>
    Effect.gen(function*() {
      const r = yield* withDriver(
        { bindings: bindingsOf({ base_url: "http://127.0.0.1:9" }) },
        Effect.flatMap(Environments, (e) => e.setup({ session: SESSION, sequence: 2, environment: { name: "wasm", driver: "brain" } })).pipe(Effect.either)
      )
      expect(failureOf(r)).toMatchObject({ _tag: "EnvironmentNotSent", reason: "driver_unavailable" })
    }))

  it.scopedLive("a wrong token's 401 is a refusal (not ambiguous), and the token appears in no message or failure", () =>
    Effect.gen(function*() {
      const f = yield* fake({ HTTP_ENV_TOKEN: "the-right-one-0123456789" })
      const r = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url, token_env: "T" }, { T: TOKEN }) },
        call(sandbox(f.url), 5, "ok").pipe(Effect.either)
      )
      const failed = failureOf(r)!
      expect(failed).toMatchObject({ _tag: "EnvironmentRefused", status: 401, body: { code: "unauthorized" } })
      expect(failed.failure.ambiguous).toBe(false)
      expect(f.requests()).toMatchObject([{ path: "/tools/call", auth: false }])
      expect(`${failed.message} ${JSON.stringify(failed.failure)} ${JSON.stringify(failed)} ${String(failed)}`).not.toContain(TOKEN)
      expectWellFormed(f)
    }))

  it.scopedLive("the token goes only into the Authorization header: whatever an Environment echoes of it comes back as <redacted>", () =>
    Effect.gen(function*() {
      const f = yield* fake({ HTTP_ENV_TOKEN: TOKEN, HTTP_ENV_LIFECYCLE: JSON.stringify({ setup: "leak" }) })
      const env = sandbox(f.url)
      const [answer, setup, broken] = yield* withDriver(
        { bindings: bindingsOf({ base_url: f.url, token_env: "T", headers_env: { "X-Api-Key": "K" } }, { T: TOKEN, K: "key-5d1c0b9e" }) },
        Effect.flatMap(Environments, (e) =>
          Effect.all([
            call(env, 5, "leak"),
            e.setup({ session: SESSION, sequence: 2, environment: env }).pipe(Effect.either),
            call(env, 6, "reset").pipe(Effect.either)
          ]))
      )
      expect(f.requests().every((r) => r.auth === true)).toBe(true)
      expect(answer).toEqual({ outcome: "error", output: { message: "you sent Bearer <redacted>" } })
      const refused = failureOf(setup)!
      expect(refused).toMatchObject({ _tag: "EnvironmentRefused", status: 403, body: { message: "not with Bearer <redacted>" } })
      const failures = [refused, failureOf(broken)!]
      const seen = JSON.stringify([answer, ...failures, ...failures.map((e) => [e.message, e.failure, String(e)])])
      expect(seen).not.toContain(TOKEN)
      expect(seen).not.toContain("key-5d1c0b9e")
      expectWellFormed(f)
    }))
})
