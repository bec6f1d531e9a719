/**
 * Requests taken at the socket: sends (`POST /v1/sessions/:id/messages`, the request every turn
 * is) and a host's results (`POST /v1/hosts/:id/results`, one per round of host-tool calls). For
 * them, @effect/platform's per-request machinery (a wrapper fiber with its scope, the middleware
 * chain, the request object, the response's conversion) cost the main thread more than the rest
 * of what HTTP does (docs/benchmarks.md, "Sends and a host's results taken at the socket"). So such a request the gate
 * would admit as it stands is answered here: the gate's checks, then the route's own decoders and
 * handler (FastSend.ts, Handlers.ts), run as one fiber of the server's runtime, its response
 * written straight to the socket.
 *
 * The contract stays in one place, the gate and HttpApi: anything this listener does not take as
 * it is goes to the platform's handler, which answers it as it answers every request —
 *
 * - before the body is read: another route, a query, a socket on probation, headers the gate refuses
 *   before anything else (no Host, a repeated Idempotency-Key, a Content-Encoding), a send whose token does not
 *   match (a host's results carry the host's own token, which their handler checks), a send
 *   while the server drains, a media type other than JSON, no or an oversized
 *   `content-length`;
 * - after the body is read (not UTF-8, nested too deep, not JSON, a number beyond a double's range,
 *   not the route's payload or headers): with the body handed over already read (`preRead`, which the gate takes instead
 *   of reading the socket again).
 *
 * What the gate gives a request holds here too: its bytes are taken from the body budget as they
 * arrive and held until the answer (or the client's going away); bytes the budget cannot take are
 * refused as the gate refuses them (what the body held given back at once, the rest discarded,
 * then 503 `overloaded`); and a client that goes away interrupts the fiber answering it, as the
 * platform's handler does.
 */
import { isUtf8 } from "node:buffer"
import * as crypto from "node:crypto"
import type * as http from "node:http"
import { clientAbortFiberId } from "@effect/platform/HttpServerError"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Cause, Effect, Either, Exit, type Runtime, Schema } from "effect"
import * as RuntimeOps from "effect/Runtime"
import { Internal } from "../domain/Errors.js"
import { holdsNonFinite, scanJsonText } from "../domain/JsonText.js"
import { MAX_JSON_DEPTH } from "../domain/Limits.js"
import { guardedDecode } from "../domain/SchemaGuard.js"
import type { HostsShape } from "../services/Hosts.js"
import type { IdempotencyShape } from "../services/Idempotency.js"
import type { SessionsShape } from "../services/Sessions.js"
import { toResponse } from "./Errors.js"
import { SEND_PATH, sendRoute } from "./FastSend.js"
import { hostResults } from "./Handlers.js"
import { loneSurrogateAt, maySurrogate } from "./RequestChecks.js"
import { HostPath, HostResultBody } from "./Schemas.js"
import { bearerToken, busyBodies, digest, drainedBody, type GateOptions, oddHeaders, preRead, shapeError, takenWhileDraining, whileArriving } from "./Middleware.js"

type Listener = (request: http.IncomingMessage, response: http.ServerResponse) => void

/** A route taken at the socket. */
export interface SocketRoute {
  /** The path it takes (no query), the id in its first group. */
  readonly path: RegExp
  /** Whether it needs the server's API token: a host's own routes carry the host's token, which their handler checks. */
  readonly serverToken: boolean
  /** Whether it is taken while the server drains: a host's answers for work already admitted are. */
  readonly whileDraining: boolean
  /** Its answer for an id, headers and parsed body it takes as they are; undefined for any HttpApi would decode otherwise (or refuse). */
  readonly take: (id: string, headers: http.IncomingHttpHeaders, parsed: unknown) => Effect.Effect<HttpServerResponse.HttpServerResponse, unknown> | undefined
}

/** Sends: the send route's own decoders and handler (FastSend.ts). */
export const sends = (sessions: SessionsShape, store: IdempotencyShape): SocketRoute => ({
  path: SEND_PATH,
  serverToken: true,
  whileDraining: false,
  take: sendRoute(sessions, store)
})

const decodeHostPath = Schema.decodeUnknownEither(HostPath)
// A body the schema's guard accepts is taken as it is, without the decoder's copy (SchemaGuard.ts).
const decodeHostResults = guardedDecode(HostResultBody)

/** A host's results: the route's own decoders and handler (Handlers.ts), answered 204 as HttpApi answers them. */
export const hostResultsRoute = (hosts: HostsShape): SocketRoute => {
  const handle = hostResults(hosts)
  return {
    path: /^\/v1\/hosts\/([^/%]+)\/results$/,
    serverToken: false,
    whileDraining: true,
    take: (id, headers, parsed) => {
      const path = decodeHostPath({ id })
      if (Either.isLeft(path)) return undefined
      const payload = decodeHostResults(parsed)
      if (Either.isLeft(payload)) return undefined
      return Effect.as(handle({ headers, path: path.right, payload: payload.right }), HttpServerResponse.empty({ status: 204 }))
    }
  }
}

/**
 * A `request` listener that answers the requests of `routes` it can take as they stand and passes
 * every other request to `platform` (the platform's own listener).
 */
