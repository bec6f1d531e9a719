/**
 * The Idempotency contract's bound on live keys (`maxKeys`): every implementation must pass this
 * suite. At the bound a new key is refused (`IdempotencyFull`) and nothing changes; every key
 * already held answers as before; room comes only from keys expiring or being released, never
 * from dropping a live key. Time is the TestClock, which starts at 0 in each test.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { IDEMPOTENCY_FULL_SWEEP_MS } from "../../src/layers/idempotency/KeyBound.js"
import type { AdoptedKey, Answer, IdempotencyShape } from "../../src/services/Idempotency.js"
import type { IdempotencyHarness } from "./Idempotency.contract.js"

const RETENTION_MS = 60_000

const answer = (body: string, status = 200): Answer => ({ status, headers: { "content-type": "application/json" }, body })

/** Claims and answers each key, all Claimed. */
const answered = (store: IdempotencyShape, ...keys: ReadonlyArray<string>) =>
  Effect.forEach(keys, (k) =>
    Effect.gen(function*() {
      expect(yield* store.claim("s", k, "h"), k).toEqual({ _tag: "Claimed" })
      yield* store.complete("s", k, answer(k))
    }), { discard: true })

const refusedFull = <A, E extends { readonly _tag: string }>(effect: Effect.Effect<A, E>, maxKeys: number) =>
  Effect.map(Effect.flip(effect), (e) => {
    expect(e._tag).toBe("IdempotencyFull")
    expect(e).toMatchObject({ maxKeys })
  })

const adopted = (key: string, atMs: number, body: string | undefined): AdoptedKey => ({
  scope: "send:ses_a",
  key,
  bodyHash: "h",
  atMs,
  answer: body === undefined ? undefined : answer(body)
})

