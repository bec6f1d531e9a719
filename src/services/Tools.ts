/**
 * Tools: runs one tool call on the executor the session's configuration names for the tool.
 * Called only inside the EffectFence, in a fiber of its own. The executor is handed an
 * AbortSignal: on a cancel or the call's own deadline Brain aborts it and waits a bounded grace
 * for the executor to confirm, either by answering `stopped` or by ending that fiber interrupted
 * once it has stopped (a Wasm tool: its guest is stopped at once). Anything else past the grace is
 * an unconfirmed stop.
 */
import { Context, Data, type Effect, type Exit } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { ToolDefinition } from "../domain/Configuration.js"
import type { Failure } from "../domain/Failure.js"
import type { ToolCallRequest } from "../domain/Messages.js"

export interface ToolInvocation {
  readonly session: SessionId
  /** The `tool_call_started` sequence: the call's name. */
  readonly sequence: number
  readonly call: ToolCallRequest
  /** The tool's definition in the session configuration; undefined when the model named an unknown tool. */
  readonly definition: typeof ToolDefinition.Type | undefined
  /** Epoch milliseconds; undefined = no deadline. */
  readonly deadlineAtMs: number | undefined
  /** Aborted when Brain cancels the call or its deadline passes. */
  readonly signal: AbortSignal
  /**
   * The same stop as `signal`, as callbacks: Brain's own executors listen here, so that a call
   * whose executor never reads `signal` makes no AbortSignal. Absent when the caller has only a signal.
   */
  readonly stop?: Stop
  /**
   * Emits an Event with the tool's origin (`{kind: "tool", sequence}`), durable before it returns;
   * refused once the call is over, for a reserved kind, or past the turn's BRAIN_MAX_EMITTED_BYTES or
   * BRAIN_MAX_TURN_WRITE_BYTES.
   */
  readonly emit: (kind: string, payload: unknown) => Effect.Effect<number, { readonly failure: Failure }>
  /** Best effort, never journaled. */
  readonly telemetry: (data: unknown) => Effect.Effect<void>
}

/** A call's stop (`ToolInvocation.stop`). */
export interface Stop {
  readonly aborted: boolean
  /** Calls `listener` once when the call is stopped (at once if it already is); answers what removes it. */
  readonly onAbort: (listener: () => void) => () => void
  /**
   * An executor stopped before its work began says so, before it confirms the stop (a Wasm tool
   * still waiting for a thread): nothing of the call ran, so it is recorded not sent, not
   * ambiguous. Absent when the caller has only a signal.
   */
  readonly notStarted?: () => void
}

/** A definite answer from the executor. `stopped`: it confirms it stopped after an abort. */
export type ToolReply =
  | { readonly outcome: "ok"; readonly output: unknown }
  | { readonly outcome: "error"; readonly output: unknown }
  | { readonly outcome: "stopped" }

/** The executor was lost: the call may or may not have run (recorded as `unknown`). */
export class ToolLost extends Data.TaggedError("ToolLost")<{ readonly message: string }> {}

export interface ToolsShape {
  readonly invoke: (invocation: ToolInvocation) => Effect.Effect<ToolReply, ToolLost>
  /**
   * `invoke`, tried now, in this call: its reply when the call could go to its end without
   * waiting (a Wasm tool that ran to its end on the main thread); undefined when it could not,
   * having done nothing that shows, so that `invoke` runs the same call. Optional: executors
   * without it are only invoked.
   */
  readonly tryNow?: (invocation: ToolInvocation) => Exit.Exit<ToolReply, ToolLost> | undefined
}

export class Tools extends Context.Tag("brain/Tools")<Tools, ToolsShape>() {}
