/**
 * The `anthropic` provider: one streamed call to Anthropic's Messages API
 * (`POST {base_url}/v1/messages`, `anthropic-version: 2023-06-01`, `stream: true`).
 *
 * - The body is built first (anthropic/Request.ts); a request Anthropic cannot carry fails before
 *   anything is sent (`model_rejected`, not ambiguous).
 * - The key goes in `x-api-key` as a secret header only: never in a message, detail or result.
 * - It is sent once by models/Http.ts, which names every transport failure (an HTTP 529
 *   "overloaded" is a 5xx: `model_unavailable`, ambiguous).
 * - The events are folded as they arrive (anthropic/Events.ts). `message_stop` makes the answer
 *   whole: reading stops there, without waiting for the server to close the stream. A stream
 *   that closes before `message_stop` is `model_stream_broken`, ambiguous.
 *
 * Built on models/Http.ts (one POST through undici), not on @effect/ai-anthropic's client: that client
 * decodes every event against closed unions, so a new event, block or delta type, an error type
 * or stop reason it does not list (`model_context_window_exceeded`), or a `message_start` without
 * usage fails the whole answer; it also treats a stream that ends without `message_stop` as
 * complete, honours an SSE `retry:` by waiting, and reads error bodies without a bound
 * (docs/models.md).
 */
import { Effect, Either } from "effect"
import { ModelFailed } from "../../services/Models.js"
import { makeAnswerFold } from "./anthropic/Events.js"
import { API_VERSION, messagesUrl, requestBody } from "./anthropic/Request.js"
import { streamedPost } from "./Http.js"
import { type Provider, withCheckedCalls } from "./Provider.js"

export const anthropic: Provider = Effect.fn("Models.anthropic")(function*(call) {
  const body = requestBody(call)
  if (body instanceof ModelFailed) return yield* Effect.fail(body)
  const answer = makeAnswerFold(call.onDelta)
  return yield* streamedPost({
    url: messagesUrl(call.binding.base_url),
    headers: { "anthropic-version": API_VERSION, "content-type": "application/json" },
    ...(call.apiKey !== undefined ? { secretHeaders: { "x-api-key": call.apiKey } } : {}),
    body,
    limits: call.limits,
    provider: "Anthropic",
    onEvent: answer.onEvent,
    finish: withCheckedCalls("Anthropic", () => {
      const result = answer.finish()
      return result instanceof ModelFailed ? Either.left(result) : Either.right(result)
    })
  })
})
