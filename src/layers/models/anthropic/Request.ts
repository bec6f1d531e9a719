/**
 * Brain's model request as the body of one Anthropic Messages API call (`POST /v1/messages`,
 * `stream: true`; Anthropic API reference "Messages"). Pure: the same request and binding always
 * make the same body, so the request that was sent can be rebuilt from the journal.
 *
 * The rules (docs/models.md repeats them):
 * - Turns. Anthropic's conversation alternates `user` and `assistant`. A Brain `user` message is a
 *   user turn; each `tool` result is a `tool_result` block in a user turn; an `assistant` message
 *   is an assistant turn (its text, then one `tool_use` block per tool call). Consecutive turns of
 *   one role merge into one message: the results of parallel calls share one user message, and a
 *   user message among or right after them joins it. A result carries no `is_error`: a Brain tool
 *   message has no such flag (a failure is only in its content). The API wants a user message's
 *   `tool_result` blocks before anything else in it, so a merged user message holds its results
 *   first (in transcript order), then its other blocks (in transcript order).
 * - System text. `request.system` first, then the text of every `system` message before the
 *   conversation's first user or assistant message, joined by a blank line, is the body's `system`.
 *   Anthropic has no system turn inside the conversation: a `system` message after that (a note
 *   such as the official loop's "the previous turn did not finish") is a text block of a user turn
 *   in its place, merging with the user turn around it; in `system` it would lose its place and
 *   read as standing instruction on every later call.
 * - Empty content. The API refuses an empty text block and a message without content (but for a
 *   final assistant message); text that is only whitespace is empty to it (a block of it is
 *   refused as well), so here too. Empty text is left out. An assistant message left with nothing is
 *   left out (the user turns around it merge, as the API itself merges turns of one role). A tool
 *   result with nothing is a `tool_result` without `content`, which the API makes optional. A user
 *   message with nothing is left out when its turn has other blocks (tool results, another user
 *   message); a user turn left with nothing has no faithful form (left out, the assistant text
 *   before it would become a prefill to continue), so it fails BEFORE sending, `model_rejected`,
 *   naming its first message; so does a request with no user or assistant message at all.
 * - Parts. `text`; `image` as base64 (`data` + `mime_type`: JPEG, PNG, GIF or WebP, what the
 *   vision docs list) or by `url`, in user and tool messages only; `thinking` (with its `signature`)
 *   and `redacted_thinking` (with its `data`), in assistant messages only, sent back as the blocks
 *   they came as (a model result's `reasoning`), where they stand in the content (first, as the
 *   official loop keeps them). A `data:` URL is inline data,
 *   which Anthropic takes only as a base64 source: `data:<image type>;base64,<data>` becomes one,
 *   and a data: URL without a media type or not in base64 is refused. Anything else, or a tool
 *   call whose input is not a JSON object, fails BEFORE sending: `model_rejected`, not ambiguous,
 *   naming the message and the part, in its message and in `details` as every provider does
 *   (`{message_index, role, part_index?, part_type?}`; `tool_call_index` for a tool call,
 *   `{tool_index, tool}` for a tool).
 * - Fields. The options (the binding's, overridden by the call's) come first; Brain's own fields
 *   win over them: `model` (the binding's), `messages`, `stream: true`, and `system` and `tools`
 *   when Brain has any. `max_tokens`, which the API requires, is the options' or DEFAULT_MAX_TOKENS.
 *
 * The block shapes are checked at compile time against @effect/ai-anthropic's generated API types.
 */
import type * as Generated from "@effect/ai-anthropic/Generated"
import type { ContentPart, Message } from "../../../domain/Messages.js"
import { DEFAULT_BASE_URLS, endpointUrl } from "../../../domain/ModelBinding.js"
import { ModelFailed } from "../../../services/Models.js"
import { mergedOptions, type ProviderCall } from "../Provider.js"

/** The public endpoint, used when the binding names no `base_url`. */
export const DEFAULT_BASE_URL = DEFAULT_BASE_URLS.anthropic

/** The `anthropic-version` header: the API version whose wire format this module speaks. */
export const API_VERSION = "2023-06-01"

