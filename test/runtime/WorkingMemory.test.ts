/**
 * Turns and the working-memory bound (BRAIN_WORKING_MEMORY_BYTES): a turn holds its share from
 * its admission until it closes, whichever way it closes, and gives it back; a turn that cannot
 * get its share in time is refused `overloaded` and journals nothing. With a bound of one byte
 * every turn takes the whole bound, so a share never given back shows as the next turn refused.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, FiberId, TestClock } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import * as ModelsScripted from "../../src/layers/ModelsScripted.js"
import { Journal } from "../../src/services/Journal.js"
import { Projection } from "../../src/services/Projection.js"
import { ModelFailed, type ModelsShape } from "../../src/services/Models.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

const scripted = { model: { provider: "scripted" as const } }
const records = (session: SessionId) => Effect.flatMap(Journal, (journal) => journal.read(session, { after: 0, limit: 100_000 }))

/** The scripted model, but a message "hold" waits for `release`, and "fail" fails. */
const gate = Deferred.unsafeMake<void>(FiberId.none)
const models: ModelsShape = {
  call: (call) => {
    const last = JSON.stringify(call.request.messages[call.request.messages.length - 1] ?? "")
    
    if (last.includes("hold")) return Effect.zipRight(Deferred.await(gate), ModelsScripted.scripted.call(call))
    if (last.includes("fail")) return Effect.fail(new ModelFailed({ code: "model_unavailable", message: "down", ambiguous: false, retryable: true }))
    return ModelsScripted.scripted.call(call)
  }
}

/** A send forked, given time past the admission's wait, and its answer. */
const sendPastTheWait = (session: SessionId, message: string) =>
  Effect.gen(function*() {
    const sessions = yield* Sessions
    const fiber = yield* Effect.fork(Effect.either(sessions.send(session, { message })))
    yield* TestClock.adjust("11 seconds")
    return yield* Fiber.join(fiber)
  })

