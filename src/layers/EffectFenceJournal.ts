/**
 * The fence over the Journal. The started commit and the outcome commit run uninterruptibly;
 * only the dispatch itself can be interrupted.
 *
 * The outcome commit is bounded by the cleanup deadline (BRAIN_CLEANUP_DEADLINE_MS; 0 = wait
 * for the journal however long it takes). If the journal does not answer in time, the caller is
 * released with `OutcomeUnrecorded` and never with the result: the seed's rule is that the
 * outcome is committed before anyone acts on it, and a result nobody can find after a crash is
 * one the loop must not build on. The append itself is not abandoned: it is queued in the
 * journal, which always answers, and it lands or fails in the background. The caller is told how
 * to wait for that (`FenceHooks.unrecorded`), because what it writes or reads next for the
 * session must not be ordered before a record that may still land.
 */
import { type Cause, Effect, Exit, Layer } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { Entry } from "../domain/Records.js"
import { type EnqueueOptions, Journal, type JournalAppendError, type JournalShape } from "../services/Journal.js"
import {
  type Dispatching,
  EffectFence,
  type EffectFenceShape,
  type Fenced,
  type FencedEffect,
  type FenceError,
  type FenceHooks,
  isDispatching,
  OutcomeUnrecorded,
  type Queueable
} from "../services/EffectFence.js"
import { type Restore, runRound } from "./sessions/Round.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { waitFor } from "./Waits.js"

/** An append waited for at most a deadline: its answer, or how to wait for it in the background. */
export type Bounded<A, E> =
  | { readonly _tag: "Answered"; readonly exit: Exit.Exit<A, E> }
  | { readonly _tag: "Unsettled"; readonly settled: Effect.Effect<void> }

/** Who is told an append's answer: once it has one, at once. */
interface Answering<A, E> {
  readonly add: (f: (exit: Exit.Exit<A, E>) => void) => void
  readonly remove: (f: (exit: Exit.Exit<A, E>) => void) => void
}

/** The append queued through `enqueue`, or undefined when it could not be (nothing happened). */
const queued = <A, E>(append: Queueable<A, E>): Answering<A, E> | undefined => {
  let answer: Exit.Exit<A, E> | undefined
  const waiting = new Set<(exit: Exit.Exit<A, E>) => void>()
  const taken = append.enqueue((exit) => {
    answer = exit
    for (const f of waiting) f(exit)
    waiting.clear()
  })
  if (!taken) return undefined
  return {
    add: (f) => (answer !== undefined ? f(answer) : void waiting.add(f)),
    remove: (f) => void waiting.delete(f)
  }
}

/** The append run by a fiber of its own (the journal could not queue it at once). */
const forked = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<Answering<A, E>> =>
  // Not owned by the waiter, deliberately: an append once queued lands or fails (the journal
  // answers every append, at the latest when it closes), and `settled` reports which.
  Effect.map(Effect.forkDaemon(Effect.uninterruptible(effect)), (fiber) => ({
    add: (f) => fiber.addObserver(f),
    remove: (f) => fiber.removeObserver(f)
  }))

/** Waits for the answer; an interrupted waiter stops waiting, the append goes on. */
const answerOf = <A, E>(answering: Answering<A, E>): Effect.Effect<Exit.Exit<A, E>> =>
  waitFor((resume) => {
    const f = (exit: Exit.Exit<A, E>) => resume(Effect.succeed(exit))
    answering.add(f)
    return () => answering.remove(f)
  })

/**
 * Runs `append` to its end whatever happens to the waiter, and waits at most `deadlineMs` for
 * it (0 = no bound). Only the deadline stops the wait: inside an uninterruptible region (a fence,
 * a turn's close) an interruption of the caller still waits for the answer or the deadline. (A
 * plain `timeout` of uninterruptible work never fires; made interruptible, the wait would also
 * give way to the caller's interruption and let a stop close a turn over an outcome in flight.)
 *
 * The append is queued in the journal in this synchronous step where the journal can
 * (`Journal.enqueue`), and the journal's answer is a callback: no fiber. Otherwise it runs in a
 * fiber of its own, not the waiter's. The wait is one `Effect.async` answered by whichever comes
 * first, the answer or a timer: no race, no waiter fiber, and no canceler armed for a caller that
 * cannot be interrupted (Waits.ts). Two of these run in every text turn (the
 * model call's outcome, the turn's close) and one per tool call (docs/benchmarks.md, "Main-thread
 * CPU of a keyed text turn" and "Outcomes queued without a fiber"). The timer is the host's, not
 * the `Clock` service's: the deadline bounds how long a real disk may take to answer, which no
 * test clock drives either.
 */
