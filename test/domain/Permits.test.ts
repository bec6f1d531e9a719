/**
 * Permits (src/domain/Permits.ts): at most `permits` run at once; a freed permit goes to the next
 * waiter alone, in order of arrival (Effect's Semaphore woke every waiter at each release, and each
 * that found none waited again deeper in its fiber's stack); a waiter interrupted leaves the line,
 * and a permit handed to one as it was interrupted goes on to the next.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { Permits } from "../../src/domain/Permits.js"

describe("permits", () => {
  it.effect("500 waiters on 2 permits run in order of arrival, never more than 2 at once, each release waking one", () =>
    Effect.gen(function*() {
      const permits = new Permits(2)
      let running = 0
      let most = 0
      const order: Array<number> = []
      const gates = Array.from({ length: 500 }, () => Deferred.unsafeMake<void>(undefined as never))
      const fibers = yield* Effect.forEach(gates, (gate, i) =>
        Effect.fork(permits.withPermit(Effect.gen(function*() {
          running++
          most = Math.max(most, running)
          order.push(i)
          yield* Deferred.await(gate)
          running--
        }))))
      yield* Effect.yieldNow()
      expect(permits.waiting).toBe(498)
      for (let i = 0; i < gates.length; i++) {
        yield* Deferred.succeed(gates[i]!, undefined)
        yield* Effect.yieldNow()
        // One release, one waiter taken: the line shrinks by one.
        expect(permits.waiting).toBe(Math.max(0, 498 - i - 1))
      }
      yield* Fiber.joinAll(fibers)
      expect(most).toBe(2)
      expect(order).toEqual(Array.from({ length: 500 }, (_, i) => i))
    }))

  it.effect("an interrupted waiter leaves the line; the permits stay whole", () =>
    Effect.gen(function*() {
      const permits = new Permits(1)
      const hold = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(permits.withPermit(Deferred.await(hold)))
      yield* Effect.yieldNow()
      const waiter = yield* Effect.fork(permits.withPermit(Effect.void))
      const next = yield* Effect.fork(permits.withPermit(Effect.succeed("ran")))
      yield* Effect.yieldNow()
      expect(permits.waiting).toBe(2)
      yield* Fiber.interrupt(waiter)
      expect(permits.waiting).toBe(1)
      yield* Deferred.succeed(hold, undefined)
      yield* Fiber.join(holder)
      expect(yield* Fiber.join(next)).toBe("ran")
      // Both permits' worth free again: one runs at once.
      expect(yield* permits.withPermit(Effect.succeed(1))).toBe(1)
      expect(permits.waiting).toBe(0)
    }))
})
