/**
 * Runs one turn in the session's own fiber: the activation of the Agentloop with its host, the
 * wall deadline, cancellation with a bounded grace, and the closing records. The closing records
 * are committed even when the turn fiber itself is interrupted (a server stop).
 *
 * An append that missed BRAIN_CLEANUP_DEADLINE_MS (an effect's outcome, or the turn's own
 * closing records) breaks the cell and is still on its way to the journal. The turn answers its
 * caller at once (`journal_write_failed`, ambiguous), but keeps holding the session until every
 * such append has landed or failed. Meanwhile every access is refused (`journal_write_failed`,
 * the broken cell). Only then is the cell released, and the next access reopens the session
 * from what is really stored and records the recovery. Why wait: recovery is computed from the
 * journal as read when the session reopens. Read before a late record lands, it would close an
 * effect twice (its real outcome, then recovery's ambiguous failure), or a journal wrapper could
 * even let the late record land after recovery's. The wait has no deadline of its own, and that
 * is deliberate: nobody waits on it but the session (the loop and the caller have their
 * answers), the journal always answers an append (a round of writes and syncs is never
 * abandoned), and any write for the session, recovery's included, would wait behind the same
 * stalled disk anyway. A server stop interrupts the wait; the restart recovers from the files.
 */
import { Cause, Duration, Effect, Exit, Fiber, Option } from "effect"
import { boundedFailure, failure, type Failure } from "../../domain/Failure.js"
import type { TurnInput } from "../../domain/Messages.js"
import { stringifyOnce } from "../../domain/JsonText.js"
import { entry } from "../../domain/Records.js"
import type { AgentloopShape } from "../../services/Agentloop.js"
import type { TurnOutcome } from "../../services/Sessions.js"
import { interruptWithin } from "./Abandon.js"
import { cancelTurn, type Cell, commitQueueable, exitOrCancel, type RunningTurn } from "./Cell.js"
import { noEventsAfter } from "../../domain/Projection.js"
import { readEvents } from "./Events.js"
import { type ActivationScope, type HostDeps, makeHost } from "./Host.js"
import { transcriptRoom } from "./TranscriptRoom.js"
import { cancelFailure } from "./HostFailures.js"
import { PAGE_EVENTS } from "../../domain/Limits.js"
import { appendWithin } from "../EffectFenceJournal.js"
import { type TurnClose, turnOutcome } from "./Requests.js"
import { Writes } from "./Writes.js"
import { namedCalls, OpenCalls } from "./OpenCalls.js"
import { committedResults } from "./CommittedResults.js"

export interface TurnStart {
  readonly cell: Cell
  readonly turn: RunningTurn
  readonly activation: number
  readonly input: TurnInput
  readonly loop: AgentloopShape
  /** The activation sees the public Events after this sequence. */
  readonly eventsAfter: number
  /** The bytes of the session's journal when the turn was admitted; undefined, BRAIN_MAX_SESSION_JOURNAL_BYTES is off. */
  readonly journalBytes: number | undefined
}

const failureOf = (cause: Cause.Cause<unknown>): Failure => {
  const err = Cause.failureOption(cause)
  if (Option.isSome(err)) {
    const e = err.value as { _tag?: string; failure?: Failure }
    if ((e._tag === "AgentloopFailed" || e._tag === "HostCallFailed") && e.failure) return e.failure
    return failure("agentloop_failed", String(err.value))
  }
  return failure("agentloop_failed", `the agentloop crashed: ${Cause.pretty(cause).split("\n")[0]}`)
}

const stringSeed = (s: string) => {
  let h = 2166136261
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619)
  return h >>> 0
}

// The turn's generator bodies are module functions, made once: an `Effect.gen(function* () {…})`
// written inside a function makes a new generator function at every call, and V8 gives each a
// prototype and a hidden class of its own the first time it runs (docs/benchmarks.md,
// "Generator bodies made once").

/**
 * The activation: the loop given its input (the Events after `start.eventsAfter` among it, of the
 * kinds it reads when it names them) and its host.
 */
function* activationOf(deps: HostDeps, start: TurnStart, host: ReturnType<typeof makeHost>, now: number) {
  const { cell, turn, activation } = start
  const { journal } = deps
  const kinds = start.loop.eventKinds
  // None of the kinds the loop reads came after its cursor (the official loop's `turn_failed`, in
  // nearly every turn): what the read would give it, without the read.
  const events = kinds !== undefined && noEventsAfter(cell.state, kinds, start.eventsAfter)
    ? []
    : yield* readEvents(journal, cell.session, cell.state, start.eventsAfter, PAGE_EVENTS, undefined, cell.opening).pipe(
      Effect.map((p) => (kinds === undefined ? p.events : p.events.filter((e) => kinds.has(e.kind)))),
      Effect.orElseSucceed(() => [])
    )
  // Only after a round was cut short; a read that fails leaves the loop its placeholders.
  const results = cell.state.unanswered.length === 0
    ? undefined
    : yield* committedResults(journal, cell.session, cell.state).pipe(Effect.orElseSucceed(() => undefined))
  return yield* start.loop.activate(
    {
      input: start.input,
      transcript: cell.state.transcript,
      unanswered: cell.state.unanswered,
      ...(results !== undefined && results.length > 0 ? { tool_results: results } : {}),
      configuration: cell.state.configuration!,
      events,
      runtime: {
        session_id: cell.session,
        turn: turn.sequence,
        activation,
        now_ms: now,
        seed: stringSeed(`${cell.session}:${activation}`)
      }
    },
    host
  )
}

