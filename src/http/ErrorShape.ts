/**
 * The error shaping after routing: every failure, the framework's own included (decode errors,
 * unknown routes, defects), answered as `{code, message, retryable, details?}`.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Cause, Effect, Option } from "effect"
import { Internal, isApiError, NotFound } from "../domain/Errors.js"
import { decodeRefused, invalid, toResponse } from "./Errors.js"

/**
 * Whether an `HttpApiDecodeError` is the answer's, not the request's. The platform's route fails
 * with one for a request that does not decode (its path, payload, headers, query) and for a
 * success it cannot encode (a value off the contract, JSON that cannot be written), and keeps
 * only the formatted issues. Its success encoder is a transformation from the declared
 * `HttpServerResponse` to the route's schema, so its failure's message opens with
 * `(<declaration schema> <-> …)`, which no request schema's does (checked by
 * test/http/ResponseEncoding.test.ts against the pinned platform).
 */
export const answerEncodeFailed = (message: string | undefined): boolean =>
  message !== undefined && message.startsWith("(<declaration schema> <-> ")

/** Turns any failure into Brain's error body. Defects are logged and answered 500 `internal`. */
export const shapeError = (cause: Cause.Cause<unknown>): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const e = failure.value as { _tag?: string; message?: string; issues?: unknown }
    if (isApiError(e)) return Effect.succeed(toResponse(e))
    if (e._tag === "HttpApiDecodeError") {
      // The server's fault, never the request's: logged with what failed, answered 500.
      if (answerEncodeFailed(e.message)) {
        return Effect.zipRight(
          Effect.logError("an answer could not be encoded", e.message),
          Effect.succeed(toResponse(new Internal({ message: "the server could not encode its answer; see its log" })))
        )
      }
      return Effect.succeed(toResponse(decodeRefused(Array.isArray(e.issues) ? e.issues : [])))
    }
    if (e._tag === "RouteNotFound") return Effect.succeed(toResponse(new NotFound({ message: "no such route" })))
    if (e._tag === "RequestError") {
      return Effect.succeed(toResponse(invalid(`the request could not be read: ${e.message}`)))
    }
  }
  if (Cause.isInterruptedOnly(cause)) return Effect.succeed(HttpServerResponse.empty({ status: 499 }))
  return Effect.zipRight(
    Effect.logError("unexpected failure answering a request", cause),
    Effect.succeed(toResponse(new Internal({ message: "the server failed to answer; see its log" })))
  )
}
