/**
 * The tool calls of one activation (`Host.dispatch`): each call's start committed through the
 * EffectFence before it is sent, run where its tool is placed (in process, a Wasm tool, an
 * Environment), stopped by its deadline or the turn's cancel, and its outcome committed before
 * the loop sees it, exactly as recorded. The calls of one round run at once.
 *
 * A round of more than BRAIN_MAX_TOOL_CALLS_PER_DISPATCH calls is refused whole with
 * `tool_call_limit` before anything of it is journaled or sent, as a model call past
 * BRAIN_MAX_MODEL_CALLS is: a model reply of hundreds of calls would otherwise hold the main thread
 * while they are journaled and forked (512 held /health/live for 300 ms), and the loop decides
 * what to do with the refusal (the official loop fails its turn with it).
 */
import { Cause, Clock, Context, Effect, Either, Exit, Fiber, Option, Runtime } from "effect"
import { placeOf } from "../../domain/Environment.js"
import { failure } from "../../domain/Failure.js"
import { TOOL_TIMEOUT_MAX_MS } from "../../domain/Limits.js"
import type { ToolCallRequest } from "../../domain/Messages.js"
import type { Entry } from "../../domain/Records.js"
import type { HostCallFailed, ToolResult } from "../../services/Agentloop.js"
import type { EnvironmentCall } from "../../services/Environments.js"
import type { Dispatching, FencedEffect, FenceHooks } from "../../services/EffectFence.js"
import type { Failure } from "../../domain/Failure.js"
import type { ServerConfigShape } from "../../services/ServerConfig.js"
import type { ToolInvocation } from "../../services/Tools.js"
import { CallStop } from "../CallStop.js"
import { toolResultOf } from "./CommittedResults.js"
import { exitOrCancel } from "./Cell.js"
import type { ActivationScope, HostDeps } from "./Host.js"
import { refuse, storageFailure } from "./HostFailures.js"
import { remoteInvocation, remoteNowOf } from "./RemoteNow.js"
import { callRemote } from "./RemoteTool.js"
import { checkedOutput, crashed, notSentOf, stopping, type ToolDefinition, type ToolVerdict, toolOutcome } from "./ToolVerdicts.js"
import { interruptWithin } from "./Abandon.js"
import { Once } from "../Waits.js"
import { counted, countWrite, weigh, writeRefusal } from "./TurnWrites.js"
import { type Deadline, isLiveClock, sleepingDeadlines, TimerDeadline } from "./Deadline.js"

/**
 * A call's time budget in ms: the lower of BRAIN_MAX_TOOL_SECS (in ms) and its tool's `timeout_ms` (undefined:
 * none). A `timeout_ms` above TOOL_TIMEOUT_MAX_MS (a configuration from before the create body's
 * bound) counts as that: now + it stays a whole `deadline_at_ms`.
 */
const budgetOf = (config: ServerConfigShape, definition: ToolDefinition | undefined): number | undefined => {
  const limits = [config.maxToolMs, Math.min(definition?.timeout_ms ?? 0, TOOL_TIMEOUT_MAX_MS)].filter((n) => n > 0)
  return limits.length > 0 ? Math.min(...limits) : undefined
}

/** What the activation's tool calls use of its host. */
export interface ToolCallContext {
  readonly deps: HostDeps
  readonly scope: ActivationScope
  readonly hooks: FenceHooks
  /** Commits a tool-origin Event (the host's `emitAs`). */
  readonly emitAs: (
    origin: { readonly kind: "tool"; readonly sequence: number },
    kind: string,
    payload: unknown
  ) => Effect.Effect<number, HostCallFailed>
  /** The call's telemetry, never journaled. */
  readonly report: (data: unknown, toolCall: number) => Effect.Effect<void>
  /**
   * Whether the outcome record of the call started at `sequence` became durable (true) or will not
   * (false), for a remote call's Environment (a host's result answers only then). Made by
   * `makeDispatch`.
   */
  readonly recorded?: (sequence: number) => NonNullable<EnvironmentCall["recorded"]>
}

