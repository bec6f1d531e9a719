/**
 * Brain's model request in Chat Completions words (OpenAI API reference, "Create chat
 * completion"). The body is a pure function of the recorded binding and the journaled request, so
 * the request that was sent can be rebuilt from the journal; only the API key is added later, in
 * a header.
 *
 * - `request.system` becomes the first `system` message; a `system` note in the middle of the
 *   conversation stays where it is.
 * - An assistant's tool calls are `tool_calls: [{id, type: "function", function: {name,
 *   arguments}}]` with the input as JSON text; a tool result is `{role: "tool", tool_call_id,
 *   content}`.
 * - Parts: text everywhere; images (`{type: "image", url}` or `{type: "image", data, mime_type}`,
 *   sent as `image_url` with a data URL for base64) in user messages only, as the API accepts
 *   them. Anything else is refused before sending (`model_rejected`, not ambiguous), naming the
 *   message and part, rather than dropped behind the caller's back.
 * - Tools: `{type: "function", function: {name, description?, parameters}}`, parameters
 *   defaulting to an empty object schema; no `tools` key when there are none (OpenAI refuses an
 *   empty list).
 * - Options: the binding's under the call's (`mergedOptions`); Brain's own fields (model,
 *   messages, tools, stream) win over both, and `stream_options.include_usage` is always asked for.
 */
import { Either } from "effect"
import type { ContentPart, Message } from "../../../domain/Messages.js"
import { DEFAULT_BASE_URLS, endpointUrl } from "../../../domain/ModelBinding.js"
import { ModelFailed } from "../../../services/Models.js"
import { mergedOptions, type ProviderCall } from "../Provider.js"

/** OpenAI's own endpoint, used when a binding names no `base_url`. */
export const DEFAULT_BASE_URL = DEFAULT_BASE_URLS["openai-chat"]

/** `{base_url}/chat/completions`, whether or not the base URL ends with a slash. */
export const chatCompletionsUrl = (baseUrl: string | undefined): string => endpointUrl(baseUrl ?? DEFAULT_BASE_URL, "/chat/completions")

type Wire = Record<string, unknown>

const refused = (message: string, details: Wire) =>
  new ModelFailed({ code: "model_rejected", message, ambiguous: false, retryable: false, details })

const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value)

/** One content part on the wire, or why it cannot be carried. */
const wirePart = (message: Message, m: number, part: ContentPart, p: number): Either.Either<Wire, ModelFailed> => {
  const where = { message_index: m, part_index: p, role: message.role, part_type: part.type }
  if (part.type === "text" && typeof part.text === "string") return Either.right({ type: "text", text: part.text })
  if (part.type === "image" && message.role === "user") {
    const url = typeof part.url === "string"
      ? part.url
      : typeof part.data === "string" && typeof part.mime_type === "string"
      ? `data:${part.mime_type};base64,${part.data}`
      : undefined
    if (url === undefined) {
      return Either.left(refused(`message ${m} part ${p}: an image needs a url, or data with its mime_type`, where))
    }
    const detail = typeof part.detail === "string" ? { detail: part.detail } : {}
    return Either.right({ type: "image_url", image_url: { url, ...detail } })
  }
  return Either.left(refused(
    `message ${m} (${message.role}) part ${p} is a "${part.type}" part, which Chat Completions cannot carry there`,
    where
  ))
}

/**
 * Another provider's reasoning kept in an assistant message (Anthropic's thinking blocks: a model
 * result's `reasoning`) means nothing to this API: left out, not refused.
 */
const isReasoningPart = (message: Message, part: ContentPart) =>
  message.role === "assistant" && (part.type === "thinking" || part.type === "redacted_thinking")

const wireContent = (message: Message, m: number): Either.Either<string | Array<Wire>, ModelFailed> =>
  typeof message.content === "string"
    ? Either.right(message.content)
    : Either.map(
      Either.all(message.content.map((part, p) => isReasoningPart(message, part) ? Either.right(undefined) : wirePart(message, m, part, p))),
      (parts) => {
        const kept = parts.filter((part): part is Wire => part !== undefined)
        // Nothing left but reasoning: an assistant turn with no text.
        return kept.length === 0 && message.content.length > 0 ? "" : kept
      }
    )

const wireMessage = (message: Message, m: number): Either.Either<Wire, ModelFailed> =>
  Either.gen(function*() {
    const content = yield* wireContent(message, m)
    const calls = message.tool_calls ?? []
    if (calls.length > 0 && message.role !== "assistant") {
      return yield* Either.left(refused(`message ${m} (${message.role}) carries tool calls; only an assistant message can`, {
        message_index: m,
        role: message.role
      }))
    }
    if (message.role === "tool") {
      if (message.tool_call_id === undefined) {
        return yield* Either.left(refused(`message ${m} is a tool result without a tool_call_id`, { message_index: m, role: "tool" }))
      }
      return { role: "tool", tool_call_id: message.tool_call_id, content }
    }
    if (calls.length === 0) return { role: message.role, content }
    return {
      role: "assistant",
      content,
      tool_calls: calls.map((c) => ({
        id: c.id,
        type: "function",
        function: { name: c.name, arguments: JSON.stringify(c.input ?? {}) }
      }))
    }
  })

/** Keys of the body that are Brain's to set, whatever the options say. */
const OWN_KEYS = ["model", "messages", "tools", "stream", "stream_options"] as const

/** The JSON body of the call, or the reason it cannot be sent. */
export const chatRequestBody = (call: ProviderCall): Either.Either<Wire, ModelFailed> =>
  Either.gen(function*() {
    const { request } = call
    const system: Array<Wire> = request.system !== undefined ? [{ role: "system", content: request.system }] : []
    const messages = yield* Either.all(request.messages.map(wireMessage))
    const tools = (request.tools ?? []).map((tool) => ({
      type: "function",
      function: {
        name: tool.name,
        ...(tool.description !== undefined ? { description: tool.description } : {}),
        parameters: tool.input_schema ?? { type: "object", properties: {} }
      }
    }))
    const options = mergedOptions(call)
    const streamOptions = isRecord(options.stream_options) ? options.stream_options : {}
    const rest = { ...options }
    for (const key of OWN_KEYS) delete rest[key]
    return {
      ...rest,
      model: call.binding.model,
      messages: [...system, ...messages],
      ...(tools.length > 0 ? { tools } : {}),
      stream: true,
      stream_options: { ...streamOptions, include_usage: true }
    }
  })
