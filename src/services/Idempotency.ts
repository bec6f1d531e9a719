/**
 * Idempotency: durable HTTP request deduplication (DESIGN §7). A claim is durable before the work
 * starts; the answer is recorded after it and replayed byte for byte for the retention period,
 * across restarts. Claims live in a server-level store under the data directory (they outlive a
 * deleted session) and hold a hash of the request body and the answer, never secrets.
 *
 * - An answer above the store's maximum is recorded as not kept (its status and size only): the
 *   key resolves, and replays learn that the request completed without getting its body.
 * - A claim whose request did nothing (refused before any effect) can be released: the key is
 *   free again, durably, so a retry with it runs.
 * - An answer that could not be recorded leaves its key ambiguous (the work happened), never
 *   "in progress".
 * - A claim never answered (by an earlier process, or whose answer could not be recorded) and an
 *   ambiguous verdict (a 409 `ambiguous` answer kept for a request that may have had effects)
 *   never expire, whatever the retention: their requests are never run again under their keys.
 *   An adopted key never answered expires as any (its session is deleted: nothing can run it).
 * - The live keys held are bounded (`maxKeys`): at the bound a new key is refused with
 *   `IdempotencyFull` and nothing changes, while every key already held keeps answering. A live
 *   key is never dropped to make room: room comes from keys expiring, and from releases.
 * - The keys of requests about one session (`sessionOfScope`: its cancels, ends, deletes and kept
 *   refusals of sends and submits) are bounded too (`maxSessionKeys`, a share of `maxKeys`): past
 *   it that session's new keys are refused with `IdempotencyFull` naming it, and other sessions'
 *   are not. Keys a deleted session hands over (`adopt`) are not its share's.
 * - Deletes may pass `maxKeys` by up to `deleteReserveKeys`: a keyed delete's own key (`delete:`
 *   scopes) and the keys its session hands over, so that a log other sessions filled never leaves
 *   a session undeletable. Nothing else takes that reserve.
 */
import { Context, Data, type Effect } from "effect"

/** Separate namespaces: `POST /v1/sessions`, `send:{session}`, `submit:{session}`, `end:{session}`, … */
export type Scope = string

/** The scopes of requests about one session, each `{kind}:{session id}` (http/Handlers.ts). */
const SESSION_SCOPES: ReadonlySet<string> = new Set(["send", "submit", "cancel", "end", "delete"])

/**
 * The session a scope's requests are about (`send:`, `submit:`, `cancel:`, `end:` or `delete:`
 * followed by its id), or undefined (a create, a module's admission or removal).
 */
export const sessionOfScope = (scope: Scope): string | undefined => {
  const colon = scope.indexOf(":")
  return colon > 0 && colon < scope.length - 1 && SESSION_SCOPES.has(scope.slice(0, colon)) ? scope.slice(colon + 1) : undefined
}

/** Whether a scope's new keys may take the delete reserve (a keyed delete's own key). */
export const takesDeleteReserve = (scope: Scope): boolean => scope.startsWith("delete:")

/** The recorded answer of a request: replayed exactly. */
export interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  /** The response body, as sent (UTF-8 text, usually JSON). */
  readonly body: string
}

export type ClaimResult =
  /** New: the caller owns the key and must do the work, then `complete` (or `release`) it. */
  | { readonly _tag: "Claimed" }
  /** Seen with the same body and answered: replay this answer, do nothing else. */
  | { readonly _tag: "Replay"; readonly answer: Answer }
  /**
   * Seen with the same body and answered, but the answer (`bytes` of JSON) was above the store's
   * maximum and was not kept: the request completed with `status`; do nothing else.
   */
  | { readonly _tag: "AnswerNotKept"; readonly status: number; readonly bytes: number }
  /** Seen with a different body: 409 `conflict`. */
  | { readonly _tag: "Conflict" }
  /**
   * Claimed earlier with the same body but never answered (a crash between claim and answer, an
   * answer that could not be recorded, or still in flight in this process): 409 `ambiguous`;
   * never executed again. `session` is the session the claim named (a create's minted id), if any.
   */
  | { readonly _tag: "Ambiguous"; readonly inFlight: boolean; readonly session?: string }

/** The store could not do what was asked (a failed write, a closed store). Worth a retry. */
export class IdempotencyStoreFailed extends Data.TaggedError("IdempotencyStoreFailed")<{ readonly reason: string }> {
  override get message() {
    return this.reason
  }
}

/**
 * The store's log is damaged: a record failed a check (at open, or on reading an answer back).
 * Keyed requests are refused until an operator repairs the log; `file` is relative to the data
 * directory.
 */
