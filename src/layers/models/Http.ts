/**
 * One streamed model request over HTTP, as every provider sends it: POSTed once, never retried,
 * its Server-Sent Events handed to the provider as they arrive, and every way it can go wrong
 * named by what Brain knows about it afterwards.
 *
 * - Not sent: `model_unreachable`, not ambiguous: the provider never saw it. Judged by whether the
 *   request ever had a connection, not by the error's code: undici hands a request its connection
 *   only once that is ready (its TLS handshake done), and writes it only then. So a connection
 *   refused, a name that does not resolve, no route, any TLS failure (a certificate, a protocol
 *   error, a reset mid-handshake) and a stall before any connection are all not sent.
 * - An error status: its body (the first ERROR_BODY_BYTES, as JSON when it parses) goes into the
 *   failure's details, with the provider's wait advice in `retry_after_ms` whatever the status
 *   (`retry-after-ms` first, then `retry-after` in seconds or as a date; at most
 *   MODEL_RETRY_ADVICE_MAX_MS). By status:
 *   - 429 `model_rate_limited`, not ambiguous, retryable — unless the body says the quota or a
 *     spend limit is spent (Quota.ts): then not retryable, since waiting does not fix it;
 *   - 408 `model_timeout`, ambiguous (the provider timed out a request it had received), retryable;
 *   - 409 `model_rejected`, not ambiguous, retryable (a lock timeout: refused, try again);
 *   - 3xx (a redirect, never followed; its `location` kept) and other 4xx `model_rejected`,
 *     neither (refused, not run);
 *   - 5xx (529 included) `model_unavailable`, ambiguous (it may have run part of it), retryable.
 *   An `x-should-retry: true|false` header is the provider's own word on this response and
 *   overrides the retryable above; it never changes `ambiguous`. The status says what happened
 *   whatever then befalls its body (a stall, a reset, a drip still going after
 *   MODEL_ERROR_BODY_MS): the failure keeps what of it came.
 * - A 2xx whose Content-Type is not `text/event-stream` (a JSON completion from a server that does
 *   not stream, a gateway's error page): `model_bad_response`, ambiguous (it may have run), not
 *   retryable (the same request gets the same answer), its body kept like an error body. A 2xx
 *   without a Content-Type is read as a stream.
 * - Cut after it was sent (a reset mid-stream): `model_stream_broken`, ambiguous. A stream that
 *   ends cleanly but without the provider's final event is the provider's to call broken.
 * - No byte for `stallMs` (before the headers or between chunks): `model_timeout`, ambiguous.
 * - More than `maxOutputBytes` of response (decoded): `model_output_limit`, ambiguous (it ran).
 * - Interrupted (a cancel): the request is aborted; the caller records what that means.
 * - An informational response (1xx: 103 Early Hints) is skipped: the final response after it is
 *   the answer. undici's HTTP/1.1 parser closes the connection on a 100 Continue the request did not
 *   ask for (Brain never sends `Expect`), before any handler sees it: that call fails
 *   `model_stream_broken`, ambiguous, as any connection lost once the request was on it.
 *
 * The request asks for `accept-encoding: identity`; a body coded anyway (a proxy that gzips) is
 * decoded with node:zlib (gzip, deflate, br), and one Brain cannot decode fails clearly: the
 * status's own failure for an error status, `model_bad_response` for a 2xx.
 *
 * The call's secrets (each secret header's value, and the key in `Bearer <key>`) are redacted
 * from every failure it answers, the provider's fold's too, and from every string of the answer
 * (its text, a tool call's input, its reasoning; its numbers kept), wherever they occur in a
 * string, inside a longer one too; a key shorter than MIN_REDACTED_KEY_CHARS (a placeholder,
 * `keyRedacted`) is not, as it would mangle ordinary text. A provider or a gateway may
 * quote the key back (a 401 body, an error event, a gateway echoing the request as the answer),
 * and both are journaled and shown. The live deltas are handed on as they arrive (ModelsBound.ts
 * redacts a delta that holds the key whole; a key straddling two passes); they are never journaled.
 *
 * Events are parsed by domain/SseParser.ts: linear however the bytes are split, and deaf to `retry:` (a
 * model stream has no business asking Brain to wait and reconnect).
 *
 * The request goes to undici's dispatcher directly (`Dispatcher.dispatch`, one handler object per
 * request), as environments/Exchange.ts does, not through `@effect/platform`'s HttpClient: each
 * chunk is parsed as it arrives, with no Effect stream, fiber or AbortController per call. The
 * provider's final event answers the call at once; the connection is then left to finish its
 * response for DONE_GRACE_MS (so that it is kept for the next call instead of closed, which for a
 * provider over TLS saves the next call a handshake) and closed after that.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Effect, Either, Redacted } from "effect"
import type { Transform } from "node:stream"
import * as zlib from "node:zlib"
import type { Dispatcher } from "undici"
import { MODEL_ERROR_BODY_MS, MODEL_RETRY_ADVICE_MAX_MS } from "../../domain/Limits.js"
import { keyRedacted } from "../../domain/ModelBinding.js"
import { redact, redactCutText, redactText, redactTexts } from "../../domain/Redaction.js"
import { makeSseParser } from "../../domain/SseParser.js"
import { ModelFailed } from "../../services/Models.js"
import { abortRequest, causeCode, dispatchPost, neverSent } from "../OutboundHttp.js"
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

export interface StreamedPost<A> {
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
  /** The answer once the events are whole (at the final event, or the stream's clean end), or why there is none. */
  readonly finish: () => Either.Either<A, ModelFailed>
}

