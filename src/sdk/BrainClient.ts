/**
 * The Effect-native client: `HttpApiClient` over the very contract the server serves
 * (src/http/Api.ts), with the bearer token added to every request (`transformClient`), an
 * Idempotency-Key on every mutating call (the caller's or a fresh `crypto.randomUUID()`, made once
 * per call, so a retry repeats it), uncertain outcomes retried with that same key (as the Promise
 * client does, Transport.ts), and one exact error channel: `BrainError`.
 *
 * The contract answers every refusal with one error body, declared once per status; it does not
 * yet name a tagged error per route. Until it does, this client turns the body, a transport
 * failure, or an answer outside the contract (a 500, a 502 `creation_failed`) into `BrainError`
 * here. `api` is the raw `HttpApiClient`, with the contract's own error types, for anything else.
 *
 * ```ts
 * const program = Effect.gen(function*() {
 *   const brain = yield* BrainClient
 *   const session = yield* brain.sessions.create({ model: { provider: "scripted" } })
 *   return yield* brain.sessions.send(session.session_id, { message: "hi" })
 * })
 * program.pipe(Effect.provide(BrainClient.layerFetch({ baseUrl })), Effect.runPromise)
 * ```
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { Context, Duration, Effect, Layer, ParseResult, Schedule } from "effect"
import type { SessionId } from "../domain/Ids.js"
import { BrainApi } from "../http/Api.js"
import { statusOf } from "../http/Errors.js"
import type * as Schemas from "../http/Schemas.js"
import { BrainError, fromAnswer, isUncertain, networkError } from "./Errors.js"
import { MAX_ATTEMPTS, RETRY_BASE_MS } from "./Transport.js"

export interface BrainClientOptions {
  readonly baseUrl: string
  /** The `BRAIN_API_TOKEN`, sent as `Authorization: Bearer <token>`. */
  readonly token?: string | undefined
}

export interface MutationOptions {
  readonly idempotencyKey?: string
}

const makeApi = (options: BrainClientOptions) =>
  HttpApiClient.make(BrainApi, {
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    transformClient: (client) =>
      options.token === undefined ? client : HttpClient.mapRequest(client, HttpClientRequest.bearerToken(options.token))
  })

/** The raw `HttpApiClient` of the contract. */
export type BrainApiClient = Effect.Effect.Success<ReturnType<typeof makeApi>>

type SessionSummary = typeof Schemas.SessionSummary.Type
type TurnInput = typeof Schemas.SendMessageRequest.Type["input"]

export interface BrainClientShape {
  readonly api: BrainApiClient
  readonly sessions: {
    readonly create: (body: typeof Schemas.CreateSessionRequest.Type, options?: MutationOptions) => Effect.Effect<SessionSummary, BrainError>
    readonly list: (params?: typeof Schemas.ListParams.Type) => Effect.Effect<typeof Schemas.SessionList.Type, BrainError>
    readonly get: (id: string) => Effect.Effect<SessionSummary, BrainError>
    /** A synchronous turn: its outcome, ended or failed. */
    readonly send: (id: string, input: TurnInput, options?: MutationOptions) => Effect.Effect<typeof Schemas.TurnOutcome.Type, BrainError>
    /** An async submission (`Prefer: respond-async`): the receipt of its committed `turn_started`. */
    readonly submit: (id: string, input: TurnInput, options?: MutationOptions) => Effect.Effect<typeof Schemas.Receipt.Type, BrainError>
    /** One page of Events after `after`; an empty page is the end. */
    readonly events: (id: string, params?: typeof Schemas.EventsParams.Type) => Effect.Effect<typeof Schemas.EventPage.Type, BrainError>
    readonly transcript: (id: string) => Effect.Effect<typeof Schemas.Transcript.Type, BrainError>
    readonly interrupt: (id: string, options?: MutationOptions) => Effect.Effect<SessionSummary, BrainError>
    readonly end: (id: string, options?: MutationOptions) => Effect.Effect<SessionSummary, BrainError>
    readonly delete: (id: string, options?: MutationOptions) => Effect.Effect<void, BrainError>
  }
}

const isErrorBody = (e: unknown): e is typeof Schemas.ErrorBody.Type =>
  typeof e === "object" && e !== null && typeof (e as { code?: unknown }).code === "string" &&
  typeof (e as { message?: unknown }).message === "string" && !("_tag" in e)

