/**
 * The host services of one activation. Every write is durable before it returns; every effect
 * goes through the EffectFence; after a cancel, every host call fails with the cancel's code.
 * The tool calls (`dispatch`) are ToolCalls.ts.
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
import { OpenCalls } from "./OpenCalls.js"
import { Cause, Clock, Effect, Exit, Option } from "effect"
import { boundedFailure, failure, Failure } from "../../domain/Failure.js"
import type { Message, TranscriptDelta } from "../../domain/Messages.js"
import type { ModelDelta, ModelResult } from "../../domain/Model.js"
import type { SessionId } from "../../domain/Ids.js"
import { modelCallContext } from "../../domain/ModelContext.js"
import { kvRead } from "../../domain/Projection.js"
import { transcriptChange } from "../../domain/TranscriptDelta.js"
import { emitRefusal, entry, type Entry, EXTENSION_KIND, writtenEntry } from "../../domain/Records.js"
import { HostCallFailed, type Host } from "../../services/Agentloop.js"
import type { EffectFenceShape, FenceError, FenceHooks } from "../../services/EffectFence.js"
import type { JournalShape } from "../../services/Journal.js"
import type { ModelFailed, ModelsShape } from "../../services/Models.js"
import type { ServerConfigShape } from "../../services/ServerConfig.js"
import type { TelemetryShape } from "../../services/Telemetry.js"
import type { EnvironmentsShape } from "../../services/Environments.js"
import type { ToolsShape } from "../../services/Tools.js"
import { breakBy, type CancelReason, type CancelSignal, type Cell, cellFolds, commit, exitOrCancel, flushOpening, landRiding, stageRiding, stageRidingNow } from "./Cell.js"
import { interruptWithin } from "./Abandon.js"
import { cancelFailure, refuse, storageFailure } from "./HostFailures.js"
import { makeDispatch } from "./ToolCalls.js"
import { readEvents } from "./Events.js"
import type { Writes } from "./Writes.js"
import { roomRefusal, type TranscriptRoom } from "./TranscriptRoom.js"
import { counted, countWrite, kvRefusal, recordBytes, type Weighed, weigh, writeRefusal } from "./TurnWrites.js"
import { MAX_EVENT_KIND_CHARS, MAX_PAYLOAD_BYTES, PAGE_EVENTS } from "../../domain/Limits.js"

export interface HostDeps {
  readonly journal: JournalShape
  readonly fence: EffectFenceShape
  readonly models: ModelsShape
  readonly tools: ToolsShape
  readonly config: ServerConfigShape
  /** Where live-only deltas go (the session's SSE subscribers): never journaled. */
  readonly live?: LiveDeltas
  /** Where the loop's telemetry goes (BRAIN_TELEMETRY): never journaled; undefined, it is dropped. */
  readonly telemetry: TelemetryShape | undefined
  /** The `http` and `host` Environments' drivers; undefined, a tool placed in one ends in `error` (nothing sent). */
  readonly environments: EnvironmentsShape | undefined
  /**
   * The clock of the fiber that built the sessions (the test clock in a test), read directly: a
   * turn reads the time several times, and through the fiber's services each read is instructions.
   */
  readonly clock: Clock.Clock
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
  readonly writes: Writes
  modelCalls: number
  /** Bytes of the turn's Events, each weighed by its journal record, against BRAIN_MAX_EMITTED_BYTES. */
  emittedBytes: number
  /**
   * Bytes the turn's host calls have written to the journal, against BRAIN_MAX_TURN_WRITE_BYTES
   * (TurnWrites.ts); absent until the first write.
   */
  writtenBytes?: number | undefined
  /**
   * The bytes of the session's journal when the turn was admitted, against
   * BRAIN_MAX_SESSION_JOURNAL_BYTES with `writtenBytes` (TurnWrites.ts); undefined when that is off.
   */
  readonly journalBytes: number | undefined
  /**
   * Appends that missed the cleanup deadline and are still on their way to the journal: each
   * waits until its append has landed or failed. The turn holds the session until they settle.
   */
  readonly unsettled: Array<Effect.Effect<void>>
  /**
   * Whether a cancel of the turn cut short an effect that was already sent, so that its outcome
   * was recorded ambiguous (a model call abandoned, a tool call stopped or lost): the turn's own
   * failure is then ambiguous too.
   */
  cutShort: boolean
  /** The tool calls under way, and those the turn's cancel could not stop (OpenCalls.ts). */
  readonly calls: OpenCalls
  /**
   * The transcript the loop saved with its end (`setTranscriptAtEnd`), as the record of its
   * difference from the saved one, made and weighed once (null: no difference): the turn's closing
   * append carries it. Once set, every host call is refused, so the saved transcript it was made
   * against is still the saved one when the turn closes.
   */
  atEnd?: Entry<"transcript_delta"> | null | undefined
  /**
   * The room the loop's next input leaves for the transcript (TranscriptRoom.ts): a save past it
   * is refused `payload_too_large`, nothing of it journaled. Undefined: nothing bounds it.
   */
  readonly room?: TranscriptRoom | undefined
}

