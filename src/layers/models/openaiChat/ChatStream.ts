/**
 * Folds a streamed Chat Completion (OpenAI API reference, "The chat completion chunk object")
 * into Brain's ModelResult, handing each piece to `onDelta` as it arrives.
 *
 * The rules, for OpenAI and the servers that copy it (Ollama, vLLM, LM Studio, gateways):
 * - Each `data:` line is one chunk `{id, model, choices: [{index, delta: {content?, refusal?,
 *   tool_calls?}, finish_reason}], usage?}`; `data: [DONE]` ends the stream. Only choice 0 is
 *   carried (Brain asks for one answer). Tool-call arguments arrive split across chunks and are
 *   keyed by `index`; a server that sends no index (older Ollama sends each call whole) gets one
 *   by order: a new `id` opens the next call, a piece without one continues the last.
 * - The stream is complete only with a `finish_reason` and `[DONE]`; without either it is
 *   `model_stream_broken` (ambiguous: the model ran).
 * - A data line that is not JSON, or a chunk of the wrong shape, is `model_bad_response`
 *   (ambiguous). A named event other than `error` is ignored (a heartbeat, a new feature), as are
 *   an unnamed event with empty data (`data:` alone: a keep-alive, Http.ts `isHeartbeat`) and
 *   anything after `[DONE]`. An `error` object in a data line (gateways send
 *   `data: {"error": {...}}`), or an `event: error`, is a typed failure with the error in its
 *   details: a rate limit `model_rate_limited` (not retryable when it says the quota or spend
 *   limit is spent, Quota.ts), an invalid request `model_rejected`, a server error or overload
 *   (a 5xx code, `server_error`, `api_error`, …) `model_unavailable`, anything else `model_failed`
 *   (ambiguous, not retryable). A rate limit or refusal is ambiguous once the answer had
 *   begun (a chunk had come: the server had taken the prompt in and may bill it), not before.
 * - Usage comes from the chunk that carries it (the last, with `include_usage`); a counter the
 *   server did not send is absent, and a server that sends no usage gives a result without it. A
 *   counter that is not a non-negative integer is taken as not sent (Usage.ts).
 * - finish_reason: `stop` → end, `tool_calls` → tool_calls (also `stop` with tool calls, as some
 *   servers say), `length` → max_tokens, `content_filter` → refusal, anything else → other; the
 *   raw word is kept in `provider_stop_reason`. A streamed `refusal` is the answer's text, and
 *   its stop reason is `refusal`.
 * - Tool-call arguments that are not JSON are `model_bad_response` (ambiguous), naming the
 *   answer's `stop_reason` and `provider_stop_reason`: retryable, except when the answer was cut
 *   at the output limit (`length`), which the same request would hit again. Empty arguments are
 *   `{}`; arguments sent as an object rather than JSON text (an Ollama drift) are taken as is. A
 *   call without an id gets one made from the response id and its index.
 */
import { Either, ParseResult, Schema } from "effect"
import type { ModelDelta, ModelResult, StopReason } from "../../../domain/Model.js"
import { ModelFailed } from "../../../services/Models.js"
import { type EventVerdict, isHeartbeat, type SseEvent } from "../Http.js"
import { quotaExhausted } from "../Quota.js"
import { UsageCount } from "../Usage.js"

/** Characters of a bad event or bad arguments kept in a failure's details. */
const EXCERPT_CHARS = 1_000

const optionalNullable = <S extends Schema.Schema.Any>(schema: S) => Schema.optional(Schema.NullOr(schema))

const ToolCallChunk = Schema.Struct({
  index: optionalNullable(Schema.NonNegativeInt),
  id: optionalNullable(Schema.String),
  function: optionalNullable(Schema.Struct({
    name: optionalNullable(Schema.String),
    // Some compatible servers send the arguments as an object instead of JSON text.
    arguments: optionalNullable(Schema.Union(Schema.String, Schema.Record({ key: Schema.String, value: Schema.Unknown })))
  }))
})

const Choice = Schema.Struct({
  index: optionalNullable(Schema.NonNegativeInt),
  delta: optionalNullable(Schema.Struct({
    content: optionalNullable(Schema.String),
    refusal: optionalNullable(Schema.String),
    tool_calls: optionalNullable(Schema.Array(ToolCallChunk))
  })),
  finish_reason: optionalNullable(Schema.String)
})

/** The chunk fields Brain reads; the rest (created, system_fingerprint, logprobs, …) pass unread. */
export const ChatChunk = Schema.Struct({
  id: optionalNullable(Schema.String),
  model: optionalNullable(Schema.String),
  choices: optionalNullable(Schema.Array(Choice)),
  usage: optionalNullable(Schema.Struct({
    prompt_tokens: UsageCount,
    completion_tokens: UsageCount
  }))
})
const decodeChunk = Schema.decodeUnknownEither(ChatChunk)

