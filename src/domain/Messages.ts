/**
 * Conversation shapes shared by the API, the journal and the Agentloop ABI.
 */
import { ParseResult, Schema, SchemaAST } from "effect"
import { ChecksByParameter } from "./SchemaGuard.js"

/** Any JSON value. Payloads are stored as JSON text; the journal refuses what JSON cannot hold. */
export const Json = Schema.Unknown.annotations({ identifier: "Json", description: "any JSON value" })

/**
 * `schema` (one that only checks: its decoded value equals its input), decoding to its input
 * itself once checked, not to the decoder's copy. The copy of an object with free keys is made by
 * assignment, and assigning the key `__proto__` (an own property like any other in what JSON.parse
 * makes) sets the copy's prototype instead: the key was lost without a word, while the same key
 * in a value that is only `Json` is kept. Its issues, its name in them and its JSON Schema are
 * `schema`'s, and so is its check without a decoded copy (SchemaGuard.ts).
 */
export const keptAsSent = <A, I>(schema: Schema.Schema<A, I, never>) =>
  Schema.declare([schema], {
    decode: (checked) => (input, options) => ParseResult.map(ParseResult.decodeUnknown(checked)(input, options), () => input as A),
    encode: (checked) => (input, options) => ParseResult.map(ParseResult.encodeUnknown(checked)(input, options), () => input as I)
  }, {
    [SchemaAST.SurrogateAnnotationId]: schema.ast,
    [ChecksByParameter]: true,
    // Made, shown and compared as `schema`'s values (test arbitraries, messages).
    arbitrary: (checked) => checked,
    pretty: (checked) => checked,
    equivalence: (checked) => checked
  })

/** A part of a message's content: its `type`, and any other keys, kept as sent. */
export const ContentPart = keptAsSent(Schema.Struct({
  type: Schema.String
}, { key: Schema.String, value: Json }))
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