/** Every failure of a contract call, as a BrainError. */
const toBrainError = (e: unknown): Effect.Effect<BrainError> => {
  if (isErrorBody(e)) {
    return Effect.succeed(
      new BrainError({
        code: e.code,
        status: statusOf(e.code),
        retryable: e.retryable,
        message: e.message,
        ...(e.details !== undefined ? { details: e.details } : {})
      })
    )
  }
  if (HttpClientError.isHttpClientError(e)) {
    if (e._tag === "RequestError") return Effect.succeed(networkError(e.cause ?? e.message))
    const response = e.response
    // A 2xx whose body could not be read was cut off: its outcome is as uncertain as no answer.
    if (response.status >= 200 && response.status < 300) return Effect.succeed(networkError(e.message))
    return response.text.pipe(
      Effect.map((text) => fromAnswer(response.status, text)),
      Effect.orElseSucceed(() => fromAnswer(response.status, ""))
    )
  }
  if (ParseResult.isParseError(e)) {
    return Effect.succeed(new BrainError({ code: "invalid_request", status: 0, retryable: false, message: e.message }))
  }
  return Effect.succeed(new BrainError({ code: "bad_response", status: 0, retryable: false, message: String(e) }))
}

const mapErrors = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, BrainError> =>
  Effect.catchAll(effect, (e) => Effect.flatMap(toBrainError(e), Effect.fail))

/** `call`, retried with the same arguments while its outcome is uncertain (bounded). */
const withRetries = <A>(call: Effect.Effect<A, BrainError>): Effect.Effect<A, BrainError> =>
  Effect.retry(call, {
    schedule: Schedule.exponential(Duration.millis(RETRY_BASE_MS)),
    times: MAX_ATTEMPTS - 1,
    while: isUncertain
  })

/** A mutating call under one Idempotency-Key for all its attempts. */
const mutating = <A, E>(options: MutationOptions | undefined, call: (key: string) => Effect.Effect<A, E>) =>
  Effect.suspend(() => {
    const key = options?.idempotencyKey ?? globalThis.crypto.randomUUID()
    return withRetries(mapErrors(call(key)))
  })

const reading = <A, E>(call: Effect.Effect<A, E>) => withRetries(mapErrors(call))

const unexpected = (what: string) =>
  Effect.fail(new BrainError({ code: "bad_response", status: 0, retryable: false, message: what }))

/** The client over an `HttpClient` from the context. */
export const make = (options: BrainClientOptions): Effect.Effect<BrainClientShape, never, HttpClient.HttpClient> =>
  Effect.map(makeApi(options), (api): BrainClientShape => {
    const path = (id: string) => ({ id: id as SessionId })
    return {
      api,
      sessions: {
        create: (body, opts) => mutating(opts, (key) => api.sessions.create({ payload: body, headers: { "idempotency-key": key } })),
        list: (params = {}) => reading(api.sessions.list({ urlParams: params })),
        get: (id) => reading(api.sessions.get({ path: path(id) })),
        send: (id, input, opts) =>
          mutating(opts, (key) => api.sessions.send({ path: path(id), payload: { input }, headers: { "idempotency-key": key } })).pipe(
            Effect.flatMap((answer) => ("turn" in answer ? Effect.succeed(answer) : unexpected("a synchronous send was answered with a receipt")))
          ),
        submit: (id, input, opts) =>
          mutating(opts, (key) =>
            api.sessions.send({ path: path(id), payload: { input }, headers: { "idempotency-key": key, prefer: "respond-async" } })).pipe(
              Effect.flatMap((answer) => ("turn" in answer ? unexpected("an async submission was answered with a turn's outcome") : Effect.succeed(answer)))
            ),
        events: (id, params = {}) => reading(api.sessions.events({ path: path(id), urlParams: params })),
        transcript: (id) => reading(api.sessions.transcript({ path: path(id) })),
        interrupt: (id, opts) => mutating(opts, (key) => api.sessions.cancel({ path: path(id), headers: { "idempotency-key": key } })),
        end: (id, opts) => mutating(opts, (key) => api.sessions.end({ path: path(id), headers: { "idempotency-key": key } })),
        delete: (id, opts) => mutating(opts, (key) => api.sessions.delete({ path: path(id), headers: { "idempotency-key": key } }))
      }
    }
  })

export class BrainClient extends Context.Tag("brain/sdk/BrainClient")<BrainClient, BrainClientShape>() {
  static readonly make = make
  /** The client, over the `HttpClient` the application provides. */
  static readonly layer = (options: BrainClientOptions): Layer.Layer<BrainClient, never, HttpClient.HttpClient> =>
    Layer.effect(BrainClient, make(options))
  /** The client over the platform's `fetch` (FetchHttpClient): no other requirement. */
  static readonly layerFetch = (options: BrainClientOptions): Layer.Layer<BrainClient> =>
    Layer.provide(BrainClient.layer(options), FetchHttpClient.layer)
}
