/**
 * The tool calls of one activation (`Host.dispatch`): each call's start committed through the
 * EffectFence before it is sent, run where its tool is placed (in process, a Wasm tool, an
 * Environment), stopped by its deadline or the turn's cancel, and its outcome committed before
 * the loop sees it, exactly as recorded. The calls of one round run at once.
 */
import { Cause, Duration, Effect, Exit, Fiber, Option } from "effect"
import { placeOf } from "../../domain/Environment.js"
import { failure, type Failure } from "../../domain/Failure.js"
import type { SessionConfiguration } from "../../domain/Configuration.js"
import type { ToolCallRequest } from "../../domain/Messages.js"
import { entry, type Entry } from "../../domain/Records.js"
import type { HostCallFailed, ToolResult } from "../../services/Agentloop.js"
import type { FencedEffect, FenceHooks } from "../../services/EffectFence.js"
import type { ServerConfigShape } from "../../services/ServerConfig.js"
import type { ToolInvocation, ToolReply } from "../../services/Tools.js"
import { CallStop } from "../CallStop.js"
import type { CancelReason } from "./Cell.js"
import { exitOrCancel } from "./Cell.js"
import type { ActivationScope, HostDeps } from "./Host.js"
import { cancelFailure, refuse, storageFailure } from "./HostFailures.js"
import { callRemote } from "./RemoteTool.js"
import { schemaIssues } from "./ToolSchemas.js"

type ToolDefinition = NonNullable<SessionConfiguration["tools"]>[number]

type ToolVerdict =
  | { readonly _tag: "reply"; readonly reply: ToolReply }
  /** Never sent: the turn was cancelled (`reason`), or the call's own deadline had passed (`deadline`). */
  | { readonly _tag: "unsent"; readonly reason: CancelReason; readonly deadline?: true }
  | { readonly _tag: "lost"; readonly message: string }
  /** An Environment's failure: `error` when the call did not run, `unknown` when it may have. */
  | { readonly _tag: "failed"; readonly outcome: "error" | "unknown"; readonly failure: Failure }
  | { readonly _tag: "stopped"; readonly by: "cancel" | "deadline"; readonly confirmed: boolean; readonly reason: CancelReason }

/** A host tool's `ok` output that breaks its declared `output_schema` becomes the error `invalid_output`. */
const checkedOutput = (verdict: Effect.Effect<ToolVerdict>, schema: unknown): Effect.Effect<ToolVerdict> =>
  schema === undefined
    ? verdict
    : Effect.map(verdict, (v): ToolVerdict => {
      if (v._tag !== "reply" || v.reply.outcome !== "ok") return v
      const issues = schemaIssues(schema, v.reply.output)
      if (issues === undefined) return v
      const shown = issues.map((i) => `${i.path.length > 0 ? i.path.join(".") : "(output)"}: ${i.message}`).join("; ")
      return { _tag: "reply", reply: { outcome: "error", output: { code: "invalid_output", message: `the output is not valid: ${shown}`, issues } } }
    })

