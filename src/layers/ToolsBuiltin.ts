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
import { Effect, Exit, Layer, Option } from "effect"
import { Agentloops } from "../services/Agentloop.js"
import { type ToolInvocation, type ToolReply, Tools, type ToolsShape } from "../services/Tools.js"
import { type AdmittedModule, type ToolRun, WasmHost, type WasmHostShape } from "../services/WasmHost.js"
import { stopOf } from "./CallStop.js"
import * as ToolsInProcess from "./ToolsInProcess.js"

/** What a Wasm tool's run answers, as the call's reply. */
const replyOf = (r: ToolRun): ToolReply => (r._tag === "ok" ? { outcome: "ok", output: r.output } : { outcome: "error", output: r.output })

export const make = (handlers: Readonly<Record<string, ToolsInProcess.ToolHandler>> = {}) =>
  Effect.gen(function*() {
    const wasm = yield* Effect.serviceOption(WasmHost)
    const agentloops = yield* Effect.serviceOption(Agentloops)
    const inProcess = ToolsInProcess.make(handlers)

    /** A Wasm tool's call, its module admitted, started now (WasmHostShape.startTool): an `Exit` when it already ended. */
    const startModule = (host: WasmHostShape, module: AdmittedModule, invocation: ToolInvocation): Effect.Effect<ToolReply> => {
      const stop = stopOf(invocation)
      if (stop.aborted) return Exit.succeed({ outcome: "stopped" })
      const activation = {
        input: invocation.call.input ?? null,
        call: {
          session_id: invocation.session,
          sequence: invocation.sequence,
          name: invocation.call.name,
          deadline_at_ms: invocation.deadlineAtMs ?? 0
        }
      }
      const services = { emit: invocation.emit, telemetry: invocation.telemetry }
      const run = host.startTool !== undefined ? host.startTool(module, activation, services) : host.runTool(module, activation, services)
      // Ended already (a guest that made no host call): nothing is left to stop.
      if (Exit.isExit(run)) return Exit.map(run as Exit.Exit<ToolRun>, replyOf)
      // The rest of it. The abort (the call's deadline, the turn's cancel) interrupts the fiber
      // that runs it, which stops the guest at once (a pool thread is terminated): the caller runs
      // it in a fiber of its own and takes that interrupted end as the executor's confirmation
      // that it stopped (services/Tools.ts). No fiber of its own for the activation, no race. It
      // listens on the call's stop (no AbortSignal is made for it: CallStop.ts); the listener
      // comes off when the run ends; an interrupted run leaves it on a stop that is the call's
      // alone (fired once at most, on a fiber that has ended), so no finalizer is armed for it.
      return Effect.withFiberRuntime<ToolReply>((fiber) => {
        const unlisten = stop.onAbort(() => fiber.unsafeInterruptAsFork(fiber.id()))
        return Effect.flatMap(Effect.exit(run), (exit): Effect.Effect<ToolReply> => {
          unlisten()
          return Exit.isFailure(exit) ? Effect.failCause(exit.cause) : Effect.succeed(replyOf(exit.value))
        })
      })
    }

    /** A Wasm tool's call, started now: an `Exit` when its module was at hand and it already ended. */
    const startWasm = (invocation: ToolInvocation, id: string): Effect.Effect<ToolReply> => {
      if (Option.isNone(wasm) || Option.isNone(agentloops)) {
        return Exit.succeed({ outcome: "error", output: { error: "this server runs no WebAssembly host" } })
      }
      const host = wasm.value
      const found = agentloops.value.tool(id)
      // A tool call's usual case: the module compiled and cached, at hand now.
      if (Exit.isExit(found) && Exit.isSuccess(found)) return startModule(host, found.value as AdmittedModule, invocation)
      return Effect.matchEffect(found, {
        onFailure: (e) => Effect.succeed<ToolReply>({ outcome: "error", output: { error: e.reason } }),
        onSuccess: (module) => startModule(host, module, invocation)
      })
    }

    const service: ToolsShape = {
      invoke: (invocation) => {
        const module = invocation.definition?.module
        return module !== undefined ? Effect.suspend(() => startWasm(invocation, module)) : inProcess.invoke(invocation)
      },
      start: (invocation) => {
        const module = invocation.definition?.module
        return module !== undefined ? startWasm(invocation, module) : inProcess.invoke(invocation)
      }
    }
    return service
  })

export const layer = (handlers: Readonly<Record<string, ToolsInProcess.ToolHandler>> = {}) => Layer.effect(Tools, make(handlers))