/** `Host.dispatch` of one activation, before the host's own checks (a cancel, a broken cell). */
export const makeDispatch = (given: ToolCallContext) => {
  const { deps, scope } = given
  const { cell } = scope
  const { fence } = deps

  /**
   * The calls whose outcome record someone waits for (a host's result, before its 204), by their
   * start's sequence: told true when the fence says the record is committed, false when the round
   * ends without it (its commit failed, missed the deadline); then forgotten.
   */
  const receipts = new Map<number, Once<boolean>>()
  const settleReceipt = (sequence: number, recorded: boolean) => {
    const receipt = receipts.get(sequence)
    if (receipt === undefined) return
    receipts.delete(sequence)
    receipt.give(recorded)
  }
  const ctx: ToolCallContext = {
    ...given,
    recorded: (sequence) => {
      let receipt = receipts.get(sequence)
      if (receipt === undefined) receipts.set(sequence, receipt = new Once<boolean>())
      const made = receipt
      return (tell) => made.listen(tell)
    }
  }
  const hooks: FenceHooks = {
    ...given.hooks,
    committed: (entries) => {
      given.hooks.committed?.(entries)
      if (receipts.size === 0) return
      for (const [, entry] of entries) {
        if (entry.kind === "tool_call_ended" || entry.kind === "tool_call_failed") settleReceipt((entry.payload as { readonly sequence: number }).sequence, true)
      }
    }
  }

  /**
   * One call with its `budget` (`budgetOf`), as the fence takes it, and the result the loop is
   * shown once the fence has answered. `deadline` ends (Deadline.ts) at the call's
   * `deadline_at_ms` (`now` + its budget), shared by the round's calls with the same budget.
   */
  const toolCall: ToolCallOf = (call, definition, now, budget, deadline, runtime) => {
    const deadlineAtMs = budget !== undefined ? now + budget : undefined
    const started = weigh("tool_call_started", {
      tool: call.name,
      call_id: call.id,
      input: call.input ?? null,
      deadline_at_ms: deadlineAtMs ?? 0
    })
    /** The call is being executed: the tool may still emit Events. */
    let inFlight = true
    /** Its start's sequence, once dispatched. */
    let startedAt: number | undefined
    /** The verdict of its stop, once the stop has run to its end (`dispatchOf`). */
    let stopVerdict: ToolVerdict | undefined
    const dispatch = (sequence: number): Effect.Effect<ToolVerdict> => {
      startedAt = sequence
      return Effect.gen(() => dispatchOf(ctx, call, definition, deadline, deadlineAtMs, sequence, () => inFlight, (v) => (stopVerdict = v)))
    }
    const dispatchNow = (sequence: number): Exit.Exit<ToolVerdict> | Dispatching<ToolVerdict, never> | undefined => {
      startedAt = sequence
      return dispatchNowOf(ctx, call, definition, deadline, deadlineAtMs, sequence, () => inFlight, runtime)
    }

    /**
     * The outcome record the fence committed (it asks once); the loop is shown exactly it. The fence
     * asks in the step that observes the dispatch's end, however it ended (interrupted too), and
     * before it commits the record: the call is over from there, and Events it emits are refused.
     */
    let recorded: Entry | undefined
    const outcome = (sequence: number, interruptedOrNot: Exit.Exit<ToolVerdict>, dispatched: boolean) => {
      inFlight = false
      // A dispatch interrupted once its stop had run (its activation interrupted meanwhile) ends
      // with what the stop found.
      const exit = stopVerdict !== undefined && Exit.isInterrupted(interruptedOrNot) ? Exit.succeed(stopVerdict) : interruptedOrNot
      // Always recorded, and counted against the turn's writes (TurnWrites.ts).
      recorded = counted(scope, toolOutcome(sequence, exit, dispatched, budget, definition?.environment))
      // Stopped by the turn's cancel (or its activation interrupted) with its outcome uncertain.
      if ((scope.signal.reason !== undefined || !Exit.isSuccess(exit)) && (recorded.payload as { failure?: Failure }).failure?.ambiguous === true) {
        scope.cutShort = true
      }
      // Its executor did not confirm the cancel's stop: the turn's failure names it (Turn.ts).
      if (Exit.isSuccess(exit) ? exit.value._tag === "stopped" && exit.value.by === "cancel" && !exit.value.confirmed : Exit.isInterrupted(exit) && dispatched) {
        scope.calls.unconfirmed.push(call.name)
      }
      return recorded
    }
    const result = (): ToolResult =>
      toolResultOf(call.id, call.name, recorded!.payload as { outcome: ToolResult["outcome"]; output?: unknown; failure?: Failure })
    return { effect: { started: started.entry, dispatch, dispatchNow, outcome }, result, bytes: started.bytes, started: () => startedAt, tool: call.name }
  }

  /**
   * A round's calls through the fence: their starts in one commit, then each run at once. Refused
   * whole, nothing journaled, when their starts would take the turn past BRAIN_MAX_TURN_WRITE_BYTES.
   * `stop` (the round's deadlines) runs when the fence has answered, however it ended (interrupted
   * too): one uninterruptible region, entered in the step that made the deadlines, whose handlers
   * end the round (stop the deadlines, tell the receipts, map the answer), not an `ensuring` for
   * each and a map and a mapError (some fifteen of Effect's instructions a round,
   * docs/benchmarks.md "Host-tool turn, stop 58").
   */
  const runCalls: RunCalls = (calls, stop) => {
    const bytes = calls.reduce((n, c) => n + c.bytes, 0)
    const refused = writeRefusal(deps.config, scope, bytes)
    /** `next` once the round's deadlines are stopped (at once, for host timers). */
    const afterStop = <A, E>(next: Effect.Effect<A, E>): Effect.Effect<A, E> => {
      const stopping = stopped(stop)
      return stopping === undefined ? next : Effect.zipRight(stopping, next)
    }
    if (refused !== undefined) return Effect.suspend(() => afterStop(refuse(refused)))
    countWrite(scope, bytes)
    const open = scope.calls.open(calls.map((c) => c.tool))
    /** A call whose outcome was not committed by the round's end never will be by this round. */
    const ended = () => {
      scope.calls.close(open)
      if (receipts.size === 0) return
      for (const c of calls) {
        const sequence = c.started()
        if (sequence !== undefined) settleReceipt(sequence, false)
      }
    }
    const fenced = fence.fenceAll(cell.session, calls.map((c) => c.effect), hooks)
    return Effect.uninterruptibleMask((restore) =>
      Effect.matchCauseEffect(restore(fenced), {
        onFailure: (cause) => {
          ended()
          const failed = Cause.failureOrCause(cause)
          return afterStop(Either.isLeft(failed) ? Effect.fail(storageFailure(failed.left)) : Effect.failCause(failed.right))
        },
        onSuccess: () => {
          ended()
          return afterStop(Effect.succeed(calls.map((c) => c.result())))
        }
      })
    )
  }

  return (calls: ReadonlyArray<ToolCallRequest>): Effect.Effect<ReadonlyArray<ToolResult>, HostCallFailed> => {
    const refused = callsRefusal(deps.config, calls.length)
    return refused !== undefined ? refuse(refused) : roundOf(ctx, calls, toolCall, runCalls)
  }
}

