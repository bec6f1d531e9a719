/**
 * The gate every request passes before routing: headers (RequestChecks.ts), auth (Tokens.ts), a
 * method the path does not take (405), an id or a query the route cannot take, draining
 * (Draining.ts), body size, media type and JSON well-formedness (the body read by BodyRead.ts) —
 * then every failure, including the framework's own, answered in Brain's error body
 * (ErrorShape.ts), and the connection closed after an answer given before its body was read.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import type * as HttpApp from "@effect/platform/HttpApp"
import { isUtf8 } from "node:buffer"
import * as crypto from "node:crypto"
import type { IncomingMessage } from "node:http"
import type * as net from "node:net"
import { Effect } from "effect"
import { MethodNotAllowed, NotFound, Overloaded, PayloadTooLarge, Unauthorized, UnsupportedMediaType } from "../domain/Errors.js"
import { nonFiniteAt, pathPastDepth, scanJsonText } from "../domain/JsonText.js"
import { MAX_JSON_DEPTH } from "../domain/Limits.js"
import { type BodyBudget, busyBodies } from "./BodyBudget.js"
import { cutShort, type Held, readBody, withBody } from "./BodyRead.js"
import { lingerOnClose } from "./Connections.js"
import { drainedBody, takenWhileDraining } from "./Draining.js"
import { invalid, stopping } from "./Errors.js"
import { shapeError } from "./ErrorShape.js"
import type { GateRoute } from "./FastSend.js"
import { methodsOf, takesQuery } from "./Methods.js"
import {
  beyondDouble,
  checkCodings,
  checkHeaders,
  EMPTY_OBJECT,
  loneSurrogate,
  loneSurrogateAt,
  maySurrogate,
  tooDeep,
  unexpectedBody,
  unexpectedQuery,
  unroutableId
} from "./RequestChecks.js"
import { bearerToken, digest, HOST_TOKEN_NEEDED } from "./Tokens.js"

// What SocketRoutes.ts takes from here, from the modules it now lives in (its imports may move to them).
export { busyBodies } from "./BodyBudget.js"
export { preRead } from "./BodyRead.js"
export { drainedBody, takenWhileDraining, whileArriving } from "./Draining.js"
export { shapeError } from "./ErrorShape.js"
export { oddHeaders } from "./RequestChecks.js"
export { bearerToken, digest } from "./Tokens.js"

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

const BODY_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"])

/** Routes that take no payload: a body other than `{}` is an unknown field. */
const NO_PAYLOAD = /^(POST \/v1\/sessions\/[^/]+\/(cancel|end)|DELETE \/v1\/(sessions|agentloops|hosts)\/[^/]+|POST \/v1\/hosts)\/?$/

/** A host's own routes: they carry the host's token (checked by the handler), not the server's API token. */
const HOST_ROUTE = /^\/v1\/hosts\/[^/]+(\/(commands|results|events))?\/?$/
/** A host's routes that take a JSON body: its results and its Events (the host id is the first group). */
const HOST_BODY_ROUTE = /^\/v1\/hosts\/([^/]+)\/(results|events)\/?$/

/** Routes whose body is not JSON. */
const RAW_BODY = new Set(["/v1/agentloops"])

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
        if (scan.depth > MAX_JSON_DEPTH) return yield* Effect.fail(tooDeep(pathPastDepth(text, MAX_JSON_DEPTH) ?? []))
        const parsed = yield* Effect.try({
          try: () => JSON.parse(text) as unknown,
          catch: (err) => invalid(`malformed JSON: ${(err as Error).message}`)
        })
        // JSON.parse reads such a number as Infinity, which JSON writes as null: refused wherever
        // it is, free-form JSON included, never kept as a value of another type.
        const beyond = scan.mayOverflow ? nonFiniteAt(parsed) : undefined
        if (beyond !== undefined) return yield* Effect.fail(beyondDouble(beyond))
        // A string no UTF-8 can carry (a lone surrogate escape) would be journaled and sent on as such.
        const lone = maySurrogate(text) ? loneSurrogateAt(parsed) : undefined
        if (lone !== undefined) return yield* Effect.fail(loneSurrogate(lone))
        const routed = options.route?.(request, path, parsed)
        if (routed !== undefined) return yield* routed
        // Parsed once here; the payload decoder reads this value instead of parsing again.
        return yield* Effect.provideService(app, HttpServerRequest.HttpServerRequest, withBody(request, body, { parsed }))
      }
    }
    return yield* Effect.provideService(app, HttpServerRequest.HttpServerRequest, withBody(request, body))
  })
