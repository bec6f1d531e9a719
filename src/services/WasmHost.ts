/**
 * WasmHost: runs guest modules (docs/abi.md) — an Agentloop's activation or a Wasm tool's call —
 * each in a fresh instance on a pool of worker threads, with the journaled host services of the
 * runtime behind the ABI's one host function. Limits (memory, compute, sizes) are the host's;
 * anything a guest does wrong fails its own activation and nothing else.
 */
import { Context, Data, type Effect, type Exit } from "effect"
import type { AgentloopFailed, ActivationInput, Host } from "./Agentloop.js"
// `WebAssembly.Module` below, declared for users of brain/effect who compile without the DOM library.
import "../domain/WebAssemblyModule.js"

/** A module refused at admission, and why. */
export class ModuleRejected extends Data.TaggedError("ModuleRejected")<{
  readonly reason: string
  /**
   * Nothing is known wrong with the module: too many uploads are compiling now
   * (BRAIN_WASM_COMPILE_QUEUE), or the compile thread failed; a retry may pass.
   */
  readonly overloaded?: boolean
}> {
  override get message() {
    return this.reason
  }
}

export interface MemoryLimits {
  /** Pages the guest asks for at start. */
  readonly initial: number
  /** Pages the guest allows at most, when it says (the host's maximum applies in any case). */
  readonly maximum: number | undefined
}

/** A module that passed admission, compiled once. */
export interface AdmittedModule {
  /** SHA-256 of the bytes, hex: the module's id. */
  readonly hash: string
  readonly module: WebAssembly.Module
  readonly memory: MemoryLimits
  /** It exports `brain_run` (an Agentloop). */
  readonly loop: boolean
  /** It exports `brain_tool` (a tool). */
  readonly tool: boolean
  /**
   * A loop that exports the `brain_transcript_tail` global: its activation input carries the saved
   * transcript's tail and `transcript_start`, not the whole transcript (docs/abi.md).
   */
  readonly tail: boolean
  /**
   * How many of the last messages that tail holds at least (it reaches further back to the first
   * unanswered tool call): TRANSCRIPT_TAIL, or what the loop's `brain_transcript_tail_length` global says.
   */
  readonly tailMessages: number
  /** A loop that exports the `brain_events_from_end` global: its input Events start at its predecessor's end (docs/abi.md). */
  readonly eventsFromEnd: boolean
  /** The kinds a loop's `brain_events_kind_<kind>` globals name: its input Events are only those (docs/abi.md); none exported, undefined. */
  readonly eventKinds?: ReadonlySet<string>
  /** A loop that exports the `brain_configuration_unread` global: its input leaves out the session's configuration (docs/abi.md). */
  readonly configurationUnread: boolean
  /** A loop that exports the `brain_runtime_unread` global: its input leaves out the runtime envelope (docs/abi.md). */
  readonly runtimeUnread: boolean
  /**
   * A loop that exports the `brain_model_metadata_unread` global: each `model` answer it is given
   * carries only `text`, `tool_calls` and `reasoning` (when the model gave any), not the answer's
   * metadata (`stop_reason`, `usage`, `response_id`, `model`, `provider_stop_reason`; docs/abi.md).
   */
  readonly modelMetadataUnread: boolean
  readonly bytes: number
}

/** What a Wasm tool's call gets: its input and the call's name, and the services a tool may use. */
export interface ToolActivation {
  readonly input: unknown
  readonly call: { readonly session_id: string; readonly sequence: number; readonly name: string; readonly deadline_at_ms: number }
}

export interface ToolServices {
  /** Emits a tool-origin Event; returns its sequence. */
  readonly emit: (kind: string, payload: unknown) => Effect.Effect<number, { readonly failure: import("../domain/Failure.js").Failure }>
  readonly telemetry: (data: unknown) => Effect.Effect<void>
  /** The error every host call of the tool now answers (its call was stopped), or undefined while it may call. */
  readonly refusal?: () => import("../domain/Failure.js").Failure | undefined
  /**
   * Called once when the tool's guest starts to run (on the main thread, or on a pool thread once a
   * thread and a compute slot are taken): a call stopped before it never ran.
   */
  readonly began?: () => void
}

/** How a Wasm tool's call ended. */
export type ToolRun =
  | { readonly _tag: "ok"; readonly output: unknown }
  /** The tool answered an error (its object is what the model sees), or failed (trap, budget, bad output). */
  | { readonly _tag: "error"; readonly output: unknown }
  /**
   * The host would not run the call on, the server stopping (its pool closed): not the tool's
   * failure. Its guest runs no more; whether it had begun, `ToolServices.began` told.
   */
  | { readonly _tag: "stopped"; readonly message: string }

/** How a module comes to admission. */
export interface AdmitOptions {
  /** Brain's own module (the official loop), not uploaded: no size bound, compiled here. */
  readonly shipped?: boolean
  /**
   * A client's upload: refused `overloaded` (nothing compiled, nothing kept) when
   * BRAIN_WASM_COMPILE_QUEUE modules are already compiling or waiting to. A stored module compiled
   * again for a session waits its turn instead: it was accepted once.
   */
  readonly upload?: boolean
}

export interface WasmHostShape {
  /**
   * Validates and compiles a module (docs/abi.md, Admission). `shipped`: a module built with Brain
   * (the official loop), not uploaded, so BRAIN_MAX_WASM_MODULE_BYTES, which bounds one upload,
   * does not apply: a deployment that lowers it must still start.
   */
  readonly admit: (bytes: Uint8Array, options?: AdmitOptions) => Effect.Effect<AdmittedModule, ModuleRejected>
  /** One activation of an Agentloop module: the turn's result, or why it failed. */
  readonly runLoop: (module: AdmittedModule, input: ActivationInput, host: Host) => Effect.Effect<unknown, AgentloopFailed>
  /** One call of a Wasm tool. */
  readonly runTool: (module: AdmittedModule, activation: ToolActivation, services: ToolServices) => Effect.Effect<ToolRun>
  /**
   * `runTool`, tried now, in this call: its run when the call could go to its end without waiting
   * (on the main thread, calling none of its services); undefined when it could not, having done
   * nothing that shows — no service called, nothing kept — so that `runTool` runs the same call
   * from its start. Optional: a host without it is only run.
   */
  readonly tryTool?: (module: AdmittedModule, activation: ToolActivation, services: ToolServices) => Exit.Exit<ToolRun> | undefined
}

export class WasmHost extends Context.Tag("brain/WasmHost")<WasmHost, WasmHostShape>() {}
