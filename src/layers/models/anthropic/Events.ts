/**
 * Anthropic's streamed answer (Anthropic docs, "Streaming Messages": event types, content block
 * delta types, error events) folded, event by event, into Brain's ModelResult, with each text and
 * tool-argument piece handed to `onDelta` as it arrives.
 *
 * The rules:
 * - An event is known by its data's `type` (the same word as its `event:` line, which stands in
 *   when the data has none).
 * - `message_start`: the message `id` (the result's `response_id`), `model`, and the usage:
 *   `input_tokens`, `output_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`
 *   (Anthropic counts the three input counts apart: `input_tokens` excludes the cached prompt, so
 *   all three are carried).
 * - `content_block_start` / `_delta` / `_stop`, by block `index`: `text` blocks make the text
 *   (joined in order, so the text deltas join to it exactly); `tool_use` blocks make the tool
 *   calls, in order. A tool call's delta `index` is its place among this answer's tool calls; its
 *   first delta, at block start, carries `id` and `name`; each `input_json_delta` follows. The
 *   pieces are joined and parsed once the answer is whole (nothing sent → the start's `input`,
 *   `{}`), not at the block's stop: the stop reason, which comes after the block, says whether
 *   pieces that are not JSON were cut off by the output limit. Pieces that are not JSON are
 *   `model_bad_response` naming `stop_reason` and `provider_stop_reason`; retryable, except when
 *   the answer was cut (`max_tokens`, `model_context_window_exceeded`): the same request would be
 *   cut the same way.
 * - `thinking` blocks (their `thinking_delta` and `signature_delta` pieces joined) and
 *   `redacted_thinking` blocks (their `data`) are kept whole, in block order, as the result's
 *   `reasoning` parts `{type: "thinking", thinking, signature}` and `{type: "redacted_thinking",
 *   data}`: with extended thinking and tools, Anthropic wants them back, unchanged, at the start of
 *   the assistant's turn on the next call (Anthropic docs, "Extended thinking": preserving thinking
 *   blocks). They are not streamed as deltas.
 * - Other block types (`server_tool_use`, `web_search_tool_result`, …) and other delta types
 *   (`citations_delta`, …) are not Brain's to carry: ignored.
 * - `message_delta`: `stop_reason` and the usage. Its counts are cumulative (Anthropic docs,
 *   "Streaming Messages"; the input and cache counts too, which can grow after message_start, e.g.
 *   with server tools): each count it carries replaces the one before, the last sent winning; a
 *   count it leaves out keeps message_start's. A count never sent stays absent.
 * - `message_stop` is the final event: a stream that ends without it is `model_stream_broken`.
 * - `ping` and any type not named here (a heartbeat, a new feature) are ignored; a `ping` (the
 *   documented heartbeat) and an event with empty data not named as one of the types here are
 *   ignored before their data is read (Http.ts `isHeartbeat`).
 * - `error` (sent inside a 200 stream, e.g. `overloaded_error`) fails the call with a typed code
 *   and the provider's error in `details.error`. Ambiguous once `message_start` has come (the
 *   prompt was taken in and may be billed); before it, a refusal (rate limit, invalid request) is
 *   not. A rate limit whose `details.error_code` says a spend limit is spent is not retryable.
 * - A data line that is not a JSON object, or a named event of the wrong shape, is
 *   `model_bad_response`, ambiguous (the model ran).
 */
import { Schema } from "effect"
import type { ModelDelta, ModelResult, StopReason } from "../../../domain/Model.js"
import { ModelFailed } from "../../../services/Models.js"
import { type EventVerdict, isHeartbeat, type SseEvent } from "../Http.js"
import { quotaExhausted } from "../Quota.js"
import { UsageCount } from "../Usage.js"

/** The event types this module reads; any other is ignored. */
const EVENT_TYPES: ReadonlySet<string> = new Set([
  "message_start",
  "content_block_start",
  "content_block_delta",
  "content_block_stop",
  "message_delta",
  "message_stop",
  "error"
])
const isEventType = (type: string) => EVENT_TYPES.has(type)

// Lenient shapes: only what Brain reads is required; unknown fields and values pass.
// A count that is not a non-negative integer is taken as not sent (Usage.ts).
const Counts = Schema.Struct({
  input_tokens: UsageCount,
  output_tokens: UsageCount,
  cache_read_input_tokens: UsageCount,
  cache_creation_input_tokens: UsageCount
})
const Usage = Schema.optional(Schema.NullOr(Counts))

