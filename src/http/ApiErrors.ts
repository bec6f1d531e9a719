/**
 * The errors of the contract: each refusal class of domain/Errors.ts, as a schema whose Type is the
 * class (so that `HttpApiClient` fails with it and an Effect caller can `catchTag`) and whose
 * encoded side is the error body of DESIGN §7 exactly, `{code, message, retryable, details?}`, with
 * `code` a literal and no `_tag`, annotated with the code's HTTP status.
 *
 * Why a transform and not the class itself: a `Schema.TaggedError`'s encoded side carries `_tag`,
 * which the body must not (clients written from DESIGN read it, and the Promise SDK's `BrainError`
 * too). `Schema.transform(Struct({code: Literal, …}), Class)` keeps the class as the Type and the
 * flat body as the encoding: HttpApi reads the status from the transform's annotations (the
 * builder and the client both look the status up on the schema passed to `addError`), the client
 * decodes the members sharing a status as a union told apart by the literal `code`, and the
 * OpenAPI generator documents the encoded side, one named schema per code (`SessionBusy`, …)
 * under its status. (A `Schema.Class` with a literal `code` and no tag would encode flat too, but
 * its instances have no `_tag`, so `catchTag` would not work.)
 *
 * The server never encodes an error through these schemas: the error middleware
 * (ErrorShape.ts `shapeError`) answers every failure, the framework's own included, with the same
 * body from the same fields (Errors.ts `bodyOf`). A test checks that both encodings agree.
 */
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import * as Errors from "../domain/Errors.js"
import { Json } from "../domain/Messages.js"
import { statusOf } from "./Errors.js"

const descriptions: { readonly [C in Errors.ApiErrorCode]: string } = {
  invalid_request: "malformed JSON, unknown fields, wrong types, bad ids, cursors or headers; `details` lists the issues (`{path, message}`), or for a cursor past the end is `{last_sequence}`",
  unauthorized: "a missing or wrong bearer token",
  not_found: "no such session (or module)",
  conflict: "the request conflicts with the state (another body under the same Idempotency-Key, a failed session, …)",
  session_busy: "a turn is running in this session; retry later",
  session_ended: "the session has ended",
  ambiguous:
    "an Idempotency-Key whose request may have taken effect without a recorded answer: never run again; or, with `retryable: true`, whose request is still in progress: retry with the same key",
  teardown_failed: "an Environment's teardown failed; the session stays",
  payload_too_large: "the body (or a value in it) is above its limit",
  unsupported_media_type: "the body's media type is not the route's",
  method_not_allowed: "the path takes other methods, which the `Allow` header and `details.allow` list",
  overloaded: "the server is draining or at a limit; retry later",
  idempotency_unavailable: "the idempotency log is damaged: keyed requests are refused until an operator repairs it",
  creation_failed: "an Environment the session needed could not be set up; the session exists, failed",
  journal_corrupt: "the session's journal is damaged",
  journal_write_failed: "a write to the session's journal failed; the session recovers on its next access",
  agentloop_failed: "the session's Agentloop could not be loaded",
  internal: "the server failed to answer; see its log"
}

/** The wire schema of one refusal class. */
const onTheWire = <C extends Errors.ApiErrorClass>(errorClass: C, code: InstanceType<C>["code"]) => {
  const { message, retryable } = errorClass.fields
  const tag = errorClass._tag
  const body = Schema.Struct({
    code: Schema.Literal(code),
    message,
    retryable,
    details: Schema.optional(Json)
  })
  return Schema.transform(body, errorClass as unknown as Schema.Schema<InstanceType<C>, any>, {
    strict: false,
    decode: (wire) => ({ ...wire, _tag: tag }),
    encode: ({ _tag: _, ...wire }) => wire
  }).annotations({
    ...HttpApiSchema.annotations({ status: statusOf(code) }),
    identifier: tag,
    description: `${code}: ${descriptions[code]}`
  })
}

export const InvalidRequest = onTheWire(Errors.InvalidRequest, "invalid_request")
export const Unauthorized = onTheWire(Errors.Unauthorized, "unauthorized")
export const NotFound = onTheWire(Errors.NotFound, "not_found")
export const Conflict = onTheWire(Errors.Conflict, "conflict")
export const SessionBusy = onTheWire(Errors.SessionBusy, "session_busy")
export const SessionEnded = onTheWire(Errors.SessionEnded, "session_ended")
export const Ambiguous = onTheWire(Errors.Ambiguous, "ambiguous")
export const TeardownFailed = onTheWire(Errors.TeardownFailed, "teardown_failed")
export const PayloadTooLarge = onTheWire(Errors.PayloadTooLarge, "payload_too_large")
export const UnsupportedMediaType = onTheWire(Errors.UnsupportedMediaType, "unsupported_media_type")
/** Answered by the gate for a path the contract has under other methods only: no route declares it (a route is a method and a path). */
export const MethodNotAllowed = onTheWire(Errors.MethodNotAllowed, "method_not_allowed")
export const Overloaded = onTheWire(Errors.Overloaded, "overloaded")
export const IdempotencyUnavailable = onTheWire(Errors.IdempotencyUnavailable, "idempotency_unavailable")
export const CreationFailed = onTheWire(Errors.CreationFailed, "creation_failed")
export const JournalCorrupt = onTheWire(Errors.JournalCorrupt, "journal_corrupt")
export const JournalWriteFailed = onTheWire(Errors.JournalWriteFailed, "journal_write_failed")
export const AgentloopFailed = onTheWire(Errors.AgentloopFailed, "agentloop_failed")
export const Internal = onTheWire(Errors.Internal, "internal")

/** Every refusal's wire schema, each once (for the tests that hold the two encodings together). */
export const wireSchemas = [
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
