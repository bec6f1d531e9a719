/**
 * A create in flight when the server stops is treated as a running turn is (seed, Lifecycle: the
 * drain "drains admitted operations"): `drain` waits for it, and `interruptAll` (a stop past its
 * drain deadline, or a runtime disposed under it) interrupts it. Interrupted, it stops waiting for
 * the setup in flight (recorded `interrupted`, ambiguous: it was sent), sends nothing more — no
 * further setup, no teardown (as after a crash, the failed session's delete sends those) — records
 * the creation failed `interrupted`, and answers `creation_failed` naming the session. Over an
 * Environment driver whose setup never answers unless a test lets it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Fiber, FiberId, Layer, Option, Scope } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import type { MemorySessions } from "../../src/layers/JournalMemory.js"
import { EnvironmentRefused, Environments, type EnvironmentsShape, type LifecycleStep } from "../../src/services/Environments.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { bindingsOf } from "../support/httpEnvironment.js"
import { runtimeLayer } from "../support/runtime.js"

/** A driver whose setup waits for `answer` (never, unless the test gives it); detach and teardown answer at once. */
const slowSetup = () => {
  const calls: Array<{ readonly step: LifecycleStep; readonly environment: string }> = []
  const setupReached = Deferred.unsafeMake<SessionId>(FiberId.none)
  const answer = Deferred.unsafeMake<void>(FiberId.none)
  const abandoned: Array<string> = []
  const step = (name: LifecycleStep) => (op: { readonly session: SessionId; readonly environment: { readonly name: string } }) =>
    Effect.gen(function*() {
      calls.push({ step: name, environment: op.environment.name })
      if (name !== "setup") return { result: null }
      yield* Deferred.succeed(setupReached, op.session)
      yield* Deferred.await(answer).pipe(Effect.onInterrupt(() => Effect.sync(() => void abandoned.push(op.environment.name))))
      return { result: null }
    })
  const shape: EnvironmentsShape = {
    setup: step("setup"),
    detach: step("detach"),
    teardown: step("teardown"),
    call: () => Effect.fail(new EnvironmentRefused({ environment: "a", status: 400, body: null, message: "no calls here" })),
    cancel: () => Effect.succeed({ confirmed: true })
  }
  return { calls, setupReached, answer, abandoned, layer: Layer.succeed(Environments, shape) }
}

/** The runtime over `driver`, its journal in `shared` when given (so that a later runtime reads it). */
const runtime = (driver: ReturnType<typeof slowSetup>, shared?: MemorySessions) =>
  runtimeLayer({
    environments: { layer: driver.layer, bindings: bindingsOf({ boxes: "http://127.0.0.1:1" }) },
    ...(shared ? { journal: JournalMemory.layerOver(shared) } : {})
  })

const environments = [
  { name: "a", driver: "http" as const, binding: "boxes" },
  { name: "b", driver: "http" as const, binding: "boxes" }
]
const request = { model: { provider: "scripted" as const }, environments }

const eventsOf = (id: SessionId) =>
  Effect.map(Effect.flatMap(Sessions, (s) => s.events(id, { after: 0, limit: 100 })), (p) => p.events)

/** What an interrupted create left: its answer, its records, and what the driver was sent. */
const expectInterrupted = (
  driver: ReturnType<typeof slowSetup>,
  id: SessionId,
  exit: Exit.Exit<unknown, { readonly code: string; readonly message: string; readonly details?: unknown }>
) =>
  Effect.gen(function*() {
    const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
    expect(error).toMatchObject({
      code: "creation_failed",
      details: { session_id: id, environment: "a", failure: { code: "interrupted", ambiguous: true } }
    })
    expect(error?.message).toContain("the server is stopping")
    // The setup in flight was abandoned; nothing more was sent: not b's setup, not a's teardown.
    expect(driver.abandoned).toEqual(["a"])
    expect(driver.calls).toEqual([{ step: "setup", environment: "a" }])
    const events = yield* eventsOf(id)
    expect(events.map((e) => e.kind)).toEqual([
      "session_creation_started",
      "environment_setup_started",
      "environment_setup_failed",
      "session_creation_failed"
    ])
    // Both records name the Environment, and the creation is as ambiguous as its setup, as
    // recovery records them after a crash: the setup was sent and not answered.
    expect(events[2]!.data).toMatchObject({ failure: { code: "interrupted", ambiguous: true, details: { environment: "a" } } })
    expect(events[3]!.data).toMatchObject({ failure: { code: "interrupted", ambiguous: true, details: { environment: "a" } } })
    expect((yield* Effect.flatMap(Sessions, (s) => s.get(id))).status).toBe("failed")
  })