/**
 * Tokens. The answer's length bound when the options set no `max_tokens` (the API requires one):
 * large enough for a tool-using turn, small enough to fit every current Claude model.
 */
export const DEFAULT_MAX_TOKENS = 4096

/** Image media types the API accepts (vision docs). */
const IMAGE_TYPES = new Set(["image/jpeg", "image/png", "image/gif", "image/webp"])

type TextBlock = typeof Generated.RequestTextBlock.Encoded
type ImageBlock = typeof Generated.RequestImageBlock.Encoded
type ToolUseBlock = typeof Generated.RequestToolUseBlock.Encoded
type ToolResultBlock = typeof Generated.RequestToolResultBlock.Encoded
type ThinkingBlock = typeof Generated.RequestThinkingBlock.Encoded
type RedactedThinkingBlock = typeof Generated.RequestRedactedThinkingBlock.Encoded
type ImageMediaType = typeof Generated.Base64ImageSourceMediaType.Type
export type WireMessage = typeof Generated.InputMessage.Encoded
export type WireTool = typeof Generated.Tool.Encoded
type Block = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock

/** `{base_url}/v1/messages`, the base URL taken as the API's root (no `/v1`). */
export const messagesUrl = (baseUrl: string | undefined): string => endpointUrl(baseUrl ?? DEFAULT_BASE_URL, "/v1/messages")

/**
 * Where a refusal points: the path its message names (`messages[2].content[1]`), and the same
 * place as `details`, in the words every provider uses (`message_index`, `role`, `part_index`,
 * `part_type`, `tool_call_index`, `tool_index`, `tool`).
 */
interface Where {
  readonly path: string
  readonly details: Readonly<Record<string, unknown>>
}

/** A message's place. */
const messageAt = (index: number, role: Message["role"]): Where => ({ path: `messages[${index}]`, details: { message_index: index, role } })

/** A part's place in its message (a string content is its message's own place). */
const partAt = (at: Where, index: number, part: ContentPart): Where => ({
  path: `${at.path}.content[${index}]`,
  details: { ...at.details, part_index: index, part_type: part.type }
})

const rejected = (at: Where, what: string) =>
  new ModelFailed({
    code: "model_rejected",
    message: `Anthropic cannot carry ${at.path}: ${what}`,
    ambiguous: false,
    retryable: false,
    details: at.details
  })

const isObject = (u: unknown): u is Record<string, unknown> => u !== null && typeof u === "object" && !Array.isArray(u)

const partsOf = (content: Message["content"]): ReadonlyArray<ContentPart> =>
  typeof content === "string" ? [{ type: "text", text: content }] : content

/** Empty or only whitespace: text the API refuses as a block ("must contain non-whitespace text"). */
const isEmptyText = (text: string) => text.trim() === ""

/** A text part as a block (undefined when empty), or why it cannot be one. */
const textBlock = (part: ContentPart, where: Where): TextBlock | undefined | ModelFailed => {
  if (typeof part.text !== "string") return rejected(where, "a text part without a string `text`")
  return isEmptyText(part.text) ? undefined : { type: "text", text: part.text }
}

const base64Image = (mime: unknown, data: string, where: Where): ImageBlock | ModelFailed => {
  if (typeof mime !== "string" || !IMAGE_TYPES.has(mime)) {
    return rejected(where, `an image of type ${String(mime)} (it takes image/jpeg, image/png, image/gif, image/webp)`)
  }
  return { type: "image", source: { type: "base64", media_type: mime as ImageMediaType, data } }
}

/** A `data:` URL (RFC 2397: `data:[<media type>][;<parameter>]*[;base64],<data>`) as an inline image. */
const dataUrlImage = (url: string, where: Where): ImageBlock | ModelFailed => {
  const comma = url.indexOf(",")
  const meta = (comma < 0 ? url.slice(5) : url.slice(5, comma)).split(";").map((p) => p.trim().toLowerCase())
  if (comma < 0 || meta.length < 2 || meta[meta.length - 1] !== "base64") {
    return rejected(where, "an image data: URL that is not base64 (it takes inline images only as base64)")
  }
  if (meta[0] === "") return rejected(where, "an image data: URL without a media type")
  return base64Image(meta[0], url.slice(comma + 1), where)
}