const MessageStart = Schema.Struct({
  message: Schema.Struct({ id: Schema.optional(Schema.String), model: Schema.optional(Schema.String), usage: Usage })
})
const ContentBlockStart = Schema.Struct({
  index: Schema.NonNegativeInt,
  content_block: Schema.Struct({
    type: Schema.String,
    id: Schema.optional(Schema.String),
    name: Schema.optional(Schema.String),
    text: Schema.optional(Schema.String),
    input: Schema.optional(Schema.Unknown),
    thinking: Schema.optional(Schema.String),
    signature: Schema.optional(Schema.String),
    data: Schema.optional(Schema.String)
  })
})
const ContentBlockDelta = Schema.Struct({
  index: Schema.NonNegativeInt,
  delta: Schema.Struct({
    type: Schema.String,
    text: Schema.optional(Schema.String),
    partial_json: Schema.optional(Schema.String),
    thinking: Schema.optional(Schema.String),
    signature: Schema.optional(Schema.String)
  })
})
const ContentBlockStop = Schema.Struct({ index: Schema.NonNegativeInt })
const MessageDelta = Schema.Struct({
  delta: Schema.Struct({ stop_reason: Schema.optional(Schema.NullOr(Schema.String)) }),
  usage: Usage
})

/**
 * Brain's stop reason for Anthropic's. `model_context_window_exceeded` is a cut like `max_tokens`
 * (the context window, not max_tokens, ran out); `pause_turn` and new ones are other.
 */
export const stopReason = (raw: string | null | undefined): StopReason => {
  switch (raw) {
    case "end_turn":
    case "stop_sequence":
      return "end"
    case "tool_use":
      return "tool_calls"
    case "max_tokens":
    case "model_context_window_exceeded":
      return "max_tokens"
    case "refusal":
      return "refusal"
    default:
      return "other"
  }
}

const badResponse = (message: string, details?: unknown, retryable = true) =>
  new ModelFailed({
    code: "model_bad_response",
    message: `Anthropic sent ${message}`,
    ambiguous: true,
    retryable,
    ...(details !== undefined ? { details } : {})
  })

/**
 * An `error` event inside the 200 stream, typed by the error's `type` (Anthropic docs, "Errors").
 * A refusal (rate limit, bad request) changed nothing only if the answer had not begun; once
 * `message_start` came, the prompt may have been processed and billed (ambiguous).
 */
export const streamError = (error: unknown, begun = true): ModelFailed => {
  const { type, message } = (error !== null && typeof error === "object" ? error : {}) as { type?: unknown; message?: unknown }
  const said = `Anthropic reported ${String(type ?? "an error")} mid-stream${typeof message === "string" ? `: ${message}` : ""}`
  const code = type === "rate_limit_error"
    ? "model_rate_limited"
    : type === "overloaded_error" || type === "api_error" || type === "timeout_error"
    ? "model_unavailable"
    : type === "invalid_request_error" || type === "request_too_large" || type === "authentication_error" ||
        type === "permission_error" || type === "not_found_error" || type === "billing_error"
    ? "model_rejected"
    : "model_failed"
  const retryable = (code === "model_rate_limited" && !quotaExhausted(error)) || code === "model_unavailable"
  const refused = code === "model_rate_limited" || code === "model_rejected"
  return new ModelFailed({ code, message: said, ambiguous: begun || !refused, retryable, details: { error } })
}

type Block =
  | { readonly kind: "text" }
  | { readonly kind: "ignored" }
  | { readonly kind: "thinking"; thinking: string; signature: string }
  | { readonly kind: "redacted_thinking"; readonly data: string }
  | {
    readonly kind: "tool"
    readonly call: number
    readonly id: string
    readonly name: string
    readonly startInput: unknown
    json: string
    input?: unknown
  }

/** The thinking blocks as content parts, in the order they came (as the tool calls are), as Anthropic wants them back. */
const reasoningParts = (blocks: ReadonlyArray<Extract<Block, { kind: "thinking" | "redacted_thinking" }>>) =>
  blocks.map((b) =>
    b.kind === "thinking"
      ? { type: "thinking", thinking: b.thinking, signature: b.signature }
      : { type: "redacted_thinking", data: b.data }
  )

export interface AnswerFold {
  /** Folds one event in; a failure ends the call (streamedPost's `onEvent`). */
  readonly onEvent: (event: SseEvent) => EventVerdict
  /** The complete result, once the stream has closed. */
  readonly finish: () => ModelResult | ModelFailed
}