describe("a create in flight when the server stops", () => {
  it.scopedLive("drain waits for it to answer", () => {
    const driver = slowSetup()
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const creating = yield* Effect.fork(sessions.create(request))
      yield* Deferred.await(driver.setupReached)
      const draining = yield* Effect.fork(sessions.drain)
      yield* Effect.sleep("50 millis")
      expect(draining.unsafePoll(), "the drain waits for the create").toBeNull()
      yield* Deferred.succeed(driver.answer, undefined)
      yield* Fiber.join(draining)
      expect(creating.unsafePoll(), "the create has answered once the drain is over").not.toBeNull()
      expect(yield* Fiber.join(creating)).toMatchObject({ status: "idle" })
    }).pipe(Effect.provide(runtime(driver)))
  })

  it.scoped("interruptAll interrupts it: the setup in flight is abandoned and recorded, nothing more is sent, the creation is recorded failed `interrupted` and answered creation_failed", () => {
    const driver = slowSetup()
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const creating = yield* Effect.fork(sessions.create(request))
      const id = yield* Deferred.await(driver.setupReached)
      yield* sessions.interruptAll
      expect(creating.unsafePoll(), "interruptAll waits until the create has answered").not.toBeNull()
      yield* expectInterrupted(driver, id, yield* Fiber.await(creating))
      // The failed session can be deleted: its delete tears down the Environment that may stand.
      yield* sessions.delete(id)
      expect(driver.calls.map((c) => `${c.step} ${c.environment}`)).toEqual(["setup a", "teardown a"])
    }).pipe(Effect.provide(runtime(driver)))
  })

  it.scoped("once the drain has begun, a create, an end or a delete that reaches Sessions is refused overloaded having done nothing: no session journaled, nothing sent to an Environment", () => {
    const driver = slowSetup()
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const plain = (yield* sessions.create({ model: { provider: "scripted" } })).session_id
      const before = yield* journal.list
      yield* sessions.drain
      for (const refused of [sessions.create(request), sessions.end(plain), sessions.delete(plain)] as ReadonlyArray<Effect.Effect<unknown, { readonly code: string }>>) {
        const exit = yield* Effect.exit(refused)
        const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
        expect(error).toMatchObject({ code: "overloaded", message: expect.stringContaining("stopping") })
      }
      expect(yield* journal.list).toEqual(before)
      expect((yield* sessions.get(plain)).status).toBe("idle")
      expect(driver.calls).toEqual([])
    }).pipe(Effect.provide(runtime(driver)))
  })

  it.scoped("a runtime disposed under it interrupts it the same way, its records written before the journal closes", () => {
    const driver = slowSetup()
    // The journal's store outlives the runtime closed under the create: a new runtime reads it after.
    const shared: MemorySessions = new Map()
    return Effect.gen(function*() {
      const scope = yield* Scope.make()
      const sessions = Context.get(yield* Layer.buildWithScope(runtime(driver, shared), scope), Sessions)
      const creating = yield* Effect.fork(sessions.create(request))
      const id = yield* Deferred.await(driver.setupReached)
      yield* Scope.close(scope, Exit.void)
      expect(creating.unsafePoll(), "the runtime closed once the create had answered").not.toBeNull()
      const exit = yield* Fiber.await(creating)
      yield* expectInterrupted(driver, id, exit).pipe(Effect.provide(runtime(driver, shared)))
    })
  })
})