/** A host call after setTranscriptAtEnd: the loop said it was ending. */
const afterEnd = failure("invalid_request", "a host call after setTranscriptAtEnd: the activation must end right after it")

/** A host call after the cell broke: it did nothing, so it is not ambiguous. */
const brokenFailure = failure(
  "journal_write_failed",
  "an earlier write of this session failed or was not durable in time; nothing more is written until the session recovers on its next access"
)

/** A provider's failure as recorded in `model_call_failed` and shown to the loop. */
const modelFailure = (err: ModelFailed) =>
  // A provider's text (its message, its error body as details): bounded before it is recorded.
  boundedFailure(failure(err.code, err.message, { ambiguous: err.ambiguous, retryable: err.retryable, details: err.details }))

export const makeHost = (deps: HostDeps, scope: ActivationScope): Host => {
  const { cell } = scope
  const { config, journal } = deps

  /** What every host call now fails with: the turn's cancel, a broken cell (nothing more is written through it), the loop's end. */
  const refusal = (): Failure | undefined =>
    scope.signal.reason !== undefined
      ? cancelFailure(scope.signal.reason)
      : cell.broken
      ? brokenFailure
      : scope.atEnd !== undefined
      ? afterEnd
      : undefined

  /** Fails at once with `refusal`'s failure when there is one. */
  const live = <A>(body: Effect.Effect<A, HostCallFailed>): Effect.Effect<A, HostCallFailed> =>
    Effect.suspend(() => {
      const refused = refusal()
      return refused !== undefined ? refuse(refused) : body
    })

  /**
   * Telemetry, the loop's or a tool's (`toolCall`: its started sequence). Fire and forget, after a
   * cancel too: the sink never blocks and never fails the call; never journaled.
   */
  const report = (data: unknown, toolCall?: number): Effect.Effect<void> => {
    const sink = deps.telemetry
    if (sink === undefined) return Effect.void
    // A report names the activation's sequence outside the journal: a staged turn opening is
    // written first, so that the sequence is the activation's for good (a crash cannot reuse it).
    const now = Effect.sync(() => deps.clock.unsafeCurrentTimeMillis())
    const named = cell.opening === undefined ? now : Effect.zipRight(flushOpening(deps.journal, cell), now)
    return Effect.flatMap(named, (at_ms) =>
      sink.record({
        session_id: cell.session,
        activation: scope.activation,
        ...(toolCall === undefined ? {} : { tool_call: toolCall }),
        at_ms,
        data: data ?? null
      }))
  }

  const write = <A>(body: Effect.Effect<A, FenceError>) =>
    scope.writes.run(Effect.mapError(body, storageFailure))

  /** A save of `to` (keeping the saved transcript's first `keep` messages) the loop's next input could not carry: its refusal. */
  const tooLarge = (to: ReadonlyArray<Message>, keep: number) =>
    scope.room === undefined ? undefined : roomRefusal(scope.room, cell.state.transcript, cell.state.unanswered, to, keep)

  /**
   * A save of `to` as its record (`delta`, from the saved transcript), weighed; or why it is
   * refused: the loop's next input could not carry the transcript, or the turn's writes would pass
   * BRAIN_MAX_TURN_WRITE_BYTES. Not yet counted: the caller counts it once it is written or staged.
   */
  const saveOf = (to: ReadonlyArray<Message>, delta: TranscriptDelta): Weighed<"transcript_delta"> | Failure => {
    const refused = tooLarge(to, delta.keep)
    if (refused !== undefined) return refused
    const record = weigh("transcript_delta", delta)
    return writeRefusal(config, scope, record.bytes) ?? record
  }

  /** Commits `record` as one of the turn's writes, counted; refused, nothing written, past BRAIN_MAX_TURN_WRITE_BYTES. */
  const commitCounted = (record: Weighed): Effect.Effect<ReadonlyArray<number>, HostCallFailed> => {
    const refused = writeRefusal(config, scope, record.bytes)
    if (refused !== undefined) return refuse(refused)
    countWrite(scope, record.bytes)
    return write(commit(journal, cell, [record.entry]))
  }

  /**
   * A kv put: refused, nothing written and the state unchanged, when it would grow the session's kv
   * past BRAIN_MAX_SESSION_KV_BYTES (`kv_limit`) or the turn's writes past
   * BRAIN_MAX_TURN_WRITE_BYTES. Checked in the turn's write lock, against the state every earlier
   * write of the turn has folded into, so that puts made at once cannot pass the bound together.
   */
  const kvPut: Host["kvPut"] = (key, value) =>
    live(scope.writes.run(Effect.suspend(() => {
      const put = { key, value: value ?? null }
      const record = weigh("kv_put", put)
      // A value JSON cannot write weighs nothing, and the journal refuses it whole.
      const refused = (record.bytes > 0 ? kvRefusal(config, cell.state, key, put.value) : undefined) ?? writeRefusal(config, scope, record.bytes)
      if (refused !== undefined) return refuse(refused)
      countWrite(scope, record.bytes)
      return Effect.asVoid(Effect.mapError(commit(journal, cell, [record.entry]), storageFailure))
    })))

  const hooks: FenceHooks = {
    ...cellFolds(cell),
    unrecorded: (settled) => {
      cell.broken = true
      scope.unsettled.push(settled)
    }
  }

  /**
   * Runs `call` until it ends or the turn is cancelled, whichever is first; a cancel interrupts it
   * and answers `cancelled`; so does an interrupt of the caller. The call (a model layer the
   * application may supply) is waited for the grace at most once interrupted, then abandoned: it
   * runs in a daemon fiber, so nothing waits for it (Abandon.ts). One forked fiber and a callback
   * on the turn's signal, where a race forked two.
   */
  const callOrCancel = <A, E>(call: Effect.Effect<A, E>, cancelled: (reason: CancelReason) => A): Effect.Effect<A, E> =>
    Effect.flatMap(Effect.forkDaemon(call), (fiber) =>
      Effect.flatMap(
        exitOrCancel(fiber, scope.signal, undefined, Effect.suspend(() => interruptWithin(fiber, deps.config.cancelGraceMs))),
        (first) =>
          first._tag === "done"
            ? first.exit
            : Effect.as(interruptWithin(fiber, deps.config.cancelGraceMs), cancelled(first._tag === "cancel" ? first.reason : "cancelled"))
      ))

  /**
   * Runs `call` with the transcript `save` riding on it (docs/abi.md, "A save that rides on a
   * call"): the save's difference from the saved transcript is staged (Cell.riding) so that the
   * call's first append writes it ahead of its own records, durable together or not at all; a call
   * that answers without appending anything writes it on its own first. Either way the save is
   * durable before the answer, as a `setTranscript` before the call would have made it.
   */
  const riding = <A>(save: ReadonlyArray<Message> | undefined, call: Effect.Effect<A, HostCallFailed>): Effect.Effect<A, HostCallFailed> => {
    if (save === undefined) return call
    return Effect.suspend(() => {
      // The usual case in this synchronous step, without a write of its own (about 25 of Effect's
      // instructions fewer, in every text turn): no write in flight, so the delta is computed
      // against the state it follows, and the journal stages it at once.
      if (!scope.writes.inFlight) {
        const delta = transcriptChange(cell.state.transcript, save)
        if (delta === undefined) return call
        const saved = saveOf(save, delta)
        if (saved instanceof Failure) return refuse(saved)
        if (stageRidingNow(journal, cell, saved.entry, save)) {
          countWrite(scope, saved.bytes)
          return afterRiding(call)
        }
      }
      const staged = scope.writes.run(Effect.suspend(() => {
        const delta = transcriptChange(cell.state.transcript, save)
        if (delta === undefined) return Effect.void
        const saved = saveOf(save, delta)
        if (saved instanceof Failure) return refuse(saved)
        countWrite(scope, saved.bytes)
        return Effect.mapError(stageRiding(journal, cell, saved.entry, save), storageFailure)
      }))
      return Effect.flatMap(staged, () => afterRiding(call))
    })
  }

  /** Runs `call` with a riding save staged (or already written), and lands the save if the call did not carry it. */
  const afterRiding = <A>(call: Effect.Effect<A, HostCallFailed>): Effect.Effect<A, HostCallFailed> =>
    Effect.matchCauseEffect(call, {
      onSuccess: (a) => (cell.riding === undefined ? Effect.succeed(a) : landing(Exit.succeed(a))),
      onFailure: (cause) => (cell.riding === undefined ? Effect.failCause(cause) : landing(Exit.failCause(cause)))
    })

  /** After a call that left its riding save staged: lands it, or breaks the cell when its append failed. */
  const landing = <A>(exit: Exit.Exit<A, HostCallFailed>): Effect.Effect<A, HostCallFailed> => {
    // Still staged: no append of the call was made, or the one that was failed (and dropped
    // what was staged with it; the journal refuses from now on). Written on its own in the
    // first case; in the second nothing is, and the cell breaks as after any failed write.
    const failed = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
    if (cell.broken || failed?.failure.code === "journal_write_failed" || failed?.failure.code === "journal_corrupt") {
      cell.riding = undefined
      if (failed === undefined) cell.broken = true
      else breakBy(cell, failed.failure)
      // An answer of ok promises the save was made: not so here.
      return Exit.isSuccess(exit) ? refuse(brokenFailure) : exit
    }
    return Effect.zipRight(write(landRiding(journal, cell)), exit)
  }

  const model: Host["model"] = (request, save) => live(riding(save, Effect.gen(() => modelCallOf(deps, scope, request, callOrCancel, hooks))))

  /**
   * Commits an extension Event with the origin Brain assigns: the activation's, or a tool call's.
   * Reserved kinds, and kinds an SSE frame's `event:` line cannot carry, are refused
   * (Records.ts `emitRefusal`); Agentloop- and tool-origin Events share the turn's byte budget.
   * An Event weighs its journal record (TurnWrites.ts `recordBytes`): its kind, payload and origin
   * as JSON, its record kind and its frame, so that the bound is what the journal takes, however
   * small each Event (a payload of `0` makes a record of about 100 bytes).
   */
  const emitAs = (origin: { readonly kind: "agentloop" | "tool"; readonly sequence: number }, kind: string, payload: unknown) =>
    Effect.gen(function*() {
      const refused = emitRefusal(kind)
      if (refused !== undefined) return yield* refuse(failure("reserved_kind", refused))
      // Bounded here in words, not by the record schema's report of it.
      if (kind.length > MAX_EVENT_KIND_CHARS) return yield* refuse(failure("invalid_request", `an Event kind is 1 to ${MAX_EVENT_KIND_CHARS} characters, not ${kind.length}`))
      const event = { kind, payload: payload ?? {}, origin }
      // A payload JSON cannot write (a cycle, a BigInt, nesting past the engine's stack) is refused
      // here as data, not thrown into a defect; a guest's is already bounded (MAX_JSON_DEPTH).
      const json = jsonOrUndefined(event)
      if (json === undefined) return yield* refuse(failure("invalid_request", "the Event's payload is not serializable as JSON"))
      const bytes = recordBytes(EXTENSION_KIND, json)
      if (config.maxEmittedBytes > 0 && scope.emittedBytes + bytes > config.maxEmittedBytes) {
        return yield* refuse(
          failure("emitted_bytes_limit", `this turn would pass BRAIN_MAX_EMITTED_BYTES (${config.maxEmittedBytes}): its Events' records hold ${scope.emittedBytes} bytes, and this one ${bytes}`)
        )
      }
      const over = writeRefusal(config, scope, bytes)
      if (over !== undefined) return yield* refuse(over)
      scope.emittedBytes += bytes
      countWrite(scope, bytes)
      const [seq] = yield* write(commit(journal, cell, [writtenEntry(EXTENSION_KIND, event, json)]))
      return seq!
    })

  // Made at the activation's first dispatch: a text turn never dispatches, and its closures and
  // maps were made at every turn (docs/benchmarks.md, "One session's keyed turn, stop 65").
  let dispatchCalls: ReturnType<typeof makeDispatch> | undefined
  const dispatch: Host["dispatch"] = (calls, save) =>
    live(riding(save, (dispatchCalls ??= makeDispatch({ deps, scope, hooks, emitAs, report }))(calls)))

  const emit: Host["emit"] = (kind, payload) => live(emitAs({ kind: "agentloop", sequence: scope.activation }, kind, payload))

  const setTranscript: Host["setTranscript"] = (messages: ReadonlyArray<Message>) =>
    live(scope.writes.run(Effect.suspend(() => {
      const delta = transcriptChange(cell.state.transcript, messages)
      if (delta === undefined) return Effect.void
      const saved = saveOf(messages, delta)
      if (saved instanceof Failure) return refuse(saved)
      countWrite(scope, saved.bytes)
      return Effect.asVoid(Effect.mapError(commit(journal, cell, [saved.entry]), storageFailure))
    })))

  /** Validated and counted now; committed by the turn with the activation's closing records (Turn.ts). */
  const setTranscriptAtEnd: Host["setTranscriptAtEnd"] = (messages: ReadonlyArray<Message>) =>
    live(scope.writes.run(Effect.suspend(() => {
      const delta = transcriptChange(cell.state.transcript, messages)
      if (delta === undefined) {
        scope.atEnd = null
        return Effect.void
      }
      const saved = saveOf(messages, delta)
      if (saved instanceof Failure) return refuse(saved)
      countWrite(scope, saved.bytes)
      scope.atEnd = saved.entry
      return Effect.void
    })))

  return {
    model,
    dispatch,
    emit,
    telemetry: (data) => report(data),
    refusal,
    kvRead: (key) => live(Effect.sync(() => kvRead(cell.state, key))),
    kvPut,
    kvDelete: (key) => live(Effect.suspend(() => Effect.asVoid(commitCounted(weigh("kv_delete", { key }))))),
    setTranscript,
    setTranscriptAtEnd,
    events: ({ after, limit }) =>
      live(
        readEvents(journal, cell.session, cell.state, Math.max(0, after), Math.max(1, Math.min(limit, PAGE_EVENTS)), undefined, cell.opening).pipe(
          Effect.map((page) => page.events),
          Effect.mapError((e) =>
            new HostCallFailed({
              failure: e._tag === "JournalCorrupt"
                ? failure("journal_corrupt", e.message, { details: e.details })
                : e._tag === "JournalUnavailable"
                ? failure("overloaded", e.message, { retryable: true })
                : failure("not_found", e.message)
            })
          )
        )
      )
  }
}

