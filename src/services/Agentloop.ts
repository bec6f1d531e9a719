/**
 * The Agentloop: one activation runs one whole turn. It receives the turn input and a Host of
 * journaled services; everything it wants to keep goes through the Host, durably, at once.
 * The WebAssembly host implements activations in WebAssembly; an in-process TypeScript implementation serves
 * tests and embedders.
 */
import { Context, Data, type Effect, type Option } from "effect"
import type { SessionConfiguration } from "../domain/Configuration.js"
import type { Failure } from "../domain/Failure.js"
import type { Message, ToolCallRequest, TurnInput } from "../domain/Messages.js"
import type { ModelRequest, ModelResult } from "../domain/Model.js"
import type { Event } from "../domain/Events.js"
import type { UnansweredCalls } from "../domain/TranscriptTail.js"

export interface RuntimeEnvelope {
  readonly session_id: string
  /** The `turn_started` and `activation_started` sequences. */
  readonly turn: number
  readonly activation: number
  /** Logical time: the activation's start, epoch milliseconds. */
  readonly now_ms: number
  /** A deterministic seed derived from the session and the activation. */
  readonly seed: number
}

export interface ActivationInput {
  readonly input: TurnInput | undefined
  readonly transcript: ReadonlyArray<Message>
  /** The transcript's unanswered tool calls, as the session's state keeps them; a loop's host scans for them when absent. */
  readonly unanswered?: UnansweredCalls
  /**
   * The committed outcomes of the transcript's unanswered tool calls (CommittedResults.ts), as a
   * dispatch would have answered them: present, and not empty, only after a round was cut short.
   */
  readonly tool_results?: ReadonlyArray<ToolResult>
  readonly configuration: SessionConfiguration
  /**
   * Public Events (at most 1,000) from the previous activation's `activation_started` on, or, for
   * a loop with `eventsFromEnd`, from its `activation_ended` / `activation_failed` on; all of them
   * for the session's first activation. A WebAssembly loop's input carries only the first of them
   * that fit in BRAIN_MAX_WASM_IO_BYTES after the rest of it (WasmHostWorkers.ts `guestInputJson`).
   */
  readonly events: ReadonlyArray<Event>
  readonly runtime: RuntimeEnvelope
}

/** A host call refused or failed; after a cancel every host call fails with `cancelled`. */
export class HostCallFailed extends Data.TaggedError("HostCallFailed")<{ readonly failure: Failure }> {}

export interface ToolResult {
  readonly call_id: string
  readonly name: string
  readonly outcome: "ok" | "error" | "timeout" | "cancelled" | "unknown"
  readonly output: unknown
  readonly is_error: boolean
}

export interface Host {
  /**
   * Calls the model. With `save`, the transcript is saved first, as `setTranscript(save)` would,
   * but in the same atomic append as the call's start (one commit, not two); the request's
   * messages are the model's whole conversation, as always.
   */
  readonly model: (
    request: Omit<ModelRequest, "system" | "tools"> & { readonly system?: string },
    save?: ReadonlyArray<Message>
  ) => Effect.Effect<ModelResult, HostCallFailed>
  /**
   * Runs tool calls (concurrently); results come back in call order. With `save`, the transcript
   * is saved first, as `setTranscript(save)` would, but in the same atomic append as the calls'
   * starts.
   */
  readonly dispatch: (calls: ReadonlyArray<ToolCallRequest>, save?: ReadonlyArray<Message>) => Effect.Effect<ReadonlyArray<ToolResult>, HostCallFailed>
  /** Emits an extension Event; returns its sequence. */
  readonly emit: (kind: string, payload: unknown) => Effect.Effect<number, HostCallFailed>
  /** Fire and forget; not journaled. */
  readonly telemetry: (data: unknown) => Effect.Effect<void>
  /**
   * The failure every host call now fails with (after a cancel: its code; after a journal failure;
   * after `setTranscriptAtEnd`), or undefined while calls may be made. For the services a Wasm
   * loop's host answers without a call of its own (a transcript read, a malformed request,
   * telemetry), so that those too answer a cancel (docs/abi.md, "Host services").
   */
  readonly refusal: () => Failure | undefined
  readonly kvRead: (key: string) => Effect.Effect<Option.Option<unknown>, HostCallFailed>
  readonly kvPut: (key: string, value: unknown) => Effect.Effect<void, HostCallFailed>
  readonly kvDelete: (key: string) => Effect.Effect<void, HostCallFailed>
  /** Saves the transcript: Brain commits only the difference from the saved one. */
  readonly setTranscript: (messages: ReadonlyArray<Message>) => Effect.Effect<void, HostCallFailed>
  /**
   * Saves the transcript with the activation's end: the difference from the saved one goes into
   * the same atomic append as the activation's closing records, so the save costs no commit of its
   * own, and the two are durable together or not at all. For a loop's last act: the activation
   * must return right after, and any host call after it fails (`invalid_request`).
   */
  readonly setTranscriptAtEnd: (messages: ReadonlyArray<Message>) => Effect.Effect<void, HostCallFailed>
  /** A page of this session's public Events. */
  readonly events: (options: { readonly after: number; readonly limit: number }) => Effect.Effect<ReadonlyArray<Event>, HostCallFailed>
}

