/**
 * A listener of its own for health probes (BRAIN_HEALTH_LISTEN), beside the API's.
 *
 * Since libuv 1.45 a listening socket accepts one connection per turn of the event loop, so on
 * the API's listener a probe's connection waits behind every connection queued ahead of it: while
 * hundreds of SSE streams open at once that was one to three seconds, past a kubelet's 1 s
 * timeout (docs/benchmarks.md, "SSE opens and liveness, stop 65"). On a socket of its own a probe
 * queues only behind other probes, and waits for the event loop alone.
 *
 * It answers `GET`/`HEAD` `/health/live` and `/health/ready` exactly as the API's listener does
 * (204; ready 503 `overloaded` while draining or while every API connection is taken), reads no
 * body, needs no token (as `/health/*` never does) and serves nothing else: 404 for another path,
 * 405 with `Allow` for another method, 400/408/431 for a request that cannot be parsed, is slow or
 * too large, all in the API's error bodies.
 *
 * Its connections are few and short, and no client can keep a probe out: past PROBE_CONNECTIONS a
 * new connection is served and the oldest one closed for it (a probe is answered within a turn of
 * its arrival, so the oldest is a silent or idle one), and a connection that has not sent its
 * request's head within PROBE_HEADERS_MS is closed, looked for every PROBE_CHECK_MS.
 */
import * as http from "node:http"
import type * as net from "node:net"
import { type ApiError, InvalidRequest, MethodNotAllowed, NotFound, Overloaded } from "../domain/Errors.js"
import { rawAnswer } from "./Connections.js"
import { bodyOf, refusalHeaders, statusOf, withIssues } from "./Errors.js"

/** Connections the probes' listener holds open at once; past it a new one is closed at once. */
export const PROBE_CONNECTIONS = 64
/** Milliseconds. How long a probe's connection may take to send its request's headers. */
export const PROBE_HEADERS_MS = 5_000
/** Milliseconds. How long a probe's idle keep-alive connection is kept. */
export const PROBE_KEEP_ALIVE_MS = 5_000
/** Bytes. The largest request head a probe may send (a kubelet's is under 300). */
export const PROBE_HEADER_BYTES = 8 * 1024
/** Milliseconds. How often the listener looks for connections past PROBE_HEADERS_MS (Node's own look is every 30 s). */
export const PROBE_CHECK_MS = 500

/** What readiness depends on, as the API's listener sees it. */
export interface ProbeState {
  /** Whether the server has begun to stop. */
  readonly draining: () => boolean
  /** Whether the API's listener holds its maximum of connections (a new client would be put on probation). */
  readonly full: () => boolean
}

const ALLOW = ["GET", "HEAD"]

/** The refusal `ready` answers now, if any: the same messages as the API's listener. */
const notReady = (state: ProbeState): ApiError | undefined =>
  state.draining()
    ? new Overloaded({ message: "the server is draining" })
    : state.full()
    ? new Overloaded({ message: "the server holds its maximum of connections (BRAIN_MAX_CONNECTIONS); try again later" })
    : undefined

const refuse = (response: http.ServerResponse, head: boolean, e: ApiError) => {
  const body = bodyOf(e)
  response.writeHead(statusOf(e.code), {
    ...refusalHeaders(e),
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body)
  })
  response.end(head ? undefined : body)
}

/** The answer to one probe. */
const answer = (state: ProbeState) => (request: http.IncomingMessage, response: http.ServerResponse) => {
  // Whatever body a client sends is read and dropped; none is expected.
  request.resume()
  const path = (request.url ?? "").split("?")[0]!
  // As on the API's listener (RFC 9112 §3.2): an HTTP/1.1 request names its Host.
  if (request.headers.host === undefined && request.httpVersion === "1.1") {
    response.shouldKeepAlive = false
    return refuse(response, request.method === "HEAD", withIssues(new InvalidRequest({ message: "an HTTP/1.1 request must carry a Host header", details: [{ path: ["host"], message: "missing" }] })))
  }
  const live = path === "/health/live"
  if (!live && path !== "/health/ready") {
    return refuse(response, request.method === "HEAD", new NotFound({ message: "this listener serves /health/live and /health/ready only" }))
  }
  if (request.method !== "GET" && request.method !== "HEAD") {
    return refuse(
      response,
      false,
      new MethodNotAllowed({ message: `this path takes GET, HEAD, not ${request.method}`, details: { allow: ALLOW } })
    )
  }
  const refusal = live ? undefined : notReady(state)
  if (refusal !== undefined) return refuse(response, request.method === "HEAD", refusal)
  response.writeHead(204)
  response.end()
}

/** A request that cannot be parsed, arrives too slowly or is too large, refused in Brain's error body and its connection closed. */
const onClientError = (err: NodeJS.ErrnoException, socket: net.Socket) => {
  if (!socket.writable || (socket as { readonly _httpMessage?: unknown })._httpMessage != null) return socket.destroy()
  const answer = err.code === "ERR_HTTP_REQUEST_TIMEOUT"
    ? rawAnswer(408, "Request Timeout", `the request's head did not arrive in time (PROBE_HEADERS_MS: ${PROBE_HEADERS_MS} ms)`, true)
    : err.code === "HPE_HEADER_OVERFLOW"
    ? rawAnswer(431, "Request Header Fields Too Large", `the request's head is larger than ${PROBE_HEADER_BYTES} bytes`, false)
    : rawAnswer(400, "Bad Request", `the request could not be parsed (${err.code ?? "bad request"})`, false)
  socket.end(answer)
  socket.destroySoon()
}

/** The probes' server, not yet listening. */
export const probeServer = (state: ProbeState): http.Server => {
  const server = http.createServer(
    { maxHeaderSize: PROBE_HEADER_BYTES, requestTimeout: PROBE_HEADERS_MS, connectionsCheckingInterval: PROBE_CHECK_MS, requireHostHeader: false },
    answer(state)
  )
  server.headersTimeout = PROBE_HEADERS_MS
  server.keepAliveTimeout = PROBE_KEEP_ALIVE_MS
  server.on("clientError", onClientError)
  // Oldest first: past the bound the oldest gives way to the newcomer, which is served.
  const open = new Set<net.Socket>()
  server.on("connection", (socket: net.Socket) => {
    open.add(socket)
    socket.once("close", () => open.delete(socket))
    if (open.size > PROBE_CONNECTIONS) {
      const oldest = open.values().next().value!
      open.delete(oldest)
      oldest.destroy()
    }
  })
  return server
}
