/**
 * The typed refusals: one `Schema.TaggedError` per failure code that a service method or an HTTP
 * route can answer, so that a method's signature and a route's contract name exactly what they
 * can fail with, and an Effect caller can `catchTag("SessionBusy")`.
 *
 * - The tag is the code in PascalCase (`session_busy` ↔ `SessionBusy`). Some tags repeat the name
 *   of a storage layer's own error (`JournalCorrupt`, `JournalWriteFailed`, `AgentloopFailed`):
 *   those never leave their layer; these are what the layer's failure means to a caller.
 * - Every instance carries the fields of the error body (DESIGN §7): `code` (a literal, set by the
 *   class), `message`, `retryable` (each class has its usual value as a default) and `details`.
 *   A refusal that may have had effects says so with `details.ambiguous: true`, as on the wire.
 * - The HTTP status and the wire codec (the body without `_tag`) are the contract's:
 *   http/ApiErrors.ts.
 */
import { Schema } from "effect"
import { failure, type Failure, type FailureCode } from "./Failure.js"
import { Json } from "./Messages.js"

/** The fields of a refusal with code `code`; `retryable` defaults to what the code usually means. */
const fieldsOf = <const Code extends FailureCode>(code: Code, retryable = false) => ({
  code: Schema.Literal(code).pipe(Schema.propertySignature, Schema.withConstructorDefault(() => code)),
  message: Schema.String,
  retryable: Schema.Boolean.pipe(Schema.propertySignature, Schema.withConstructorDefault(() => retryable)),
  /** What else is known, as JSON (a cursor's limit, the Environments that failed, `ambiguous`). */
  details: Schema.optional(Json)
})

// 4xx: the request's own fault, or a state that refuses it

export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()("InvalidRequest", fieldsOf("invalid_request")) {}
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", fieldsOf("unauthorized")) {}
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", fieldsOf("not_found")) {}
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", fieldsOf("conflict")) {}
export class SessionBusy extends Schema.TaggedError<SessionBusy>()("SessionBusy", fieldsOf("session_busy", true)) {}
export class SessionEnded extends Schema.TaggedError<SessionEnded>()("SessionEnded", fieldsOf("session_ended")) {}
export class Ambiguous extends Schema.TaggedError<Ambiguous>()("Ambiguous", fieldsOf("ambiguous")) {}
export class TeardownFailed extends Schema.TaggedError<TeardownFailed>()("TeardownFailed", fieldsOf("teardown_failed")) {}
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", fieldsOf("payload_too_large")) {}
export class UnsupportedMediaType
  extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", fieldsOf("unsupported_media_type"))
{}
/** A method the path does not take; `details.allow` lists the ones it does (as the `Allow` header). */
export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", fieldsOf("method_not_allowed")) {}

// 5xx: the server's (or a dependency's) fault

export class Overloaded extends Schema.TaggedError<Overloaded>()("Overloaded", fieldsOf("overloaded", true)) {}
export class IdempotencyUnavailable
  extends Schema.TaggedError<IdempotencyUnavailable>()("IdempotencyUnavailable", fieldsOf("idempotency_unavailable"))
{}
export class CreationFailed extends Schema.TaggedError<CreationFailed>()("CreationFailed", fieldsOf("creation_failed")) {}
export class JournalCorrupt extends Schema.TaggedError<JournalCorrupt>()("JournalCorrupt", fieldsOf("journal_corrupt")) {}
export class JournalWriteFailed extends Schema.TaggedError<JournalWriteFailed>()("JournalWriteFailed", fieldsOf("journal_write_failed")) {}
export class AgentloopFailed extends Schema.TaggedError<AgentloopFailed>()("AgentloopFailed", fieldsOf("agentloop_failed")) {}
export class Internal extends Schema.TaggedError<Internal>()("Internal", fieldsOf("internal", true)) {}

/** Every refusal class, each once. */
export const ApiErrorClasses = [
  InvalidRequest,
  Unauthorized,
  NotFound,
  Conflict,
  SessionBusy,
  SessionEnded,
  Ambiguous,
  TeardownFailed,
  PayloadTooLarge,
  UnsupportedMediaType,
  MethodNotAllowed,
  Overloaded,
  IdempotencyUnavailable,
  CreationFailed,
  JournalCorrupt,
  JournalWriteFailed,
  AgentloopFailed,
  Internal
] as const

export type ApiErrorClass = typeof ApiErrorClasses[number]
export type ApiError = InstanceType<ApiErrorClass>
export type ApiErrorCode = ApiError["code"]

/**
 * A refused storage access of a session: unknown, damaged, a write that failed, a record the
 * journal refused, or a journal that cannot be reached now for want of open-file descriptors
 * (`overloaded`, retryable: nothing is damaged).
 */
export type SessionStorageError = NotFound | JournalCorrupt | JournalWriteFailed | InvalidRequest | Overloaded

export const isApiError = (u: unknown): u is ApiError => ApiErrorClasses.some((c) => u instanceof c)

/** Whether a refusal may have had effects (`details.ambiguous`). */
export const mayHaveHadEffects = (e: ApiError) =>
  typeof e.details === "object" && e.details !== null && (e.details as { readonly ambiguous?: unknown }).ambiguous === true

/** A refusal as the Failure a turn outcome or a listed session carries. */
export const toFailure = (e: ApiError): Failure => {
  const { ambiguous, ...rest } = typeof e.details === "object" && e.details !== null && !Array.isArray(e.details)
    ? (e.details as { readonly ambiguous?: unknown })
    : { ambiguous: undefined }
  const details = Object.keys(rest).length > 0 ? rest : Array.isArray(e.details) || typeof e.details !== "object" ? e.details : undefined
  return failure(e.code, e.message, {
    retryable: e.retryable,
    ambiguous: ambiguous === true,
    ...(details !== undefined ? { details } : {})
  })
}
