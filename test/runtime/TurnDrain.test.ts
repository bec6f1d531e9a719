/**
 * Sends and submits at a graceful stop (seed, Lifecycle: SIGTERM "stops admitting work and drains
 * admitted operations"). A turn's request is in flight from the moment Sessions takes it, as a
 * create, an end or a delete is (sessions/Admitted.ts): the drain waits for it, and one that has
 * not started its turn when the drain begins — waiting for its share of the working memory, or for
 * its session's open — never starts one: it is refused 503 `overloaded` ("the server is
 * stopping"), having written nothing. A turn that started before the drain is drained: it runs to
 * its end and its request is answered before the drain is over. A keyed retry whose answer is
 * stored is still answered from the session's journal (a stored answer is never refused).
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Exit, Fiber, FiberId, Layer, TestClock } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import { SESSION_RELEASE_GRACE_MS } from "../../src/domain/Limits.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import * as ModelsScripted from "../../src/layers/ModelsScripted.js"
import { Journal } from "../../src/services/Journal.js"
import type { ModelsShape } from "../../src/services/Models.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

const scripted = { model: { provider: "scripted" as const } }
const records = (session: SessionId) => Effect.flatMap(Journal, (journal) => journal.read(session, { after: 0, limit: 100_000 }))

/** The scripted model, but a message "hold" waits for `release`. */
const holdingModel = () => {
  const release = Deferred.unsafeMake<void>(FiberId.none)
  const models: ModelsShape = {
    call: (call) =>
      JSON.stringify(call.request.messages[call.request.messages.length - 1] ?? "").includes("hold")
        ? Effect.zipRight(Deferred.await(release), ModelsScripted.scripted.call(call))
        : ModelsScripted.scripted.call(call)
  }
  return { models, release }
}

/** The memory journal, but once `hold` is called its reads wait until `open` (a session's open parked on its journal). */
const heldReads = () => {
  let held: Deferred.Deferred<void> | undefined
  let waiting = 0
  const gate = <A, E>(read: Effect.Effect<A, E>) =>
    Effect.suspend(() => {
      if (held === undefined) return read
      waiting++
      return Effect.zipRight(Deferred.await(held), read)
    })
  const layer = Layer.scoped(
    Journal,
    Effect.map(JournalMemory.make, ({ journal }) => ({
      ...journal,
      read: (session, options) => gate(journal.read(session, options)),
      lastSequence: (session) => gate(journal.lastSequence(session))
    }))
  )
  return {
    layer,
    hold: () => void (held = Deferred.unsafeMake<void>(FiberId.none)),
    open: () => Effect.suspend(() => (held === undefined ? Effect.void : Deferred.succeed(held, undefined))),
    get waiting() {
      return waiting
    }
  }
}

/** Lets the forked fibers run until `done` says so (at most a generous number of yields). */
const until = (what: string, done: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; !done(); i++) {
      if (i > 10_000) return yield* Effect.dieMessage(`never reached: ${what}`)
      yield* Effect.yieldNow()
    }
  })

const expectStopping = (answer: Either.Either<unknown, unknown>, what: string) => {
  expect(Either.isLeft(answer), what).toBe(true)
  expect(Either.isLeft(answer) && answer.left, what).toMatchObject({ _tag: "Overloaded", code: "overloaded", retryable: true })
  expect(Either.isLeft(answer) ? (answer.left as { readonly message: string }).message : "", what).toContain("stopping")
}

