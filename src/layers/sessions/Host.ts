/**
 * The host services of one activation. Every write is durable before it returns; every effect
 * goes through the EffectFence; after a cancel, every host call fails with the cancel's code.
 *
 * An effect whose outcome was not durable within BRAIN_CLEANUP_DEADLINE_MS reaches the loop as
 * `journal_write_failed` (ambiguous), never as its result. The cell is then broken, as after a
 * failed write: every later host call fails with `journal_write_failed` and nothing more is
 * committed through it, because its state may now lack a record that is still on its way to the
 * disk. Effects already past their started commit when it broke (the other calls of a parallel
 * dispatch) still end normally: their outcome is the truth and is recorded if the journal takes
 * it. The outcome append still in flight is handed to the turn (`ActivationScope.unsettled`),
 * which keeps the session refused until it has landed or failed; see Turn.ts.
 */
import { Clock, Duration, Effect, Exit, Fiber, Option } from "effect"
import { failure, type Failure } from "../../domain/Failure.js"
import type { Message, ToolCallRequest } from "../../domain/Messages.js"
import type { ModelDelta, ModelResult } from "../../domain/Model.js"
import type { SessionId } from "../../domain/Ids.js"
import { modelCallContext } from "../../domain/ModelContext.js"
import { kvRead, transcriptChange } from "../../domain/Projection.js"
import { entry, EXTENSION_KIND, ReservedKinds } from "../../domain/Records.js"
import { HostCallFailed, type Host, type ToolResult } from "../../services/Agentloop.js"
import type { EffectFenceShape, FenceError, FenceHooks } from "../../services/EffectFence.js"
import type { JournalShape } from "../../services/Journal.js"
import type { ModelFailed, ModelsShape } from "../../services/Models.js"
import type { ServerConfigShape } from "../../services/ServerConfig.js"
import type { TelemetryShape } from "../../services/Telemetry.js"
import type { EnvironmentsShape } from "../../services/Environments.js"
import { schemaIssues } from "./ToolSchemas.js"
import { placeOf } from "../../domain/Environment.js"
import { callRemote } from "./RemoteTool.js"
import type { ToolReply, ToolsShape } from "../../services/Tools.js"
import { type CancelReason, type CancelSignal, type Cell, commit, exitOrCancel } from "./Cell.js"
import { readEvents } from "./Events.js"
import { PAGE_EVENTS } from "../../domain/Limits.js"

export interface HostDeps {
  readonly journal: JournalShape
  readonly fence: EffectFenceShape
  readonly models: ModelsShape
  readonly tools: ToolsShape
  readonly config: ServerConfigShape
  /** Where live-only deltas go (the session's SSE subscribers): never journaled. */
  readonly live?: LiveDeltas
  /** Where the loop's telemetry goes (BRAIN_TELEMETRY): never journaled; absent, it is dropped. */
  readonly telemetry?: TelemetryShape
  /** The `http` and `host` Environments' drivers; absent, a tool placed in one ends in `error` (nothing sent). */
  readonly environments?: EnvironmentsShape
}

export interface LiveDeltas {
  /** The sink for the deltas of the model call started at `sequence`. */
  readonly delta: (session: SessionId, sequence: number) => (delta: ModelDelta) => void
}

export interface ActivationScope {
  readonly cell: Cell
  readonly activation: number
  /** The turn's cancel: its reason once cancelled (every host call checks it), and the waits that race it (`exitOrCancel`). */
  readonly signal: CancelSignal
  /** Serializes state writes so each delta is computed against the state it will follow. */
  readonly writes: Effect.Semaphore
  modelCalls: number
  emittedBytes: number
  /**
   * Appends that missed the cleanup deadline and are still on their way to the journal: each
   * waits until its append has landed or failed. The turn holds the session until they settle.
   */
  readonly unsettled: Array<Effect.Effect<void>>
  /**
   * The transcript the loop saved with its end (`setTranscriptAtEnd`): the turn's closing append
   * carries its difference from the saved one. Once set, every host call is refused.
   */
  atEnd?: ReadonlyArray<Message> | undefined
}

