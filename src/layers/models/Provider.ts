/**
 * A model provider: turns Brain's request into one streamed HTTP request to its API, sends it
 * once (models/Http.ts), hands each text or tool-argument delta to `onDelta` as it arrives, and
 * folds the stream into the complete result. It never retries, never falls over to another
 * target, and fails with a typed ModelFailed (services/Models.ts) saying what Brain knows.
 */
import type * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { type Effect, Either, type Redacted } from "effect"
import { nestsDeeperThan } from "../../domain/JsonText.js"
import { MAX_FAILURE_DETAILS_BYTES, MAX_JSON_DEPTH } from "../../domain/Limits.js"
import type { ModelDelta, ModelRequest, ModelResult } from "../../domain/Model.js"
import type { RecordedBinding } from "../../domain/ModelBinding.js"
import { ModelFailed } from "../../services/Models.js"
import type { StreamLimits } from "./Http.js"

export interface ProviderCall {
  /** What the session's binding stood for at its creation: provider, model, base URL, options. */
  readonly binding: RecordedBinding
  /** The key from the binding's `api_key_env`; sent in a header, never logged or recorded. */
  readonly apiKey: Redacted.Redacted | undefined
  readonly request: ModelRequest
  readonly onDelta: (delta: ModelDelta) => void
  readonly limits: StreamLimits
}

export type Provider = (call: ProviderCall) => Effect.Effect<ModelResult, ModelFailed, NodeHttpClient.Dispatcher>

/**
 * The request options of a call: the binding's, overridden by the call's own (an object). Brain's
 * own fields (model, messages, tools, stream) are the provider's to set and win over both.
 */
export const mergedOptions = (call: ProviderCall): Record<string, unknown> => {
  const own = call.request.options
  return {
    ...(call.binding.options ?? {}),
    ...(own !== null && typeof own === "object" && !Array.isArray(own) ? (own as Record<string, unknown>) : {})
  }
}

/**
 * A provider's `finish` (models/Http.ts) that fails, with `model_bad_response`, an answer no loop
 * is handed. Ambiguous, as the model ran (and may bill it); retryable, as another answer may not
 * repeat it.
 *
 * - A tool call whose arguments nest deeper than MAX_JSON_DEPTH: they come from outside, parsed
 *   without bound (JSON.parse does not recurse), and the answer's record, the tool's schema check
 *   and the loop's copy all walk them by recursion, which thousands of levels overflow; so they
 *   are measured here first, without recursion, and the record keeps the call's id and name, not
 *   its arguments. At the bound they are taken (a Wasm loop's `dispatch` request wraps them in
 *   more levels, held to the same bound: docs/models.md).
 * - Tool calls that share an id — a provider's defect: their results, told apart by the id, could
 *   not be, and Brain's `dispatch` refuses such a round (docs/abi.md) — naming the id. The record
 *   keeps what came: the answer in `details.answer` when the details fit what Brain keeps of a
 *   failure's (MAX_FAILURE_DETAILS_BYTES), else its size in `answer_bytes` (with its tool calls'
 *   ids and names), so the duplicate stays named either way.
 */
export const withCheckedCalls = (provider: string, finish: () => Either.Either<ModelResult, ModelFailed>) =>
(): Either.Either<ModelResult, ModelFailed> => {
  const answer = finish()
  if (Either.isLeft(answer)) return answer
  const calls = answer.right.tool_calls
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!
    if (!nestsDeeperThan(call.input, MAX_JSON_DEPTH)) continue
    return Either.left(
      new ModelFailed({
        code: "model_bad_response",
        message: `${provider} sent arguments for tool call ${i} (${call.name}) that nest deeper than ${MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH), which Brain does not take`,
        ambiguous: true,
        retryable: true,
        details: { index: i, tool_call_id: call.id, name: call.name, max_depth: MAX_JSON_DEPTH }
      })
    )
  }
  if (calls.length < 2) return answer
  const seen = new Map<string, number>()
  for (let i = 0; i < calls.length; i++) {
    const id = calls[i]!.id
    const first = seen.get(id)
    if (first === undefined) {
      seen.set(id, i)
      continue
    }
    const named = { call_id: id, indexes: [first, i] }
    const whole = { ...named, answer: answer.right }
    const bytes = Buffer.byteLength(JSON.stringify(whole), "utf8")
    const details = bytes <= MAX_FAILURE_DETAILS_BYTES
      ? whole
      : { ...named, answer_bytes: Buffer.byteLength(JSON.stringify(answer.right), "utf8"), tool_calls: calls.map((c) => ({ id: c.id, name: c.name })) }
    return Either.left(
      new ModelFailed({
        code: "model_bad_response",
        message: `${provider} answered with tool calls ${first} and ${i} under the same id ${JSON.stringify(id)}: each call needs an id of its own (its result is told apart by it)`,
        ambiguous: true,
        retryable: true,
        details
      })
    )
  }
  return answer
}
