/**
 * Runs a mutating request under its `Idempotency-Key`: the claim is durable before the work, the
 * answer (success or refusal) is recorded after it and replayed byte for byte; a different body
 * is `conflict`; a claim with no answer is `ambiguous` and never runs again. Once claimed, the
 * work and the recording run to the end even if the client goes away.
 *
 * - An answer the store did not keep (above its maximum) replays as 409 `ambiguous` saying the
 *   request completed with its status: details `{ambiguous: false, status, answer_bytes}`.
 * - A store that failed is a retryable 500; a damaged idempotency log is 503
 *   `idempotency_unavailable` (not retryable: an operator must repair the log).
 */
import { HttpServerResponse } from "@effect/platform"
import * as crypto from "node:crypto"
import { Effect } from "effect"
import type { Answer, IdempotencyError, IdempotencyShape } from "../services/Idempotency.js"
import { type ApiFailure, apiFailure, bodyOf } from "./Errors.js"

const canonical = (v: unknown): string => {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`
  if (v !== null && typeof v === "object") {
    const keys = Object.keys(v).filter((k) => (v as any)[k] !== undefined).sort()
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((v as any)[k])}`).join(",")}}`
  }
  return JSON.stringify(v) ?? "null"
}

export const hashRequest = (v: unknown) => crypto.createHash("sha256").update(canonical(v)).digest("hex")

export const jsonAnswer = (status: number, body: unknown, headers: Readonly<Record<string, string>> = {}): Answer => ({
  status,
  headers: { "content-type": "application/json", ...headers },
  body: JSON.stringify(body)
})

export const emptyAnswer = (status: number): Answer => ({ status, headers: {}, body: "" })

const failureAnswer = (e: ApiFailure): Answer => ({
  status: e.status,
  headers: { "content-type": "application/json" },
  body: bodyOf(e)
})

export const respond = (a: Answer) => {
  const { "content-type": contentType, ...headers } = a.headers
  return a.body === "" && contentType === undefined
    ? HttpServerResponse.empty({ status: a.status, headers })
    : HttpServerResponse.text(a.body, { status: a.status, contentType: contentType ?? "application/json", headers })
}

/** The store's own failure, as the client sees it. */
export const storeFailure = (e: IdempotencyError) =>
  e._tag === "IdempotencyLogDamaged"
    ? apiFailure(
      "idempotency_unavailable",
      `${e.message}. The log must be repaired: an operator stops the server and runs \`brain idempotency repair <data-dir>\`. Requests without an Idempotency-Key are served.`
    )
    : apiFailure("internal", `the idempotency store failed: ${e.reason}`, { retryable: true })

/** The replay of an answer that was above the store's maximum: what is known, and no body. */
export const notKeptFailure = (status: number, bytes: number) =>
  apiFailure(
    "ambiguous",
    `the request with this Idempotency-Key completed with HTTP status ${status}, but its answer of ${bytes} bytes was above the recording maximum and was not kept; inspect the session instead`,
    { details: { ambiguous: false, status, answer_bytes: bytes } }
  )

export const idempotent = (
  store: IdempotencyShape,
  scope: string,
  key: string | undefined,
  request: unknown,
  work: Effect.Effect<Answer, ApiFailure>
): Effect.Effect<HttpServerResponse.HttpServerResponse, ApiFailure> => {
  if (key === undefined) return Effect.map(Effect.catchAll(work, (e) => Effect.succeed(failureAnswer(e))), respond)
  return Effect.gen(function*() {
    const claim = yield* store.claim(scope, key, hashRequest(request)).pipe(Effect.mapError(storeFailure))
    switch (claim._tag) {
      case "Replay":
        return respond(claim.answer)
      case "AnswerNotKept":
        return yield* Effect.fail(notKeptFailure(claim.status, claim.bytes))
      case "Conflict":
        return yield* Effect.fail(apiFailure("conflict", "this Idempotency-Key was used with a different request"))
      case "Ambiguous":
        return yield* Effect.fail(
          apiFailure(
            "ambiguous",
            claim.inFlight
              ? "a request with this Idempotency-Key is still in progress"
              : "a request with this Idempotency-Key was accepted but its answer was never recorded; inspect the session before choosing a new key",
            { retryable: claim.inFlight }
          )
        )
      case "Claimed":
        return yield* Effect.uninterruptible(
          Effect.gen(function*() {
            const answer = yield* Effect.catchAll(work, (e) => Effect.succeed(failureAnswer(e)))
            yield* store.complete(scope, key, answer).pipe(
              Effect.catchAll((e) => Effect.logError("recording an idempotent answer failed", e.message))
            )
            return respond(answer)
          })
        )
    }
  })
}
