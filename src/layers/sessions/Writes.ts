/**
 * One activation's state writes, one at a time (`ActivationScope.writes`): each write's delta is
 * computed against the state it will follow. What `Semaphore.withPermits(1)` did, for the one
 * case the host has: a write's body is a journal commit that, once it starts, runs to its end
 * whatever happens to its caller (Cell.ts's `commit` is uninterruptible). So a write that finds
 * no other in flight takes the lock, runs and gives it back in a single uninterruptible stretch,
 * with no permit taken as an effect and no finalizer armed: the semaphore took about 25
 * instructions of Effect's runtime for each write, one of them in every text turn
 * (`setTranscriptAtEnd`; docs/benchmarks.md, "Waits without masks, writes without a semaphore").
 *
 * - A write that finds one in flight waits, interruptibly, until the lock is given back, then
 *   tries again: a waiter is never handed the lock, so an interrupted waiter cannot hold it.
 * - The body runs uninterruptibly, and the lock is given back however it ends (success, failure,
 *   defect), in the step that observes its end.
 * - The turn closes the writes (`close`) before its closing append: a write that takes the lock
 *   after that is refused, its body never run. A loop abandoned after its cancel (Turn.ts) may
 *   still have a call waiting here behind a write the journal has not answered; once that write
 *   lands, the call must not write after the turn's close. The write in flight is not waited for:
 *   its body started before the close, and an opened session's append takes its place in the
 *   journal's queue in the step it runs (journal/Core.ts), so it lands ahead of the close.
 */
import { Effect } from "effect"
import { failure, type Failure } from "../../domain/Failure.js"
import { HostCallFailed } from "../../services/Agentloop.js"
import { waitFor } from "../Waits.js"

/** A write after the turn closed, with no cancel or end to name (a fiber the loop forked that outlived it). */
const turnClosed = failure("invalid_request", "a host call after its turn closed: nothing of it is written")

export class Writes {
  private busy = false
  private waiters: Array<() => void> = []
  /**
   * Set once the turn has closed the writes: the failure every write that takes the lock from then
   * on fails with. Kept as the failure, its error made only for a write refused: every turn closes
   * its writes, and an error's stack trace took about 2.6 % of a text turn's main thread.
   */
  private closed: Failure | undefined = undefined

  /**
   * Runs `body` after the writes in flight before it; the wait for them is interruptible, `body` is
   * not. Refused, `body` not run, once the writes are closed.
   */
  run<A, E>(body: Effect.Effect<A, E>): Effect.Effect<A, E | HostCallFailed> {
    return Effect.uninterruptibleMask((restore) => this.take(body, restore))
  }

  /** Closes the writes for good: every write that takes the lock from now on fails with `refused` (or says the turn closed). */
  close(refused: Failure | undefined): void {
    this.closed ??= refused ?? turnClosed
  }

  /** Whether a write is in flight now. */
  get inFlight(): boolean {
    return this.busy
  }

  private take<A, E>(body: Effect.Effect<A, E>, restore: <X, Y>(e: Effect.Effect<X, Y>) => Effect.Effect<X, Y>): Effect.Effect<A, E | HostCallFailed> {
    return Effect.suspend((): Effect.Effect<A, E | HostCallFailed> => {
      if (this.closed !== undefined) return Effect.fail(new HostCallFailed({ failure: this.closed }))
      if (this.busy) return Effect.zipRight(restore(this.free()), this.take(body, restore))
      this.busy = true
      return Effect.flatMap(Effect.exit(body), (exit) => {
        this.giveBack()
        return exit
      })
    })
  }

  /** Wakes every waiter: each tries again, and the first to run takes the lock. */
  private giveBack() {
    this.busy = false
    if (this.waiters.length === 0) return
    const woken = this.waiters
    this.waiters = []
    for (const wake of woken) wake()
  }

  /** Waits until the lock is given back (at once if it is free). */
  private free(): Effect.Effect<void> {
    return waitFor<void>((resume) => {
      if (!this.busy) {
        resume(Effect.void)
        return () => {}
      }
      const wake = () => resume(Effect.void)
      this.waiters.push(wake)
      return () => {
        const i = this.waiters.indexOf(wake)
        if (i >= 0) this.waiters.splice(i, 1)
      }
    })
  }
}