/** Why a round of `count` calls is refused: more than BRAIN_MAX_TOOL_CALLS_PER_DISPATCH; undefined when it is not. */
export const callsRefusal = (config: Pick<ServerConfigShape, "maxToolCallsPerDispatch">, count: number): Failure | undefined =>
  config.maxToolCallsPerDispatch > 0 && count > config.maxToolCallsPerDispatch
    ? failure(
      "tool_call_limit",
      `this dispatch has ${count} tool calls, more than BRAIN_MAX_TOOL_CALLS_PER_DISPATCH (${config.maxToolCallsPerDispatch}); none of them was journaled or sent`
    )
    : undefined

/** One call of a round as the fence takes it, and what the loop is shown once the fence answered. */
interface ToolCall {
  readonly effect: FencedEffect<ToolVerdict, never>
  readonly result: () => ToolResult
  /** Its start's bytes in the journal. */
  readonly bytes: number
  /** Its start's sequence, once dispatched. */
  readonly started: () => number | undefined
  /** Its tool's name. */
  readonly tool: string
}

/** What `toolCall` is (makeDispatch's): one call, with its budget and its round's deadline sleeper. */
type ToolCallOf = (
  call: ToolCallRequest,
  definition: ToolDefinition | undefined,
  now: number,
  budget: number | undefined,
  deadline: Deadline | undefined,
  /** The round's: what a remote call sent now is stopped in, if it must be. */
  runtime: Runtime.Runtime<never>
) => ToolCall

