/**
 * The refusals of a request as it stands, before and as its body is parsed: its headers (no Host,
 * a repeated Idempotency-Key, a coding Brain does not read), an id the router cannot take, a query
 * the route does not take, a body on a route that takes none, a number beyond a double's range.
 * Each answers the typed error, or undefined when nothing is refused.
 */
import type { IncomingMessage } from "node:http"
import { UnsupportedMediaType } from "../domain/Errors.js"
import { invalid } from "./Errors.js"
import { MAX_JSON_DEPTH } from "../domain/Limits.js"

/**
 * Whether a request's headers carry what the gate refuses before it reads a body (checkHeaders,
 * checkCodings): no Host, a repeated Idempotency-Key, Host or Content-Type, a Content-Encoding. Cheap checks,
 * for the listener that takes requests at the socket (SocketRoutes.ts) to pass such a request on.
 */
export const oddHeaders = (incoming: IncomingMessage): boolean => {
  const headers = incoming.headers
  const key = headers["idempotency-key"]
  return headers.host === undefined || headers["content-encoding"] !== undefined ||
    (key !== undefined && key.includes(",")) || repeatedField(incoming.rawHeaders) !== undefined
}

/**
 * The first of the fields that must appear once, Host (RFC 9112 §3.2: 400) and Content-Type
 * (RFC 9110 §5.3: a singleton), that a request sends more than once; Node keeps the first of
 * them and drops the others without a word. Only names of their lengths are compared.
 */
export const repeatedField = (raw: ReadonlyArray<string>): "host" | "content-type" | undefined => {
  let host = 0
  let type = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    // The usual spellings are compared first, without a lower-case copy.
    if (name.length === 4) {
      if ((name === "Host" || name === "host" || name.toLowerCase() === "host") && ++host > 1) return "host"
    } else if (name.length === 12) {
      if ((name === "Content-Type" || name === "content-type" || name.toLowerCase() === "content-type") && ++type > 1) return "content-type"
    }
  }
  return undefined
}

/** How many times a header (by its lower-case name) appears among the raw headers. */
const countOf = (raw: ReadonlyArray<string>, name: string) => {
  let n = 0
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) n++
  return n
}

/**
 * The header refusals, before auth and routing: an HTTP/1.1 request without Host (RFC 9112
 * §3.2: 400); a Host or Content-Type sent more than once (repeatedField); an Idempotency-Key sent twice (Node joins the two with ", " into one key nobody
 * sent: 400). Undefined when none applies.
 */
export const checkHeaders = (incoming: IncomingMessage) => {
  const headers = incoming.headers
  if (headers.host === undefined && incoming.httpVersionMajor === 1 && incoming.httpVersionMinor >= 1) {
    const message = "an HTTP/1.1 request must carry a Host header (RFC 9112 §3.2)"
    return invalid(message, [{ path: ["host"], message: "is missing" }])
  }
  const repeated = repeatedField(incoming.rawHeaders)
  if (repeated !== undefined) {
    const name = repeated === "host" ? "Host" : "Content-Type"
    return invalid(`the ${name} header is sent more than once: send it once`, [{ path: [repeated], message: "appears more than once" }])
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

/**
 * A body nested deeper than MAX_JSON_DEPTH, refused before it is parsed: the issue's path is the
 * keys and indexes down to the first object or array past the bound (`pathPastDepth`); the
 * message names its first members.
 */
export const tooDeep = (at: ReadonlyArray<string | number>) => {
  const shown = at.length > 4 ? `${JSON.stringify(at.slice(0, 4)).slice(0, -1)},…]` : JSON.stringify(at)
  return invalid(
    `the JSON nests deeper than ${MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH)${at.length > 0 ? `, under ${shown}` : ""}`,
    [{ path: at, message: `nests deeper than ${MAX_JSON_DEPTH} levels` }]
  )
}

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

/**
 * A `\u` escape of a surrogate (U+D800 to U+DFFF) in JSON text: the only way a text that is valid
 * UTF-8 can give a string holding one. Looked for in the text first (maySurrogate: a native
 * search for `\u`, then this pattern), so that only a body that has one is walked (loneSurrogateAt):
 * a few tens of nanoseconds on a usual send, a few microseconds on a 64 KiB one.
 */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/

/** Whether JSON text may hold a surrogate escape: a `\u` at all (a native search), then the pattern. */
export const maySurrogate = (text: string): boolean => text.indexOf("\\u") >= 0 && SURROGATE_ESCAPE.test(text)

/**
 * Where a parsed JSON value holds a string (or a key) with a lone surrogate, which no UTF-8 can
 * carry (RFC 7493 §2.1, I-JSON: refused): its path, or undefined when every string is well formed.
 */
/** `String.prototype.isWellFormed` (Node 20; ES2024, past the compiler's library). */
const wellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed()

export const loneSurrogateAt = (value: unknown, at: Array<string | number> = []): Array<string | number> | undefined => {
  if (typeof value === "string") return wellFormed(value) ? undefined : at
  if (typeof value !== "object" || value === null) return undefined
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = loneSurrogateAt(value[i], [...at, i])
      if (found !== undefined) return found
    }
    return undefined
  }
  for (const [key, inner] of Object.entries(value)) {
    if (!wellFormed(key)) return [...at, key]
    const found = loneSurrogateAt(inner, [...at, key])
    if (found !== undefined) return found
  }
  return undefined
}

/** The refusal of a body holding a lone surrogate at `at` (docs/api.md, 400). */
export const loneSurrogate = (at: ReadonlyArray<string | number>) =>
  invalid(
    `the string at ${JSON.stringify(at)} holds a lone surrogate escape (such as "\\udc00"), which no UTF-8 text can carry: send a whole character (an escaped pair, or the character itself)`,
    [{ path: at, message: "holds a lone surrogate" }]
  )
