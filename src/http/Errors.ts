/**
 * Every non-2xx answer is `{code, message, retryable, details?}`, with the status DESIGN §7 gives
 * its code. Handlers fail with the refusals of domain/Errors.ts; the error middleware turns them,
 * and every error the framework would otherwise answer in its own shape, into that body.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { type ApiError, InvalidRequest, Overloaded } from "../domain/Errors.js"
import type { FailureCode } from "../domain/Failure.js"

/** The refusal of new work once the server has begun to stop (docs/operations.md, "Stopping"): nothing of the request was done. */
export const stopping = () => new Overloaded({ message: "the server is stopping and admits no new work" })

export const statusOf = (code: FailureCode): number => {
  switch (code) {
    case "invalid_request":
      return 400
    case "unauthorized":
      return 401
    case "not_found":
      return 404
    case "conflict":
    case "session_busy":
    case "ambiguous":
    case "session_ended":
    case "teardown_failed":
      return 409
    case "payload_too_large":
      return 413
    case "creation_failed":
      // An Environment the session needed failed: the gateway's, not the request's, fault.
      return 502
    case "unsupported_media_type":
      return 415
    case "method_not_allowed":
      return 405
    case "overloaded":
    case "idempotency_unavailable":
      return 503
    default:
      return 500
  }
}

/** Characters. An error repeats at most this much of what it describes (decode messages quote the input). */
const MAX_ERROR_TEXT = 2000
/** Entries. At most this many decode issues are listed in `details`. */
const MAX_ERROR_DETAILS = 20

const clip = (text: string) => (text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT)}… (truncated)` : text)

const clipDetails = (details: unknown): unknown => {
  if (!Array.isArray(details)) {
    const text = JSON.stringify(details) ?? ""
    return text.length > MAX_ERROR_TEXT ? clip(text) : details
  }
  return details.slice(0, MAX_ERROR_DETAILS).map((d) => {
    const text = JSON.stringify(d) ?? ""
    return text.length > MAX_ERROR_TEXT ? clip(text) : d
  })
}

export const bodyOf = (e: ApiError) =>
  JSON.stringify({
    code: e.code,
    message: clip(e.message),
    retryable: e.retryable,
    ...(e.details !== undefined ? { details: clipDetails(e.details) } : {})
  })

/**
 * One issue of a request that is not well formed (docs/api.md, Errors): where it is — `path`
 * within the body, the query, the path parameters or the headers (a header by its lower-case
 * name); `[]` for the request as a whole — and what. The decoders' issues have this shape too,
 * with `_tag` naming the kind of issue (`Missing`, `Unexpected`, `Type`, `Refinement`, …).
 */
export interface Issue {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

/** A 400 saying `message` and listing `issues`: by default one, about the request as a whole. */
export const invalid = (message: string, issues: ReadonlyArray<Issue> = [{ path: [], message }]) =>
  new InvalidRequest({ message, details: issues })

// The 400 of a request that did not decode: domain/DecodeRefusal.ts, shared with the services' own checks of what an application passes them.
export { type DecodeIssue, decodeRefused } from "../domain/DecodeRefusal.js"

/**
 * The refusal as it is answered: every `invalid_request` carries `details` (docs/api.md, Errors),
 * so one raised without any — a value a service cannot take, named in its message — lists that
 * message as its one issue, about the request as a whole.
 */
export const withIssues = (e: ApiError): ApiError =>
  e.code === "invalid_request" && e.details === undefined
    ? new InvalidRequest({ message: e.message, retryable: e.retryable, details: [{ path: [], message: e.message }] })
    : e

/** The `Allow` header of a 405, from its `details.allow`. */
const allowOf = (details: unknown): string => {
  const allow = typeof details === "object" && details !== null ? (details as { readonly allow?: unknown }).allow : undefined
  return Array.isArray(allow) ? allow.filter((m) => typeof m === "string").join(", ") : ""
}

/**
 * Seconds a client retrying a 503 `overloaded` is first asked to wait (RFC 9110 §10.2.3) when the
 * refusal names no wait of its own: long enough that a client following it does not spin, short
 * enough that a limit freed in the meantime (a body answered, a connection closed) is soon used.
 */
export const RETRY_AFTER_SECS = 1

/**
 * The `Retry-After` of a refusal, in whole seconds: a 503 `overloaded` that is retryable waits its
 * `details.retry_after_ms` rounded up (the idle expiry of a host registration), else
 * RETRY_AFTER_SECS. Undefined for every other refusal, and for one that says a retry will not help
 * (`retryable: false`).
 */
export const retryAfterOf = (e: ApiError): string | undefined => {
  if (e.code !== "overloaded" || !e.retryable) return undefined
  const ms = typeof e.details === "object" && e.details !== null ? (e.details as { readonly retry_after_ms?: unknown }).retry_after_ms : undefined
  return String(typeof ms === "number" && Number.isFinite(ms) && ms > 0 ? Math.ceil(ms / 1000) : RETRY_AFTER_SECS)
}

/** A refusal's headers besides its content type (toResponse; an idempotent refusal's answer, Idempotent.ts). */
export const refusalHeaders = (e: ApiError): Record<string, string> => {
  // RFC 7235: a 401 names the scheme it wants; RFC 9110: a 405 the methods the path takes; a
  // refusal for load asks the client to close, and when to come back.
  if (e.code === "unauthorized") return { "www-authenticate": 'Bearer realm="brain"' }
  if (e.code === "method_not_allowed") return { allow: allowOf(e.details) }
  if (e.code === "overloaded") {
    const after = retryAfterOf(e)
    return after !== undefined ? { connection: "close", "retry-after": after } : { connection: "close" }
  }
  return {}
}

export const toResponse = (refusal: ApiError) => {
  const e = withIssues(refusal)
  return HttpServerResponse.text(bodyOf(e), {
    status: statusOf(e.code),
    contentType: "application/json",
    headers: refusalHeaders(e)
  })
}