/**
 * What stops a round's deadlines: host timers stopped in the step that ends the round, or an
 * effect (fibers sleeping on a Clock that tests drive, to interrupt).
 */
type StopDeadlines = (() => void) | Effect.Effect<void>

/** Stops the deadlines now, or answers the effect that does. */
const stopped = (stop: StopDeadlines): Effect.Effect<void> | undefined => {
  if (Effect.isEffect(stop)) return stop
  stop()
  return undefined
}

/**
 * What `runCalls` is (makeDispatch's): a round's calls through the fence, their results in order;
 * `stop` (the round's deadlines) runs when it ends, however.
 */
type RunCalls = (calls: ReadonlyArray<ToolCall>, stop: StopDeadlines) => Effect.Effect<ReadonlyArray<ToolResult>, HostCallFailed>

// A call's generator bodies are module functions, made once, not generators made per call
// (docs/benchmarks.md, "Generator bodies made once").

/**
 * A round of calls: one deadline per distinct budget, the calls fenced together (`fenceAll`). On
 * the live Clock the deadlines are host timers (Deadline.ts) made in this step, and the round
 * reads its fiber (its Clock, its runtime) once; on another a fiber sleeping on it each.
 */
const roundOf = (
  ctx: ToolCallContext,
  calls: ReadonlyArray<ToolCallRequest>,
  toolCall: ToolCallOf,
  runCalls: RunCalls
): Effect.Effect<ReadonlyArray<ToolResult>, HostCallFailed> =>
  Effect.withFiberRuntime((fiber, status) => {
    const { cell } = ctx.scope
    const { config } = ctx.deps
    const now = ctx.deps.clock.unsafeCurrentTimeMillis()
    const tools = cell.state.configuration?.tools
    const definitions = calls.map((call) => tools?.find((t) => t.name === call.name))
    const budgets = definitions.map((definition) => budgetOf(config, definition))
    const runtime = Runtime.make({ context: fiber.currentContext, runtimeFlags: status.runtimeFlags, fiberRefs: fiber.getFiberRefs() })
    /** The round with its deadlines, one per distinct budget among its calls (they share `now`, so calls with the same budget share their deadline_at_ms). */
    const round = (sleepers: ReadonlyMap<number, Deadline>, stop: StopDeadlines) =>
      runCalls(
        calls.map((call, i) => {
          const budget = budgets[i]
          return toolCall(call, definitions[i], now, budget, budget !== undefined ? sleepers.get(budget) : undefined, runtime)
        }),
        stop
      )
    if (budgets.every((budget) => budget === undefined)) return round(new Map(), () => {})
    const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
    if (isLiveClock(clock)) {
      const timers = new Map<number, TimerDeadline>()
      for (const budget of budgets) {
        if (budget !== undefined && !timers.has(budget)) timers.set(budget, new TimerDeadline(budget))
      }
      return round(timers, () => timers.forEach((d) => d.stop()))
    }
    const deadlines = sleepingDeadlines()
    const distinct = [...new Set(budgets.filter((budget): budget is number => budget !== undefined))]
    return Effect.flatMap(
      Effect.forEach(distinct, (budget) => Effect.map(deadlines.make(budget), (d) => [budget, d] as const)),
      (made) => round(new Map(made), deadlines.stopAll)
    )
  })

