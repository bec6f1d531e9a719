/**
 * Environments: the lifecycle of the places a session's tools run, and the calls sent to them
 * (docs/environments.md). One interface for every driver (`brain`, `host`, `http`).
 *
 * Every method is called only inside the EffectFence: its `*_started` record is durable first and
 * its `sequence` is the operation's name, sent to the Environment so that it can drop a duplicate.
 * Nothing here retries, and nothing sends an operation anywhere but the Environment the session
 * recorded at creation.
 *
 * What comes back is what Brain knows afterwards:
 * - a value: the Environment answered definitely (`{"ok": …}`, or for a tool call `{"error": …}`,
 *   which is the tool's own error, shown to the model);
 * - `EnvironmentNotSent`: nothing reached the Environment (no binding, refused connection, …);
 * - `EnvironmentRefused`: it answered that it did not do it (a 3xx or 4xx other than 409, or
 *   `{"error": …}` to a lifecycle step);
 * - `EnvironmentUncertain`: it may have done it (connection lost after sending, 409, 5xx, the
 *   lifecycle timeout, an answer too large, not JSON or not of its shape).
 */
import { Context, Data, type Effect, type Exit } from "effect"
import type { AdmittedEnvironment, EnvironmentBindings as Bindings } from "../domain/Environment.js"
import { type Failure, failure } from "../domain/Failure.js"
import type { SessionId } from "../domain/Ids.js"

/** `{session_id, sequence}`: the journal record that names the operation (its `*_started`). */
export interface OperationName {
  readonly session: SessionId
  readonly sequence: number
}

export type LifecycleStep = "setup" | "detach" | "teardown"

export interface LifecycleOperation extends OperationName {
  /** As recorded at creation (an `http` one carries `resolved`: where it is). */
  readonly environment: AdmittedEnvironment
}

/** A lifecycle step the Environment confirmed; `result` is its `ok` value, recorded in `*_ended`. */
export interface LifecycleEnded {
  readonly result: unknown
}

export interface EnvironmentCall extends OperationName {
  readonly environment: AdmittedEnvironment
  /** The tool's name. */
  readonly name: string
  /** The model's id for the call. */
  readonly callId: string
  readonly input: unknown
  /** Epoch milliseconds; 0 = no deadline. */
  readonly deadlineAtMs: number
  /**
   * Commits a tool-origin Event of this call (`origin: {kind: "tool", sequence}`) and answers its
   * sequence; refused once the call is over. A `host` Environment posts them; `http` has none.
   */
  readonly emit?: (kind: string, payload: unknown) => Effect.Effect<number, { readonly failure: Failure }>
  /**
   * The call's receipt: tells its listener true once the call's outcome record is durable, false
   * once it will not be (its commit failed or missed BRAIN_CLEANUP_DEADLINE_MS), at once if that
   * is known already; answers what stops telling it. What a host's result waits for before its
   * 204, so that nothing acknowledged is lost: a callback, so that a result waits for all its
   * calls' receipts with no fiber each. Given by a session's tool calls; absent, nobody records one.
   */
  readonly recorded?: (tell: (recorded: boolean) => void) => () => void
}

/** A definite answer to a tool call: the tool's output, or its own error for the model. */
export type CallAnswer =
  | { readonly outcome: "ok"; readonly output: unknown }
  | { readonly outcome: "error"; readonly output: unknown }

/** Why Brain stops a call: an interrupt of the turn, or the call's own deadline. */
export type CancelReason = "cancel" | "deadline"

export interface CancelRequest extends OperationName {
  /** The call being cancelled: `sequence` is its `tool_call_started`. */
  readonly environment: AdmittedEnvironment
  /** The call's tool (the cancel body's `name`). */
  readonly name: string
  readonly reason: CancelReason
}

/** `confirmed`: the Environment answered `{"stopped": true}` — the call has stopped or will never run. */
export type CancelAnswer =
  | { readonly confirmed: true }
  | { readonly confirmed: false; readonly why: string }

/** Why nothing reached an Environment (`EnvironmentNotSent`): no other failure carries these reasons. */
export const NOT_SENT_REASONS = ["binding_missing", "binding_moved", "unreachable", "driver_unavailable", "host_unknown", "host_disconnected", "host_busy"] as const

/**
 * Whether a recorded failure says nothing reached the Environment: an `EnvironmentNotSent`'s
 * (its reason), or a step abandoned before it was sent (`interrupted`, not ambiguous). Read from
 * the journal, so it holds for records written by earlier processes too.
 */
export const nothingSent = (f: { readonly code: string; readonly ambiguous?: boolean; readonly details?: unknown }): boolean => {
  if (f.ambiguous === true) return false
  if (f.code === "interrupted") return true
  const reason = typeof f.details === "object" && f.details !== null ? (f.details as { reason?: unknown }).reason : undefined
  return f.code === "environment_failed" && (NOT_SENT_REASONS as ReadonlyArray<unknown>).includes(reason)
}