/**
 * Whether an event is a heartbeat, to be ignored: its data is empty or only whitespace (no JSON
 * value at all: `data:` alone, as a keep-alive may be sent) and its `event:` names none of the
 * provider's own event types (`known`). A known event with no data lacks what it must carry: the
 * provider calls that a bad response, as it does any data that is not JSON.
 */
export const isHeartbeat = (event: SseEvent, known: (type: string) => boolean): boolean =>
  event.data.trim() === "" && (event.event === undefined || !known(event.event))

/** What a provider makes of one event: go on (undefined), fail, or stop reading: the answer is whole. */
export type EventVerdict = ModelFailed | "done" | undefined

const failed = (
  code: ModelFailed["code"],
  message: string,
  options: { readonly ambiguous: boolean; readonly retryable: boolean; readonly details?: unknown }
) => new ModelFailed({ code, message, ...options })

/**
 * The secret values a call sends that are redacted, longest first: each secret header's value, and
 * an `Authorization` value's credentials without their scheme (`Bearer <key>` → the key), which is
 * what a server quoting the key back quotes. A key shorter than MIN_REDACTED_KEY_CHARS (a
 * placeholder: `keyRedacted`) is left out, its `Bearer` form too: replacing it would mangle
 * ordinary text.
 */
const secretsOf = (headers: Readonly<Record<string, Redacted.Redacted>> | undefined): ReadonlyArray<string> => {
  const found = new Set<string>()
  for (const secret of Object.values(headers ?? {})) {
    const value = Redacted.value(secret)
    const credentials = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+ +(\S.*)$/.exec(value)?.[1]
    if (!keyRedacted(credentials ?? value)) continue
    found.add(value)
    if (credentials !== undefined) found.add(credentials)
  }
  return [...found].sort((a, b) => b.length - a.length)
}

/**
 * `failure` with the call's secrets redacted from its message and details, where what the provider
 * sent back goes (an error body, an error event's message): a provider or a gateway may quote the
 * key, and a failure is journaled and shown.
 */
const withoutSecrets = (failure: ModelFailed, secrets: ReadonlyArray<string>): ModelFailed =>
  secrets.length === 0 ? failure : new ModelFailed({
    code: failure.code,
    message: redactText(failure.message, secrets),
    ambiguous: failure.ambiguous,
    retryable: failure.retryable,
    ...(failure.details !== undefined ? { details: redact(failure.details, secrets) } : {})
  })

