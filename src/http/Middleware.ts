/**
 * The gate every request passes before routing, and the error shaping after it:
 * auth, a method the path does not take (405), draining, body size and media type, JSON
 * well-formedness — then every failure, including the framework's own (decode errors, unknown
 * routes, defects), answered as `{code, message, retryable, details?}`.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { RequestError } from "@effect/platform/HttpServerError"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import type * as HttpApp from "@effect/platform/HttpApp"
import { isUtf8 } from "node:buffer"
import * as crypto from "node:crypto"
import type { IncomingMessage } from "node:http"
import type * as net from "node:net"
import { Cause, Effect, Option, Stream } from "effect"
import {
  InvalidRequest,
  Internal,
  isApiError,
  MethodNotAllowed,
  NotFound,
  Overloaded,
  PayloadTooLarge,
  Unauthorized,
  UnsupportedMediaType
} from "../domain/Errors.js"
import { nonFiniteAt, scanJsonText } from "../domain/JsonText.js"
import { MAX_JSON_DEPTH } from "../domain/Limits.js"
import { lingerOnClose } from "./Connections.js"
import { decodeRefused, invalid, stopping, toResponse } from "./Errors.js"
import type { GateRoute } from "./FastSend.js"
import { methodsOf, takesQuery } from "./Methods.js"

/**
 * Request bodies held in memory at once, in bytes. A body is charged as its bytes arrive — never
 * by the length it declares, so a slow client holds only what it has sent — and holds them until
 * its request is answered (its parsed value lives that long). A body whose bytes are all that is
 * held is always admitted, so every legal request can be served alone; past the budget, a body
 * whose next bytes do not fit is refused with 503 `overloaded` rather than let concurrent large
 * bodies exhaust the heap.
 */
export class BodyBudget {
  private held = 0
  constructor(readonly limit: number) {}
  /** Takes `bytes` more for a body that holds `mine` already; false (nothing taken) when they do not fit beside the others. */
  take(bytes: number, mine = 0): boolean {
    if (this.held > mine && this.held + bytes > this.limit) return false
    this.held += bytes
    return true
  }
  /** Counts bytes already in memory, handed over by another reader (SocketRoutes.ts's `preRead`): never refused. */
  hold(bytes: number) {
    this.held += bytes
  }
  give(bytes: number) {
    this.held -= bytes
  }
  get inUse() {
    return this.held
  }
}

export const busyBodies = () =>
  new Overloaded({ message: "the server holds as many request bodies as it can at once (BRAIN_INFLIGHT_BODY_BYTES); try again shortly" })

export interface GateOptions {
  readonly apiToken: string | undefined
  readonly maxRequestBytes: number
  /** Bytes of request bodies held at once; undefined = no bound. */
  readonly bodies?: BodyBudget
  readonly draining: () => boolean
  /** Whether the request came on a connection accepted past the connection limit (health only). */
  readonly onProbation?: (socket: net.Socket) => boolean
  /** A route the gate answers itself once a JSON body passed its checks (FastSend.ts); else HttpApi routes it. */
  readonly route?: GateRoute
  /**
   * Whether `token` is host `host`'s own (Hosts.authorize): checked on a host's results and Events
   * before their bodies are read, so a caller without the token learns nothing of their schemas.
   */
  readonly authorizeHost?: (host: string, token: string) => boolean
}

/** SHA-256 of a token, so tokens of any length compare in constant time. */
export const digest = (s: string) => crypto.createHash("sha256").update(s).digest()

const BODY_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"])

/** Routes that take no payload: a body other than `{}` is an unknown field. */
const NO_PAYLOAD = /^(POST \/v1\/sessions\/[^/]+\/(cancel|end)|DELETE \/v1\/(sessions|agentloops|hosts)\/[^/]+|POST \/v1\/hosts)\/?$/

/** A host's own routes: they carry the host's token (checked by the handler), not the server's API token. */
const HOST_ROUTE = /^\/v1\/hosts\/[^/]+(\/(commands|results|events))?\/?$/
/** A host's routes that take a JSON body: its results and its Events (the host id is the first group). */
const HOST_BODY_ROUTE = /^\/v1\/hosts\/([^/]+)\/(results|events)\/?$/


