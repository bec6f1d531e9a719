/**
 * The deterministic scripted provider (DESIGN §9): `model: {provider: "scripted", replies?}`.
 * Replies are used in order, cyclically, indexed by the session's count of model calls so far, so
 * a session behaves the same across restarts. With no replies it echoes the last user message.
 * Like a real provider it streams: its text goes to `onDelta` word by word (spread over the
 * reply's `delay_ms` when it has one), then the whole result is returned.
 */
import { Duration, Effect, Layer } from "effect"
import type { Message } from "../domain/Messages.js"
import type { ModelResult } from "../domain/Model.js"
import { type ModelCall, ModelFailed, type ModelFailureCode, Models, type ModelsShape } from "../services/Models.js"

const textOf = (m: Message): string =>
  typeof m.content === "string"
    ? m.content
    : m.content.map((p) => (typeof p.text === "string" ? p.text : "")).join("")

/** Words with the space that follows them, so the deltas join back into the text exactly. */
const pieces = (text: string) => text.match(/\S+\s*|\s+/g) ?? []

/** Hands the text to `onDelta` piece by piece, spread evenly over `delayMs`. */
const stream = Effect.fnUntraced(function*(call: ModelCall, text: string, delayMs: number) {
  const parts = pieces(text)
  const onDelta = call.onDelta
  if (!onDelta || parts.length === 0) {
    if (delayMs > 0) yield* Effect.sleep(Duration.millis(delayMs))
    return
  }
  const step = delayMs / parts.length
  for (const part of parts) {
    if (step > 0) yield* Effect.sleep(Duration.millis(step))
    onDelta({ type: "text", text: part })
  }
})

/**
 * A scripted `fail` with one of these codes fails the call with it, ambiguous and retryable as
 * docs/models.md's table gives that code for a real provider, so a test can script what a provider
 * would answer. Any other code (Brain's own `model_call_limit`, or an unknown one) is
 * `model_failed`, not ambiguous, its message naming the code.
 */
const PROVIDER_FAILURES = {
  model_unreachable: { ambiguous: false, retryable: true },
  model_rejected: { ambiguous: false, retryable: false },
  model_rate_limited: { ambiguous: false, retryable: true },
  model_unavailable: { ambiguous: true, retryable: true },
  model_stream_broken: { ambiguous: true, retryable: true },
  model_timeout: { ambiguous: true, retryable: true },
  model_output_limit: { ambiguous: true, retryable: false },
  model_bad_response: { ambiguous: true, retryable: false },
  model_binding_missing: { ambiguous: false, retryable: false },
  model_binding_moved: { ambiguous: false, retryable: false }
} as const satisfies Partial<Record<ModelFailureCode, { readonly ambiguous: boolean; readonly retryable: boolean }>>
type ProviderFailure = keyof typeof PROVIDER_FAILURES

export const scripted: ModelsShape = {
  call: (call) => Effect.gen(() => callOf(call))
}

function* callOf(call: ModelCall) {
  const { index, model, request, sequence } = call
  if (typeof model === "string") {
    return yield* Effect.fail(
      new ModelFailed({
        code: "model_binding_missing",
        message: `no model binding named ${JSON.stringify(model)} is configured`,
        ambiguous: false,
        retryable: false
      })
    )
  }
  const replies = model.replies ?? []
  if (replies.length === 0) {
    const text = lastUserText(request.messages)
    yield* stream(call, text, 0)
    return { text, tool_calls: [], stop_reason: "end" } satisfies ModelResult
  }
  const reply = replies[index % replies.length]!
  yield* stream(call, reply.text ?? "", reply.delay_ms ?? 0)
  if (reply.fail) {
    const known = Object.hasOwn(PROVIDER_FAILURES, reply.fail.code) ? PROVIDER_FAILURES[reply.fail.code as ProviderFailure] : undefined
    return yield* Effect.fail(
      known !== undefined
        ? new ModelFailed({ code: reply.fail.code as ProviderFailure, message: reply.fail.message, ...known })
        : new ModelFailed({ code: "model_failed", message: `${reply.fail.code}: ${reply.fail.message}`, ambiguous: false, retryable: false })
    )
  }
  const toolCalls = (reply.tool_calls ?? []).map((c, i) => ({ id: `call_${sequence}_${i}`, name: c.name, input: c.input }))
  return {
    text: reply.text ?? "",
    tool_calls: toolCalls,
    stop_reason: toolCalls.length > 0 ? "tool_calls" : "end"
  } satisfies ModelResult
}

/** The text of the last user message (searched from the end: a reply costs the same however long the conversation), or "". */
const lastUserText = (messages: ReadonlyArray<Message>): string => {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === "user") return textOf(messages[i]!)
  return ""
}

export const layer = Layer.succeed(Models, scripted)