describe("sends and submits at a graceful stop", () => {
  it.scoped("a send or submit parked on the working memory when the drain begins is refused overloaded (stopping), starts no turn and leaves its journal untouched; a send whose turn started before the drain finishes before the drain completes", () => {
    const { models, release } = holdingModel()
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const a = (yield* sessions.create(scripted)).session_id
      const b = (yield* sessions.create(scripted)).session_id
      // With a bound of one byte, a's running turn holds all of it: b's requests wait for their share.
      const running = yield* Effect.fork(sessions.send(a, { message: "hold" }))
      yield* TestClock.adjust("100 millis")
      expect((yield* sessions.get(a)).status).toBe("running")
      const before = yield* records(b)
      const parked: ReadonlyArray<Fiber.RuntimeFiber<Either.Either<unknown, unknown>>> = [
        yield* Effect.fork(Effect.either(sessions.send(b, { message: "parked send" }))),
        yield* Effect.fork(Effect.either(sessions.submit(b, { message: "parked submit" }))),
        yield* Effect.fork(Effect.either(sessions.sendKeyed(b, { message: "parked keyed" }, { key: "new", hash: "h" })))
      ]
      yield* TestClock.adjust("1 second")
      for (const p of parked) expect(p.unsafePoll(), "parked on the working memory").toBeNull()

      const draining = yield* Effect.fork(sessions.drain)
      yield* TestClock.adjust("1 second")
      // The unkeyed ones are refused as the drain begins, without waiting out their wait.
      expectStopping(yield* Fiber.join(parked[0]!), "the parked send")
      expectStopping(yield* Fiber.join(parked[1]!), "the parked submit")
      expect(draining.unsafePoll(), "the drain waits for the running turn").toBeNull()
      expect(running.unsafePoll()).toBeNull()

      // Arriving now, a send or a submit is refused at once.
      expectStopping(yield* Effect.either(sessions.send(b, { message: "late" })), "a send after the drain began")
      expectStopping(yield* Effect.either(sessions.submit(b, { message: "late" })), "a submit after the drain began")

      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(draining)
      // The turn admitted before the drain has answered by the time the drain is over.
      const answered = running.unsafePoll()
      expect(answered !== null && Exit.isSuccess(answered) && answered.value.turn.status).toBe("ended")
      // The keyed one, given its share once the turn closed, found its key new: refused, no turn.
      expectStopping(yield* Fiber.join(parked[2]!), "the parked keyed send with a new key")
      expect(yield* records(b)).toEqual(before)
      expect((yield* sessions.get(b)).status).toBe("idle")
    }).pipe(Effect.provide(runtimeLayer({ models, config: { workingMemoryBytes: 1 } })))
  })

  it.scoped("a send, a submit or a keyed send with a new key parked on its session's cold open when the drain begins is refused overloaded (stopping) and leaves the journal untouched; a keyed retry of an answered send parked there is answered from the journal", () => {
    const journal = heldReads()
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const c = (yield* sessions.create(scripted)).session_id
      const sent = yield* sessions.sendKeyed(c, { message: "first" }, { key: "k", hash: "h" })
      expect(sent._tag).toBe("Answered")
      const before = yield* records(c)
      // Released (no idle TTL) once its grace is over: the next request opens it from the
      // journal, whose reads are held.
      yield* TestClock.adjust(`${2 * SESSION_RELEASE_GRACE_MS} millis`)
      for (let i = 0; (yield* sessions.warm) > 0; i++) {
        if (i > 10_000) return yield* Effect.dieMessage("the session was never released")
        yield* Effect.yieldNow()
      }
      journal.hold()
      const parked: ReadonlyArray<Fiber.RuntimeFiber<Either.Either<unknown, unknown>>> = [
        yield* Effect.fork(Effect.either(sessions.send(c, { message: "parked send" }))),
        yield* Effect.fork(Effect.either(sessions.submit(c, { message: "parked submit" }))),
        yield* Effect.fork(Effect.either(sessions.sendKeyed(c, { message: "parked keyed" }, { key: "new", hash: "h" }))),
        yield* Effect.fork(Effect.either(sessions.sendKeyed(c, { message: "first" }, { key: "k", hash: "h" })))
      ]
      yield* until("the open to reach the journal", () => journal.waiting > 0)
      for (let i = 0; i < 100; i++) yield* Effect.yieldNow()
      for (const p of parked) expect(p.unsafePoll(), "parked on the open").toBeNull()

      const draining = yield* Effect.fork(sessions.drain)
      for (let i = 0; i < 100; i++) yield* Effect.yieldNow()
      expect(draining.unsafePoll(), "the drain waits for the requests it took").toBeNull()
      yield* journal.open()
      yield* Fiber.join(draining)
      expectStopping(yield* Fiber.join(parked[0]!), "the parked send")
      expectStopping(yield* Fiber.join(parked[1]!), "the parked submit")
      expectStopping(yield* Fiber.join(parked[2]!), "the parked keyed send with a new key")
      expect(yield* Fiber.join(parked[3]!)).toEqual(Either.right(sent))
      expect(yield* records(c)).toEqual(before)
      // And after the drain, a retry of the answered key is still answered, as it was before.
      expect(yield* sessions.sendKeyed(c, { message: "first" }, { key: "k", hash: "h" })).toEqual(sent)
      expect(yield* records(c)).toEqual(before)
    }).pipe(Effect.provide(runtimeLayer({ journal: journal.layer })))
  })

  it.scoped("a submit whose turn started before the drain is drained: the drain completes only once its turn has closed", () => {
    const { models, release } = holdingModel()
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const a = (yield* sessions.create(scripted)).session_id
      const receipt = yield* sessions.submit(a, { message: "hold" })
      const draining = yield* Effect.fork(sessions.drain)
      yield* TestClock.adjust("1 second")
      expect(draining.unsafePoll()).toBeNull()
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(draining)
      const after = yield* records(a)
      expect(after.filter((r) => r.sequence >= receipt.sequence).map((r) => r.kind).at(-1)).toBe("turn_ended")
    }).pipe(Effect.provide(runtimeLayer({ models })))
  })
})
