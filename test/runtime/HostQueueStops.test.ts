/**
 * A host call whose `call` frame still waits in Brain's queue for its host's command stream (the
 * host is not reading) when the call is stopped is taken back: the turn's cancel, the call's
 * deadline or the stream's replacement records it not sent (not ambiguous), and when the host
 * reads again it gets no `call` frame, and no `cancel`, for it (docs/environments.md, "The command
 * stream"). A call whose frame was handed to the connection stays sent: ambiguous, and cancelled.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import type { HostId, SessionId } from "../../src/domain/Ids.js"
import { Hosts } from "../../src/services/Hosts.js"
import { Sessions } from "../../src/services/Sessions.js"
import { framesOf } from "../support/hosts.js"
import { runtimeLayer } from "../support/runtime.js"

const CALLS = 5

const layer = () => runtimeLayer({ hosts: {}, config: { cancelGraceMs: 200 } }) as unknown as Layer.Layer<Sessions | Hosts, unknown>

const setup = (timeoutMs?: number) =>
  Effect.gen(function*() {
    const sessions = yield* Sessions
    const hosts = yield* Hosts
    const { host_id } = yield* hosts.register
    const stream = yield* hosts.connect(host_id as HostId)
    const calls = Array.from({ length: CALLS }, (_, i) => ({ name: "work", input: { i } }))
    const { session_id } = yield* sessions.create({
      model: { provider: "scripted", replies: [{ tool_calls: calls }, { text: "done" }] as any },
      environments: [{ name: "app", driver: "host", host: host_id }],
      tools: [{ name: "work", description: "does work", environment: "app", ...(timeoutMs !== undefined ? { timeout_ms: timeoutMs } : {}) }]
    })
    const events = (kind: string) =>
      Effect.map(sessions.events(session_id as SessionId, { after: 0, limit: 500 }), (page) => page.events.filter((e) => e.kind === kind))
    /** Waits until every call's start is durable (and so its frame offered). */
    const started = Effect.gen(function*() {
      while ((yield* events("tool_call_started")).length < CALLS) yield* Effect.sleep(5)
    })
    return { sessions, hosts, host: host_id as HostId, stream, session: session_id as SessionId, events, started }
  })

/** Whether a recorded failure is ambiguous. */
const ambiguous = (e: { readonly data: unknown }) => (e.data as { failure: { ambiguous?: boolean } }).failure.ambiguous === true

describe("host calls stopped while their frames wait in Brain's queue", () => {
  it.scopedLive("a turn cancelled while its calls wait for a host that does not read records them cancelled, not sent and not ambiguous, and the host then reads no call and no cancel", () =>
    Effect.gen(function*() {
      const { events, session, sessions, started, stream } = yield* setup()
      const turn = yield* Effect.fork(sessions.send(session, { message: "go" }))
      yield* started
      yield* sessions.interrupt(session)
      yield* Fiber.await(turn)
      const failed = yield* events("tool_call_failed")
      expect(failed).toHaveLength(CALLS)
      for (const e of failed) {
        expect(e.data).toMatchObject({ outcome: "cancelled", failure: { code: "cancelled" } })
        expect((e.data as any).failure.message).toMatch(/not sent/)
        expect(ambiguous(e)).toBe(false)
      }
      const closed = yield* events("turn_failed")
      expect(closed).toHaveLength(1)
      expect(ambiguous(closed[0])).toBe(false)
      // The host reads again, then its stream ends: only its `ready` was ever written.
      const frames = framesOf(stream.body)
      yield* Effect.promise(() => frames.expect("ready"))
      yield* stream.stop
      yield* Effect.promise(() => new Promise((resolve) => stream.body.once("end", resolve)))
      expect(frames.all.map((f) => f.event)).toEqual(["ready"])
    }).pipe(Effect.provide(layer())))

  it.scopedLive("calls whose deadline passes while they wait for a host that does not read are recorded timeout, not sent and not ambiguous, and never reach the host", () =>
    Effect.gen(function*() {
      const { events, session, sessions, stream } = yield* setup(50)
      const outcome = yield* sessions.send(session, { message: "go" })
      expect(outcome.turn.status).toBe("ended")
      const failed = yield* events("tool_call_failed")
      expect(failed).toHaveLength(CALLS)
      for (const e of failed) {
        expect(e.data).toMatchObject({ outcome: "timeout", failure: { code: "timeout" } })
        expect((e.data as any).failure.message).toMatch(/not sent/)
        expect(ambiguous(e)).toBe(false)
      }
      const frames = framesOf(stream.body)
      yield* Effect.promise(() => frames.expect("ready"))
      yield* stream.stop
      yield* Effect.promise(() => new Promise((resolve) => stream.body.once("end", resolve)))
      expect(frames.all.map((f) => f.event)).toEqual(["ready"])
    }).pipe(Effect.provide(layer())))

  it.scopedLive("a stream replaced while its calls wait unread records them not sent (host_disconnected, not ambiguous), and neither the old stream nor the new one carries them", () =>
    Effect.gen(function*() {
      const { events, host, hosts, session, sessions, started, stream } = yield* setup()
      const turn = yield* Effect.fork(sessions.send(session, { message: "go" }))
      yield* started
      const next = yield* hosts.connect(host)
      const outcome = yield* Fiber.join(turn)
      expect(outcome.turn.status).toBe("ended")
      const failed = yield* events("tool_call_failed")
      expect(failed).toHaveLength(CALLS)
      for (const e of failed) {
        expect(e.data).toMatchObject({ outcome: "error", failure: { code: "environment_failed", details: { reason: "host_disconnected" } } })
        expect(ambiguous(e)).toBe(false)
      }
      // Over, the old stream writes nothing more: what still waited (its `ready` too) is dropped.
      const old = framesOf(stream.body)
      yield* Effect.promise(() => new Promise((resolve) => stream.body.once("end", resolve)))
      expect(old.all.map((f) => f.event)).toEqual([])
      const fresh = framesOf(next.body)
      yield* Effect.promise(() => fresh.expect("ready"))
      yield* next.stop
      yield* Effect.promise(() => new Promise((resolve) => next.body.once("end", resolve)))
      expect(fresh.all.map((f) => f.event)).toEqual(["ready"])
    }).pipe(Effect.provide(layer())))

  it.scopedLive("calls the host has read stay sent when the turn is cancelled: each gets its cancel, and unconfirmed they are recorded unknown, ambiguous", () =>
    Effect.gen(function*() {
      const { events, session, sessions, started, stream } = yield* setup()
      const frames = framesOf(stream.body)
      yield* Effect.promise(() => frames.expect("ready"))
      const turn = yield* Effect.fork(sessions.send(session, { message: "go" }))
      yield* started
      for (let i = 0; i < CALLS; i++) yield* Effect.promise(() => frames.expect("call"))
      yield* sessions.interrupt(session)
      yield* Fiber.await(turn)
      const failed = yield* events("tool_call_failed")
      expect(failed).toHaveLength(CALLS)
      for (const e of failed) {
        expect(e.data).toMatchObject({ outcome: "unknown" })
        expect(ambiguous(e)).toBe(true)
      }
      expect(frames.all.filter((f) => f.event === "cancel")).toHaveLength(CALLS)
    }).pipe(Effect.provide(layer())))
})
