/**
 * The listener's own limits: how many connections it holds, how long one may take to send its
 * headers, and what a client hears when a request cannot even be parsed.
 *
 * - At most `maxConnections` connections are served. Past it, a few more (OVERFLOW_CONNECTIONS)
 *   are accepted on probation: each has OVERFLOW_WAIT_MS to send a request; `/health/*` is
 *   answered, anything else gets 503 `overloaded`, and the connection is closed. When every
 *   probation slot is taken, the oldest probationer (most likely a silent one) is dropped to make
 *   room for the newcomer: a flood of silent connections never holds more than its share of
 *   descriptors, and a health check or a new client always gets an answer.
 * - A connection that has not sent its headers within `headersTimeoutMs` is answered 408 and
 *   closed; so is a request whose body has not all arrived within `requestTimeoutMs` of the
 *   request's first byte, whatever reads it (Node checks every TIMEOUT_CHECK_MS, so the 408
 *   comes at most that much after the bound). With bodies
 *   charged to the body budget as they arrive (BodyRead.ts), a slow body holds only what it has
 *   sent, and this bounds how long it holds that and its connection.
 * - Requests Node refuses before routing get Brain's error body: 431 for headers too large,
 *   408 for headers or a body too slow (saying which), 405 (with the path's `Allow`) or 404 for a
 *   method Node's parser does not know (`FOO`, `post`), 400 for anything else unparsable, 417 for an
 *   `Expect` other than `100-continue`, 405 for CONNECT (this server is no proxy). A request
 *   without `Host` is the gate's to refuse (Middleware.ts), in the same body.
 * - Bytes that cannot be parsed after requests that arrived whole (a body Node's client does not
 *   frame, as on a DELETE; junk after a pipelined request) are refused only after those requests'
 *   answers, each in its order, never in place of one: the request ran (a turn, a delete), and an
 *   unkeyed client has no other way to learn it did. Then the 400 is written and the connection
 *   closed. An SSE stream runs to its end first; nothing is ever written inside it. Bytes that
 *   break the request being read (a bad chunk in its body) are that request's answer, at once.
 * - Requests pipelined on one connection are handed over one after another, and an absolute-form
 *   target routed by its path (Pipelining.ts); a waiting request's timeout is deferred here
 *   (`deferTimeout`) until it is handed over.
 * - Headers are bounded by their size (Node's 16 KiB), not by a count: Node would otherwise drop
 *   the headers past its 2,000th without a word.
 * - `Expect: 100-continue` is answered `100 Continue` only once the request's body is read: a
 *   request refused as it stands (a declared length over the limit, a missing token, a draining
 *   server) is answered before its client sends the body, and its connection closed (the client
 *   sends no body to read past).
 * - A client that closes its side after a request that changes something (a half-close: `nc -N`,
 *   some proxies) still gets its answer, and the ones after it; the connection closes after the
 *   last. Its turn ran: dropping the answer left an unkeyed client no way to learn the outcome. A
 *   read in flight (GET, HEAD) is abandoned as Node abandons every request, as a client gone: it
 *   is asked again at no cost, and an SSE stream, which waits for its reader for ever, or a page
 *   still waiting its turn, must not hold its connection and its place for a client that left.
 * - A connection closed after an answer given before its request's body was read (a 413 for a
 *   declared length over the bound, …) lingers: what its client still sends is discarded while
 *   the client makes progress, within LINGER_IDLE_MS of silence, LINGER_MAX_MS and LINGER_BYTES
 *   (lingerOnClose), so that the close does not reset the connection under the answer. It is
 *   still a connection, counted against `maxConnections`, and the first to go when a new one
 *   arrives at the bound: a flood of refused uploads holds no more descriptors than the bound, and
 *   never keeps a new client out.
 * - A connection whose socket holds bytes of an answer its client takes none of for
 *   `responseStallMs` is closed, and the bytes let go: otherwise a client that never reads holds
 *   its whole answer (an 8 MiB page, a transcript) for as long as it stays connected. SSE streams
 *   have bounds of their own (Tap.ts) and are left to them. An idle keep-alive connection is kept
 *   `keepAliveTimeoutMs` (Node keeps it NODE_KEEP_ALIVE_BUFFER_MS past its own setting, so that is
 *   set that much lower), and its answers tell clients a whole second less (`Keep-Alive: timeout=`,
 *   rounded down), so that they stop reusing it before the server closes it.
 * - Each connection one of these timers closes is told, with the timer (ClosedBy) and the client's
 *   address, to the guard's `closed` callback (the server logs it): a client cut for its silence
 *   is told apart from one cut at a cap, by the operator and by the tests, without a stopwatch.
 */