/** What a call's local executor is given (Tools). */
const invocationOf = (
  ctx: ToolCallContext,
  call: ToolCallRequest,
  definition: ToolDefinition | undefined,
  deadlineAtMs: number | undefined,
  sequence: number,
  stop: CallStop,
  inFlight: () => boolean
): ToolInvocation => ({
  session: ctx.scope.cell.session,
  sequence,
  call,
  definition,
  deadlineAtMs,
  get signal() {
    return stop.signal
  },
  stop,
  // A tool's Events come before its outcome: refused once the call is over.
  emit: (kind, payload) =>
    inFlight() ? ctx.emitAs({ kind: "tool", sequence }, kind, payload) : refuse(failure("conflict", "the tool call is over")),
  telemetry: (data) => ctx.report(data, sequence)
})

/**
 * A call's dispatch tried now, once its start is durable (FencedEffect.dispatchNow): its verdict
 * when its executor went to its end in this call (a Wasm tool that ran to its end on the main
 * thread: Tools.tryNow), which needs no fiber, no race and no deadline; a remote call sent now and
 * under way (`remoteNowOf`); undefined when it could not, having done nothing that shows, and then
 * `dispatchOf` runs it. For a Wasm tool, a cancel or a deadline that came while the start was
 * committed is `dispatchOf`'s to record.
 */
const dispatchNowOf = (
  ctx: ToolCallContext,
  call: ToolCallRequest,
  definition: ToolDefinition | undefined,
  deadline: Deadline | undefined,
  deadlineAtMs: number | undefined,
  sequence: number,
  inFlight: () => boolean,
  runtime: Runtime.Runtime<never>
): Exit.Exit<ToolVerdict> | Dispatching<ToolVerdict, never> | undefined => {
  const { deps, scope } = ctx
  const place = definition !== undefined ? placeOf(scope.cell.state.configuration?.environments ?? [], definition) : "none"
  // A remote call is sent now where its driver can; its Environment runs it.
  if (typeof place === "object" && place.driver !== "brain") {
    return remoteNowOf(ctx, call, definition, place, deadline, deadlineAtMs, sequence, inFlight, runtime)
  }
  const tryNow = deps.tools.tryNow
  if (tryNow === undefined || definition?.module === undefined || scope.signal.reason !== undefined || deadline?.unsafePoll() != null) return undefined
  const exit = tryNow(invocationOf(ctx, call, definition, deadlineAtMs, sequence, new CallStop(), inFlight))
  if (exit === undefined) return undefined
  if (Exit.isSuccess(exit)) return Exit.succeed({ _tag: "reply", reply: exit.value })
  const lost = Cause.failureOption(exit.cause)
  return Option.isSome(lost) ? Exit.succeed({ _tag: "lost", message: lost.value.message }) : Exit.failCause(exit.cause as Cause.Cause<never>)
}

