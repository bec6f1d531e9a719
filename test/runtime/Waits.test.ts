/**
 * A wait for a callback (layers/Waits.ts): the first resume ends it; an interruptible waiter that
 * is interrupted runs the undo; an uninterruptible one cannot be interrupted while it waits. A value
 * given once (`Once`) answers every waiter, those before and after it was given, and the first stands.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { Once, waitFor } from "../../src/layers/Waits.js"

/** Real time, whatever the test's clock. */
const pause = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

describe("a wait for a callback", () => {
  it.effect("the first resume ends the wait with its value, also when it comes before register returns", () =>
    Effect.gen(function*() {
      expect(yield* waitFor<number>((resume) => {
        resume(Effect.succeed(1))
        resume(Effect.succeed(2))
        return () => {}
      })).toBe(1)
      let later: ((e: Effect.Effect<string>) => void) | undefined
      const fiber = yield* Effect.fork(waitFor<string>((resume) => {
        later = resume
        return () => {}
      }))
      yield* pause(5)
      later!(Effect.succeed("late"))
      expect(yield* Fiber.join(fiber)).toBe("late")
    }))

  it.effect("an interruptible waiter that is interrupted runs the undo and ends interrupted", () =>
    Effect.gen(function*() {
      let undone = 0
      const fiber = yield* Effect.fork(waitFor<void>(() => () => void undone++))
      yield* pause(5)
      yield* Fiber.interrupt(fiber)
      expect(undone).toBe(1)
    }))

  it.effect("an uninterruptible waiter keeps waiting through an interrupt until it is resumed, and the undo never runs", () =>
    Effect.gen(function*() {
      let undone = 0
      let resume: ((e: Effect.Effect<string>) => void) | undefined
      const fiber = yield* Effect.fork(Effect.uninterruptible(waitFor<string>((r) => {
        resume = r
        return () => void undone++
      })))
      yield* pause(5)
      const interrupting = yield* Effect.fork(Fiber.interrupt(fiber))
      yield* pause(20)
      // Still waiting: the interrupt has not ended it.
      expect(interrupting.unsafePoll()).toBeNull()
      resume!(Effect.succeed("answered"))
      yield* Fiber.join(interrupting)
      expect(undone).toBe(0)
    }))

  it.effect("a value given once answers every waiter, those that waited and those that come after; the first value stands", () =>
    Effect.gen(function*() {
      const once = new Once<string>()
      const early = yield* Effect.forEach([1, 2], () => Effect.fork(once.await))
      yield* pause(5)
      expect(once.isDone).toBe(false)
      expect(once.give("first")).toBe(true)
      expect(once.give("second")).toBe(false)
      for (const w of early) expect(yield* Fiber.join(w)).toBe("first")
      expect(yield* once.await).toBe("first")
      expect(yield* Effect.uninterruptible(once.await)).toBe("first")
    }))

  it.effect("an interrupted waiter of a value given once is no longer woken when it is given", () =>
    Effect.gen(function*() {
      const once = new Once<number>()
      const waiter = yield* Effect.fork(once.await)
      yield* pause(5)
      yield* Fiber.interrupt(waiter)
      expect((once as unknown as { waiters: Set<unknown> }).waiters.size).toBe(0)
      expect(once.give(1)).toBe(true)
    }))
})