export const appendWithin = <A, E>(append: Queueable<A, E>, deadlineMs: number): Effect.Effect<Bounded<A, E>> =>
  Effect.suspend(() => {
    const now = queued(append)
    return now !== undefined ? waitWithin(now, deadlineMs) : Effect.flatMap(forked(append.effect), (answering) => waitWithin(answering, deadlineMs))
  })

/** `appendWithin`'s wait for the append's answer, at most `deadlineMs` (0: no bound). */
const waitWithin = <A, E>(answering: Answering<A, E>, deadlineMs: number): Effect.Effect<Bounded<A, E>> => {
  const unsettled: Bounded<A, E> = { _tag: "Unsettled", settled: Effect.asVoid(answerOf(answering)) }
  // Past the host timer's range a deadline cannot fire: the same as no bound.
  if (deadlineMs <= 0 || deadlineMs > MAX_TIMER_MS) {
    return Effect.map(answerOf(answering), (exit) => ({ _tag: "Answered", exit }) as const)
  }
  return waitFor<Bounded<A, E>>((resume) => {
    const onExit = (exit: Exit.Exit<A, E>) => {
      clearTimeout(timer)
      resume(Effect.succeed({ _tag: "Answered", exit }))
    }
    const timer = setTimeout(() => {
      answering.remove(onExit)
      resume(Effect.succeed(unsettled))
    }, deadlineMs)
    // Called at once when the append has already ended.
    answering.add(onExit)
    // An interruptible caller that is interrupted stops waiting; the append goes on.
    return () => {
      clearTimeout(timer)
      answering.remove(onExit)
    }
  })
}

/** An effect's dispatch tried now; a try that threw is a defect of the dispatch, as if its effect had died. */
const tryNow = <A, E>(effect: FencedEffect<A, E>, started: number): Exit.Exit<A, E> | Dispatching<A, E> | undefined => {
  if (effect.dispatchNow === undefined) return undefined
  try {
    return effect.dispatchNow(started)
  } catch (err) {
    return Exit.die(err)
  }
}

/** A dispatch under way, waited for by a fiber (a round that also has effects to run in fibers). */
const awaitDispatching = <A, E>(dispatching: Dispatching<A, E>): Effect.Effect<A, E> =>
  Effect.async<A, E>((resume) => {
    dispatching.onEnd(resume)
    // Interrupted: it is stopped, and the wait ends once it has ended.
    return Effect.async<void>((ended) => {
      dispatching.interrupt()
      dispatching.onEnd(() => ended(Effect.void))
    })
  })

/** The caller's `FenceHooks.ahead` told `entries` with the sequences the journal gave them (`Journal.enqueue`'s `sequenced`). */
const aheadOf = (hooks: FenceHooks | undefined, entries: ReadonlyArray<Entry>): EnqueueOptions | undefined => {
  const ahead = hooks?.ahead
  return ahead === undefined ? undefined : { sequenced: (sequences) => ahead(entries.map((e, i) => [sequences[i]!, e] as const)) }
}

/** A journal append as a `Queueable` (`options`: `aheadOf`'s). */
export const journalAppend = (
  journal: JournalShape,
  session: SessionId,
  entries: ReadonlyArray<Entry>,
  options?: EnqueueOptions
): Queueable<ReadonlyArray<number>, JournalAppendError> => ({
  enqueue: (done) => journal.enqueue?.(session, entries, done, options) ?? false,
  effect: journal.append(session, entries)
})

/**
 * `journal.append`, queued in this synchronous step where the journal can (`Journal.enqueue`) and
 * waited for as one `Effect.async` on its callback: the starts of every fence (a model call's,
 * each round of tool calls') cost three of Effect's instructions fewer than the append's own
 * effects (docs/benchmarks.md, "Host-tool turn, stop 58"). Where it cannot, `journal.append`.
 * Its wait has no canceler, as `journal.append`'s has none: an append once queued lands or fails.
 */
