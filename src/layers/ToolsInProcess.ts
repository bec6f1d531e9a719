/**
 * An in-process tool executor: tools are TypeScript handlers registered by name. For tests and
 * embedders. A handler gets the input and the call's AbortSignal; the helpers below build the
 * behaviours tests need (latency, failure, a hang that honours cancellation, one that ignores it).
 * Real host, HTTP and Wasm executors arrive with Environments.
 */
import { Duration, Effect, Layer } from "effect"
import { type ToolInvocation, ToolLost, type ToolReply, Tools, type ToolsShape } from "../services/Tools.js"

export type ToolHandler = (input: unknown, invocation: ToolInvocation) => Effect.Effect<ToolReply, ToolLost>

/** Resolves when the signal aborts (immediately if it already has). */
export const aborted = (signal: AbortSignal): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    if (signal.aborted) return resume(Effect.void)
    const onAbort = () => resume(Effect.void)
    signal.addEventListener("abort", onAbort, { once: true })
    return Effect.sync(() => signal.removeEventListener("abort", onAbort))
  })

/** Answers `output` after `latencyMs`; an abort during the wait is confirmed as stopped. */
export const succeedAfter = (latencyMs: number, output: (input: unknown) => unknown = (input) => input): ToolHandler =>
  (input, { signal }) =>
    Effect.raceFirst(
      Effect.as(Effect.sleep(Duration.millis(latencyMs)), { outcome: "ok", output: output(input) } as ToolReply),
      Effect.as(aborted(signal), { outcome: "stopped" } as ToolReply)
    )

/** Answers a definite tool error. */
export const failWith = (output: unknown): ToolHandler => () => Effect.succeed({ outcome: "error", output })

/** Never answers on its own; confirms an abort as stopped. */
export const hang: ToolHandler = (_input, { signal }) => Effect.as(aborted(signal), { outcome: "stopped" } as ToolReply)

/** Ignores aborts: answers only after `latencyMs` whatever happens (or never, when Infinity). */
export const ignoreCancel = (latencyMs: number): ToolHandler => (input) =>
  latencyMs === Infinity
    ? Effect.never
    : Effect.as(Effect.sleep(Duration.millis(latencyMs)), { outcome: "ok", output: input } as ToolReply)

/** The executor is lost mid-call (a dropped connection): the outcome is unknown. */
export const lose: ToolHandler = () => Effect.fail(new ToolLost({ message: "the executor went away" }))

export const make = (handlers: Readonly<Record<string, ToolHandler>>): ToolsShape => ({
  invoke: (invocation) => {
    const handler = Object.prototype.hasOwnProperty.call(handlers, invocation.call.name)
      ? handlers[invocation.call.name]
      : undefined
    if (!invocation.definition) {
      return Effect.succeed({ outcome: "error", output: { error: `no tool named ${JSON.stringify(invocation.call.name)}: the session declares none` } })
    }
    if (!handler) {
      return Effect.succeed({
        outcome: "error",
        output: {
          error: `the tool ${JSON.stringify(invocation.call.name)} is declared, but nothing runs it: give it an environment (an http or host Environment) or a module (a Wasm tool)`
        }
      })
    }
    return handler(invocation.call.input, invocation)
  }
})

export const layer = (handlers: Readonly<Record<string, ToolHandler>> = {}) => Layer.succeed(Tools, make(handlers))
