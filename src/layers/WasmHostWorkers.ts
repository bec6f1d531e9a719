/**
 * The WasmHost on worker threads (the embedded default): a pool of BRAIN_WASM_WORKERS threads,
 * each activation a fresh instance of a module compiled once at admission (wasm/Module.ts), run
 * by wasm/Activation.ts with the host services of wasm/HostBridge.ts.
 *
 * A loop's output `{"ok": value}` is the turn's result; `{"error": {code, message, …}}` fails the
 * turn with that code when it is one of Brain's failure codes (a host failure the guest passes on,
 * as the official loop does), else with `agentloop_failed`. Anything else the guest does wrong — a
 * trap, output that is not that JSON, its compute budget, ABI misuse — is `agentloop_failed`.
 * `{"ok": value, "transcript": request}` first saves `request` as a `set_transcript` call would
 * (through the activation's own host services, so a delta counts from what it last saved): a
 * request of the wrong shape fails the turn `agentloop_failed`, a failed save with the save's
 * failure, and only a saved one gives the result. `transcript` beside `error` is ABI misuse.
 * A tool's `{"ok": output}` is outcome `ok`; `{"error": …}` and every failure are outcome `error`,
 * and so is a tool's output with a `transcript` (only a loop's output may carry one).
 */
import * as os from "node:os"
import { Effect, Layer, Schema } from "effect"
import { failure, FailureCode } from "../domain/Failure.js"
import { AgentloopFailed } from "../services/Agentloop.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { WasmHost, type WasmHostShape } from "../services/WasmHost.js"
import { activate, type ActivationFailure, jsonBytes, type ActivationLimits } from "./wasm/Activation.js"
import { loopServices, toolServices } from "./wasm/HostBridge.js"
import { admitModule } from "./wasm/Module.js"
import { Pool } from "./wasm/Pool.js"

export interface WasmHostOptions extends ActivationLimits {
  /** Guests computing at once. */
  readonly workers: number
  /** Threads at most, guests waiting in host calls included (default WASM_THREADS_PER_WORKER × workers). */
  readonly threads?: number
  readonly moduleBytes: number
}

/** Threads per compute slot by default: a turn's guest waits in host calls (journal commits, model, tools) most of its time. */
export const WASM_THREADS_PER_WORKER = 8

const isCode = Schema.is(FailureCode)

/** A loop's `ok` may come with `transcript`, a set_transcript request to save before the turn takes the result. */
type Output = { readonly ok: unknown; readonly transcript?: unknown } | { readonly transcript?: unknown; readonly error: { readonly code?: unknown; readonly message?: unknown; readonly retryable?: unknown; readonly ambiguous?: unknown } }

const readOutput = (text: string): Output | undefined => {
  try {
    const value = JSON.parse(text) as unknown
    if (value === null || typeof value !== "object" || Array.isArray(value)) return undefined
    if ("ok" in value) return value as Output
    if ("error" in value && (value as { error: unknown }).error !== null && typeof (value as { error: unknown }).error === "object") {
      return value as Output
    }
    return undefined
  } catch {
    return undefined
  }
}

const loopFailed = (message: string) => new AgentloopFailed({ failure: failure("agentloop_failed", message) })

export const make = (options: WasmHostOptions) =>
  Effect.gen(function*() {
    const workers = Math.max(1, options.workers)
    const pool = new Pool({ compute: workers, threads: options.threads ?? WASM_THREADS_PER_WORKER * workers })
    yield* Effect.addFinalizer(() => pool.close)
    const limits: ActivationLimits = { computeMs: options.computeMs, ioBytes: options.ioBytes, memoryBytes: options.memoryBytes }

    const service: WasmHostShape = {
      admit: (bytes) => admitModule(bytes, { maxModuleBytes: options.moduleBytes, maxMemoryBytes: options.memoryBytes }),
      runLoop: (module, input, host) => {
        // The same services for the activation and its output's transcript: a delta's base is what the activation last saved.
        const services = loopServices(host, input.transcript)
        return activate(pool, { moduleId: module.hash, module: module.module, memory: module.memory, entry: "brain_run", input: jsonBytes(input), perform: services }, limits).pipe(
          Effect.mapError((f: ActivationFailure) => loopFailed(f.message)),
          Effect.flatMap((text) => {
            const output = readOutput(text)
            if (output === undefined) return Effect.fail(loopFailed('the guest\'s output is not {"ok": …} or {"error": {…}} JSON'))
            if ("ok" in output) {
              if (!("transcript" in output)) return Effect.succeed(output.ok)
              // Saved as the set_transcript call it stands for, committed before the turn ends; only then the result.
              return services.save(output.transcript).pipe(
                Effect.mapError((e) =>
                  e._tag === "TranscriptRefused"
                    ? loopFailed(`the output's transcript is not a valid set_transcript request: ${e.reason}`)
                    : new AgentloopFailed({ failure: e.failure })
                ),
                Effect.as(output.ok)
              )
            }
            if ("transcript" in output) return Effect.fail(loopFailed('the guest\'s output carries a transcript with an error: a transcript goes only with {"ok": …}'))
            const e = output.error
            const message = typeof e.message === "string" ? e.message : "the guest failed"
            return Effect.fail(
              new AgentloopFailed({
                failure: isCode(e.code)
                  ? failure(e.code, message, { retryable: e.retryable === true, ambiguous: e.ambiguous === true })
                  : failure("agentloop_failed", message)
              })
            )
          })
        )
      },
      runTool: (module, activation, services) =>
        activate(pool, { moduleId: module.hash, module: module.module, memory: module.memory, entry: "brain_tool", input: jsonBytes(activation), perform: toolServices(services) }, limits).pipe(
          Effect.map((text) => {
            const output = readOutput(text)
            if (output === undefined) return { _tag: "error" as const, output: { message: 'the tool\'s output is not {"ok": …} or {"error": {…}} JSON' } }
            if ("transcript" in output) return { _tag: "error" as const, output: { message: "a tool's output may not carry a transcript (only a loop's may)" } }
            return "ok" in output ? { _tag: "ok" as const, output: output.ok } : { _tag: "error" as const, output: output.error }
          }),
          Effect.catchAll((f) => Effect.succeed({ _tag: "error" as const, output: { message: f.message } }))
        )
    }
    return service
  })

/** The WasmHost with ServerConfig's limits. */
export const layer = Layer.scoped(
  WasmHost,
  Effect.flatMap(ServerConfig, (config) =>
    make({
      workers: config.wasmWorkers ?? os.availableParallelism(),
      ...(config.wasmThreads !== undefined ? { threads: config.wasmThreads } : {}),
      memoryBytes: config.maxWasmMemoryBytes,
      computeMs: config.maxWasmComputeMs,
      ioBytes: config.maxWasmIoBytes,
      moduleBytes: config.maxWasmModuleBytes
    }))
)