/**
 * What a draining server still takes (seed, Lifecycle: the drain stops admitting work, while
 * "deadlines, interrupt, and forced process termination can still interrupt a turn"): a host's
 * answers for work already admitted, so that its calls can end, and a session's cancel, which
 * brings admitted work to an end sooner and starts none.
 */
const WHILE_DRAINING = /^(POST \/v1\/hosts\/[^/]+\/(results|events)|POST \/v1\/sessions\/[^/]+\/cancel)\/?$/

/**
 * The routes whose Idempotency-Key holds an answer (Handlers.ts), taken while draining when they
 * carry one: a create, a send or submit (the one route of both), an end, a delete, a module's
 * upload and its removal. A host's registration and removal check their key and ignore it: no
 * answer is kept under it, so a draining server refuses them as any new work.
 */
const KEYED_ROUTE =
  /^(POST \/v1\/sessions|POST \/v1\/sessions\/[^/]+\/(messages|end)|DELETE \/v1\/sessions\/[^/]+|POST \/v1\/agentloops|DELETE \/v1\/agentloops\/[^/]+)\/?$/

/**
 * Whether a draining server takes this request: a route of `WHILE_DRAINING`, or a keyed route
 * with its key. A key may hold an answer, which a retry gets whatever the server is doing
 * (docs/operations.md, "Stopping"): a key held is answered (or said to be still in flight), and
 * one not held is refused 503 `overloaded` having written nothing — by the sessions for a send or
 * submit, which start no turn once the drain has begun (TurnStarts.ts, `refusedStart`), and by
 * the idempotency lookup for the others (Idempotent.ts, `idempotent`'s `stopping`). The drain
 * waits for neither lookup (Admitted.ts, `lookups`), so neither holds the stop.
 */
export const takenWhileDraining = (method: string, path: string, idempotencyKey: string | ReadonlyArray<string> | undefined): boolean => {
  const line = `${method} ${path}`
  return WHILE_DRAINING.test(line) || (idempotencyKey !== undefined && KEYED_ROUTE.test(line))
}

