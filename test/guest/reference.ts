/**
 * The TypeScript official loop (src/loops/official.ts) behind the same scripted host as the
 * compiled guests: each Host method is turned into the ABI request a host call would carry
 * (`model` → `{"messages"}`, `setTranscript` → `{"messages"}`, `dispatch` → `{"calls"}`; a save riding on
 * a call → its `{"transcript": {"messages"}}`) and answered
 * by the same script, so the two loops can be compared call for call and byte for byte.
 */
import { Effect, Exit, Option } from "effect"
import { officialLoop } from "../../src/loops/official.js"
import { type ActivationInput, type Host, HostCallFailed } from "../../src/services/Agentloop.js"
import type { Answerer, GuestRun, HostCall } from "./harness.js"

export const runTypeScriptLoop = (input: unknown, answer: Answerer): Omit<GuestRun, "memoryBytes"> => {
  const calls: Array<HostCall> = []
  const ask = (op: string, request: unknown): Effect.Effect<any, HostCallFailed> =>
    Effect.suspend(() => {
      const text = JSON.stringify(request)
      calls.push({ op, request: text })
      const reply = answer(op, JSON.parse(text)) as any
      return "ok" in reply ? Effect.succeed(reply.ok) : Effect.fail(new HostCallFailed({ failure: reply.error }))
    })
  const host: Host = {
    refusal: () => undefined,
    // A save riding on the call, as the host sees the guest's once its deltas are expanded (delta.ts).
    model: (request, save) => ask("model", save !== undefined ? { transcript: { messages: save }, ...request } : request),
    dispatch: (toolCalls, save) => ask("dispatch", save !== undefined ? { calls: toolCalls, transcript: { messages: save } } : { calls: toolCalls }),
    emit: (kind, payload) => Effect.map(ask("emit", { kind, payload }), (r) => r.sequence),
    telemetry: (data) => Effect.ignore(ask("telemetry", data)),
    kvRead: (key) => Effect.map(ask("kv_read", { key }), (r) => (r.found ? Option.some(r.value) : Option.none())),
    kvPut: (key, value) => Effect.asVoid(ask("kv_put", { key, value })),
    kvDelete: (key) => Effect.asVoid(ask("kv_delete", { key })),
    setTranscript: (messages) => Effect.asVoid(ask("set_transcript", { messages })),
    // The Wasm loop's output transcript is taken as its last set_transcript (harness.ts): the same here.
    setTranscriptAtEnd: (messages) => Effect.asVoid(ask("set_transcript", { messages })),
    events: (options) => ask("events", options)
  }
  const exit = Effect.runSyncExit(officialLoop.activate(input as ActivationInput, host))
  if (Exit.isSuccess(exit)) return { calls, output: JSON.stringify({ ok: exit.value }) }
  const failure = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
  if (failure instanceof HostCallFailed) {
    // The turn fails with the host's failure whole (code, message, flags, details): the guest's
    // output must carry the same for the host to fail its turn the same way.
    const f = failure.failure
    return {
      calls,
      output: JSON.stringify({
        error: { code: f.code, message: f.message, retryable: f.retryable, ambiguous: f.ambiguous, ...(f.details !== undefined ? { details: f.details } : {}) }
      })
    }
  }
  throw new Error(`the TypeScript loop died: ${String(exit)}`)
}