/** The record of a call's outcome: what the fence commits, and exactly what the loop is shown. */
const toolOutcome = (sequence: number, exit: Exit.Exit<ToolVerdict>, dispatched: boolean, budget: number | undefined) => {
  const v: ToolVerdict = Exit.isSuccess(exit)
    ? exit.value
    : { _tag: "stopped", by: "cancel", confirmed: !dispatched, reason: "interrupted" }
  if (v._tag === "reply" && v.reply.outcome !== "stopped") {
    return entry("tool_call_ended", {
      sequence,
      outcome: v.reply.outcome,
      output: v.reply.output ?? null,
      is_error: v.reply.outcome === "error"
    })
  }
  if (v._tag === "unsent" && v.deadline) {
    return entry("tool_call_failed", {
      sequence,
      outcome: "timeout",
      failure: failure("timeout", `the tool call's deadline of ${budget} ms passed before it was sent; the call was not sent`),
      is_error: true
    })
  }
  if (v._tag === "unsent") {
    return entry("tool_call_failed", {
      sequence,
      outcome: v.reason === "timeout" ? "timeout" : "cancelled",
      failure: { ...cancelFailure(v.reason), message: `${cancelFailure(v.reason).message}; the call was not sent` },
      is_error: true
    })
  }
  if (v._tag === "failed") {
    return entry("tool_call_failed", { sequence, outcome: v.outcome, failure: v.failure, is_error: true })
  }
  if (v._tag === "lost") {
    return entry("tool_call_failed", {
      sequence,
      outcome: "unknown",
      failure: failure("unknown", v.message, { ambiguous: true }),
      is_error: true
    })
  }
  if (v._tag === "stopped" && v.by === "deadline") {
    return entry("tool_call_failed", {
      sequence,
      outcome: "timeout",
      failure: failure("timeout", `the tool call passed its deadline of ${budget} ms`, { ambiguous: !v.confirmed }),
      is_error: true
    })
  }
  const confirmed = v._tag === "stopped" ? v.confirmed : true
  return entry("tool_call_failed", {
    sequence,
    outcome: confirmed ? "cancelled" : "unknown",
    failure: confirmed
      ? failure("cancelled", "the tool call was cancelled", { ambiguous: true })
      : failure("unknown", "the tool call was cancelled and the executor did not confirm it stopped", { ambiguous: true }),
    is_error: true
  })
}

/** A call's time budget in ms: the lower of BRAIN_MAX_TOOL_MS and its tool's `timeout_ms` (undefined: none). */
const budgetOf = (config: ServerConfigShape, definition: ToolDefinition | undefined): number | undefined => {
  const limits = [config.maxToolMs, definition?.timeout_ms ?? 0].filter((n) => n > 0)
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
}

/** `Host.dispatch` of one activation, before the host's own checks (a cancel, a broken cell). */
export const makeDispatch = (ctx: ToolCallContext) => {
  const { deps, scope, hooks } = ctx
  const { cell } = scope
  const { fence } = deps

  /**
   * One call with its `budget` (`budgetOf`), as the fence takes it, and the result the loop is
   * shown once the fence has answered. `deadline` is a fiber sleeping on the Clock until the call's
   * `deadline_at_ms` (`now` + its budget), shared by the round's calls with the same budget.
   */
  const toolCall: ToolCallOf = (call, definition, now, budget, deadline) => {
    const deadlineAtMs = budget !== undefined ? now + budget : undefined
    const started = entry("tool_call_started", {
      tool: call.name,
      call_id: call.id,
      input: call.input ?? null,
      deadline_at_ms: deadlineAtMs ?? 0
    })
    /** The call is being executed: the tool may still emit Events. */
    let inFlight = true
    const dispatch = (sequence: number): Effect.Effect<ToolVerdict> =>
      Effect.gen(() => dispatchOf(ctx, call, definition, deadline, deadlineAtMs, sequence, () => inFlight))
    const dispatchNow = (sequence: number): Exit.Exit<ToolVerdict> | undefined =>
      dispatchNowOf(ctx, call, definition, deadline, deadlineAtMs, sequence, () => inFlight)

    /**
     * The outcome record the fence committed (it asks once); the loop is shown exactly it. The fence
     * asks in the step that observes the dispatch's end, however it ended (interrupted too), and
     * before it commits the record: the call is over from there, and Events it emits are refused.
     */
    let recorded: Entry | undefined
    const outcome = (sequence: number, exit: Exit.Exit<ToolVerdict>, dispatched: boolean) => {
      inFlight = false
      return (recorded = toolOutcome(sequence, exit, dispatched, budget))
    }
    const result = (): ToolResult => {
      const p = recorded!.payload as { outcome: ToolResult["outcome"]; output?: unknown; failure?: Failure }
      return {
        call_id: call.id,
        name: call.name,
        outcome: p.outcome,
        output: p.output !== undefined ? p.output : { code: p.failure!.code, message: p.failure!.message },
        is_error: p.outcome !== "ok"
      }
    }
    return { effect: { started, dispatch, dispatchNow, outcome }, result }
  }

  /** A round's calls through the fence: their starts in one commit, then each run at once. */
  const runCalls: RunCalls = (calls) =>
    fence.fenceAll(cell.session, calls.map((c) => c.effect), hooks).pipe(
      Effect.mapError(storageFailure),
      Effect.map(() => calls.map((c) => c.result()))
    )

  return (calls: ReadonlyArray<ToolCallRequest>): Effect.Effect<ReadonlyArray<ToolResult>, HostCallFailed> =>
    Effect.gen(() => roundOf(ctx, calls, toolCall, runCalls))
}

