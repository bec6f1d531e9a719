/**
 * A round's deadline (src/layers/sessions/Deadline.ts): on the live Clock a host timer, on any
 * other Clock (a TestClock) a fiber sleeping on it. Either way it ends with success when its time
 * runs out and interrupted (no deadline) when the round stops it, and every observer hears its
 * end once: one added before, and one added after (at once).
 */
import { describe, expect, it } from "vitest"
import { Clock, Effect, Exit, Fiber, TestClock, TestContext } from "effect"
import { type Deadline, isLiveClock, sleepingDeadlines, TimerDeadline } from "../../src/layers/sessions/Deadline.js"

const heard = (deadline: Deadline) => {
  const exits: Array<Exit.Exit<void, unknown>> = []
  deadline.addObserver((exit) => void exits.push(exit))
  return exits
}

describe("a round's deadline", () => {
  it("the live Clock is told apart from a TestClock, which gets sleeping fibers", async () => {
    expect(isLiveClock(Clock.make())).toBe(true)
    expect(isLiveClock(await Effect.runPromise(Effect.clock))).toBe(true)
    expect(await Effect.runPromise(Effect.map(Effect.clock, isLiveClock).pipe(Effect.provide(TestContext.TestContext)))).toBe(false)
  })

  it("a timer deadline ends with success once its time runs out, each observer hearing it once", async () => {
    const deadline = new TimerDeadline(5)
    const before = heard(deadline)
    expect(deadline.unsafePoll()).toBeNull()
    await new Promise<void>((resolve) => deadline.addObserver(() => resolve()))
    expect(before).toEqual([Exit.void])
    expect(deadline.unsafePoll()).toEqual(Exit.void)
    // Added after its end: told at once.
    expect(heard(deadline)).toEqual([Exit.void])
    // A stop after the end changes nothing.
    deadline.stop()
    expect(deadline.unsafePoll()).toEqual(Exit.void)
    expect(before).toHaveLength(1)
  })

  it("a timer deadline stopped before its time ends interrupted, and its timer never fires", async () => {
    const deadline = new TimerDeadline(5)
    const before = heard(deadline)
    const removed: Array<unknown> = []
    const observer = (exit: Exit.Exit<void, unknown>) => void removed.push(exit)
    deadline.addObserver(observer)
    deadline.removeObserver(observer)
    deadline.stop()
    expect(before).toHaveLength(1)
    expect(Exit.isInterrupted(before[0]!)).toBe(true)
    // Past its time: still interrupted, heard once; the removed observer heard nothing.
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect(before).toHaveLength(1)
    expect(Exit.isInterrupted(deadline.unsafePoll()!)).toBe(true)
    expect(removed).toEqual([])
  })

  it("on a TestClock is a fiber sleeping on it: it ends when the test moves the Clock, and a stop interrupts the rest", async () => {
    const result = await Effect.runPromise(
      Effect.scoped(Effect.gen(function*() {
        const clock = yield* Effect.clock
        expect(isLiveClock(clock)).toBe(false)
        const deadlines = sleepingDeadlines()
        const short = yield* deadlines.make(100)
        const long = yield* deadlines.make(1_000)
        expect(Fiber.isFiber(short)).toBe(true)
        const shortHeard = heard(short)
        const longHeard = heard(long)
        yield* TestClock.adjust(99)
        const early = [short.unsafePoll(), long.unsafePoll()]
        yield* TestClock.adjust(1)
        yield* Effect.yieldNow()
        const shortAfter = short.unsafePoll()
        yield* deadlines.stopAll
        return { early, shortAfter, shortHeard, longHeard, longAfter: long.unsafePoll() }
      })).pipe(Effect.provide(TestContext.TestContext))
    )
    expect(result.early).toEqual([null, null])
    expect(result.shortAfter).toEqual(Exit.void)
    expect(result.shortHeard).toEqual([Exit.void])
    expect(result.longHeard).toHaveLength(1)
    expect(Exit.isInterrupted(result.longHeard[0]!)).toBe(true)
    expect(Exit.isInterrupted(result.longAfter!)).toBe(true)
  })
})
