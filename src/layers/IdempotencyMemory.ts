/**
 * The in-memory Idempotency store: the same semantics as the file store (claims, byte-exact
 * replays, answers above the maximum recorded as not kept, releases, conflicts, ambiguity,
 * retention measured on `Clock`, the bound on live keys), no durability. Every claim is made by
 * this process, so an unanswered one is always in flight. For tests; never the embedded default.
 */
import { Clock, Effect, Layer } from "effect"
import { IDEMPOTENCY_MAX_ANSWER_BYTES } from "../domain/Limits.js"
import {
  type AdoptedKey,
  type Answer,
  type ClaimResult,
  type CompleteOptions,
  Idempotency,
  type IdempotencyError,
  IdempotencyFull,
  type IdempotencyShape,
  sessionOfScope,
  takesDeleteReserve
} from "../services/Idempotency.js"
import { idOf } from "./idempotency/Index.js"
import { KeyBound, keyBounds } from "./idempotency/KeyBound.js"
import { answerText, isAmbiguousVerdict } from "./idempotency/Records.js"

export interface IdempotencyMemoryOptions {
  /** How long a claim (or, once answered, its answer) is kept, in milliseconds. 0 = forever. */
  readonly retentionMs: number
  /** Bytes: the largest answer JSON kept; a larger one is recorded as not kept. Default 1 MiB. */
  readonly maxAnswerBytes?: number
  /** Live keys held at most; default `maxIdempotencyKeys(undefined)`. */
  readonly maxKeys?: number | undefined
  /** Keys of requests about one session held at most; default `maxSessionLogKeys`. */
  readonly maxSessionKeys?: number | undefined
  /** Keys deletes may take past `maxKeys`; default `deleteReserveKeys`. */
  readonly deleteReserveKeys?: number | undefined
}

interface Entry {
  readonly bodyHash: string
  /** When the claim was made, or when it was answered once it is. */
  atMs: number
  /** The answer's JSON as the file store keeps it (one string), or what was not kept. */
  answer: string | { readonly notKept: { readonly status: number; readonly bytes: number } } | undefined
  /** Claimed elsewhere and never answered (an adopted key): ambiguous, not in flight, and it expires. */
  neverAnswered?: true
  /** Its answer is an ambiguous verdict (`isAmbiguousVerdict`): it never expires. */
  verdict?: true
  /** Reserved (`reserve`), not claimed: a deleted session's key handed over (`adopt`) takes its place. */
  reservation?: true
  /** The session its claim named (a create's minted id): an Ambiguous answer for the key names it. */
  session?: string
  /** The session whose request claimed it, counted toward its share; never an adopted key's. */
  owner?: string | undefined
}

/**
 * The entries, bounded as the file store's index is (KeyBound.ts), but for room made by a walk
 * over every key each time (this store is for tests). An unanswered claim is in flight in this
 * process: it never expires under a running request.
 */
class Entries extends KeyBound<Entry> {
  constructor(retentionMs: number, maxKeys: number, sessionKeys: number, reserveKeys: number) {
    super(retentionMs, maxKeys, 0, sessionKeys, reserveKeys)
  }

  protected inFlight(e: Entry) {
    return e.answer === undefined && e.neverAnswered !== true
  }

  /** Every claim of this store is this process's (in flight until answered); only a verdict is unresolved. */
  protected unresolved(e: Entry) {
    return e.verdict === true
  }
}

