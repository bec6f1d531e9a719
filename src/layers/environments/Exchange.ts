/**
 * One request to an `http` Environment (docs/environments.md, "The http protocol"): a JSON POST,
 * sent once, never retried, its answer read with a bound, and every way it can go wrong named by
 * what Brain knows afterwards.
 *
 * - Not sent (connection refused, a name that does not resolve, no route, a TLS failure):
 *   `EnvironmentNotSent` `unreachable`. Any other transport failure happened after the request may
 *   have left: `EnvironmentUncertain` `connection_lost`.
 * - A 200's body is read whole up to `maxBytes`: a larger `Content-Length` is refused before its
 *   body is read (`too_large`), a larger body without one stops the read at the bound (`too_large`). Any other status keeps only the first
 *   ERROR_BODY_BYTES for the failure's details; a read error there changes nothing (the status
 *   already says what happened).
 * - Leaving an exchange — done, failed, timed out or interrupted — closes its request, so an
 *   unread or oversized body is never left streaming in: the client aborts a request interrupted
 *   in flight or in its body's read, and a read by stream aborts it when it stops (a body refused
 *   on its length is read so, up to its first chunk). A 200 whose `Content-Length` is within the
 *   bound is read whole instead (the client holds the body to that length), which needs no abort:
 *   an abort makes an `AbortError`, whose stack V8 captures, on every call (docs/benchmarks.md,
 *   "An http Environment's calls").
 *
 * Secret headers are sent and never shown: their names join the tracer's redacted header names, and
 * no message here quotes a header, a body or a transport error's text (only its code).
 */
import * as Headers from "@effect/platform/Headers"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Effect, Redacted, Stream } from "effect"
import { ENVIRONMENT_PROTOCOL_VERSION } from "../../domain/Environment.js"
import { EnvironmentNotSent, EnvironmentUncertain } from "../../services/Environments.js"
import { causeCode, notSent } from "../OutboundHttp.js"

/** Bytes. The most of an error response's body kept in a failure's details (the doc's 16 KiB). */
export const ERROR_BODY_BYTES = 16 * 1024

export interface Post {
  /** The Environment's name in the session, for messages. */
  readonly environment: string
  /** `{base_url}{path}`. */
  readonly url: string
  /** The protocol path (`/setup`, `/tools/call`, …), for messages. */
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
}

/** Reads at most `max` bytes; `over` says more came (the read stopped there). */
const readAtMost = <E>(stream: Stream.Stream<Uint8Array, E>, max: number) =>
  Effect.gen(function*() {
    const chunks: Array<Uint8Array> = []
    let size = 0
    let over = false
    yield* Stream.runForEachWhile(stream, (chunk) =>
      Effect.sync(() => {
        const room = max - size
        if (chunk.length > room) {
          if (room > 0) chunks.push(chunk.subarray(0, room))
          size = max
          over = true
          return false
        }
        chunks.push(chunk)
        size += chunk.length
        return true
      }))
    return { body: Buffer.concat(chunks), over }
  })

/** POSTs `post.body` once and reads the answer with its bound. */
export const exchange = (
  post: Post
): Effect.Effect<Reply, EnvironmentNotSent | EnvironmentUncertain, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    let request = HttpClientRequest.post(post.url).pipe(
      HttpClientRequest.bodyUnsafeJson(post.body),
      HttpClientRequest.setHeaders({
        "content-type": "application/json",
        accept: "application/json",
        "brain-environment-protocol": ENVIRONMENT_PROTOCOL_VERSION
      })
    )
    for (const [name, value] of post.secretHeaders) {
      request = HttpClientRequest.setHeader(request, name, Redacted.value(value))
    }
    const lost = (code: string | undefined) =>
      new EnvironmentUncertain({
        environment: post.environment,
        reason: "connection_lost",
        message: `the connection to Environment ${JSON.stringify(post.environment)} was lost after ${post.path} was sent` +
          (code !== undefined ? ` (${code})` : "")
      })
    const response = yield* client.execute(request).pipe(
      // No span of the client's own per request (as the server's middleware, main.ts): its
      // attributes cost more than the rest of the exchange, and Brain exports no traces.
      Effect.withTracerEnabled(false),
      Effect.mapError((e) => {
        const code = causeCode(e)
        return notSent(code)
          ? new EnvironmentNotSent({
            environment: post.environment,
            reason: "unreachable",
            message: `Environment ${JSON.stringify(post.environment)} could not be reached (${code}): ${post.path} was not sent`
          })
          : lost(code ?? e.reason)
      })
    )
    if (response.status !== 200) {
      const { body, over } = yield* readAtMost(response.stream, Math.min(ERROR_BODY_BYTES, post.maxBytes)).pipe(
        Effect.orElseSucceed(() => ({ body: new Uint8Array(0), over: false }))
      )
      return { status: response.status, body, truncated: over }
    }
    // Made only when it is the answer: an error's construction captures a stack.
    const tooLarge = () =>
      new EnvironmentUncertain({
        environment: post.environment,
        reason: "too_large",
        status: 200,
        message: `Environment ${JSON.stringify(post.environment)} answered ${post.path} with more than ${post.maxBytes} bytes ` +
          "(BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES)"
      })
    const declared = Number(response.headers["content-length"])
    if (Number.isFinite(declared) && declared > post.maxBytes) {
      // Refused unread: the stream's read stops at once, and that closes the request.
      yield* Effect.ignore(readAtMost(response.stream, 0))
      return yield* Effect.fail(tooLarge())
    }
    if (Number.isFinite(declared)) {
      const whole = yield* response.arrayBuffer.pipe(Effect.mapError((e) => lost(causeCode(e) ?? e.reason)))
      return { status: 200, body: new Uint8Array(whole), truncated: false }
    }
    const { body, over } = yield* readAtMost(response.stream, post.maxBytes).pipe(
      Effect.mapError((e) => lost(causeCode(e) ?? e.reason))
    )
    if (over) return yield* Effect.fail(tooLarge())
    return { status: 200, body, truncated: false }
  }).pipe(
    Effect.locallyWith(Headers.currentRedactedNames, (names) => [...names, ...post.secretHeaders.map(([name]) => name)])
  )