export class IdempotencyLogDamaged extends Data.TaggedError("IdempotencyLogDamaged")<{
  readonly file: string
  readonly offset: number
  readonly reason: string
}> {
  override get message() {
    return `the idempotency log ${this.file} is damaged at offset ${this.offset}: ${this.reason}`
  }
}

/**
 * The store holds its maximum of live keys (`maxKeys`): a new key is refused and nothing changed.
 * Worth a retry once older keys expire (their retention) or are released.
 */
export class IdempotencyFull extends Data.TaggedError("IdempotencyFull")<{
  readonly maxKeys: number
  /**
   * Set when the refusal is one session's share (`maxSessionKeys`), not the whole store's: the
   * session, and the keys its requests hold (`maxKeys` is then the share).
   */
  readonly session?: string
  readonly keys?: number
}> {
  override get message() {
    return this.session === undefined
      ? `the idempotency store holds its maximum of ${this.maxKeys} live keys; a new key is taken once older ones expire`
      : `the idempotency store holds ${this.keys ?? this.maxKeys} keys of requests about session ${this.session}, its share of ${this.maxKeys}; a new key for it is taken once older ones expire`
  }
}

export type IdempotencyError = IdempotencyStoreFailed | IdempotencyLogDamaged | IdempotencyFull

/**
 * A key claimed and answered outside the store (a keyed send or submit, whose claim and answer
 * live in its session's journal), handed to the store when that journal goes (a delete) so that
 * the key outlives it. Its times are the original ones: it expires when it would have.
 */
export interface AdoptedKey {
  readonly scope: Scope
  readonly key: string
  readonly bodyHash: string
  /** When it was answered, or claimed when it never was. */
  readonly atMs: number
  /** Its answer; undefined for a request that was never answered (a retry is then Ambiguous). */
  readonly answer: Answer | undefined
}

/** How `complete` treats the bound on live keys. */
export interface CompleteOptions {
  /**
   * The answer of a reservation is kept even past the bound (an outcome that may have had
   * effects: forgetting it would let a retry run the request again). Otherwise a reservation
   * completed at the bound is refused with `IdempotencyFull` and its key freed.
   */
  readonly beyondBound?: boolean
}

export interface IdempotencyShape {
  /**
   * Claims `key` in `scope` for a request whose body hashes to `bodyHash`; durable when it returns
   * Claimed. A key not held, when the store holds `maxKeys` live keys, is `IdempotencyFull`.
   * `session` names the session the request will act on when the request itself picks it (a
   * create's id, minted before its journal exists): it is durable with the claim, and every
   * `Ambiguous` for the key names it, so that a client whose answer was lost can find the session.
   */
  readonly claim: (scope: Scope, key: string, bodyHash: string, session?: string) => Effect.Effect<ClaimResult, IdempotencyError>
  /**
   * Decides like `claim`, but a free key is only reserved in this process: nothing is written.
   * For requests whose own durable record carries the key (a turn's `request_claimed`, in its
   * session's journal): concurrent claims see the reservation (Ambiguous, in flight); `release`
   * drops it without writing; `complete` writes the claim and its answer, for a request refused
   * before its record was written. A reservation is never refused by the bound (it counts while
   * it lasts); its `complete` is.
   */
  readonly reserve: (scope: Scope, key: string, bodyHash: string) => Effect.Effect<ClaimResult, IdempotencyError>
  /**
   * Records the answer of a claimed request (or that it was not kept); durable when it returns.
   * Completing a reservation when the store holds more than `maxKeys` live keys with it is
   * `IdempotencyFull` (the reservation is dropped, nothing written) unless `beyondBound`.
   */
  readonly complete: (scope: Scope, key: string, answer: Answer, options?: CompleteOptions) => Effect.Effect<void, IdempotencyError>
  /**
   * Frees a claimed, unanswered key whose request had no effect, so that a retry runs; durable
   * when it returns. An answered key, or one never claimed, is left as it is.
   */
  readonly release: (scope: Scope, key: string) => Effect.Effect<void, IdempotencyError>
  /**
   * Takes over keys claimed and answered elsewhere (`AdoptedKey`); durable when it returns. A key
   * the store already holds is left as it is, except that a claim it holds unanswered, with the
   * same body hash, takes the adopted answer. Keys already past retention are not kept. When the
   * new keys would take the store past `maxKeys`, none is adopted: `IdempotencyFull`.
   */
  readonly adopt: (keys: ReadonlyArray<AdoptedKey>) => Effect.Effect<void, IdempotencyError>
  /** Drops answers (and adopted claims) older than the retention period; returns how many were dropped. */
  readonly compact: Effect.Effect<number, IdempotencyError>
}

export class Idempotency extends Context.Tag("brain/Idempotency")<Idempotency, IdempotencyShape>() {}
