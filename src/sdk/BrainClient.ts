/**
 * The Effect-native client: `HttpApiClient` over the very contract the server serves
 * (src/http/Api.ts), with the bearer token added to every request (`transformClient`), an
 * Idempotency-Key on every mutating call (the caller's or a fresh `crypto.randomUUID()`, made once
 * per call, so a retry repeats it), uncertain outcomes retried with that same key (as the Promise
 * client does, Transport.ts), and an exact error channel per method:
 *
 * - the refusals its route declares in the contract (http/ApiErrors.ts), decoded from the error
 *   body by its `code` into the `Schema.TaggedError`s of domain/Errors.ts: `catchTag("SessionBusy")`,
 *   `catchTag("NotFound")`, each with `code`, `message`, `retryable` and `details`;
 * - `BrainError` only for what is not an answer of the contract: no answer arrived
 *   (`network_error`, retried while the key allows), an answer the contract does not describe
 *   (`bad_response`, say from a proxy), or a request it could not encode (`invalid_request`,
 *   status 0, say a malformed session id).
 *
 * `api` is the raw `HttpApiClient` of the same contract, for anything else.
 *
 * ```ts
 * const program = Effect.gen(function*() {
 *   const brain = yield* BrainClient
 *   const session = yield* brain.sessions.create({ model: { provider: "scripted" } })
 *   return yield* brain.sessions.send(session.session_id, { message: "hi" }).pipe(
 *     Effect.catchTag("SessionBusy", () => Effect.succeed(undefined))
 *   )
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

/** Not an answer of the contract: what a call of the raw client fails with besides its route's refusals. */
type NotAnAnswer = HttpClientError.HttpClientError | ParseResult.ParseError

/** The refusals the contract declares for a route of the raw client (`Refusals<BrainApiClient["sessions"]["send"]>`). */
export type Refusals<Call extends (...args: any) => Effect.Effect<any, any, any>> = Exclude<
  Effect.Effect.Error<ReturnType<Call>>,
  NotAnAnswer
>

type Routes = BrainApiClient["sessions"]

export interface BrainClientShape {
  readonly api: BrainApiClient
  readonly sessions: {
    readonly create: (
      body: typeof Schemas.CreateSessionRequest.Type,
      options?: MutationOptions
    ) => Effect.Effect<SessionSummary, Refusals<Routes["create"]> | BrainError>
    readonly list: (
      params?: typeof Schemas.ListParams.Type
    ) => Effect.Effect<typeof Schemas.SessionList.Type, Refusals<Routes["list"]> | BrainError>
    readonly get: (id: string) => Effect.Effect<SessionSummary, Refusals<Routes["get"]> | BrainError>
    /** A synchronous turn: its outcome, ended or failed. */
    readonly send: (
      id: string,
      input: TurnInput,
      options?: MutationOptions
    ) => Effect.Effect<typeof Schemas.TurnOutcome.Type, Refusals<Routes["send"]> | BrainError>
    /** An async submission (`Prefer: respond-async`): the receipt of its committed `turn_started`. */
    readonly submit: (
      id: string,
      input: TurnInput,
      options?: MutationOptions
    ) => Effect.Effect<typeof Schemas.Receipt.Type, Refusals<Routes["send"]> | BrainError>
    /** One page of Events after `after`; an empty page is the end. */
    readonly events: (
      id: string,
      params?: typeof Schemas.EventsParams.Type
    ) => Effect.Effect<typeof Schemas.EventPage.Type, Refusals<Routes["events"]> | BrainError>
    readonly transcript: (id: string) => Effect.Effect<typeof Schemas.Transcript.Type, Refusals<Routes["transcript"]> | BrainError>
    readonly interrupt: (id: string, options?: MutationOptions) => Effect.Effect<SessionSummary, Refusals<Routes["cancel"]> | BrainError>
    readonly end: (id: string, options?: MutationOptions) => Effect.Effect<SessionSummary, Refusals<Routes["end"]> | BrainError>
    readonly delete: (id: string, options?: MutationOptions) => Effect.Effect<void, Refusals<Routes["delete"]> | BrainError>
  }
}

const isNotAnAnswer = (e: unknown): e is NotAnAnswer => HttpClientError.isHttpClientError(e) || ParseResult.isParseError(e)

/** A failure that is not an answer of the contract, as a BrainError. */
const toBrainError = (e: NotAnAnswer): Effect.Effect<BrainError> => {
  if (ParseResult.isParseError(e)) {
    return Effect.succeed(new BrainError({ code: "invalid_request", status: 0, retryable: false, message: e.message }))
  }
  if (e._tag === "RequestError") return Effect.succeed(networkError(e.cause ?? e.message))
  const response = e.response
  // A 2xx whose body could not be read was cut off: its outcome is as uncertain as no answer.
  if (response.status >= 200 && response.status < 300) return Effect.succeed(networkError(e.message))
  return response.text.pipe(
    Effect.map((text) => fromAnswer(response.status, text)),
    Effect.orElseSucceed(() => fromAnswer(response.status, ""))
  )
}

/**
 * The call's refusals as they are; anything else as a BrainError. (`catchIf` with a refinement on
 * `unknown` cannot name what remains of a generic `E`; the assertion says it: `E` without
 * `NotAnAnswer`.)
 */
const mapErrors = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, Exclude<E, NotAnAnswer> | BrainError> =>
  Effect.catchIf(effect, isNotAnAnswer, (e) => Effect.flatMap(toBrainError(e), Effect.fail)) as Effect.Effect<
    A,
    Exclude<E, NotAnAnswer> | BrainError
  >

/** Uncertain in a way a retry under the same key settles: no answer arrived, or a refusal for load before the request was taken. */
const uncertain = (e: unknown) =>
  e instanceof BrainError ? isUncertain(e) : (e as { readonly _tag?: unknown })._tag === "Overloaded"

/** `call`, retried with the same arguments while its outcome is uncertain (bounded). */
const withRetries = <A, E>(call: Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.retry(call, {
    schedule: Schedule.exponential(Duration.millis(RETRY_BASE_MS)),
    times: MAX_ATTEMPTS - 1,
    while: uncertain
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
