/**
 * One request to an `http` Environment (docs/environments.md, "The http protocol"): a JSON POST,
 * sent once, never retried, its answer read with a bound, and every way it can go wrong named by
 * what Brain knows afterwards.
 *
 * - Not sent (connection refused, a name that does not resolve, no route, a TLS failure):
 *   `EnvironmentNotSent` `unreachable`. Any other transport failure happened after the request may
 *   have left: `EnvironmentUncertain` `connection_lost`.
 * - A 200's body is read whole up to `maxBytes`: a larger `Content-Length` is refused before its
 *   body is read (`too_large`), a larger body without one stops the read at the bound
 *   (`too_large`). Any other status keeps only the first ERROR_BODY_BYTES for the failure's
 *   details; a read error there changes nothing (the status already says what happened).
 * - Brain asks for no content coding (`Accept-Encoding: identity`) and decodes none: a 200 in
 *   one keeps its `Content-Encoding` in the reply, for Answers.ts to refuse by name.
 * - undici reads past a 1xx (102, 103) to the answer, except a 100 Continue: Brain never asks for
 *   one (it sends no `Expect`), and undici's HTTP/1 parser drops the connection on it, so the call
 *   is uncertain (`connection_lost`: it was sent), its message naming the 100.
 * - Leaving an exchange before its answer is whole — interrupted (a timeout, a cancel, an
 *   abandoned call), or a body refused at its bound — aborts the request, which closes its
 *   connection: an unread or oversized body is never left streaming in. An exchange that ends
 *   with its answer aborts nothing (an abort makes an error whose stack V8 captures).
 *
 * It speaks to undici's dispatcher directly (`Dispatcher.dispatch`, one handler object per
 * request), not through `@effect/platform`'s HttpClient or undici's `request`: no Effect fibers, no
 * response object or body stream, no AbortController per request. On this VM that is about 30 µs
 * of CPU per exchange, both ends in one process, against 160–210 µs through the HttpClient
 * (docs/benchmarks.md, "An http Environment's calls without the HttpClient").
 *
 * Secret headers are sent and never shown: no message here quotes a header, a body or a transport
 * error's text (only its code), and nothing here logs or traces a request.
 */
import { Effect, Either, Redacted } from "effect"
import type { Dispatcher } from "undici"
import { ENVIRONMENT_PROTOCOL_VERSION } from "../../domain/Environment.js"
import { EnvironmentNotSent, EnvironmentUncertain } from "../../services/Environments.js"
import { abortRequest, causeCode, dispatchPost, neverSent } from "../OutboundHttp.js"

/** Bytes. The most of an error response's body kept in a failure's details (the doc's 16 KiB). */
export const ERROR_BODY_BYTES = 16 * 1024

export interface Post {
  /** The Environment's name in the session, for messages. */
  readonly environment: string
  /** The binding's `base_url`: the request goes to `{baseUrl}{path}`. */
  readonly baseUrl: string
  /** The protocol path (`/setup`, `/tools/call`, …). */
  readonly path: string
  readonly body: unknown
  /** Header name (lower case) → value: the binding's token and headers_env. */
  readonly secretHeaders: ReadonlyArray<readonly [string, Redacted.Redacted]>
  /** Bytes of a 200's body read at most (BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES). */
  readonly maxBytes: number
}

/** What came back: a 200 with its whole body, or another status with its first bytes. */
export interface Reply {
  readonly status: number
  readonly body: Uint8Array
  /** True when `body` is only the first bytes of a longer one (never for a 200). */
  readonly truncated: boolean
  /** A 200's `Content-Encoding` other than `identity`: its body is coded, not JSON. */
  readonly coding?: string
}

const bytesOf = (chunks: Array<Uint8Array>, size: number): Uint8Array =>
  chunks.length === 1 ? chunks[0]! : chunks.length === 0 ? new Uint8Array(0) : Buffer.concat(chunks, size)

/**
 * Whether a request's failure before any response is undici refusing a 100 Continue: its HTTP/1
 * parser destroys the connection with a `bad response` socket error on any 100 (it has no
 * `Expect: 100-continue`), and that error reaches a request in flight for nothing else.
 */
const informational = (err: unknown): boolean =>
  err instanceof Error && err.message === "bad response" && causeCode(err) === "UND_ERR_SOCKET"

/** How an exchange ended: the reply, or why there is none. */
export type Exchanged = Either.Either<Reply, EnvironmentNotSent | EnvironmentUncertain>

/**
 * POSTs `post.body` once through `dispatcher` and reads the answer with its bound; `then` is
 * called once with how it ended (perhaps before this returns, when undici refuses the request
 * outright). Answers a function that leaves the exchange (its request closed wherever it is; `then`
 * is never called after it). No fiber and no Effect: a call sent with no caller's fiber
 * (EnvironmentsHttp's `send`) waits on it as it is.
 *
 * `then` runs inside undici's callbacks, after `done` is set: it must not throw, since undici would
 * only close the connection and the exchange, done, would say nothing more, leaving its caller
 * waiting for a deadline. Its callers read the reply with Answers.ts's `readReply`, which never throws.
 */
