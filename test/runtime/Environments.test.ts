/**
 * Sessions with an `http` Environment, in process over the real http driver, against the fake
 * Environment (test/fixtures/httpEnvironment.mjs): setup, detach and teardown are journaled
 * effects around exactly one request each, a failed step has the consequence docs/environments.md
 * gives it, and a tool placed in the Environment goes there once, with each answer mapped to its
 * outcome. Every request the fake logs came once (`count: 1`).
 */
import type { Readable } from "node:stream"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import { Sessions } from "../../src/services/Sessions.js"
import { bindingsOf, type Fake, fakeEnvironment, logged } from "../support/httpEnvironment.js"
import { runtimeLayer } from "../support/runtime.js"

const GRACE_MS = 400

const runtime = (bindings: Record<string, string>, extra: { maxResponseBytes?: number } = {}) =>
  runtimeLayer({
    environments: { bindings: bindingsOf(bindings), ...extra },
    config: { cancelGraceMs: GRACE_MS }
  })

const sandbox = (binding = "sandboxes", name = "sandbox") => ({ name, driver: "http" as const, binding, options: { image: "python:3.12" } })

const eventsOf = (id: SessionId) =>
  Effect.map(Effect.flatMap(Sessions, (s) => s.events(id, { after: 0, limit: 1000 })), (p) => p.events)

const kindsOf = (id: SessionId) => Effect.map(eventsOf(id), (es) => es.map((e) => e.kind))

/** A stream's whole body, once it ends; a stream still open after five seconds fails the test. */
const bodyText = (body: Readable) =>
  new Promise<string>((resolve, reject) => {
    let text = ""
    const timer = setTimeout(() => reject(new Error(`the stream did not end; it sent ${JSON.stringify(text)}`)), 5_000)
    body.on("data", (chunk: Buffer) => void (text += chunk.toString("utf8")))
    body.on("end", () => {
      clearTimeout(timer)
      resolve(text)
    })
  })

/** Every request came once and carried the protocol header. */
const expectOnce = (f: Fake) => {
  for (const r of f.requests()) expect(r).toMatchObject({ count: 1, protocol: "1" })
}

