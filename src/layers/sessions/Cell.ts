/**
 * A session actor's in-memory cell: the folded state kept current by every commit the actor
 * makes, and the turn in flight.
 */
import { Cause, Effect, Exit, Fiber, Option } from "effect"
import type { SessionId } from "../../domain/Ids.js"
import type { Message } from "../../domain/Messages.js"
import { foldMany, type SessionState } from "../../domain/Projection.js"
import type { Entry, JournalRecord } from "../../domain/Records.js"
import { type JournalAppendError, type JournalShape, JournalWriteFailed, type Lane } from "../../services/Journal.js"
import type { EndError, SessionSummary, TurnOutcome } from "../../services/Sessions.js"
import type { FenceHooks, Queueable } from "../../services/EffectFence.js"
import type { Once } from "../Waits.js"
import type { Deadline } from "./Deadline.js"

/** Why a turn is being cancelled: by interrupt, its wall deadline, or a server stop. */
export type CancelReason = "cancelled" | "timeout" | "interrupted"

export interface RunningTurn {
  readonly sequence: number
  readonly done: Once<TurnOutcome>
  /**
   * Given once the turn is wholly over, after `done`: its claim on the session, its share of the
   * working memory and its use of the cell given back (the release finished), its fiber ending.
   */
  readonly closed: Once<void>
  /** The cancel as the turn's own wait sees it (shared by every copy of the turn); see `cancelTurn`. */
  readonly signal: CancelSignal
  /** A keyed send's `Idempotency-Key`: its closing append records the answer (`request_answered`). */
  readonly answers?: string
}

/**
 * A turn's cancel for the waits that race it: the first reason, and whom to tell at once. The
 * runner waits for "its activation ended or the turn was cancelled", and a model or tool call for
 * "it answered or the turn was cancelled", each with one callback (`exitOrCancel`) rather than a
 * race of forked fibers, its loser interrupted.
 */
export interface CancelSignal {
  reason: CancelReason | undefined
  readonly listeners: Set<(reason: CancelReason) => void>
}

export const cancelSignal = (): CancelSignal => ({ reason: undefined, listeners: new Set() })

/**
 * Cancels a turn: its signal's reason, which every host call checks, and the waits on it. The
 * first reason stands; true when this call set it.
 */
export const cancelTurn = (turn: RunningTurn, reason: CancelReason): Effect.Effect<boolean> =>
  Effect.sync(() => {
    const signal = turn.signal
    if (signal.reason !== undefined) return false
    signal.reason = reason
    const listeners = [...signal.listeners]
    signal.listeners.clear()
    for (const listener of listeners) listener(reason)
    return true
  })

/** What came first: the fiber's exit, the turn's cancel, or (with `deadline`) its time running out. */
export type ExitOrCancel<A, E> =
  | { readonly _tag: "done"; readonly exit: Exit.Exit<A, E> }
  | { readonly _tag: "cancel"; readonly reason: CancelReason }
  | { readonly _tag: "deadline" }

/**
 * Whichever comes first: `fiber`'s exit, the turn's cancel (`cancelTurn`), or the end of
 * `deadline` (Deadline.ts: a host timer, or a fiber sleeping on a Clock that tests drive). One
 * callback each way, where a race forked a fiber per side and interrupted the losers. Neither
 * fiber is interrupted here: a waiter that wants its fiber stopped when it is itself interrupted
 * says so (`onInterrupted`, e.g. Abandon.ts's `interruptWithin`, bounded by the grace).
 */
export const exitOrCancel = <A, E>(
  fiber: Fiber.RuntimeFiber<A, E>,
  signal: CancelSignal,
  deadline?: Deadline,
  /**
   * What an interrupted waiter does then, after its callbacks are stopped (`Effect.onInterrupt`
   * around the wait, in the wait's own canceler: one mask and finalizer, not two).
   */
  onInterrupted?: Effect.Effect<unknown>
): Effect.Effect<ExitOrCancel<A, E>> =>
  Effect.async<ExitOrCancel<A, E>>((resume) => {
    if (signal.reason !== undefined) {
      resume(Effect.succeed({ _tag: "cancel", reason: signal.reason }))
      return onInterrupted
    }
    let settled = false
    const settle = (first: ExitOrCancel<A, E>) => {
      if (settled) return
      settled = true
      stop()
      resume(Effect.succeed(first))
    }
    const onExit = (exit: Exit.Exit<A, E>) => settle({ _tag: "done", exit })
    const onCancel = (reason: CancelReason) => settle({ _tag: "cancel", reason })
    // Only a deadline that ran out: a sleeper interrupted (its round over, a stop) is no deadline.
    const onDeadline = (exit: Exit.Exit<unknown, unknown>) => {
      if (Exit.isSuccess(exit)) settle({ _tag: "deadline" })
    }
    const stop = () => {
      signal.listeners.delete(onCancel)
      fiber.removeObserver(onExit)
      deadline?.removeObserver(onDeadline)
    }
    signal.listeners.add(onCancel)
    // Each called at once if its fiber has already ended.
    fiber.addObserver(onExit)
    if (!settled) deadline?.addObserver(onDeadline)
    return onInterrupted === undefined ? Effect.sync(stop) : Effect.zipRight(Effect.sync(stop), onInterrupted)
  })