export const socketListener = (
  options: Omit<GateOptions, "route">,
  routes: ReadonlyArray<SocketRoute>,
  runtime: Runtime.Runtime<never>,
  platform: Listener
): Listener => {
  const expected = options.apiToken !== undefined ? digest(options.apiToken) : undefined
  const runFork = RuntimeOps.runFork(runtime)

  /** Whether the gate would admit this request to `route` as it stands, before its body. */
  const admits = (request: http.IncomingMessage, route: SocketRoute): boolean => {
    if (options.onProbation?.(request.socket) || oddHeaders(request)) return false
    if (route.serverToken && expected && !crypto.timingSafeEqual(digest(bearerToken(request.headers.authorization)), expected)) {
      return false
    }
    if (!route.whileDraining && options.draining()) return false
    const type = request.headers["content-type"]
    if (type === undefined || type.split(";")[0]!.trim().toLowerCase() !== "application/json") return false
    const declared = request.headers["content-length"]
    if (declared === undefined || request.headers["transfer-encoding"] !== undefined) return false
    const bytes = Number(declared)
    return Number.isSafeInteger(bytes) && bytes > 0 && bytes <= options.maxRequestBytes
  }

  /** The route and its match for a request's path, if one takes it; a query (which these routes refuse) is the gate's to answer. */
  const routeOf = (request: http.IncomingMessage): readonly [SocketRoute, string] | undefined => {
    if (request.method !== "POST") return undefined
    const url = request.url ?? ""
    if (url.includes("?")) return undefined
    for (const route of routes) {
      const match = route.path.exec(url)
      if (match !== null) return [route, match[1]!]
    }
    return undefined
  }

  return (request, response) => {
    const found = routeOf(request)
    if (found === undefined || !admits(request, found[0])) return platform(request, response)
    const [route, id] = found
    const budget = options.bodies
    /** Bytes of the budget this body holds: those that have arrived, until the answer. */
    let held = 0
    let busy = false
    const giveBack = () => {
      if (held === 0) return
      budget!.give(held)
      held = 0
    }
    const chunks: Array<Buffer> = []
    const onData = (chunk: Buffer) => {
      if (busy) return
      if (budget !== undefined) {
        if (!budget.take(chunk.length, held)) {
          // Refused as the gate refuses: what it held given back now, the rest read and discarded.
          busy = true
          chunks.length = 0
          return giveBack()
        }
        held += chunk.length
      }
      chunks.push(chunk)
    }
    const detach = () => {
      unregister?.()
      request.off("data", onData)
      request.off("end", onEnd)
      request.off("error", onGone)
      response.off("close", onGone)
    }
    // The drain began while the body arrived: refused at once as the gate refuses it (Middleware.ts,
    // `refuseArrivingBodies`), its bytes given back and the rest left unread; a keyed send goes on.
    const unregister = route.whileDraining || takenWhileDraining("POST", request.url ?? "", request.headers["idempotency-key"]) ? undefined : whileArriving(() => {
      detach()
      chunks.length = 0
      giveBack()
      write(response, toResponse(drainedBody()))
    })
    // The client went away before its body ended: nothing is answered, the bytes are given back.
    const onGone = () => {
      detach()
      giveBack()
    }
    const onEnd = () => {
      detach()
      if (busy) return write(response, toResponse(busyBodies()))
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)
      const parsed = parse(body)
      const answering = parsed === undefined ? undefined : route.take(id, request.headers, parsed)
      if (answering === undefined) {
        // Refused by the gate or by HttpApi, which shape the answer: the body goes to them read,
        // its bytes given back here and counted again by the gate.
        giveBack()
        preRead.set(request, body)
        return platform(request, response)
      }
      answer(answering, response, giveBack)
    }
    request.on("data", onData)
    request.once("end", onEnd)
    request.once("error", onGone)
    response.once("close", onGone)
  }

  /** Runs a route's answer as a fiber and writes what it gives; a client gone interrupts it. */
  function answer(
    answering: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>,
    response: http.ServerResponse,
    giveBack: () => void
  ) {
    const fiber = runFork(Effect.catchAllCause(answering, shapeError))
    const onClose = () => {
      if (!response.writableEnded) fiber.unsafeInterruptAsFork(clientAbortFiberId)
    }
    response.once("close", onClose)
    fiber.addObserver((exit) => {
      giveBack()
      response.off("close", onClose)
      if (response.writableEnded || response.destroyed) return
      if (Exit.isSuccess(exit)) return write(response, exit.value)
      // shapeError answers every failure; what is left is an interruption (the client is gone) or
      // a defect in the shaping itself.
      if (!Cause.isInterruptedOnly(exit.cause)) runFork(Effect.logError("unexpected failure answering a request", exit.cause))
      write(response, toResponse(new Internal({ message: "the server failed to answer; see its log" })))
    })
  }
}

/** The body as the gate would parse it, or undefined where the gate would refuse it. */
const parse = (body: Buffer): unknown => {
  if (!isUtf8(body)) return undefined
  const text = body.toString("utf8")
  const scan = scanJsonText(text)
  if (scan.depth > MAX_JSON_DEPTH) return undefined
  let value: unknown
  try {
    value = JSON.parse(text) as unknown
  } catch {
    return undefined
  }
  // A number beyond a double's range, or a lone surrogate, is the gate's to refuse, naming where it is.
  if (scan.mayOverflow && holdsNonFinite(value)) return undefined
  return maySurrogate(text) && loneSurrogateAt(value) !== undefined ? undefined : value
}

/** Writes a response of the kinds these routes answer (a JSON or text body, or none). */
const write = (response: http.ServerResponse, answer: HttpServerResponse.HttpServerResponse) => {
  const body = answer.body
  switch (body._tag) {
    case "Uint8Array":
      response.writeHead(answer.status, answer.headers)
      response.end(body.body)
      return
    case "Empty":
      response.writeHead(answer.status, answer.headers)
      response.end()
      return
    case "Raw":
      if (typeof body.body === "string" || body.body instanceof Uint8Array) {
        response.writeHead(answer.status, answer.headers)
        response.end(body.body)
        return
      }
  }
  write(response, toResponse(new Internal({ message: `an answer has a ${body._tag} body, which the socket's routes do not write` })))
}

