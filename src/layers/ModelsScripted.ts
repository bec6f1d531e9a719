/**
 * The deterministic scripted provider (DESIGN §9): `model: {provider: "scripted", replies?}`.
 * Replies are used in order, cyclically, indexed by the session's count of model calls so far, so
 * a session behaves the same across restarts. With no replies it echoes the last user message.
 * Named bindings of real providers are not built yet; until then a binding name fails clearly.
 */
import { Duration, Effect, Layer } from "effect"
import type { Message } from "../domain/Messages.js"
import type { ModelResult } from "../domain/Model.js"
import { ModelFailed, Models, type ModelsShape } from "../services/Models.js"

const textOf = (m: Message): string =>
  typeof m.content === "string"
    ? m.content
    : m.content.map((p) => (typeof p.text === "string" ? p.text : "")).join("")

export const scripted: ModelsShape = {
  call: ({ index, model, request, sequence }) =>
    Effect.gen(function*() {
      if (typeof model === "string") {
        return yield* Effect.fail(
          new ModelFailed({ message: `no model binding named ${JSON.stringify(model)} is configured`, ambiguous: false, retryable: false })
        )
      }
      const replies = model.replies ?? []
      if (replies.length === 0) {
        const lastUser = [...request.messages].reverse().find((m) => m.role === "user")
        return { text: lastUser ? textOf(lastUser) : "", tool_calls: [], stop_reason: "end" } satisfies ModelResult
      }
      const reply = replies[index % replies.length]!
      if (reply.delay_ms) yield* Effect.sleep(Duration.millis(reply.delay_ms))
      if (reply.fail) {
        return yield* Effect.fail(
          new ModelFailed({ message: `${reply.fail.code}: ${reply.fail.message}`, ambiguous: false, retryable: false })
        )
      }
      const toolCalls = (reply.tool_calls ?? []).map((c, i) => ({ id: `call_${sequence}_${i}`, name: c.name, input: c.input }))
      return {
        text: reply.text ?? "",
        tool_calls: toolCalls,
        stop_reason: toolCalls.length > 0 ? "tool_calls" : "end"
      } satisfies ModelResult
    })
}

export const layer = Layer.succeed(Models, scripted)