const excerpt = (text: string) => (text.length > EXCERPT_CHARS ? `${text.slice(0, EXCERPT_CHARS)}…` : text)

const badResponse = (message: string, details: Record<string, unknown>, retryable = true) =>
  new ModelFailed({ code: "model_bad_response", message, ambiguous: true, retryable, details })

/** Parses JSON text at the boundary; undefined when it is not JSON. */
const parseJson = (text: string): { readonly value: unknown } | undefined => {
  try {
    return { value: JSON.parse(text) }
  } catch {
    return undefined
  }
}

const errorText = (value: unknown, key: string): string | undefined => {
  const field = value !== null && typeof value === "object" ? (value as Record<string, unknown>)[key] : undefined
  return typeof field === "string" ? field : typeof field === "number" ? String(field) : undefined
}

/**
 * An error the server sent inside its 200 stream. A rate limit or a refusal (a 4xx-like code,
 * an invalid request) sent before the answer began was not run; once a chunk had come, or for
 * any other error, the prompt may have been processed and billed (ambiguous). A server error (a
 * 5xx code, or its words: SERVER_TROUBLE) is `model_unavailable`, retryable; an error of a type
 * Brain does not know, or of none, is `model_failed`, not retryable, as the other providers
 * answer it.
 */
export const streamError = (provider: string, error: unknown, begun: boolean): ModelFailed => {
  const words = [errorText(error, "type"), errorText(error, "code")].filter((w) => w !== undefined).join(" ")
  const status = Number(errorText(error, "code") ?? errorText(error, "status"))
  const message = `${provider} sent an error in its stream: ${excerpt(errorText(error, "message") ?? (words || "no message"))}`
  const details = { error }
  const quota = quotaExhausted(error)
  if (status === 429 || /rate_limit/i.test(words) || quota) {
    return new ModelFailed({ code: "model_rate_limited", message, ambiguous: begun, retryable: !quota, details })
  }
  if ((status >= 400 && status < 500) || /invalid_request|content_filter|context_length/i.test(words)) {
    return new ModelFailed({ code: "model_rejected", message, ambiguous: begun, retryable: false, details })
  }
  if (status >= 500 || SERVER_TROUBLE.test(words)) {
    return new ModelFailed({ code: "model_unavailable", message, ambiguous: true, retryable: true, details })
  }
  // An error Brain cannot place: the model may have run, and nothing says trying again would help.
  return new ModelFailed({ code: "model_failed", message, ambiguous: true, retryable: false, details })
}

/**
 * The words of a server's own trouble in an error's type or code, as the servers that speak this
 * API write them: OpenAI's `server_error`, Ollama's `api_error`, vLLM's `InternalServerError`,
 * an `overloaded_error`, a `service_unavailable`, a `timeout_error`.
 */
const SERVER_TROUBLE = /server_error|api_error|internal|overloaded|unavailable|timeout/i

const stopReason = (finish: string, hasToolCalls: boolean, refused: boolean): StopReason => {
  if (hasToolCalls && (finish === "tool_calls" || finish === "stop")) return "tool_calls"
  if (finish === "content_filter" || (refused && finish === "stop")) return "refusal"
  if (finish === "stop") return "end"
  if (finish === "length") return "max_tokens"
  if (finish === "tool_calls") return "tool_calls"
  return "other"
}

interface PendingCall {
  id: string | undefined
  name: string | undefined
  arguments: string
}

export interface ChatStream {
  /** Folds one SSE event; a failure stops the stream with it. */
  readonly onEvent: (event: SseEvent) => EventVerdict
  /** The complete answer once the server has closed the stream, or why there is none. */
  readonly finish: () => Either.Either<ModelResult, ModelFailed>
}

