/**
 * The refusals of a request as it stands, before and as its body is parsed: its headers (no Host,
 * a repeated Idempotency-Key, a coding Brain does not read), an id the router cannot take, a query
 * the route does not take, a body on a route that takes none, a number beyond a double's range.
 * Each answers the typed error, or undefined when nothing is refused.
 */
import type { IncomingMessage } from "node:http"
import { UnsupportedMediaType } from "../domain/Errors.js"
import { invalid } from "./Errors.js"

/**
 * Whether a request's headers carry what the gate refuses before it reads a body (checkHeaders,
 * checkCodings): no Host, a repeated Idempotency-Key, a Content-Encoding. One constant check,
 * for the listener that takes requests at the socket (SocketRoutes.ts) to pass such a request on.
 */
export const oddHeaders = (headers: IncomingMessage["headers"]): boolean => {
  const key = headers["idempotency-key"]
  return headers.host === undefined || headers["content-encoding"] !== undefined ||
    (key !== undefined && key.includes(","))
}

/** How many times a header (by its lower-case name) appears among the raw headers. */
const countOf = (raw: ReadonlyArray<string>, name: string) => {
  let n = 0
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) n++
  return n
}

/**
 * The header refusals, before auth and routing: an HTTP/1.1 request without Host (RFC 9112
 * §3.2: 400); an Idempotency-Key sent twice (Node joins the two with ", " into one key nobody
 * sent: 400). Undefined when none applies.
 */
export const checkHeaders = (incoming: IncomingMessage) => {
  const headers = incoming.headers
  if (headers.host === undefined && incoming.httpVersionMajor === 1 && incoming.httpVersionMinor >= 1) {
    const message = "an HTTP/1.1 request must carry a Host header (RFC 9112 §3.2)"
    return invalid(message, [{ path: ["host"], message: "is missing" }])
  }
  const key = headers["idempotency-key"]
  if (key !== undefined && key.includes(",") && countOf(incoming.rawHeaders, "idempotency-key") > 1) {
    return invalid("the Idempotency-Key header is sent more than once: send one key", [
      { path: ["idempotency-key"], message: "appears more than once" }
    ])
  }
  return undefined
}

/**
 * A body's codings, before it is read: a content coding Brain does not decode (RFC 9110 §8.4.1:
 * 415), or a transfer coding other than chunked (400: Brain would read it as no other; RFC 9112
 * §6.1 suggests 501, a status Brain's error codes do not have). Undefined when the body is read as it is.
 */
export const checkCodings = (headers: IncomingMessage["headers"]) => {
  const coding = headers["content-encoding"]
  if (coding !== undefined && coding.trim().toLowerCase() !== "identity") {
    return new UnsupportedMediaType({
      message: `the body's Content-Encoding ${JSON.stringify(coding)} is not accepted: send the body as it is (identity), with no Content-Encoding`,
      details: { content_encoding: coding }
    })
  }
  const transfer = headers["transfer-encoding"]
  if (transfer !== undefined && transfer.trim().toLowerCase() !== "chunked") {
    const message = `the Transfer-Encoding ${JSON.stringify(transfer)} is not understood: only chunked is`
    return invalid(message, [{ path: ["transfer-encoding"], message: "only chunked is understood" }])
  }
  return undefined
}

/** The refusal of a body holding a number beyond a double's range at `at` (docs/api.md, "Numbers"). */
export const beyondDouble = (at: ReadonlyArray<string | number>) =>
  invalid(
    `a number ${at.length > 0 ? `at ${JSON.stringify(at)} ` : ""}is beyond the range of a double (such as 1e400): JSON would keep it as null, so it is refused`,
    [{ path: at, message: "is a number beyond the range of a double" }]
  )

/** Characters. The longest path parameter the router (find-my-way's `maxParamLength`) matches; longer, it finds no route. */
const ROUTER_MAX_PARAM = 100

/**
 * The refusal of a path of a known route whose id segment the router cannot take (over
 * ROUTER_MAX_PARAM characters, or percent-encoding that does not decode to UTF-8), which no id
 * can be: 400 naming the id, as any malformed id is (docs/api.md), not the router's 404.
 */
export const unroutableId = (path: string) => {
  for (const segment of path.split("/")) {
    let decodes = true
    try {
      decodeURIComponent(segment)
    } catch {
      decodes = false
    }
    if (decodes && segment.length <= ROUTER_MAX_PARAM) continue
    const why = decodes ? `is longer than any id (over ${ROUTER_MAX_PARAM} characters)` : "is not valid percent-encoded UTF-8, which no id is"
    return invalid(`id: the path's id ${why}`, [{ path: ["id"], message: why }])
  }
  return undefined
}

/** The refusal of a query on a route that takes none, naming each key; undefined when the query holds no key (`?`, `?&`). */
export const unexpectedQuery = (query: string) => {
  const keys = [...new Set(new URLSearchParams(query).keys())]
  if (keys.length === 0) return undefined
  const named = keys.map((k) => JSON.stringify(k)).join(", ")
  const message = `this route takes no query: ${keys.length === 1 ? `the key ${named} is` : `the keys ${named} are`} unexpected`
  return invalid(message, keys.map((k) => ({ path: [k], message: "is unexpected: this route takes no query" })))
}

/** The JSON `{}`, blanks around and inside it allowed (`{ }`, `{\n}`: a pretty-printed empty object): no body. */
export const EMPTY_OBJECT = /^\s*\{\s*\}\s*$/

/** Bodies of a route that takes none: each field of an object is an unexpected one; anything else is unexpected as a whole. */
const NO_BODY = "this route takes no body (or an empty object)"

export const unexpectedBody = (text: string) => {
  let fields: ReadonlyArray<string> = []
  try {
    const parsed: unknown = JSON.parse(text)
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) fields = Object.keys(parsed)
  } catch {
    // not JSON: unexpected as a whole
  }
  return invalid(NO_BODY, fields.length > 0 ? fields.map((f) => ({ path: [f], message: `is unexpected: ${NO_BODY}` })) : undefined)
}
