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
