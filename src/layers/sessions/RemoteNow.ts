/**
 * A remote tool call (a host's, an http Environment's) sent without a fiber of its own: the fence
 * waits for its end by callback (EffectFence's `Dispatching`). A cancel or a deadline that comes
 * first stops it as ToolCalls.ts stops every call: a host's with no fiber either (its cancel frame
 * offered in the stop's own step, then a callback and one timer), an http Environment's in a fiber
 * then. A tool-loop turn of eight host calls had
 * sixteen fibers for them, and some sixty of the runtime's instructions each (docs/benchmarks.md,
 * "Host calls sent with no fiber").
 */
import { Cause, Effect, Either, Exit, type Fiber, FiberId, Option, Runtime } from "effect"
import type { AdmittedEnvironment } from "../../domain/Environment.js"
import { failure } from "../../domain/Failure.js"
import type { ToolCallRequest } from "../../domain/Messages.js"
import type { Dispatching } from "../../services/EffectFence.js"
import { type CallAnswer, type EnvironmentFailed, EnvironmentNotSent } from "../../services/Environments.js"
import { CallStop } from "../CallStop.js"
import type { CancelReason } from "./Cell.js"
import { refuse } from "./HostFailures.js"
import { awaitSent, environmentCall, type RemoteInvocation, verdictOf } from "./RemoteTool.js"
import type { ToolCallContext } from "./ToolCalls.js"
import { checked, checkedOutput, notSentOf, stopping, type ToolDefinition, type ToolVerdict } from "./ToolVerdicts.js"
import type { Deadline } from "./Deadline.js"

/** A remote call's invocation: its stop, and its Events (a host posts them), refused once the call is over. */
export const remoteInvocation = (
  ctx: ToolCallContext,
  call: ToolCallRequest,
  sequence: number,
  deadlineAtMs: number | undefined,
  stop: CallStop,
  stoppedBy: () => "cancel" | "deadline",
  inFlight: () => boolean
): RemoteInvocation => ({
  session: ctx.scope.cell.session,
  sequence,
  call,
  deadlineAtMs,
  stop,
  stoppedBy,
  emit: (kind, payload) => (inFlight() ? ctx.emitAs({ kind: "tool", sequence }, kind, payload) : refuse(failure("conflict", "the tool call is over"))),
  ...(ctx.recorded !== undefined ? { recorded: ctx.recorded(sequence) } : {})
})

/**
 * A remote call sent now, with no fiber (`dispatchNowOf`), where its Environment's driver can
 * (`Environments.send`: a host's, the http driver's): the fence waits for its end by callback. Its answer, when it
 * comes first, is its verdict at once. When the turn's cancel or the call's deadline comes first,
 * the call is stopped as `dispatchOf` stops one (`stopping`), in a fiber forked then from the
 * round's `runtime`, which waits for the same answer; and `interrupt` (the fence's caller was
 * interrupted) stops waiting for the answer, as interrupting `dispatchOf`'s executor does.
 * Undefined when the driver cannot send so, nothing having been done.
 */