export const makeChatStream = (provider: string, onDelta: (delta: ModelDelta) => void): ChatStream => {
  let text = ""
  let refused = false
  const calls = new Map<number, PendingCall>()
  let lastCall: number | undefined
  let finishReason: string | undefined
  let done = false
  let responseId: string | undefined
  let model: string | undefined
  let usage: { input_tokens?: number; output_tokens?: number } | undefined
  /** A chunk has come: the server has taken the prompt in, and an error from here may follow billed work. */
  let begun = false

  const slotOf = (index: number | null | undefined, id: string | null | undefined): number => {
    if (typeof index === "number") return index
    const known = [...calls].find(([, call]) => id != null && call.id === id)
    if (known) return known[0]
    if (id != null || lastCall === undefined) return calls.size === 0 ? 0 : Math.max(...calls.keys()) + 1
    return lastCall
  }

  const onChunk = (chunk: typeof ChatChunk.Type) => {
    if (responseId === undefined && chunk.id) responseId = chunk.id
    if (model === undefined && chunk.model) model = chunk.model
    if (chunk.usage) {
      const { completion_tokens, prompt_tokens } = chunk.usage
      if (prompt_tokens != null || completion_tokens != null) {
        usage = {
          ...(prompt_tokens != null ? { input_tokens: prompt_tokens } : {}),
          ...(completion_tokens != null ? { output_tokens: completion_tokens } : {})
        }
      }
    }
    for (const choice of chunk.choices ?? []) {
      if ((choice.index ?? 0) !== 0) continue
      const delta = choice.delta
      if (delta?.content) {
        text += delta.content
        onDelta({ type: "text", text: delta.content })
      }
      if (delta?.refusal) {
        refused = true
        text += delta.refusal
        onDelta({ type: "text", text: delta.refusal })
      }
      for (const piece of delta?.tool_calls ?? []) {
        const slot = slotOf(piece.index, piece.id)
        const call = calls.get(slot) ?? { id: undefined, name: undefined, arguments: "" }
        calls.set(slot, call)
        lastCall = slot
        const raw = piece.function?.arguments
        const input = raw == null ? "" : typeof raw === "string" ? raw : JSON.stringify(raw)
        const id = piece.id && call.id === undefined ? piece.id : undefined
        const name = piece.function?.name && call.name === undefined ? piece.function.name : undefined
        if (id !== undefined) call.id = id
        if (name !== undefined) call.name = name
        call.arguments += input
        if (id !== undefined || name !== undefined || input !== "") {
          onDelta({
            type: "tool_call",
            index: slot,
            ...(id !== undefined ? { id } : {}),
            ...(name !== undefined ? { name } : {}),
            input_delta: input
          })
        }
      }
      if (choice.finish_reason) finishReason = choice.finish_reason
    }
  }

  const onEvent = ({ data, event }: SseEvent): EventVerdict => {
    if (done) return undefined
    if (event !== undefined && event !== "error") return undefined
    if (isHeartbeat({ data, event }, (type) => type === "error")) return undefined
    if (data.trim() === "[DONE]") {
      done = true
      return "done"
    }
    const parsed = parseJson(data)
    if (parsed === undefined && event === "error") return streamError(provider, { message: data }, begun)
    if (parsed === undefined) return badResponse(`${provider} sent a data line that is not JSON`, { data: excerpt(data) })
    const value = parsed.value
    const isObject = value !== null && typeof value === "object" && !Array.isArray(value)
    if (isObject && "error" in value && value.error != null) {
      return streamError(provider, value.error, begun)
    }
    if (event === "error") return streamError(provider, value, begun)
    const chunk = decodeChunk(value)
    if (Either.isLeft(chunk)) {
      return badResponse(`${provider} sent a chunk of the wrong shape`, {
        data: excerpt(data),
        issue: ParseResult.TreeFormatter.formatErrorSync(chunk.left)
      })
    }
    begun = true
    onChunk(chunk.right)
    return undefined
  }

  const finish = (): Either.Either<ModelResult, ModelFailed> =>
    Either.gen(function*() {
      const finished = finishReason
      if (!done || finished === undefined) {
        return yield* Either.left(
          new ModelFailed({
            code: "model_stream_broken",
            message: `the stream from ${provider} ended without ${finished === undefined ? "a finish_reason" : "data: [DONE]"}`,
            ambiguous: true,
            retryable: true,
            details: { received_done: done, finish_reason: finished ?? null }
          })
        )
      }
      const stop = stopReason(finished, calls.size > 0, refused)
      // Cut at the output limit, the same request is cut the same way: not worth repeating.
      const truncated = stop === "max_tokens"
      const toolCalls = []
      for (const [index, call] of [...calls].sort(([a], [b]) => a - b)) {
        if (call.name === undefined) {
          return yield* Either.left(badResponse(`${provider} sent tool call ${index} without a name`, { index, id: call.id ?? null }))
        }
        const input = call.arguments.trim() === "" ? { value: {} } : parseJson(call.arguments)
        if (input === undefined) {
          const cut = truncated ? `, cut off at the output limit (finish_reason ${finished})` : ""
          return yield* Either.left(badResponse(
            `${provider} sent arguments for tool call ${index} (${call.name}) that are not JSON${cut}`,
            { index, name: call.name, arguments: excerpt(call.arguments), stop_reason: stop, provider_stop_reason: finished },
            !truncated
          ))
        }
        toolCalls.push({ id: call.id ?? `${responseId ?? "chat"}_call_${index}`, name: call.name, input: input.value })
      }
      return {
        text,
        tool_calls: toolCalls,
        stop_reason: stop,
        ...(usage !== undefined ? { usage } : {}),
        ...(responseId !== undefined ? { response_id: responseId } : {}),
        ...(model !== undefined ? { model } : {}),
        provider_stop_reason: finished
      }
    })

  return { onEvent, finish }
}