/** Nothing reached the Environment: the operation did not happen. */
export class EnvironmentNotSent extends Data.TaggedError("EnvironmentNotSent")<{
  readonly environment: string
  readonly reason: typeof NOT_SENT_REASONS[number]
  readonly message: string
}> {
  get failure(): Failure {
    return failure("environment_failed", this.message, { details: { environment: this.environment, reason: this.reason } })
  }
}

/** The Environment answered that it did not do the operation. */
export class EnvironmentRefused extends Data.TaggedError("EnvironmentRefused")<{
  readonly environment: string
  /** The HTTP status (200 for an `{"error": …}` answer to a lifecycle step). */
  readonly status: number
  /** The answer's body: the `error` value, or the first bytes of an error response (JSON when it parses). */
  readonly body: unknown
  readonly message: string
}> {
  get failure(): Failure {
    return failure("environment_failed", this.message, { details: { environment: this.environment, status: this.status, body: this.body } })
  }
}

/** The operation may have happened: no reliable answer came back. */
export class EnvironmentUncertain extends Data.TaggedError("EnvironmentUncertain")<{
  readonly environment: string
  readonly reason: "connection_lost" | "timeout" | "duplicate" | "status" | "too_large" | "not_json" | "bad_shape"
  readonly status?: number
  readonly body?: unknown
  readonly message: string
}> {
  get failure(): Failure {
    return failure("environment_failed", this.message, {
      ambiguous: true,
      details: { environment: this.environment, reason: this.reason, status: this.status, body: this.body }
    })
  }
}

export type EnvironmentFailed = EnvironmentNotSent | EnvironmentRefused | EnvironmentUncertain

/**
 * A tool call sent (`send`), its answer to come, or its failure as `call` fails: `EnvironmentNotSent`
 * when it turned out not to have left, `EnvironmentRefused` when it was refused, and
 * `EnvironmentUncertain` when it may have run without a definite answer.
 */
export interface SentCall<E extends EnvironmentFailed = EnvironmentFailed> {
  /** Calls `f` with the answer once it comes (at once when it has); a later `await` replaces `f`. */
  readonly await: (f: (answer: Exit.Exit<CallAnswer, E>) => void) => void
  /** Stops waiting (what interrupting `call` does): the answer, if it comes, is no one's. */
  readonly abandon: () => void
  /**
   * Sends the call's cancel now, in this step, for a driver that can (optional; `cancel` does it
   * otherwise): a host's `cancel` frame is offered to its command stream at once, so the cancels
   * of calls stopped together (the calls of a round sharing a deadline) go out as one write,
   * before any of their outcomes is committed. `confirmed` is called once if the Environment
   * confirms the stop (`{"stopped": true}`); `listening` undoes that. Not sent: why.
   */
  readonly cancel?: (reason: CancelReason, confirmed: () => void) => CancelSent
}

/**
 * A cancel sent now (`SentCall.cancel`), or why it was not. `withdrawn`: the call itself had not
 * left yet (a host's `call` frame still waiting in Brain's queue) and was taken back: it was never
 * sent, will never run, and needs no cancel.
 */
export type CancelSent =
  | { readonly sent: true; readonly stopListening: () => void }
  | { readonly sent: false; readonly withdrawn?: true; readonly why: string }

export interface EnvironmentsShape {
  /** At creation, before `session_creation_ended`. A failure fails the creation. */
  readonly setup: (operation: LifecycleOperation) => Effect.Effect<LifecycleEnded, EnvironmentFailed>
  /** At the end, after `session_end_started`. A failure does not prevent the ending. */
  readonly detach: (operation: LifecycleOperation) => Effect.Effect<LifecycleEnded, EnvironmentFailed>
  /** At delete. A failure keeps the session (409 `teardown_failed`); only a new delete tries again. */
  readonly teardown: (operation: LifecycleOperation) => Effect.Effect<LifecycleEnded, EnvironmentFailed>
  /**
   * Sends one tool call and waits for its answer, with no bound of its own: the caller races it
   * against the deadline and cancellation. Interrupting it closes the request; it never sends a
   * cancel by itself.
   */
  readonly call: (call: EnvironmentCall) => Effect.Effect<CallAnswer, EnvironmentFailed>
  /**
   * `call` without a fiber, for a driver that can (optional): the call sent now, its answer to
   * come by callback (`SentCall`); `EnvironmentNotSent` when nothing was sent; undefined when this
   * driver does not send this call so, having done nothing (then `call` sends it).
   */
  readonly send?: (call: EnvironmentCall) => SentCall | EnvironmentNotSent | undefined
  /**
   * Asks the Environment to stop a call in flight, bounded by BRAIN_CANCEL_GRACE_MS. Never fails:
   * anything but `{"stopped": true}` is an unconfirmed cancel.
   */
  readonly cancel: (request: CancelRequest) => Effect.Effect<CancelAnswer>
}

export class Environments extends Context.Tag("brain/Environments")<Environments, EnvironmentsShape>() {}

/**
 * The bindings this server was started with (BRAIN_ENVIRONMENTS, parsed at start): what a create
 * body's `binding` may name. Absent: none are configured.
 */
export class EnvironmentBindings extends Context.Tag("brain/EnvironmentBindings")<EnvironmentBindings, Bindings>() {}
