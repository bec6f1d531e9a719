/**
 * What Brain can tell from an outbound HTTP request's failure (to a model provider, to an
 * Environment): whether the request was sent at all. A request that never reached a server did
 * not happen; any other failure after it was handed to the connection may have had its effect.
 */

/** Error codes of a request that never left this machine, or never reached a server. */
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

/** Whether an error code shows that the request was never sent. */
export const notSent = (code: string | undefined): code is string => code !== undefined && NOT_SENT_CODES.has(code)