import type * as http from "node:http"
import type * as net from "node:net"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import { type ApiError, InvalidRequest, MethodNotAllowed, NotFound, Unauthorized } from "../domain/Errors.js"
import { LINGER_BYTES, LINGER_IDLE_MS, LINGER_MAX_MS } from "../domain/Limits.js"
import type { ServerConfigShape } from "../services/ServerConfig.js"
import { bodyOf, withIssues } from "./Errors.js"
import { methodsOf } from "./Methods.js"
import { deferTimeout, originForm } from "./Pipelining.js"
import { bearerToken, digest } from "./Tokens.js"

/** Connections. Accepted past the limit on probation, so that health checks still get in. */
export const OVERFLOW_CONNECTIONS = 64
/** Milliseconds. How long a probationary connection may take to send its request. */
export const OVERFLOW_WAIT_MS = 2_000
/** Milliseconds. How often the response stall is looked for (closeStalled), at most. */
export const CONNECTION_CHECK_MS = 1_000
/**
 * Milliseconds. How often Node checks connections for the headers and request timeouts (its
 * `connectionsCheckingInterval`): a late request's 408 comes at most this much after its bound.
 * Node walks only the connections with a request under way; 1,000 of them checked this often cost
 * no CPU measurable beside checking every second.
 */
export const TIMEOUT_CHECK_MS = 100
/**
 * Milliseconds. What Node (20) adds to `keepAliveTimeout` before it closes an idle connection, so
 * that a client told `Keep-Alive: timeout=` (that setting, in whole seconds) stops reusing the
 * connection before the server closes it.
 */
export const NODE_KEEP_ALIVE_BUFFER_MS = 1_000
/** Descriptors. Kept for everything but connections and journal files (stdio, logs, directories, checkpoints). */
export const FD_RESERVE = 128

/**
 * Which of the listener's timers closed a connection: the headers' or the whole request's
 * timeout, the idle keep-alive, an answer its client took none of (responseStallMs), a
 * probationer's wait (OVERFLOW_WAIT_MS), and a lingering close's silence, cap or bytes
 * (lingerOnClose).
 */
export type ClosedBy =
  | "headers_timeout"
  | "request_timeout"
  | "keep_alive"
  | "response_stall"
  | "probation"
  | "linger_silence"
  | "linger_cap"
  | "linger_bytes"

/** Why each timer closes a connection, in words naming its setting (the server's log line). */
export const CLOSED_BY: Readonly<Record<ClosedBy, string>> = {
  headers_timeout: "its headers did not arrive within BRAIN_HEADERS_TIMEOUT_MS",
  request_timeout: "its request did not arrive whole within BRAIN_REQUEST_TIMEOUT_MS",
  keep_alive: "idle for BRAIN_KEEP_ALIVE_TIMEOUT_MS",
  response_stall: "its client took none of its answer for BRAIN_RESPONSE_STALL_MS",
  probation: `accepted past BRAIN_MAX_CONNECTIONS, it sent no request within ${OVERFLOW_WAIT_MS} ms`,
  linger_silence: `lingering after an early refusal, its client sent nothing for LINGER_IDLE_MS (${LINGER_IDLE_MS} ms)`,
  linger_cap: `lingering after an early refusal for LINGER_MAX_MS (${LINGER_MAX_MS} ms)`,
  linger_bytes: `lingering after an early refusal, its client sent LINGER_BYTES (${LINGER_BYTES} bytes)`
}

