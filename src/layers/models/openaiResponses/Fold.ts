/**
 * Folds the events of one streamed OpenAI Responses call into Brain's ModelResult, handing each
 * piece of text and of tool-call arguments to `onDelta` as it arrives. Rules:
 *
 * - The result is what was streamed: its text is the text deltas joined, each tool call's
 *   arguments its argument deltas joined. A `*.done` event, a finished output item or the final
 *   response fills in only what was never streamed (and passes it to `onDelta` then), so the
 *   deltas a client saw always join to what is journaled.
 * - Output items are keyed by `output_index` while they stream; function calls are numbered in the
 *   order they appear, and carry the model's `call_id` as their id. A refusal part counts as text
 *   and makes the stop reason `refusal`.
 * - The final response's `output` is matched to what streamed by each item's `id` (a function
 *   call's `call_id` too), not by its position in the array: a server may number its stream
 *   otherwise (a gateway that leaves an item out of the final array), and an item counted twice
 *   would double the text or record a call twice. An item with neither id known is taken as
 *   streamed under its position, unless another item streamed or listed there says otherwise;
 *   then it never streamed, and is filled in whole.
 * - `response.completed` or `response.incomplete` is the final event; whatever follows it is not
 *   read. A stream that closes without one is `model_stream_broken` (ambiguous).
 * - `error` and `response.failed` end the call with a typed failure carrying the provider's error.
 *   A rate limit or a refusal of the input is not ambiguous only when it came before
 *   `response.created`: once the response exists the prompt may have been processed and billed.
 *   A quota or spend-limit error (Quota.ts) is a rate limit that is not retryable.
 * - A data line that is not JSON, or a known event of the wrong shape, is `model_bad_response`
 *   (ambiguous); an unknown event type is ignored, and so is an event with empty data not named
 *   as a known type (`data:` alone: a keep-alive, Http.ts `isHeartbeat`). Arguments that are not JSON are
 *   `model_bad_response` too (empty arguments mean `{}`), naming the answer's `stop_reason` and
 *   `provider_stop_reason`; not retryable when the answer was cut at `max_output_tokens` (the
 *   same request is cut the same way).
 */
import { Either, ParseResult } from "effect"
import type { ModelDelta, ModelResult, StopReason } from "../../../domain/Model.js"
import { ModelFailed } from "../../../services/Models.js"
import { type EventVerdict, isHeartbeat, type SseEvent } from "../Http.js"
import { quotaExhausted } from "../Quota.js"
import { decodeEvent, KNOWN_TYPES, type OutputItem, type ResponseObject, type StreamEvent } from "./Events.js"

/** Characters of a malformed event or argument string kept in a failure's details. */
const EXCERPT_CHARS = 1024
const excerpt = (text: string) => (text.length > EXCERPT_CHARS ? `${text.slice(0, EXCERPT_CHARS)}…` : text)

const badResponse = (message: string, retryable: boolean, details: unknown) =>
  new ModelFailed({ code: "model_bad_response", message, ambiguous: true, retryable, details })

/** Error codes the Responses API reports in a stream, by what they mean for the caller. */
const RATE_LIMITED = new Set(["rate_limit_exceeded"])
const UNAVAILABLE = new Set(["server_error", "vector_store_timeout"])
const REFUSED_INPUT = new Set([
  "invalid_prompt",
  "invalid_request_error",
  "context_length_exceeded",
  "invalid_image",
  "invalid_image_format",
  "invalid_base64_image",
  "invalid_image_url",
  "image_too_large",
  "image_too_small",
  "image_parse_error",
  "image_content_policy_violation",
  "invalid_image_mode",
  "image_file_too_large",
  "unsupported_image_media_type",
  "empty_image_file",
  "failed_to_download_image",
  "image_file_not_found"
])

/**
 * An error the provider reported inside a 200 stream. A refusal (rate limit, bad input) changed
 * nothing only if the response had not begun; once `response.created` came, the prompt may have
 * been processed and billed (ambiguous). Other errors may always have run.
 */