/** One call of a round as the fence takes it, and what the loop is shown once the fence answered. */
interface ToolCall {
  readonly effect: FencedEffect<ToolVerdict, never>
  readonly result: () => ToolResult
}

/** What `toolCall` is (makeDispatch's): one call, with its budget and its round's deadline sleeper. */
type ToolCallOf = (
  call: ToolCallRequest,
  definition: ToolDefinition | undefined,
  now: number,
  budget: number | undefined,
  deadline: Fiber.RuntimeFiber<void> | undefined
) => ToolCall

/** What `runCalls` is (makeDispatch's): a round's calls through the fence, their results in order. */
type RunCalls = (calls: ReadonlyArray<ToolCall>) => Effect.Effect<ReadonlyArray<ToolResult>, HostCallFailed>

// A round's and a call's generator bodies are module functions, made once, not generators made per
// call (docs/benchmarks.md, "Generator bodies made once").

/** A round of calls: one deadline sleeper per distinct budget, the calls fenced together (`fenceAll`). */
function* roundOf(ctx: ToolCallContext, calls: ReadonlyArray<ToolCallRequest>, toolCall: ToolCallOf, runCalls: RunCalls) {
  const { cell } = ctx.scope
  const { config } = ctx.deps
  const now = ctx.deps.clock.unsafeCurrentTimeMillis()
  // One sleeper per distinct budget among the round's calls (they share `now`, so calls with the
  // same budget share their deadline_at_ms): a round of parallel calls to one tool starts one.
  const sleepers = new Map<number, Fiber.RuntimeFiber<void>>()
  const tools = cell.state.configuration?.tools
  const definitions = calls.map((call) => tools?.find((t) => t.name === call.name))
  const budgets = definitions.map((definition) => budgetOf(config, definition))
  for (const budget of budgets) {
    if (budget !== undefined && !sleepers.has(budget)) sleepers.set(budget, yield* Effect.fork(Effect.sleep(Duration.millis(budget))))
  }
  const round = runCalls(calls.map((call, i) => {
    const budget = budgets[i]
    return toolCall(call, definitions[i], now, budget, budget !== undefined ? sleepers.get(budget) : undefined)
  }))
  return yield* (sleepers.size > 0 ? Effect.ensuring(round, Fiber.interruptAll(sleepers.values())) : round)
}

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
 * thread: Tools.tryNow), which needs no fiber, no race and no deadline; undefined when it could
 * not, having done nothing that shows, and then `dispatchOf` runs it. A cancel or a deadline that
 * came while the start was committed is `dispatchOf`'s to record.
 */
