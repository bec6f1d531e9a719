/**
 * Brain's model request as an OpenAI Responses request body (OpenAI API reference, "Responses →
 * Create a model response"). Rules:
 *
 * - The same request and binding always give the same body, so what was sent can be rebuilt from
 *   the journal (`model_call_started` holds the request, `session_creation_started` the binding).
 * - `request.system` is `instructions`; each message becomes input items: user, system and
 *   assistant text as messages, an assistant's tool calls as `function_call` items after its
 *   text, a tool result as a `function_call_output` with the call's id.
 * - Tools are `function` tools with Brain's raw JSON Schema as `parameters` and `strict: false`
 *   (the Responses API defaults to strict, which refuses most hand-written schemas).
 * - Options: the binding's, overridden by the call's; `model`, `input` and `stream` are always
 *   Brain's, `instructions` and `tools` are Brain's when the request has them, and `store` is
 *   false unless the options say otherwise (Brain keeps the conversation itself).
 * - A part this API cannot carry refuses the call before anything is sent: `model_rejected`, not
 *   ambiguous, naming the message and the part, in its message and in `details` as every provider
 *   does (`{message_index, role, part_index?, part_type?}`; `{tool_index, tool}` for a tool).
 *
 * The wire shapes are checked at compile time against @effect/ai-openai's generated types (type
 * imports only: nothing of that package is loaded at run time).
 */
import type * as Generated from "@effect/ai-openai/Generated"
import { Either } from "effect"
import type { ContentPart, Message } from "../../../domain/Messages.js"
import { ModelFailed } from "../../../services/Models.js"
import { mergedOptions, type ProviderCall } from "../Provider.js"

type InputContent = typeof Generated.InputTextContent.Encoded | typeof Generated.InputImageContent.Encoded
type InputItem =
  | typeof Generated.EasyInputMessage.Encoded
  | typeof Generated.FunctionToolCall.Encoded
  | typeof Generated.FunctionCallOutputItemParam.Encoded
type FunctionTool = typeof Generated.FunctionTool.Encoded

const refused = (message: string, details: Readonly<Record<string, unknown>>) =>
  new ModelFailed({ code: "model_rejected", message, ambiguous: false, retryable: false, details })

/** A message's place: named in a refusal's message (`where`) and, as every provider does, in its `details`. */
interface MessageAt {
  readonly where: string
  readonly details: { readonly message_index: number; readonly role: Message["role"] }
}

/** One of Brain's content parts as Responses input content, or why it cannot go. */
const inputContent = (part: ContentPart, at: MessageAt, index: number, allowImages: boolean): Either.Either<InputContent, ModelFailed> => {
  const where = `${at.where}, part ${index}`
  const details = { ...at.details, part_index: index, part_type: part.type }
  if (part.type === "text" && typeof part.text === "string") return Either.right({ type: "input_text", text: part.text })
  if (part.type === "image" && allowImages) {
    const detail = part.detail === "low" || part.detail === "high" ? part.detail : "auto"
    if (typeof part.url === "string") return Either.right({ type: "input_image", image_url: part.url, detail })
    if (typeof part.data === "string" && typeof part.mime_type === "string") {
      return Either.right({ type: "input_image", image_url: `data:${part.mime_type};base64,${part.data}`, detail })
    }
    return Either.left(refused(`${where}: an image part needs a url, or data with a mime_type`, details))
  }
  return Either.left(refused(`${where}: a "${String(part.type)}" part cannot be sent to the OpenAI Responses API here`, details))
}

const inputContents = (parts: ReadonlyArray<ContentPart>, at: MessageAt, allowImages: boolean) =>
  Either.all(parts.map((part, i) => inputContent(part, at, i, allowImages)))

/** The text of a message whose parts may only be text. */
const textOnly = (content: Message["content"], at: MessageAt): Either.Either<string, ModelFailed> =>
  typeof content === "string"
    ? Either.right(content)
    : Either.map(
      inputContents(content, at, false),
      (parts) => parts.map((p) => (p.type === "input_text" ? p.text : "")).join("")
    )

/** An assistant message's content without the reasoning parts another provider asked to keep. */
const withoutReasoning = (content: Message["content"]): Message["content"] =>
  typeof content === "string" ? content : content.filter((part) => part.type !== "thinking" && part.type !== "redacted_thinking")

const messageItems = (message: Message, index: number): Either.Either<ReadonlyArray<InputItem>, ModelFailed> => {
  const at: MessageAt = { where: `message ${index} (${message.role})`, details: { message_index: index, role: message.role } }
  switch (message.role) {
    case "user":
      return typeof message.content === "string"
        ? Either.right([{ role: "user", content: message.content }])
        : Either.map(inputContents(message.content, at, true), (content) => [{ role: "user", content }])
    case "system":
      return Either.map(textOnly(message.content, at), (content) => [{ role: "system", content }])
    case "assistant":
      // Another provider's reasoning (Anthropic's thinking blocks) means nothing here: left out.
      return Either.map(textOnly(withoutReasoning(message.content), at), (text) => {
        const calls = (message.tool_calls ?? []).map((call): InputItem => ({
          type: "function_call",
          call_id: call.id,
          name: call.name,
          arguments: JSON.stringify(call.input ?? {})
        }))
        return text === "" && calls.length > 0 ? calls : [{ role: "assistant", content: text }, ...calls]
      })
    case "tool": {
      const callId = message.tool_call_id
      if (callId === undefined || callId === "") return Either.left(refused(`${at.where}: a tool result needs its tool_call_id`, at.details))
      const output: Either.Either<string | ReadonlyArray<InputContent>, ModelFailed> = typeof message.content === "string"
        ? Either.right(message.content)
        : inputContents(message.content, at, true)
      return Either.map(output, (output): ReadonlyArray<InputItem> => [{ type: "function_call_output", call_id: callId, output }])
    }
  }
}

const functionTool = (tool: NonNullable<ProviderCall["request"]["tools"]>[number], index: number): Either.Either<FunctionTool, ModelFailed> => {
  const schema = tool.input_schema ?? { type: "object", properties: {} }
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) {
    return Either.left(refused(`tool "${tool.name}": its input_schema is not a JSON object`, { tool_index: index, tool: tool.name }))
  }
  return Either.right({
    type: "function",
    name: tool.name,
    ...(tool.description !== undefined ? { description: tool.description } : {}),
    parameters: schema as Record<string, unknown>,
    strict: false
  })
}

/** The JSON body of the streamed `POST /responses`, or the refusal of a request it cannot carry. */
export const requestBody = (call: ProviderCall): Either.Either<Record<string, unknown>, ModelFailed> =>
  Either.gen(function*() {
    const { request } = call
    const input = (yield* Either.all(request.messages.map(messageItems))).flat()
    const tools = yield* Either.all((request.tools ?? []).map((tool, i) => functionTool(tool, i)))
    return {
      store: false,
      ...mergedOptions(call),
      model: call.binding.model,
      input,
      ...(request.system !== undefined ? { instructions: request.system } : {}),
      ...(tools.length > 0 ? { tools } : {}),
      stream: true
    }
  })
