/**
 * Interrupting work Brain does not control (an in-process tool, a model layer an application
 * supplies): it runs in a fiber of its own, forked as a daemon so that nothing that ends waits for
 * it, and is interrupted with a bound. Interrupted, it has `graceMs` to end; one that has not by
 * then (uninterruptible code, a finalizer that blocks) is abandoned: left running, its outcome
 * recorded as unconfirmed, and nothing of Brain waits for it any longer (docs/runtime.md,
 * "cancellation").
 */
import { Duration, Effect, Fiber, Option } from "effect"

/** Interrupts `fiber` and waits for it at most `graceMs`: true when it ended within that. */
export const interruptWithin = <A, E>(fiber: Fiber.Fiber<A, E>, graceMs: number): Effect.Effect<boolean> =>
  Effect.zipRight(
    Fiber.interruptFork(fiber),
    Effect.interruptible(Fiber.await(fiber)).pipe(Effect.timeoutOption(Duration.millis(graceMs)), Effect.map(Option.isSome))
  )
