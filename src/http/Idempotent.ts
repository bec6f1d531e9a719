/**
 * Runs a mutating request under its `Idempotency-Key`: the claim is durable before the work; a
 * different body is `conflict`; a claim with no answer is `ambiguous` and never runs again. Once
 * claimed, the work and what it leaves under the key run to the end even if the client goes away.
 * What the work leaves under the key:
 *
 * - a 2xx answer: recorded, and replayed byte for byte;
 * - a failure that may have had effects (`details.ambiguous`): the caller gets the failure, and a
 *   409 `ambiguous` answer saying so is recorded — the request is never run again under the key;
 * - a failure where nothing happened that is 5xx or retryable (`session_busy`, …): the key is
 *   released, durably, so a retry with it runs; not `creation_failed` (502), whose failed session
 *   exists: running it again would create another, so it is replayed like a refusal; so is a
 *   `not_found` of a request about a session (a cancel, end or delete of an id that does not
 *   exist: never minted again, so its retry is refused alike, and the log keeps nothing for it);
 * - any other refusal (a definite 4xx): recorded and replayed as it is.
 *
 * - An answer the store did not keep (above its maximum) replays as 409 `ambiguous` saying the
 *   request completed with its status: details `{ambiguous: false, status, answer_bytes}`.
 * - Sends and submits (`idempotentTurn`) keep their key in their session's journal with the turn:
 *   the store only holds it in memory while the request runs, and keeps it only for a request
 *   refused before its turn started (but `not_found`, which frees it), or once its session is
 *   deleted (the delete hands the journal's keys over: `adopt`).
 * - Once the server has begun to stop (`stopping`), a key is only looked up: a key held answers as
 *   ever (its answer, or 409 `ambiguous`, in flight or not), and one not held is refused 503
 *   `overloaded` with nothing written under it and no work run, so that its retry runs once the
 *   server is back. A retry whose first answer was lost (a create's, naming its session) gets it
 *   during the drain too. Sends and submits look their keys up in their sessions (`idempotentTurn`).
 * - A store that failed is a retryable 500; a damaged idempotency log is 503
 *   `idempotency_unavailable` (not retryable: an operator must repair the log); a store at its
 *   bound on live keys (BRAIN_MAX_IDEMPOTENCY_KEYS) is 503 `overloaded`, retryable, for a new key:
 *   nothing ran, nothing is kept. A turn refused before it started whose refusal the full store
 *   cannot keep is answered so too; an outcome that may have had effects is kept past the bound.
 *   A send or submit whose session holds its maximum of keys (BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS)
 *   is refused by the session the same way, and its key released like any retryable refusal's.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as crypto from "node:crypto"
import { Effect } from "effect"
import { Ambiguous, type ApiError, Conflict, IdempotencyUnavailable, Internal, mayHaveHadEffects, Overloaded } from "../domain/Errors.js"
import { type Answer, type ClaimResult, type IdempotencyError, type IdempotencyShape, sessionOfScope } from "../services/Idempotency.js"
import type { Keyed, TurnRequest } from "../services/Sessions.js"
import { bodyOf, refusalHeaders, statusOf, stopping as stoppingRefusal, withIssues } from "./Errors.js"

const canonical = (v: unknown): string => {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`
  if (v !== null && typeof v === "object") {
    const keys = Object.keys(v).filter((k) => (v as any)[k] !== undefined).sort()
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((v as any)[k])}`).join(",")}}`
  }
  return JSON.stringify(v) ?? "null"
}

// One-shot `crypto.hash` (Node 20.12+): about a third of a Hash object's cost for a short input.
export const hashRequest = (v: unknown) => crypto.hash("sha256", canonical(v), "hex")

export const jsonAnswer = (status: number, body: unknown, headers: Readonly<Record<string, string>> = {}): Answer => ({
  status,
  headers: { "content-type": "application/json", ...headers },
  body: JSON.stringify(body)
})

export const emptyAnswer = (status: number): Answer => ({ status, headers: {}, body: "" })

/** What a retry of a request that failed after it may have taken effect answers. */
const ambiguousAnswer = (e: ApiError) =>
  failureAnswer(
    new Ambiguous({
      message:
        `the request with this Idempotency-Key failed after it may have taken effect (${e.code}: ${e.message}); it is not run again under this key: inspect the session before choosing a new key`,
      details: { ambiguous: true, status: statusOf(e.code), failure: { code: e.code, message: e.message } }
    })
  )

