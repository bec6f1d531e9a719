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
 * Idempotency-Keys: a mutating call's key is the caller's, or one minted when the call's Effect
 * is built — not when it runs — so every run of that one value (the SDK's own retries, and the
 * caller's `Effect.retry` or `Effect.repeat`) sends the same key and the server runs the request
 * at most once. Every error of a keyed call carries the key (`idempotencyKey`), so a caller that
 * builds the call again can pass the same key.
 *
 * Retries: a call whose outcome is uncertain — no answer arrived, or 503 `overloaded` with
 * `retryable: true` — is sent again, at most MAX_ATTEMPTS times in all, RETRY_BASE_MS doubled
 * apart, with the same arguments, so a mutating call repeats its Idempotency-Key: the server runs
 * it at most once and replays its answer. A 409 `ambiguous` with `retryable: true` says an earlier
 * attempt under the key is still running (its connection dropped, the server did not stop): the
 * call asks again under the same key, IN_PROGRESS_FIRST_MS doubled up to IN_PROGRESS_MAX_MS apart,
 * for at most IN_PROGRESS_WAIT_MS, and answers with that first attempt's answer once it is
 * recorded. Every other answer (a final 409 `ambiguous`, `retryable: false`, included) is final.
 * A host's Event is sent once: the server does not deduplicate it. A host's registration is not
 * deduplicated either (its answer holds a token the server keeps no copy of), so it is sent again
 * only when it cannot have reached the server — the connection was refused, the name did not
 * resolve — or when the server answered that it took nothing (503 `overloaded`, retryable).
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
import * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Clock, Context, Duration, Effect, Either, FiberRef, Layer, ParseResult, Schedule } from "effect"
import { InvalidRequest } from "../domain/Errors.js"
import type { HostId, SessionId } from "../domain/Ids.js"
import { BrainApi } from "../http/Api.js"
import { decodeRefused } from "../http/Errors.js"
import * as Schemas from "../http/Schemas.js"
import { BrainError, fromAnswer, isUncertain, networkError } from "./Errors.js"

/** Sends of one call whose outcome is uncertain, the first included: enough to ride out a
 * dropped connection or a short overload, few enough that a dead server is reported quickly. */
export const MAX_ATTEMPTS = 4
/** Milliseconds before the first retry, doubled before each next one (200, 400, 800). */
export const RETRY_BASE_MS = 200
/**
 * Milliseconds a call keeps asking after a request under its key that the server says is still
 * running (409 `ambiguous`, retryable): the server's default turn wall time (BRAIN_MAX_TURN_SECS,
 * 1800 s), the longest a synchronous send's first request normally runs. The call's own signal or
 * timeout stops it sooner.
 */
export const IN_PROGRESS_WAIT_MS = 1_800_000
/** Milliseconds before asking again about a request still running, doubled up to the max: a
 * short turn's answer is picked up quickly, a long one costs the server one cheap refusal per
 * IN_PROGRESS_MAX_MS. */
const IN_PROGRESS_FIRST_MS = 100
const IN_PROGRESS_MAX_MS = 2_000

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
type AgentloopRoutes = BrainApiClient["agentloops"]

/** An error of a keyed call: it carries the Idempotency-Key the request was sent with. */
export type WithKey<E> = E extends unknown ? E & { readonly idempotencyKey: string } : never