export const exchangeNow = (dispatcher: Dispatcher, post: Post, then: (exchanged: Exchanged) => void): () => void => {
  const lost = (code: string | undefined) =>
    new EnvironmentUncertain({
      environment: post.environment,
      reason: "connection_lost",
      message: `the connection to Environment ${JSON.stringify(post.environment)} was lost after ${post.path} was sent` +
        (code !== undefined ? ` (${code})` : "")
    })
  // Made only when it is the answer: an error's construction captures a stack.
  const tooLarge = () =>
    new EnvironmentUncertain({
      environment: post.environment,
      reason: "too_large",
      status: 200,
      message: `Environment ${JSON.stringify(post.environment)} answered ${post.path} with more than ${post.maxBytes} bytes ` +
        "(BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES)"
    })
  let done = false
  /** Set once the request is on a connection: aborting it closes that connection. */
  let controller: Dispatcher.DispatchController | undefined
  /** Left before the request reached a connection: it is aborted as soon as it does. */
  let leftEarly = false
  let status = 0
  let coding: string | undefined
  let limit = 0
  let size = 0
  const chunks: Array<Uint8Array> = []
  const answer = (exchanged: Exchanged) => {
    if (done) return
    done = true
    then(exchanged)
  }
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart(c) {
      controller = c
      if (leftEarly) abortRequest(c)
    },
    onResponseStart(c, statusCode, headers) {
      if (done) return
      status = statusCode
      if (statusCode !== 200) {
        limit = Math.min(ERROR_BODY_BYTES, post.maxBytes)
        return
      }
      limit = post.maxBytes
      const encoding = headers["content-encoding"]
      if (typeof encoding === "string" && encoding.trim().toLowerCase() !== "identity" && encoding.trim() !== "") coding = encoding.trim()
      const length = headers["content-length"]
      const declared = typeof length === "string" ? Number(length) : NaN
      if (Number.isFinite(declared) && declared > post.maxBytes) {
        // Refused unread: the request is closed before its body comes.
        answer(Either.left(tooLarge()))
        abortRequest(c)
      }
    },
    onResponseData(c, chunk) {
      if (done) return
      const room = limit - size
      if (chunk.length <= room) {
        chunks.push(chunk)
        size += chunk.length
        return
      }
      if (room > 0) chunks.push(chunk.subarray(0, room))
      size = limit
      answer(status === 200 ? Either.left(tooLarge()) : Either.right({ status, body: bytesOf(chunks, size), truncated: true }))
      abortRequest(c)
    },
    onResponseEnd() {
      const body = bytesOf(chunks, size)
      answer(Either.right(coding === undefined ? { status, body, truncated: false } : { status, body, truncated: false, coding }))
    },
    onResponseError(_c, err) {
      if (done) return
      const code = causeCode(err)
      if (status === 0) {
        answer(Either.left(
          neverSent(controller !== undefined, code)
            ? new EnvironmentNotSent({
              environment: post.environment,
              reason: "unreachable",
              message: `Environment ${JSON.stringify(post.environment)} could not be reached (${code ?? (err instanceof Error ? err.name : "error")}): ${post.path} was not sent`
            })
            : lost(informational(err) ? `${code}: it answered 100 Continue, which Brain never asks for and cannot read` : code ?? (err instanceof Error ? err.name : undefined))
        ))
      } else if (status !== 200) {
        // The status says what happened; its body is only detail.
        answer(Either.right({ status, body: new Uint8Array(0), truncated: false }))
      } else {
        answer(Either.left(lost(code ?? (err instanceof Error ? err.name : undefined))))
      }
    }
  }
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: "application/json",
    "accept-encoding": "identity",
    "brain-environment-protocol": ENVIRONMENT_PROTOCOL_VERSION
  }
  for (const [name, value] of post.secretHeaders) headers[name] = Redacted.value(value)
  const refused = dispatchPost(dispatcher, post.baseUrl + post.path, headers, post.body, handler)
  // Refused before anything was sent (a URL or option undici will not take).
  if (refused !== undefined) {
    answer(Either.left(
      new EnvironmentNotSent({
        environment: post.environment,
        reason: "unreachable",
        message: `Environment ${JSON.stringify(post.environment)} could not be reached (${refused}): ${post.path} was not sent`
      })
    ))
  }
  return () => {
    if (done) return
    done = true
    if (controller !== undefined) abortRequest(controller)
    else leftEarly = true
  }
}

/** `exchangeNow` as an Effect: interrupting it leaves the exchange. */
export const exchange = (dispatcher: Dispatcher, post: Post): Effect.Effect<Reply, EnvironmentNotSent | EnvironmentUncertain> =>
  Effect.async<Reply, EnvironmentNotSent | EnvironmentUncertain>((resume) => {
    const leave = exchangeNow(dispatcher, post, (exchanged) => resume(exchanged))
    return Effect.sync(leave)
  })
