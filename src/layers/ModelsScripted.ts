/**
 * The deterministic scripted provider (DESIGN §9): `model: {provider: "scripted", replies?}`.
 * Replies are used in order, cyclically, indexed by the session's count of model calls so far, so
 * a session behaves the same across restarts. With no replies it echoes the last user message.
 * Like a real provider it streams: its text goes to `onDelta` word by word (spread over the
 * reply's `delay_ms` when it has one), then the whole result is returned. And like a real provider
 * it is held to BRAIN_MAX_MODEL_SECS and BRAIN_MAX_MODEL_OUTPUT_BYTES (`scriptedWithin`): a wait
 * between two pieces (or before the first) longer than the stall bound fails the call
 * `model_timeout` once the bound has passed, and an answer (its text, then its tool calls as JSON)
 * over the output bound fails it `model_output_limit`, both ambiguous as for an HTTP provider.
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

/** The bounds a real provider's call is held to (ServerConfig's maxModelMs / maxModelOutputBytes); 0 = no bound. */
export interface ScriptedLimits {
  /** Milliseconds a call may send nothing before it fails `model_timeout`. */
  readonly stallMs: number
  /** Bytes of answer before the call fails `model_output_limit`. */
  readonly maxOutputBytes: number
}

const UNBOUNDED: ScriptedLimits = { stallMs: 0, maxOutputBytes: 0 }

const utf8 = new TextEncoder()
const bytesOf = (text: string) => utf8.encode(text).byteLength

const stalled = (stallMs: number) =>
  new ModelFailed({
    code: "model_timeout",
    message: `the scripted provider sent nothing for ${stallMs} ms (BRAIN_MAX_MODEL_SECS)`,
    ambiguous: true,
    retryable: true
  })

const overOutput = (maxOutputBytes: number) =>
  new ModelFailed({
    code: "model_output_limit",
    message: `the scripted provider sent more than ${maxOutputBytes} bytes (BRAIN_MAX_MODEL_OUTPUT_BYTES)`,
    ambiguous: true,
    retryable: false
  })

/**
 * Hands the text to `onDelta` piece by piece, spread evenly over `delayMs` (the whole delay at once
 * when nobody listens), within `limits`: returns the answer's bytes so far.
 */
const stream = Effect.fnUntraced(function*(call: ModelCall, text: string, delayMs: number, limits: ScriptedLimits) {
  const parts = pieces(text)
  const onDelta = call.onDelta
  const step = onDelta && parts.length > 0 ? delayMs / parts.length : delayMs
  if (limits.stallMs > 0 && step > limits.stallMs) {
    yield* Effect.sleep(Duration.millis(limits.stallMs))
    return yield* Effect.fail(stalled(limits.stallMs))
  }
  if (!onDelta || parts.length === 0) {
    if (delayMs > 0) yield* Effect.sleep(Duration.millis(delayMs))
    const bytes = bytesOf(text)
    if (limits.maxOutputBytes > 0 && bytes > limits.maxOutputBytes) return yield* Effect.fail(overOutput(limits.maxOutputBytes))
    return bytes
  }
  let bytes = 0
  for (const part of parts) {
    if (step > 0) yield* Effect.sleep(Duration.millis(step))
    bytes += bytesOf(part)
    if (limits.maxOutputBytes > 0 && bytes > limits.maxOutputBytes) return yield* Effect.fail(overOutput(limits.maxOutputBytes))
    onDelta({ type: "text", text: part })
  }
  return bytes
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

/** The scripted provider held to `limits`, as ModelsBound serves it. */
export const scriptedWithin = (limits: ScriptedLimits): ModelsShape => ({
  call: (call) => Effect.gen(() => callOf(call, limits))
})

/** The scripted provider with no bound (tests that wrap it; the server serves `scriptedWithin`). */
export const scripted: ModelsShape = scriptedWithin(UNBOUNDED)

function* callOf(call: ModelCall, limits: ScriptedLimits) {
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
    yield* stream(call, text, 0, limits)
    return { text, tool_calls: [], stop_reason: "end" } satisfies ModelResult
  }
  const reply = replies[index % replies.length]!
  const textBytes = yield* stream(call, reply.text ?? "", reply.delay_ms ?? 0, limits)
  if (reply.fail) {
    const known = Object.hasOwn(PROVIDER_FAILURES, reply.fail.code) ? PROVIDER_FAILURES[reply.fail.code as ProviderFailure] : undefined
    return yield* Effect.fail(
      known !== undefined
        ? new ModelFailed({ code: reply.fail.code as ProviderFailure, message: reply.fail.message, ...known })
        : new ModelFailed({ code: "model_failed", message: `${reply.fail.code}: ${reply.fail.message}`, ambiguous: false, retryable: false })
    )
  }
  const toolCalls = (reply.tool_calls ?? []).map((c, i) => ({ id: `call_${sequence}_${i}`, name: c.name, input: c.input }))
  if (limits.maxOutputBytes > 0 && toolCalls.length > 0 && textBytes + bytesOf(JSON.stringify(toolCalls)) > limits.maxOutputBytes) {
    return yield* Effect.fail(overOutput(limits.maxOutputBytes))
  }
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