/** A transcript save staged to ride on the next append (`Cell.riding`). */
export interface Riding {
  readonly sequence: number
  /** Its `transcript_delta`. */
  readonly entry: Entry
  /** The transcript as it leaves it. */
  readonly transcript: ReadonlyArray<Message>
}

export class Cell {
  running: RunningTurn | undefined = undefined
  /**
   * The ends admitted on this session that have not answered: while one waits for the running
   * turn and commits `session_end_started`, no new turn starts (an end is never starved by
   * sends), but what refuses them is a retryable `session_busy`: the ending is not recorded yet,
   * and a crash now leaves the session taking messages. Counted, not flagged, so that an end
   * that gives up (its request interrupted) leaves nothing behind.
   */
  endsWaiting = 0
  /** Callers currently using the cell; it may be released only at zero with no turn running. */
  users = 0
  /**
   * A write through this cell failed: its state may lack records that landed, so it commits
   * nothing more and is dropped once unused; the next access reopens the session.
   */
  broken = false
  /** Why: the message of the failed journal write that broke it, when one did (a turn that never started names it). */
  brokenBy: string | undefined = undefined
  /**
   * The ending's commit (`session_end_started`, detaches, `session_ended`) once one `end` has
   * begun it: every other `end` waits for it and answers the same. Cleared when it fails, so that
   * a later `end` tries again.
   */
  closing: Once<Exit.Exit<SessionSummary, EndError>> | undefined = undefined
  /** Its session is being deleted: once released it is forgotten, never remembered. */
  deleted = false
  /**
   * A sync send's turn opening, staged in the journal (`Journal.stage`) and folded into `state`,
   * until the turn ends: durable with the turn's first write. Until it is, reads that promise
   * durable sequences (the summary's `last_sequence`) stop before it, and the turn's own reads
   * of its Events add it.
   */
  opening: ReadonlyArray<JournalRecord> | undefined = undefined
  /**
   * A transcript save staged to ride on the host call that carried it (`stageRiding`): written
   * ahead of that call's first record, in the same atomic append, and folded into `state` only
   * once an append has carried it (the next `foldIn`), so that nothing read from the cell shows it
   * before it is durable.
   */
  riding: Riding | undefined = undefined
  constructor(readonly session: SessionId, public state: SessionState) {}

  /**
   * Folds records this actor just committed, after the save riding on them if one is staged
   * (every append of the session carries what is staged). The folded state keeps no record
   * times, so none is needed.
   */
  foldIn(committed: ReadonlyArray<readonly [number, Entry]>) {
    const riding = this.riding
    const records: Array<JournalRecord> = []
    if (riding !== undefined) {
      this.riding = undefined
      records.push({ sequence: riding.sequence, recorded_at_ms: 0, kind: riding.entry.kind, payload: riding.entry.payload })
    }
    for (const [sequence, e] of committed) records.push({ sequence, recorded_at_ms: 0, kind: e.kind, payload: e.payload })
    // One copy of the state for the whole write, not one per record.
    this.state = foldMany(this.state, records)
  }

  /**
   * What `foldIn(committed)` would make of the cell now, made without changing it: for records
   * whose write is in flight (`commitQueueable`), installed by `install` once it is durable.
   */
  foldAhead(committed: ReadonlyArray<readonly [number, Entry]>): FoldedAhead {
    const riding = this.riding
    const records: Array<JournalRecord> = []
    if (riding !== undefined) {
      records.push({ sequence: riding.sequence, recorded_at_ms: 0, kind: riding.entry.kind, payload: riding.entry.payload })
    }
    for (const [sequence, e] of committed) records.push({ sequence, recorded_at_ms: 0, kind: e.kind, payload: e.payload })
    // `foldMany` copies the state once and leaves the one it was given as it was.
    return { base: this.state, riding, sequences: committed.map(([sequence]) => sequence), state: foldMany(this.state, records) }
  }

