/**
 * Lifecycle operations racing each other in one process, over an Environment driver whose steps
 * wait at a gate the test opens (so each race is held open, not hoped for):
 *
 * - a creation in flight is live work: a read sees it `creating` and changes nothing (recovery is
 *   only for work nobody in this process is doing), and a mutating request is refused `conflict`;
 * - ending is single-flight: concurrent ends commit one `session_end_started`, send one detach per
 *   Environment, commit one `session_ended`, and all answer the same summary;
 * - one turn at a time: sends that arrive together, each waiting while its loop resolves (an
 *   uploaded module read from the store), start one turn; the others are refused `session_busy`;
 * - delete is exclusive from its admission: one teardown per Environment, one delete succeeds and
 *   the others are `not_found`, and every read during the teardown is `not_found`. A delete whose
 *   teardown fails gives the session back, as it was.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, FiberId, Layer } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import {
  EnvironmentRefused,
  Environments,
  type EnvironmentsShape,
  type LifecycleOperation,
  type LifecycleStep
} from "../../src/services/Environments.js"
import { Sessions } from "../../src/services/Sessions.js"
import { bindingsOf } from "../support/httpEnvironment.js"
import { heldResolution, runtimeLayer } from "../support/runtime.js"

interface Gated {
  /** Every step the driver was asked for, in order. */
  readonly calls: Array<{ readonly step: LifecycleStep; readonly session: SessionId; readonly sequence: number }>
  /** Completed at a step's first call. */
  readonly called: Record<LifecycleStep, Deferred.Deferred<LifecycleOperation>>
  /** A gated step answers once its gate is open. */
  readonly gates: Record<LifecycleStep, Deferred.Deferred<void>>
  readonly layer: Layer.Layer<Environments>
}

/** A driver whose `gated` steps wait for their gate; a `failing` step's first call then answers a refusal. */
const gatedDriver = (gated: ReadonlyArray<LifecycleStep>, failing: ReadonlyArray<LifecycleStep> = []): Gated => {
  const deferreds = <A>() => ({
    setup: Deferred.unsafeMake<A>(FiberId.none),
    detach: Deferred.unsafeMake<A>(FiberId.none),
    teardown: Deferred.unsafeMake<A>(FiberId.none)
  })
  const calls: Gated["calls"] = []
  const called = deferreds<LifecycleOperation>()
  const gates = deferreds<void>()
  const step = (name: LifecycleStep) => (operation: LifecycleOperation) =>
    Effect.gen(function*() {
      calls.push({ step: name, session: operation.session, sequence: operation.sequence })
      yield* Deferred.succeed(called[name], operation)
      if (gated.includes(name)) yield* Deferred.await(gates[name])
      if (failing.includes(name) && calls.filter((c) => c.step === name).length === 1) {
        return yield* Effect.fail(
          new EnvironmentRefused({ environment: operation.environment.name, status: 400, body: null, message: `${name} refused on purpose` })
        )
      }
      return { result: { step: name } }
    })
  const shape: EnvironmentsShape = {
    setup: step("setup"),
    detach: step("detach"),
    teardown: step("teardown"),
    // No tool runs in these sessions.
    call: () => Effect.fail(new EnvironmentRefused({ environment: "sandbox", status: 400, body: null, message: "no calls here" })),
    cancel: () => Effect.succeed({ confirmed: true })
  }
  return { calls, called, gates, layer: Layer.succeed(Environments, shape) }
}

const runtime = (driver: Gated) =>
  runtimeLayer({ environments: { layer: driver.layer, bindings: bindingsOf({ sandboxes: "http://127.0.0.1:1" }) } })

const sandbox = { name: "sandbox", driver: "http" as const, binding: "sandboxes", options: {} }
const scripted = { provider: "scripted" as const }

const kindsOf = (id: SessionId) =>
  Effect.map(Effect.flatMap(Sessions, (s) => s.events(id, { after: 0, limit: 1000 })), (p) => p.events.map((e) => e.kind))

const codeOf = <A, E extends { readonly code: string }, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.either(effect), (r) => (Either.isLeft(r) ? r.left.code : "ok"))

const stepsOf = (driver: Gated, step: LifecycleStep) => driver.calls.filter((c) => c.step === step)