/** Wait advice as recorded: whole milliseconds, at most MODEL_RETRY_ADVICE_MAX_MS. */
const adviceMs = (ms: number) => Math.min(MODEL_RETRY_ADVICE_MAX_MS, Math.max(0, Math.round(ms)))

/** `retry-after` (seconds or an HTTP date) in milliseconds, when it says something usable; at most MODEL_RETRY_ADVICE_MAX_MS. */
export const retryAfterMs = (value: string | undefined, now: number): number | undefined => {
  if (value === undefined) return undefined
  const trimmed = value.trim()
  if (/^\d+(\.\d+)?$/.test(trimmed)) return adviceMs(Number(trimmed) * 1000)
  const at = Date.parse(trimmed)
  return Number.isNaN(at) ? undefined : adviceMs(at - now)
}

/**
 * The provider's wait advice in milliseconds: `retry-after-ms` (OpenAI's and Anthropic's SDKs read
 * it first) when it is a usable number, else `retry-after`.
 */
export const retryAdviceMs = (headers: Readonly<Record<string, string | undefined>>, now: number): number | undefined => {
  const ms = headers["retry-after-ms"]?.trim()
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms)) return adviceMs(Number(ms))
  return retryAfterMs(headers["retry-after"], now)
}

/** `x-should-retry`: the provider's own advice on retrying this response, when it gives one. */
const shouldRetry = (value: string | undefined): boolean | undefined => {
  const word = value?.trim().toLowerCase()
  return word === "true" ? true : word === "false" ? false : undefined
}

/** A response's headers as undici gives them: lower-case names, a repeated one as an array. */
type ResponseHeaders = Record<string, string | Array<string> | undefined>

const headerOf = (headers: ResponseHeaders, name: string): string | undefined => {
  const value = headers[name]
  return Array.isArray(value) ? value[0] : value
}

/**
 * A response body kept for a failure's details: JSON when it parses, else text; redacted, and when
 * it is not all of the body (cut at its bound, by a stall or a reset), a tail that may begin a
 * secret dropped too.
 */
const keptBody = (text: string, whole: boolean, secrets: ReadonlyArray<string>): unknown => {
  try {
    return redact(JSON.parse(text), secrets)
  } catch {
    return whole ? redactText(text, secrets) : redactCutText(text, secrets)
  }
}

/** An error status's failure; `details` holds the body kept (or why there is none). */
const statusFailure = (provider: string, status: number, headers: ResponseHeaders, kept: Record<string, unknown>, now: number) => {
  const details: Record<string, unknown> = { status, ...kept }
  const advice = retryAdviceMs({ "retry-after-ms": headerOf(headers, "retry-after-ms"), "retry-after": headerOf(headers, "retry-after") }, now)
  if (advice !== undefined) details.retry_after_ms = advice
  const location = headerOf(headers, "location")
  if (status >= 300 && status < 400 && location !== undefined) details.location = location
  const judged = byStatus(provider, status, kept.body)
  const retryable = shouldRetry(headerOf(headers, "x-should-retry")) ?? judged.retryable
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
  if (status >= 300 && status < 400) {
    const message = `${provider} answered ${status}, a redirect, which Brain does not follow (the binding's base_url may need to be where it points)`
    return { code: "model_rejected", message, ambiguous: false, retryable: false }
  }
  return { code: "model_rejected", message: `${provider} refused the request with ${status}`, ambiguous: false, retryable: false }
}

/** A 2xx whose Content-Type names another media type than an event stream; none at all is read as one. */
const notEventStream = (contentType: string | undefined): boolean =>
  contentType !== undefined && contentType.split(";")[0]!.trim().toLowerCase() !== "text/event-stream"

/**
 * How to read a body's content coding: "identity" for none, a decoder for gzip, deflate (zlib
 * wrapped, as RFC 9110 defines it) and br, undefined for one Brain cannot decode (zstd, compress,
 * several stacked). Brain asks for identity; a proxy may code a response anyway. The decoders
 * flush what they can at each chunk (an event must not wait for the next one) and do not fail a
 * body that ends early: the provider then misses its final event and says so.
 */
