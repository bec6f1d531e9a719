/**
 * A wait for a callback, `Effect.async` as Brain's hot paths use it, with its cancel armed only
 * when it can run. Effect's runtime interrupts a fiber waiting in an `Effect.async` only when the
 * fiber is interruptible; for that case `Effect.async` wraps every wait that returns a canceler in
 * `onInterrupt` (an uninterruptible mask, a match, a finalizer: some eight instructions of its
 * runtime, and their allocations), whether or not the caller can be interrupted. Most of Brain's
 * waits run inside uninterruptible regions (a fence, a turn's close), where the canceler can
 * never run: there they are one plain `Effect.async`, one instruction to read the flags before it
 * (docs/benchmarks.md, "Waits without masks, writes without a semaphore").
 */
import { Effect, RuntimeFlags } from "effect"

/**
 * Calls `register` with the callback that ends the wait (the first call wins); `register` returns
 * what undoes it (remove a listener, clear a timer), which runs if the waiting fiber is
 * interrupted, and only then. An uninterruptible caller cannot be interrupted while it waits.
 */
export const waitFor = <A, E = never>(register: (resume: (effect: Effect.Effect<A, E>) => void) => () => void): Effect.Effect<A, E> =>
  Effect.withFiberRuntime((_, status) =>
    RuntimeFlags.interruptible(status.runtimeFlags)
      ? Effect.async<A, E>((resume) => {
        const undo = register(resume)
        return Effect.sync(undo)
      })
      : Effect.async<A, E>((resume) => {
        register(resume)
      }))

/**
 * A value given once and waited for by any number of fibers: a `Deferred` that cannot fail, whose
 * wait is a `waitFor` (no mask for a caller that cannot be interrupted, and none for a value
 * already given). A turn's outcome is one: its sender, an interrupt and a stop wait for it.
 */
export class Once<A> {
  private given: { readonly value: A } | undefined = undefined
  private readonly waiters = new Set<(value: A) => void>()

  /** Gives the value and wakes every waiter; false (and nothing changes) if one was given already. */
  give(value: A): boolean {
    if (this.given !== undefined) return false
    this.given = { value }
    const waiters = [...this.waiters]
    this.waiters.clear()
    for (const wake of waiters) wake(value)
    return true
  }

  get isDone(): boolean {
    return this.given !== undefined
  }

  /**
   * Calls `wake` with the value once it is given (at once if it was); answers what stops it being
   * called. A callback and no fiber, for a waiter of many values with one wait of its own.
   */
  listen(wake: (value: A) => void): () => void {
    if (this.given !== undefined) {
      wake(this.given.value)
      return () => {}
    }
    this.waiters.add(wake)
    return () => void this.waiters.delete(wake)
  }

  /** The value, once given. */
  readonly await: Effect.Effect<A> = waitFor<A>((resume) => this.listen((value) => resume(Effect.succeed(value))))
}

/**
 * One turn of the event loop: what is queued behind the caller (timers, sockets, other sessions'
 * requests) runs before it goes on. Effect's own yield is a microtask and would not let them.
 */
export const eventLoopTurn: Effect.Effect<void> = Effect.async<void>((resume) => {
  const turn = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(turn))
})
