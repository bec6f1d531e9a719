/**
 * Tools: a tool whose definition names a `module` is a Wasm tool, run in the built-in environment
 * (`brain`: the WebAssembly host's worker pool) with the tool half of the ABI (docs/abi.md); any
 * other runs on the in-process handlers an embedder or a test registers (ToolsInProcess.ts).
 *
 * A Wasm tool's `{"ok": output}` is outcome `ok`; `{"error": …}`, a trap, bad output or its compute
 * budget is outcome `error` (the model sees the error). An abort (a cancel, the call's deadline)
 * stops the guest at once — by its twin's metering, or by terminating its thread (wasm/Pinned.ts) —
 * and is confirmed as stopped, so the call is recorded `cancelled` or `timeout`. A call the host
 * will not run because the server is stopping (its pool closed) is stopped too, not the tool's
 * error: recorded `cancelled`, code `interrupted`, not sent if its guest had not begun.
 */
import { Effect, Exit, Layer, Option } from "effect"
import { failure } from "../domain/Failure.js"
import { Agentloops } from "../services/Agentloop.js"
import { type ToolInvocation, type ToolReply, Tools, type ToolsShape } from "../services/Tools.js"
import { type AdmittedModule, type ToolActivation, type ToolRun, type ToolServices, WasmHost, type WasmHostShape } from "../services/WasmHost.js"
import { stopOf } from "./CallStop.js"
import * as ToolsInProcess from "./ToolsInProcess.js"

/** What a Wasm tool is given: its input, and which call it is. */
const activationOf = (invocation: ToolInvocation): ToolActivation => ({
  input: invocation.call.input ?? null,
  call: {
    session_id: invocation.session,
    sequence: invocation.sequence,
    name: invocation.call.name,
    deadline_at_ms: invocation.deadlineAtMs ?? 0
  }
})

/** A Wasm tool's run as the call's reply. */
/** A Wasm tool's host call after its call was stopped (docs/abi.md, "Host services": every call then answers an error). */
const stopped = failure("cancelled", "the tool call was stopped (the turn's cancel or the call's deadline)")

/** A Wasm tool's host services for one call: refused once the call is stopped; `began` told when its guest starts. */
const servicesOf = (invocation: ToolInvocation, began?: () => void): ToolServices => {
  const stop = stopOf(invocation)
  const refusal = () => (stop.aborted ? stopped : undefined)
  return began === undefined
    ? { emit: invocation.emit, telemetry: invocation.telemetry, refusal }
    : { emit: invocation.emit, telemetry: invocation.telemetry, refusal, began }
}

const replyOf = (r: ToolRun): ToolReply => (r._tag === "stopped" ? { outcome: "stopped" } : r._tag === "ok" ? { outcome: "ok", output: r.output } : { outcome: "error", output: r.output })

export const make = (handlers: Readonly<Record<string, ToolsInProcess.ToolHandler>> = {}) =>
  Effect.gen(function*() {
    const wasm = yield* Effect.serviceOption(WasmHost)
    const agentloops = yield* Effect.serviceOption(Agentloops)
    const inProcess = ToolsInProcess.make(handlers)

    /** A Wasm tool's call, its module admitted; plain effects, no generator (a tool-loop turn has eight calls). */
    const runModule = (host: WasmHostShape, module: AdmittedModule, invocation: ToolInvocation): Effect.Effect<ToolReply> => {
      // Whether its guest has started: stopped before (still waiting for a thread), it never ran.
      let began = false
      const run = host.runTool(module, activationOf(invocation), servicesOf(invocation, () => void (began = true)))
      // The abort (the call's deadline, the turn's cancel) interrupts this fiber, which stops the
      // guest at once (wasm/Pinned.ts: its metering, or its thread terminated): the caller runs `invoke` in a fiber of its
      // own and takes that interrupted end as the executor's confirmation that it stopped
      // (services/Tools.ts). No fiber of its own for the activation, no race. It listens on the call's
      // stop (no AbortSignal is made for it: CallStop.ts); the listener comes off when the run
      // ends; an interrupted run leaves it on a stop that is the call's alone (fired once at most,
      // on a fiber that has ended), so no finalizer is armed for it.
      return Effect.withFiberRuntime<ToolReply>((fiber) => {
        const stop = stopOf(invocation)
        if (stop.aborted) {
          stop.notStarted?.()
          return Effect.succeed({ outcome: "stopped" })
        }
        const unlisten = stop.onAbort(() => {
          if (!began) stop.notStarted?.()
          fiber.unsafeInterruptAsFork(fiber.id())
        })
        return Effect.flatMap(Effect.exit(run), (exit): Effect.Effect<ToolReply> => {
          unlisten()
          if (Exit.isFailure(exit)) return Effect.failCause(exit.cause)
          // Stopped by the host itself (the server stopping) before its guest began: it never ran.
          if (exit.value._tag === "stopped" && !began) stop.notStarted?.()
          return Effect.succeed(replyOf(exit.value))
        })
      })
    }

    const runWasm = (invocation: ToolInvocation, id: string): Effect.Effect<ToolReply> => {
      if (Option.isNone(wasm) || Option.isNone(agentloops)) {
        return Effect.succeed({ outcome: "error", output: { error: "this server runs no WebAssembly host" } })
      }
      const host = wasm.value
      return Effect.matchEffect(agentloops.value.tool(id), {
        onFailure: (e) => Effect.succeed<ToolReply>({ outcome: "error", output: { error: e.reason } }),
        onSuccess: (module) => runModule(host, module, invocation)
      })
    }

    /** A Wasm tool's call tried now (WasmHostShape.tryTool), when its module is at hand (compiled and cached). */
    const tryWasm = (invocation: ToolInvocation, id: string): Exit.Exit<ToolReply> | undefined => {
      if (Option.isNone(wasm) || Option.isNone(agentloops) || wasm.value.tryTool === undefined) return undefined
      const found = agentloops.value.tool(id)
      if (!Exit.isExit(found) || Exit.isFailure(found) || stopOf(invocation).aborted) return undefined
      const run = wasm.value.tryTool(found.value as AdmittedModule, activationOf(invocation), servicesOf(invocation))
      return run === undefined ? undefined : Exit.map(run, replyOf)
    }

    const service: ToolsShape = {
      invoke: (invocation) => {
        const module = invocation.definition?.module
        return module !== undefined ? runWasm(invocation, module) : inProcess.invoke(invocation)
      },
      tryNow: (invocation) => {
        const module = invocation.definition?.module
        return module !== undefined ? tryWasm(invocation, module) : undefined
      }
    }
    return service
  })

export const layer = (handlers: Readonly<Record<string, ToolsInProcess.ToolHandler>> = {}) => Layer.effect(Tools, make(handlers))