const failureAnswer = (e: ApiError): Answer => ({
  status: statusOf(e.code),
  headers: { "content-type": "application/json", ...refusalHeaders(e) },
  body: bodyOf(withIssues(e))
})

export const respond = (a: Answer) => {
  const { "content-type": contentType, ...headers } = a.headers
  return a.body === "" && contentType === undefined
    ? HttpServerResponse.empty({ status: a.status, headers })
    : HttpServerResponse.text(a.body, { status: a.status, contentType: contentType ?? "application/json", headers })
}

/** The store's own failure, as the client sees it. */
export const storeFailure = (e: IdempotencyError): IdempotencyUnavailable | Overloaded | Internal =>
  e._tag === "IdempotencyLogDamaged"
    ? new IdempotencyUnavailable({
      message:
        `${e.message}. The log must be repaired: an operator stops the server and runs \`brain idempotency repair <data-dir>\`. Requests without an Idempotency-Key are served.`
    })
    : e._tag === "IdempotencyFull" && e.session !== undefined
    ? new Overloaded({
      message:
        `the server holds ${e.keys ?? e.maxKeys} Idempotency-Keys of requests about session ${e.session} (its cancels, ends, deletes and refused sends), its share of the idempotency log (BRAIN_MAX_SESSION_LOG_KEYS is ${e.maxKeys}), and takes a new one for it once older ones expire (BRAIN_REQUEST_RETENTION_SECS); nothing was done: retry later with the same key. Keys already used still answer, requests without a key are served, and other sessions are not affected`,
      details: { setting: "BRAIN_MAX_SESSION_LOG_KEYS", keys: e.keys ?? e.maxKeys, max_keys: e.maxKeys }
    })
    : e._tag === "IdempotencyFull"
    ? new Overloaded({
      message:
        `the server holds its maximum of ${e.maxKeys} live Idempotency-Keys (BRAIN_MAX_IDEMPOTENCY_KEYS) and takes a new one once older ones expire (BRAIN_REQUEST_RETENTION_SECS); nothing was done: retry later with the same key. Keys already used still answer, and requests without a key are served`
    })
    : new Internal({ message: `the idempotency store failed: ${e.reason}`, retryable: true })

/** The replay of an answer that was above the store's maximum: what is known, and no body. */
export const notKeptFailure = (status: number, bytes: number) =>
  new Ambiguous({
    message:
      `the request with this Idempotency-Key completed with HTTP status ${status}, but its answer of ${bytes} bytes was above the recording maximum and was not kept; inspect the session instead`,
    details: { ambiguous: false, status, answer_bytes: bytes }
  })

/** What a keyed request can be refused with before its work runs (the store's own failures included). */
export type IdempotencyRefusal = Conflict | Ambiguous | IdempotencyUnavailable | Overloaded | Internal

/** A key used with another body, or claimed and not answered (with the session its claim named, if any). */
type Unanswered =
  | Exclude<Keyed<unknown>, { readonly _tag: "Answered" }>
  | Extract<ClaimResult, { readonly _tag: "Ambiguous" }>

/**
 * The refusal a key used with another body, or claimed and not answered, stands for (in the store
 * or a session's journal). A claim that named its session (a create's) names it in
 * `details.session_id`: the answer that would have carried the id was lost, and the client must
 * be able to inspect what the request left.
 */
const keyedRefusal = (seen: Unanswered) => {
  if (seen._tag === "Conflict") return new Conflict({ message: "this Idempotency-Key was used with a different request" })
  const session = "session" in seen ? seen.session : undefined
  const named = session === undefined ? "" : ` (session ${session})`
  return new Ambiguous({
    message: seen.inFlight
      ? `a request with this Idempotency-Key is still in progress${named}; retry later with the same key to get its answer (a new key would run the request again)`
      : session === undefined
      ? "a request with this Idempotency-Key was accepted but its answer was never recorded; inspect the session before choosing a new key"
      : `a request with this Idempotency-Key was accepted but its answer was never recorded; it is not run again. It named session ${session} (details.session_id): inspect it before choosing a new key (a 404 means it was never created)`,
    retryable: seen.inFlight,
    // It may have taken effect (it is running, or ran without its answer recorded).
    details: session === undefined ? { ambiguous: true, in_flight: seen.inFlight } : { ambiguous: true, in_flight: seen.inFlight, session_id: session }
  })
}