export interface BrainClientShape {
  readonly api: BrainApiClient
  readonly sessions: {
    readonly create: (
      body: typeof Schemas.CreateSessionRequest.Type,
      options?: MutationOptions
    ) => Effect.Effect<SessionSummary, WithKey<Refusals<Routes["create"]> | BrainError>>
    readonly list: (
      params?: typeof Schemas.ListParams.Type
    ) => Effect.Effect<typeof Schemas.SessionList.Type, Refusals<Routes["list"]> | BrainError>
    readonly get: (id: string) => Effect.Effect<SessionSummary, Refusals<Routes["get"]> | BrainError>
    /** A synchronous turn: its outcome, ended or failed. */
    readonly send: (
      id: string,
      input: TurnInput,
      options?: MutationOptions
    ) => Effect.Effect<typeof Schemas.TurnOutcome.Type, WithKey<Refusals<Routes["send"]> | BrainError>>
    /** An async submission (`Prefer: respond-async`): the receipt of its committed `turn_started`. */
    readonly submit: (
      id: string,
      input: TurnInput,
      options?: MutationOptions
    ) => Effect.Effect<typeof Schemas.Receipt.Type, WithKey<Refusals<Routes["send"]> | BrainError>>
    /** One page of Events after `after`; an empty page is the end. */
    readonly events: (
      id: string,
      params?: typeof Schemas.EventsParams.Type
    ) => Effect.Effect<typeof Schemas.EventPage.Type, Refusals<Routes["events"]> | BrainError>
    readonly transcript: (id: string) => Effect.Effect<typeof Schemas.Transcript.Type, Refusals<Routes["transcript"]> | BrainError>
    readonly interrupt: (
      id: string,
      options?: MutationOptions
    ) => Effect.Effect<SessionSummary, WithKey<Refusals<Routes["cancel"]> | BrainError>>
    readonly end: (id: string, options?: MutationOptions) => Effect.Effect<SessionSummary, WithKey<Refusals<Routes["end"]> | BrainError>>
    readonly delete: (id: string, options?: MutationOptions) => Effect.Effect<void, WithKey<Refusals<Routes["delete"]> | BrainError>>
  }
  /** Uploaded WebAssembly modules (docs/abi.md): Agentloops and tools, by the SHA-256 of their bytes. */
  readonly agentloops: {
    /**
     * `POST /v1/agentloops`: uploads a module's bytes (`application/wasm`), validated and compiled
     * by the server before it is stored; answers `{id, bytes, loop, tool}`. The same bytes answer
     * the same id. Refusals are BrainErrors with the server's code (docs/api.md).
     */
    readonly upload: (module: Uint8Array, options?: MutationOptions) => Effect.Effect<typeof Schemas.AgentloopAdmitted.Type, WithKey<BrainError>>
    readonly list: () => Effect.Effect<typeof Schemas.AgentloopList.Type, Refusals<AgentloopRoutes["list"]> | BrainError>
    readonly remove: (id: string, options?: MutationOptions) => Effect.Effect<void, WithKey<Refusals<AgentloopRoutes["remove"]> | BrainError>>
  }
  /** A host's routes (docs/environments.md, "The `host` driver"): `register` with the API token,
   * the others with the host's own (a client made with it). */
  readonly hosts: {
    readonly register: () => Effect.Effect<typeof Schemas.HostRegistered.Type, Refusals<HostRoutes["register"]> | BrainError>
    /** Removes the host's registration (with its own token): its stream ends and its token opens nothing more. */
    readonly unregister: (hostId: string) => Effect.Effect<void, Refusals<HostRoutes["unregister"]> | BrainError>
    /**
     * A call's result, or several at once (`{results}`: all taken or none); retried while
     * uncertain (the same result again is answered as the first was: 204 once its outcome is durable).
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
  // Its issues as the server lists them in `details` (docs/api.md, Errors): `_tag`, `path`, `message`.
  if (ParseResult.isParseError(e)) {
    const refused = decodeRefused(ParseResult.ArrayFormatter.formatErrorSync(e))
    return Effect.succeed(new InvalidRequest({ message: `the request is not valid: ${refused.message}`, details: refused.details }))
  }
  if (e._tag === "RequestError") return Effect.succeed(networkError(e.cause ?? e.message))
  const response = e.response
  if (response.status >= 200 && response.status < 300) {
    // A status the route does not declare (HttpApiClient's `orElse`: a Decode error with no cause,
    // nothing of the body read) is an answer, outside the contract (a proxy's): final, not retried.
    if (e.reason === "Decode" && e.cause === undefined) {
      return response.text.pipe(
        Effect.orElseSucceed(() => ""),
        Effect.map((text) =>
          new BrainError({
            code: "bad_response",
            status: response.status,
            retryable: false,
            message: `an answer outside the contract: HTTP ${response.status} is not a status this route answers${text.length > 0 ? `: ${text.slice(0, 200)}` : ""}`
          })
        )
      )
    }
    // A 2xx whose body could not be read was cut off: its outcome is as uncertain as no answer.
    return Effect.succeed(networkError(e.message))
  }
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

interface Refusal {
  readonly _tag?: unknown
  readonly retryable?: unknown
}

/** Uncertain in a way a retry under the same key settles: no answer arrived, or a refusal for load,
 * before the request was taken, that the server says a retry may get past. */
const uncertain = (e: unknown) =>
  e instanceof BrainError ? isUncertain(e) : (e as Refusal)._tag === "Overloaded" && (e as Refusal).retryable === true

/** A request under the same key is still running on the server (not the crash case, which is
 * `ambiguous` with `retryable: false`): its answer will be recorded, and replayed to this key. */
const inProgress = (e: unknown) =>
  (e instanceof BrainError ? e.code === "ambiguous" : (e as Refusal)._tag === "Ambiguous") && (e as Refusal).retryable === true

/**
 * `call`, sent again with the same arguments while its outcome is uncertain (at most MAX_ATTEMPTS
 * sends, RETRY_BASE_MS doubled apart) and while the server says an earlier send is still running
 * (for at most IN_PROGRESS_WAIT_MS, IN_PROGRESS_FIRST_MS doubled up to IN_PROGRESS_MAX_MS apart).
 * The two are counted apart: waiting for a long turn does not use up the retries of a lost answer.
 */
const withRetries = <A, E>(call: Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.gen(function*() {
    let sends = 1
    let waitingSince: number | undefined
    let pause = IN_PROGRESS_FIRST_MS
    for (;;) {
      const attempt = yield* Effect.either(call)
      if (Either.isRight(attempt)) return attempt.right
      const e = attempt.left
      if (uncertain(e) && sends < MAX_ATTEMPTS) {
        yield* Effect.sleep(Duration.millis(RETRY_BASE_MS * 2 ** (sends - 1)))
        sends++
        continue
      }
      if (inProgress(e)) {
        const now = yield* Clock.currentTimeMillis
        waitingSince ??= now
        if (now - waitingSince < IN_PROGRESS_WAIT_MS) {
          yield* Effect.sleep(Duration.millis(pause))
          pause = Math.min(pause * 2, IN_PROGRESS_MAX_MS)
          continue
        }
      }
      return yield* Effect.fail(e)
    }
  })

/** Gives a keyed call's error its key. Errors are made afresh for each answer (decoded from its
 * body, or built here), so the one given the key is this call's own. */
const withKey = <E>(e: E, key: string): WithKey<E> => Object.assign(e as object, { idempotencyKey: key }) as WithKey<E>

/**
 * A mutating call under one Idempotency-Key for all its sends: the caller's, or one minted now,
 * as the Effect is built, so that running this same Effect again (`Effect.retry`, `Effect.repeat`)
 * sends it again too. `then` checks the answer; its errors carry the key as well.
 */
const mutating = <A, E, B = A, E2 = never>(
  options: MutationOptions | undefined,
  call: (key: string) => Effect.Effect<A, E>,
  then: (a: A) => Effect.Effect<B, E2> = Effect.succeed as (a: A) => Effect.Effect<B, E2>
): Effect.Effect<B, WithKey<Exclude<E, NotAnAnswer> | BrainError | E2>> => {
  const key = options?.idempotencyKey ?? globalThis.crypto.randomUUID()
  return withRetries(mapErrors(call(key))).pipe(
    Effect.flatMap(then),
    Effect.mapError((e) => withKey(e, key))
  )
}

/** Failure codes of a connection that could not be made, so the request was never sent. */
const NOT_SENT_CODES: ReadonlySet<string> = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"])

/** Whether a failure to get an answer happened before the request could reach the server: the
 * connection was refused or the name did not resolve (found in the fetch error's causes). */
const neverSent = (e: unknown, depth = 0): boolean => {
  if (typeof e !== "object" || e === null || depth > 6) return false
  const { code, cause, errors } = e as { readonly code?: unknown; readonly cause?: unknown; readonly errors?: unknown }
  if (typeof code === "string" && NOT_SENT_CODES.has(code)) return true
  if (Array.isArray(errors) && errors.length > 0 && errors.every((x) => neverSent(x, depth + 1))) return true
  return neverSent(cause, depth + 1)
}

/**
 * A request the server does not deduplicate (a host's registration): sent again only when it
 * cannot have been taken — it never reached the server, or the server answered that it took
 * nothing and a retry may succeed (503 `overloaded`, retryable).
 */
const unrepeatable = <A, E>(call: Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.retry(call, {
    schedule: Schedule.exponential(Duration.millis(RETRY_BASE_MS)),
    times: MAX_ATTEMPTS - 1,
    while: (e) =>
      HttpClientError.isHttpClientError(e)
        ? e._tag === "RequestError" && neverSent(e.cause)
        : !ParseResult.isParseError(e) && uncertain(e)
  })

const reading = <A, E>(call: Effect.Effect<A, E>) => withRetries(mapErrors(call))

const unexpected = (what: string) =>
  Effect.fail(new BrainError({ code: "bad_response", status: 0, retryable: false, message: what }))

/**
 * `POST /v1/agentloops` with the module's bytes. Sent directly, not through the raw client: the
 * route's body is bytes, which the contract describes only in its OpenAPI document (`moduleBody`),
 * so the raw client's `admit` has no body to send.
 */
const uploadModule = (http: HttpClient.HttpClient, options: BrainClientOptions, key: string, module: Uint8Array) =>
  HttpClientRequest.post(`${options.baseUrl.replace(/\/+$/, "")}/v1/agentloops`).pipe(
    HttpClientRequest.bodyUint8Array(module, "application/wasm"),
    HttpClientRequest.setHeader("idempotency-key", key),
    (request) => (options.token === undefined ? request : HttpClientRequest.bearerToken(request, options.token)),
    http.execute,
    Effect.flatMap((response) =>
      response.status === 201
        ? HttpClientResponse.schemaBodyJson(Schemas.AgentloopAdmitted)(response).pipe(
          Effect.catchIf(ParseResult.isParseError, (e) =>
            Effect.fail(new BrainError({ code: "bad_response", status: 201, retryable: false, message: `an answer outside the contract: ${e.message}` })))
        )
        : response.text.pipe(Effect.orElseSucceed(() => ""), Effect.flatMap((text) => Effect.fail(fromAnswer(response.status, text))))
    )
  )

/** The client over an `HttpClient` from the context. */
export const make = (options: BrainClientOptions): Effect.Effect<BrainClientShape, never, HttpClient.HttpClient> =>
  Effect.map(Effect.zip(makeApi(options), HttpClient.HttpClient), ([api, http]): BrainClientShape => {
    const path = (id: string) => ({ id: id as SessionId })
    const host = (id: string) => ({ id: id as HostId })
    return {
      api,
      sessions: {
        create: (body, opts) => mutating(opts, (key) => api.sessions.create({ payload: body, headers: { "idempotency-key": key } })),
        list: (params = {}) => reading(api.sessions.list({ urlParams: params })),
        get: (id) => reading(api.sessions.get({ path: path(id) })),
        send: (id, input, opts) =>
          mutating(
            opts,
            (key) => api.sessions.send({ path: path(id), payload: { input }, headers: { "idempotency-key": key } }),
            (answer) => ("turn" in answer ? Effect.succeed(answer) : unexpected("a synchronous send was answered with a receipt"))
          ),
        submit: (id, input, opts) =>
          mutating(
            opts,
            (key) => api.sessions.send({ path: path(id), payload: { input }, headers: { "idempotency-key": key, prefer: "respond-async" } }),
            (answer) => ("turn" in answer ? unexpected("an async submission was answered with a turn's outcome") : Effect.succeed(answer))
          ),
        events: (id, params = {}) => reading(api.sessions.events({ path: path(id), urlParams: params })),
        transcript: (id) => reading(api.sessions.transcript({ path: path(id) })),
        interrupt: (id, opts) => mutating(opts, (key) => api.sessions.cancel({ path: path(id), headers: { "idempotency-key": key } })),
        end: (id, opts) => mutating(opts, (key) => api.sessions.end({ path: path(id), headers: { "idempotency-key": key } })),
        delete: (id, opts) => mutating(opts, (key) => api.sessions.delete({ path: path(id), headers: { "idempotency-key": key } }))
      },
      agentloops: {
        upload: (module, opts) => mutating(opts, (key) => uploadModule(http, options, key, module)),
        list: () => reading(api.agentloops.list()),
        remove: (id, opts) => mutating(opts, (key) => api.agentloops.remove({ path: { id }, headers: { "idempotency-key": key } }))
      },
      hosts: {
        register: () => mapErrors(unrepeatable(api.hosts.register())),
        // Retried while uncertain: a removal that landed answers a repeat 401 (the host is no longer known).
        unregister: (hostId) => reading(api.hosts.unregister({ path: host(hostId) })),
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
