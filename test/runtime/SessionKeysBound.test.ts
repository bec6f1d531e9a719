/**
 * The bound on the idempotency keys one session holds (BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS): the
 * keys of its keyed sends and submits, live or expired and not yet pruned, each an entry of its
 * folded state's `requests` and of every checkpoint. At the bound a keyed send or submit with a
 * new key is refused `overloaded` (retryable) before anything is journaled; keys it holds still
 * answer, sends without a key run, and room comes from keys expiring.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Logger, TestClock } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { SessionId } from "../../src/domain/Ids.js"
import { SESSION_KEYS_PRUNE_MS } from "../../src/domain/Limits.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { tempDir } from "../support/journals.js"
import { heldResolution, runtimeLayer, untilIdle } from "../support/runtime.js"

const BOUND = 3
const scripted = { model: { provider: "scripted" as const } }
const keyed = (key: string, hash = `hash of ${key}`) => ({ key, hash })

/** Every record of the session's journal. */
const records = (session: SessionId) => Effect.flatMap(Journal, (journal) => journal.read(session, { after: 0, limit: 100_000 }))

const expectFull = (refused: Either.Either<unknown, unknown>, keys = BOUND) => {
  expect(Either.isLeft(refused), JSON.stringify(refused)).toBe(true)
  const e = Either.isLeft(refused) ? (refused.left as { readonly message: string }) : undefined
  expect(e).toMatchObject({
    _tag: "Overloaded",
    code: "overloaded",
    retryable: true,
    details: { setting: "BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS", keys, max_keys: BOUND }
  })
  expect(e?.message).toContain("BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS")
}