/** A connection a timer closed, and its client's address (`host:port`, as the client sees its own end). */
export interface ConnectionClosed {
  readonly by: ClosedBy
  readonly peer: string
}

/** Where each guarded socket's closes by a timer are told (guardConnections' `closed`). */
const reporters = new WeakMap<net.Socket, (closed: ConnectionClosed) => void>()

/** Tells the socket's guard that `by` closes it; called before the close, while its address is still known. */
const closing = (socket: net.Socket, by: ClosedBy): void => {
  reporters.get(socket)?.({ by, peer: `${socket.remoteAddress}:${socket.remotePort}` })
}

/**
 * The settings the guard holds connections to, as ServerConfig describes them (`maxConnections`
 * as fitted to the open-file limit, main.ts).
 */
export type ConnectionLimits = Pick<
  ServerConfigShape,
  "maxConnections" | "headersTimeoutMs" | "requestTimeoutMs" | "keepAliveTimeoutMs" | "responseStallMs"
>

/** The process's open-file limit (soft), where the platform says; undefined elsewhere. */
export const openFileLimit = (): number | undefined => {
  try {
    const line = fs.readFileSync("/proc/self/limits", "utf8").split("\n").find((l) => l.startsWith("Max open files"))
    const soft = line?.split(/\s{2,}/)[1]
    return soft === undefined || soft === "unlimited" ? undefined : Number(soft)
  } catch {
    return undefined
  }
}

/**
 * Connections and journal write descriptors that fit the open-file limit: each gets at most half
 * of what the reserve and the probation slots leave, and never more than its own setting.
 */
export const fitToFileLimit = (wanted: { readonly connections: number; readonly journalFiles: number }, limit = openFileLimit()) => {
  if (limit === undefined) return wanted
  const share = Math.max(16, Math.floor((limit - FD_RESERVE - OVERFLOW_CONNECTIONS) / 2))
  return { connections: Math.min(wanted.connections, share), journalFiles: Math.min(wanted.journalFiles, share) }
}

/** A refusal written straight to the socket in Brain's error body (docs/api.md, Errors); the connection closes after it. */
const rawRefusal = (status: number, reason: string, refusal: ApiError, headers = "") => {
  const body = bodyOf(withIssues(refusal))
  return `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${headers}connection: close\r\n\r\n${body}`
}

/** An `invalid_request`, its issue the request as a whole, written straight to the socket. */
export const rawAnswer = (status: number, reason: string, message: string, retryable: boolean) =>
  rawRefusal(status, reason, new InvalidRequest({ message, retryable }))

/**
 * What Node keeps on a socket (not in its types): the request being parsed, once its headers
 * have arrived (`complete` once its body has too), and the response being answered (its request
 * in `req`); the responses to later pipelined requests wait behind it, each put here in turn as
 * the one before finishes.
 */
interface SocketState {
  readonly parser?: { readonly incoming?: { readonly complete: boolean } | null } | null
  readonly _httpMessage?: PendingResponse | null
}

/** A response Node is answering on a socket (not in its types: `req`). */
interface PendingResponse {
  readonly headersSent: boolean
  readonly req?: { readonly complete: boolean }
  once(event: "finish", listener: () => void): unknown
}

/** Sockets whose client sent bytes Node could not parse: refused once, after the answers owed on them. */
const refusing = new WeakSet<net.Socket>()

/**
 * Writes `answer` (a refusal of bytes that could not be parsed) once every answer owed on the
 * socket before it is written, then closes the connection. A response whose request the bytes
 * broke (its body was still being read) and that has not begun gets the refusal in its place.
 * Node answers the requests of a connection one at a time, in order; a response that finishes
 * hands the socket to the next (its `finish` listener, registered before this one, does), or
 * closes it when it was the connection's last (then there is nothing more to say).
 */
const refuseAfterPending = (socket: net.Socket, answer: string): void => {
  if (!socket.writable) return
  const pending = (socket as SocketState)._httpMessage
  if (pending == null || (pending.req?.complete === false && !pending.headersSent)) {
    socket.end(answer)
    return
  }
  pending.once("finish", () => refuseAfterPending(socket, answer))
}