describe("turns and the working-memory bound", () => {
  it.scoped("a turn holds its share of the working memory until it closes (ended, failed or cancelled) and then gives it back; one that cannot get its share in time is refused overloaded and journals nothing", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const a = (yield* sessions.create(scripted)).session_id
      const b = (yield* sessions.create(scripted)).session_id

      // A running turn holds the whole bound: another session's send waits, then is refused.
      yield* sessions.submit(a, { message: "hold" })
      const before = yield* records(b)
      const refused = yield* sendPastTheWait(b, "hello")
      expect(Either.isLeft(refused) && refused.left).toMatchObject({ _tag: "Overloaded", code: "overloaded", retryable: true })
      expect(Either.isLeft(refused) ? refused.left.message : "").toContain("BRAIN_WORKING_MEMORY_BYTES")
      expect(yield* records(b)).toEqual(before)
      expect((yield* sessions.get(b)).status).toBe("idle")

      // Cancelled: its share is given back.
      yield* sessions.interrupt(a)
      const afterCancel = yield* sendPastTheWait(b, "hello")
      expect(Either.isRight(afterCancel) && afterCancel.right.turn.status).toBe("ended")

      // Failed: given back too.
      const failed = yield* sendPastTheWait(a, "fail")
      expect(Either.isRight(failed) && failed.right.turn.status).toBe("failed")
      const afterFailure = yield* sendPastTheWait(b, "hello")
      expect(Either.isRight(afterFailure) && afterFailure.right.turn.status).toBe("ended")

      // Refused before it started (a busy session): nothing kept.
      yield* sessions.submit(a, { message: "hold" })
      const busy = yield* Effect.either(sessions.send(a, { message: "again" }))
      expect(Either.isLeft(busy)).toBe(true)
      yield* Deferred.succeed(gate, undefined)
      yield* untilIdle(a)
      // A keyed send answered from its key starts no turn, and keeps nothing.
      yield* sessions.sendKeyed(b, { message: "keyed" }, { key: "k", hash: "h" })
      yield* sessions.sendKeyed(b, { message: "keyed" }, { key: "k", hash: "h" })
      const last = yield* sendPastTheWait(b, "hello")
      expect(Either.isRight(last) && last.right.turn.status).toBe("ended")
    }).pipe(Effect.provide(runtimeLayer({ models, config: { workingMemoryBytes: 1 } }))))

  it.scoped("a create holds a share of the working memory by its body: large creates past the bound wait in order or are refused overloaded having created nothing, while a small one that fits beside what is held goes ahead", () => {
    const held = Deferred.unsafeMake<void>(FiberId.none)
    const holding: ModelsShape = {
      call: (call) =>
        JSON.stringify(call.request.messages[call.request.messages.length - 1] ?? "").includes("hold")
          ? Effect.zipRight(Deferred.await(held), ModelsScripted.scripted.call(call))
          : ModelsScripted.scripted.call(call)
    }
    const large = { ...scripted, transcript: [{ role: "user" as const, content: "x".repeat(600_000) }] }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const a = (yield* sessions.create(scripted)).session_id
      // A running turn holds 16 bytes a byte of its 150 kB message: 2.4 of the 4 MiB.
      yield* sessions.submit(a, { message: "hold" + "y".repeat(150_000) })
      // A small create fits beside it.
      const small = yield* Effect.either(sessions.create({ ...scripted, transcript: [{ role: "user", content: "hi" }] }))
      expect(Either.isRight(small)).toBe(true)
      const before = [...(yield* journal.list)].sort()
      // A large one (CREATE_HEAP_PER_BODY_BYTE a byte of its 600 kB transcript: more than the 1.6 MiB left) does not: it waits, then is refused, having created nothing.
      const refusedFiber = yield* Effect.fork(Effect.either(sessions.create(large)))
      yield* TestClock.adjust("11 seconds")
      const refused = yield* Fiber.join(refusedFiber)
      expect(Either.isLeft(refused) && refused.left).toMatchObject({ _tag: "Overloaded", code: "overloaded", retryable: true })
      expect(Either.isLeft(refused) ? refused.left.message : "").toContain("BRAIN_WORKING_MEMORY_BYTES")
      expect([...(yield* journal.list)].sort()).toEqual(before)
      // Two large ones at once: the first waits until the turn gives its share back, the second
      // until the first has answered (the two together pass the bound); both are created.
      const first = yield* Effect.fork(sessions.create(large))
      const second = yield* Effect.fork(sessions.create(large))
      yield* TestClock.adjust("5 seconds")
      expect(first.unsafePoll()).toBeNull()
      yield* Deferred.succeed(held, undefined)
      yield* untilIdle(a)
      const created = [yield* Fiber.join(first), yield* Fiber.join(second)]
      expect(created.map((c) => c.status)).toEqual(["idle", "idle"])
      for (const c of created) expect((yield* sessions.transcript(c.session_id)).messages).toHaveLength(1)
    }).pipe(Effect.provide(runtimeLayer({ models: holding, config: { workingMemoryBytes: 4 * 1024 * 1024 } })))
  })

  for (
    const [where, config] of [
      ["its cell in memory", { sessionIdleTtlMs: 0 }],
      ["its state cached, its cell released", {}],
      ["nothing of it in memory: weighed as its open alone", { cacheBytes: 0 }]
    ] as const
  ) {
    it.scoped(`a keyed send or submit whose answer is stored (${where}) is answered without waiting for a turn's share of the working memory; a new key still waits for one`, () => {
      const held = Deferred.unsafeMake<void>(FiberId.none)
      const holding: ModelsShape = {
        call: (call) =>
          JSON.stringify(call.request.messages[call.request.messages.length - 1] ?? "").includes("hold")
            ? Effect.zipRight(Deferred.await(held), ModelsScripted.scripted.call(call))
            : ModelsScripted.scripted.call(call)
      }
      /** A message whose turn would take 160 kB, more than is left beside the running turn's. */
      const large = (m: string) => m + "f".repeat(10_000)
      /** Its answer, given a second (no more) to come. */
      const within = <A, E>(effect: Effect.Effect<A, E>) =>
        Effect.gen(function*() {
          const fiber = yield* Effect.fork(effect)
          yield* TestClock.adjust("1 second")
          const answered = yield* Fiber.poll(fiber)
          expect(answered._tag).toBe("Some")
          return yield* Fiber.join(fiber)
        })
      return Effect.gen(function*() {
        const sessions = yield* Sessions
        const a = (yield* sessions.create(scripted)).session_id
        const b = (yield* sessions.create(scripted)).session_id
        const sent = yield* sessions.sendKeyed(b, { message: large("first") }, { key: "k", hash: "h" })
        const submitted = yield* sessions.submitKeyed(b, { message: large("second") }, { key: "s", hash: "h" })
        yield* untilIdle(b)
        // A running turn holds 16 bytes a byte of its 60 kB message: all but about 80 kB of the 1 MiB.
        // With nothing of b in memory, its open is weighed too (2 bytes a byte it reads): the
        // running turn leaves room for that open and 80 kB more, still short of a turn's share.
        const cold = Object.hasOwn(config, "cacheBytes")
        const projection = yield* Projection
        const openOf = (id: SessionId) => Effect.map(projection.openBytes!(id), (bytes) => 2 * bytes)
        const hold = cold ? Math.floor((1024 * 1024 - (yield* openOf(a)) - (yield* openOf(b)) - 80_000) / 16) : 60_000
        yield* sessions.submit(a, { message: "hold" + "y".repeat(hold) })
        const before = yield* records(b)
        expect(yield* within(sessions.sendKeyed(b, { message: large("first") }, { key: "k", hash: "h" }))).toEqual(sent)
        expect(yield* within(sessions.submitKeyed(b, { message: large("second") }, { key: "s", hash: "h" }))).toEqual(submitted)
        expect((yield* within(sessions.sendKeyed(b, { message: large("other") }, { key: "k", hash: "other" })))._tag).toBe("Conflict")
        expect(yield* records(b)).toEqual(before)
        // A new key runs a turn (640 kB for its 40 kB message): it waits for its share, and is refused past the wait.
        const fresh = yield* Effect.fork(Effect.either(sessions.sendKeyed(b, { message: "z".repeat(40_000) }, { key: "n", hash: "h" })))
        yield* TestClock.adjust("11 seconds")
        const refused = yield* Fiber.join(fresh)
        expect(Either.isLeft(refused) && refused.left._tag).toBe("Overloaded")
        expect(yield* records(b)).toEqual(before)
        yield* Deferred.succeed(held, undefined)
        yield* untilIdle(a)
      }).pipe(Effect.provide(runtimeLayer({ models: holding, config: { workingMemoryBytes: 1024 * 1024, ...config } })))
    })
  }
})