export const make = (options: IdempotencyMemoryOptions) =>
  Effect.sync(() => {
    const bound = new Entries(options.retentionMs, ...keyBounds(options))
    const entries = bound.entries
    const maxAnswerBytes = options.maxAnswerBytes ?? IDEMPOTENCY_MAX_ANSWER_BYTES
    const full = new IdempotencyFull({ maxKeys: bound.maxKeys })
    const sessionFull = (session: string) => new IdempotencyFull({ maxKeys: bound.sessionKeys, session, keys: bound.ownedBy(session) })
    // Kept as the file store keeps it (its JSON), so both replay exactly the same value.
    const kept = (answer: Answer): Entry["answer"] => {
      const text = answerText(answer)
      const bytes = Buffer.byteLength(text, "utf8")
      return bytes > maxAnswerBytes ? { notKept: { status: answer.status, bytes } } : text
    }

    // Nothing here is durable, so a reservation and a claim decide the same; a reservation is
    // marked, as `adopt` takes its place, and is not refused by the bound (its `complete` is).
    const decide = (scope: string, key: string, bodyHash: string, reservation: boolean, session?: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (now): Effect.Effect<ClaimResult, IdempotencyError> => {
        const id = idOf(scope, key)
        const found = entries.get(id)
        if (found && !bound.expired(found, now)) {
          if (found.bodyHash !== bodyHash) return Effect.succeed({ _tag: "Conflict" })
          if (found.answer === undefined) {
            const inFlight = found.neverAnswered !== true
            return Effect.succeed(found.session === undefined ? { _tag: "Ambiguous", inFlight } : { _tag: "Ambiguous", inFlight, session: found.session })
          }
          return Effect.succeed(
            typeof found.answer === "string"
              ? { _tag: "Replay", answer: JSON.parse(found.answer) as Answer }
              : { _tag: "AnswerNotKept", ...found.answer.notKept }
          )
        }
        if (found) bound.forget(id)
        const owner = reservation ? undefined : sessionOfScope(scope)
        if (!reservation && !bound.hasRoom(now, 1, takesDeleteReserve(scope))) return Effect.fail(full)
        if (owner !== undefined && !bound.hasSessionRoom(now, owner)) return Effect.fail(sessionFull(owner))
        bound.put(
          id,
          reservation
            ? { bodyHash, atMs: now, answer: undefined, reservation: true }
            : { bodyHash, atMs: now, answer: undefined, owner, ...(session === undefined ? {} : { session }) }
        )
        return Effect.succeed({ _tag: "Claimed" })
      })

    const adopted = (k: AdoptedKey): Entry =>
      k.answer === undefined
        ? { bodyHash: k.bodyHash, atMs: k.atMs, answer: undefined, neverAnswered: true }
        : { bodyHash: k.bodyHash, atMs: k.atMs, answer: kept(k.answer) }

    const store: IdempotencyShape = {
      claim: (scope, key, bodyHash, session) => decide(scope, key, bodyHash, false, session),
      reserve: (scope, key, bodyHash) => decide(scope, key, bodyHash, true),
      complete: (scope: string, key: string, answer: Answer, completeOptions?: CompleteOptions) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          const id = idOf(scope, key)
          const entry = entries.get(id)
          // The first answer stands; an answer for a key never claimed (or already dropped) has
          // no body hash to be replayed against and is not kept.
          if (!entry || entry.answer || entry.neverAnswered) return Effect.void
          // A reservation is not kept yet: at the bound, or past its session's share, it goes.
          const owner = entry.reservation ? sessionOfScope(scope) : undefined
          if (entry.reservation && completeOptions?.beyondBound !== true) {
            if (!bound.hasRoom(now, 0)) {
              bound.forget(id)
              return Effect.fail(full)
            }
            if (owner !== undefined && !bound.hasSessionRoom(now, owner)) {
              bound.forget(id)
              return Effect.fail(sessionFull(owner))
            }
          }
          if (owner !== undefined) bound.own(id, entry, owner)
          entry.answer = kept(answer)
          entry.atMs = now
          if (isAmbiguousVerdict(answer)) entry.verdict = true
          delete entry.reservation
          return Effect.void
        }),
      adopt: (keys) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          const live = keys.map((k) => ({ k, id: idOf(k.scope, k.key), entry: adopted(k) })).filter((a) => !bound.expired(a.entry, now))
          // All or none; adding none is never refused (a held key, a reservation replaced in place).
          if (!bound.hasRoomFor(now, live.map((a) => a.id), true)) return Effect.fail(full)
          for (const { entry, id, k } of live) {
            const found = entries.get(id)
            // A reservation (a retry racing the delete, refused not_found) gives way: its own
            // complete or release then finds the adopted entry and leaves it.
            if (found && !bound.expired(found, now) && found.reservation !== true) {
              // Adopted earlier without its answer: the adopted answer completes it. A request in
              // flight here is left to its own answer.
              if (found.neverAnswered === true && entry.answer !== undefined && found.bodyHash === k.bodyHash) bound.put(id, entry)
              continue
            }
            bound.put(id, entry)
          }
          return Effect.void
        }),
      release: (scope, key) =>
        Effect.sync(() => {
          const id = idOf(scope, key)
          const entry = entries.get(id)
          if (entry !== undefined && entry.answer === undefined && entry.neverAnswered !== true) bound.forget(id)
        }),
      compact: Effect.map(Clock.currentTimeMillis, (now) => bound.sweep(now))
    }
    return store
  })

export const layer = (options: IdempotencyMemoryOptions) => Layer.effect(Idempotency, make(options))
