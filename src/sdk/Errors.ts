/**
 * The SDK's errors. `BrainError` is every refusal the Promise client rejects with (its body
 * `{code, message, retryable, details?}` plus the HTTP status: `fromRefusal` makes it from the
 * Effect client's typed refusal) and every request whose outcome stayed unknown once the SDK
 * stopped retrying it (`network_error`, status 0); an error of a keyed (mutating) request carries
 * its `idempotencyKey`, the one a retry must send. `BrainClosed` is every call on a client after
 * `close()`. Both are `Data.TaggedError`s: plain `Error`s for Promise users, `catchTag`-able
 * values for Effect users.
 */
import { Data } from "effect"
import type { ApiError } from "../domain/Errors.js"
import type { FailureCode } from "../domain/Failure.js"
import { statusOf } from "../http/Errors.js"

/**
 * The server's codes, plus two of the client's own: `network_error` (no answer arrived: the
 * connection failed or was reset; the request may or may not have run) and `bad_response` (an
 * answer that is not the contract's, say from a proxy).
 */
export type BrainErrorCode = FailureCode | "network_error" | "bad_response"

export class BrainError extends Data.TaggedError("BrainError")<{
  readonly code: BrainErrorCode
  /** The HTTP status, or 0 when no answer arrived. */
  readonly status: number
  readonly retryable: boolean
  readonly message: string
  readonly details?: unknown
  /**
   * The Idempotency-Key of the request it answers, when the request had one (every mutating call
   * does): a retry by the caller must send this same key, or it may run the request twice.
   */
  readonly idempotencyKey?: string | undefined
}> {
  /**
   * The session the refusal names (`details.session_id`), if it names one: a create whose
   * Environments failed (502 `creation_failed`: the failed session exists), or a retried create
   * whose first answer was lost (409 `ambiguous`: the session its first request minted, to
   * inspect before choosing a new key; a 404 for it means it was never created).
   */
  get sessionId(): string | undefined {
    const details = this.details
    return isRecord(details) && typeof details.session_id === "string" ? details.session_id : undefined
  }
}

export class BrainClosed extends Data.TaggedError("BrainClosed")<{ readonly message: string }> {
  constructor() {
    super({ message: "this Brain client is closed" })
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/**
 * Whether `e` is a host result's refusal `outcome_unrecorded` (500 `journal_write_failed`,
 * docs/api.md): Brain took the answer, but could not record the call's outcome durably; the call
 * counts as unknown and a repeat of the result is refused (409).
 */
export const isOutcomeUnrecorded = (e: unknown): e is BrainError =>
  e instanceof BrainError && e.code === "journal_write_failed" && isRecord(e.details) && e.details.reason === "outcome_unrecorded"

/** The error an answer of `status` with body `text` stands for. */
export const fromAnswer = (status: number, text: string): BrainError => {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    body = undefined
  }
  if (isRecord(body) && typeof body.code === "string" && typeof body.message === "string") {
    return new BrainError({
      code: body.code as BrainErrorCode,
      status,
      retryable: body.retryable === true,
      message: body.message,
      ...(body.details !== undefined ? { details: body.details } : {})
    })
  }
  return new BrainError({
    code: "bad_response",
    status,
    // A gateway's page (a load balancer while the server restarts): whether the request reached
    // the server is unknown, and a retry under the same key settles it.
    retryable: GATEWAY_STATUSES.has(status),
    message: `HTTP ${status} without an error body${text.length > 0 ? `: ${text.slice(0, 200)}` : ""}`
  })
}

/** Statuses a gateway answers for a server it could not reach or that did not answer in time. */
const GATEWAY_STATUSES: ReadonlySet<number> = new Set([502, 503, 504])

/** A typed refusal of the contract (domain/Errors.ts) as the BrainError of its answer: the same
 * code, message, retryable and details, with the status the contract gives its code. */
export const fromRefusal = (e: ApiError & { readonly idempotencyKey?: string | undefined }): BrainError =>
  new BrainError({
    code: e.code,
    status: statusOf(e.code),
    retryable: e.retryable,
    message: e.message,
    ...(e.details !== undefined ? { details: e.details } : {}),
    ...(e.idempotencyKey !== undefined ? { idempotencyKey: e.idempotencyKey } : {})
  })

/** `e` as the error of the request sent under `key`. */
export const withIdempotencyKey = (e: BrainError, key: string): BrainError =>
  new BrainError({
    code: e.code,
    status: e.status,
    retryable: e.retryable,
    message: e.message,
    ...(e.details !== undefined ? { details: e.details } : {}),
    idempotencyKey: key
  })

export const networkError = (cause: unknown): BrainError =>
  new BrainError({
    code: "network_error",
    status: 0,
    retryable: true,
    message: `no answer arrived: ${cause instanceof Error ? cause.message : String(cause)}`
  })

/**
 * Whether a request's outcome is uncertain in a way a retry under the same Idempotency-Key
 * settles: no answer arrived, a gateway answered for the server (502, 503, 504 without the
 * contract's body), or the server refused for load before it took the request and said
 * a retry may succeed (an `overloaded` with `retryable: false`, such as a full host registry, is
 * final).
 */
export const isUncertain = (e: BrainError): boolean =>
  e.code === "network_error" || (e.code === "bad_response" && e.retryable) || (e.status === 503 && e.code === "overloaded" && e.retryable)