/** Waits for the activation's fiber; after the turn's cancel, stops it (`stopping`). */
function* waitForActivation<A, E>(fiber: Fiber.RuntimeFiber<A, E>, signal: RunningTurn["signal"], cancelGraceMs: number) {
  // The wall deadline arrives as a cancel with reason "timeout" (the registry's deadline fiber).
  const first = yield* exitOrCancel(fiber, signal)
  if (first._tag === "done") return first.exit
  return yield* Effect.gen(() => stopping(fiber, cancelGraceMs))
}

/**
 * A cancelled activation's end: two graces for it to return (one for executors to confirm they
 * stopped, one for the loop to see the error and return), then it is interrupted and given one
 * more. Its exit, or undefined when it had not ended by then (abandoned). Interruptible waits, so
 * that their deadlines hold in an uninterruptible region too.
 */
function* stopping<A, E>(fiber: Fiber.RuntimeFiber<A, E>, cancelGraceMs: number) {
  const settled = yield* Effect.interruptible(Fiber.await(fiber)).pipe(Effect.timeoutOption(Duration.millis(2 * cancelGraceMs)))
  if (Option.isSome(settled)) return settled.value
  return (yield* interruptWithin(fiber, cancelGraceMs)) ? yield* Fiber.await(fiber) : undefined
}

/**
 * The turn's failure when its loop was abandoned: it did not end within the grace once interrupted
 * (an application's loop in an uninterruptible region). It runs on, and every host call it makes
 * is refused with the cancel's failure, so nothing more of it is recorded. When it was waiting on
 * tool calls then (`waitedOn`), those are what did not end, not the loop: the message says so.
 */
const abandonedLoop = (f: Failure, waitedOn: ReadonlyArray<string>): Failure =>
  failure(
    f.code,
    waitedOn.length > 0
      ? `${f.message}; ${namedCalls(waitedOn)} had not ended within BRAIN_CANCEL_GRACE_MS of the activation's interruption, so the activation waiting on ${waitedOn.length === 1 ? "it" : "them"} was abandoned, its host calls refused`
      : `${f.message}; the agentloop did not end within BRAIN_CANCEL_GRACE_MS of its interruption and was abandoned, its host calls refused`,
    { ambiguous: f.ambiguous, retryable: f.retryable }
  )

/** The cancel's failure, naming the tool calls whose executors did not confirm they stopped (recorded `unknown`). */
const withUnconfirmed = (f: Failure, tools: ReadonlyArray<string>): Failure =>
  tools.length === 0 ? f : failure(
    f.code,
    `${f.message}; ${namedCalls(tools)} did not stop within BRAIN_CANCEL_GRACE_MS of ${tools.length === 1 ? "its" : "their"} cancel and ${tools.length === 1 ? "was" : "were"} abandoned, recorded unknown`,
    { ambiguous: f.ambiguous, retryable: f.retryable }
  )