/** A call's dispatch, once its start is durable: its executor raced against the turn's cancel and the call's deadline. */
function* dispatchOf(
  ctx: ToolCallContext,
  call: ToolCallRequest,
  definition: ToolDefinition | undefined,
  deadline: Deadline | undefined,
  deadlineAtMs: number | undefined,
  sequence: number,
  inFlight: () => boolean,
  /** Told the verdict of the call's stop, once it has run. */
  keepStop: (verdict: ToolVerdict) => void
) {
  const { deps, scope } = ctx
  const { cell } = scope
  const { config } = deps
  const place = definition ? placeOf(cell.state.configuration?.environments ?? [], definition) : "none"
  const remote = typeof place === "object" && place.driver !== "brain" ? place : undefined
  const early = notSentOf(ctx, call, definition, deadline, remote)
  if (early !== undefined) return early
  const stop = new CallStop()
  /** Why the call is being stopped, once it is: its own deadline, or the turn's cancel (a wall deadline included). */
  let stoppedBy: "cancel" | "deadline" = "cancel"
  // A daemon: the dispatch ending (or interrupted) never waits for an executor that does not stop;
  // its interruption is bounded by the grace (`interruptWithin`), then the executor is abandoned.
  const executor = yield* Effect.forkDaemon(
    remote !== undefined
      ? deps.environments !== undefined
        ? checkedOutput(
          callRemote(deps.environments, remote, remoteInvocation(ctx, call, sequence, deadlineAtMs, stop, () => stoppedBy, inFlight)),
          remote.driver === "host" ? definition?.output_schema : undefined
        )
        : Effect.succeed<ToolVerdict>({
          _tag: "failed",
          outcome: "error",
          failure: failure("environment_failed", `Environment ${JSON.stringify(remote.name)}: this server cannot run a ${remote.driver} Environment; nothing was sent`, {
            details: { environment: remote.name, reason: "driver_unavailable" }
          })
        })
      // An executor that throws as it is called, or dies (a defect), failed: `crashed`.
      : Effect.suspend(() => deps.tools.invoke(invocationOf(ctx, call, definition, deadlineAtMs, sequence, stop, inFlight))).pipe(Effect.match({
      onFailure: (lost): ToolVerdict => ({ _tag: "lost", message: lost.message }),
      onSuccess: (reply): ToolVerdict => ({ _tag: "reply", reply })
    }), Effect.catchAllDefect((defect) => Effect.succeed(crashed(defect))))
  )
  // The dispatch interrupted (its activation is, a server stop) before the call was stopped: the
  // call is stopped, and its executor interrupted and given the grace, no more; the fence records
  // the call unconfirmed. Once its stop has begun (the cancel, its deadline), the stop runs to its
  // end, bounded by two graces, and its verdict stands: an interruption then (the activation
  // interrupted two graces after the cancel, as the stop's second grace ends) neither starts the
  // grace again nor loses what the stop found, so the outcome is recorded within the stop's bound,
  // ahead of the turn's close.
  return yield* Effect.onInterrupt(
    Effect.gen(() => verdictOf(config, scope.signal, executor, deadline, stop, (by) => (stoppedBy = by), keepStop)),
    () => (stop.aborted ? Effect.void : Effect.zipRight(Effect.sync(() => stop.abort("interrupted")), interruptWithin(executor, config.cancelGraceMs)))
  )
}

/**
 * Whichever is first: the executor's verdict, the turn's cancel, the call's deadline (the round's
 * sleeper on the Clock). One callback each way (`exitOrCancel`), not a race of three fibers.
 */
function* verdictOf(
  config: ServerConfigShape,
  signal: ToolCallContext["scope"]["signal"],
  executor: Fiber.RuntimeFiber<ToolVerdict>,
  deadline: Deadline | undefined,
  stop: CallStop,
  stoppedBy: (by: "cancel" | "deadline") => void,
  keepStop: (verdict: ToolVerdict) => void
) {
  const first = yield* exitOrCancel(executor, signal, deadline)
  // An executor answers every outcome as a verdict; one that was interrupted ends the call so.
  if (first._tag === "done") {
    if (Exit.isFailure(first.exit) && !Exit.isInterrupted(first.exit)) return crashed(Cause.squash(first.exit.cause))
    const v = yield* first.exit
    // Stopped with no stop asked of it, before its work began: Brain's own executor refusing the
    // call as the server stops (a Wasm tool refused a thread by the closed pool). Never sent.
    if (v._tag === "reply" && v.reply.outcome === "stopped" && stop.neverStarted && !stop.aborted) return { _tag: "unsent", reason: "interrupted" } as ToolVerdict
    return v
  }
  const verdict = yield* Effect.uninterruptible(Effect.gen(() => stopping(config, first, executor, stop, stoppedBy)))
  keepStop(verdict)
  return verdict
}