const decoderFor = (coding: string | undefined): "identity" | (() => Transform) | undefined => {
  const word = coding?.trim().toLowerCase() ?? ""
  if (word === "" || word === "identity") return "identity"
  const flushing = { flush: zlib.constants.Z_SYNC_FLUSH, finishFlush: zlib.constants.Z_SYNC_FLUSH }
  if (word === "gzip" || word === "x-gzip") return () => zlib.createGunzip(flushing)
  if (word === "deflate") return () => zlib.createInflate(flushing)
  if (word === "br") {
    return () =>
      zlib.createBrotliDecompress({ flush: zlib.constants.BROTLI_OPERATION_FLUSH, finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH })
  }
  return undefined
}

/** Milliseconds a response may take to end after the provider's final event before its connection is closed. */
export const DONE_GRACE_MS = 1_000

/**
 * POSTs `body` as JSON once and feeds the response's events to `onEvent` until the stream ends.
 * Answers `finish()` when the server has closed the stream cleanly, or at the provider's final
 * event. Every failure it answers, the fold's too, has the call's secrets redacted.
 */
export const streamedPost = <A>(post: StreamedPost<A>): Effect.Effect<A, ModelFailed, NodeHttpClient.Dispatcher> =>
  Effect.flatMap(NodeHttpClient.Dispatcher, (dispatcher) => posted(dispatcher, post))

