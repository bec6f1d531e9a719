/**
 * One streamed model request over HTTP, as every provider sends it: POSTed once, never retried,
 * its Server-Sent Events handed to the provider as they arrive, and every way it can go wrong
 * named by what Brain knows about it afterwards.
 *
 * - Not sent (connection refused, a name that does not resolve, no route, a TLS failure):
 *   `model_unreachable`, not ambiguous: the provider never saw it.
 * - An error status: its body (the first ERROR_BODY_BYTES, as JSON when it parses) goes into the
 *   failure's details, with the provider's wait advice in `retry_after_ms` whatever the status
 *   (`retry-after-ms` first, then `retry-after` in seconds or as a date). By status:
 *   - 429 `model_rate_limited`, not ambiguous, retryable — unless the body says the quota or a
 *     spend limit is spent (Quota.ts): then not retryable, since waiting does not fix it;
 *   - 408 `model_timeout`, ambiguous (the provider timed out a request it had received), retryable;
 *   - 409 `model_rejected`, not ambiguous, retryable (a lock timeout: refused, try again);
 *   - other 4xx `model_rejected`, neither (refused, not run);
 *   - 5xx (529 included) `model_unavailable`, ambiguous (it may have run part of it), retryable.
 *   An `x-should-retry: true|false` header is the provider's own word on this response and
 *   overrides the retryable above; it never changes `ambiguous`.
 * - Cut after it was sent (a reset mid-stream): `model_stream_broken`, ambiguous. A stream that
 *   ends cleanly but without the provider's final event is the provider's to call broken.
 * - No byte for `stallMs` (before the headers or between chunks): `model_timeout`, ambiguous.
 * - More than `maxOutputBytes` of response: `model_output_limit`, ambiguous (it ran).
 * - Interrupted (a cancel): the request is aborted; the caller records what that means.
 *
 * Events are parsed by domain/SseParser.ts: linear however the bytes are split, and deaf to `retry:` (a
 * model stream has no business asking Brain to wait and reconnect).
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Duration, Effect, Redacted, Stream } from "effect"
import { makeSseParser } from "../../domain/SseParser.js"
import { ModelFailed } from "../../services/Models.js"
import { causeCode, notSent } from "../OutboundHttp.js"
import { quotaExhausted } from "./Quota.js"

/** Bytes. The most of an error response's body kept in a failure's details. */
export const ERROR_BODY_BYTES = 16 * 1024

export interface StreamLimits {
  /** Milliseconds without a byte before the call fails with `model_timeout`; 0 = no bound. */
  readonly stallMs: number
  /** Bytes of response body before the call fails with `model_output_limit`; 0 = no bound. */
  readonly maxOutputBytes: number
}

/** One event of the response stream. */
export interface SseEvent {
  readonly event: string | undefined
  readonly data: string
}

export interface StreamedPost {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  /** Headers whose values are secrets: sent, never logged or shown. */
  readonly secretHeaders?: Readonly<Record<string, Redacted.Redacted>>
  readonly body: unknown
  readonly limits: StreamLimits
  /** What the provider is called in messages ("OpenAI", "Anthropic", …). */
  readonly provider: string
  /**
   * Called for each event in order; a failure ends the call with it (a malformed event, say), and
   * `"done"` (the provider's final event) ends it successfully without waiting for the server to
   * close the stream. Synchronous: folding an event into the answer never waits.
   */
  readonly onEvent: (event: SseEvent) => EventVerdict
}

/** What a provider makes of one event: go on (undefined), fail, or stop reading: the answer is whole. */
export type EventVerdict = ModelFailed | "done" | undefined

const failed = (
  code: ModelFailed["code"],
  message: string,
  options: { readonly ambiguous: boolean; readonly retryable: boolean; readonly details?: unknown }
) => new ModelFailed({ code, message, ...options })

/** `retry-after` (seconds or an HTTP date) in milliseconds, when it says something usable. */
export const retryAfterMs = (value: string | undefined, now: number): number | undefined => {
  if (value === undefined) return undefined
  const trimmed = value.trim()
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.round(Number(trimmed) * 1000)
  const at = Date.parse(trimmed)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}

/**
 * The provider's wait advice in milliseconds: `retry-after-ms` (OpenAI's and Anthropic's SDKs read
 * it first) when it is a usable number, else `retry-after`.
 */
export const retryAdviceMs = (headers: Readonly<Record<string, string | undefined>>, now: number): number | undefined => {
  const ms = headers["retry-after-ms"]?.trim()
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms)) return Math.round(Number(ms))
  return retryAfterMs(headers["retry-after"], now)
}

/** `x-should-retry`: the provider's own advice on retrying this response, when it gives one. */
const shouldRetry = (value: string | undefined): boolean | undefined => {
  const word = value?.trim().toLowerCase()
  return word === "true" ? true : word === "false" ? false : undefined
}

/** Reads at most `max` bytes of a response body (an error's), then lets the rest go. */
const boundedText = (response: HttpClientResponse.HttpClientResponse, max: number) =>
  response.stream.pipe(
    Stream.mapAccum(0, (seen, chunk: Uint8Array) => [seen + chunk.length, seen < max ? chunk.subarray(0, max - seen) : undefined] as const),
    Stream.takeWhile((chunk) => chunk !== undefined),
    Stream.runCollect,
    Effect.map((chunks) => Buffer.concat([...chunks].map((c) => Buffer.from(c!))).toString("utf8")),
    Effect.orElseSucceed(() => "")
  )

const asJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

const statusFailure = (provider: string, response: HttpClientResponse.HttpClientResponse, body: string, now: number) => {
  const status = response.status
  const parsed = asJson(body)
  const details: Record<string, unknown> = { status, body: parsed }
  const advice = retryAdviceMs(response.headers, now)
  if (advice !== undefined) details.retry_after_ms = advice
  const judged = byStatus(provider, status, parsed)
  const retryable = shouldRetry(response.headers["x-should-retry"]) ?? judged.retryable
  return failed(judged.code, judged.message, { ambiguous: judged.ambiguous, retryable, details })
}

/** What an error status means, before the provider's `x-should-retry` has its say. */
const byStatus = (provider: string, status: number, body: unknown): {
  readonly code: ModelFailed["code"]
  readonly message: string
  readonly ambiguous: boolean
  readonly retryable: boolean
} => {
  if (status === 429) {
    return quotaExhausted(body)
      ? {
        code: "model_rate_limited",
        message: `${provider} answered 429: the account's quota or spend limit is spent (retrying will not help until it is raised)`,
        ambiguous: false,
        retryable: false
      }
      : { code: "model_rate_limited", message: `${provider} answered 429: rate limited`, ambiguous: false, retryable: true }
  }
  if (status === 408) {
    return { code: "model_timeout", message: `${provider} answered 408: it timed out the request`, ambiguous: true, retryable: true }
  }
  if (status === 409) {
    const message = `${provider} answered 409: a conflict (a lock timeout, say); it was not run`
    return { code: "model_rejected", message, ambiguous: false, retryable: true }
  }
  if (status >= 500) return { code: "model_unavailable", message: `${provider} answered ${status}`, ambiguous: true, retryable: true }
  return { code: "model_rejected", message: `${provider} refused the request with ${status}`, ambiguous: false, retryable: false }
}

/**
 * POSTs `body` as JSON once and feeds the response's events to `onEvent` until the stream ends.
 * Resolves when the server has closed the stream cleanly; the provider then checks that it saw
 * its final event.
 */
export const streamedPost = (post: StreamedPost): Effect.Effect<void, ModelFailed, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    let request = HttpClientRequest.post(post.url).pipe(
      HttpClientRequest.setHeaders({ ...post.headers, accept: "text/event-stream" }),
      HttpClientRequest.bodyUnsafeJson(post.body)
    )
    for (const [name, value] of Object.entries(post.secretHeaders ?? {})) {
      request = HttpClientRequest.setHeader(request, name, Redacted.value(value))
    }
    const stall = post.limits.stallMs > 0 ? Duration.millis(post.limits.stallMs) : undefined
    const stalled = () =>
      failed("model_timeout", `${post.provider} sent nothing for ${post.limits.stallMs} ms (BRAIN_MAX_MODEL_SECS)`, {
        ambiguous: true,
        retryable: true
      })

    const sent = client.execute(request).pipe(
      Effect.mapError((e) => {
        const code = causeCode(e)
        return notSent(code)
          ? failed("model_unreachable", `${post.provider} could not be reached (${code})`, { ambiguous: false, retryable: true })
          : failed("model_stream_broken", `the connection to ${post.provider} failed (${code ?? e.reason})`, { ambiguous: true, retryable: true })
      })
    )
    const response = yield* (stall ? Effect.timeoutFail(sent, { duration: stall, onTimeout: stalled }) : sent)
    if (response.status < 200 || response.status >= 300) {
      const body = yield* boundedText(response, ERROR_BODY_BYTES)
      return yield* Effect.fail(statusFailure(post.provider, response, body, Date.now()))
    }

    let bytes = 0
    let eventFailure: ModelFailed | undefined
    let done = false
    const decoder = new TextDecoder()
    const parser = makeSseParser((event) => {
      if (eventFailure !== undefined || done) return
      const verdict = post.onEvent({ event: event.event === "message" ? undefined : event.event, data: event.data })
      if (verdict === "done") done = true
      else eventFailure = verdict
    }, post.limits.maxOutputBytes)
    const body = stall ? Stream.timeoutFail(response.stream, stalled, stall) : response.stream
    yield* body.pipe(
      Stream.mapError((e) =>
        e instanceof ModelFailed
          ? e
          : failed("model_stream_broken", `the stream from ${post.provider} was cut (${causeCode(e) ?? e.reason})`, {
            ambiguous: true,
            retryable: true
          })
      ),
      Stream.runForEachWhile((chunk) => {
        bytes += chunk.length
        if (post.limits.maxOutputBytes > 0 && bytes > post.limits.maxOutputBytes) {
          eventFailure = failed(
            "model_output_limit",
            `${post.provider} sent more than ${post.limits.maxOutputBytes} bytes (BRAIN_MAX_MODEL_OUTPUT_BYTES)`,
            { ambiguous: true, retryable: false }
          )
          return Effect.succeed(false)
        }
        const fits = parser.feed(decoder.decode(chunk, { stream: true }))
        if (!fits && eventFailure === undefined) {
          eventFailure = failed("model_output_limit", `${post.provider} sent an event above the output limit`, { ambiguous: true, retryable: false })
        }
        return Effect.succeed(eventFailure === undefined && !done)
      })
    )
    if (eventFailure !== undefined) return yield* Effect.fail(eventFailure)
    // An event the server never finished (no blank line after it) is dropped: the provider then
    // misses its final event and says the stream ended early.
  })