const imageBlock = (part: ContentPart, where: Where): ImageBlock | ModelFailed => {
  if (typeof part.data === "string") return base64Image(part.mime_type, part.data, where)
  if (typeof part.url === "string") {
    return /^data:/i.test(part.url) ? dataUrlImage(part.url, where) : { type: "image", source: { type: "url", url: part.url } }
  }
  return rejected(where, "an image part with neither `data` + `mime_type` nor `url`")
}

/**
 * A reasoning part of an assistant message (a model result's `reasoning`) as the block Anthropic
 * sent: `thinking` with its `signature`, or `redacted_thinking` with its `data`, unchanged.
 */
const thinkingBlock = (part: ContentPart, where: Where): ThinkingBlock | RedactedThinkingBlock | ModelFailed =>
  part.type === "thinking"
    ? typeof part.thinking === "string" && typeof part.signature === "string"
      ? { type: "thinking", thinking: part.thinking, signature: part.signature }
      : rejected(where, "a thinking part without a string `thinking` and `signature`")
    : typeof part.data === "string"
    ? { type: "redacted_thinking", data: part.data }
    : rejected(where, "a redacted_thinking part without a string `data`")

/** A message's parts as blocks, each made by `blockOf` (undefined: left out), or the first refusal. */
const blocksOf = <B>(
  content: Message["content"],
  where: Where,
  blockOf: (part: ContentPart, at: Where) => B | undefined | ModelFailed
): Array<B> | ModelFailed => {
  const out: Array<B> = []
  const parts = partsOf(content)
  for (let i = 0; i < parts.length; i++) {
    const block = blockOf(parts[i]!, typeof content === "string" ? where : partAt(where, i, parts[i]!))
    if (block instanceof ModelFailed) return block
    if (block !== undefined) out.push(block)
  }
  return out
}

/** The blocks of a user, tool or system message's content: text, and images in user and tool messages. */
const contentBlocks = (content: Message["content"], where: Where, role: Message["role"]) =>
  blocksOf<TextBlock | ImageBlock>(content, where, (part, at) =>
    part.type === "text"
      ? textBlock(part, at)
      : part.type === "image" && (role === "user" || role === "tool")
      ? imageBlock(part, at)
      : rejected(at, `a part of type "${part.type}" in a ${role} message`))

/** The blocks of an assistant message's content: its thinking, as it came, and its text. */
const assistantBlocks = (content: Message["content"], where: Where) =>
  blocksOf<Block>(content, where, (part, at) =>
    part.type === "text"
      ? textBlock(part, at)
      : part.type === "thinking" || part.type === "redacted_thinking"
      ? thinkingBlock(part, at)
      : rejected(at, `a part of type "${part.type}" in an assistant message`))

/** One turn of the conversation: consecutive messages of one role, merged; `where` names the first. */
interface Turn {
  readonly role: "user" | "assistant"
  readonly content: Array<Block>
  readonly where: Where
}

interface Turns {
  readonly system: Array<string>
  readonly messages: Array<Turn>
}

/** Adds a message's blocks to the last turn if it has the same role, else starts one (never for an empty assistant message). */
const push = (turns: Turns, role: "user" | "assistant", blocks: ReadonlyArray<Block>, where: Where) => {
  const last = turns.messages[turns.messages.length - 1]
  if (last?.role === role) last.content.push(...blocks)
  else if (blocks.length > 0 || role === "user") turns.messages.push({ role, content: [...blocks], where })
}

/** A turn as sent: a user turn with its tool_result blocks first, each group in its own order (the API's rule). */
const wireMessage = (turn: Turn): WireMessage =>
  turn.role === "user"
    ? {
      role: "user",
      content: [...turn.content.filter((b) => b.type === "tool_result"), ...turn.content.filter((b) => b.type !== "tool_result")]
    }
    : { role: "assistant", content: turn.content }