/** Routes whose body is not JSON. */
const RAW_BODY = new Set(["/v1/agentloops"])

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
const checkHeaders = (incoming: IncomingMessage) => {
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
const checkCodings = (headers: IncomingMessage["headers"]) => {
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

/** The token of an `Authorization: Bearer <token>` header; the scheme is case-insensitive (RFC 7235). */
export const bearerToken = (header: string | undefined) => {
  const m = /^bearer +(\S+) *$/i.exec(header ?? "")
  return m ? m[1]! : ""
}

/** What a host route answers a caller without the host's own token. */
export const HOST_TOKEN_NEEDED = "this route needs the host's own token: `Authorization: Bearer <host token>`"

export const gate = (options: GateOptions) => {
  const expected = options.apiToken !== undefined ? digest(options.apiToken) : undefined
  return <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<never, R> =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const path = request.url.split("?")[0]!
      const health = path.startsWith("/health/")
      const incoming = NodeHttpServerRequest.toIncomingMessage(request)
      const odd = checkHeaders(incoming)
      if (odd !== undefined) return yield* Effect.fail(odd)
      if (options.onProbation?.(incoming.socket)) {
        // Not ready while a new client would be refused: live, but every connection is taken.
        if (!health || path === "/health/ready") {
          return yield* Effect.fail(
            new Overloaded({ message: "the server holds its maximum of connections (BRAIN_MAX_CONNECTIONS); try again later" })
          )
        }
        // Health is answered, and the connection closed after it to free the slot.
        return yield* Effect.map(app, (response) => HttpServerResponse.setHeader(response, "connection", "close"))
      }
      if (expected && !health && !HOST_ROUTE.test(path)) {
        // Compared as digests in constant time, whatever the length of what was sent.
        if (!crypto.timingSafeEqual(digest(bearerToken(request.headers["authorization"])), expected)) {
          return yield* Effect.fail(new Unauthorized({ message: "a valid `Authorization: Bearer <token>` is required" }))
        }
      }
      if (options.authorizeHost !== undefined && request.method === "POST") {
        const host = HOST_BODY_ROUTE.exec(path)?.[1]
        if (host !== undefined && !options.authorizeHost(host, bearerToken(request.headers["authorization"]))) {
          return yield* Effect.fail(new Unauthorized({ message: HOST_TOKEN_NEEDED }))
        }
      }
      // A path the contract has under other methods only: 405 before its body is read (RFC 9110).
      const methods = methodsOf(path)
      if (methods !== undefined && !methods.includes(request.method)) {
        return yield* Effect.fail(
          new MethodNotAllowed({ message: `this path takes ${methods.join(", ")}, not ${request.method}`, details: { allow: methods } })
        )
      }
      // A path no route has, under any method: 404 before its body is read, whatever the body is
      // (a mistyped path is not a media-type problem).
      if (methods === undefined) return yield* Effect.fail(new NotFound({ message: "no such route" }))
      // An id the router cannot take as a parameter would be its 404 "no such route".
      const malformed = unroutableId(path)
      if (malformed !== undefined) return yield* Effect.fail(malformed)
      // A query key the route does not take is a mistake (an unknown field) to refuse, never to
      // ignore: `/transcript?after=5` would answer the whole transcript. Routes that declare
      // their keys refuse the others as they decode them. Health and the document take no input.
      const query = request.url.indexOf("?")
      if (query >= 0 && !health && !takesQuery(request.method, path)) {
        const refused = unexpectedQuery(request.url.slice(query + 1))
        if (refused !== undefined) return yield* Effect.fail(refused)
      }
      if (BODY_METHODS.has(request.method)) {
        if (options.draining() && !takenWhileDraining(request.method, path, request.headers["idempotency-key"])) {
          return yield* Effect.fail(stopping())
        }
        const coded = checkCodings(incoming.headers)
        if (coded !== undefined) return yield* Effect.fail(coded)
        const declared = request.headers["content-length"]
        if (declared !== undefined && Number(declared) > options.maxRequestBytes) {
          return yield* Effect.fail(new PayloadTooLarge({ message: `the body is larger than ${options.maxRequestBytes} bytes` }))
        }
        // The budget is charged by the bytes that arrive (readBody), not by the length declared.
        const held: Held = { bytes: 0, detach: undefined }
        const budget = options.bodies
        reading.add(incoming)
        return yield* Effect.ensuring(
          routeWithBody(request, path, app, options, held),
          Effect.sync(() => {
            held.detach?.()
            budget?.give(held.bytes)
          })
        )
      }
      return yield* app
    }).pipe(
      Effect.catchAllCause(shapeError),
      Effect.flatMap((response) =>
        Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
          const incoming = NodeHttpServerRequest.toIncomingMessage(request)
          if (!closesAfterAnswer(incoming)) return response
          // What the client still sends of its body is read and discarded before the close, never reset.
          lingerOnClose(incoming.socket)
          return HttpServerResponse.setHeader(response, "connection", "close")
        })
      )
    )
}

/** Requests whose body the gate began to read (routeWithBody): answered after it, or as it ran past the bound. */
const reading = new WeakSet<IncomingMessage>()
/** Requests whose body was refused while it arrived, as it passed BRAIN_MAX_REQUEST_BYTES (readBody). */
const cutShort = new WeakSet<IncomingMessage>()

/**
 * Whether the answer closes the connection (docs/api.md 413, docs/operations.md): a request that
 * declares a body and is refused before the gate reads it (a declared length over the bound, a
 * missing token, a method the path does not take, …), or one whose body ran past the bound as it
 * arrived. Kept alive, the connection would read the rest of the body only to discard it, and a
 * client taking the answer's `keep-alive` at its word would have its next request read as that
 * body. A request that declares no body keeps its connection. The close lingers (Connections.ts's
 * `lingerOnClose`): what the client sends after the answer is discarded for a while, so that the
 * close does not reset the connection under an answer the client has not read yet.
 */