const posted = <A>(dispatcher: Dispatcher, post: StreamedPost<A>): Effect.Effect<A, ModelFailed> =>
  Effect.async<A, ModelFailed>((resume) => {
    const { stallMs, maxOutputBytes } = post.limits
    const secrets = secretsOf(post.secretHeaders)
    /** The call's answer is given (a failure, or the stream whole): what comes after is only read to its end. */
    let answered = false
    /** Brain has left the response: nothing more of it is read. */
    let left = false
    /** The request needs no abort any more: the response ended or failed, or it was aborted. */
    let closed = false
    let controller: Dispatcher.DispatchController | undefined
    /** Left before the request reached a connection: aborted as soon as it does. */
    let leftEarly = false
    let timer: ReturnType<typeof setTimeout> | undefined
    /** Bounds the read of a refused response's body as a whole (MODEL_ERROR_BODY_MS from its headers). */
    let bodyTimer: ReturnType<typeof setTimeout> | undefined
    let status = 0
    /**
     * Set at the headers when the response cannot be an answer (an error status, a 2xx that is not
     * an event stream): its failure, given what of its body was kept. Whatever then happens to the
     * body (its end, a stall, a reset, a decoding error), the response fails this way.
     */
    let refusal: ((kept: Record<string, unknown>) => ModelFailed) | undefined
    /** The decoder of a body sent with a content coding in spite of `accept-encoding: identity`. */
    let decoder: Transform | undefined
    let coding: string | undefined
    let bytes = 0
    const keptChunks: Array<Uint8Array> = []
    let keptBytes = 0
    let eventFailure: ModelFailed | undefined
    let done = false
    const decoder8 = new TextDecoder()
    const parser = makeSseParser((event) => {
      if (eventFailure !== undefined || done) return
      const verdict = post.onEvent({ event: event.event === "message" ? undefined : event.event, data: event.data })
      if (verdict === "done") done = true
      else eventFailure = verdict
    }, maxOutputBytes)

    /** Closes the request's connection, wherever the request is. */
    const leave = () => {
      if (timer !== undefined) clearTimeout(timer)
      if (bodyTimer !== undefined) clearTimeout(bodyTimer)
      left = true
      decoder?.destroy()
      if (closed) return
      closed = true
      if (controller === undefined) leftEarly = true
      else abortRequest(controller)
    }
    const answer = (outcome: Either.Either<A, ModelFailed>) => {
      if (answered) return
      answered = true
      resume(Either.isLeft(outcome) ? Effect.fail(withoutSecrets(outcome.left, secrets)) : Effect.succeed(redactTexts(outcome.right, secrets)))
    }
    const fail = (failure: ModelFailed) => {
      answer(Either.left(failure))
      leave()
    }
    /** The refused response's failure with what of its body was kept (`whole`: all of it). */
    const refused = (whole: boolean) =>
      refusal!({ body: keptBody(Buffer.concat(keptChunks, keptBytes).toString("utf8"), whole, secrets) })
    /** The refused response's failure when its body was still coming after MODEL_ERROR_BODY_MS: what came is kept, and the message says so. */
    const refusedLate = () => {
      const failure = refused(false)
      return new ModelFailed({
        code: failure.code,
        message: `${failure.message} (its body was still coming after ${MODEL_ERROR_BODY_MS} ms; what came of it is kept)`,
        ambiguous: failure.ambiguous,
        retryable: failure.retryable,
        ...(failure.details !== undefined ? { details: failure.details } : {})
      })
    }
    const stalled = () =>
      controller === undefined
        // Never on a connection (a TLS handshake that never ends, say): nothing was sent.
        ? failed("model_unreachable", `${post.provider} could not be reached: no connection within ${stallMs} ms (BRAIN_MAX_MODEL_SECS)`, {
          ambiguous: false,
          retryable: true
        })
        : refusal !== undefined
        ? refused(false)
        : failed("model_timeout", `${post.provider} sent nothing for ${stallMs} ms (BRAIN_MAX_MODEL_SECS)`, { ambiguous: true, retryable: true })
    if (stallMs > 0) timer = setTimeout(() => fail(stalled()), stallMs)

    /** One piece of the (decoded) body. */
    const onBody = (chunk: Uint8Array) => {
      if (left) return
      if (refusal !== undefined) {
        const room = ERROR_BODY_BYTES - keptBytes
        if (chunk.length < room) {
          keptChunks.push(chunk)
          keptBytes += chunk.length
          return
        }
        keptChunks.push(chunk.subarray(0, room))
        keptBytes += room
        return fail(refused(false))
      }
      bytes += chunk.length
      if (maxOutputBytes > 0 && bytes > maxOutputBytes) {
        return fail(failed("model_output_limit", `${post.provider} sent more than ${maxOutputBytes} bytes (BRAIN_MAX_MODEL_OUTPUT_BYTES)`, {
          ambiguous: true,
          retryable: false
        }))
      }
      if (answered) return
      const fits = parser.feed(decoder8.decode(chunk, { stream: true }))
      if (!fits && eventFailure === undefined) {
        eventFailure = failed("model_output_limit", `${post.provider} sent an event above the output limit`, { ambiguous: true, retryable: false })
      }
      if (eventFailure !== undefined) return fail(eventFailure)
      if (done) {
        answer(post.finish())
        // The rest of the response (its end, as a rule) is read for DONE_GRACE_MS at most.
        if (timer !== undefined) clearTimeout(timer)
        timer = setTimeout(leave, DONE_GRACE_MS)
        timer.unref()
      }
    }
    /** The (decoded) body's clean end. */
    const onBodyEnd = () => {
      if (timer !== undefined) clearTimeout(timer)
      if (bodyTimer !== undefined) clearTimeout(bodyTimer)
      if (answered) return
      if (refusal !== undefined) return answer(Either.left(refused(true)))
      // An event the server never finished (no blank line after it) is dropped: the provider then
      // misses its final event and says the stream ended early.
      answer(eventFailure !== undefined ? Either.left(eventFailure) : post.finish())
    }

    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(c) {
        controller = c
        if (leftEarly) abortRequest(c)
      },
      onResponseStart(_c, statusCode, rawHeaders) {
        timer?.refresh()
        // An informational response (103 Early Hints, say) is not the answer: the final one follows
        // on the same request (RFC 9110 §15.2), and undici hands only that one's body on.
        if (statusCode < 200) return
        status = statusCode
        const headers = rawHeaders as ResponseHeaders
        const error = statusCode >= 300
        coding = headerOf(headers, "content-encoding")
        const decoding = decoderFor(coding)
        if (decoding === undefined) {
          const unread = { content_encoding: coding }
          return fail(
            error
              ? statusFailure(post.provider, statusCode, headers, unread, Date.now())
              : failed("model_bad_response", `${post.provider} answered ${statusCode} in Content-Encoding ${coding}, which Brain cannot decode (it asks for identity)`, {
                ambiguous: true,
                retryable: false,
                details: { status: statusCode, ...unread }
              })
          )
        }
        const contentType = headerOf(headers, "content-type")
        if (error) refusal = (kept) => statusFailure(post.provider, statusCode, headers, kept, Date.now())
        else if (notEventStream(contentType)) {
          refusal = (kept) =>
            failed("model_bad_response", `${post.provider} answered ${statusCode} with ${contentType}, not an event stream`, {
              ambiguous: true,
              retryable: false,
              details: { status: statusCode, content_type: contentType, ...kept }
            })
        }
        // The status has said how the call fails: its body is read for MODEL_ERROR_BODY_MS at most, however it trickles.
        if (refusal !== undefined) bodyTimer = setTimeout(() => fail(refusedLate()), MODEL_ERROR_BODY_MS)
        if (decoding !== "identity") {
          const d = decoding()
          decoder = d
          d.on("data", onBody)
          d.on("end", onBodyEnd)
          d.on("error", (err) => {
            if (left || answered) return
            fail(
              refusal !== undefined
                ? refused(false)
                : failed("model_bad_response", `${post.provider}'s ${coding} body could not be decoded (${causeCode(err) ?? "error"})`, {
                  ambiguous: true,
                  retryable: true,
                  details: { status: statusCode, content_encoding: coding }
                })
            )
          })
        }
      },
      onResponseData(_c, chunk) {
        if (left) return
        timer?.refresh()
        if (decoder !== undefined) decoder.write(chunk)
        else onBody(chunk)
      },
      onResponseEnd() {
        closed = true
        // A decoder ends the body once it has given out all it holds.
        if (decoder !== undefined) decoder.end()
        else onBodyEnd()
      },
      onResponseError(_c, err) {
        if (timer !== undefined) clearTimeout(timer)
        if (bodyTimer !== undefined) clearTimeout(bodyTimer)
        closed = true
        decoder?.destroy()
        if (answered) return
        const code = causeCode(err)
        const named = code ?? (err instanceof Error ? err.name : "error")
        // Never on a connection (refused, no such name, a TLS handshake that failed): nothing was sent.
        if (status === 0 && neverSent(controller !== undefined, code)) {
          return answer(Either.left(failed("model_unreachable", `${post.provider} could not be reached (${named})`, { ambiguous: false, retryable: true })))
        }
        if (status === 0) {
          return answer(Either.left(failed("model_stream_broken", `the connection to ${post.provider} failed (${named})`, { ambiguous: true, retryable: true })))
        }
        // An error status (or a body that is no stream) says what happened; a body cut short is only detail.
        if (refusal !== undefined) return answer(Either.left(refused(false)))
        answer(Either.left(failed("model_stream_broken", `the stream from ${post.provider} was cut (${named})`, { ambiguous: true, retryable: true })))
      }
    }

    // Brain reads the body as sent: no content coding, please (RFC 9110 §12.5.3).
    const headers: Record<string, string> = { ...post.headers, accept: "text/event-stream", "accept-encoding": "identity" }
    for (const [name, value] of Object.entries(post.secretHeaders ?? {})) headers[name] = Redacted.value(value)
    // The stall bound above is the call's own (BRAIN_MAX_MODEL_SECS): undici has none of its own here.
    const refusedOutright = dispatchPost(dispatcher, post.url, headers, post.body, handler)
    if (refusedOutright !== undefined) {
      fail(failed("model_unreachable", `${post.provider} could not be reached (${refusedOutright})`, { ambiguous: false, retryable: true }))
    }
    // Interrupted (a cancel, the turn's deadline): the request is closed wherever it is.
    return Effect.sync(() => {
      answered = true
      leave()
    })
  })