/** Folds one Brain message into the turns, or says why Anthropic cannot carry it. */
const addMessage = (turns: Turns, message: Message, index: number): ModelFailed | undefined => {
  const where = messageAt(index, message.role)
  switch (message.role) {
    case "system": {
      const blocks = contentBlocks(message.content, where, message.role)
      if (blocks instanceof ModelFailed) return blocks
      // Its parts' text as written (whitespace between them kept): all of them are text (checked).
      const text = partsOf(message.content).map((p) => p.text as string).join("")
      if (isEmptyText(text)) return undefined
      // Before the conversation it is standing instruction; inside it, a note about where it
      // stands (the official loop's "the previous turn did not finish"), kept there as user text:
      // in `system` it would read as true of every later call.
      if (turns.messages.length === 0) turns.system.push(text)
      else push(turns, "user", [{ type: "text", text }], where)
      return undefined
    }
    case "user": {
      const blocks = contentBlocks(message.content, where, message.role)
      if (blocks instanceof ModelFailed) return blocks
      push(turns, "user", blocks, where)
      return undefined
    }
    case "assistant": {
      const blocks = assistantBlocks(message.content, where)
      if (blocks instanceof ModelFailed) return blocks
      for (const [i, call] of (message.tool_calls ?? []).entries()) {
        if (!isObject(call.input)) {
          const at = { path: `${where.path}.tool_calls[${i}]`, details: { ...where.details, tool_call_index: i } }
          return rejected(at, "a tool call input that is not a JSON object")
        }
        blocks.push({ type: "tool_use", id: call.id, name: call.name, input: call.input })
      }
      push(turns, "assistant", blocks, where)
      return undefined
    }
    case "tool": {
      if (message.tool_call_id === undefined) return rejected(where, "a tool result without `tool_call_id`")
      const content = typeof message.content === "string"
        ? isEmptyText(message.content) ? "" : message.content
        : contentBlocks(message.content, where, message.role)
      if (content instanceof ModelFailed) return content
      const result: ToolResultBlock = { type: "tool_result", tool_use_id: message.tool_call_id }
      push(turns, "user", [content.length > 0 ? { ...result, content } : result], where)
      return undefined
    }
  }
}

const toolsOf = (call: ProviderCall): Array<WireTool> | ModelFailed => {
  const out: Array<WireTool> = []
  for (const [i, tool] of (call.request.tools ?? []).entries()) {
    const schema = tool.input_schema ?? { type: "object", properties: {} }
    if (!isObject(schema)) {
      return rejected({ path: `tools[${i}] (${tool.name})`, details: { tool_index: i, tool: tool.name } }, "an input_schema that is not a JSON Schema object")
    }
    out.push({
      name: tool.name,
      ...(tool.description !== undefined ? { description: tool.description } : {}),
      // A JSON Schema as the session configured it; the generated type names only its top keys.
      input_schema: schema as WireTool["input_schema"]
    })
  }
  return out
}

/** The JSON body of the call, or a `model_rejected` naming what Anthropic cannot carry. */
export const requestBody = (call: ProviderCall): Record<string, unknown> | ModelFailed => {
  const system = call.request.system
  const turns: Turns = { system: system !== undefined && !isEmptyText(system) ? [system] : [], messages: [] }
  for (const [i, message] of call.request.messages.entries()) {
    const failure = addMessage(turns, message, i)
    if (failure !== undefined) return failure
  }
  if (turns.messages.length === 0) {
    const messages = call.request.messages.length
    return rejected({ path: "the request", details: { message_count: messages } }, "no user or assistant message (it takes at least one)")
  }
  const empty = turns.messages.find((turn) => turn.content.length === 0)
  if (empty !== undefined) return rejected(empty.where, "an empty user message (it refuses a message without content)")
  const tools = toolsOf(call)
  if (tools instanceof ModelFailed) return tools
  const options = mergedOptions(call)
  const messages = turns.messages.map(wireMessage)
  return {
    ...options,
    model: call.binding.model,
    max_tokens: options.max_tokens ?? DEFAULT_MAX_TOKENS,
    ...(turns.system.length > 0 ? { system: turns.system.join("\n\n") } : {}),
    messages,
    ...(tools.length > 0 ? { tools } : {}),
    stream: true
  }
}