export const idempotencyBoundContract = (name: string, harness: IdempotencyHarness) =>
  describe(`Idempotency contract, the bound on live keys: ${name}`, () => {
    it.scoped("at the bound a claim of a new key, in any scope, is IdempotencyFull and changes nothing; every key held still replays, conflicts or stays in flight", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS, maxKeys: 3 })
        yield* answered(store, "a", "b")
        expect(yield* store.claim("s", "running", "h")).toEqual({ _tag: "Claimed" })
        for (let i = 0; i < 2; i++) {
          yield* refusedFull(store.claim("s", "new", "h"), 3)
          yield* refusedFull(store.claim("other scope", "a", "h"), 3)
        }
        // Nothing was kept of the refused keys: once there is room they are claimed afresh.
        expect(yield* store.claim("s", "a", "h")).toEqual({ _tag: "Replay", answer: answer("a") })
        expect(yield* store.claim("s", "b", "other")).toEqual({ _tag: "Conflict" })
        expect(yield* store.claim("s", "running", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
        yield* store.complete("s", "running", answer("done"))
        expect(yield* store.claim("s", "running", "h")).toEqual({ _tag: "Replay", answer: answer("done") })
        yield* refusedFull(store.claim("s", "new", "h"), 3)
      }))

    it.scoped("a release makes room at once; a live key is never dropped for room, however long it waits", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS, maxKeys: 2 })
        yield* answered(store, "a")
        expect(yield* store.claim("s", "released", "h")).toEqual({ _tag: "Claimed" })
        yield* refusedFull(store.claim("s", "new", "h"), 2)
        yield* store.release("s", "released")
        expect(yield* store.claim("s", "new", "h")).toEqual({ _tag: "Claimed" })
        // "new" runs past retention: in flight, it holds its place; "a" expired and makes room.
        yield* TestClock.adjust(RETENTION_MS * 2)
        expect(yield* store.claim("s", "third", "h")).toEqual({ _tag: "Claimed" })
        yield* refusedFull(store.claim("s", "fourth", "h"), 2)
        expect(yield* store.claim("s", "new", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
      }))

    it.scoped("an expired key makes room the moment it expires, without waiting for a compaction; younger ones stay", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS, maxKeys: 2 })
        yield* answered(store, "old")
        yield* TestClock.adjust(RETENTION_MS / 2)
        yield* answered(store, "young")
        yield* TestClock.adjust(RETENTION_MS / 2 - 1)
        // One millisecond before "old" expires: full.
        yield* refusedFull(store.claim("s", "new", "h"), 2)
        expect(yield* store.claim("s", "old", "h")).toEqual({ _tag: "Replay", answer: answer("old") })
        // Expired now: its place is taken.
        yield* TestClock.adjust(1)
        expect(yield* store.claim("s", "new", "h")).toEqual({ _tag: "Claimed" })
        expect(yield* store.claim("s", "young", "h")).toEqual({ _tag: "Replay", answer: answer("young") })
        yield* refusedFull(store.claim("s", "newer", "h"), 2)
        // A compaction frees expired keys too.
        yield* store.complete("s", "new", answer("new"))
        yield* TestClock.adjust(RETENTION_MS)
        expect(yield* store.compact).toBe(2)
        yield* answered(store, "x", "y")
      }))

    it.scoped("keys that expire out of the order they were answered in make room too, within IDEMPOTENCY_FULL_SWEEP_MS: an adopted key keeps its original time", () =>
      Effect.gen(function*() {
        const retentionMs = 10 * IDEMPOTENCY_FULL_SWEEP_MS
        const store = yield* harness({ retentionMs, maxKeys: 3 })
        yield* TestClock.adjust(2 * IDEMPOTENCY_FULL_SWEEP_MS)
        yield* answered(store, "a")
        // Adopted after "a" was answered, with a time well before it: it expires first.
        yield* store.adopt([adopted("x", 0, "x")])
        expect(yield* store.claim("s", "running", "h")).toEqual({ _tag: "Claimed" })
        // Full; one millisecond before "x" expires nothing has.
        yield* TestClock.adjust(retentionMs - 2 * IDEMPOTENCY_FULL_SWEEP_MS - 1)
        yield* refusedFull(store.claim("s", "new", "h"), 3)
        yield* TestClock.adjust(1)
        const first = yield* Effect.either(store.claim("s", "new", "h"))
        if (first._tag === "Left") {
          expect(first.left._tag).toBe("IdempotencyFull")
          yield* TestClock.adjust(IDEMPOTENCY_FULL_SWEEP_MS)
          expect(yield* store.claim("s", "new", "h")).toEqual({ _tag: "Claimed" })
        } else {
          expect(first.right).toEqual({ _tag: "Claimed" })
        }
        // Only "x" made room: "a" is live, "running" in flight.
        expect(yield* store.claim("s", "a", "h")).toEqual({ _tag: "Replay", answer: answer("a") })
        expect(yield* store.claim("s", "running", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
        yield* refusedFull(store.claim("s", "newer", "h"), 3)
      }))

    it.scoped("a reservation is never refused at the bound; its completion there is IdempotencyFull and frees it, unless beyondBound; with room it completes", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS, maxKeys: 2 })
        yield* answered(store, "a")
        // Room for one more: a reservation completes and its answer replays.
        expect(yield* store.reserve("send:ses_a", "r1", "h")).toEqual({ _tag: "Claimed" })
        yield* store.complete("send:ses_a", "r1", answer("refused", 409))
        expect(yield* store.claim("send:ses_a", "r1", "h")).toEqual({ _tag: "Replay", answer: answer("refused", 409) })
        // Full: a reservation still decides (and a replay through it still answers) ...
        expect(yield* store.reserve("send:ses_a", "r1", "h")).toEqual({ _tag: "Replay", answer: answer("refused", 409) })
        expect(yield* store.reserve("send:ses_a", "r2", "h")).toEqual({ _tag: "Claimed" })
        expect(yield* store.claim("send:ses_a", "r2", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
        // ... a reservation released (its turn started) leaves nothing ...
        yield* store.release("send:ses_a", "r2")
        // ... and one completed is refused, and freed: its retry decides afresh.
        expect(yield* store.reserve("send:ses_a", "r2", "h")).toEqual({ _tag: "Claimed" })
        yield* refusedFull(store.complete("send:ses_a", "r2", answer("refused", 409)), 2)
        expect(yield* store.reserve("send:ses_a", "r2", "other")).toEqual({ _tag: "Claimed" })
        // An outcome that may have had effects is kept past the bound.
        yield* store.complete("send:ses_a", "r2", answer("ambiguous", 409), { beyondBound: true })
        expect(yield* store.claim("send:ses_a", "r2", "other")).toEqual({ _tag: "Replay", answer: answer("ambiguous", 409) })
        yield* refusedFull(store.claim("s", "new", "h"), 2)
      }))

    it.scoped("an adoption past the bound adopts none of its keys; keys held or already expired take no room", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS, maxKeys: 3 })
        yield* TestClock.adjust(RETENTION_MS)
        yield* answered(store, "a", "b")
        yield* refusedFull(store.adopt([adopted("x", RETENTION_MS, "x"), adopted("y", RETENTION_MS, "y")]), 3)
        // Neither was adopted: a reservation of either is free.
        for (const k of ["x", "y"]) {
          expect(yield* store.reserve("send:ses_a", k, "h"), k).toEqual({ _tag: "Claimed" })
          yield* store.release("send:ses_a", k)
        }
        yield* store.adopt([adopted("x", RETENTION_MS, "x")])
        expect(yield* store.claim("send:ses_a", "x", "h")).toEqual({ _tag: "Replay", answer: answer("x") })
        // Full: a key held (answered or never) and one already past retention need no room.
        yield* store.adopt([adopted("x", RETENTION_MS, "again"), adopted("expired", 0, "old")])
        expect(yield* store.claim("send:ses_a", "x", "h")).toEqual({ _tag: "Replay", answer: answer("x") })
        expect((yield* store.reserve("send:ses_a", "expired", "h"))._tag).toBe("Claimed")
        yield* store.release("send:ses_a", "expired")
        // A reservation the adoption replaces (a retry racing the delete) takes no more room.
        expect(yield* store.reserve("send:ses_a", "raced", "h")).toEqual({ _tag: "Claimed" })
        yield* store.adopt([adopted("raced", RETENTION_MS, "theirs")])
        expect(yield* store.claim("send:ses_a", "raced", "h")).toEqual({ _tag: "Replay", answer: answer("theirs") })
        yield* refusedFull(store.claim("s", "new", "h"), 3)
      }))
  
    it.scoped("one session's keyed requests hold at most its share of the log: past it its new keys are refused (IdempotencyFull naming the session), while another session's keys, creates and its own held keys still answer", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS, maxKeys: 10, maxSessionKeys: 3 })
        for (const k of ["c1", "c2", "c3"]) {
          expect(yield* store.claim("cancel:ses_a", k, "h"), k).toEqual({ _tag: "Claimed" })
          yield* store.complete("cancel:ses_a", k, answer(k))
        }
        // Its cancels, ends, deletes and kept refusals of sends all count toward the one share.
        for (const scope of ["cancel:ses_a", "end:ses_a", "delete:ses_a"]) {
          const e = yield* Effect.flip(store.claim(scope, "new", "h"))
          expect(e).toMatchObject({ _tag: "IdempotencyFull", session: "ses_a", keys: 3, maxKeys: 3 })
        }
        expect(yield* store.reserve("send:ses_a", "refused", "h")).toEqual({ _tag: "Claimed" })
        expect(yield* Effect.flip(store.complete("send:ses_a", "refused", answer("no", 409))))
          .toMatchObject({ _tag: "IdempotencyFull", session: "ses_a" })
        // The refused reservation was freed, and an outcome that may have had effects is kept past the share.
        expect(yield* store.reserve("send:ses_a", "refused", "other")).toEqual({ _tag: "Claimed" })
        yield* store.complete("send:ses_a", "refused", answer("ambiguous", 409), { beyondBound: true })
        // Keys it holds still answer.
        expect(yield* store.claim("cancel:ses_a", "c1", "h")).toEqual({ _tag: "Replay", answer: answer("c1") })
        expect(yield* store.claim("cancel:ses_a", "c2", "other")).toEqual({ _tag: "Conflict" })
        // Other sessions and creates are not affected.
        expect(yield* store.claim("cancel:ses_b", "c1", "h")).toEqual({ _tag: "Claimed" })
        expect(yield* store.claim("delete:ses_b", "d1", "h")).toEqual({ _tag: "Claimed" })
        expect(yield* store.claim("create", "k1", "h", "ses_c")).toEqual({ _tag: "Claimed" })
        // Room in the share comes from its keys expiring.
        yield* TestClock.adjust(RETENTION_MS)
        expect(yield* store.claim("cancel:ses_a", "after", "h")).toEqual({ _tag: "Claimed" })
      }))

    it.scoped("a deleted session's keys are taken over past the bound, within the delete reserve, when other sessions filled the log; a keyed delete's own key too; past the reserve an adoption is refused whole", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS, maxKeys: 4, maxSessionKeys: 4, deleteReserveKeys: 3 })
        yield* TestClock.adjust(RETENTION_MS)
        for (const k of ["c1", "c2", "c3", "c4"]) {
          expect(yield* store.claim("cancel:ses_x", k, "h"), k).toEqual({ _tag: "Claimed" })
          yield* store.complete("cancel:ses_x", k, answer(k))
        }
        // Full for everything else ...
        yield* refusedFull(store.claim("create", "k", "h", "ses_c"), 4)
        yield* refusedFull(store.claim("cancel:ses_b", "k", "h"), 4)
        // ... but a keyed delete of another session, and the keys its session hands over, fit.
        expect(yield* store.claim("delete:ses_b", "d", "h")).toEqual({ _tag: "Claimed" })
        yield* store.adopt([
          { scope: "send:ses_b", key: "s1", bodyHash: "h", atMs: RETENTION_MS, answer: answer("s1") },
          { scope: "send:ses_b", key: "s2", bodyHash: "h", atMs: RETENTION_MS, answer: answer("s2") }
        ])
        yield* store.complete("delete:ses_b", "d", answer("", 204))
        expect(yield* store.claim("send:ses_b", "s1", "h")).toEqual({ _tag: "Replay", answer: answer("s1") })
        expect(yield* store.claim("delete:ses_b", "d", "h")).toEqual({ _tag: "Replay", answer: answer("", 204) })
        // The reserve is bounded: an adoption past it adopts none of its keys.
        const e = yield* Effect.flip(store.adopt([adopted("y1", RETENTION_MS, "y1"), adopted("y2", RETENTION_MS, "y2")]))
        expect(e._tag).toBe("IdempotencyFull")
        expect(yield* store.reserve("send:ses_a", "y1", "h")).toEqual({ _tag: "Claimed" })
        yield* store.release("send:ses_a", "y1")
        // Ordinary keys never take the reserve.
        yield* refusedFull(store.claim("create", "k", "h", "ses_c"), 4)
      }))
  })
