/**
 * Idempotency: durable HTTP request deduplication (DESIGN §7). A claim is durable before the work
 * starts; the answer is recorded after it and replayed byte for byte for the retention period,
 * across restarts. Claims live in a server-level store under the data directory (they outlive a
 * deleted session) and hold a hash of the request body and the answer, never secrets.
 */
import { Context, Data, type Effect } from "effect"

/** Separate namespaces: `POST /v1/sessions`, `send:{session}`, `submit:{session}`, `end:{session}`, … */
export type Scope = string

/** The recorded answer of a request: replayed exactly. */
export interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  /** The response body, as sent (UTF-8 text, usually JSON). */
  readonly body: string
}

export type ClaimResult =
  /** New: the caller owns the key and must do the work, then `complete` it. */
  | { readonly _tag: "Claimed" }
  /** Seen with the same body and answered: replay this answer, do nothing else. */
  | { readonly _tag: "Replay"; readonly answer: Answer }
  /** Seen with a different body: 409 `conflict`. */
  | { readonly _tag: "Conflict" }
  /**
   * Claimed earlier with the same body but never answered (a crash between claim and answer, or
   * still in flight in this process): 409 `ambiguous`; never executed again.
   */
  | { readonly _tag: "Ambiguous"; readonly inFlight: boolean }

export class IdempotencyStoreFailed extends Data.TaggedError("IdempotencyStoreFailed")<{ readonly reason: string }> {}

export interface IdempotencyShape {
  /** Claims `key` in `scope` for a request whose body hashes to `bodyHash`; durable when it returns Claimed. */
  readonly claim: (scope: Scope, key: string, bodyHash: string) => Effect.Effect<ClaimResult, IdempotencyStoreFailed>
  /** Records the answer of a claimed request; durable when it returns. */
  readonly complete: (scope: Scope, key: string, answer: Answer) => Effect.Effect<void, IdempotencyStoreFailed>
  /** Drops claims and answers older than the retention period; returns how many were dropped. */
  readonly compact: Effect.Effect<number, IdempotencyStoreFailed>
}

export class Idempotency extends Context.Tag("brain/Idempotency")<Idempotency, IdempotencyShape>() {}