describe("an http Environment's lifecycle", () => {
  it.scopedLive("create sets it up, end detaches it after the ending is recorded, delete tears it down: each one journaled request", () =>
    Effect.gen(function*() {
      const f = yield* fakeEnvironment()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const created = yield* sessions.create({ model: { provider: "scripted" }, environments: [sandbox()] })
        expect(created.status).toBe("idle")
        const id = created.session_id
        const events = yield* eventsOf(id)
        expect(events.map((e) => e.kind)).toEqual([
          "session_creation_started",
          "environment_setup_started",
          "environment_setup_ended",
          "session_creation_ended"
        ])
        expect((events[0]!.data as any).configuration.environments).toEqual([
          { ...sandbox(), resolved: { base_url: f.url, lifecycle_timeout_ms: 60_000 } }
        ])
        expect(events[1]!.data).toEqual({ environment: "sandbox", request: { options: { image: "python:3.12" } } })
        expect(f.requests()).toMatchObject([{ path: "/setup", session_id: id, sequence: events[1]!.sequence, environment: "sandbox" }])

        yield* sessions.end(id)
        const ending = (yield* eventsOf(id)).slice(4)
        expect(ending.map((e) => e.kind)).toEqual([
          "session_end_started",
          "environment_detach_started",
          "environment_detach_ended",
          "session_ended"
        ])
        expect(f.requests()[1]).toMatchObject({ path: "/detach", sequence: ending[1]!.sequence })

        yield* sessions.delete(id)
        expect((yield* Effect.flip(sessions.get(id))).code).toBe("not_found")
        expect(f.requests().map((r) => r.path)).toEqual(["/setup", "/detach", "/teardown"])
        expectOnce(f)
      }).pipe(Effect.provide(runtime({ sandboxes: f.url })))
    }))

  it.scopedLive("a failed setup fails the creation: nothing further is set up, every Environment whose setup was sent is torn down in reverse, and the failed session deletes with nothing more sent", () =>
    Effect.gen(function*() {
      const good = yield* fakeEnvironment()
      const bad = yield* fakeEnvironment({ HTTP_ENV_LIFECYCLE: JSON.stringify({ setup: "error" }) })
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const refused = yield* Effect.flip(sessions.create({
          model: { provider: "scripted" },
          environments: [sandbox("good", "one"), sandbox("bad", "two"), sandbox("good", "three")]
        }))
        expect(refused.code).toBe("creation_failed")
        expect(refused.message).toContain(`Environment "two"`)
        const details = refused.details as { session_id: SessionId; environment: string; failure: { code: string } }
        expect(details).toMatchObject({ environment: "two", failure: { code: "environment_failed" } })
        const id = details.session_id
        expect(yield* kindsOf(id)).toEqual([
          "session_creation_started",
          "environment_setup_started",
          "environment_setup_ended",
          "environment_setup_started",
          "environment_setup_failed",
          "environment_teardown_started",
          "environment_teardown_ended",
          "environment_teardown_started",
          "environment_teardown_ended",
          "session_creation_failed"
        ])
        expect((yield* sessions.get(id)).status).toBe("failed")
        expect(good.requests().map((r) => [r.path, r.environment])).toEqual([["/setup", "one"], ["/teardown", "one"]])
        expect(bad.requests().map((r) => [r.path, r.environment])).toEqual([["/setup", "two"], ["/teardown", "two"]])
        yield* sessions.delete(id)
        expect(good.requests().length + bad.requests().length).toBe(4)
        expectOnce(good)
        expectOnce(bad)
      }).pipe(Effect.provide(runtime({ good: good.url, bad: bad.url })))
    }))

  it.scopedLive("a setup that never reached its Environment (unreachable) is not torn down: the failed session deletes without a request to it, while one that was reached is torn down", () =>
    Effect.gen(function*() {
      const good = yield* fakeEnvironment()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const refused = yield* Effect.flip(sessions.create({
          model: { provider: "scripted" },
          environments: [sandbox("good", "one"), sandbox("nowhere", "two")]
        }))
        expect(refused.code).toBe("creation_failed")
        const details = refused.details as { session_id: SessionId; failure: { ambiguous: boolean; details: { reason: string } } }
        expect(details.failure).toMatchObject({ ambiguous: false, details: { reason: "unreachable" } })
        const id = details.session_id
        expect(yield* kindsOf(id)).toEqual([
          "session_creation_started",
          "environment_setup_started",
          "environment_setup_ended",
          "environment_setup_started",
          "environment_setup_failed",
          "environment_teardown_started",
          "environment_teardown_ended",
          "session_creation_failed"
        ])
        const teardown = (yield* eventsOf(id)).find((e) => e.kind === "environment_teardown_started")!
        expect(teardown.data).toMatchObject({ environment: "one" })
        // The delete has nothing left to tear down: no request anywhere, and the session is gone.
        yield* sessions.delete(id)
        expect((yield* Effect.flip(sessions.get(id))).code).toBe("not_found")
        expect(good.requests().map((r) => [r.path, r.environment])).toEqual([["/setup", "one"], ["/teardown", "one"]])
        expectOnce(good)
      }).pipe(Effect.provide(runtime({ good: good.url, nowhere: "http://127.0.0.1:1" })))
    }))

  it.scopedLive("a stream of a failed session ends after session_creation_failed, from the start and from past its end, as one of an ended session ends after session_ended", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const refused = yield* Effect.flip(sessions.create({ model: { provider: "scripted" }, environments: [sandbox("nowhere", "two")] }))
        const id = (refused.details as { session_id: SessionId }).session_id
        const last = (yield* sessions.get(id)).last_sequence
        for (const after of [0, last]) {
          const text = yield* Effect.scoped(Effect.flatMap(sessions.follow(id, after), ({ body }) => Effect.promise(() => bodyText(body))))
          const events = [...text.matchAll(/^event: (.*)$/gm)].map((m) => m[1])
          expect(events.at(-1) ?? "none").toBe(after === 0 ? "session_creation_failed" : "none")
        }
      }).pipe(Effect.provide(runtime({ nowhere: "http://127.0.0.1:1" })))
    }))

  it.scopedLive("a failed detach is recorded and the session still ends; delete still tears down", () =>
    Effect.gen(function*() {
      const f = yield* fakeEnvironment({ HTTP_ENV_LIFECYCLE: JSON.stringify({ detach: "server_error" }) })
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id: id } = yield* sessions.create({ model: { provider: "scripted" }, environments: [sandbox()] })
        expect((yield* sessions.end(id)).status).toBe("ended")
        const events = yield* eventsOf(id)
        const failed = events.find((e) => e.kind === "environment_detach_failed")!
        expect(failed.data).toMatchObject({ failure: { code: "environment_failed", ambiguous: true, details: { environment: "sandbox", status: 500 } } })
        expect(events[events.length - 1]!.kind).toBe("session_ended")
        yield* sessions.delete(id)
        expect(f.requests().map((r) => r.path)).toEqual(["/setup", "/detach", "/teardown"])
        expectOnce(f)
      }).pipe(Effect.provide(runtime({ sandboxes: f.url })))
    }))

  it.scopedLive("a failed teardown keeps the session and answers teardown_failed naming the Environment; nothing retries until a second delete sends a new teardown", () =>
    Effect.gen(function*() {
      const f = yield* fakeEnvironment({ HTTP_ENV_LIFECYCLE: JSON.stringify({ teardown: { behaviour: "error", times: 1 } }) })
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id: id } = yield* sessions.create({ model: { provider: "scripted" }, environments: [sandbox()] })
        yield* sessions.end(id)
        const refused = yield* Effect.flip(sessions.delete(id))
        expect(refused.code).toBe("teardown_failed")
        expect(refused.message).toContain(`"sandbox"`)
        expect(refused.details).toMatchObject({ environments: ["sandbox"] })
        expect((yield* sessions.get(id)).status).toBe("ended")
        expect(yield* kindsOf(id)).toContain("environment_teardown_failed")
        yield* Effect.sleep("200 millis")
        expect(f.requests().filter((r) => r.path === "/teardown")).toHaveLength(1)

        yield* sessions.delete(id)
        expect((yield* Effect.flip(sessions.get(id))).code).toBe("not_found")
        const teardowns = f.requests().filter((r) => r.path === "/teardown")
        expect(teardowns).toHaveLength(2)
        expect(teardowns[1]!.sequence).toBeGreaterThan(teardowns[0]!.sequence)
        expectOnce(f)
      }).pipe(Effect.provide(runtime({ sandboxes: f.url })))
    }))

  it.scopedLive("admission refuses bad declarations before anything is written or sent", () =>
    Effect.gen(function*() {
      const f = yield* fakeEnvironment()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const cases: Array<[unknown, string]> = [
          [{ environments: [sandbox("nowhere")] }, `no environment binding named "nowhere"; the configured bindings are "sandboxes"`],
          [{ environments: [sandbox(), sandbox()] }, `two Environments are named "sandbox"`],
          [{ tools: [{ name: "run", environment: "ghost" }] }, `names Environment "ghost", which the session does not declare`],
          [{ environments: [{ name: "h", driver: "host", host: "host_01hzzzzzzzzzzzzzzzzzzzzzzz" }] }, `no host is registered with id "host_01hzzzzzzzzzzzzzzzzzzzzzzz"`]
        ]
        for (const [body, message] of cases) {
          const refused = yield* Effect.flip(sessions.create({ model: { provider: "scripted" }, ...(body as object) }))
          expect(refused.code).toBe("invalid_request")
          expect(refused.message).toContain(message)
        }
        expect((yield* sessions.list({ limit: 10 })).sessions).toEqual([])
        expect(f.requests()).toEqual([])
      }).pipe(Effect.provide(runtime({ sandboxes: f.url })))
    }))
})

