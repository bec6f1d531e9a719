/**
 * What a model call asks and answers. The complete result is journaled in `model_call_ended`;
 * the deltas a provider streams on the way are live-only (never journaled).
 */
import { Schema } from "effect"
import { ContentPart, Json, Message, ToolCallRequest } from "./Messages.js"
import { ToolDefinition } from "./Configuration.js"

export const ModelRequest = Schema.Struct({
  messages: Schema.Array(Message),
  system: Schema.optional(Schema.String),
  tools: Schema.optional(Schema.Array(ToolDefinition)),
  options: Schema.optional(Json)
})
export type ModelRequest = typeof ModelRequest.Type

/** Why the model stopped, in Brain's words; the provider's own word is kept beside it. */
export const StopReason = Schema.Literal("end", "tool_calls", "max_tokens", "refusal", "other")
export type StopReason = typeof StopReason.Type

/**
 * Token counts as the provider reported them: a counter it did not send is absent, never 0.
 * `input_tokens` is the provider's own count: OpenAI's includes cached prompt tokens; Anthropic's
 * excludes them, and its cache reads and writes come in the two cache counters (docs/models.md).
 */
export const ModelUsage = Schema.Struct({
  input_tokens: Schema.optional(Schema.Int),
  output_tokens: Schema.optional(Schema.Int),
  /** Anthropic: prompt tokens read from the prompt cache, not in `input_tokens`. */
  cache_read_input_tokens: Schema.optional(Schema.Int),
  /** Anthropic: prompt tokens written to the prompt cache, not in `input_tokens`. */
  cache_creation_input_tokens: Schema.optional(Schema.Int)
})

export const ModelResult = Schema.Struct({
  text: Schema.String,
  /** Tool calls with their input parsed from the streamed JSON arguments. */
  tool_calls: Schema.Array(ToolCallRequest),
  stop_reason: StopReason,
  /**
   * Parts of the answer the provider wants back, unchanged, with the assistant's turn on later
   * calls: Anthropic's `thinking` and `redacted_thinking` blocks (docs/models.md). A loop keeps
   * them first in the assistant message's content, before its text.
   */
  reasoning: Schema.optional(Schema.Array(ContentPart)),
  usage: Schema.optional(ModelUsage),
  /** The provider's id of this response (OpenAI `chatcmpl-…`/`resp_…`, Anthropic `msg_…`). */
  response_id: Schema.optional(Schema.String),
  /** The model the provider says answered. */
  model: Schema.optional(Schema.String),
  /** The provider's own stop or finish reason, as it sent it. */
  provider_stop_reason: Schema.optional(Schema.String)
})
export type ModelResult = typeof ModelResult.Type

/**
 * A piece of a streamed answer, as it arrives: text, or a piece of one tool call's JSON arguments
 * (`index` orders the calls of one answer; `id` and `name` come with its first piece).
 */
export type ModelDelta =
  | { readonly type: "text"; readonly text: string }
  | {
    readonly type: "tool_call"
    readonly index: number
    readonly id?: string
    readonly name?: string
    readonly input_delta: string
  }