describe("the bound on a session's idempotency keys", () => {
  it.scoped("at BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS a keyed send or submit with a new key is refused overloaded and journals nothing; held keys replay, a send without a key runs, another session has its own bound", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const id = (yield* sessions.create(scripted)).session_id
      const first = yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))
      expect(first._tag).toBe("Answered")
      yield* sessions.sendKeyed(id, { message: "2" }, keyed("k2"))
      const receipt = yield* sessions.submitKeyed(id, { message: "3" }, keyed("k3"))
      yield* untilIdle(id)
      const before = yield* records(id)

      // A new key, as a send or a submit (a submit's key is its own scope: `k1` is new there).
      expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "4" }, keyed("k4"))))
      expectFull(yield* Effect.either(sessions.submitKeyed(id, { message: "4" }, keyed("k4"))))
      expectFull(yield* Effect.either(sessions.submitKeyed(id, { message: "1" }, keyed("k1"))))
      expect(yield* records(id)).toEqual(before)
      expect((yield* sessions.get(id)).status).toBe("idle")

      // Keys held answer as always, and write nothing.
      expect(yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))).toEqual(first)
      expect(yield* sessions.submitKeyed(id, { message: "3" }, keyed("k3"))).toEqual(receipt)
      expect(yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1", "another body"))).toEqual({ _tag: "Conflict" })
      expect(yield* records(id)).toEqual(before)

      // A send without a key runs; so does a new key on another session.
      expect((yield* sessions.send(id, { message: "5" })).turn.status).toBe("ended")
      const other = (yield* sessions.create(scripted)).session_id
      expect((yield* sessions.sendKeyed(other, { message: "4" }, keyed("k4")))._tag).toBe("Answered")
      expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "4" }, keyed("k4"))))
    }).pipe(Effect.provide(runtimeLayer({ config: { maxSessionIdempotencyKeys: BOUND } }))))

  it.scoped("expiry makes room: a full session prunes keys expired SESSION_KEYS_PRUNE_MS ago before it refuses, and an expired key it still holds is claimed again without room", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      // Retention / 8, when a session not at its bound prunes, is far longer than SESSION_KEYS_PRUNE_MS.
      const retentionMs = 3_600_000
      expect(retentionMs / 8).toBeGreaterThan(SESSION_KEYS_PRUNE_MS)
      const id = (yield* sessions.create(scripted)).session_id
      for (const key of ["k1", "k2", "k3"]) yield* sessions.sendKeyed(id, { message: key }, keyed(key))
      expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "k4" }, keyed("k4"))))

      // Expired, not yet pruned: the keys still count, but an expired key is claimed again in its place.
      yield* TestClock.adjust(Duration.millis(retentionMs))
      expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "k4" }, keyed("k4"))))
      const rerun = yield* sessions.sendKeyed(id, { message: "k1 again" }, keyed("k1", "a new body"))
      expect(rerun._tag).toBe("Answered")
      yield* TestClock.adjust(Duration.millis(SESSION_KEYS_PRUNE_MS - 1))
      expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "k4" }, keyed("k4"))))

      // SESSION_KEYS_PRUNE_MS past their expiry, k2 and k3 are pruned: two new keys fit, a third does not.
      yield* TestClock.adjust(Duration.millis(1))
      expect((yield* sessions.sendKeyed(id, { message: "k4" }, keyed("k4")))._tag).toBe("Answered")
      expect((yield* sessions.sendKeyed(id, { message: "k5" }, keyed("k5")))._tag).toBe("Answered")
      expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "k6" }, keyed("k6"))))
      // The re-claimed key is held with its new body.
      expect(yield* sessions.sendKeyed(id, { message: "k1 again" }, keyed("k1", "a new body"))).toEqual(rerun)
    }).pipe(Effect.provide(runtimeLayer({ config: { maxSessionIdempotencyKeys: BOUND, requestRetentionMs: 3_600_000 } }))))

  it.scoped("refusing at the bound is said in the log, naming the setting, at most once a minute however many keys are refused", () =>
    Effect.gen(function*() {
      const warnings: Array<string> = []
      const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ logLevel, message }) => {
        if (logLevel._tag === "Warning") warnings.push(String(message))
      }))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const id = (yield* sessions.create(scripted)).session_id
        for (const key of ["k1", "k2", "k3"]) yield* sessions.sendKeyed(id, { message: key }, keyed(key))
        for (let i = 0; i < 20; i++) expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "new" }, keyed(`new-${i}`))))
        expect(warnings.length).toBe(1)
        expect(warnings[0]).toContain("BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS")
        expect(warnings[0]).toContain(id)
        yield* TestClock.adjust(Duration.millis(SESSION_KEYS_PRUNE_MS - 1))
        expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "new" }, keyed("new"))))
        expect(warnings.length).toBe(1)
        yield* TestClock.adjust(Duration.millis(1))
        expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "new" }, keyed("new"))))
        expect(warnings.length).toBe(2)
      }).pipe(Effect.provide(capture))
    }).pipe(Effect.provide(runtimeLayer({ config: { maxSessionIdempotencyKeys: BOUND } }))))

  it.scopedLive("a session reopened from its checkpoint, or from its journal alone, holds the same keys: a new key is still refused, held ones replay", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const runtime = runtimeLayer({ journal: { dataDir }, config: { maxSessionIdempotencyKeys: BOUND } })
      const checkpoint = (id: string) => path.join(dataDir, "sessions", id, "checkpoint")
      const { first, id } = yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const id = (yield* sessions.create(scripted)).session_id
        const first = yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))
        // Enough records for a checkpoint (one per 256 records at least), then the other keys.
        for (let i = 0; i < 40; i++) yield* sessions.send(id, { message: `turn ${i}` })
        yield* sessions.sendKeyed(id, { message: "2" }, keyed("k2"))
        yield* sessions.sendKeyed(id, { message: "3" }, keyed("k3"))
        expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "4" }, keyed("k4"))))
        return { first, id }
      }).pipe(Effect.provide(runtime))
      expect(fs.existsSync(checkpoint(id))).toBe(true)

      const reopened = Effect.gen(function*() {
        const sessions = yield* Sessions
        const before = yield* records(id)
        expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "4" }, keyed("k4"))))
        expect(yield* records(id)).toEqual(before)
        expect(yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))).toEqual(first)
      }).pipe(Effect.provide(runtime))
      yield* reopened
      fs.rmSync(checkpoint(id))
      yield* reopened
    }), 60_000)

  it.scoped("two keyed sends with new keys to a session one key short of its bound never both start: one runs, the other is refused, and the session holds the bound", () => {
    const loops = heldResolution()
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const id = (yield* sessions.create(scripted)).session_id
      yield* sessions.sendKeyed(id, { message: "1" }, keyed("k1"))
      yield* sessions.sendKeyed(id, { message: "2" }, keyed("k2"))
      const turnsBefore = (yield* records(id)).filter((r) => r.kind === "turn_started").length
      // Both sends wait while their loop resolves, past the session's checks and before their claims.
      loops.hold(2)
      const [a, b] = yield* Effect.all(
        [
          Effect.either(sessions.sendKeyed(id, { message: "a" }, keyed("ka"))),
          Effect.either(sessions.sendKeyed(id, { message: "b" }, keyed("kb")))
        ],
        { concurrency: "unbounded" }
      )
      const outcomes = [a, b].map((r) => (Either.isRight(r) ? r.right._tag : (r.left as { readonly _tag: string })._tag)).sort()
      expect(outcomes).toEqual(["Answered", "SessionBusy"])
      expect((yield* records(id)).filter((r) => r.kind === "turn_started").length).toBe(turnsBefore + 1)
      expectFull(yield* Effect.either(sessions.sendKeyed(id, { message: "c" }, keyed("kc"))))
    }).pipe(Effect.provide(runtimeLayer({ config: { maxSessionIdempotencyKeys: BOUND }, agentloops: loops.wrap })))
  })
})