/**
 * Sockets closing after their last answer, reading and discarding what their clients still send
 * (lingerOnClose), oldest first: each is still one of its server's connections, and the first to
 * give way to a new one at the connection bound (guardConnections).
 */
const lingering = new Set<net.Socket>()

/**
 * Makes the close that follows the socket's last answer a lingering one. A connection closed with
 * bytes of a request body unread is reset by the kernel, and the reset can reach the client before
 * it has read the answer (a client that uploads before it reads finds only EPIPE or ECONNRESET):
 * so once the answer is sent, HTTP stops reading the connection (the bytes are no request), and
 * what still arrives is discarded for as long as the client makes progress. The socket is closed
 * when the client closes its side, once it has been silent for LINGER_IDLE_MS (each chunk gives it
 * that long again), or at the latest after LINGER_MAX_MS or LINGER_BYTES, whatever it still sends:
 * a slow upload's client reads its answer, and a client dribbling bytes cannot hold the socket for
 * ever. Node closes a connection after its last answer with `destroySoon`, replaced here for this
 * socket alone.
 */
export const lingerOnClose = (socket: net.Socket): void => {
  ;(socket as { destroySoon: () => void }).destroySoon = () => linger(socket)
}

const linger = (socket: net.Socket): void => {
  if (socket.destroyed) return
  lingering.add(socket)
  let discarded = 0
  /** Closes the socket; `by`, the timer that does, when one does (not the client's own close). */
  const close = (by?: ClosedBy) => {
    clearTimeout(silence)
    clearTimeout(cap)
    if (by !== undefined && !socket.destroyed) closing(socket, by)
    socket.destroy()
  }
  // The answer's bytes go out before the socket is let go, unless the whole wait is over.
  const closeOnceSent = (by?: ClosedBy) => {
    if (socket.writableFinished) close(by)
    else socket.once("finish", () => close(by))
  }
  const silence = setTimeout(() => close("linger_silence"), LINGER_IDLE_MS)
  silence.unref()
  const cap = setTimeout(() => close("linger_cap"), LINGER_MAX_MS)
  cap.unref()
  const discard = (chunk: Buffer) => {
    discarded += chunk.length
    if (discarded <= LINGER_BYTES) {
      // Progress: the client has LINGER_IDLE_MS again from now (within the cap).
      silence.refresh()
      return
    }
    socket.off("data", discard)
    socket.pause()
    closeOnceSent("linger_bytes")
  }
  // Adding a `data` listener takes the socket from Node's parser (it reads through them then);
  // Node's own are removed, so nothing after the answer is parsed as a request.
  socket.on("data", discard)
  for (const listener of socket.listeners("data")) if (listener !== discard) socket.off("data", listener as (chunk: Buffer) => void)
  socket.once("end", () => closeOnceSent())
  socket.once("close", () => {
    clearTimeout(silence)
    clearTimeout(cap)
    lingering.delete(socket)
  })
  socket.end()
  socket.resume()
  readAgain(socket)
}

/** What Node keeps on a socket's handle (not in its types): whether libuv reads it, and how to make it. */
interface ReadingHandle {
  reading?: boolean
  readStart?: () => number
}

/**
 * Starts the socket's handle reading again. Node's parser stops it (at the handle, behind the
 * stream's back) when a request's body is not taken, as an early refusal's is not, and `resume`
 * alone does not start it again: the bytes would stay unread in the kernel, and the close reset.
 */
const readAgain = (socket: net.Socket) => {
  const handle = (socket as { _handle?: ReadingHandle | null })._handle
  if (handle == null || handle.reading !== false || handle.readStart === undefined) return
  handle.reading = true
  handle.readStart()
}

/** The oldest of `sockets` that lingers (lingerOnClose), if any. */
const oldestLingering = (sockets: ReadonlySet<net.Socket>): net.Socket | undefined => {
  for (const socket of lingering) if (sockets.has(socket)) return socket
  return undefined
}


