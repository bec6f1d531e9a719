/**
 * The events of a streamed OpenAI Responses call that Brain reads, as Effect Schemas (OpenAI API
 * reference, "Responses → Streaming events"). Rules:
 *
 * - Each schema names only the fields Brain uses; every other field is let through unread, so a
 *   compatible server (Ollama, vLLM, a gateway) that omits what Brain does not need still works.
 * - An event whose `type` is listed here but whose shape is wrong is a bad response; a `type` not
 *   listed (content_part.*, reasoning, annotations, web search, keepalive, a future feature) is
 *   ignored by the fold, never decoded.
 * - Output items other than `message` and `function_call` (reasoning, hosted tool calls, …) are
 *   recognised only by their `type` and ignored.
 */
import { Schema } from "effect"
import { UsageCount } from "../Usage.js"

const Index = Schema.Int.pipe(Schema.nonNegative())
const Optional = <S extends Schema.Schema.Any>(schema: S) => Schema.optional(Schema.NullOr(schema))

/** Any `type` but the given ones, decoded as `{type: "ignored", was}` so that unions narrow. */
const Ignored = (...carried: ReadonlyArray<string>) =>
  Schema.transform(
    Schema.Struct({ type: Schema.String.pipe(Schema.filter((t) => !carried.includes(t))) }),
    Schema.Struct({ type: Schema.Literal("ignored"), was: Schema.String }),
    { strict: true, decode: ({ type }) => ({ type: "ignored" as const, was: type }), encode: ({ was }) => ({ type: was }) }
  )

/** A content part of an output message: text, a refusal, or something Brain does not carry. */
export const OutputText = Schema.Struct({ type: Schema.Literal("output_text"), text: Schema.String })
export const Refusal = Schema.Struct({ type: Schema.Literal("refusal"), refusal: Schema.String })
export const MessagePart = Schema.Union(OutputText, Refusal, Ignored("output_text", "refusal"))
export type MessagePart = typeof MessagePart.Type

/** An item's `id` is read to recognise it in the final response, whatever position it is listed at there. */
export const MessageItem = Schema.Struct({
  type: Schema.Literal("message"),
  id: Optional(Schema.String),
  content: Optional(Schema.Array(MessagePart))
})
export const FunctionCallItem = Schema.Struct({
  type: Schema.Literal("function_call"),
  id: Optional(Schema.String),
  call_id: Schema.String,
  name: Schema.String,
  arguments: Optional(Schema.String)
})
/** An output item: a message, a function call, or an item Brain ignores (reasoning, …). */
export const OutputItem = Schema.Union(MessageItem, FunctionCallItem, Ignored("message", "function_call"))
export type OutputItem = typeof OutputItem.Type

/**
 * Token counts; a counter the server leaves out (or sends as null) stays absent, and so does one
 * that is not a non-negative integer (Usage.ts).
 */
export const Usage = Schema.Struct({
  input_tokens: UsageCount,
  output_tokens: UsageCount
})

/** The response object of the lifecycle events, as far as Brain reads it. */
export const ResponseObject = Schema.Struct({
  id: Optional(Schema.String),
  model: Optional(Schema.String),
  status: Optional(Schema.String),
  output: Optional(Schema.Array(OutputItem)),
  usage: Optional(Usage),
  incomplete_details: Optional(Schema.Struct({ reason: Optional(Schema.String) })),
  /** Kept as sent: it goes into a failure's details. */
  error: Schema.optional(Schema.Unknown)
})
export type ResponseObject = typeof ResponseObject.Type

const lifecycle = <T extends string>(type: T) => Schema.Struct({ type: Schema.Literal(type), response: ResponseObject })

export const StreamEvent = Schema.Union(
  lifecycle("response.created"),
  lifecycle("response.in_progress"),
  lifecycle("response.completed"),
  lifecycle("response.incomplete"),
  lifecycle("response.failed"),
  Schema.Struct({
    type: Schema.Literal("response.output_item.added", "response.output_item.done"),
    output_index: Index,
    item: OutputItem
  }),
  Schema.Struct({
    type: Schema.Literal("response.output_text.delta", "response.refusal.delta"),
    output_index: Index,
    item_id: Optional(Schema.String),
    content_index: Index,
    delta: Schema.String
  }),
  Schema.Struct({
    type: Schema.Literal("response.output_text.done"),
    output_index: Index,
    item_id: Optional(Schema.String),
    content_index: Index,
    text: Schema.String
  }),
  Schema.Struct({
    type: Schema.Literal("response.refusal.done"),
    output_index: Index,
    item_id: Optional(Schema.String),
    content_index: Index,
    refusal: Schema.String
  }),
  Schema.Struct({
    type: Schema.Literal("response.function_call_arguments.delta"),
    output_index: Index,
    item_id: Optional(Schema.String),
    delta: Schema.String
  }),
  Schema.Struct({
    type: Schema.Literal("response.function_call_arguments.done"),
    output_index: Index,
    item_id: Optional(Schema.String),
    arguments: Schema.String
  }),
  /** Documented with `code`/`message` at the top level; some servers nest them under `error`. */
  Schema.Struct({
    type: Schema.Literal("error"),
    code: Optional(Schema.String),
    message: Optional(Schema.String),
    error: Schema.optional(Schema.Unknown)
  })
)
export type StreamEvent = typeof StreamEvent.Type

/** The event types Brain decodes; any other type is ignored unread. */
export const KNOWN_TYPES: ReadonlySet<string> = new Set(
  StreamEvent.members.flatMap((member) => member.fields.type.literals as ReadonlyArray<string>)
)

export const decodeEvent = Schema.decodeUnknownEither(StreamEvent)
