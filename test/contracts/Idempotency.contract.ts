/**
 * The Idempotency contract (DESIGN §7): every implementation must pass this suite. Time is the
 * TestClock, which starts at 0 in each test.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, type Scope, TestClock } from "effect"
import type { Answer, ClaimResult, IdempotencyShape } from "../../src/services/Idempotency.js"

export type IdempotencyHarness = (
  options: {
    readonly retentionMs: number
    readonly maxAnswerBytes?: number
    readonly maxKeys?: number
    readonly maxSessionKeys?: number
    readonly deleteReserveKeys?: number
  }
) => Effect.Effect<IdempotencyShape, unknown, Scope.Scope>

const RETENTION_MS = 60_000

const answer = (body: string, status = 200): Answer => ({
  status,
  headers: { "content-type": "application/json", "x-brain-seq": "7" },
  body
})

const tags = (results: ReadonlyArray<ClaimResult>) => results.map((r) => r._tag)

export const idempotencyContract = (name: string, harness: IdempotencyHarness) =>
  describe(`Idempotency contract: ${name}`, () => {
    it.scoped("a claimed and answered request replays the recorded answer byte for byte", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        // Non-ASCII, an escaped line separator, an astral character and a lone surrogate.
        const body = JSON.stringify({ session_id: "ses_x", text: "héllo\u2028 😀 \"quoted\"" }) + "\ud800"
        const recorded = answer(body, 201)
        expect(yield* store.claim("POST /v1/sessions", "k1", "h1")).toEqual({ _tag: "Claimed" })
        yield* store.complete("POST /v1/sessions", "k1", recorded)
        for (let i = 0; i < 2; i++) {
          const again = yield* store.claim("POST /v1/sessions", "k1", "h1")
          expect(again._tag).toBe("Replay")
          if (again._tag !== "Replay") return
          expect(again.answer).toEqual(recorded)
          expect(again.answer.body === body).toBe(true)
          expect(Object.keys(again.answer.headers)).toEqual(Object.keys(recorded.headers))
        }
      }))

    it.scoped("the same key with a different body is a Conflict, before and after the answer", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        expect((yield* store.claim("s", "k", "h1"))._tag).toBe("Claimed")
        expect(yield* store.claim("s", "k", "h2")).toEqual({ _tag: "Conflict" })
        yield* store.complete("s", "k", answer("{}"))
        expect(yield* store.claim("s", "k", "h2")).toEqual({ _tag: "Conflict" })
        expect((yield* store.claim("s", "k", "h1"))._tag).toBe("Replay")
      }))

    it.scoped("a claim never answered is Ambiguous (in flight) on every later claim and is never Claimed again", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        expect((yield* store.claim("s", "k", "h")))
          .toEqual({ _tag: "Claimed" })
        for (let i = 0; i < 3; i++) expect(yield* store.claim("s", "k", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
        // A request still running in this process keeps its claim past the retention period.
        yield* TestClock.adjust(RETENTION_MS * 3)
        expect(yield* store.compact).toBe(0)
        expect(yield* store.claim("s", "k", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
      }))

    it.scoped("a claim that names its session (a create's minted id) is Ambiguous naming it until answered; a claim that names none names none; the answer replays as ever", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        expect(yield* store.claim("create", "k", "h", "ses_named")).toEqual({ _tag: "Claimed" })
        expect(yield* store.claim("create", "plain", "h")).toEqual({ _tag: "Claimed" })
        for (let i = 0; i < 2; i++) {
          // A retry names no session of its own; the claim's is what it learns.
          expect(yield* store.claim("create", "k", "h", i === 0 ? undefined : "ses_other")).toStrictEqual({ _tag: "Ambiguous", inFlight: true, session: "ses_named" })
          expect(yield* store.claim("create", "plain", "h")).toStrictEqual({ _tag: "Ambiguous", inFlight: true })
        }
        expect(yield* store.claim("create", "k", "other body")).toEqual({ _tag: "Conflict" })
        yield* store.complete("create", "k", answer("{\"session_id\":\"ses_named\"}", 201))
        expect(yield* store.claim("create", "k", "h")).toEqual({ _tag: "Replay", answer: answer("{\"session_id\":\"ses_named\"}", 201) })
        // Released (nothing happened), the key is free and a new claim names its own session.
        yield* store.release("create", "plain")
        expect(yield* store.claim("create", "plain", "h", "ses_new")).toEqual({ _tag: "Claimed" })
        expect(yield* store.claim("create", "plain", "h")).toStrictEqual({ _tag: "Ambiguous", inFlight: true, session: "ses_new" })
      }))

    it.scoped("scopes are independent: the same key in two scopes is two claims with their own answers", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        expect((yield* store.claim("send:ses_a", "k", "h1"))._tag).toBe("Claimed")
        expect((yield* store.claim("submit:ses_a", "k", "h2"))._tag).toBe("Claimed")
        // Scope and key never run together: ("ab", "c") is not ("a", "bc").
        expect((yield* store.claim("ab", "c", "h"))._tag).toBe("Claimed")
        expect((yield* store.claim("a", "bc", "h"))._tag).toBe("Claimed")
        yield* store.complete("send:ses_a", "k", answer("send"))
        yield* store.complete("submit:ses_a", "k", answer("submit"))
        const send = yield* store.claim("send:ses_a", "k", "h1")
        const submit = yield* store.claim("submit:ses_a", "k", "h2")
        expect(send._tag === "Replay" && send.answer.body).toBe("send")
        expect(submit._tag === "Replay" && submit.answer.body).toBe("submit")
      }))

    it.scoped("the first answer stands, and an answer for a key never claimed is not kept", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        yield* store.claim("s", "k", "h")
        yield* store.complete("s", "k", answer("first"))
        yield* store.complete("s", "k", answer("second"))
        const again = yield* store.claim("s", "k", "h")
        expect(again._tag === "Replay" && again.answer.body).toBe("first")
        yield* store.complete("s", "never-claimed", answer("orphan"))
        expect((yield* store.claim("s", "never-claimed", "h"))._tag).toBe("Claimed")
      }))

    it.scoped("expired answers are dropped by compact and the key is free again; younger ones stay", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        yield* store.claim("s", "old", "h")
        yield* store.complete("s", "old", answer("old"))
        yield* TestClock.adjust(RETENTION_MS / 2)
        yield* store.claim("s", "young", "h")
        yield* store.complete("s", "young", answer("young"))
        yield* TestClock.adjust(RETENTION_MS / 2 - 1)
        expect(yield* store.compact).toBe(0)
        expect((yield* store.claim("s", "old", "h"))._tag).toBe("Replay")
        yield* TestClock.adjust(1)
        expect(yield* store.compact).toBe(1)
        expect(yield* store.claim("s", "old", "other-body")).toEqual({ _tag: "Claimed" })
        expect((yield* store.claim("s", "young", "h"))._tag).toBe("Replay")
        yield* TestClock.adjust(RETENTION_MS / 2)
        // "young" is expired now; a claim treats it as absent even before a compaction.
        expect(yield* store.claim("s", "young", "h")).toEqual({ _tag: "Claimed" })
        // Retention runs from the answer, not the claim.
        yield* store.complete("s", "old", answer("old again"))
        yield* TestClock.adjust(RETENTION_MS - 1)
        expect(yield* store.compact).toBe(0)
        const old = yield* store.claim("s", "old", "other-body")
        expect(old._tag === "Replay" && old.answer.body).toBe("old again")
      }))

    it.scoped("a recorded ambiguous verdict (409 ambiguous, details.ambiguous: the request may have had effects) never expires: compact keeps it and a retry long past retention still gets it; any other answer, a 409 too, expires", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        const verdict: Answer = {
          status: 409,
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ code: "ambiguous", message: "it may have taken effect", retryable: false, details: { ambiguous: true, status: 500 } })
        }
        const refusal: Answer = {
          status: 409,
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ code: "teardown_failed", message: "a teardown failed", retryable: false, details: { environments: [] } })
        }
        yield* store.claim("s", "verdict", "h")
        yield* store.complete("s", "verdict", verdict, { beyondBound: true })
        yield* store.claim("s", "refusal", "h")
        yield* store.complete("s", "refusal", refusal)
        yield* TestClock.adjust(10 * RETENTION_MS)
        expect(yield* store.compact).toBe(1)
        for (let i = 0; i < 2; i++) {
          expect(yield* store.claim("s", "verdict", "h")).toEqual({ _tag: "Replay", answer: verdict })
          expect(yield* store.claim("s", "verdict", "other")).toEqual({ _tag: "Conflict" })
        }
        expect(yield* store.claim("s", "refusal", "h")).toEqual({ _tag: "Claimed" })
      }))

    it.scoped("an answer above the maximum is recorded as not kept: later claims get its status and JSON size, never in flight; one at the maximum is kept", () =>
      Effect.gen(function*() {
        const maxAnswerBytes = 2_048
        const store = yield* harness({ retentionMs: RETENTION_MS, maxAnswerBytes })
        const big = answer("é".repeat(1_500), 201)
        const bytes = Buffer.byteLength(JSON.stringify(big))
        expect(bytes).toBeGreaterThan(maxAnswerBytes)
        expect((yield* store.claim("s", "big", "h"))._tag).toBe("Claimed")
        yield* store.complete("s", "big", big)
        for (let i = 0; i < 2; i++) expect(yield* store.claim("s", "big", "h")).toEqual({ _tag: "AnswerNotKept", status: 201, bytes })
        expect(yield* store.claim("s", "big", "other")).toEqual({ _tag: "Conflict" })
        // The first answer stands, kept or not.
        yield* store.complete("s", "big", answer("small"))
        expect((yield* store.claim("s", "big", "h"))._tag).toBe("AnswerNotKept")
        // Exactly at the maximum: kept and replayed.
        const fits = answer("a".repeat(maxAnswerBytes - Buffer.byteLength(JSON.stringify(answer("")))))
        expect(Buffer.byteLength(JSON.stringify(fits))).toBe(maxAnswerBytes)
        yield* store.claim("s", "fits", "h")
        yield* store.complete("s", "fits", fits)
        expect(yield* store.claim("s", "fits", "h")).toEqual({ _tag: "Replay", answer: fits })
      }))

    it.scoped("a released claim frees its key: the next claim, with any body, is Claimed; releasing an answered, unknown or already released key changes nothing", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        expect((yield* store.claim("s", "k", "h"))._tag).toBe("Claimed")
        yield* store.release("s", "k")
        expect(yield* store.claim("s", "k", "other")).toEqual({ _tag: "Claimed" })
        // An answered key keeps its answer.
        yield* store.complete("s", "k", answer("kept"))
        yield* store.release("s", "k")
        const again = yield* store.claim("s", "k", "other")
        expect(again._tag === "Replay" && again.answer.body).toBe("kept")
        yield* store.release("s", "never-claimed")
        expect((yield* store.claim("s", "never-claimed", "h"))._tag).toBe("Claimed")
        // An answer for a released key is not kept: the key stays free.
        yield* store.claim("s", "r", "h")
        yield* store.release("s", "r")
        yield* store.release("s", "r")
        yield* store.complete("s", "r", answer("late"))
        expect((yield* store.claim("s", "r", "h"))._tag).toBe("Claimed")
      }))

    it.scoped("retention 0 keeps answers forever", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: 0 })
        yield* store.claim("s", "k", "h")
        yield* store.complete("s", "k", answer("kept"))
        yield* TestClock.adjust(365 * 24 * 3600 * 1000)
        expect(yield* store.compact).toBe(0)
        expect((yield* store.claim("s", "k", "h"))._tag).toBe("Replay")
      }))

    it.scoped("a reservation decides like a claim and holds its key in flight; released, the key is free for any body; completed, its answer replays", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        expect(yield* store.reserve("send:ses_a", "k", "h")).toEqual({ _tag: "Claimed" })
        expect(yield* store.claim("send:ses_a", "k", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
        expect(yield* store.reserve("send:ses_a", "k", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
        expect(yield* store.reserve("send:ses_a", "k", "other")).toEqual({ _tag: "Conflict" })
        // In flight past the retention period, as a claim is.
        yield* TestClock.adjust(RETENTION_MS * 2)
        expect(yield* store.compact).toBe(0)
        yield* store.release("send:ses_a", "k")
        expect(yield* store.reserve("send:ses_a", "k", "other")).toEqual({ _tag: "Claimed" })
        yield* store.release("send:ses_a", "k")
        // A refused request's answer is recorded under a reservation and replays.
        expect(yield* store.reserve("send:ses_a", "r", "h")).toEqual({ _tag: "Claimed" })
        yield* store.complete("send:ses_a", "r", answer("refused", 409))
        yield* store.release("send:ses_a", "r")
        expect(yield* store.reserve("send:ses_a", "r", "h")).toEqual({ _tag: "Replay", answer: answer("refused", 409) })
        expect(yield* store.claim("send:ses_a", "r", "h")).toEqual({ _tag: "Replay", answer: answer("refused", 409) })
        // A key answered through a claim is seen by a reservation too.
        yield* store.claim("s", "c", "h")
        yield* store.complete("s", "c", answer("claimed"))
        expect(yield* store.reserve("s", "c", "h")).toEqual({ _tag: "Replay", answer: answer("claimed") })
      }))

    it.scoped("adopted keys (a deleted session's sends): an answered one replays its answer, another body is a Conflict, a never-answered one is Ambiguous not in flight", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        yield* TestClock.adjust(5_000)
        yield* store.adopt([
          { scope: "send:ses_a", key: "k1", bodyHash: "h1", atMs: 1_000, answer: answer("first") },
          { scope: "send:ses_a", key: "k2", bodyHash: "h2", atMs: 2_000, answer: undefined },
          { scope: "submit:ses_a", key: "k1", bodyHash: "h3", atMs: 3_000, answer: answer("receipt", 202) }
        ])
        for (let i = 0; i < 2; i++) {
          expect(yield* store.claim("send:ses_a", "k1", "h1")).toEqual({ _tag: "Replay", answer: answer("first") })
          expect(yield* store.reserve("send:ses_a", "k2", "h2")).toEqual({ _tag: "Ambiguous", inFlight: false })
          expect(yield* store.reserve("submit:ses_a", "k1", "h3")).toEqual({ _tag: "Replay", answer: answer("receipt", 202) })
        }
        expect(yield* store.claim("send:ses_a", "k1", "other")).toEqual({ _tag: "Conflict" })
        expect(yield* store.claim("send:ses_a", "k2", "other")).toEqual({ _tag: "Conflict" })
        // Releasing an adopted key changes nothing: its request ran.
        yield* store.release("send:ses_a", "k2")
        expect(yield* store.claim("send:ses_a", "k2", "h2")).toEqual({ _tag: "Ambiguous", inFlight: false })
      }))

    it.scoped("adopted keys expire when they would have, counted from their own times; one already past retention is not kept", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        yield* TestClock.adjust(RETENTION_MS + 10_000)
        yield* store.adopt([
          { scope: "s", key: "old", bodyHash: "h", atMs: 5_000, answer: answer("old") },
          { scope: "s", key: "young", bodyHash: "h", atMs: 30_000, answer: answer("young") },
          { scope: "s", key: "young-unanswered", bodyHash: "h", atMs: 30_000, answer: undefined }
        ])
        expect((yield* store.reserve("s", "old", "other"))._tag).toBe("Claimed")
        expect(yield* store.claim("s", "young", "h")).toEqual({ _tag: "Replay", answer: answer("young") })
        expect(yield* store.claim("s", "young-unanswered", "h")).toEqual({ _tag: "Ambiguous", inFlight: false })
        // 30 s + retention: both young keys have lived their retention.
        yield* TestClock.adjust(30_000)
        yield* store.compact
        expect((yield* store.claim("s", "young", "other"))._tag).toBe("Claimed")
        expect((yield* store.claim("s", "young-unanswered", "other"))._tag).toBe("Claimed")
      }))

    it.scoped("adopting a key the store holds leaves it as it is, but a key adopted without its answer takes the answer when adopted again", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        yield* store.claim("s", "answered", "h")
        yield* store.complete("s", "answered", answer("mine"))
        yield* store.claim("s", "running", "h")
        yield* store.adopt([
          { scope: "s", key: "answered", bodyHash: "h", atMs: 0, answer: answer("theirs") },
          { scope: "s", key: "running", bodyHash: "h", atMs: 0, answer: answer("theirs") },
          { scope: "s", key: "late", bodyHash: "h", atMs: 0, answer: undefined }
        ])
        expect(yield* store.claim("s", "answered", "h")).toEqual({ _tag: "Replay", answer: answer("mine") })
        // A request in flight here keeps its own answer to give.
        expect(yield* store.claim("s", "running", "h")).toEqual({ _tag: "Ambiguous", inFlight: true })
        yield* store.complete("s", "running", answer("mine too"))
        expect(yield* store.claim("s", "running", "h")).toEqual({ _tag: "Replay", answer: answer("mine too") })
        // Another body never completes it.
        yield* store.adopt([{ scope: "s", key: "late", bodyHash: "other", atMs: 0, answer: answer("wrong") }])
        expect(yield* store.claim("s", "late", "h")).toEqual({ _tag: "Ambiguous", inFlight: false })
        yield* store.adopt([{ scope: "s", key: "late", bodyHash: "h", atMs: 0, answer: answer("found") }])
        expect(yield* store.claim("s", "late", "h")).toEqual({ _tag: "Replay", answer: answer("found") })
      }))

    it.scoped("an adopted key takes the place of a reservation (a retry racing the delete): that request's release or refusal leaves it, and its answer replays", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        expect(yield* store.reserve("send:ses_a", "released", "h")).toEqual({ _tag: "Claimed" })
        expect(yield* store.reserve("send:ses_a", "refused", "h")).toEqual({ _tag: "Claimed" })
        expect(yield* store.reserve("send:ses_a", "unanswered", "h")).toEqual({ _tag: "Claimed" })
        yield* store.adopt([
          { scope: "send:ses_a", key: "released", bodyHash: "h", atMs: 0, answer: answer("first") },
          { scope: "send:ses_a", key: "refused", bodyHash: "h", atMs: 0, answer: answer("second") },
          { scope: "send:ses_a", key: "unanswered", bodyHash: "h", atMs: 0, answer: undefined }
        ])
        yield* store.release("send:ses_a", "released")
        yield* store.complete("send:ses_a", "refused", answer("not_found", 404))
        yield* store.release("send:ses_a", "unanswered")
        yield* store.complete("send:ses_a", "unanswered", answer("not_found", 404))
        expect(yield* store.claim("send:ses_a", "released", "h")).toEqual({ _tag: "Replay", answer: answer("first") })
        expect(yield* store.claim("send:ses_a", "refused", "h")).toEqual({ _tag: "Replay", answer: answer("second") })
        expect(yield* store.claim("send:ses_a", "unanswered", "h")).toEqual({ _tag: "Ambiguous", inFlight: false })
        // A reservation completed before the adoption is an answer like any other: left as it is.
        yield* store.reserve("send:ses_a", "done", "h")
        yield* store.complete("send:ses_a", "done", answer("earlier", 409))
        yield* store.adopt([{ scope: "send:ses_a", key: "done", bodyHash: "h", atMs: 0, answer: answer("later") }])
        expect(yield* store.claim("send:ses_a", "done", "h")).toEqual({ _tag: "Replay", answer: answer("earlier", 409) })
      }))

    it.scoped("concurrent claims of one key: exactly one is Claimed, the others are Ambiguous in flight", () =>
      Effect.gen(function*() {
        const store = yield* harness({ retentionMs: RETENTION_MS })
        const results = yield* Effect.all(
          Array.from({ length: 32 }, () => store.claim("s", "same", "h")),
          { concurrency: "unbounded" }
        )
        expect(tags(results).filter((t) => t === "Claimed").length).toBe(1)
        expect(results.filter((r) => r._tag === "Ambiguous" && r.inFlight).length).toBe(31)
        // Different keys claimed concurrently are all Claimed.
        const distinct = yield* Effect.all(
          Array.from({ length: 32 }, (_, i) => store.claim("s", `k${i}`, "h")),
          { concurrency: "unbounded" }
        )
        expect(tags(distinct).every((t) => t === "Claimed")).toBe(true)
      }))
  })