const closesAfterAnswer = (incoming: IncomingMessage): boolean => {
  if (cutShort.has(incoming)) return true
  if (reading.has(incoming)) return false
  const declared = incoming.headers["content-length"]
  return (declared !== undefined && declared !== "0") || incoming.headers["transfer-encoding"] !== undefined
}

/**
 * Bodies still arriving on routes a draining server no longer admits, each with how to refuse it
 * at once: when the drain starts (`refuseArrivingBodies`), a request whose headers came before it
 * but whose body has not arrived whole is answered 503 `overloaded` (nothing of it was done), its
 * bytes given back and the rest discarded, instead of its connection being cut at the drain's end
 * with no answer.
 */
const arriving = new Set<() => void>()

/** Refuses every body still arriving on a route not taken while draining (the drain has started). */
export const refuseArrivingBodies = (): void => {
  const refusals = [...arriving]
  arriving.clear()
  for (const refuse of refusals) refuse()
}

/** Registers a body's refusal while it arrives; the returned function unregisters it. */
export const whileArriving = (refuse: () => void): (() => void) => {
  arriving.add(refuse)
  return () => void arriving.delete(refuse)
}

/** The answer to a request whose body was still arriving when the drain started. */
export const drainedBody = () =>
  new Overloaded({ message: "the server is stopping and admits no new work: this request's body had not arrived whole when the stop began, and nothing of it was done" })

/** A request's share of the body budget, and how to stop reading its body. */
interface Held {
  bytes: number
  detach: (() => void) | undefined
}

/**
 * Bodies read before the request reached the gate (SocketRoutes.ts reads a send's or a host's
 * results, then hands the request here when its route does not take it as it is): the gate takes
 * the body from here instead of the socket, and checks and answers it as any other.
 */
export const preRead = new WeakMap<IncomingMessage, Buffer>()

