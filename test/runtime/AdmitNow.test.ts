/**
 * A turn's request on a session whose cell is in memory (used within its release grace or TTL) is
 * admitted in one synchronous step (TurnAdmission.ts, `admitNow`): the operation in flight, its
 * share of the working memory and its use of the cell are taken together and given back by one
 * finalizer. Whatever the request comes to (a turn that ends or fails, a refusal of a busy or
 * ended session, a key used with another body, a replay), each is given back: with a bound of one
 * byte every turn takes the whole bound, so a share kept shows as the next turn refused; an
 * operation left in flight as a drain that never completes; a use of the cell never given back as
 * a cell never released.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, FiberId, TestClock } from "effect"
import { SESSION_RELEASE_GRACE_MS } from "../../src/domain/Limits.js"
import * as ModelsScripted from "../../src/layers/ModelsScripted.js"
import { ModelFailed, type ModelsShape } from "../../src/services/Models.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

const scripted = { model: { provider: "scripted" as const } }

/** The scripted model, but a message "hold" waits for the gate, and "fail" fails. */
const gate = Deferred.unsafeMake<void>(FiberId.none)
const models: ModelsShape = {
  call: (call) => {
    const last = JSON.stringify(call.request.messages[call.request.messages.length - 1] ?? "")
    if (last.includes("hold")) return Effect.zipRight(Deferred.await(gate), ModelsScripted.scripted.call(call))
    if (last.includes("fail")) return Effect.fail(new ModelFailed({ code: "model_unavailable", message: "down", ambiguous: false, retryable: true }))
    return ModelsScripted.scripted.call(call)
  }
}

describe("a turn admitted in one step on a session in memory", () => {
  it.scoped("gives back its share of the working memory, its operation in flight and its use of the cell whatever it comes to", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const a = (yield* sessions.create(scripted)).session_id
      const b = (yield* sessions.create(scripted)).session_id
      // Both in memory (their creations' grace): every request below is admitted in one step.
      expect(yield* sessions.warm).toBe(2)

      // Ended, failed, keyed, replayed, and a key used with another body.
      expect((yield* sessions.send(a, { message: "hello" })).turn.status).toBe("ended")
      expect((yield* sessions.send(a, { message: "fail" })).turn.status).toBe("failed")
      const first = yield* sessions.sendKeyed(a, { message: "keyed" }, { key: "k", hash: "h" })
      expect(first._tag).toBe("Answered")
      expect(yield* sessions.sendKeyed(a, { message: "keyed" }, { key: "k", hash: "h" })).toEqual(first)
      expect((yield* sessions.sendKeyed(a, { message: "other" }, { key: "k", hash: "other" }))._tag).toBe("Conflict")
      expect((yield* sessions.submitKeyed(a, { message: "submitted" }, { key: "s", hash: "h" }))._tag).toBe("Answered")
      yield* untilIdle(a)

      // Refused busy: a turn of `a` holds the whole bound, and `b`'s turns wait for it.
      yield* sessions.submit(a, { message: "hold" })
      const busy = yield* Effect.either(sessions.send(a, { message: "hello" }))
      expect(Either.isLeft(busy) && busy.left._tag).toBe("SessionBusy")
      yield* Deferred.succeed(gate, undefined)
      yield* untilIdle(a)

      // Refused ended.
      yield* sessions.end(a)
      const ended = yield* Effect.either(sessions.send(a, { message: "hello" }))
      expect(Either.isLeft(ended) && ended.left._tag).toBe("SessionEnded")
      // A keyed one is admitted before its session's state is looked at (its key may be answered),
      // and refused by its turn's start, which takes nothing: its share is given back here.
      const keyedEnded = yield* Effect.either(sessions.submitKeyed(a, { message: "hello" }, { key: "ended", hash: "h" }))
      expect(Either.isLeft(keyedEnded) && keyedEnded.left._tag).toBe("SessionEnded")

      // Every share given back: another session's turn gets the whole bound at once.
      expect((yield* sessions.send(b, { message: "hello" })).turn.status).toBe("ended")
      yield* untilIdle(b)
      // Every operation answered: the drain has nothing to wait for.
      yield* sessions.drain
      // Every use given back: both cells released once their grace is over.
      yield* TestClock.adjust(`${2 * SESSION_RELEASE_GRACE_MS} millis`)
      expect(yield* sessions.warm).toBe(0)
    }).pipe(Effect.provide(runtimeLayer({ models, config: { workingMemoryBytes: 1 } }))))
})
