/**
 * What a model call asks and answers. The complete result is journaled in `model_call_ended`.
 */
import { Schema } from "effect"
import { Json, Message, ToolCallRequest } from "./Messages.js"
import { ToolDefinition } from "./Configuration.js"

export const ModelRequest = Schema.Struct({
  messages: Schema.Array(Message),
  system: Schema.optional(Schema.String),
  tools: Schema.optional(Schema.Array(ToolDefinition)),
  options: Schema.optional(Json)
})
export type ModelRequest = typeof ModelRequest.Type

export const ModelResult = Schema.Struct({
  text: Schema.String,
  tool_calls: Schema.Array(ToolCallRequest),
  stop_reason: Schema.Literal("end", "tool_calls"),
  usage: Schema.optional(Schema.Struct({ input_tokens: Schema.Int, output_tokens: Schema.Int }))
})
export type ModelResult = typeof ModelResult.Type