  /**
   * Installs a fold made ahead as `foldIn` of the same records would have folded them: only when
   * the cell is as it was when the fold was made (nothing folded or staged to ride since) and the
   * write's sequences are the ones it was made with. False, having changed nothing, otherwise.
   */
  install(ahead: FoldedAhead, sequences: ReadonlyArray<number>): boolean {
    if (this.state !== ahead.base || this.riding !== ahead.riding || sequences.length !== ahead.sequences.length) return false
    for (let i = 0; i < sequences.length; i++) if (sequences[i] !== ahead.sequences[i]) return false
    this.riding = undefined
    this.state = ahead.state
    return true
  }
}

/** A fold made while its records' write was in flight (`Cell.foldAhead`), and what it was made from. */
export interface FoldedAhead {
  readonly base: SessionState
  readonly riding: Riding | undefined
  readonly sequences: ReadonlyArray<number>
  readonly state: SessionState
}

/**
 * A write through the cell: refused once the cell is broken, breaking it on a write failure, and
 * folding the records into its state before returning their sequences. Uninterruptible: a write
 * once queued lands anyway, so the caller waits for it rather than let a later record (a turn's
 * close) overtake it.
 */
const viaCell = <A>(
  cell: Cell,
  entries: ReadonlyArray<Entry>,
  write: () => Effect.Effect<A, JournalAppendError>,
  sequencesOf: (written: A) => ReadonlyArray<number>
): Effect.Effect<ReadonlyArray<number>, JournalAppendError> =>
  Effect.uninterruptible(Effect.suspend(() => {
    if (cell.broken) return Effect.fail(brokenCell(cell))
    return write().pipe(
      Effect.tapErrorTag("JournalWriteFailed", (e) => Effect.sync(() => breakBy(cell, e))),
      Effect.map((written) => foldedIn(cell, entries, sequencesOf(written)))
    )
  }))

const brokenCell = (cell: Cell) => new JournalWriteFailed({ session: cell.session, reason: "an earlier write of this session failed" })

/** Breaks the cell on a failed write, keeping the first failure's message. */
export const breakBy = (cell: Cell, why: { readonly message: string }) => {
  cell.broken = true
  cell.brokenBy ??= why.message
}

const foldedIn = (cell: Cell, entries: ReadonlyArray<Entry>, sequences: ReadonlyArray<number>) => {
  cell.foldIn(entries.map((e, i) => [sequences[i]!, e] as const))
  return sequences
}

/** Appends through the journal and folds the records into the cell before returning. */
export const commit = (journal: JournalShape, cell: Cell, entries: ReadonlyArray<Entry>, lane: Lane = "latency") =>
  viaCell(cell, entries, () => journal.append(cell.session, entries, { lane }), (seqs) => seqs)

/**
 * `commit` as an append that goes on whatever happens to its caller (EffectFenceJournal's
 * `Queueable`): queued at once through `Journal.enqueue` where the journal can, the cell broken or
 * the records folded in when it answers, exactly as `commit` does; `commit` itself otherwise.
 *
 * Queued, the records are folded while their write is in flight, once the journal has given them
 * their sequences (`Journal.enqueue`'s `sequenced`): the fold is made aside (`Cell.foldAhead`) and
 * installed when the write is durable (`Cell.install`), before `done`, so nothing read from the
 * cell shows it any sooner than `foldIn` would; a write that fails drops it and breaks the cell,
 * as ever. `ahead`, when given, is called with the sequences and the state made ahead (a turn's
 * close makes its outcome then), still provisional: its caller uses what it made only once `done`
 * has succeeded with the same sequences.
 */
export const commitQueueable = (
  journal: JournalShape,
  cell: Cell,
  entries: ReadonlyArray<Entry>,
  ahead?: (sequences: ReadonlyArray<number>, state: SessionState) => void
): Queueable<ReadonlyArray<number>, JournalAppendError> => ({
  enqueue: (done) => {
    if (cell.broken) {
      done(Exit.fail(brokenCell(cell)))
      return true
    }
    let folded: FoldedAhead | undefined
    let answered = false
    const sequenced = (sequences: ReadonlyArray<number>) => {
      if (answered || cell.broken) return
      folded = cell.foldAhead(entries.map((e, i) => [sequences[i]!, e] as const))
      ahead?.(sequences, folded.state)
    }
    return journal.enqueue?.(cell.session, entries, (exit) => {
      answered = true
      if (Exit.isSuccess(exit)) {
        if (folded === undefined || !cell.install(folded, exit.value)) foldedIn(cell, entries, exit.value)
      } else {
        const e = Option.getOrUndefined(Cause.failureOption(exit.cause))
        if (e?._tag === "JournalWriteFailed") breakBy(cell, e)
      }
      folded = undefined
      done(exit)
    }, { sequenced }) ?? false
  },
  effect: commit(journal, cell, entries)
})

