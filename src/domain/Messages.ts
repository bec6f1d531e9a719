/**
 * Conversation shapes shared by the API, the journal and the Agentloop ABI.
 */
import { Schema } from "effect"

/** Any JSON value. Payloads are stored as JSON text; the journal refuses what JSON cannot hold. */
export const Json = Schema.Unknown.annotations({ identifier: "Json", description: "any JSON value" })

export const ContentPart = Schema.Struct({
  type: Schema.String
}, { key: Schema.String, value: Json })
export type ContentPart = typeof ContentPart.Type

export const ToolCallRequest = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  input: Json
})
export type ToolCallRequest = typeof ToolCallRequest.Type

export const Role = Schema.Literal("user", "assistant", "tool", "system")

export const Message = Schema.Struct({
  role: Role,
  content: Schema.Union(Schema.String, Schema.Array(ContentPart)),
  tool_calls: Schema.optional(Schema.Array(ToolCallRequest)),
  tool_call_id: Schema.optional(Schema.String)
})
export type Message = typeof Message.Type

export const Media = Schema.Struct({
  type: Schema.String,
  url: Schema.optional(Schema.String),
  data: Schema.optional(Schema.String),
  mime_type: Schema.optional(Schema.String)
})

export const TurnInput = Schema.Struct({
  message: Schema.String,
  media: Schema.optional(Schema.Array(Media))
})
export type TurnInput = typeof TurnInput.Type

/** A transcript change: keep the first `keep` messages of the saved transcript, then `append`. */
export const TranscriptDelta = Schema.Struct({
  keep: Schema.Int.pipe(Schema.greaterThanOrEqualTo(0)),
  append: Schema.Array(Message)
})
export type TranscriptDelta = typeof TranscriptDelta.Type
