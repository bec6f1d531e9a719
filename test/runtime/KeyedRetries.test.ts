/**
 * A keyed send or submit that was answered keeps its answer in its session's journal, and a retry
 * with its key is answered from there whatever the session is doing now: running another turn,
 * ending or ended. A refusal that says nothing happened (`session_busy`, `session_ended`) for a
 * request that did happen would tell the client the opposite of the truth, and the HTTP layer
 * keeps a definite refusal under the key for good (docs/api.md, "Idempotency").
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

const keyed = (key: string, hash = `hash of ${key}`) => ({ key, hash })
/** Two instant answers, then one that takes ten minutes of the test clock (it never advances here). */
const model = { provider: "scripted" as const, replies: [{ text: "one" }, { text: "two" }, { text: "slow", delay_ms: 600_000 }] }

const failureTag = (e: Either.Either<unknown, unknown>) => (Either.isLeft(e) ? (e.left as { readonly _tag: string })._tag : "answered")

describe("keyed retries answered from the session's journal", () => {
  it.scopedLive("while another turn runs, a retry of an answered keyed send or submit replays its answer (another body is conflict), never session_busy; a new key is busy", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const id = (yield* sessions.create({ model })).session_id
      const sent = yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))
      expect(sent._tag).toBe("Answered")
      const receipt = yield* sessions.submitKeyed(id, { message: "2" }, keyed("k2"))
      expect(receipt._tag).toBe("Answered")
      yield* untilIdle(id)
      // A third turn, its model call held: the session is running.
      yield* sessions.submit(id, { message: "3" })
      expect((yield* sessions.get(id)).status).toBe("running")

      expect(yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))).toEqual(sent)
      expect(yield* sessions.submitKeyed(id, { message: "2" }, keyed("k2"))).toEqual(receipt)
      expect(yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1", "another body"))).toEqual({ _tag: "Conflict" })
      expect(yield* sessions.submitKeyed(id, { message: "2" }, keyed("k2", "another body"))).toEqual({ _tag: "Conflict" })
      // A key the session never saw is refused as before: nothing ran.
      expect(failureTag(yield* Effect.either(sessions.sendKeyed(id, { message: "4" }, keyed("k4"))))).toBe("SessionBusy")
      expect(failureTag(yield* Effect.either(sessions.submitKeyed(id, { message: "4" }, keyed("k4"))))).toBe("SessionBusy")
    }).pipe(Effect.provide(runtimeLayer())))

  it.scopedLive("after the session ended, a retry of an answered keyed send or submit replays its answer, never session_ended; a new key is refused session_ended", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      // Kept in memory after its end (a warm session), as a retry soon after often finds it.
      const id = (yield* sessions.create({ model, idle_ttl_ms: 60_000 })).session_id
      const sent = yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))
      const receipt = yield* sessions.submitKeyed(id, { message: "2" }, keyed("k2"))
      yield* untilIdle(id)
      yield* sessions.end(id)
      expect((yield* sessions.get(id)).status).toBe("ended")

      expect(yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))).toEqual(sent)
      expect(yield* sessions.submitKeyed(id, { message: "2" }, keyed("k2"))).toEqual(receipt)
      expect(yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1", "another body"))).toEqual({ _tag: "Conflict" })
      expect(failureTag(yield* Effect.either(sessions.sendKeyed(id, { message: "3" }, keyed("k3"))))).toBe("SessionEnded")
      expect(failureTag(yield* Effect.either(sessions.submitKeyed(id, { message: "3" }, keyed("k3"))))).toBe("SessionEnded")
    }).pipe(Effect.provide(runtimeLayer())))
})
