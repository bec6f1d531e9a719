/**
 * The in-memory Idempotency store: the same semantics as the file store (claims, byte-exact
 * replays, answers above the maximum recorded as not kept, releases, conflicts, ambiguity,
 * retention measured on `Clock`), no durability. Every claim is made by this process, so an unanswered
 * one is always in flight. For tests; never the embedded default.
 */
import { Clock, Effect, Layer } from "effect"
import { IDEMPOTENCY_MAX_ANSWER_BYTES } from "../domain/Limits.js"
import { type Answer, type ClaimResult, Idempotency, type IdempotencyShape } from "../services/Idempotency.js"

export interface IdempotencyMemoryOptions {
  /** How long a claim (or, once answered, its answer) is kept, in milliseconds. 0 = forever. */
  readonly retentionMs: number
  /** Bytes: the largest answer JSON kept; a larger one is recorded as not kept. Default 1 MiB. */
  readonly maxAnswerBytes?: number
}

interface Entry {
  readonly bodyHash: string
  /** When the claim was made, or when it was answered once it is. */
  atMs: number
  answer: Answer | { readonly notKept: { readonly status: number; readonly bytes: number } } | undefined
  /** Claimed elsewhere and never answered (an adopted key): ambiguous, not in flight, and it expires. */
  neverAnswered?: true
  /** Reserved (`reserve`), not claimed: a deleted session's key handed over (`adopt`) takes its place. */
  reservation?: true
}

/** Scope and key as one map key; the length prefix keeps `("ab", "c")` apart from `("a", "bc")`. */
const idOf = (scope: string, key: string) => `${scope.length}:${scope}${key}`

export const make = (options: IdempotencyMemoryOptions) =>
  Effect.sync(() => {
    const entries = new Map<string, Entry>()
    const maxAnswerBytes = options.maxAnswerBytes ?? IDEMPOTENCY_MAX_ANSWER_BYTES
    // An unanswered claim is in flight in this process: it never expires under a running request.
    const expired = (e: Entry, now: number) =>
      options.retentionMs > 0 && (e.answer !== undefined || e.neverAnswered === true) && now - e.atMs >= options.retentionMs
    // Through JSON, as the file store keeps it, so both replay exactly the same value.
    const kept = (answer: Answer): Entry["answer"] => {
      const text = JSON.stringify({ status: answer.status, headers: answer.headers, body: answer.body })
      const bytes = Buffer.byteLength(text, "utf8")
      return bytes > maxAnswerBytes ? { notKept: { status: answer.status, bytes } } : JSON.parse(text) as Answer
    }

    // Nothing here is durable, so a reservation and a claim decide the same; a reservation is
    // marked, as `adopt` takes its place.
    const decide = (scope: string, key: string, bodyHash: string, reservation: boolean) =>
        Effect.map(Clock.currentTimeMillis, (now): ClaimResult => {
          const id = idOf(scope, key)
          const found = entries.get(id)
          if (found && !expired(found, now)) {
            if (found.bodyHash !== bodyHash) return { _tag: "Conflict" }
            if (found.answer === undefined) return { _tag: "Ambiguous", inFlight: found.neverAnswered !== true }
            return "notKept" in found.answer
              ? { _tag: "AnswerNotKept", ...found.answer.notKept }
              : { _tag: "Replay", answer: found.answer }
          }
          entries.set(id, reservation ? { bodyHash, atMs: now, answer: undefined, reservation: true } : { bodyHash, atMs: now, answer: undefined })
          return { _tag: "Claimed" }
        })

    const store: IdempotencyShape = {
      claim: (scope, key, bodyHash) => decide(scope, key, bodyHash, false),
      reserve: (scope, key, bodyHash) => decide(scope, key, bodyHash, true),
      complete: (scope, key, answer) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          const entry = entries.get(idOf(scope, key))
          // The first answer stands; an answer for a key never claimed (or already dropped) has
          // no body hash to be replayed against and is not kept.
          if (!entry || entry.answer || entry.neverAnswered) return
          entry.answer = kept(answer)
          entry.atMs = now
          delete entry.reservation
        }),
      adopt: (keys) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          for (const k of keys) {
            const adopted: Entry = k.answer === undefined
              ? { bodyHash: k.bodyHash, atMs: k.atMs, answer: undefined, neverAnswered: true }
              : { bodyHash: k.bodyHash, atMs: k.atMs, answer: kept(k.answer) }
            if (expired(adopted, now)) continue
            const id = idOf(k.scope, k.key)
            const found = entries.get(id)
            // A reservation (a retry racing the delete, refused not_found) gives way: its own
            // complete or release then finds the adopted entry and leaves it.
            if (found && !expired(found, now) && found.reservation !== true) {
              // Adopted earlier without its answer: the adopted answer completes it. A request in
              // flight here is left to its own answer.
              if (found.neverAnswered === true && adopted.answer !== undefined && found.bodyHash === k.bodyHash) entries.set(id, adopted)
              continue
            }
            entries.set(id, adopted)
          }
        }),
      release: (scope, key) =>
        Effect.sync(() => {
          const id = idOf(scope, key)
          const entry = entries.get(id)
          if (entry !== undefined && entry.answer === undefined && entry.neverAnswered !== true) entries.delete(id)
        }),
      compact: Effect.map(Clock.currentTimeMillis, (now) => {
        let dropped = 0
        for (const [id, e] of entries) {
          if (expired(e, now)) {
            entries.delete(id)
            dropped++
          }
        }
        return dropped
      })
    }
    return store
  })

export const layer = (options: IdempotencyMemoryOptions) => Layer.effect(Idempotency, make(options))
