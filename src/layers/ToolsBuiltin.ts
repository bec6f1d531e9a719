/**
 * Tools: a tool whose definition names a `module` is a Wasm tool, run in the built-in environment
 * (`brain`: the WebAssembly host's worker pool) with the tool half of the ABI (docs/abi.md); any
 * other runs on the in-process handlers an embedder or a test registers (ToolsInProcess.ts).
 *
 * A Wasm tool's `{"ok": output}` is outcome `ok`; `{"error": …}`, a trap, bad output or its compute
 * budget is outcome `error` (the model sees the error). An abort (a cancel, the call's deadline)
 * stops the guest at once — its thread is terminated — and is confirmed as stopped, so the call is
 * recorded `cancelled` or `timeout`.
 */
import { Effect, Layer, Option } from "effect"
import { Agentloops } from "../services/Agentloop.js"
import { type ToolInvocation, type ToolReply, Tools, type ToolsShape } from "../services/Tools.js"
import { type ToolRun, WasmHost } from "../services/WasmHost.js"
import { stopOf } from "./CallStop.js"
import * as ToolsInProcess from "./ToolsInProcess.js"

export const make = (handlers: Readonly<Record<string, ToolsInProcess.ToolHandler>> = {}) =>
  Effect.gen(function*() {
    const wasm = yield* Effect.serviceOption(WasmHost)
    const agentloops = yield* Effect.serviceOption(Agentloops)
    const inProcess = ToolsInProcess.make(handlers)

    const runWasm = Effect.fnUntraced(function*(invocation: ToolInvocation, id: string) {
      if (Option.isNone(wasm) || Option.isNone(agentloops)) {
        return { outcome: "error", output: { error: "this server runs no WebAssembly host" } } satisfies ToolReply
      }
      const module = yield* Effect.either(agentloops.value.tool(id))
      if (module._tag === "Left") return { outcome: "error", output: { error: module.left.reason } } satisfies ToolReply
      const run = wasm.value.runTool(
        module.right,
        {
          input: invocation.call.input ?? null,
          call: {
            session_id: invocation.session,
            sequence: invocation.sequence,
            name: invocation.call.name,
            deadline_at_ms: invocation.deadlineAtMs ?? 0
          }
        },
        { emit: invocation.emit, telemetry: invocation.telemetry }
      )
      // The abort (the call's deadline, the turn's cancel) interrupts this fiber, which stops the
      // guest at once (a pool thread is terminated): the caller runs `invoke` in a fiber of its
      // own and takes that interrupted end as the executor's confirmation that it stopped
      // (services/Tools.ts). No fiber of its own for the activation, no race. It listens on the call's
      // stop (no AbortSignal is made for it: CallStop.ts); the listener comes off when the run
      // ends; an interrupted run leaves it on a stop that is the call's alone (fired once at most,
      // on a fiber that has ended), so no finalizer is armed for it.
      const r = yield* Effect.withFiberRuntime<ToolRun | "stopped">((fiber) => {
        const stop = stopOf(invocation)
        if (stop.aborted) return Effect.succeed("stopped" as const)
        const unlisten = stop.onAbort(() => fiber.unsafeInterruptAsFork(fiber.id()))
        return Effect.flatMap(Effect.exit(run), (exit) => {
          unlisten()
          return exit
        })
      })
      if (r === "stopped") return { outcome: "stopped" } satisfies ToolReply
      return (r._tag === "ok" ? { outcome: "ok", output: r.output } : { outcome: "error", output: r.output }) satisfies ToolReply
    })

    const service: ToolsShape = {
      invoke: (invocation) => {
        const module = invocation.definition?.module
        return module !== undefined ? runWasm(invocation, module) : inProcess.invoke(invocation)
      }
    }
    return service
  })

export const layer = (handlers: Readonly<Record<string, ToolsInProcess.ToolHandler>> = {}) => Layer.effect(Tools, make(handlers))