const dispatchNowOf = (
  ctx: ToolCallContext,
  call: ToolCallRequest,
  definition: ToolDefinition | undefined,
  deadline: Fiber.RuntimeFiber<void> | undefined,
  deadlineAtMs: number | undefined,
  sequence: number,
  inFlight: () => boolean
): Exit.Exit<ToolVerdict> | undefined => {
  const { deps, scope } = ctx
  const tryNow = deps.tools.tryNow
  if (tryNow === undefined || definition?.module === undefined || scope.signal.reason !== undefined || deadline?.unsafePoll() != null) return undefined
  // A remote call is never tried here: its Environment runs it.
  const place = placeOf(scope.cell.state.configuration?.environments ?? [], definition)
  if (typeof place === "object" && place.driver !== "brain") return undefined
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
  deadline: Fiber.RuntimeFiber<void> | undefined,
  deadlineAtMs: number | undefined,
  sequence: number,
  inFlight: () => boolean
) {
  const { deps, scope, emitAs } = ctx
  const { cell } = scope
  const { config } = deps
  // A cancel that arrived while the start was being committed: do not send at all.
  const early = scope.signal.reason
  if (early !== undefined) return { _tag: "unsent", reason: early } as ToolVerdict
  // Its deadline passed while its start was being committed: not sent either.
  const ended = deadline?.unsafePoll()
  if (ended != null && Exit.isSuccess(ended)) return { _tag: "unsent", reason: "timeout", deadline: true } as ToolVerdict
  const stop = new CallStop()
  /** Why the call is being stopped, once it is: its own deadline, or the turn's cancel (a wall deadline included). */
  let stoppedBy: "cancel" | "deadline" = "cancel"
  const place = definition ? placeOf(cell.state.configuration?.environments ?? [], definition) : "none"
  const remote = typeof place === "object" && place.driver !== "brain" ? place : undefined
  // A host tool's input that breaks its declared schema is answered here, never sent.
  const issues = remote?.driver === "host" ? schemaIssues(definition?.input_schema, call.input ?? null) : undefined
  if (issues !== undefined) {
    const shown = issues.map((i) => `${i.path.length > 0 ? i.path.join(".") : "(input)"}: ${i.message}`).join("; ")
    return {
      _tag: "reply",
      reply: { outcome: "error", output: { code: "invalid_input", message: `the input is not valid: ${shown}`, issues } }
    } as ToolVerdict
  }
  const executor = yield* Effect.fork(
    remote !== undefined
      ? deps.environments !== undefined
        ? checkedOutput(callRemote(deps.environments, remote, {
          session: cell.session,
          sequence,
          call,
          deadlineAtMs,
          stop,
          stoppedBy: () => stoppedBy,
          // A host's tool-origin Events, like an in-process tool's: refused once the call is over.
          emit: (kind, payload) =>
            inFlight() ? emitAs({ kind: "tool", sequence }, kind, payload) : refuse(failure("conflict", "the tool call is over"))
        }), remote.driver === "host" ? definition?.output_schema : undefined)
        : Effect.succeed<ToolVerdict>({
          _tag: "failed",
          outcome: "error",
          failure: failure("environment_failed", `Environment ${JSON.stringify(remote.name)}: this server cannot run a ${remote.driver} Environment; nothing was sent`, {
            details: { environment: remote.name, reason: "driver_unavailable" }
          })
        })
      : deps.tools.invoke(invocationOf(ctx, call, definition, deadlineAtMs, sequence, stop, inFlight)).pipe(Effect.match({
      onFailure: (lost): ToolVerdict => ({ _tag: "lost", message: lost.message }),
      onSuccess: (reply): ToolVerdict => ({ _tag: "reply", reply })
    }))
  )
  // Whichever is first: the executor's verdict, the turn's cancel, the call's deadline (the
  // round's sleeper on the Clock). One callback each way (`exitOrCancel`), not a race of three fibers.
  const first = yield* exitOrCancel(executor, scope.signal, deadline)
  // An executor answers every outcome as a verdict; one that died or was interrupted ends the call so.
  if (first._tag === "done") return yield* first.exit
  const by = first._tag === "deadline" ? "deadline" : "cancel"
  const reason: CancelReason = first._tag === "cancel" ? first.reason : "timeout"
  stoppedBy = by
  stop.abort(by === "deadline" ? "timeout" : reason)
  const after = yield* Fiber.await(executor).pipe(Effect.timeoutOption(Duration.millis(config.cancelGraceMs)))
  if (Option.isSome(after)) {
    const ended = after.value
    if (Exit.isSuccess(ended) && ended.value._tag === "reply" && ended.value.reply.outcome !== "stopped") {
      return ended.value // It finished anyway: record what really happened.
    }
    // An executor may confirm it stopped by ending interrupted after the abort (a Wasm tool:
    // services/Tools.ts); one that died ends the call so.
    if (Exit.isFailure(ended) && !Exit.isInterrupted(ended)) return yield* ended
  }
  if (Option.isNone(after)) yield* Fiber.interrupt(executor).pipe(Effect.timeoutOption(Duration.millis(config.cancelGraceMs)))
  return { _tag: "stopped", by, confirmed: Option.isSome(after), reason } as ToolVerdict

}
