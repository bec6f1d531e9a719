/**
 * A bound on work run at once that hands a freed permit to the next waiter alone, in order of
 * arrival. Effect's Semaphore wakes every waiter at each release, and each that finds no permit
 * waits again a few frames deeper in its fiber: with hundreds of waiters on two permits (SSE
 * streams catching up, pages and transcripts waiting to be built) that was work quadratic in the
 * waiters and their fibers' stacks growing by the release (measured: 672 SSE streams that did not
 * read held 104,000 pending waits, about 250 MiB of heap, within 15 s).
 */
import { Deferred, Effect, Exit, FiberId } from "effect"

export class Permits {
  private free: number
  private readonly waiters: Array<Deferred.Deferred<void>> = []

  constructor(permits: number) {
    this.free = Math.max(1, permits)
  }

  /** Waiters now. */
  get waiting(): number {
    return this.waiters.length
  }

  /** Runs `self` holding a permit, waiting in line for one; the permit is given back however `self` ends. */
  withPermit<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> {
    return Effect.uninterruptibleMask((restore) =>
      Effect.zipRight(this.take(restore), Effect.ensuring(restore(self), Effect.sync(() => this.release())))
    )
  }

  private take(restore: <X, Y, Z>(e: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.free > 0 && this.waiters.length === 0) {
        this.free--
        return Effect.void
      }
      const waiter = Deferred.unsafeMake<void>(FiberId.none)
      this.waiters.push(waiter)
      return restore(Deferred.await(waiter)).pipe(
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            const at = this.waiters.indexOf(waiter)
            if (at >= 0) this.waiters.splice(at, 1)
            // Handed a permit as it was interrupted: it goes to the next.
            else this.release()
          })
        )
      )
    })
  }

  /** The permit goes to the first waiter, else back to the free ones. */
  private release() {
    const next = this.waiters.shift()
    if (next === undefined) this.free++
    else Deferred.unsafeDone(next, Exit.void)
  }
}