export const appendNow = (
  journal: JournalShape,
  session: SessionId,
  entries: ReadonlyArray<Entry>,
  options?: EnqueueOptions
): Effect.Effect<ReadonlyArray<number>, JournalAppendError> =>
  journal.enqueue === undefined
    ? journal.append(session, entries)
    : Effect.suspend(() => {
      let answer: Exit.Exit<ReadonlyArray<number>, JournalAppendError> | undefined
      let resume: ((exit: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void) | undefined
      const taken = journal.enqueue!(session, entries, (exit) => {
        if (resume !== undefined) resume(exit)
        else answer = exit
      }, options)
      if (!taken) return journal.append(session, entries)
      // Answered at once (a broken session, a closed journal), or to come.
      return answer ?? Effect.async<ReadonlyArray<number>, JournalAppendError>((r) => {
        if (answer !== undefined) r(answer)
        else resume = r
      })
    })

/** The longest delay a host timer takes (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1

export const make = Effect.gen(function*() {
  const journal = yield* Journal
  const config = yield* ServerConfig
  // One generator function for every fence, not one made per call (docs/benchmarks.md,
  // "Generator bodies made once").
  function* fenced<A, E>(
    session: SessionId,
    started: Entry,
    dispatch: (started: number) => Effect.Effect<A, E>,
    outcome: (started: number, exit: Exit.Exit<A, E>, dispatched: boolean) => Entry,
    hooks: FenceHooks | undefined,
    restore: Restore
  ) {
    const [seq] = yield* appendNow(journal, session, [started], aheadOf(hooks, [started]))
    hooks?.committed?.([[seq!, started]])
    return yield* settled(session, seq!, dispatch, outcome, hooks, restore)
  }
  /**
   * Every start in one append, then each effect tried now (`dispatchNow`): when all went to their
   * end, every outcome in one append, with no fiber; otherwise each effect's dispatch (or the exit
   * its try gave) and outcome in a fiber of its own (`runRound`).
   */
  function* fencedAll<A, E>(session: SessionId, effects: ReadonlyArray<FencedEffect<A, E>>, hooks: FenceHooks | undefined, restore: Restore) {
    const starts = effects.map((e) => e.started)
    const seqs = yield* appendNow(journal, session, starts, aheadOf(hooks, starts))
    hooks?.committed?.(effects.map((e, i) => [seqs[i]!, e.started] as const))
    const nows = effects.map((e, i) => tryNow(e, seqs[i]!))
    if (nows.every((now) => now !== undefined && !isDispatching(now))) {
      return yield* settledAll(session, seqs, effects, nows as ReadonlyArray<Exit.Exit<A, E>>, hooks)
    }
    if (nows.every((now) => now !== undefined)) return yield* asTheyEnd(session, seqs, effects, nows as ReadonlyArray<Exit.Exit<A, E> | Dispatching<A, E>>, hooks, restore)
    // Forked uninterruptible (each restores only its dispatch); the wait is the caller's to interrupt.
    return yield* runRound(
      effects.map((e, i) => {
        const now = nows[i]
        const dispatch = now === undefined ? e.dispatch : isDispatching(now) ? () => awaitDispatching(now) : () => now
        return Effect.gen(() => settled(session, seqs[i]!, dispatch, e.outcome, hooks, restore))
      }),
      restore
    )
  }
  /**
   * Effects that each ended when tried or are under way with no fiber (`Dispatching`): this fiber
   * commits their outcomes as they end, those that ended by the time it looks in one append, in
   * the effects' order. The first commit that fails (or misses the deadline) interrupts those still
   * under way; an interruption of the caller's wait interrupts them all. Either way every outcome
   * is committed before this answers (or fails with the first failure, or the interruption).
   */
  function* asTheyEnd<A, E>(
    session: SessionId,
    seqs: ReadonlyArray<number>,
    effects: ReadonlyArray<FencedEffect<A, E>>,
    nows: ReadonlyArray<Exit.Exit<A, E> | Dispatching<A, E>>,
    hooks: FenceHooks | undefined,
    restore: Restore
  ) {
    const exits = new Array<Exit.Exit<A, E> | undefined>(effects.length)
    const outcomes = new Array<number>(effects.length)
    /** Ended, their outcomes not yet committed: in the order they ended. */
    let ended: Array<number> = []
    let wake: (() => void) | undefined
    const end = (i: number, exit: Exit.Exit<A, E>) => {
      exits[i] = exit
      ended.push(i)
      const w = wake
      wake = undefined
      w?.()
    }
    nows.forEach((now, i) => (isDispatching(now) ? now.onEnd((exit) => end(i, exit)) : end(i, now)))
    /** Interrupts every effect still under way (once: a later call finds none). */
    let stopped = false
    const stopRest = () => {
      if (stopped) return
      stopped = true
      nows.forEach((now, i) => {
        if (isDispatching(now) && exits[i] === undefined) now.interrupt()
      })
    }
    // A wait with no canceler, though it may be interrupted (`restore`): one `Effect.async`, not the
    // mask and finalizer an interruptible one with a canceler is given (Waits.ts). A wait
    // interrupted leaves `wake` to its resume, which is spent then (calling it does nothing);
    // the next wait sets its own, and an end meanwhile is in `ended`, read before any wait.
    const nextEnd = Effect.async<void>((resume) => {
      wake = () => resume(Effect.void)
    })
    let first: Cause.Cause<FenceError> | undefined
    let committed = 0
    while (committed < effects.length) {
      if (ended.length === 0) {
        // Only the wait can be interrupted, and only while nothing has failed (then it is stopped already).
        const waited = yield* Effect.exit(stopped ? nextEnd : restore(nextEnd))
        if (Exit.isFailure(waited)) {
          first ??= waited.cause
          stopRest()
        }
        continue
      }
      const batch = ended.sort((a, b) => a - b)
      ended = []
      committed += batch.length
      const closings = batch.map((i) => effects[i]!.outcome(seqs[i]!, exits[i]!, true))
      const answer = yield* appendWithin(journalAppend(journal, session, closings, aheadOf(hooks, closings)), config.cleanupDeadlineMs)
      if (answer._tag === "Unsettled") {
        const failed = yield* Effect.exit(Effect.gen(() => unrecorded(session, seqs[batch[0]!]!, closings[0]!, answer.settled, hooks)))
        if (Exit.isFailure(failed)) first ??= failed.cause
        stopRest()
      } else if (Exit.isFailure(answer.exit)) {
        first ??= answer.exit.cause
        stopRest()
      } else {
        const sequences = answer.exit.value
        batch.forEach((i, k) => (outcomes[i] = sequences[k]!))
        hooks?.committed?.(closings.map((c, k) => [sequences[k]!, c] as const))
      }
    }
    if (first !== undefined) return yield* Effect.failCause(first)
    return exits.map((exit, i) => ({ started: seqs[i]!, exit: exit!, dispatched: true, outcome: outcomes[i]! }) satisfies Fenced<A, E>)
  }
  /** Effects that all went to their end when tried: their outcomes committed in one append, in their order. */
  function* settledAll<A, E>(
    session: SessionId,
    seqs: ReadonlyArray<number>,
    effects: ReadonlyArray<FencedEffect<A, E>>,
    exits: ReadonlyArray<Exit.Exit<A, E>>,
    hooks: FenceHooks | undefined
  ) {
    const closings = effects.map((e, i) => e.outcome(seqs[i]!, exits[i]!, true))
    const committed = yield* appendWithin(journalAppend(journal, session, closings, aheadOf(hooks, closings)), config.cleanupDeadlineMs)
    if (committed._tag === "Unsettled") return yield* unrecorded(session, seqs[0]!, closings[0]!, committed.settled, hooks)
    if (Exit.isFailure(committed.exit)) return yield* Effect.failCause(committed.exit.cause)
    const outcomes = committed.exit.value
    hooks?.committed?.(closings.map((c, i) => [outcomes[i]!, c] as const))
    return exits.map((exit, i) => ({ started: seqs[i]!, exit, dispatched: true, outcome: outcomes[i]! }) satisfies Fenced<A, E>)
  }
  /** The outcome append missed the deadline: the caller is told how to wait for it, and the effect fails, its result withheld. */
  function* unrecorded(session: SessionId, started: number, closing: Entry, settledInBackground: Effect.Effect<void>, hooks: FenceHooks | undefined) {
    hooks?.unrecorded?.(settledInBackground)
    const failed = new OutcomeUnrecorded({ session, started, deadlineMs: config.cleanupDeadlineMs })
    yield* Effect.logWarning(`${failed.message}; the result is withheld and the effect counts as ambiguous`).pipe(
      Effect.annotateLogs({ session_id: session, record: closing.kind })
    )
    return yield* Effect.fail(failed)
  }
  /** An effect whose start is durable: dispatched, and its outcome committed whatever the dispatch did. */
  function* settled<A, E>(
    session: SessionId,
    seq: number,
    dispatch: (started: number) => Effect.Effect<A, E>,
    outcome: (started: number, exit: Exit.Exit<A, E>, dispatched: boolean) => Entry,
    hooks: FenceHooks | undefined,
    restore: Restore
  ) {
    let dispatched = false
    const exit = yield* Effect.exit(
      restore(Effect.suspend(() => {
        dispatched = true
        return dispatch(seq)
      }))
    )
    const closing = outcome(seq, exit, dispatched)
    const committed = yield* appendWithin(journalAppend(journal, session, [closing], aheadOf(hooks, [closing])), config.cleanupDeadlineMs)
    if (committed._tag === "Unsettled") return yield* unrecorded(session, seq, closing, committed.settled, hooks)
    if (Exit.isFailure(committed.exit)) return yield* Effect.failCause(committed.exit.cause)
    const outcomeSeq = committed.exit.value[0]!
    hooks?.committed?.([[outcomeSeq, closing]])
    return { started: seq, exit, dispatched, outcome: outcomeSeq } satisfies Fenced<A, E>
  }
  const fence: EffectFenceShape["fence"] = (session, started, dispatch, outcome, hooks) =>
    Effect.uninterruptibleMask((restore) => Effect.gen(() => fenced(session, started, dispatch, outcome, hooks, restore)))
  const fenceAll: EffectFenceShape["fenceAll"] = (session, effects, hooks) =>
    effects.length === 0
      ? Effect.succeed([])
      : Effect.uninterruptibleMask((restore) => Effect.gen(() => fencedAll(session, effects, hooks, restore)))
  return { fence, fenceAll } satisfies EffectFenceShape
})

export const layer = Layer.effect(EffectFence, make)