/** The request line at the byte where Node's parser stopped (its method and target, and the request's Authorization) when it is one. */
const REQUEST_LINE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP\/1\.[01]\r?$/
/** Its `Authorization` header, as far as the bytes Node had hold it. */
const AUTHORIZATION = /^authorization:[ \t]*(.*?)[ \t]*\r?$/im
const requestLineAt = (err: NodeJS.ErrnoException): { method: string; target: string; authorization: string | undefined } | undefined => {
  const { rawPacket, bytesParsed } = err as { rawPacket?: unknown; bytesParsed?: unknown }
  if (!Buffer.isBuffer(rawPacket) || typeof bytesParsed !== "number") return undefined
  // (Buffer's lastIndexOf counts a negative offset from the end.)
  const start = bytesParsed > 0 ? rawPacket.lastIndexOf(10, bytesParsed - 1) + 1 : 0
  const end = rawPacket.indexOf(10, start)
  const line = REQUEST_LINE.exec(rawPacket.toString("latin1", start, end < 0 ? rawPacket.length : end))
  if (line === null) return undefined
  const headersEnd = end < 0 ? -1 : rawPacket.indexOf("\r\n\r\n", end)
  const headers = end < 0 ? "" : rawPacket.toString("latin1", end + 1, headersEnd < 0 ? rawPacket.length : headersEnd)
  return { method: line[1]!, target: line[2]!, authorization: AUTHORIZATION.exec(headers)?.[1] }
}

/**
 * The answer to a request whose method Node's parser does not know (`FOO`, `post`: methods are
 * case-sensitive), as the gate answers a method a path does not take: 405 with the path's
 * `Allow`, or 404 for a path no route has; with an API token (`expected`, its digest), 401 first
 * to a request without it, so that nothing of the API is told to a caller without the token.
 * Undefined when the bytes are no request line.
 */
const unknownMethod = (err: NodeJS.ErrnoException, expected: Buffer | undefined): string | undefined => {
  const line = requestLineAt(err)
  if (line === undefined) return undefined
  const { method, target } = line
  if (expected !== undefined && !crypto.timingSafeEqual(digest(bearerToken(line.authorization)), expected)) {
    const refusal = new Unauthorized({ message: "a valid `Authorization: Bearer <token>` is required" })
    return rawRefusal(401, "Unauthorized", refusal, "www-authenticate: Bearer realm=\"brain\"\r\n")
  }
  const methods = methodsOf(originForm(target).split("?")[0]!)
  if (methods === undefined) return rawRefusal(404, "Not Found", new NotFound({ message: "no such route" }))
  const refusal = new MethodNotAllowed({ message: `this path takes ${methods.join(", ")}, not ${method}`, details: { allow: [...methods] } })
  return rawRefusal(405, "Method Not Allowed", refusal, `allow: ${methods.join(", ")}\r\n`)
}

/** Answers a request Node could not parse, or that did not arrive in time, in Brain's error shape. */
const onClientError = (limits: ConnectionLimits, expected?: Buffer) => (err: NodeJS.ErrnoException, socket: net.Socket) => {
  // A lingering close (lingerOnClose) ends the connection on its own bounds: nothing more is said.
  if (lingering.has(socket)) return
  // Node reports the parser's error again for every chunk that follows: the refusal is written once.
  if (refusing.has(socket)) return
  if (!socket.writable) return socket.destroy()
  if (err.code === "ERR_HTTP_REQUEST_TIMEOUT") {
    const state = socket as SocketState
    const incoming = state.parser?.incoming
    const bodyPending = incoming?.complete === false
    // A request that waited behind others on its connection counts its time from its handover.
    if (bodyPending && deferTimeout(incoming as http.IncomingMessage, limits.requestTimeoutMs, () => onClientError(limits, expected)(err, socket))) return
    // A body still arriving after its request was answered (or while its answer is being
    // written): nothing more may be said on the connection, it is only closed.
    closing(socket, bodyPending ? "request_timeout" : "headers_timeout")
    if (bodyPending && (state._httpMessage ?? undefined)?.headersSent !== false) return socket.destroy()
    const answer = bodyPending
      ? rawAnswer(408, "Request Timeout", `the request's body did not arrive in time (BRAIN_REQUEST_TIMEOUT_MS: the whole request within ${limits.requestTimeoutMs} ms of its first byte)`, true)
      : rawAnswer(408, "Request Timeout", `the request's headers did not arrive in time (BRAIN_HEADERS_TIMEOUT_MS: ${limits.headersTimeoutMs} ms)`, true)
    // Closed once the answer is written, whatever the client goes on sending.
    socket.write(answer)
    return socket.destroySoon()
  }
  const answer = err.code === "HPE_HEADER_OVERFLOW"
    ? rawAnswer(431, "Request Header Fields Too Large", "the request's headers are too large", false)
    : (err.code === "HPE_INVALID_METHOD" ? unknownMethod(err, expected) : undefined) ??
      rawAnswer(400, "Bad Request", `the request could not be parsed (${err.code ?? "bad request"})`, false)
  refusing.add(socket)
  refuseAfterPending(socket, answer)
}