/** A key already claimed or answered: its replay, or why the request is refused. */
const refusedClaim = (claim: Exclude<ClaimResult, { readonly _tag: "Claimed" }>) => {
  switch (claim._tag) {
    case "Replay":
      return Effect.succeed(respond(claim.answer))
    case "AnswerNotKept":
      return Effect.fail(notKeptFailure(claim.status, claim.bytes))
    case "Conflict":
    case "Ambiguous":
      return Effect.fail(keyedRefusal(claim))
  }
}

/**
 * What a claimed key keeps when its request failed: 409 ambiguous if it may have had effects (past
 * the store's bound if need be); a release when nothing happened and a retry may succeed; the
 * refusal itself otherwise. Returns the answer for the caller: the failure's, or 503 `overloaded`
 * for a refusal of a reserved key (a turn refused before it started) that the store, at its bound,
 * could not keep: nothing happened and nothing is kept, so the retry with the key runs.
 */
const settleFailure = (store: IdempotencyShape, scope: string, key: string, e: ApiError) =>
  Effect.gen(function*() {
    if (mayHaveHadEffects(e)) {
      yield* store.complete(scope, key, ambiguousAnswer(e), BEYOND_BOUND).pipe(Effect.catchAll(logFailure("recording an ambiguous outcome")))
    } else if (((statusOf(e.code) >= 500 || e.retryable) && e.code !== "creation_failed") || (e.code === "not_found" && sessionOfScope(scope) !== undefined)) {
      // A session that does not exist: its id is never minted again, so a retry is refused the
      // same way; keeping the refusal would let requests about made-up sessions fill the log.
      yield* store.release(scope, key).pipe(Effect.catchAll(logFailure("releasing an idempotency key")))
    } else {
      const full = yield* store.complete(scope, key, failureAnswer(e)).pipe(
        Effect.as(undefined),
        Effect.catchAll((err) => err._tag === "IdempotencyFull" ? Effect.succeed(err) : Effect.as(logFailure("recording an idempotent refusal")(err), undefined))
      )
      if (full !== undefined) return failureAnswer(storeFailure(full))
    }
    return failureAnswer(e)
  })

const BEYOND_BOUND = { beyondBound: true } as const

const logFailure = (what: string) => (e: IdempotencyError) => Effect.logError(`${what} failed: ${e.message}`)

/**
 * A send or submit under its `Idempotency-Key`, claimed in its session's journal (Sessions'
 * `Keyed`) rather than in the store: the store only reserves the key in this process while the
 * request runs (so concurrent retries see it in flight) and writes nothing, unless the request is
 * refused before its turn starts, when the refusal is kept as `idempotent` keeps it. The store is
 * asked first: it holds those refusals, and answers recorded before turns kept their keys.
 */
export const idempotentTurn = <A, E extends ApiError>(
  store: IdempotencyShape,
  scope: string,
  key: string | undefined,
  request: unknown,
  work: (request: TurnRequest | undefined) => Effect.Effect<Keyed<A>, E>,
  answer: (value: A) => Answer
): Effect.Effect<HttpServerResponse.HttpServerResponse, IdempotencyRefusal> => {
  const run = (request: TurnRequest | undefined) =>
    Effect.flatMap(work(request), (seen) => seen._tag === "Answered" ? Effect.succeed(answer(seen.value)) : Effect.fail(keyedRefusal(seen)))
  if (key === undefined) return Effect.map(Effect.catchAll(run(undefined), (e) => Effect.succeed(failureAnswer(e))), respond)
  const hash = hashRequest(request)
  return Effect.gen(() => keyedTurnOf({ store, scope, key, hash, work, answer }))
}

/** A keyed turn's request, as `idempotentTurn` was given it, its key present and its body hashed. */
interface KeyedTurn<A, E extends ApiError> {
  readonly store: IdempotencyShape
  readonly scope: string
  readonly key: string
  readonly hash: string
  readonly work: (request: TurnRequest | undefined) => Effect.Effect<Keyed<A>, E>
  readonly answer: (value: A) => Answer
}

