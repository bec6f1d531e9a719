/** The working-memory admission (src/layers/WorkingMemory.ts): BRAIN_WORKING_MEMORY_BYTES. */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, FiberId, TestClock } from "effect"
import fc from "fast-check"
import { Overloaded } from "../../src/domain/Errors.js"
import { WorkingMemory } from "../../src/layers/WorkingMemory.js"

const settle = Effect.forEach(Array.from({ length: 50 }), () => Effect.yieldNow(), { discard: true })
const gate = () => Deferred.unsafeMake<void>(FiberId.none)

describe("the working-memory admission", () => {
  it("never holds more than its bound at once; every request runs (one above the bound alone), waiters in the order they came; all is given back", () =>
    fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 100 }),
        fc.array(fc.integer({ min: 0, max: 150 }), { minLength: 1, maxLength: 30 }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 30 }),
        (limit, weights, order) =>
          Effect.runPromise(Effect.gen(function*() {
            const memory = new WorkingMemory(limit, 600_000)
            let peak = 0
            const started: Array<number> = []
            const gates = weights.map(gate)
            const fibers = yield* Effect.forEach(weights, (w, i) =>
              Effect.fork(memory.holding(w, "a test", () =>
                Effect.gen(function*() {
                  started.push(i)
                  peak = Math.max(peak, memory.held)
                  yield* Deferred.await(gates[i]!)
                }))))
            yield* settle
            const waited = weights.map((_, i) => i).filter((i) => !started.includes(i))
            expect(memory.waiting).toBe(waited.length)
            // Those running end in any order; each end lets the waiters at the head in.
            const pending = weights.map((_, i) => i)
            for (let k = 0; pending.length > 0; k++) {
              const running = pending.filter((i) => started.includes(i))
              const i = running[(order[k % order.length] ?? 0) % running.length]!
              pending.splice(pending.indexOf(i), 1)
              yield* Deferred.succeed(gates[i]!, undefined)
              yield* settle
            }
            yield* Effect.forEach(fibers, Fiber.join, { discard: true })
            expect(peak).toBeLessThanOrEqual(limit)
            expect([...started].sort((a, b) => a - b)).toEqual(weights.map((_, i) => i))
            expect(started.filter((i) => waited.includes(i))).toEqual(waited)
            expect(memory.held).toBe(0)
            expect(memory.waiting).toBe(0)
          }))
      ),
      { numRuns: 300 }
    ))

  it.effect("a small request does not overtake a large one waiting before it, though it would fit", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 600_000)
      const first = gate()
      const order: Array<string> = []
      const a = yield* Effect.fork(memory.holding(60, "a", () => Effect.zipRight(Effect.sync(() => void order.push("a")), Deferred.await(first))))
      yield* settle
      const b = yield* Effect.fork(memory.holding(60, "b", () => Effect.sync(() => void order.push("b"))))
      yield* settle
      const c = yield* Effect.fork(memory.holding(10, "c", () => Effect.sync(() => void order.push("c"))))
      yield* settle
      expect(order).toEqual(["a"])
      expect(memory.waiting).toBe(2)
      yield* Deferred.succeed(first, undefined)
      yield* Effect.forEach([a, b, c], Fiber.join, { discard: true })
      // Granted together once a is done (b and c fit side by side then).
      expect([...order].sort()).toEqual(["a", "b", "c"])
      expect(memory.held).toBe(0)
    }))

  it.effect("a request larger than the whole bound takes the whole bound and runs alone, after those before it", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 600_000)
      const first = gate()
      const a = yield* Effect.fork(memory.holding(30, "a", () => Deferred.await(first)))
      yield* settle
      let heldDuring = -1
      const big = yield* Effect.fork(memory.holding(10_000, "big", () => Effect.sync(() => void (heldDuring = memory.held))))
      yield* settle
      expect(heldDuring).toBe(-1)
      yield* Deferred.succeed(first, undefined)
      yield* Fiber.join(a)
      yield* Fiber.join(big)
      expect(heldDuring).toBe(100)
      expect(memory.held).toBe(0)
    }))

  it.effect("a wait past its bound is refused 503 overloaded, retryable, naming BRAIN_WORKING_MEMORY_BYTES; it ran nothing and holds nothing, and those behind it move up", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 10_000)
      const first = gate()
      const a = yield* Effect.fork(memory.holding(90, "a", () => Deferred.await(first)))
      yield* settle
      let ran = false
      const b = yield* Effect.fork(memory.holding(50, "a session open", () => Effect.sync(() => void (ran = true))))
      yield* settle
      yield* TestClock.adjust("9 seconds")
      expect(memory.waiting).toBe(1)
      yield* TestClock.adjust("2 seconds")
      const exit = yield* Fiber.await(b)
      expect(ran).toBe(false)
      expect(Exit.isFailure(exit)).toBe(true)
      const error = Exit.isFailure(exit) ? (exit.cause as any).error : undefined
      expect(error?._tag).toBe("Overloaded")
      expect(error?.code).toBe("overloaded")
      expect(error?.retryable).toBe(true)
      expect(error?.message).toContain("BRAIN_WORKING_MEMORY_BYTES")
      expect(memory.waiting).toBe(0)
      expect(memory.held).toBe(90)
      yield* Deferred.succeed(first, undefined)
      yield* Fiber.join(a)
      expect(memory.held).toBe(0)
    }))

  it.effect("a wait in an uninterruptible region (a session's shared open) still ends at its bound", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 10_000)
      const first = gate()
      const a = yield* Effect.fork(memory.holding(100, "a", () => Deferred.await(first)))
      yield* settle
      const b = yield* Effect.fork(Effect.uninterruptible(memory.holding(1, "b", () => Effect.void)))
      yield* settle
      yield* TestClock.adjust("11 seconds")
      const exit = yield* Fiber.await(b)
      expect(Exit.isFailure(exit) && (exit.cause as any).error?._tag).toBe("Overloaded")
      expect(memory.waiting).toBe(0)
      yield* Deferred.succeed(first, undefined)
      yield* Fiber.join(a)
      expect(memory.held).toBe(0)
    }))

  it.effect("a wait cut short (a stop's drain beginning) fails with the cut's refusal at once, in an uninterruptible region too; it ran nothing and holds nothing, those behind it move up; a wait whose cut never comes is granted as any other", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 600_000)
      const first = gate()
      const cut = gate()
      const refusal = new Overloaded({ message: "stopping" })
      const cutShort = Effect.zipRight(Deferred.await(cut), Effect.fail(refusal))
      const a = yield* Effect.fork(memory.holding(90, "a", () => Deferred.await(first)))
      yield* settle
      let ran = false
      const b = yield* Effect.fork(Effect.uninterruptible(memory.holding(50, "b", () => Effect.sync(() => void (ran = true)), undefined, cutShort)))
      const c = yield* Effect.fork(memory.holding(10, "c", () => Effect.void))
      yield* settle
      expect(memory.waiting).toBe(2)
      yield* Deferred.succeed(cut, undefined)
      const exit = yield* Fiber.await(b)
      expect(exit).toEqual(Exit.fail(refusal))
      expect(ran).toBe(false)
      // c, behind b, fits beside a once b has gone.
      yield* Fiber.join(c)
      expect(memory.waiting).toBe(0)
      expect(memory.held).toBe(90)
      // A cut that never comes: the wait is granted once a gives its share back.
      const later = gate()
      const d = yield* Effect.fork(memory.holding(50, "d", () => Deferred.await(later), undefined, Effect.zipRight(Deferred.await(gate()), Effect.fail(refusal))))
      yield* Deferred.succeed(first, undefined)
      yield* Fiber.join(a)
      yield* settle
      expect(memory.held).toBe(50)
      yield* Deferred.succeed(later, undefined)
      yield* Fiber.join(d)
      expect(memory.held).toBe(0)
    }))

  it.effect("a request that must not wait (holdingNow) runs at once when it fits and nobody waits before it, else runs nothing and holds nothing; what it takes is given back, or kept as `keep` says", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 600_000)
      const first = gate()
      const a = yield* Effect.fork(memory.holding(60, "a", () => Deferred.await(first)))
      yield* settle
      expect(yield* memory.holdingNow(30, () => Effect.succeed("ran"))).toBe("ran")
      expect(memory.held).toBe(60)
      expect(yield* memory.holdingNow(50, () => Effect.succeed("ran"))).toBeUndefined()
      // A waiter before it: a request that would fit does not overtake it.
      const b = yield* Effect.fork(memory.holding(50, "b", () => Effect.void))
      yield* settle
      expect(memory.waiting).toBe(1)
      expect(yield* memory.holdingNow(10, () => Effect.succeed("ran"))).toBeUndefined()
      expect(memory.held).toBe(60)
      yield* Deferred.succeed(first, undefined)
      yield* Fiber.join(a)
      yield* Fiber.join(b)
      expect(memory.held).toBe(0)
      const kept = yield* memory.holdingNow(40, (held) => Effect.succeed(held), () => true)
      expect(memory.held).toBe(40)
      kept!.release()
      expect(memory.held).toBe(0)
      expect(Exit.isFailure(yield* Effect.exit(memory.holdingNow(40, () => Effect.fail("no"))))).toBe(true)
      expect(memory.held).toBe(0)
    }))

  it.effect("what is taken is given back when the work fails, dies or is interrupted, and when a waiter is interrupted", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 600_000)
      yield* Effect.either(memory.holding(50, "f", () => Effect.fail("no")))
      expect(memory.held).toBe(0)
      yield* Effect.exit(memory.holding(50, "d", () => Effect.die("bug")))
      expect(memory.held).toBe(0)
      const running = yield* Effect.fork(memory.holding(80, "i", () => Effect.never))
      yield* settle
      expect(memory.held).toBe(80)
      const waiting = yield* Effect.fork(memory.holding(80, "w", () => Effect.void))
      yield* settle
      expect(memory.waiting).toBe(1)
      yield* Fiber.interrupt(waiting)
      expect(memory.waiting).toBe(0)
      expect(memory.held).toBe(80)
      yield* Fiber.interrupt(running)
      expect(memory.held).toBe(0)
    }))

  it.effect("an interruption racing the grant gives the granted bytes back", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 600_000)
      const first = gate()
      const a = yield* Effect.fork(memory.holding(100, "a", () => Deferred.await(first)))
      yield* settle
      const b = yield* Effect.fork(memory.holding(100, "b", () => Effect.never))
      yield* settle
      // The grant to b and b's interruption in the same step.
      yield* Effect.sync(() => Deferred.unsafeDone(first, Exit.void))
      yield* Fiber.interrupt(b)
      yield* Fiber.join(a)
      yield* settle
      expect(memory.held).toBe(0)
      expect(memory.waiting).toBe(0)
    }))

  it.effect("work that keeps its bytes holds them until it releases them; a release twice gives them back once", () =>
    Effect.gen(function*() {
      const memory = new WorkingMemory(100, 600_000)
      const held = yield* memory.holding(40, "k", (h) => Effect.succeed(h), () => true)
      expect(memory.held).toBe(40)
      held.release()
      held.release()
      expect(memory.held).toBe(0)
      const refused = yield* Effect.either(memory.holding(40, "k", () => Effect.fail("no"), () => true))
      expect(refused._tag).toBe("Left")
      expect(memory.held).toBe(0)
    }))
})
