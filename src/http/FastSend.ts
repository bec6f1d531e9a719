/**
 * The gate's route for sends: `POST /v1/sessions/:id/messages`, the request every turn is, taken
 * past HttpApi's router and its per-request decoding (a route lookup, then three schema decodes as
 * effects) once the gate's checks have passed and its body is parsed. The contract stays in one
 * place:
 *
 * - the path, the headers and the payload are decoded with the route's own schemas (Api.ts), and
 *   the handler is the route's own (`sendMessage`); its refusals are shaped by the gate as any
 *   route's are;
 * - anything this route does not take as it is — a path it does not match exactly (a trailing
 *   slash, an escaped id), a body that does not decode, an empty body — is left to HttpApi, which
 *   answers it as it answers every route, refusals included. So this route only ever answers what
 *   HttpApi would have answered the same way.
 *
 * Why: HttpApi's route for a send (the lookup, the decoding, the request object it reads the body
 * from, its handler's plumbing) took about half a millisecond of main-thread CPU per text turn at
 * 64 sessions, a quarter of the whole turn's, for the request Brain serves most (docs/benchmarks.md,
 * "A route for sends").
 *
 * `sendRoute` (the decoding and the handler) is also what the listener for sends uses
 * (SocketRoutes.ts), which answers most sends before they reach the platform at all; the gate's
 * route takes the ones it passes on that the gate admits (a chunked body, say).
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import type * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Either, Schema } from "effect"
import type { Effect } from "effect"
import { guardedDecode } from "../domain/SchemaGuard.js"
import type { IdempotencyShape } from "../services/Idempotency.js"
import type { SessionsShape } from "../services/Sessions.js"
import { sendMessage } from "./Handlers.js"
import { MessageHeaders, SendMessageRequest, SessionPath } from "./Schemas.js"

/** The send route's path (no query), the session id in its one group. */
export const SEND_PATH = /^\/v1\/sessions\/([^/%]+)\/messages$/

// A path, headers or payload the schema's guard accepts is taken as it is, without the decoder's
// copy (SchemaGuard.ts): at one session each decoder ran cold at every turn, about 15 µs for the
// path and 13 for the headers (docs/benchmarks.md, "One session's keyed turn, stop 65").
const decodePath = guardedDecode(SessionPath)
const checkHeaders = guardedDecode(MessageHeaders)
const decodePayload = guardedDecode(SendMessageRequest)

const has = (o: object, key: string) => Object.prototype.hasOwnProperty.call(o, key)

/**
 * A send's headers as `Schema.decodeUnknownEither(MessageHeaders)` decodes them: its two headers
 * (every other header ignored, as the decoder ignores them), taken as they are when the schema's
 * guard accepts them.
 */
export const decodeSendHeaders = (headers: unknown): Either.Either<typeof MessageHeaders.Type, unknown> => {
  if (typeof headers !== "object" || headers === null || Array.isArray(headers)) return Schema.decodeUnknownEither(MessageHeaders)(headers)
  const h = headers as Record<string, unknown>
  const picked: Record<string, unknown> = {}
  if (has(h, "idempotency-key")) picked["idempotency-key"] = h["idempotency-key"]
  if (has(h, "prefer")) picked.prefer = h.prefer
  return checkHeaders(picked)
}

/** A send's path as `Schema.decodeUnknownEither(SessionPath)` decodes it. */
export const decodeSendPath = (id: string): Either.Either<typeof SessionPath.Type, unknown> => decodePath({ id })

/** A route the gate answers itself: its answer for a request it takes, undefined for one it leaves to HttpApi. */
export type GateRoute = (
  request: HttpServerRequest.HttpServerRequest,
  path: string,
  parsed: unknown
) => Effect.Effect<HttpServerResponse.HttpServerResponse, unknown> | undefined

/**
 * The send route's decoding and handler: its answer for a session id, headers and parsed body it
 * takes as they are, undefined for any that HttpApi would decode otherwise (or refuse).
 */
export const sendRoute = (sessions: SessionsShape, store: IdempotencyShape) => {
  const send = sendMessage(sessions, store)
  return (id: string, headers: unknown, parsed: unknown): Effect.Effect<HttpServerResponse.HttpServerResponse, unknown> | undefined => {
    const decodedPath = decodeSendPath(id)
    if (Either.isLeft(decodedPath)) return undefined
    const payload = decodePayload(parsed)
    if (Either.isLeft(payload)) return undefined
    const decodedHeaders = decodeSendHeaders(headers)
    if (Either.isLeft(decodedHeaders)) return undefined
    return send({ headers: decodedHeaders.right, path: decodedPath.right, payload: payload.right })
  }
}

export const fastSend = (sessions: SessionsShape, store: IdempotencyShape): GateRoute => {
  const route = sendRoute(sessions, store)
  return (request, path, parsed) => {
    if (request.method !== "POST") return undefined
    const match = SEND_PATH.exec(path)
    return match === null ? undefined : route(match[1]!, request.headers, parsed)
  }
}