describe("a creation in flight", () => {
  it.scoped("reads during it see the session creating and change nothing; the creation closes with exactly its own records", () => {
    const driver = gatedDriver(["setup"])
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const creating = yield* Effect.fork(sessions.create({ model: scripted, environments: [sandbox] }))
      const id = (yield* Deferred.await(driver.called.setup)).session

      for (let i = 0; i < 2; i++) {
        expect(yield* sessions.get(id)).toMatchObject({ session_id: id, status: "creating" })
        expect((yield* sessions.list({ limit: 10 })).sessions).toMatchObject([{ session_id: id, status: "creating" }])
        expect(yield* kindsOf(id)).toEqual(["session_creation_started", "environment_setup_started"])
        expect((yield* sessions.transcript(id)).messages).toEqual([])
      }

      yield* Deferred.succeed(driver.gates.setup, undefined)
      const created = yield* Fiber.join(creating)
      expect(created).toMatchObject({ session_id: id, status: "idle" })
      expect(yield* kindsOf(id)).toEqual([
        "session_creation_started",
        "environment_setup_started",
        "environment_setup_ended",
        "session_creation_ended"
      ])
      expect((yield* sessions.get(id)).status).toBe("idle")
    }).pipe(Effect.provide(runtime(driver)))
  })

  it.scoped("a delete, an end or a message during it is refused conflict and changes nothing; the creation then answers idle and the session lives", () => {
    const driver = gatedDriver(["setup"])
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const creating = yield* Effect.fork(sessions.create({ model: scripted, environments: [sandbox] }))
      const id = (yield* Deferred.await(driver.called.setup)).session

      const refused = yield* Effect.all([
        Effect.flip(sessions.delete(id)),
        Effect.flip(sessions.end(id)),
        Effect.flip(sessions.send(id, { message: "too soon" })),
        Effect.flip(sessions.submit(id, { message: "too soon" }))
      ], { concurrency: "unbounded" })
      for (const r of refused) {
        expect(r).toMatchObject({ code: "conflict", message: expect.stringContaining("being created") })
      }
      expect(yield* kindsOf(id)).toEqual(["session_creation_started", "environment_setup_started"])

      yield* Deferred.succeed(driver.gates.setup, undefined)
      expect(yield* Fiber.join(creating)).toMatchObject({ session_id: id, status: "idle" })
      expect(yield* kindsOf(id)).toEqual([
        "session_creation_started",
        "environment_setup_started",
        "environment_setup_ended",
        "session_creation_ended"
      ])
      expect((yield* sessions.send(id, { message: "now" })).turn.status).toBe("ended")
      expect(driver.calls.map((c) => c.step)).toEqual(["setup"])
    }).pipe(Effect.provide(runtime(driver)))
  })
})

describe("concurrent ends", () => {
  it.scoped("of an idle session commit one session_end_started and one session_ended, and all answer the same summary", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id: id } = yield* sessions.create({ model: scripted })
      const ends = yield* Effect.all(Array.from({ length: 5 }, () => sessions.end(id)), { concurrency: "unbounded" })
      const kinds = yield* kindsOf(id)
      expect(kinds.filter((k) => k === "session_end_started")).toHaveLength(1)
      expect(kinds.filter((k) => k === "session_ended")).toHaveLength(1)
      expect(kinds.at(-1)).toBe("session_ended")
      for (const e of ends) expect(e).toEqual(ends[0])
      expect(ends[0]).toMatchObject({ status: "ended" })
    }).pipe(Effect.provide(runtimeLayer())))

  it.scoped("of a session with an Environment send one detach, record the ending once, and all answer the same summary", () => {
    const driver = gatedDriver(["detach"])
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id: id } = yield* sessions.create({ model: scripted, environments: [sandbox] })
      const ending = yield* Effect.fork(Effect.all(Array.from({ length: 3 }, () => sessions.end(id)), { concurrency: "unbounded" }))
      yield* Deferred.await(driver.called.detach)
      // The others reach the session while the first ending waits on its detach.
      const late = yield* Effect.fork(Effect.all(Array.from({ length: 2 }, () => sessions.end(id)), { concurrency: "unbounded" }))
      yield* Effect.yieldNow()
      expect((yield* sessions.get(id)).status).toBe("ending")
      yield* Deferred.succeed(driver.gates.detach, undefined)
      const ends = [...(yield* Fiber.join(ending)), ...(yield* Fiber.join(late))]
      for (const e of ends) expect(e).toEqual(ends[0])
      expect(ends[0]).toMatchObject({ status: "ended" })
      expect(stepsOf(driver, "detach")).toHaveLength(1)
      expect((yield* kindsOf(id)).slice(4)).toEqual([
        "session_end_started",
        "environment_detach_started",
        "environment_detach_ended",
        "session_ended"
      ])
    }).pipe(Effect.provide(runtime(driver)))
  })
})

