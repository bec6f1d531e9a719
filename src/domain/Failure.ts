/**
 * Failure: the one shape every failed record, turn and HTTP error carries.
 * `ambiguous: true` means the effect may have happened; Brain never resends it.
 */
import { Schema } from "effect"
import { characterStart, cutBefore, cutMarker } from "./CutText.js"
import { MAX_FAILURE_DETAILS_BYTES, MAX_FAILURE_MESSAGE_BYTES } from "./Limits.js"

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
  "tool_call_limit",
  "emitted_bytes_limit",
  "turn_write_limit",
  "kv_limit",
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

/**
 * `text` when its UTF-8 is at most MAX_FAILURE_MESSAGE_BYTES, else its first bytes up to that
 * bound (cut at a character's start), with a marker saying how much was cut. Plain, and costs
 * one comparison for a short text: it runs wherever a failure is built from text Brain did not write.
 */
export const boundedMessage = (text: string): string => {
  // A UTF-16 unit is at most 3 bytes of UTF-8 (a pair, 4 for 2 units).
  if (text.length * 3 <= MAX_FAILURE_MESSAGE_BYTES) return text
  // A text that was cut before (a guest's brain.fail message, cut as it was read) is cut once:
  // its start within the bound keeps its marker; a longer one is cut counting what it left out.
  const before = cutBefore(text)
  const whole = before === undefined ? text : before.kept
  const bytes = Buffer.from(whole, "utf8")
  if (bytes.length <= MAX_FAILURE_MESSAGE_BYTES) return text
  const end = characterStart(bytes, MAX_FAILURE_MESSAGE_BYTES)
  return bytes.toString("utf8", 0, end) + cutMarker(bytes.length - end + (before?.dropped ?? 0))
}

/** The JSON size of `details` (UTF-8 bytes), or undefined when JSON cannot write them. */
const detailsBytes = (details: unknown): number | undefined => {
  try {
    const json = JSON.stringify(details)
    return json === undefined ? 0 : json.length * 3 <= MAX_FAILURE_DETAILS_BYTES ? json.length : Buffer.byteLength(json, "utf8")
  } catch {
    return undefined
  }
}

/**
 * `f` with its message bounded (`boundedMessage`) and its details replaced by a note when their
 * JSON passes MAX_FAILURE_DETAILS_BYTES (or cannot be written): what every failure built from
 * text Brain did not write goes through before it is put in a record, so that an outcome record
 * is always writable. `f` itself when nothing needed bounding.
 */
export const boundedFailure = (f: Failure): Failure => {
  const message = boundedMessage(f.message)
  const size = f.details === undefined ? 0 : detailsBytes(f.details)
  const detailsFit = size !== undefined && size <= MAX_FAILURE_DETAILS_BYTES
  if (message === f.message && detailsFit) return f
  return failure(f.code, message, {
    retryable: f.retryable,
    ambiguous: f.ambiguous,
    ...(f.details === undefined
      ? {}
      : detailsFit
      ? { details: f.details }
      : {
        details: {
          cut: size === undefined
            ? "the details could not be written as JSON"
            : `the details were ${size} bytes of JSON, above the ${MAX_FAILURE_DETAILS_BYTES} Brain keeps`
        }
      })
  })
}