/** The tool results a turn's tool calls ended with, by tool name. */
const outcomesOf = (id: SessionId) =>
  Effect.map(eventsOf(id), (events) => {
    const started = new Map(events.filter((e) => e.kind === "tool_call_started").map((e) => [e.sequence, (e.data as any).tool as string]))
    return Object.fromEntries(
      events.filter((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed").map((e) => [started.get((e.data as any).sequence)!, { kind: e.kind, ...(e.data as any) }])
    ) as Record<string, any>
  })

const tool = (name: string, extra: Record<string, unknown> = {}) => ({ name, environment: "sandbox", ...extra })

describe("tool calls in an http Environment", () => {
  it.scopedLive("each call is sent once and its answer is the outcome: ok, error body, connection reset, oversized, not JSON, deadline confirmed and unconfirmed (naming the Environment)", () =>
    Effect.gen(function*() {
      const f = yield* fakeEnvironment({
        HTTP_ENV_TOOLS: JSON.stringify({ late: "hang", late_unconfirmed: "hang_unconfirmed" })
      })
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const calls = [
          { name: "ok", input: { x: 1 } },
          { name: "error", input: {} },
          { name: "reset", input: {} },
          { name: "oversized", input: { bytes: 200_000 } },
          { name: "not_json", input: {} },
          { name: "late", input: {} },
          { name: "late_unconfirmed", input: {} }
        ]
        const { session_id: id } = yield* sessions.create({
          model: { provider: "scripted", replies: [{ tool_calls: calls }, { text: "done" }] },
          environments: [sandbox()],
          tools: [...calls.slice(0, 5).map((c) => tool(c.name)), tool("late", { timeout_ms: 300 }), tool("late_unconfirmed", { timeout_ms: 300 })]
        })
        const out = yield* sessions.send(id, { message: "go" })
        expect(out.turn.status).toBe("ended")
        const o = yield* outcomesOf(id)
        expect(o.ok).toMatchObject({ kind: "tool_call_ended", outcome: "ok", is_error: false, output: { echo: { x: 1 } } })
        expect(o.error).toMatchObject({ kind: "tool_call_ended", outcome: "error", is_error: true, output: { message: "the tool failed on purpose" } })
        for (const name of ["reset", "oversized", "not_json"]) {
          expect(o[name]).toMatchObject({ kind: "tool_call_failed", outcome: "unknown", is_error: true, failure: { code: "environment_failed", ambiguous: true } })
        }
        // Brain's own failures of a call name its Environment, as the Environment's do.
        expect(o.late).toMatchObject({ outcome: "timeout", failure: { code: "timeout", ambiguous: false, details: { environment: "sandbox" } } })
        expect(o.late_unconfirmed).toMatchObject({ outcome: "timeout", failure: { code: "timeout", ambiguous: true, details: { environment: "sandbox" } } })
        const requests = f.requests()
        expect(requests.filter((r) => r.path === "/tools/call").map((r) => r.name).sort()).toEqual(calls.map((c) => c.name).sort())
        expect(requests.filter((r) => r.path === "/tools/cancel").map((r) => [r.name, r.reason]).sort()).toEqual([
          ["late", "deadline"],
          ["late_unconfirmed", "deadline"]
        ])
        expectOnce(f)
      }).pipe(Effect.provide(runtime({ sandboxes: f.url }, { maxResponseBytes: 64 * 1024 })))
    }))

  it.scopedLive("an interrupted turn cancels a call in flight: confirmed it is cancelled, unconfirmed within the grace it is unknown, each naming the Environment; neither is resent", () =>
    Effect.gen(function*() {
      const f = yield* fakeEnvironment({ HTTP_ENV_TOOLS: JSON.stringify({ stoppable: "hang", stubborn: "cancel_silent" }) })
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        for (const name of ["stoppable", "stubborn"]) {
          const { session_id: id } = yield* sessions.create({
            model: { provider: "scripted", replies: [{ tool_calls: [{ name, input: {} }] }, { text: "done" }] },
            environments: [sandbox()],
            tools: [tool(name)]
          })
          yield* sessions.submit(id, { message: "go" })
          yield* logged(f, (l) => l.path === "/tools/call" && l.session_id === id)
          yield* sessions.interrupt(id)
          const o = yield* outcomesOf(id)
          expect(o[name]).toMatchObject(
            name === "stoppable"
              ? { outcome: "cancelled", failure: { code: "cancelled", details: { environment: "sandbox" } } }
              : { outcome: "unknown", failure: { code: "unknown", ambiguous: true, details: { environment: "sandbox" } } }
          )
          expect(f.requests().filter((r) => r.session_id === id && r.path.startsWith("/tools")).map((r) => [r.path, r.reason ?? null])).toEqual([
            ["/tools/call", null],
            ["/tools/cancel", "cancel"]
          ])
        }
        expectOnce(f)
      }).pipe(Effect.provide(runtime({ sandboxes: f.url })))
    }))
})
