/**
 * A model provider: turns Brain's request into one streamed HTTP request to its API, sends it
 * once (models/Http.ts), hands each text or tool-argument delta to `onDelta` as it arrives, and
 * folds the stream into the complete result. It never retries, never falls over to another
 * target, and fails with a typed ModelFailed (services/Models.ts) saying what Brain knows.
 */
import type * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type { Effect, Redacted } from "effect"
import type { ModelDelta, ModelRequest, ModelResult } from "../../domain/Model.js"
import type { RecordedBinding } from "../../domain/ModelBinding.js"
import type { ModelFailed } from "../../services/Models.js"
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