const reportedFailure = (
  provider: string,
  error: unknown,
  code: string | undefined,
  message: string | undefined,
  details: unknown,
  begun: boolean
) => {
  const text = `${provider} reported ${code ?? "an error"} in the stream${message ? `: ${message}` : ""}`
  const quota = quotaExhausted(error)
  if (quota || (code !== undefined && RATE_LIMITED.has(code))) {
    return new ModelFailed({ code: "model_rate_limited", message: text, ambiguous: begun, retryable: !quota, details })
  }
  if (code !== undefined && REFUSED_INPUT.has(code)) {
    return new ModelFailed({ code: "model_rejected", message: text, ambiguous: begun, retryable: false, details })
  }
  if (code !== undefined && UNAVAILABLE.has(code)) {
    return new ModelFailed({ code: "model_unavailable", message: text, ambiguous: true, retryable: true, details })
  }
  return new ModelFailed({ code: "model_failed", message: text, ambiguous: true, retryable: false, details })
}

const field = (value: unknown, name: string): string | undefined => {
  const v = value !== null && typeof value === "object" ? (value as Record<string, unknown>)[name] : undefined
  return typeof v === "string" ? v : undefined
}

interface Call {
  readonly index: number
  readonly id: string
  readonly name: string
  args: string
}

type Final = Extract<StreamEvent, { type: "response.completed" | "response.incomplete" }>

export interface ResponseFold {
  /** Folds one event; a failure ends the call with it. */
  readonly onEvent: (event: SseEvent) => EventVerdict
  /** The answer, once the stream has closed. */
  readonly result: () => Either.Either<ModelResult, ModelFailed>
}