/** The activation failed: a guest error, bad output or a host failure it did not handle. */
export class AgentloopFailed extends Data.TaggedError("AgentloopFailed")<{ readonly failure: Failure }> {}

/**
 * How a WebAssembly loop's input carries the session's state, which BRAIN_MAX_WASM_IO_BYTES bounds
 * (layers/sessions/TranscriptRoom.ts): the whole transcript, or its tail of at least
 * `tailMessages` messages; the configuration, or not.
 */
export interface LoopInput {
  readonly tailMessages: number | undefined
  readonly configurationRead: boolean
}

export interface AgentloopShape {
  /** Runs one activation; the value is the turn's result (JSON). */
  readonly activate: (input: ActivationInput, host: Host) => Effect.Effect<unknown, AgentloopFailed | HostCallFailed>
  /**
   * The loop's input Events start at its predecessor's end (`activation_ended` or
   * `activation_failed`), not at its predecessor's start: it is told how the previous activation
   * ended and what came after, not each step the previous activation took (which it can still
   * read with the `events` host call). A WebAssembly loop asks for this by exporting the global
   * `brain_events_from_end` (docs/abi.md).
   */
  readonly eventsFromEnd?: boolean
  /**
   * The only kinds of Event the loop's input carries, when set: the others in its range are left
   * out (the range is the same; the `events` host call still reads every Event). A WebAssembly
   * loop names each with a global `brain_events_kind_<kind>` (docs/abi.md, "The input's Events").
   */
  readonly eventKinds?: ReadonlySet<string>
  /**
   * How the loop's input, bounded by BRAIN_MAX_WASM_IO_BYTES, carries the transcript: a save or an
   * opening transcript it could not carry is refused. Absent (a loop given its input as values,
   * in process): nothing bounds it.
   */
  readonly input?: LoopInput
}

/** An admitted module, as listed. */
export interface ModuleInfo {
  /** SHA-256 of the bytes, hex. */
  readonly id: string
  readonly bytes: number
  /** It exports `brain_run`: it can be a session's Agentloop. */
  readonly loop: boolean
  /** It exports `brain_tool`: it can implement a tool. */
  readonly tool: boolean
}

/**
 * The Agentloops a session can name: built in (`official`, and loops an embedder or a test
 * registers) or uploaded WebAssembly modules named by content hash (docs/abi.md).
 */
export interface AgentloopsShape {
  /** The loop to run for this id. */
  readonly resolve: (id: string) => Effect.Effect<AgentloopShape, AgentloopFailed>
  /** At create: `id` names a loop that can run (built in, or an admitted module with `brain_run`). */
  readonly check: (id: string) => Effect.Effect<void, AgentloopRejected | AgentloopStoreFailed>
  /**
   * Records that a session uses an uploaded module (before its creation is journaled); built-ins
   * need nothing. Refused (`missing`) if the module is no longer stored: a removal came first.
   */
  readonly use: (id: string, session: string) => Effect.Effect<void, AgentloopRejected | AgentloopStoreFailed>
  /** Forgets a deleted session's use of a module. */
  readonly unuse: (id: string, session: string) => Effect.Effect<void>
  /** Validates, compiles and stores a module durably under its content hash. */
  readonly admit: (bytes: Uint8Array) => Effect.Effect<ModuleInfo, AgentloopRejected | AgentloopStoreFailed>
  readonly list: Effect.Effect<ReadonlyArray<ModuleInfo>, AgentloopStoreFailed>
  /** Removes an uploaded module that no session uses. */
  readonly remove: (id: string) => Effect.Effect<void, AgentloopRejected | AgentloopInUse | AgentloopStoreFailed>
  /** An admitted module exporting `brain_tool`, compiled, for a Wasm tool. */
  readonly tool: (id: string) => Effect.Effect<import("./WasmHost.js").AdmittedModule, AgentloopRejected | AgentloopStoreFailed>
}

/** An uploaded module was refused (not WebAssembly, not the ABI, too large, unknown). */
export class AgentloopRejected extends Data.TaggedError("AgentloopRejected")<{
  readonly reason: string
  /** The id names no module (a 404 where it was asked for by id). */
  readonly missing?: boolean
  /** The store is full (BRAIN_MAX_WASM_STORE_BYTES). */
  readonly full?: boolean
  /** Too many uploads are compiling now (BRAIN_WASM_COMPILE_QUEUE): nothing was stored; a retry may pass (503). */
  readonly overloaded?: boolean
}> {
  // The reason is the message: an embedding's `runPromise` rejects with it (docs/embedding.md).
  override get message() {
    return this.reason
  }
}

/** A module a session still uses cannot be removed. */
export class AgentloopInUse extends Data.TaggedError("AgentloopInUse")<{ readonly reason: string }> {
  override get message() {
    return this.reason
  }
}

/** A valid module could not be stored (the server's fault, not the request's). */
export class AgentloopStoreFailed extends Data.TaggedError("AgentloopStoreFailed")<{
  readonly reason: string
  /** Out of descriptors (EMFILE, ENFILE): the store cannot be reached now, nothing is wrong with it (503 `overloaded`). */
  readonly exhausted?: boolean
}> {
  override get message() {
    return this.reason
  }
}

export class Agentloops extends Context.Tag("brain/Agentloops")<Agentloops, AgentloopsShape>() {}