function* turnOf(deps: HostDeps, start: TurnStart, restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>) {
  const { cell, turn, activation } = start
  const { config, journal } = deps
  const scope: ActivationScope = {
    cell,
    activation,
    signal: turn.signal,
    writes: new Writes(),
    modelCalls: 0,
    emittedBytes: 0,
    journalBytes: start.journalBytes,
    unsettled: [],
    cutShort: false,
    calls: new OpenCalls(),
    room: transcriptRoom(config, start.loop.input, () => stringifyOnce(cell.state.configuration))
  }
  const host = makeHost(deps, scope)
  const now = deps.clock.unsafeCurrentTimeMillis()

  const activate = Effect.gen(() => activationOf(deps, start, host, now))

  // The activation runs in a fiber of its own, forked here where nothing can interrupt, as a
  // daemon: nothing that ends (this fiber, the runtime's scope) waits for it unbounded, since an
  // application's loop may not yield to interruption (Abandon.ts). A cancel stops it (`stopping`).
  // If the wait for it is interrupted (a runtime closing past the stop's wait, which cancelled
  // the turn long before), it is interrupted at once; a turn not yet cancelled is cancelled as a
  // stop cancels it, and stopped. Either way it has a grace to end once interrupted, so that its
  // in-flight fences commit their outcomes first; one that has not ended by then is abandoned: it
  // runs on, its host calls refused (the turn's cancel), and the turn closes without it. A host
  // call it had in flight was cut short at the cancel, three graces before, and has appended its
  // outcome (a model call gives its provider a grace, a tool its executor two): that append is
  // ahead of the turn's close, and the journal keeps a session's appends in order.
  const fiber = yield* Effect.forkDaemon(Effect.interruptible(activate))
  const waited = yield* Effect.exit(restore(Effect.gen(() => waitForActivation(fiber, turn.signal, config.cancelGraceMs))))
  let activated = Exit.isSuccess(waited) ? waited.value : undefined
  if (Exit.isFailure(waited)) {
    if (yield* cancelTurn(turn, "interrupted")) activated = yield* Effect.gen(() => stopping(fiber, config.cancelGraceMs))
    else if (yield* interruptWithin(fiber, config.cancelGraceMs)) activated = yield* Fiber.await(fiber)
  }
  const reason = turn.signal.reason
  let closing: Failure | undefined
  let result: unknown = undefined
  // A cancelled turn's failure is ambiguous when the cancel cut short an effect already sent.
  if (reason !== undefined) closing = cancelFailure(reason, scope.cutShort)
  else if (activated === undefined) closing = cancelFailure("interrupted", scope.cutShort) // abandoned: only after a cancel
  else if (Exit.isFailure(activated)) {
    // The loop's own failure (its message, its details) is its text: bounded before it is recorded.
    closing = Exit.isInterrupted(activated) ? cancelFailure("interrupted", scope.cutShort) : boundedFailure(failureOf(activated.cause))
  } else result = activated.value ?? null
  if (activated === undefined) {
    // Abandoned while tool calls were under way: their outcomes are recorded before the close
    // (each call's stop is bounded, its outcome's append by the cleanup deadline), so no closed
    // turn is followed by an effect of its own.
    const waitedOn = scope.calls.tools
    if (waitedOn.length > 0) yield* scope.calls.settled(config.cancelGraceMs + config.cleanupDeadlineMs)
    closing = abandonedLoop(closing!, waitedOn)
  } else if (closing !== undefined && reason !== undefined) closing = withUnconfirmed(closing, scope.calls.unconfirmed)
  // No write of the loop runs after this (an abandoned loop's, queued behind a stalled one): refused (Writes.ts).
  scope.writes.close(host.refusal())

  // A keyed send's answer is this append: `request_answered` marks it (recovery's close has none).
  const answered = turn.answers === undefined
    ? []
    : [entry("request_answered", { key: turn.answers, at_ms: deps.clock.unsafeCurrentTimeMillis() })]
  const closingEntries = (f: Failure | undefined) =>
    f
      ? [
        entry("activation_failed", { sequence: activation, failure: f }),
        entry("turn_failed", { sequence: turn.sequence, failure: f }),
        ...answered
      ]
      : [
        entry("activation_ended", { sequence: activation, result }),
        entry("turn_ended", { sequence: turn.sequence, result }),
        ...answered
      ]
  // The transcript the loop saved with its end (setTranscriptAtEnd) shares the closing append:
  // one commit, durable together with the close or not at all.
  const atEnd = scope.atEnd ?? undefined
  let saving = atEnd !== undefined
  const entriesOf = () => (saving ? [atEnd!, ...closingEntries(closing)] : closingEntries(closing))
  const lateOutcomes = scope.unsettled.length
  // The outcome of a recorded close, made while its append is in flight once the journal has
  // given its sequences (Cell.ts `commitQueueable`), and used only if the append is durable with
  // the same last sequence: what `turnOutcome` makes of it then.
  let made: { readonly last: number; readonly outcome: TurnOutcome } | undefined
  const closeAhead = () => {
    const close: TurnClose = closing ? { kind: "turn_failed", failure: closing } : { kind: "turn_ended", result }
    made = undefined
    return commitQueueable(journal, cell, entriesOf(), (sequences) => {
      const last = sequences[sequences.length - 1]!
      made = { last, outcome: turnOutcome(cell.session, turn.sequence, last, close) }
    })
  }
  let closed = yield* appendWithin(closeAhead(), config.cleanupDeadlineMs)
  // A closing append the journal refused wrote nothing (RecordRejected: a record it cannot take,
  // such as one above its frame maximum). The turn must still close, healthy: without the saved
  // transcript when that was the record refused (as a refused set_transcript would fail it), else
  // as agentloop_failed naming the limit instead of the loop's result or failure. At most twice.
  for (let tries = 0; tries < 2 && closed._tag === "Answered" && Exit.isFailure(closed.exit); tries++) {
    const refused = Cause.failureOption(closed.exit.cause)
    if (Option.isNone(refused) || refused.value._tag !== "RecordRejected") break
    yield* Effect.logWarning(`the journal refused the turn's closing records (${refused.value.reason}); the turn closes without them`).pipe(
      Effect.annotateLogs({ session_id: cell.session })
    )
    if (saving && refused.value.kind === "transcript_delta") {
      saving = false
      closing = failure("invalid_request", `the transcript could not be saved: ${refused.value.reason}`)
    } else {
      closing = failure("agentloop_failed", `the turn's ${closing === undefined ? "result" : `failure (${closing.code})`} could not be recorded: ${refused.value.reason}`)
    }
    result = undefined
    closed = yield* appendWithin(closeAhead(), config.cleanupDeadlineMs)
  }
  if (closed._tag === "Unsettled") {
    // Its state now lacks records that may still land: the cell commits nothing more.
    cell.broken = true
    scope.unsettled.push(closed.settled)
  } else if (Exit.isFailure(closed.exit)) {
    // Unrecorded, the turn is closed in memory only (and its opening may be staged, never
    // written): nothing of the cell is trusted, and the next access reopens and recovers.
    cell.broken = true
  }
  const notRecorded = closed._tag === "Unsettled"
    ? `no answer from the journal within ${config.cleanupDeadlineMs} ms`
    : lateOutcomes > 0
    ? `the outcome of an effect was not durable within ${config.cleanupDeadlineMs} ms, so nothing more is written until the session recovers`
    : Exit.match(closed.exit, {
      onSuccess: () => "",
      onFailure: (cause) => Option.match(Cause.failureOption(cause), { onNone: () => Cause.pretty(cause), onSome: (e) => e.message })
    })
  const recorded = closed._tag === "Answered" && Exit.isSuccess(closed.exit) ? closed.exit.value : undefined
  /** The journal's durable end, when the turn's close was not recorded and the journal can say. */
  const durable = recorded ? undefined : yield* Effect.orElseSucceed(journal.lastSequence(cell.session), () => undefined)
  // A staged opening the journal never acknowledged (the turn's first write failed, and every
  // write after it): nothing was sent, since an effect is dispatched only once its start, which
  // carries the opening, is durable (the fence), so the failure is not ambiguous. Its sequence is
  // not named: the next turn takes it, since a write reported failed leaves nothing standing (the
  // store takes back what landed of it, docs/journal.md "A failed write"). When the store could
  // not, the durable end is unknown (`lastSequence` fails until the session is reopened), so this
  // is not the case and the failure stays ambiguous. An append still in flight may land yet: not
  // this case either.
  const neverStarted = !recorded && closed._tag === "Answered" && scope.unsettled.length === 0 &&
    cell.opening !== undefined && durable !== undefined && durable < turn.sequence
  const outcome: TurnOutcome = recorded
    ? made !== undefined && made.last === recorded[recorded.length - 1]
      ? made.outcome
      : turnOutcome(
      cell.session,
      turn.sequence,
        recorded[recorded.length - 1]!,
        closing ? { kind: "turn_failed", failure: closing } : { kind: "turn_ended", result }
      )
    : {
      session_id: cell.session,
      // Unrecorded, the turn is closed in memory all the same: the session's next access records
      // it failed (recovery), leaving the session idle, never running for ever.
      status: "idle",
      last_sequence: durable !== undefined ? Math.min(durable, cell.state.lastSequence) : cell.state.lastSequence,
      turn: neverStarted
        ? {
          // 0 names no record: the turn's start was never acknowledged durable.
          sequence: 0,
          status: "failed",
          failure: failure("journal_write_failed", `the turn could not be started: ${cell.brokenBy ?? notRecorded}; nothing of it was sent`, { ambiguous: false })
        }
        : {
          sequence: turn.sequence,
          status: "failed",
          failure: failure("journal_write_failed", `the turn's end could not be recorded: ${notRecorded}`, { ambiguous: true })
        }
    }
  if (scope.unsettled.length > 0) {
    // The caller has its answer now; the session stays refused until the late appends settle.
    turn.done.give(outcome)
    yield* Effect.logWarning(
      `${scope.unsettled.length} append(s) missed BRAIN_CLEANUP_DEADLINE_MS (${config.cleanupDeadlineMs} ms); the session is refused until the journal answers them`
    ).pipe(Effect.annotateLogs({ session_id: cell.session }))
    yield* Effect.interruptible(Effect.all(scope.unsettled, { discard: true }))
    yield* Effect.logInfo("the late appends settled; the session recovers on its next access").pipe(
      Effect.annotateLogs({ session_id: cell.session })
    )
  }
  return outcome
}

export const runTurn = (deps: HostDeps, start: TurnStart): Effect.Effect<TurnOutcome> =>
  Effect.uninterruptibleMask((restore) => Effect.gen(() => turnOf(deps, start, restore)))