/** Reads, checks and parses a request's body, then runs the route with it. */
const routeWithBody = <E, R>(
  request: HttpServerRequest.HttpServerRequest,
  path: string,
  app: HttpApp.Default<E, R>,
  options: GateOptions,
  held: Held
) =>
  Effect.gen(function*() {
    const body = yield* readBody(request, options.maxRequestBytes, options.bodies, held, !takenWhileDraining(request.method, path, request.headers["idempotency-key"]))
    if (body === "busy") return yield* Effect.fail(busyBodies())
    if (body === "drained") return yield* Effect.fail(drainedBody())
    if (body === undefined) {
      return yield* Effect.fail(new PayloadTooLarge({ message: `the body is larger than ${options.maxRequestBytes} bytes` }))
    }
    if (!RAW_BODY.has(path)) {
      const bodiless = NO_PAYLOAD.test(`${request.method} ${path}`)
      const type = request.headers["content-type"]
      const mediaType = (type ?? "").split(";")[0]!.trim().toLowerCase()
      // A route that takes no payload has no media type to check when nothing was sent (no body,
      // or `content-length: 0`), whatever the content-type says: `curl -X POST …/cancel -d ''`
      // sends a form's type. A route with a payload is refused 415 for a media type other than
      // JSON even when empty (its decoder would read such a body as what its type says).
      if ((body.length > 0 || (type !== undefined && !bodiless)) && mediaType !== "application/json") {
        return yield* Effect.fail(new UnsupportedMediaType({ message: "the body must be application/json" }))
      }
      // Decoding would turn bad bytes into U+FFFD silently and journal text nobody sent.
      if (!isUtf8(body)) return yield* Effect.fail(invalid("the body is not valid UTF-8"))
      const text = body.toString("utf8")
      if (bodiless && body.length > 0 && !EMPTY_OBJECT.test(text)) return yield* Effect.fail(unexpectedBody(text))
      if (body.length > 0) {
        const scan = scanJsonText(text)
        if (scan.depth > MAX_JSON_DEPTH) {
          return yield* Effect.fail(invalid(`the JSON nests deeper than ${MAX_JSON_DEPTH} levels`))
        }
        const parsed = yield* Effect.try({
          try: () => JSON.parse(text) as unknown,
          catch: (err) => invalid(`malformed JSON: ${(err as Error).message}`)
        })
        // JSON.parse reads such a number as Infinity, which JSON writes as null: refused wherever
        // it is, free-form JSON included, never kept as a value of another type.
        const beyond = scan.mayOverflow ? nonFiniteAt(parsed) : undefined
        if (beyond !== undefined) return yield* Effect.fail(beyondDouble(beyond))
        const routed = options.route?.(request, path, parsed)
        if (routed !== undefined) return yield* routed
        // Parsed once here; the payload decoder reads this value instead of parsing again.
        return yield* Effect.provideService(app, HttpServerRequest.HttpServerRequest, withBody(request, body, { parsed }))
      }
    }
    return yield* Effect.provideService(app, HttpServerRequest.HttpServerRequest, withBody(request, body))
  })

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
const unroutableId = (path: string) => {
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
const unexpectedQuery = (query: string) => {
  const keys = [...new Set(new URLSearchParams(query).keys())]
  if (keys.length === 0) return undefined
  const named = keys.map((k) => JSON.stringify(k)).join(", ")
  const message = `this route takes no query: ${keys.length === 1 ? `the key ${named} is` : `the keys ${named} are`} unexpected`
  return invalid(message, keys.map((k) => ({ path: [k], message: "is unexpected: this route takes no query" })))
}

/** The JSON `{}`, blanks around and inside it allowed (`{ }`, `{\n}`: a pretty-printed empty object): no body. */
const EMPTY_OBJECT = /^\s*\{\s*\}\s*$/

/** Bodies of a route that takes none: each field of an object is an unexpected one; anything else is unexpected as a whole. */
const NO_BODY = "this route takes no body (or an empty object)"

const unexpectedBody = (text: string) => {
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
 * Reads the whole body, taking its bytes from the budget as they arrive. Past `max` the body is
 * refused at once: what it held is given back, the answer is undefined (too large) and the
 * connection is closed after it (`cutShort`), so a client streaming a large body learns at the
 * bound rather than after uploading all of it. When the budget cannot take the next bytes, the body
 * is refused "busy": what it held is given back at once, and the rest is read and discarded (the
 * refusal is answered on a live connection, never by resetting it). A slow body holds only the
 * bytes it has sent; the listener's request timeout (Connections.ts) bounds how long it may take.
 * The listeners come off when the body ends or fails, or by `held.detach`, which the gate's
 * finalizer calls: a request interrupted while its body arrives (its connection closed) takes no
 * more of the budget once the finalizer has given back what it held. No canceler of its own, so
 * the wait is a plain `Effect.async`.
 */
const readBody = (request: HttpServerRequest.HttpServerRequest, max: number, budget: BodyBudget | undefined, held: Held, refusedByDrain: boolean) =>
  Effect.async<Buffer | undefined | "busy" | "drained", InvalidRequest>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const read = preRead.get(source)
    if (read !== undefined) {
      preRead.delete(source)
      if (read.length > max) return resume(Effect.succeed(undefined))
      // Already in memory: its reader gave its bytes back as it handed it over; counted again here.
      budget?.hold(read.length)
      held.bytes += read.length
      return resume(Effect.succeed(read))
    }
    const chunks: Array<Buffer> = []
    let size = 0
    let refused: "tooLarge" | "busy" | "drained" | undefined
    const refuse = (why: "tooLarge" | "busy" | "drained") => {
      refused = why
      chunks.length = 0
      budget?.give(held.bytes)
      held.bytes = 0
    }
    // Refused by a drain: answered now, its bytes given back, the rest read and discarded.
    const unregister = refusedByDrain
      ? whileArriving(() => {
        if (refused === undefined) refuse("drained")
        resume(Effect.succeed("drained"))
      })
      : undefined
    const onData = (chunk: Buffer) => {
      if (refused !== undefined) return
      size += chunk.length
      if (size > max) {
        // Answered now, the connection closed after the answer: the client learns at the bound,
        // not after uploading the rest (docs/api.md 413).
        refuse("tooLarge")
        cutShort.add(source)
        detach()
        return resume(Effect.succeed(undefined))
      }
      if (budget) {
        if (!budget.take(chunk.length, held.bytes)) return refuse("busy")
        held.bytes += chunk.length
      }
      chunks.push(chunk)
    }
    const detach = () => {
      unregister?.()
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
    }
    const onEnd = () => {
      detach()
      // A body refused by the drain was answered already.
      if (refused === "drained") return
      resume(Effect.succeed(refused === "tooLarge" ? undefined : refused ?? Buffer.concat(chunks)))
    }
    const onError = (err: Error) => {
      detach()
      if (refused === "drained") return
      resume(Effect.fail(invalid(`the body could not be read: ${err.message}`)))
    }
    if (source.readableEnded) {
      unregister?.()
      return resume(Effect.succeed(Buffer.alloc(0)))
    }
    held.detach = detach
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
  })

