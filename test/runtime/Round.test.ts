/**
 * A round of calls run at once (sessions/Round.ts), as a tool dispatch runs its calls: every call
 * in a fiber of its own, results in order; the first failure stops the others and is the round's,
 * but only once every call has ended; an interrupted round interrupts every call and waits for it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber } from "effect"
import { ROUND_FORKS_PER_TURN, runRound } from "../../src/layers/sessions/Round.js"

/** Real time, whatever the test's clock. */
const pause = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

describe("a round of calls run at once", () => {
  it.live("a large round yields to the event loop while it starts its calls: I/O waiting since before it runs between them, not after them all", () =>
    Effect.gen(function*() {
      const n = 8 * ROUND_FORKS_PER_TURN
      const order: Array<string> = []
      const call = (i: number) =>
        Effect.sync(() => {
          // The first call asks for a callback the event loop runs once the main thread lets it (as a socket's would).
          if (i === 0) setImmediate(() => order.push("io"))
          order.push(`call ${i}`)
          return i
        })
      const results = yield* runRound(Array.from({ length: n }, (_, i) => call(i)))
      expect(results).toEqual(Array.from({ length: n }, (_, i) => i))
      const io = order.indexOf("io")
      expect(io).toBeGreaterThan(0)
      // The round's own turn was asked for before the first call ran: the callback comes after at most two batches.
      expect(io).toBeLessThanOrEqual(2 * ROUND_FORKS_PER_TURN + 1)
    }))

  it.effect("no calls answer an empty array", () =>
    Effect.gen(function*() {
      expect(yield* runRound([])).toEqual([])
    }))

  it.effect("every call runs at the same time as the others and the results keep the calls' order", () =>
    Effect.gen(function*() {
      // Each call waits until all three have started: a round that ran them one by one never ends.
      const started = { n: 0 }
      const all = yield* Deferred.make<void>()
      const call = (i: number, ms: number) =>
        Effect.gen(function*() {
          if (++started.n === 3) yield* Deferred.succeed(all, undefined)
          yield* Deferred.await(all)
          yield* pause(ms)
          return i
        })
      const results = yield* runRound([call(0, 30), call(1, 1), call(2, 15)]).pipe(Effect.timeout("2 seconds"))
      expect(results).toEqual([0, 1, 2])
    }))

  it.effect("the first failure interrupts the calls still running, and the round fails with it only after they have ended", () =>
    Effect.gen(function*() {
      const ended: Array<string> = []
      const slow = (name: string) =>
        pause(5_000).pipe(Effect.as(name), Effect.onInterrupt(() => pause(20).pipe(Effect.zipRight(Effect.sync(() => void ended.push(name))))))
      const failing = pause(5).pipe(Effect.zipRight(Effect.fail("boom" as const)))
      // Run in this fiber (no timeout around it: that would run it in a child fiber, whose end waits for its own children anyway).
      const done = yield* Effect.either(runRound<string, "boom">([slow("a"), failing, slow("b")]))
      expect(done._tag).toBe("Left")
      if (done._tag === "Left") expect(done.left).toBe("boom")
      // Both finalizers ran before the round answered.
      expect(ended.sort()).toEqual(["a", "b"])
    }))

  it.effect("a failure after another call has answered is still the round's failure", () =>
    Effect.gen(function*() {
      const quick = Effect.succeed(1)
      const failing = pause(5).pipe(Effect.zipRight(Effect.fail("late" as const)))
      const exit = yield* Effect.exit(runRound<number, "late">([quick, failing]))
      expect(Exit.isFailure(exit) && Cause.failureOption(exit.cause)._tag === "Some").toBe(true)
    }))

  it.effect("a defect in a call is the round's defect", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(runRound([Effect.succeed(1), Effect.dieMessage("broken")]))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
    }))

  it.effect("interrupting the round interrupts every call and waits until each has stopped, before the caller's own finalizers run", () =>
    Effect.gen(function*() {
      const ended: Array<number> = []
      let seenByFinalizer: Array<number> | undefined
      const running = yield* Deferred.make<void>()
      const call = (i: number) =>
        Effect.zipRight(
          i === 1 ? Deferred.succeed(running, undefined) : Effect.void,
          Effect.never.pipe(Effect.onInterrupt(() => pause(20).pipe(Effect.zipRight(Effect.sync(() => void ended.push(i))))))
        )
      const fiber = yield* Effect.fork(
        runRound([call(0), call(1), call(2)]).pipe(Effect.ensuring(Effect.sync(() => void (seenByFinalizer = [...ended].sort()))))
      )
      yield* Deferred.await(running)
      yield* pause(5)
      yield* Fiber.interrupt(fiber)
      expect(seenByFinalizer).toEqual([0, 1, 2])
    }))
})