// Generator bodies made once, not per request (docs/benchmarks.md, "Generator bodies made once").
function* keyedTurnOf<A, E extends ApiError>(t: KeyedTurn<A, E>) {
  const claim = yield* t.store.reserve(t.scope, t.key, t.hash).pipe(Effect.mapError(storeFailure))
  if (claim._tag !== "Claimed") return yield* refusedClaim(claim)
  return yield* Effect.uninterruptible(Effect.gen(() => claimedTurnOf(t)))
}

function* claimedTurnOf<A, E extends ApiError>({ answer, hash, key, scope, store, work }: KeyedTurn<A, E>) {
  const outcome = yield* Effect.either(work({ key, hash }))
  if (outcome._tag === "Right") {
    // The session's journal holds the key from here: the reservation goes, nothing is written.
    yield* store.release(scope, key).pipe(Effect.catchAll(logFailure("dropping an idempotency reservation")))
    const seen = outcome.right
    if (seen._tag === "Answered") return respond(answer(seen.value))
    return yield* Effect.fail(keyedRefusal(seen))
  }
  // No such session: the key is freed, not kept. An id is never minted twice, so a retry is
  // refused the same way, unless a delete that raced this request has since handed the
  // session's keys over (`adopt`), whose answer the retry then gets.
  if (outcome.left.code === "not_found") {
    yield* store.release(scope, key).pipe(Effect.catchAll(logFailure("releasing an idempotency key")))
    return respond(failureAnswer(outcome.left))
  }
  return respond(yield* settleFailure(store, scope, key, outcome.left))
}

/** How `idempotent` runs a keyed request. */
export interface IdempotentOptions {
  /**
   * The session the request will act on when it picks the id itself (a create's, minted before
   * the claim): the claim records it durably, so a retry whose first answer was lost learns it
   * (`keyedRefusal`).
   */
  readonly session?: string
  /**
   * Whether the server has begun to stop, asked as the request reaches its key: then the key is
   * only looked up (`lookupWhileStopping`), and the work never runs.
   */
  readonly stopping?: () => boolean
}

/**
 * A request under its `Idempotency-Key`, claimed in the store (or, once the server is stopping,
 * only looked up there).
 */
export const idempotent = <E extends ApiError>(
  store: IdempotencyShape,
  scope: string,
  key: string | undefined,
  request: unknown,
  work: Effect.Effect<Answer, E>,
  options: IdempotentOptions = {}
): Effect.Effect<HttpServerResponse.HttpServerResponse, IdempotencyRefusal> => {
  if (key === undefined) return Effect.map(Effect.catchAll(work, (e) => Effect.succeed(failureAnswer(e))), respond)
  return Effect.gen(function*() {
    const hash = hashRequest(request)
    if (options.stopping?.() === true) return yield* lookupWhileStopping(store, scope, key, hash)
    const claim = yield* store.claim(scope, key, hash, options.session).pipe(Effect.mapError(storeFailure))
    if (claim._tag !== "Claimed") return yield* refusedClaim(claim)
    return yield* Effect.uninterruptible(
      Effect.gen(function*() {
        const outcome = yield* Effect.either(work)
        if (outcome._tag === "Right") {
          yield* store.complete(scope, key, outcome.right).pipe(Effect.catchAll(logFailure("recording an idempotent answer")))
          return respond(outcome.right)
        }
        return respond(yield* settleFailure(store, scope, key, outcome.left))
      })
    )
  })
}

/**
 * A keyed request's key looked up once the server has begun to stop: the answer it holds (or why
 * it is refused: another body, a request in flight or never answered), else 503 `overloaded`. A
 * free key is only reserved in this process and the reservation dropped at once, so nothing is
 * written and a retry with it runs once the server is back. Uninterruptible, so that a client
 * gone between the two steps leaves no reservation behind.
 */
const lookupWhileStopping = (store: IdempotencyShape, scope: string, key: string, hash: string) =>
  Effect.uninterruptible(Effect.gen(function*() {
    const claim = yield* store.reserve(scope, key, hash).pipe(Effect.mapError(storeFailure))
    if (claim._tag !== "Claimed") return yield* refusedClaim(claim)
    yield* store.release(scope, key).pipe(Effect.catchAll(logFailure("dropping an idempotency reservation")))
    return respond(failureAnswer(stoppingRefusal()))
  }))
