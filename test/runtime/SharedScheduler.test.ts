/**
 * The server's scheduler (src/SharedScheduler.ts): one run queue for every fiber, drained in
 * microtasks, a timer every so many drains. What fibers rely on from a scheduler: every task runs,
 * in priority order and first in first out within one; fibers that yield take turns; and a program
 * that never stops scheduling still lets timers and I/O in.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { SharedScheduler } from "../../src/SharedScheduler.js"

/** Resolves after the current macrotask and every microtask drain it started. */
const nextMacrotask = () => new Promise<void>((resolve) => setImmediate(resolve))

describe("The shared scheduler", () => {
  it("runs every task once, in ascending order of priority number, first in first out within one", async () => {
    const scheduler = new SharedScheduler()
    const ran: Array<string> = []
    scheduler.scheduleTask(() => ran.push("a0"), 0)
    scheduler.scheduleTask(() => ran.push("b1"), 1)
    scheduler.scheduleTask(() => ran.push("a1"), 0)
    scheduler.scheduleTask(() => {
      ran.push("c-1")
      // A task scheduled by a task runs in the next drain, after this one's.
      scheduler.scheduleTask(() => ran.push("later"), 0)
    }, -1)
    scheduler.scheduleTask(() => ran.push("b2"), 1)
    expect(ran).toEqual([])
    await nextMacrotask()
    expect(ran).toEqual(["c-1", "a0", "a1", "b1", "b2", "later"])
  })

  it("fibers on it that yield take turns, and every one completes", async () => {
    const scheduler = new SharedScheduler()
    const steps: Array<string> = []
    const worker = (name: string) =>
      Effect.forEach([1, 2, 3], (i) => Effect.zipRight(Effect.sync(() => steps.push(`${name}${i}`)), Effect.yieldNow()), { discard: true })
    const program = Effect.gen(function*() {
      const a = yield* Effect.fork(worker("a"))
      const b = yield* Effect.fork(worker("b"))
      yield* Fiber.join(a)
      yield* Fiber.join(b)
      return steps
    })
    const done = await Effect.runPromise(Effect.withScheduler(program, scheduler))
    expect(done).toEqual(["a1", "b1", "a2", "b2", "a3", "b3"])
    const many = await Effect.runPromise(
      Effect.withScheduler(Effect.forEach(Array.from({ length: 500 }, (_, i) => i), (i) => Effect.as(Effect.yieldNow(), i), { concurrency: "unbounded" }), scheduler)
    )
    expect(many).toEqual(Array.from({ length: 500 }, (_, i) => i))
  })

  it("a fiber that never stops yielding still lets a timer in: every few drains go through one", async () => {
    const scheduler = new SharedScheduler(8)
    let timerFired = false
    let spins = 0
    setTimeout(() => (timerFired = true), 0)
    // Only microtasks would never let the timer fire, and this loop would never end.
    const spin: Effect.Effect<number> = Effect.suspend(() =>
      timerFired ? Effect.succeed(spins) : Effect.zipRight(Effect.yieldNow(), Effect.sync(() => spins++)).pipe(Effect.zipRight(spin))
    )
    const n = await Effect.runPromise(Effect.withScheduler(spin, scheduler))
    expect(timerFired).toBe(true)
    expect(n).toBeGreaterThan(0)
  })
})
