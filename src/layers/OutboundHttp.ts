/**
 * What Brain can tell from an outbound HTTP request's failure (to a model provider, to an
 * Environment): whether the request was sent at all. A request that never reached a server did
 * not happen; any other failure after it was handed to the connection may have had its effect.
 * And how a request is handed to undici's dispatcher (environments/Exchange.ts, models/Http.ts).
 */
import type { Dispatcher } from "undici"

/**
 * Error codes of a request that never left this machine, or never reached a server. Only a
 * second opinion: `neverSent` judges first by whether the request ever had a connection, which
 * covers every TLS failure (a certificate, a protocol error, a reset mid-handshake) without a list.
 */
const NOT_SENT_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_INVALID_ARG",
  "ERR_INVALID_URL",
  "CERT_HAS_EXPIRED",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "ERR_TLS_CERT_ALTNAME_INVALID"
])

/** The first errno-like code in an error's cause chain. */
export const causeCode = (e: unknown): string | undefined => {
  let current = e as { code?: unknown; cause?: unknown } | undefined
  for (let depth = 0; current && depth < 6; depth++) {
    if (typeof current.code === "string") return current.code
    current = current.cause as typeof current
  }
  return undefined
}

/**
 * Whether a request that failed before any response was never sent: it never had a connection, or
 * its error's code says it never left. undici hands a request its connection (the handler's
 * `onRequestStart`) only once the connection is ready, its TLS handshake done, and writes the
 * request only after that; a request that fails before it has not sent a byte of HTTP.
 */
export const neverSent = (onConnection: boolean, code: string | undefined): boolean =>
  !onConnection || (code !== undefined && NOT_SENT_CODES.has(code))

/** Why Brain left a request before its response ended (never shown: it only closes the connection). */
class RequestLeft extends Error {}

/** Aborts a request undici runs, which closes its connection; nothing when it is aborted already. */
export const abortRequest = (c: Dispatcher.DispatchController) => {
  if (!c.aborted) c.abort(new RequestLeft("left"))
}

/** A URL as undici's dispatcher takes it, parsed once per URL (those of bindings: few and fixed). */
const targets = new Map<string, { readonly origin: string; readonly path: string }>()
const TARGETS_KEPT = 1024

const targetOf = (url: string) => {
  let target = targets.get(url)
  if (target === undefined) {
    const parsed = new URL(url)
    target = { origin: parsed.origin, path: parsed.pathname + parsed.search }
    if (targets.size < TARGETS_KEPT) targets.set(url, target)
  }
  return target
}

/**
 * Hands one POST of `body` as JSON to `url` to undici's dispatcher, its answer to `handler`, with
 * no timeout of undici's own (its caller bounds it). Answers the code of a refusal when undici
 * would not take it (a URL or an option it refuses): then nothing was sent.
 */
export const dispatchPost = (
  dispatcher: Dispatcher,
  url: string,
  headers: Record<string, string>,
  body: unknown,
  handler: Dispatcher.DispatchHandler
): string | undefined => {
  try {
    const { origin, path } = targetOf(url)
    dispatcher.dispatch({ origin, path, method: "POST", headers, body: JSON.stringify(body), headersTimeout: 0, bodyTimeout: 0 }, handler)
    return undefined
  } catch (err) {
    return causeCode(err) ?? "ERR_INVALID_URL"
  }
}
