/**
 * The bound on SSE catch-up pages held (src/layers/sessions/HeldPages.ts): a page may be read while
 * what is held is below the bound; a reader held back waits in line holding nothing, is let try
 * when a page is given back, and leaves the line when interrupted; what is given back is given
 * back once, whatever calls it again.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { HeldPages } from "../../src/layers/sessions/HeldPages.js"

describe("held SSE catch-up pages", () => {
  it.effect("reads wait while the bound is reached, one is let try per page given back, a release counts once", () =>
    Effect.gen(function*() {
      const pages = new HeldPages(100)
      yield* pages.whenRoom
      const first = pages.take(60)
      yield* pages.whenRoom
      const second = pages.take(60)
      expect(pages.held).toBe(120)
      expect(pages.room).toBe(false)
      let woken = 0
      const waiters = yield* Effect.forEach([0, 1], () => Effect.fork(Effect.map(pages.whenRoom, () => void woken++)))
      yield* Effect.yieldNow()
      expect(woken).toBe(0)
      first()
      first()
      expect(pages.held).toBe(60)
      yield* Fiber.join(waiters[0]!)
      expect(woken).toBe(1)
      // The second is let try only when the first is done with its turn (next) or more is given back.
      pages.next()
      yield* Fiber.join(waiters[1]!)
      expect(woken).toBe(2)
      second()
      expect(pages.held).toBe(0)
    }))

  it.effect("a waiter interrupted leaves the line", () =>
    Effect.gen(function*() {
      const pages = new HeldPages(10)
      const all = pages.take(10)
      const gone = yield* Effect.fork(pages.whenRoom)
      const stays = yield* Effect.fork(pages.whenRoom)
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(gone)
      all()
      yield* Fiber.join(stays)
      expect(pages.held).toBe(0)
    }))
})
