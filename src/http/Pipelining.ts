/**
 * Pipelined requests on one keep-alive connection, as the listener hands them to the application.
 *
 * - Requests pipelined on one connection are handed to the application one after another
 *   (`oneAtATime`): each only once every answer before it on the connection is written, so a
 *   request sees the effects of the ones before it (RFC 9112 §9.3.2 lets a server work on
 *   pipelined requests at once only when all are safe; handling all in turn is the simple rule,
 *   and real clients seldom pipeline). A request waiting so is not read: Node buffers its body up
 *   to the socket's high-water mark, then stops reading the connection until it is handed over.
 *   Its request timeout counts from its handover, not from its first byte (the time it waited is
 *   the server's, not its client's). Each waiting request counts HELD_REQUEST_BYTES in Node's
 *   measure of a connection's unwritten answers, so a client pipelining a flood behind a long
 *   answer is no longer read, as one that does not read its answers is. A connection lost (reset,
 *   closed by a timer) while requests wait drops them: they were never begun; a half-close does
 *   not (Connections.ts). Behind an SSE stream, which never ends while its client reads it, a
 *   pipelined request waits for ever (as its answer would anyway).
 * - An absolute-form target (`POST http://host/v1/…`, RFC 9112 §3.2.2) is routed by its path and query.
 */
import type * as http from "node:http"

/**
 * Bytes. What a request waiting for the answers before it on its connection counts in Node's
 * measure of the connection's unwritten answers (oneAtATime): past the socket's high-water mark
 * (16 KiB, so about 16 waiting requests) Node stops reading the connection until they are served,
 * so a client cannot queue requests without bound behind a long answer.
 */
export const HELD_REQUEST_BYTES = 1_024

type Listener = (request: http.IncomingMessage, response: http.ServerResponse) => void

/** What Node keeps on a response (not in its types): its share of the connection's unwritten answers. */
interface PendingData {
  readonly _onPendingData?: (delta: number) => void
}

/**
 * Requests that waited for the answers before them on their connection: when each was handed
 * over (undefined while it waits), and the request timeout to count from then when Node's fired
 * while it waited.
 */
const waited = new WeakMap<http.IncomingMessage, { handedAt?: number; owed?: () => void }>()

/**
 * Whether a request timeout Node reports for `incoming` (its body not all arrived) is not yet its
 * own: it waited for the answers before it, unread (oneAtATime), and has not had `timeoutMs` since
 * it was handed over. Then `fire` is called when it has (if its body is still arriving by then).
 */
export const deferTimeout = (incoming: http.IncomingMessage, timeoutMs: number, fire: () => void): boolean => {
  const wait = waited.get(incoming)
  if (wait === undefined) return false
  if (wait.handedAt === undefined) {
    wait.owed = fire
    return true
  }
  const left = wait.handedAt + timeoutMs - Date.now()
  if (left <= 0) return false
  const timer = setTimeout(() => {
    if (!incoming.complete) fire()
  }, left)
  timer.unref()
  const clear = () => clearTimeout(timer)
  incoming.once("end", clear)
  incoming.once("close", clear)
  return true
}

/** The target's origin form: an absolute-form target (`http://host/path?query`, RFC 9112 §3.2.2) without its scheme and authority. */
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/
export const originForm = (target: string): string => {
  const authority = ABSOLUTE_FORM.exec(target)
  if (authority === null) return target
  const rest = target.slice(authority[0].length)
  return rest.startsWith("/") ? rest : `/${rest}`
}

/**
 * Hands the requests of each connection to `listener` one after another: a request pipelined
 * behind others is handed over when its response gets the socket, which Node gives it once every
 * answer before it is written (a response waits behind the one in front of it). Until then it is
 * not read (its body stays in Node's buffer and the socket), it counts HELD_REQUEST_BYTES against
 * the connection's reading, and its request timeout waits (deferTimeout). An absolute-form target
 * is made the origin form it names, before either route looks at it.
 */
export const oneAtATime = (listener: Listener): Listener => (request, response) => {
  const target = request.url
  if (target !== undefined && target.charCodeAt(0) !== 47 /* "/" */ && target !== "*") request.url = originForm(target)
  if (response.socket != null) return listener(request, response)
  const wait: { handedAt?: number; owed?: () => void } = {}
  waited.set(request, wait)
  const pending = (response as unknown as PendingData)._onPendingData
  pending?.call(response, HELD_REQUEST_BYTES)
  response.once("socket", () => {
    pending?.call(response, -HELD_REQUEST_BYTES)
    wait.handedAt = Date.now()
    listener(request, response)
    const owed = wait.owed
    if (owed !== undefined && !request.complete) deferTimeout(request, requestTimeoutOf(response), owed)
  })
}

/** The request timeout of the server a response is answered on (its `requestTimeout`, set by guardConnections). */
const requestTimeoutOf = (response: http.ServerResponse) =>
  (response.socket as unknown as { server?: { requestTimeout?: number } } | null)?.server?.requestTimeout ?? 0