/** Answers an `Expect` other than `100-continue` (RFC 9110 §10.1.1: 417), where Node would answer with no body. */
const onUnknownExpectation = (request: http.IncomingMessage, response: http.ServerResponse) => {
  const message = `the Expect header ${JSON.stringify(request.headers.expect ?? "")} is not understood: only 100-continue is`
  const body = bodyOf(withIssues(new InvalidRequest({ message, details: [{ path: ["expect"], message }] })))
  response.shouldKeepAlive = false
  response.writeHead(417, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  response.end(body)
}

/**
 * `listener`, whose answers close their connections once `closing` says so (a stop has begun:
 * ConnectionGuard's `closeAfterAnswers`): a request handed over after that is answered with
 * `Connection: close`.
 */
export const closingWhen = (closing: () => boolean, listener: (request: http.IncomingMessage, response: http.ServerResponse) => void) =>
(request: http.IncomingMessage, response: http.ServerResponse) => {
  if (closing()) response.shouldKeepAlive = false
  listener(request, response)
}

/** Answers CONNECT, which Node would meet by closing the connection in silence: this server is no proxy. */
const onConnect = (_request: http.IncomingMessage, socket: net.Socket) => {
  const refusal = new MethodNotAllowed({ message: "CONNECT is not served: this server is no proxy", details: { allow: [] } })
  socket.end(rawRefusal(405, "Method Not Allowed", refusal, "allow: \r\n"))
}

/** Node's `IncomingMessage._read`, which every way of reading a request's body goes through. */
type ReadBody = (this: http.IncomingMessage, size: number) => void

/**
 * Passes a request with `Expect: 100-continue` on to the `request` listeners, and answers
 * `100 Continue` only when its body is first read. A final answer that comes first (a refusal as
 * the request stands) closes the connection: the client, told before it sent the body, sends none
 * to read past. A request that declares no body is passed on as it is.
 */
const continueOnRead = (server: http.Server, closing: () => boolean) => (request: http.IncomingMessage, response: http.ServerResponse) => {
  const declared = request.headers["content-length"]
  if ((declared !== undefined && declared !== "0") || request.headers["transfer-encoding"] !== undefined) {
    const keepAlive = response.shouldKeepAlive
    response.shouldKeepAlive = false
    const target = request as unknown as { _read: ReadBody }
    const read = target._read
    target._read = function(size) {
      delete (target as { _read?: ReadBody })._read
      if (!response.headersSent) {
        response.shouldKeepAlive = keepAlive && !closing()
        response.writeContinue()
      }
      read.call(this, size)
    }
  }
  server.emit("request", request, response)
}

/** What Node keeps on a socket (not in its types): libuv's queue of bytes not yet taken by the kernel, and the response being written. */
interface SocketInternals {
  readonly _handle?: { readonly writeQueueSize?: number } | null
  readonly _httpMessage?: { readonly _header?: string | null; readonly req?: { readonly method?: string } } | null
}

/**
 * The client closed its side (Node, told to allow it, has marked the answer in flight as the
 * connection's last): a read in flight is abandoned, the connection closed.
 */
const onClientEnd = (socket: net.Socket) => () => {
  const method = (socket as SocketInternals)._httpMessage?.req?.method
  if (method === "GET" || method === "HEAD") socket.destroy()
}

/** Bytes of answers a socket holds that the kernel has not taken (Node's buffer and libuv's queue; a write in flight counts in both). */
const unsentBytes = (socket: net.Socket) => socket.writableLength + ((socket as SocketInternals)._handle?.writeQueueSize ?? 0)

/** Whether the socket is writing an SSE stream, whose stalls its own bounds handle (Tap.ts). */
const streaming = (socket: net.Socket) => /\r\ncontent-type: *text\/event-stream/i.test((socket as SocketInternals)._httpMessage?._header ?? "")

/**
 * Closes the connections whose sockets have held bytes of an answer for `stallMs` while the
 * kernel took none of them (their clients read nothing). Looked at every quarter of `stallMs`
 * (at most every CONNECTION_CHECK_MS): a socket's unsent bytes that shrank since the last look
 * count as progress. Answers a stop function.
 */
const closeStalled = (sockets: ReadonlySet<net.Socket>, stallMs: number) => {
  const watched = new Map<net.Socket, { unsent: number; since: number }>()
  const look = () => {
    const now = Date.now()
    for (const [socket] of watched) if (!sockets.has(socket)) watched.delete(socket)
    for (const socket of sockets) {
      const unsent = unsentBytes(socket)
      if (unsent === 0 || streaming(socket)) {
        watched.delete(socket)
        continue
      }
      const seen = watched.get(socket)
      if (seen === undefined || unsent < seen.unsent) watched.set(socket, { unsent, since: now })
      else if (now - seen.since >= stallMs) {
        watched.delete(socket)
        closing(socket, "response_stall")
        socket.destroy()
      } else seen.unsent = unsent
    }
  }
  const timer = setInterval(look, Math.max(10, Math.min(CONNECTION_CHECK_MS, Math.floor(stallMs / 4))))
  timer.unref()
  return () => clearInterval(timer)
}

export interface ConnectionGuard {
  /** Whether a request arrived on a connection accepted past the limit (only health is served there). */
  readonly onProbation: (socket: net.Socket) => boolean
  /** Connections open now. */
  readonly open: () => number
  /** Whether every connection is taken: a new one would be accepted on probation (`/health/ready` is 503 then). */
  readonly full: () => boolean
  /**
   * From now on every answer closes its connection (`Connection: close`): the answers not yet
   * begun, and those of requests handed over later (`closesAfterAnswer`). A stop calls it as it
   * begins, so that no keep-alive client sends another request on a connection the stop is about
   * to close (which it would see reset, not knowing whether its request was taken).
   */
  readonly closeAfterAnswers: () => void
  /** Whether `closeAfterAnswers` was called. */
  readonly closingAfterAnswers: () => boolean
  /** Whether any connection holds response bytes its socket has not yet handed to the kernel (a slow reader). */
  readonly writing: () => boolean
  /**
   * Closes the connections that have not sent a byte (a client's spare connection, opened ahead
   * of a request it never made); answers how many. Node counts such a connection busy, not idle,
   * from its first moment (so that a client cannot hold one open by sending nothing), so
   * `closeIdleConnections` leaves it, and a stop would wait its whole grace for a request that
   * never comes. A connection accepted less than `graceMs` ago is left for now: its request may be
   * on its way (a client that was told `Connection: close` reconnects at once), and closing it
   * would reset it unanswered.
   */
  readonly closeUnused: (graceMs: number) => number
}

/**
 * Applies the limits to a server before it listens; `closed` is told of each connection one of
 * its timers closes (ClosedBy), as it closes.
 */
export const guardConnections = (
  server: http.Server,
  limits: ConnectionLimits & { readonly apiToken?: string | undefined },
  closed: (closed: ConnectionClosed) => void = () => undefined
): ConnectionGuard => {
  // Node counts both from the request's first byte; the headers' bound is the tighter one.
  const timeouts = { ...limits, requestTimeoutMs: Math.max(limits.requestTimeoutMs, limits.headersTimeoutMs) }
  server.headersTimeout = timeouts.headersTimeoutMs
  server.requestTimeout = timeouts.requestTimeoutMs
  // Closed at `keepAliveTimeoutMs` (at least 2 s, ServerConfig): Node adds its buffer back.
  server.keepAliveTimeout = Math.max(1, limits.keepAliveTimeoutMs - NODE_KEEP_ALIVE_BUFFER_MS)
  // Bounded by the headers' size (maxHeaderSize) instead, so none is dropped without a word.
  server.maxHeadersCount = 0
  // The gate refuses a request without Host in Brain's body; Node's own refusal has none.
  ;(server as { requireHostHeader?: boolean }).requireHostHeader = false
  // A half-closed client still gets the answer to a request that changed something (onClientEnd).
  ;(server as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true
  server.on("clientError", onClientError(timeouts, limits.apiToken === undefined ? undefined : digest(limits.apiToken)))
  server.on("checkExpectation", onUnknownExpectation)
  /** Whether every answer from now on closes its connection (closeAfterAnswers). */
  let closingAll = false
  /** When each connection was accepted (performance.now()). */
  const acceptedAt = new WeakMap<net.Socket, number>()
  server.on("checkContinue", continueOnRead(server, () => closingAll))
  server.on("connect", onConnect)
  // The only socket timeout the server sets is the idle keep-alive's (no request or response sets
  // one): Node destroys the socket itself only when no one listens for it, so this listener does.
  server.on("timeout", (socket: net.Socket) => {
    closing(socket, "keep_alive")
    socket.destroy()
  })
  const sockets = new Set<net.Socket>()
  if (limits.responseStallMs > 0) server.once("close", closeStalled(sockets, limits.responseStallMs))
  /** Sockets on probation, oldest first. */
  const probation = new Set<net.Socket>()
  server.on("connection", (socket: net.Socket) => {
    sockets.add(socket)
    acceptedAt.set(socket, performance.now())
    reporters.set(socket, closed)
    socket.once("end", onClientEnd(socket))
    socket.once("close", () => {
      sockets.delete(socket)
      probation.delete(socket)
    })
    const open = sockets.size
    if (open - probation.size <= limits.maxConnections) return
    // A lingering close serves no request: it gives way to the newcomer, which is then served.
    const idle = oldestLingering(sockets)
    if (idle !== undefined) {
      sockets.delete(idle)
      probation.delete(idle)
      idle.destroy()
      return
    }
    if (probation.size >= OVERFLOW_CONNECTIONS) {
      const oldest = probation.values().next().value!
      probation.delete(oldest)
      oldest.destroy()
    }
    probation.add(socket)
    const timer = setTimeout(() => {
      closing(socket, "probation")
      socket.destroy()
    }, OVERFLOW_WAIT_MS)
    timer.unref()
    socket.once("close", () => clearTimeout(timer))
  })
  return {
    onProbation: (socket) => probation.has(socket),
    open: () => sockets.size,
    full: () => sockets.size - probation.size >= limits.maxConnections,
    closeAfterAnswers: () => {
      closingAll = true
      for (const socket of sockets) {
        const response = (socket as SocketInternals)._httpMessage as http.ServerResponse | null | undefined
        if (response != null && !response.headersSent) response.shouldKeepAlive = false
      }
    },
    closingAfterAnswers: () => closingAll,
    writing: () => {
      for (const socket of sockets) if (socket.writableLength > 0) return true
      return false
    },
    closeUnused: (graceMs) => {
      let closed = 0
      const before = performance.now() - graceMs
      for (const socket of sockets) {
        if (socket.bytesRead === 0 && (socket as SocketInternals)._httpMessage == null && (acceptedAt.get(socket) ?? 0) <= before) {
          socket.destroy()
          closed++
        }
      }
      return closed
    }
  }
}