export const cancelFailure = (reason: CancelReason): Failure =>
  reason === "timeout"
    ? failure("timeout", "the turn's wall deadline passed")
    : reason === "cancelled"
    ? failure("cancelled", "the turn was cancelled")
    : failure("interrupted", "the server is stopping")

const refuse = (f: Failure) => Effect.fail(new HostCallFailed({ failure: f }))

/** A host call after setTranscriptAtEnd: the loop said it was ending. */
const afterEnd = failure("invalid_request", "a host call after setTranscriptAtEnd: the activation must end right after it")

/** A host call after the cell broke: it did nothing, so it is not ambiguous. */
const brokenFailure = failure(
  "journal_write_failed",
  "an earlier write of this session failed or was not durable in time; nothing more is written until the session recovers on its next access"
)

/** A provider's failure as recorded in `model_call_failed` and shown to the loop. */
const modelFailure = (err: ModelFailed) =>
  failure(err.code, err.message, { ambiguous: err.ambiguous, retryable: err.retryable, details: err.details })

const storageFailure = (e: FenceError): HostCallFailed =>
  new HostCallFailed({
    failure: e._tag === "OutcomeUnrecorded"
      ? failure(
        "journal_write_failed",
        `${e.message}: the effect may have happened, and its result is withheld until something durable says how it ended; the session recovers on its next access`,
        { ambiguous: true }
      )
      : e._tag === "RecordRejected"
      ? failure("invalid_request", e.reason)
      : e._tag === "JournalCorrupt"
      ? failure("journal_corrupt", e.message)
      : e._tag === "SessionNotFound"
      ? failure("not_found", e.message)
      : failure("journal_write_failed", e.message, { ambiguous: true })
  })

type ToolVerdict =
  | { readonly _tag: "reply"; readonly reply: ToolReply }
  /** Cancelled before it was sent: nothing happened. */
  /** Never sent: the turn was cancelled (`reason`), or the call's own deadline had passed (`deadline`). */
  | { readonly _tag: "unsent"; readonly reason: CancelReason; readonly deadline?: true }
  | { readonly _tag: "lost"; readonly message: string }
  /** An Environment's failure: `error` when the call did not run, `unknown` when it may have. */
  | { readonly _tag: "failed"; readonly outcome: "error" | "unknown"; readonly failure: Failure }
  | { readonly _tag: "stopped"; readonly by: "cancel" | "deadline"; readonly confirmed: boolean; readonly reason: CancelReason }

