/**
 * A round of calls run at once, as a tool dispatch runs its calls: each in a fiber of its own,
 * the results in the calls' order. What `Effect.forEach(…, { concurrency: "unbounded" })` does,
 * without the fiber it adds to drive the others, its wrappers around every element and its merge
 * of every child's FiberRefs into the caller's (the calls set none that the caller reads).
 *
 * - The first call to fail (or die) interrupts the calls still running; the round fails with that
 *   cause once every call has ended, so nothing of the round is still running when it answers.
 * - An interrupted round interrupts every call and waits until each has stopped.
 *
 * - It starts ROUND_FORKS_PER_TURN calls, then lets the event loop turn before it starts more.
 *
 * Each call runs with the interruptibility the round was entered with. A round entered inside an
 * uninterruptible region (the fence's, whose calls each restore only their dispatch) is given that
 * region's `restore` as `awaitWith`, so that its wait, and only its wait, can be interrupted.
 */
import { Effect, Exit, Fiber, type FiberId } from "effect"
import { eventLoopTurn } from "../Waits.js"

/** Calls. A round starts this many, then lets the event loop turn once before it starts more. */
export const ROUND_FORKS_PER_TURN = 32

/** An uninterruptible region's `restore`. */
export type Restore = <X, Y, Z>(effect: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>

export const runRound = <A, E>(calls: ReadonlyArray<Effect.Effect<A, E>>, awaitWith?: Restore): Effect.Effect<Array<A>, E> => {
  if (calls.length === 0) return Effect.succeed([])
  return Effect.uninterruptibleMask((restore) =>
    Effect.fiberIdWith((self) => {
      const fibers: Array<Fiber.RuntimeFiber<A, E>> = []
      /**
       * Forks the calls from the i-th on, one after another; nothing can interrupt between two
       * forks. After each ROUND_FORKS_PER_TURN, the event loop turns once (the calls forked so far
       * run meanwhile, up to their first wait): a round of hundreds of calls does not hold the main
       * thread, and its sockets, from its first call to its last.
       */
      const forkFrom = (i: number): Effect.Effect<Array<A>, E> =>
        i === calls.length
          ? (awaitWith ?? restore)(awaitAll(fibers, self))
          : i > 0 && i % ROUND_FORKS_PER_TURN === 0
          ? Effect.zipRight(eventLoopTurn, forkOne(i))
          : forkOne(i)
      const forkOne = (i: number): Effect.Effect<Array<A>, E> =>
        Effect.flatMap(Effect.fork(restore(calls[i]!)), (fiber) => {
          fibers.push(fiber)
          return forkFrom(i + 1)
        })
      return forkFrom(0)
    })
  )
}

const awaitAll = <A, E>(fibers: ReadonlyArray<Fiber.RuntimeFiber<A, E>>, self: FiberId.FiberId) =>
  Effect.async<Array<A>, E>((resume) => {
    const results = new Array<A>(fibers.length)
    let left = fibers.length
    let failed: Exit.Exit<never, E> | undefined
    fibers.forEach((fiber, i) =>
      fiber.addObserver((exit) => {
        if (Exit.isSuccess(exit)) results[i] = exit.value
        else if (failed === undefined) {
          failed = Exit.failCause(exit.cause)
          for (const other of fibers) if (other !== fiber) other.unsafeInterruptAsFork(self)
        }
        if (--left === 0) resume(failed ?? Effect.succeed(results))
      })
    )
    // The round interrupted: every call too, and the round ends once they all have.
    return Fiber.interruptAllAs(fibers, self)
  })