export const makeAnswerFold = (onDelta: (delta: ModelDelta) => void): AnswerFold => {
  const blocks = new Map<number, Block>()
  const tools: Array<Extract<Block, { kind: "tool" }>> = []
  const reasoning: Array<Extract<Block, { kind: "thinking" | "redacted_thinking" }>> = []
  let text = ""
  let responseId: string | undefined
  let model: string | undefined
  let inputTokens: number | undefined
  let outputTokens: number | undefined
  let cacheReadTokens: number | undefined
  let cacheCreationTokens: number | undefined
  let rawStop: string | undefined
  let stopped = false
  /**
   * The answer has begun (`message_start`, or output without it): the prompt may have been
   * processed and billed, so an error from here on is ambiguous.
   */
  let begun = false

  /** The counts an event carries, each the latest (they are cumulative); a count it leaves out keeps its earlier value. */
  const takeUsage = (usage: typeof Counts.Type | null | undefined) => {
    inputTokens = usage?.input_tokens ?? inputTokens
    outputTokens = usage?.output_tokens ?? outputTokens
    cacheReadTokens = usage?.cache_read_input_tokens ?? cacheReadTokens
    cacheCreationTokens = usage?.cache_creation_input_tokens ?? cacheCreationTokens
  }

  const decode = <A, I>(schema: Schema.Schema<A, I>, type: string, data: unknown): A | ModelFailed => {
    const decoded = Schema.decodeUnknownEither(schema)(data)
    return decoded._tag === "Right" ? decoded.right : badResponse(`a ${type} event of the wrong shape`, { event: type, issue: decoded.left.message })
  }

  /** The call's input, once the answer is whole and its stop reason known; or why there is none. */
  const parseInput = (block: Extract<Block, { kind: "tool" }>): ModelFailed | undefined => {
    if (block.json === "") {
      block.input = block.startInput !== null && typeof block.startInput === "object" ? block.startInput : {}
      return undefined
    }
    try {
      block.input = JSON.parse(block.json)
      return undefined
    } catch {
      const stop = stopReason(rawStop)
      // Cut at the output limit, the same request is cut the same way: not worth repeating.
      const truncated = stop === "max_tokens"
      return badResponse(
        `tool call ${block.id} (${block.name}) arguments that are not JSON${truncated ? `, cut off by ${rawStop}` : ""}`,
        {
          tool_call_id: block.id,
          name: block.name,
          stop_reason: stop,
          ...(rawStop !== undefined ? { provider_stop_reason: rawStop } : {})
        },
        !truncated
      )
    }
  }

  const onBlockStart = (event: typeof ContentBlockStart.Type): ModelFailed | undefined => {
    if (blocks.has(event.index)) return badResponse(`a second content_block_start for block ${event.index}`)
    const start = event.content_block
    if (start.type === "text") {
      blocks.set(event.index, { kind: "text" })
      if (start.text) {
        text += start.text
        begun = true
        onDelta({ type: "text", text: start.text })
      }
    } else if (start.type === "tool_use") {
      if (start.id === undefined || start.name === undefined) return badResponse(`a tool_use block without its id and name`)
      const block = { kind: "tool" as const, call: tools.length, id: start.id, name: start.name, startInput: start.input, json: "" }
      blocks.set(event.index, block)
      tools.push(block)
      begun = true
      onDelta({ type: "tool_call", index: block.call, id: block.id, name: block.name, input_delta: "" })
    } else if (start.type === "thinking") {
      const block = { kind: "thinking" as const, thinking: start.thinking ?? "", signature: start.signature ?? "" }
      blocks.set(event.index, block)
      reasoning.push(block)
      begun = true
    } else if (start.type === "redacted_thinking") {
      if (start.data === undefined) return badResponse(`a redacted_thinking block without its data`)
      const block = { kind: "redacted_thinking" as const, data: start.data }
      blocks.set(event.index, block)
      reasoning.push(block)
      begun = true
    } else {
      blocks.set(event.index, { kind: "ignored" })
    }
    return undefined
  }

  const onBlockDelta = (event: typeof ContentBlockDelta.Type): ModelFailed | undefined => {
    const block = blocks.get(event.index)
    if (block === undefined) return badResponse(`a content_block_delta for block ${event.index}, which never started`)
    const delta = event.delta
    if (delta.type === "thinking_delta" || delta.type === "signature_delta") {
      if (block.kind !== "thinking") return badResponse(`a ${delta.type} that does not fit block ${event.index}`)
      const piece = delta.type === "thinking_delta" ? delta.thinking : delta.signature
      if (piece === undefined) return badResponse(`a ${delta.type} without its ${delta.type === "thinking_delta" ? "thinking" : "signature"}`)
      if (delta.type === "thinking_delta") block.thinking += piece
      else block.signature += piece
      return undefined
    }
    if (block.kind === "ignored" || (delta.type !== "text_delta" && delta.type !== "input_json_delta")) return undefined
    if (delta.type === "text_delta") {
      if (block.kind !== "text" || delta.text === undefined) return badResponse(`a text_delta that does not fit block ${event.index}`)
      text += delta.text
      if (delta.text !== "") {
        begun = true
        onDelta({ type: "text", text: delta.text })
      }
      return undefined
    }
    if (block.kind !== "tool" || delta.partial_json === undefined) return badResponse(`an input_json_delta that does not fit block ${event.index}`)
    block.json += delta.partial_json
    if (delta.partial_json !== "") onDelta({ type: "tool_call", index: block.call, input_delta: delta.partial_json })
    return undefined
  }

  const onEvent = (event: SseEvent): EventVerdict => {
    if (stopped) return undefined
    // The documented heartbeat, whatever its data (Anthropic's SDKs do not read it either).
    if (event.event === "ping" || isHeartbeat(event, isEventType)) return undefined
    let data: unknown
    try {
      data = JSON.parse(event.data)
    } catch {
      return badResponse(`a data line that is not JSON`, { event: event.event, data: event.data.slice(0, 1024) })
    }
    if (data === null || typeof data !== "object" || Array.isArray(data)) {
      return badResponse(`an event that is not a JSON object`, { event: event.event, data: event.data.slice(0, 1024) })
    }
    const said = (data as { type?: unknown }).type
    const type = typeof said === "string" ? said : event.event
    switch (type) {
      case "message_start": {
        const start = decode(MessageStart, type, data)
        if (start instanceof ModelFailed) return start
        begun = true
        responseId = start.message.id
        model = start.message.model
        takeUsage(start.message.usage)
        return undefined
      }
      case "content_block_start": {
        const start = decode(ContentBlockStart, type, data)
        return start instanceof ModelFailed ? start : onBlockStart(start)
      }
      case "content_block_delta": {
        const delta = decode(ContentBlockDelta, type, data)
        return delta instanceof ModelFailed ? delta : onBlockDelta(delta)
      }
      case "content_block_stop": {
        const stop = decode(ContentBlockStop, type, data)
        if (stop instanceof ModelFailed) return stop
        const block = blocks.get(stop.index)
        // A tool call's input is parsed in finish, when the stop reason says whether it was cut.
        return block === undefined ? badResponse(`a content_block_stop for block ${stop.index}, which never started`) : undefined
      }
      case "message_delta": {
        const delta = decode(MessageDelta, type, data)
        if (delta instanceof ModelFailed) return delta
        if (delta.delta.stop_reason != null) rawStop = delta.delta.stop_reason
        takeUsage(delta.usage)
        return undefined
      }
      case "message_stop":
        stopped = true
        return "done"
      case "error":
        return streamError((data as { error?: unknown }).error, begun)
      case undefined:
        return badResponse(`an event with no type`, { data: event.data.slice(0, 1024) })
      default:
        return undefined // ping, and what this module does not know
    }
  }

  const finish = (): ModelResult | ModelFailed => {
    if (!stopped) {
      return new ModelFailed({
        code: "model_stream_broken",
        message: "the stream from Anthropic ended without its message_stop event",
        ambiguous: true,
        retryable: true
      })
    }
    for (const block of tools) {
      const failure = parseInput(block)
      if (failure !== undefined) return failure
    }
    const usage = {
      ...(inputTokens !== undefined ? { input_tokens: inputTokens } : {}),
      ...(outputTokens !== undefined ? { output_tokens: outputTokens } : {}),
      ...(cacheReadTokens !== undefined ? { cache_read_input_tokens: cacheReadTokens } : {}),
      ...(cacheCreationTokens !== undefined ? { cache_creation_input_tokens: cacheCreationTokens } : {})
    }
    return {
      text,
      tool_calls: tools.map((t) => ({ id: t.id, name: t.name, input: t.input })),
      stop_reason: stopReason(rawStop),
      ...(reasoning.length > 0 ? { reasoning: reasoningParts(reasoning) } : {}),
      ...(Object.keys(usage).length > 0 ? { usage } : {}),
      ...(responseId !== undefined ? { response_id: responseId } : {}),
      ...(model !== undefined ? { model } : {}),
      ...(rawStop !== undefined ? { provider_stop_reason: rawStop } : {})
    }
  }

  return { onEvent, finish }
}