/** `JSON.stringify(value)` (`""` for a value it leaves out), or undefined when it throws. */
const jsonOrUndefined = (value: unknown): string | undefined => {
  try {
    return JSON.stringify(value) ?? ""
  } catch {
    return undefined
  }
}

/** What `callOrCancel` is (makeHost's): `call` until it ends or the turn is cancelled. */
type CallOrCancel = <A, E>(call: Effect.Effect<A, E>, cancelled: (reason: CancelReason) => A) => Effect.Effect<A, E>

/**
 * A model call through the fence: a module function, made once, not a generator made per call
 * (docs/benchmarks.md, "Generator bodies made once").
 */
function* modelCallOf(deps: HostDeps, scope: ActivationScope, request: Parameters<Host["model"]>[0], callOrCancel: CallOrCancel, hooks: FenceHooks) {
  const { cell } = scope
  const { config, fence } = deps
  if (config.maxModelCalls > 0 && scope.modelCalls >= config.maxModelCalls) {
    return yield* refuse(failure("model_call_limit", `this turn reached BRAIN_MAX_MODEL_CALLS (${config.maxModelCalls})`))
  }
  const configuration = cell.state.configuration!
  const system = request.system ?? configuration.system
  const index = cell.state.modelCalls
  const started = weigh("model_call_started", {
    ...modelCallContext(
      // Against the transcript as a save riding on this call leaves it: that save's record comes first.
      cell.riding === undefined
        ? cell.state
        : { transcript: cell.riding.transcript, transcriptThrough: cell.riding.sequence, configuration: cell.state.configuration },
      request.messages,
      request.system
    ),
    ...(request.options !== undefined ? { options: request.options } : {})
  })
  // Refused before anything is journaled for it, as past BRAIN_MAX_MODEL_CALLS.
  const over = writeRefusal(config, scope, started.bytes)
  if (over !== undefined) return yield* refuse(over)
  scope.modelCalls++
  countWrite(scope, started.bytes)
  let unrecordable: Failure | undefined
  type Race =
    | { readonly _tag: "result"; readonly result: ModelResult }
    | { readonly _tag: "cancelled"; readonly reason: CancelReason; readonly sent: boolean }
  const fenced = yield* fence.fence(
    cell.session,
    started.entry,
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
    // The outcome is always recorded, and counted against the turn's writes (TurnWrites.ts).
    (sequence, exit, dispatched) => {
      if (Exit.isSuccess(exit)) {
        if (exit.value._tag === "result") {
          const ended = modelEnded(sequence, exit.value.result)
          if (ended.kind === "model_call_failed") unrecordable = ended.payload.failure
          return counted(scope, ended)
        }
        // Cancelled once sent: the provider may have run it.
        if (exit.value.sent) scope.cutShort = true
        return counted(scope, entry("model_call_failed", { sequence, failure: cancelFailure(exit.value.reason, exit.value.sent) }))
      }
      const err = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
      // Abandoned (the activation interrupted): cut short if it was sent.
      if (!err && dispatched) scope.cutShort = true
      return counted(scope, entry("model_call_failed", {
        sequence,
        failure: err
          ? modelFailure(err)
          : failure("cancelled", "the model call was abandoned", { ambiguous: dispatched })
      }))
    },
    hooks
  ).pipe(Effect.mapError(storageFailure))
  const exit = fenced.exit
  // An answer its record could not take: the loop is told what the record says instead.
  if (unrecordable !== undefined) return yield* refuse(unrecordable)
  if (Exit.isSuccess(exit)) {
    if (exit.value._tag === "result") return exit.value.result
    // The loop is told what the record says: ambiguous if the call had been sent.
    return yield* refuse(cancelFailure(exit.value.reason, exit.value.sent))
  }
  const err = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  return yield* refuse(
    err
      ? modelFailure(err)
      : failure("cancelled", "the model call was abandoned", { ambiguous: true })
  )
}

/**
 * The record of a model call's answer, its JSON written once here for the journal. An answer
 * within BRAIN_MAX_MODEL_OUTPUT_BYTES can still pass what one record takes (JSON writes a control
 * character as 6 bytes): its call is closed `model_output_limit` instead, ambiguous (the provider
 * ran it), so that the call's start always has its outcome.
 */
const modelEnded = (sequence: number, result: ModelResult) => {
  const payload = { sequence, result }
  const json = JSON.stringify(payload)
  // One comparison for an ordinary answer (a UTF-16 unit is at most 3 bytes of UTF-8).
  if (json.length * 3 > MAX_PAYLOAD_BYTES) {
    const bytes = Buffer.byteLength(json, "utf8")
    if (bytes > MAX_PAYLOAD_BYTES) {
      return entry("model_call_failed", {
        sequence,
        failure: failure("model_output_limit", `the model's answer is ${bytes} bytes as JSON, above the ${MAX_PAYLOAD_BYTES} one journal record takes`, { ambiguous: true })
      })
    }
  }
  return writtenEntry("model_call_ended", payload, json)
}