export const makeHost = (deps: HostDeps, scope: ActivationScope): Host => {
  const { cell } = scope
  const { config, fence, journal } = deps

  /** Fails at once if the turn has been cancelled, or if the cell is broken (nothing more is written through it). */
  const live = <A>(body: Effect.Effect<A, HostCallFailed>): Effect.Effect<A, HostCallFailed> =>
    Effect.suspend(() =>
      scope.signal.reason !== undefined
        ? refuse(cancelFailure(scope.signal.reason))
        : cell.broken
        ? refuse(brokenFailure)
        : scope.atEnd !== undefined
        ? refuse(afterEnd)
        : body)

  /**
   * Telemetry, the loop's or a tool's (`toolCall`: its started sequence). Fire and forget, after a
   * cancel too: the sink never blocks and never fails the call; never journaled.
   */
  const report = (data: unknown, toolCall?: number): Effect.Effect<void> => {
    const sink = deps.telemetry
    if (sink === undefined) return Effect.void
    return Effect.flatMap(Clock.currentTimeMillis, (at_ms) =>
      sink.record({
        session_id: cell.session,
        activation: scope.activation,
        ...(toolCall === undefined ? {} : { tool_call: toolCall }),
        at_ms,
        data: data ?? null
      }))
  }

  const write = <A>(body: Effect.Effect<A, FenceError>) =>
    scope.writes.withPermits(1)(Effect.mapError(body, storageFailure))

  const hooks: FenceHooks = {
    committed: (committed) => cell.foldIn(committed),
    unrecorded: (settled) => {
      cell.broken = true
      scope.unsettled.push(settled)
    }
  }

  /**
   * Runs `call` until it ends or the turn is cancelled, whichever is first; a cancel interrupts it
   * (and waits for that) and answers `cancelled`. One forked fiber and a callback on the turn's
   * signal, where a race forked two.
   */
  const callOrCancel = <A, E>(call: Effect.Effect<A, E>, cancelled: (reason: CancelReason) => A): Effect.Effect<A, E> =>
    Effect.flatMap(Effect.fork(call), (fiber) =>
      Effect.flatMap(
        Effect.onInterrupt(exitOrCancel(fiber, scope.signal), () => Fiber.interrupt(fiber)),
        (first) =>
          first._tag === "done"
            ? first.exit
            : Effect.as(Fiber.interrupt(fiber), cancelled(first._tag === "cancel" ? first.reason : "cancelled"))
      ))

  const model: Host["model"] = (request) =>
    live(Effect.gen(function*() {
      if (config.maxModelCalls > 0 && scope.modelCalls >= config.maxModelCalls) {
        return yield* refuse(failure("model_call_limit", `this turn reached BRAIN_MAX_MODEL_CALLS (${config.maxModelCalls})`))
      }
      scope.modelCalls++
      const configuration = cell.state.configuration!
      const system = request.system ?? configuration.system
      const index = cell.state.modelCalls
      const started = entry("model_call_started", {
        ...modelCallContext(cell.state, request.messages, request.system),
        ...(request.options !== undefined ? { options: request.options } : {})
      })
      type Race =
        | { readonly _tag: "result"; readonly result: ModelResult }
        | { readonly _tag: "cancelled"; readonly reason: CancelReason; readonly sent: boolean }
      const fenced = yield* fence.fence(
        cell.session,
        started,
        (sequence) =>
          // A cancel that arrived while the start was being committed: do not send at all.
          Effect.suspend(() =>
            scope.signal.reason !== undefined
              ? Effect.succeed<Race>({ _tag: "cancelled", reason: scope.signal.reason, sent: false })
              : callOrCancel(
            Effect.map(
              deps.models.call({
                session: cell.session,
                sequence,
                index,
                model: configuration.model,
                ...(configuration.model_binding !== undefined ? { binding: configuration.model_binding } : {}),
                ...(deps.live ? { onDelta: deps.live.delta(cell.session, sequence) } : {}),
                request: {
                  messages: request.messages,
                  ...(system !== undefined ? { system } : {}),
                  ...(configuration.tools !== undefined ? { tools: configuration.tools } : {}),
                  ...(request.options !== undefined ? { options: request.options } : {})
                }
              }),
              (result): Race => ({ _tag: "result", result })
            ),
            (reason): Race => ({ _tag: "cancelled", reason, sent: true })
          )),
        (sequence, exit, dispatched) => {
          if (Exit.isSuccess(exit)) {
            return exit.value._tag === "result"
              ? entry("model_call_ended", { sequence, result: exit.value.result })
              : entry("model_call_failed", {
                sequence,
                failure: { ...cancelFailure(exit.value.reason), ambiguous: exit.value.sent }
              })
          }
          const err = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
          return entry("model_call_failed", {
            sequence,
            failure: err
              ? modelFailure(err)
              : failure("cancelled", "the model call was abandoned", { ambiguous: dispatched })
          })
        },
        hooks
      ).pipe(Effect.mapError(storageFailure))
      const exit = fenced.exit
      if (Exit.isSuccess(exit)) {
        if (exit.value._tag === "result") return exit.value.result
        return yield* refuse(cancelFailure(exit.value.reason))
      }
      const err = exit.cause._tag === "Fail" ? exit.cause.error : undefined
      return yield* refuse(
        err
          ? modelFailure(err)
          : failure("cancelled", "the model call was abandoned", { ambiguous: true })
      )
    }))

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

  /** A call's time budget in ms: the lower of BRAIN_MAX_TOOL_MS and its tool's `timeout_ms` (undefined: none). */
  const budgetOf = (call: ToolCallRequest): number | undefined => {
    const definition = cell.state.configuration?.tools?.find((t) => t.name === call.name)
    const limits = [config.maxToolMs, definition?.timeout_ms ?? 0].filter((n) => n > 0)
    return limits.length > 0 ? Math.min(...limits) : undefined
  }

  /**
   * Runs one call with its `budget` (`budgetOf`). `deadline` is a fiber sleeping on the Clock until
   * the call's `deadline_at_ms` (`now` + its budget), shared by the round's calls with the same budget.
   */
  const runTool = (
    call: ToolCallRequest,
    now: number,
    budget: number | undefined,
    deadline: Fiber.RuntimeFiber<void> | undefined
  ): Effect.Effect<ToolResult, HostCallFailed> => {
    const definition = cell.state.configuration?.tools?.find((t) => t.name === call.name)
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
      Effect.gen(function*() {
        // A cancel that arrived while the start was being committed: do not send at all.
        const early = scope.signal.reason
        if (early !== undefined) return { _tag: "unsent", reason: early } as ToolVerdict
        // Its deadline passed while its start was being committed: not sent either.
        const ended = deadline?.unsafePoll()
        if (ended != null && Exit.isSuccess(ended)) return { _tag: "unsent", reason: "timeout", deadline: true } as ToolVerdict
        const controller = new AbortController()
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
                signal: controller.signal,
                stoppedBy: () => stoppedBy,
                // A host's tool-origin Events, like an in-process tool's: refused once the call is over.
                emit: (kind, payload) =>
                  inFlight ? emitAs({ kind: "tool", sequence }, kind, payload) : refuse(failure("conflict", "the tool call is over"))
              }), remote.driver === "host" ? definition?.output_schema : undefined)
              : Effect.succeed<ToolVerdict>({
                _tag: "failed",
                outcome: "error",
                failure: failure("environment_failed", `Environment ${JSON.stringify(remote.name)}: this server cannot run a ${remote.driver} Environment; nothing was sent`, {
                  details: { environment: remote.name, reason: "driver_unavailable" }
                })
              })
            : deps.tools.invoke({
            session: cell.session,
            sequence,
            call,
            definition,
            deadlineAtMs,
            signal: controller.signal,
            // A tool's Events come before its outcome: refused once the call is over.
            emit: (kind, payload) =>
              inFlight ? emitAs({ kind: "tool", sequence }, kind, payload) : refuse(failure("conflict", "the tool call is over")),
            telemetry: (data) => report(data, sequence)
          }).pipe(
            Effect.map((reply): ToolVerdict => ({ _tag: "reply", reply })),
            Effect.catchAll((lost) => Effect.succeed<ToolVerdict>({ _tag: "lost", message: lost.message }))
          )
        )
        // Whichever is first: the executor's verdict, the turn's cancel, the call's deadline (the
        // round's sleeper on the Clock). One callback each way (`exitOrCancel`), not a race of three fibers.
        const first = yield* exitOrCancel(executor, scope.signal, deadline)
        // An executor answers every outcome as a verdict; one that died or was interrupted ends the call so.
        if (first._tag === "done") return yield* first.exit
        const by = first._tag === "deadline" ? "deadline" : "cancel"
        const reason: CancelReason = first._tag === "cancel" ? first.reason : "timeout"
        stoppedBy = by
        controller.abort(by === "deadline" ? "timeout" : reason)
        const after = yield* Fiber.join(executor).pipe(Effect.timeoutOption(Duration.millis(config.cancelGraceMs)))
        if (Option.isSome(after) && after.value._tag === "reply" && after.value.reply.outcome !== "stopped") {
          return after.value // It finished anyway: record what really happened.
        }
        if (Option.isNone(after)) yield* Fiber.interrupt(executor).pipe(Effect.timeoutOption(Duration.millis(config.cancelGraceMs)))
        return { _tag: "stopped", by, confirmed: Option.isSome(after), reason } as ToolVerdict
      }).pipe(Effect.ensuring(Effect.sync(() => void (inFlight = false))))

    const outcomeOf = (sequence: number, exit: Exit.Exit<ToolVerdict>, dispatched: boolean) => {
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

    return fence.fence(cell.session, started, dispatch, outcomeOf, hooks).pipe(
      Effect.mapError(storageFailure),
      Effect.map(({ dispatched, exit, started: sequence }) => {
        // The loop sees exactly the outcome the fence recorded.
        const e = outcomeOf(sequence, exit, dispatched)
        const p = e.payload as { outcome: ToolResult["outcome"]; output?: unknown; failure?: Failure }
        return {
          call_id: call.id,
          name: call.name,
          outcome: p.outcome,
          output: p.output !== undefined ? p.output : { code: p.failure!.code, message: p.failure!.message },
          is_error: p.outcome !== "ok"
        } satisfies ToolResult
      })
    )
  }

  const dispatch: Host["dispatch"] = (calls) =>
    live(Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      // One sleeper per distinct budget among the round's calls (they share `now`, so calls with the
      // same budget share their deadline_at_ms): a round of parallel calls to one tool starts one.
      const sleepers = new Map<number, Fiber.RuntimeFiber<void>>()
      const budgets = calls.map(budgetOf)
      for (const budget of budgets) {
        if (budget !== undefined && !sleepers.has(budget)) sleepers.set(budget, yield* Effect.fork(Effect.sleep(Duration.millis(budget))))
      }
      return yield* Effect.forEach(calls, (call, i) => {
        const budget = budgets[i]
        return runTool(call, now, budget, budget !== undefined ? sleepers.get(budget) : undefined)
      }, { concurrency: "unbounded" }).pipe(
        Effect.ensuring(sleepers.size > 0 ? Fiber.interruptAll(sleepers.values()) : Effect.void)
      )
    }))

  /**
   * Commits an extension Event with the origin Brain assigns: the activation's, or a tool call's.
   * Reserved kinds are refused; Agentloop- and tool-origin Events share the turn's byte budget.
   */
  const emitAs = (origin: { readonly kind: "agentloop" | "tool"; readonly sequence: number }, kind: string, payload: unknown) =>
    Effect.gen(function*() {
      if (typeof kind !== "string" || kind.length === 0 || ReservedKinds.has(kind)) {
        return yield* refuse(failure("reserved_kind", `the Event kind ${JSON.stringify(kind)} is reserved or invalid`))
      }
      const size = Buffer.byteLength(JSON.stringify(kind) + (JSON.stringify(payload) ?? ""), "utf8")
      if (config.maxEmittedBytes > 0 && scope.emittedBytes + size > config.maxEmittedBytes) {
        return yield* refuse(
          failure("emitted_bytes_limit", `this turn would pass BRAIN_MAX_EMITTED_BYTES (${config.maxEmittedBytes})`)
        )
      }
      scope.emittedBytes += size
      const [seq] = yield* write(commit(journal, cell, [entry(EXTENSION_KIND, { kind, payload: payload ?? {}, origin })]))
      return seq!
    })

  const emit: Host["emit"] = (kind, payload) => live(emitAs({ kind: "agentloop", sequence: scope.activation }, kind, payload))

  const setTranscript: Host["setTranscript"] = (messages: ReadonlyArray<Message>) =>
    live(write(Effect.suspend(() => {
      const delta = transcriptChange(cell.state.transcript, messages)
      if (delta === undefined) return Effect.void
      return Effect.asVoid(commit(journal, cell, [entry("transcript_delta", delta)]))
    })))

  /** Validated now; committed by the turn with the activation's closing records (Turn.ts). */
  const setTranscriptAtEnd: Host["setTranscriptAtEnd"] = (messages: ReadonlyArray<Message>) =>
    live(write(Effect.sync(() => {
      scope.atEnd = messages
    })))

  return {
    model,
    dispatch,
    emit,
    telemetry: (data) => report(data),
    kvRead: (key) => live(Effect.sync(() => kvRead(cell.state, key))),
    kvPut: (key, value) => live(write(Effect.asVoid(commit(journal, cell, [entry("kv_put", { key, value: value ?? null })])))),
    kvDelete: (key) => live(write(Effect.asVoid(commit(journal, cell, [entry("kv_delete", { key })])))),
    setTranscript,
    setTranscriptAtEnd,
    events: ({ after, limit }) =>
      live(
        readEvents(journal, cell.session, cell.state, Math.max(0, after), Math.max(1, Math.min(limit, PAGE_EVENTS)), undefined, cell.opening).pipe(
          Effect.map((page) => page.events),
          Effect.mapError((e) => new HostCallFailed({ failure: failure(e._tag === "JournalCorrupt" ? "journal_corrupt" : "not_found", e.message) }))
        )
      )
  }
}