/** The request with its body already read: handlers and decoders get it from memory. */
const withBody = (
  request: HttpServerRequest.HttpServerRequest,
  body: Buffer,
  json?: { readonly parsed: unknown }
): HttpServerRequest.HttpServerRequest => {
  const text = body.toString("utf8")
  return Object.create(request, {
    text: { get: () => Effect.succeed(text) },
    json: {
      get: () =>
        json ? Effect.succeed(json.parsed) : Effect.try({
          try: () => (text === "" ? null : JSON.parse(text)) as unknown,
          catch: (err) => new RequestError({ request, reason: "Decode", cause: err })
        })
    },
    arrayBuffer: {
      get: () => Effect.succeed(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength) as ArrayBuffer)
    },
    stream: { get: () => Stream.succeed(new Uint8Array(body)) },
    // The body was read already: the other decoders are refused rather than left waiting on it.
    urlParamsBody: { get: () => Effect.fail(new RequestError({ request, reason: "Decode", description: "form bodies are not accepted" })) },
    multipart: { get: () => Effect.fail(new RequestError({ request, reason: "Decode", description: "multipart bodies are not accepted" })) },
    multipartStream: { get: () => Stream.fail(new RequestError({ request, reason: "Decode", description: "multipart bodies are not accepted" })) }
  })
}

/**
 * Whether an `HttpApiDecodeError` is the answer's, not the request's. The platform's route fails
 * with one for a request that does not decode (its path, payload, headers, query) and for a
 * success it cannot encode (a value off the contract, JSON that cannot be written), and keeps
 * only the formatted issues. Its success encoder is a transformation from the declared
 * `HttpServerResponse` to the route's schema, so its failure's message opens with
 * `(<declaration schema> <-> …)`, which no request schema's does (checked by
 * test/http/ResponseEncoding.test.ts against the pinned platform).
 */
export const answerEncodeFailed = (message: string | undefined): boolean =>
  message !== undefined && message.startsWith("(<declaration schema> <-> ")

/** Turns any failure into Brain's error body. Defects are logged and answered 500 `internal`. */
export const shapeError = (cause: Cause.Cause<unknown>): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const e = failure.value as { _tag?: string; message?: string; issues?: unknown }
    if (isApiError(e)) return Effect.succeed(toResponse(e))
    if (e._tag === "HttpApiDecodeError") {
      // The server's fault, never the request's: logged with what failed, answered 500.
      if (answerEncodeFailed(e.message)) {
        return Effect.zipRight(
          Effect.logError("an answer could not be encoded", e.message),
          Effect.succeed(toResponse(new Internal({ message: "the server could not encode its answer; see its log" })))
        )
      }
      return Effect.succeed(toResponse(decodeRefused(Array.isArray(e.issues) ? e.issues : [])))
    }
    if (e._tag === "RouteNotFound") return Effect.succeed(toResponse(new NotFound({ message: "no such route" })))
    if (e._tag === "RequestError") {
      return Effect.succeed(toResponse(invalid(`the request could not be read: ${e.message}`)))
    }
  }
  if (Cause.isInterruptedOnly(cause)) return Effect.succeed(HttpServerResponse.empty({ status: 499 }))
  return Effect.zipRight(
    Effect.logError("unexpected failure answering a request", cause),
    Effect.succeed(toResponse(new Internal({ message: "the server failed to answer; see its log" })))
  )
}