export const remoteNowOf = (
  ctx: ToolCallContext,
  call: ToolCallRequest,
  definition: ToolDefinition | undefined,
  remote: AdmittedEnvironment,
  deadline: Deadline | undefined,
  deadlineAtMs: number | undefined,
  sequence: number,
  inFlight: () => boolean,
  runtime: Runtime.Runtime<never>
): Exit.Exit<ToolVerdict> | Dispatching<ToolVerdict, never> | undefined => {
  const environments = ctx.deps.environments
  if (environments?.send === undefined) return undefined
  const early = notSentOf(ctx, call, definition, deadline, remote)
  if (early !== undefined) return Exit.succeed(early)
  const stop = new CallStop()
  let stoppedBy: "cancel" | "deadline" = "cancel"
  const invocation = remoteInvocation(ctx, call, sequence, deadlineAtMs, stop, () => stoppedBy, inFlight)
  const sent = environments.send(environmentCall(remote, invocation))
  if (sent === undefined) return undefined
  if (sent instanceof EnvironmentNotSent) return Exit.succeed({ _tag: "failed", outcome: "error", failure: sent.failure })
  const schema = remote.driver === "host" ? definition?.output_schema : undefined
  const signal = ctx.scope.signal
  let exit: Exit.Exit<ToolVerdict> | undefined
  let ends: Array<(exit: Exit.Exit<ToolVerdict>) => void> = []
  /** The fiber stopping the call, once the cancel or the deadline came first (a driver that cannot cancel now). */
  let stopper: Fiber.RuntimeFiber<ToolVerdict> | undefined
  /** The call's stop under way with no fiber (`stopWithoutFiber`): its grace's timer and its confirmation's listener. */
  let stopped: { timer: ReturnType<typeof setTimeout> | undefined; stopListening: () => void } | undefined
  const end = (e: Exit.Exit<ToolVerdict>) => {
    if (exit !== undefined) return
    exit = e
    const waiting = ends
    ends = []
    for (const f of waiting) f(e)
  }
  const unlisten = () => {
    signal.listeners.delete(onCancel)
    deadline?.removeObserver(onDeadline)
  }
  const onAnswer = (answer: Exit.Exit<CallAnswer, EnvironmentFailed>) => {
    if (stopper !== undefined || exit !== undefined) return
    if (stopped !== undefined) {
      // After the stop only a definite answer (it finished anyway) settles the call, as `stopping` reads it.
      if (Exit.isSuccess(answer)) settleStop(checked(verdictOf(Either.right(answer.value)), schema))
      return
    }
    unlisten()
    if (Exit.isSuccess(answer)) return end(Exit.succeed(checked(verdictOf(Either.right(answer.value)), schema)))
    const failed = Cause.failureOption(answer.cause)
    end(Option.isSome(failed) ? Exit.succeed(verdictOf(Either.left(failed.value))) : Exit.failCause(answer.cause as Cause.Cause<never>))
  }
  const settleStop = (verdict: ToolVerdict) => {
    if (stopped === undefined || exit !== undefined) return
    clearTimeout(stopped.timer)
    stopped.stopListening()
    end(Exit.succeed(verdict))
  }
  /**
   * The stop of a call whose driver sends its cancel now (`SentCall.cancel`: a host's), as
   * `stopping` stops one but with no fiber: the cancel is offered in this step (the deadline's
   * callback, which stops every call of the round sharing it: their cancels go out as one write,
   * before any outcome is committed), then the first of the call's own answer, the host's
   * confirmation or the grace (BRAIN_CANCEL_GRACE_MS, one timer) is the verdict. A call the
   * driver took back instead, never sent (`withdrawn`: its frame still waited in Brain's queue),
   * is at once the verdict of a call stopped before it was sent (`unsent`).
   */
  const stopWithoutFiber = (first: { readonly _tag: "cancel"; readonly reason: CancelReason } | { readonly _tag: "deadline" }, cancel: NonNullable<typeof sent.cancel>) => {
    const by = first._tag === "deadline" ? "deadline" : "cancel"
    const reason: CancelReason = first._tag === "cancel" ? first.reason : "timeout"
    stoppedBy = by
    stop.abort(by === "deadline" ? "timeout" : reason)
    const state: NonNullable<typeof stopped> = { timer: undefined, stopListening: () => {} }
    stopped = state
    const cancelled = cancel(by, () => settleStop({ _tag: "stopped", by, confirmed: true, reason }))
    if (exit !== undefined) return
    // Taken back before it left: never sent, so recorded as a call stopped before it was sent.
    if (!cancelled.sent && cancelled.withdrawn === true) {
      return end(Exit.succeed(by === "deadline" ? { _tag: "unsent", reason: "timeout", deadline: true } : { _tag: "unsent", reason }))
    }
    if (cancelled.sent) state.stopListening = cancelled.stopListening
    // Past the grace the call is abandoned (a late answer is refused) and recorded unconfirmed.
    state.timer = setTimeout(() => {
      sent.abandon()
      settleStop({ _tag: "stopped", by, confirmed: false, reason })
    }, ctx.deps.config.cancelGraceMs)
  }
  const stopNow = (first: { readonly _tag: "cancel"; readonly reason: CancelReason } | { readonly _tag: "deadline" }) => {
    if (stopper !== undefined || stopped !== undefined || exit !== undefined) return
    unlisten()
    if (sent.cancel !== undefined) return stopWithoutFiber(first, sent.cancel)
    stopper = Runtime.runFork(runtime)(Effect.interruptible(Effect.gen(function*() {
      // Its executor now waits for the call's answer (in place of `onAnswer`), as `dispatchOf`'s does.
      const executor = yield* Effect.fork(checkedOutput(awaitSent(environments, remote, invocation, sent, runtime), schema))
      return yield* stopping(ctx.deps.config, first, executor, stop, (by) => (stoppedBy = by))
    })))
    stopper.addObserver(end)
  }
  const onCancel = (reason: CancelReason) => stopNow({ _tag: "cancel", reason })
  const onDeadline = (e: Exit.Exit<unknown, unknown>) => {
    if (Exit.isSuccess(e)) stopNow({ _tag: "deadline" })
  }
  sent.await(onAnswer)
  if (exit === undefined) {
    signal.listeners.add(onCancel)
    deadline?.addObserver(onDeadline)
  }
  return {
    _tag: "Dispatching",
    onEnd: (f) => (exit !== undefined ? f(exit) : void ends.push(f)),
    interrupt: () => {
      if (exit !== undefined) return
      if (stopper !== undefined) return stopper.unsafeInterruptAsFork(FiberId.none)
      if (stopped !== undefined) {
        clearTimeout(stopped.timer)
        stopped.stopListening()
      }
      unlisten()
      sent.abandon()
      end(Exit.interrupt(FiberId.none))
    }
  }
}