/**
 * A fence's folds into the cell (`FenceHooks`): the records folded aside while their append is in
 * flight (`ahead`, `Cell.foldAhead`), installed when the fence reports them committed if the cell
 * is as it was and the sequences are the same (`Cell.install`), else folded then (`foldIn`), as
 * they always were. Concurrent fences sharing these hooks fall back to `foldIn`.
 */
export const cellFolds = (cell: Cell): Required<Pick<FenceHooks, "ahead" | "committed">> => {
  let folded: FoldedAhead | undefined
  return {
    ahead: (committed) => {
      folded = cell.broken ? undefined : cell.foldAhead(committed)
    },
    committed: (committed) => {
      const ahead = folded
      folded = undefined
      if (ahead === undefined || !cell.install(ahead, committed.map(([sequence]) => sequence))) cell.foldIn(committed)
    }
  }
}

/**
 * Writes a turn's staged opening on its own, when the turn's first write has not carried it yet
 * (`Journal.flush`; nothing when it has). A failed write breaks the cell, as any failed write does.
 */
export const flushOpening = (journal: JournalShape, cell: Cell): Effect.Effect<void> =>
  journal.flush(cell.session).pipe(
    Effect.catchAll((e) => Effect.sync(() => void (e._tag === "JournalWriteFailed" && breakBy(cell, e))))
  )

/**
 * Stages records through the journal (`Journal.stage`: written with the session's next append)
 * and folds them into the cell, which keeps them as its `opening` while they are only staged.
 */
export const stage = (journal: JournalShape, cell: Cell, entries: ReadonlyArray<Entry>) =>
  viaCell(cell, entries, () => journal.stage(cell.session, entries), (staged) => {
    if (staged._tag === "Appended") return staged.sequences
    cell.opening = staged.records
    return staged.records.map((r) => r.sequence)
  })

/**
 * Stages `entry` (a transcript save leaving `transcript`) to ride on the append the caller makes next (`Cell.riding`),
 * or appends it when the journal cannot stage (something in flight): then it is durable and
 * folded in when this answers. Refused once the cell is broken; a failed write breaks it.
 */
export const stageRiding = (journal: JournalShape, cell: Cell, e: Entry, transcript: ReadonlyArray<Message>): Effect.Effect<void, JournalAppendError> =>
  Effect.uninterruptible(Effect.suspend(() => {
    if (cell.broken) return Effect.fail(brokenCell(cell))
    return journal.stage(cell.session, [e]).pipe(
      Effect.tapErrorTag("JournalWriteFailed", (e) => Effect.sync(() => breakBy(cell, e))),
      Effect.map((staged) => {
        if (staged._tag === "Appended") cell.foldIn([[staged.sequences[0]!, e]])
        else cell.riding = { sequence: staged.records[0]!.sequence, entry: e, transcript }
      })
    )
  }))

/**
 * `stageRiding` in this synchronous step, where the journal can stage at once (`Journal.stageNow`):
 * true once staged; false, having done nothing, otherwise (`stageRiding` then answers for it).
 */
export const stageRidingNow = (journal: JournalShape, cell: Cell, e: Entry, transcript: ReadonlyArray<Message>): boolean => {
  if (cell.broken || cell.riding !== undefined) return false
  const records = journal.stageNow?.(cell.session, [e])
  if (records === undefined) return false
  cell.riding = { sequence: records[0]!.sequence, entry: e, transcript }
  return true
}

/**
 * Writes a staged riding save on its own when the append it was to ride on did not happen (the
 * call ended first), and folds it in; nothing when none is left. A failed write breaks the cell.
 */
export const landRiding = (journal: JournalShape, cell: Cell): Effect.Effect<void, JournalAppendError> =>
  Effect.suspend(() => {
    if (cell.riding === undefined) return Effect.void
    return Effect.uninterruptible(journal.flush(cell.session).pipe(
      Effect.tap(() => Effect.sync(() => cell.foldIn([]))),
      Effect.tapError(() =>
        Effect.sync(() => {
          cell.riding = undefined
          cell.broken = true
        })
      )
    ))
  })
