/**
 * Failure: the one shape every failed record, turn and HTTP error carries.
 * `ambiguous: true` means the effect may have happened; Brain never resends it.
 */
import { Schema } from "effect"

/** The closed set of failure codes. Adding one is a contract change: update docs/api.md. */
export const FailureCodes = [
  // request and lifecycle
  "invalid_request",
  "unauthorized",
  "not_found",
  "conflict",
  "session_busy",
  "session_ended",
  "ambiguous",
  "teardown_failed",
  "payload_too_large",
  "unsupported_media_type",
  "method_not_allowed",
  "overloaded",
  // turns and effects
  "interrupted",
  "cancelled",
  "timeout",
  "unknown",
  "model_call_limit",
  "emitted_bytes_limit",
  "reserved_kind",
  "model_failed",
  // a model provider: what went wrong, so a loop can choose (Brain itself never retries)
  "model_rejected",
  "model_rate_limited",
  "model_unavailable",
  "model_unreachable",
  "model_stream_broken",
  "model_timeout",
  "model_output_limit",
  "model_bad_response",
  "model_binding_missing",
  "model_binding_moved",
  "tool_failed",
  "environment_failed",
  "agentloop_failed",
  "creation_failed",
  // storage and internal
  "journal_corrupt",
  "journal_write_failed",
  "idempotency_unavailable",
  "internal"
] as const

export const FailureCode = Schema.Literal(...FailureCodes)
export type FailureCode = typeof FailureCode.Type

export class Failure extends Schema.Class<Failure>("Failure")({
  code: FailureCode,
  message: Schema.String,
  retryable: Schema.Boolean,
  ambiguous: Schema.Boolean,
  /** What else is known, as JSON (a provider's status and error body, its retry-after advice). */
  details: Schema.optional(Schema.Unknown)
}) {}

export const failure = (
  code: FailureCode,
  message: string,
  options: { readonly retryable?: boolean; readonly ambiguous?: boolean; readonly details?: unknown } = {}
): Failure =>
  new Failure({
    code,
    message,
    retryable: options.retryable ?? false,
    ambiguous: options.ambiguous ?? false,
    ...(options.details !== undefined ? { details: options.details } : {})
  })
