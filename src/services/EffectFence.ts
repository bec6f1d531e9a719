/**
 * EffectFence: commit `*_started` durably ⇒ dispatch exactly once ⇒ commit the outcome
 * referencing the started sequence ⇒ only then return. The outcome is committed even while the
 * caller is being interrupted. Nothing here retries.
 *
 * The fence never hands back a dispatch result whose outcome is not durable. When the outcome
 * commit does not answer within BRAIN_CLEANUP_DEADLINE_MS it fails with `OutcomeUnrecorded`
 * instead: the effect may have happened, nothing durable says how it ended, and the caller must
 * treat it as ambiguous. That append is not abandoned; it runs on in the background until the
 * journal answers, and `FenceHooks.unrecorded` is told how to wait for that.
 */
import { Context, Data, type Effect, type Exit } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { Entry } from "../domain/Records.js"
import type { JournalAppendError } from "./Journal.js"

export interface Fenced<A, E> {
  readonly started: number
  /** How the dispatch ended; an interruption before dispatch means it never ran. */
  readonly exit: Exit.Exit<A, E>
  /** Whether dispatch ran (false when interrupted between the started commit and dispatch). */
  readonly dispatched: boolean
  /** The outcome record's sequence: a fence returns only once its outcome is durable. */
  readonly outcome: number
}

/**
 * The outcome commit did not answer within the cleanup deadline: the dispatch's result must not
 * be acted on. The effect may have happened (ambiguous). The append may still land later.
 */
export class OutcomeUnrecorded extends Data.TaggedError("OutcomeUnrecorded")<{
  readonly session: string
  /** The `*_started` record whose outcome is not durable. */
  readonly started: number
  readonly deadlineMs: number
}> {
  override get message() {
    return `the outcome of the effect started at sequence ${this.started} of ${this.session} was not durable within ${this.deadlineMs} ms`
  }
}

export type FenceError = JournalAppendError | OutcomeUnrecorded

/**
 * An append that must go on whatever happens to its caller: `enqueue` queues it in the same
 * synchronous step and calls `done` exactly once with its answer, or answers false having done
 * nothing (the journal cannot queue it at once), when `effect` is the same append to run.
 */
export interface Queueable<A, E> {
  readonly enqueue: (done: (exit: Exit.Exit<A, E>) => void) => boolean
  readonly effect: Effect.Effect<A, E>
}

/**
 * What the caller learns inside the fence, synchronously, before it returns or fails (so an
 * interruption of the caller cannot lose it).
 */
export interface FenceHooks {
  /** The records just committed (the started record, then the outcome), to fold into the caller's state. */
  readonly committed?: (entries: ReadonlyArray<readonly [number, Entry]>) => void
  /**
   * The same records while their append is in flight, once the journal has given them their
   * sequences (`Journal.enqueue`'s `sequenced`), where it can: nothing is durable yet, and the
   * append may fail. For work that can be made ahead and used only once `committed` follows with
   * the same records (Cell.ts `cellFolds`); never acted on by itself.
   */
  readonly ahead?: (entries: ReadonlyArray<readonly [number, Entry]>) => void
  /**
   * The outcome missed the deadline. `settled` waits until that append has landed or failed
   * (the journal always answers); until then nothing the caller writes for the session may be
   * ordered after it, nor any state read that could miss it.
   */
  readonly unrecorded?: (settled: Effect.Effect<void>) => void
}

/** One effect of `fenceAll`: its started record, its dispatch and its outcome record, as `fence` takes them. */
export interface FencedEffect<A, E> {
  readonly started: Entry
  readonly dispatch: (started: number) => Effect.Effect<A, E>
  /**
   * The dispatch tried now, in the call, once the start is durable: its exit when the effect went
   * to its end without waiting; the dispatch under way (`Dispatching`) when it was started without
   * a fiber and ends later; undefined when it could not, having done nothing that shows (then
   * `dispatch` runs it). Optional.
   */
  readonly dispatchNow?: (started: number) => Exit.Exit<A, E> | Dispatching<A, E> | undefined
  readonly outcome: (started: number, exit: Exit.Exit<A, E>, dispatched: boolean) => Entry
}

/**
 * A dispatch under way with no fiber of its own (what `dispatchNow` answers for an effect it
 * started and whose answer comes later, such as a host tool's call): it ends exactly once, however
 * it ends (its own answer, its own handling of a cancel or a deadline), and says so to every
 * `onEnd`. `interrupt` stops it as interrupting a dispatch's fiber would; it then ends soon after,
 * with the exit an interrupted dispatch has.
 */
export interface Dispatching<A, E> {
  readonly _tag: "Dispatching"
  /** Calls `f` with its exit once it has ended: at once when it has. */
  readonly onEnd: (f: (exit: Exit.Exit<A, E>) => void) => void
  readonly interrupt: () => void
}

export const isDispatching = <A, E>(now: Exit.Exit<A, E> | Dispatching<A, E>): now is Dispatching<A, E> => now._tag === "Dispatching"

export interface EffectFenceShape {
  readonly fence: <A, E>(
    session: SessionId,
    started: Entry,
    dispatch: (started: number) => Effect.Effect<A, E>,
    outcome: (started: number, exit: Exit.Exit<A, E>, dispatched: boolean) => Entry,
    hooks?: FenceHooks
  ) => Effect.Effect<Fenced<A, E>, FenceError>
  /**
   * Effects that start together (a round of tool calls): every started record committed in one
   * atomic append (all or none) before any of them is dispatched, then each dispatched at once, in
   * a fiber of its own, and its outcome committed as `fence` commits one. Answers in the effects'
   * order once every outcome is durable. The first to fail (an outcome not committed) interrupts
   * the dispatches still running, whose outcomes are committed all the same, and the whole fails
   * with it once every effect has ended. An interrupted caller interrupts every dispatch and waits
   * for every outcome.
   *
   * When every effect went to its end when tried (`dispatchNow`), their outcomes are committed
   * together instead, in one atomic append in the effects' order, and no fiber is started: the
   * same records, each before anyone sees its result. When every try either ended or left its
   * effect under way (`Dispatching`), no fiber is started either: the caller's fiber commits the
   * outcomes as the effects end, those that ended together in one append, and the rest is as
   * above (a failed outcome commit interrupts the effects still under way, an interrupted caller
   * interrupts them all, and every outcome is committed before the answer).
   */
  readonly fenceAll: <A, E>(
    session: SessionId,
    effects: ReadonlyArray<FencedEffect<A, E>>,
    hooks?: FenceHooks
  ) => Effect.Effect<Array<Fenced<A, E>>, FenceError>
}

export class EffectFence extends Context.Tag("brain/EffectFence")<EffectFence, EffectFenceShape>() {}