export const makeFold = (provider: string, onDelta: (delta: ModelDelta) => void): ResponseFold => {
  let text = ""
  /**
   * The response has begun (`response.created`, or output without it): the prompt may have been
   * processed and billed, so an error from here on is ambiguous.
   */
  let begun = false
  let refused = false
  /**
   * `key:content_index` of the text and refusal parts that have had some text. An item's key is
   * its `output_index` while it streams; one the final response holds that never streamed has a
   * key of its own (`finalKeys`).
   */
  const textParts = new Set<string>()
  const calls: Array<Call> = []
  const callAt = new Map<string, Call>()
  /** The key of each function call by its `call_id`, the first it came under. */
  const callKeys = new Map<string, string>()
  /** The item `id` streamed under each `output_index`, when the server named one (the first). */
  const idAt = new Map<number, string>()
  /** The `output_index` each item `id` streamed under (the first). */
  const indexOfId = new Map<string, number>()
  const seeItem = (outputIndex: number, id: string | null | undefined) => {
    if (id === null || id === undefined || idAt.has(outputIndex)) return
    idAt.set(outputIndex, id)
    if (!indexOfId.has(id)) indexOfId.set(id, outputIndex)
  }
  let started: ResponseObject | undefined
  let final: Final | undefined

  const addText = (key: string, contentIndex: number, piece: string, refusal: boolean) => {
    if (refusal) refused = true
    if (piece === "") return
    textParts.add(`${key}:${contentIndex}`)
    text += piece
    begun = true
    onDelta({ type: "text", text: piece })
  }
  const fillText = (key: string, contentIndex: number, whole: string, refusal: boolean) => {
    if (!textParts.has(`${key}:${contentIndex}`)) addText(key, contentIndex, whole, refusal)
  }

  const openCall = (key: string, item: { readonly call_id: string; readonly name: string }) => {
    const existing = callAt.get(key)
    if (existing !== undefined) return existing
    const call: Call = { index: calls.length, id: item.call_id, name: item.name, args: "" }
    calls.push(call)
    callAt.set(key, call)
    if (!callKeys.has(item.call_id)) callKeys.set(item.call_id, key)
    begun = true
    onDelta({ type: "tool_call", index: call.index, id: call.id, name: call.name, input_delta: "" })
    return call
  }
  const addArgs = (call: Call, piece: string) => {
    if (piece === "") return
    call.args += piece
    onDelta({ type: "tool_call", index: call.index, input_delta: piece })
  }
  const fillArgs = (call: Call, whole: string) => {
    if (call.args === "") addArgs(call, whole)
  }
  const streamedCall = (outputIndex: number, type: string) => {
    const call = callAt.get(String(outputIndex))
    return call !== undefined
      ? call
      : badResponse(`${provider} sent ${type} for output item ${outputIndex}, which is not a function call it announced`, false, {
        event: type,
        output_index: outputIndex
      })
  }

  /** A finished output item: fills in whatever of it was never streamed. */
  const settle = (key: string, item: OutputItem) => {
    if (item.type === "message") {
      ;(item.content ?? []).forEach((part, contentIndex) => {
        if (part.type === "output_text") fillText(key, contentIndex, part.text, false)
        else if (part.type === "refusal") fillText(key, contentIndex, part.refusal, true)
      })
    } else if (item.type === "function_call") {
      fillArgs(openCall(key, item), item.arguments ?? "")
    }
  }

  /**
   * The key of each item of the final response: the `output_index` it streamed under, known by its
   * `id` or (a function call) its `call_id`; else its position in the array, unless that position
   * streamed another item (another `id`, another call) or another item of the array was known to
   * have streamed there: then the item never streamed, and has a key of its own.
   */
  const finalKeys = (output: ReadonlyArray<OutputItem>): Array<string> => {
    const known = output.map((item) => {
      if (item.type === "ignored") return undefined
      const byId = item.id !== null && item.id !== undefined ? indexOfId.get(item.id) : undefined
      if (byId !== undefined) return String(byId)
      return item.type === "function_call" ? callKeys.get(item.call_id) : undefined
    })
    const claimed = new Set(known.filter((key) => key !== undefined))
    return output.map((item, position) => {
      const key = known[position]
      if (key !== undefined) return key
      const streamedId = idAt.get(position)
      const otherItem = claimed.has(String(position)) ||
        (item.type !== "ignored" && item.id !== null && item.id !== undefined && streamedId !== undefined && streamedId !== item.id) ||
        (item.type === "function_call" && callAt.has(String(position)))
      return otherItem ? `final:${position}` : String(position)
    })
  }

  const apply = (event: StreamEvent): ModelFailed | undefined => {
    switch (event.type) {
      case "response.created":
      case "response.in_progress":
        started = event.response
        begun = true
        return undefined
      case "response.output_item.added":
        if (event.item.type === "ignored") return undefined
        seeItem(event.output_index, event.item.id)
        if (event.item.type === "function_call") openCall(String(event.output_index), event.item)
        return undefined
      case "response.output_item.done":
        if (event.item.type !== "ignored") seeItem(event.output_index, event.item.id)
        settle(String(event.output_index), event.item)
        return undefined
      case "response.output_text.delta":
      case "response.refusal.delta":
        seeItem(event.output_index, event.item_id)
        addText(String(event.output_index), event.content_index, event.delta, event.type === "response.refusal.delta")
        return undefined
      case "response.output_text.done":
        seeItem(event.output_index, event.item_id)
        fillText(String(event.output_index), event.content_index, event.text, false)
        return undefined
      case "response.refusal.done":
        seeItem(event.output_index, event.item_id)
        fillText(String(event.output_index), event.content_index, event.refusal, true)
        return undefined
      case "response.function_call_arguments.delta":
      case "response.function_call_arguments.done": {
        seeItem(event.output_index, event.item_id)
        const call = streamedCall(event.output_index, event.type)
        if (call instanceof ModelFailed) return call
        if (event.type === "response.function_call_arguments.delta") addArgs(call, event.delta)
        else fillArgs(call, event.arguments)
        return undefined
      }
      case "response.completed":
      case "response.incomplete": {
        const output = event.response.output ?? []
        const keys = finalKeys(output)
        output.forEach((item, position) => settle(keys[position]!, item))
        final = event
        return undefined
      }
      case "response.failed": {
        const error = event.response.error
        return reportedFailure(provider, error, field(error, "code"), field(error, "message"), {
          event: event.type,
          error,
          ...(event.response.id ? { response_id: event.response.id } : {})
        }, begun)
      }
      case "error": {
        const nested = event.error !== null && typeof event.error === "object" ? event.error : undefined
        const error = nested ?? { code: event.code ?? null, message: event.message ?? null }
        const code = field(error, "code") ?? field(error, "type")
        return reportedFailure(provider, error, code, field(error, "message"), { event: event.type, error }, begun)
      }
    }
  }

  const onEvent = (event: SseEvent): EventVerdict => {
    if (final !== undefined) return undefined
    if (isHeartbeat(event, (type) => KNOWN_TYPES.has(type))) return undefined
    let json: unknown
    try {
      json = JSON.parse(event.data)
    } catch {
      return badResponse(`${provider} sent an event whose data is not JSON`, false, { data: excerpt(event.data) })
    }
    const type = field(json, "type")
    if (type === undefined) return badResponse(`${provider} sent an event without a type`, false, { data: excerpt(event.data) })
    if (!KNOWN_TYPES.has(type)) return undefined
    const decoded = decodeEvent(json)
    if (Either.isLeft(decoded)) {
      return badResponse(`${provider} sent a ${type} event of the wrong shape`, false, {
        event: type,
        error: ParseResult.TreeFormatter.formatErrorSync(decoded.left),
        data: excerpt(event.data)
      })
    }
    const verdict = apply(decoded.right)
    // The final event makes the answer whole: stop reading, whether or not the server closes.
    return verdict === undefined && final !== undefined ? "done" : verdict
  }

  const result = (): Either.Either<ModelResult, ModelFailed> => {
    if (final === undefined) {
      return Either.left(
        new ModelFailed({
          code: "model_stream_broken",
          message: `${provider}'s stream ended without response.completed`,
          ambiguous: true,
          retryable: true
        })
      )
    }
    const response = final.response
    const incompleteReason = final.type === "response.incomplete" ? response.incomplete_details?.reason ?? undefined : undefined
    const stopReason: StopReason = final.type === "response.incomplete"
      ? incompleteReason === "max_output_tokens" ? "max_tokens" : incompleteReason === "content_filter" ? "refusal" : "other"
      : calls.length > 0
      ? "tool_calls"
      : refused
      ? "refusal"
      : "end"
    const providerStopReason = incompleteReason ?? response.status ?? undefined
    // Cut at the output limit, the same request is cut the same way: not worth repeating.
    const truncated = stopReason === "max_tokens"
    const toolCalls: Array<ModelResult["tool_calls"][number]> = []
    for (const call of calls) {
      let input: unknown
      try {
        input = call.args.trim() === "" ? {} : JSON.parse(call.args)
      } catch {
        const cut = truncated ? `, cut off at the output limit (${incompleteReason})` : ""
        return Either.left(
          badResponse(`${provider} sent arguments for ${call.name} (${call.id}) that are not JSON${cut}`, !truncated, {
            tool_call_id: call.id,
            name: call.name,
            arguments: excerpt(call.args),
            stop_reason: stopReason,
            ...(providerStopReason !== undefined ? { provider_stop_reason: providerStopReason } : {})
          })
        )
      }
      toolCalls.push({ id: call.id, name: call.name, input })
    }
    const inputTokens = response.usage?.input_tokens ?? undefined
    const outputTokens = response.usage?.output_tokens ?? undefined
    const id = response.id ?? started?.id ?? undefined
    const model = response.model ?? started?.model ?? undefined
    return Either.right({
      text,
      tool_calls: toolCalls,
      stop_reason: stopReason,
      ...(inputTokens !== undefined || outputTokens !== undefined
        ? {
          usage: {
            ...(inputTokens !== undefined ? { input_tokens: inputTokens } : {}),
            ...(outputTokens !== undefined ? { output_tokens: outputTokens } : {})
          }
        }
        : {}),
      ...(id !== undefined ? { response_id: id } : {}),
      ...(model !== undefined ? { model } : {}),
      ...(providerStopReason !== undefined ? { provider_stop_reason: providerStopReason } : {})
    })
  }

  return { onEvent, result }
}
