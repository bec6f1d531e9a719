/**
 * The Effect-native client, and the core of the Promise client too (Brain.ts wraps it): `HttpApiClient`
 * over the very contract the server serves (src/http/Api.ts), with the bearer token added to every
 * request (`transformClient`), an Idempotency-Key on every mutating call (the caller's or a fresh
 * `crypto.randomUUID()`, made once per call, so a retry repeats it), uncertain outcomes retried
 * with that same key, body and mode, and an exact error channel per method:
 *
 * - the refusals its route declares in the contract (http/ApiErrors.ts), decoded from the error
 *   body by its `code` into the `Schema.TaggedError`s of domain/Errors.ts: `catchTag("SessionBusy")`,
 *   `catchTag("NotFound")`, each with `code`, `message`, `retryable` and `details`. A request the
 *   contract refuses (a malformed session id, an unknown field) is not sent: it fails with the
 *   `InvalidRequest` the server would answer (400);
 * - `BrainError` only for what is not an answer of the contract: no answer arrived
 *   (`network_error`, retried while the key allows), or an answer the contract does not describe
 *   (`bad_response`, say from a proxy, or a refusal with a code its route does not declare: then
 *   the server's own `code`, as `fromAnswer` reads it).
 *
 * Retries: a call whose outcome is uncertain — no answer arrived, or 503 `overloaded` — is sent
 * again, at most MAX_ATTEMPTS times in all, RETRY_BASE_MS doubled apart, with the same arguments,
 * so a mutating call repeats its Idempotency-Key: the server runs it at most once and replays its
 * answer. Every other answer (a 409 `ambiguous` included) is final. A host's Event is sent once:
 * the server does not deduplicate it. A host's registration is retried like a read: a lost answer
 * leaves behind an unused host, which holds nothing.
 *
 * `api` is the raw `HttpApiClient` of the same contract, for anything else. The SSE streams
 * (`Accept: text/event-stream` on a session's events, a host's commands) are not request/response
 * calls: the Promise client reads them with `fetch` (Events.ts, Host.ts).
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
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Context, Duration, Effect, FiberRef, Layer, ParseResult, Schedule } from "effect"
import { InvalidRequest } from "../domain/Errors.js"
import type { HostId, SessionId } from "../domain/Ids.js"
import { BrainApi } from "../http/Api.js"
import type * as Schemas from "../http/Schemas.js"
import { BrainError, fromAnswer, isUncertain, networkError } from "./Errors.js"

/** Sends of one call whose outcome is uncertain, the first included: enough to ride out a
 * dropped connection or a short overload, few enough that a dead server is reported quickly. */
export const MAX_ATTEMPTS = 4
/** Milliseconds before the first retry, doubled before each next one (200, 400, 800). */
export const RETRY_BASE_MS = 200

export interface BrainClientOptions {
  readonly baseUrl: string
  /** The `BRAIN_API_TOKEN`, sent as `Authorization: Bearer <token>`. */
  readonly token?: string | undefined
}

export interface MutationOptions {
  readonly idempotencyKey?: string | undefined
}

/**
 * The answer the current fiber's last request got: set as it arrives, so that an answer whose body
 * the contract does not describe can still be read (its body is cached) and reported as it is.
 */
const lastAnswer = FiberRef.unsafeMake<HttpClientResponse.HttpClientResponse | undefined>(undefined)

/** An answer the contract does not describe, as a BrainError: a refusal's own code, or `bad_response`. */
const undescribed = (e: ParseResult.ParseError): Effect.Effect<never, ParseResult.ParseError | BrainError> =>
  Effect.flatMap(FiberRef.get(lastAnswer), (response): Effect.Effect<never, ParseResult.ParseError | BrainError> => {
    if (response === undefined) return Effect.fail(e)
    if (response.status >= 200 && response.status < 300) {
      return Effect.fail(
        new BrainError({
          code: "bad_response",
          status: response.status,
          retryable: false,
          message: `an answer outside the contract: ${e.message}`
        })
      )
    }
    // The decoder read the body already; `arrayBuffer` answers that same read again.
    return response.arrayBuffer.pipe(
      Effect.map((bytes) => new TextDecoder().decode(bytes)),
      Effect.orElseSucceed(() => ""),
      Effect.flatMap((text) => Effect.fail(fromAnswer(response.status, text)))
    )
  })

const makeApi = (options: BrainClientOptions) =>
  HttpApiClient.make(BrainApi, {
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    transformClient: (client) =>
      (options.token === undefined ? client : HttpClient.mapRequest(client, HttpClientRequest.bearerToken(options.token))).pipe(
        HttpClient.tap((response) => FiberRef.set(lastAnswer, response))
      ),
    transformResponse: (decoding) => Effect.catchIf(decoding, ParseResult.isParseError, undescribed)
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
type HostRoutes = BrainApiClient["hosts"]

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
  /** A host's routes (docs/environments.md, "The `host` driver"): `register` with the API token,
   * the others with the host's own (a client made with it). */
  readonly hosts: {
    readonly register: () => Effect.Effect<typeof Schemas.HostRegistered.Type, Refusals<HostRoutes["register"]> | BrainError>
    /**
     * A call's result, or several at once (`{results}`: all taken or none); retried while
     * uncertain (a 409 `conflict` says an earlier attempt landed).
     */
    readonly results: (
      hostId: string,
      result: typeof Schemas.HostResultBody.Type
    ) => Effect.Effect<void, Refusals<HostRoutes["results"]> | BrainError>
    /** A tool-origin Event of a call in flight, sent once. */
    readonly events: (
      hostId: string,
      event: typeof Schemas.HostEvent.Type
    ) => Effect.Effect<typeof Schemas.HostEventCommitted.Type, Refusals<HostRoutes["events"]> | BrainError>
  }
}

const isNotAnAnswer = (e: unknown): e is NotAnAnswer => HttpClientError.isHttpClientError(e) || ParseResult.isParseError(e)

/** A failure that is not an answer of the contract, as a BrainError (or, for a request the
 * contract refuses, the InvalidRequest the server would answer). */
const toBrainError = (e: NotAnAnswer): Effect.Effect<BrainError | InvalidRequest> => {
  // Answers are decoded under `transformResponse`: a ParseError here is the request's own.
  if (ParseResult.isParseError(e)) return Effect.succeed(new InvalidRequest({ message: `the request is not valid: ${e.message}` }))
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
 * `NotAnAnswer`. Every route wrapped here declares InvalidRequest.)
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
    const host = (id: string) => ({ id: id as HostId })
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
      },
      hosts: {
        register: () => reading(api.hosts.register()),
        // The payload is a union: the raw client takes one request shape per member.
        results: (hostId, result) =>
          reading(api.hosts.results({ path: host(hostId), payload: result } as Parameters<HostRoutes["results"]>[0])),
        events: (hostId, event) => mapErrors(api.hosts.events({ path: host(hostId), payload: event }))
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