describe("concurrent deletes of a session with an Environment", () => {
  it.scoped("send one teardown; one succeeds and the others are not_found; every read during the teardown is not_found", () => {
    const driver = gatedDriver(["teardown"])
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id: id } = yield* sessions.create({ model: scripted, environments: [sandbox] })
      yield* sessions.end(id)
      const first = yield* Effect.fork(codeOf(sessions.delete(id)))
      yield* Deferred.await(driver.called.teardown)
      const others = yield* Effect.all(Array.from({ length: 4 }, () => codeOf(sessions.delete(id))), { concurrency: "unbounded" })
      expect(others).toEqual(["not_found", "not_found", "not_found", "not_found"])
      expect(yield* codeOf(sessions.get(id))).toBe("not_found")
      expect(yield* codeOf(sessions.events(id, { after: 0, limit: 10 }))).toBe("not_found")
      expect(yield* codeOf(sessions.transcript(id))).toBe("not_found")
      expect(yield* codeOf(sessions.end(id))).toBe("not_found")
      expect((yield* sessions.list({ limit: 10 })).sessions).toEqual([])

      yield* Deferred.succeed(driver.gates.teardown, undefined)
      expect(yield* Fiber.join(first)).toBe("ok")
      expect(stepsOf(driver, "teardown")).toHaveLength(1)
      expect(yield* codeOf(sessions.get(id))).toBe("not_found")
      expect(yield* codeOf(sessions.delete(id))).toBe("not_found")
    }).pipe(Effect.provide(runtime(driver)))
  })

  it.scoped("whose teardown fails: that delete answers teardown_failed, the others not_found, and the session is back as it was for a later delete", () => {
    const driver = gatedDriver(["teardown"], ["teardown"])
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id: id } = yield* sessions.create({ model: scripted, environments: [sandbox] })
      const ended = yield* sessions.end(id)
      const deletes = yield* Effect.fork(Effect.all(Array.from({ length: 4 }, () => codeOf(sessions.delete(id))), { concurrency: "unbounded" }))
      yield* Deferred.await(driver.called.teardown)
      expect(yield* codeOf(sessions.get(id))).toBe("not_found")
      yield* Deferred.succeed(driver.gates.teardown, undefined)
      expect([...(yield* Fiber.join(deletes))].sort()).toEqual(["not_found", "not_found", "not_found", "teardown_failed"])
      expect(stepsOf(driver, "teardown")).toHaveLength(1)
      const back = yield* sessions.get(id)
      expect(back.status).toBe("ended")
      expect(back.last_sequence).toBe(ended.last_sequence + 2)
      expect((yield* kindsOf(id)).slice(-2)).toEqual(["environment_teardown_started", "environment_teardown_failed"])
      yield* sessions.delete(id)
      expect(stepsOf(driver, "teardown")).toHaveLength(2)
      expect(yield* codeOf(sessions.get(id))).toBe("not_found")
    }).pipe(Effect.provide(runtime(driver)))
  })
})

describe("concurrent sends", () => {
  it.scoped("that all pass the session's checks while their loop resolves start one turn; the others are refused session_busy and write nothing", () => {
    const loops = heldResolution()
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id: id } = yield* sessions.create({ model: scripted })
      const turns = Effect.map(kindsOf(id), (kinds) => kinds.filter((k) => k === "turn_started").length)
      loops.hold(3)
      const sent = yield* Effect.all(Array.from({ length: 3 }, (_, i) => codeOf(sessions.send(id, { message: `${i}` }))), { concurrency: "unbounded" })
      expect([...sent].sort()).toEqual(["ok", "session_busy", "session_busy"])
      expect(yield* turns).toBe(1)
      expect((yield* sessions.get(id)).status).toBe("idle")
    }).pipe(Effect.provide(runtimeLayer({ agentloops: loops.wrap })))
  })
})
