/**
 * An activation's writes one at a time (sessions/Writes.ts): a write waits for the one in flight;
 * the lock is given back however a write ends; an interrupted waiter never holds it; a write,
 * once started, runs to its end even if its caller is interrupted; once the turn has closed them,
 * no write runs.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Exit, Fiber } from "effect"
import { failure } from "../../src/domain/Failure.js"
import { Writes } from "../../src/layers/sessions/Writes.js"

/** Real time, whatever the test's clock. */
const pause = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

/** Yields until `ready()` holds (bounded, so a broken write fails the test rather than hanging it). */
const until = (ready: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 10_000 && !ready(); i++) yield* pause(1)
    expect(ready()).toBe(true)
  })

/** Waits until `fiber` is suspended (waiting behind the write in flight). */
const suspended = <A, E>(fiber: Fiber.RuntimeFiber<A, E>) =>
  Effect.gen(function*() {
    let status = yield* Fiber.status(fiber)
    for (let i = 0; i < 10_000 && status._tag !== "Suspended"; i++) {
      yield* pause(1)
      status = yield* Fiber.status(fiber)
    }
    expect(status._tag).toBe("Suspended")
  })

describe("an activation's writes, one at a time", () => {
  it.live("a write waits until the one in flight has ended, and writes run in the order they came", () =>
    Effect.gen(function*() {
      const writes = new Writes()
      const log: Array<string> = []
      const release = yield* Deferred.make<void>()
      const write = (name: string, wait: Effect.Effect<void>) =>
        writes.run(Effect.gen(function*() {
          log.push(`${name} starts`)
          yield* wait
          log.push(`${name} ends`)
          return name
        }))
      const a = yield* Effect.fork(write("a", Deferred.await(release)))
      yield* until(() => log.includes("a starts"))
      const b = yield* Effect.fork(write("b", pause(1)))
      const c = yield* Effect.fork(write("c", pause(1)))
      // Both wait behind `a`, which is held until they do: no timing decides the order.
      yield* suspended(b)
      yield* suspended(c)
      yield* Deferred.succeed(release, undefined)
      // Bounded: a lock never given back fails here rather than hanging the suite.
      const join = <A, E>(f: Fiber.RuntimeFiber<A, E>) => Fiber.join(f).pipe(Effect.timeout("2 seconds"))
      expect(yield* join(a)).toBe("a")
      expect(yield* join(b)).toBe("b")
      expect(yield* join(c)).toBe("c")
      expect(log.slice(0, 3)).toEqual(["a starts", "a ends", "b starts"])
      // Never two at once.
      for (let i = 0; i < log.length; i += 2) expect(log[i + 1]).toBe(log[i]!.replace("starts", "ends"))
      expect(writes.inFlight).toBe(false)
    }))

  it.live("a write that fails or dies gives the lock back", () =>
    Effect.gen(function*() {
      const writes = new Writes()
      const failed = yield* Effect.exit(writes.run(Effect.fail("refused" as const)))
      expect(Exit.isFailure(failed)).toBe(true)
      const died = yield* Effect.exit(writes.run(Effect.dieMessage("broken")))
      expect(Exit.isFailure(died)).toBe(true)
      expect(writes.inFlight).toBe(false)
      expect(yield* writes.run(Effect.succeed(1)).pipe(Effect.timeout("1 second"))).toBe(1)
    }))

  it.live("an interrupted waiter neither runs its write nor keeps the lock from the next one", () =>
    Effect.gen(function*() {
      const writes = new Writes()
      const release = yield* Deferred.make<void>()
      const first = yield* Effect.fork(writes.run(Deferred.await(release)))
      yield* pause(5)
      let ran = false
      const waiter = yield* Effect.fork(writes.run(Effect.sync(() => void (ran = true))))
      yield* pause(5)
      yield* Fiber.interrupt(waiter)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(first).pipe(Effect.timeout("2 seconds"))
      expect(ran).toBe(false)
      expect(writes.inFlight).toBe(false)
      expect(yield* writes.run(Effect.succeed("next")).pipe(Effect.timeout("1 second"))).toBe("next")
    }))

  it.live("a write once started runs to its end when its caller is interrupted, and the caller waits for it", () =>
    Effect.gen(function*() {
      const writes = new Writes()
      let ended = false
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(writes.run(Effect.gen(function*() {
        yield* Deferred.succeed(started, undefined)
        yield* pause(20)
        ended = true
      })))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      expect(ended).toBe(true)
      expect(writes.inFlight).toBe(false)
    }))

  it.live("once closed, a write waiting behind the one in flight is refused with the close's failure, its body never run, and so is every later one; the one in flight ends", () =>
    Effect.gen(function*() {
      const writes = new Writes()
      const ran: Array<string> = []
      const release = yield* Deferred.make<void>()
      const write = (name: string, wait: Effect.Effect<void>) =>
        writes.run(Effect.sync(() => void ran.push(name)).pipe(Effect.zipRight(wait), Effect.as(name)))
      const inFlight = yield* Effect.fork(write("in flight", Deferred.await(release)))
      yield* until(() => ran.includes("in flight"))
      const waiting = yield* Effect.fork(Effect.either(write("waiting", pause(1))))
      yield* suspended(waiting)
      // Closed while the first is still held in flight and the second waits behind it.
      writes.close(failure("cancelled", "the turn was cancelled"))
      yield* Deferred.succeed(release, undefined)
      expect(yield* Fiber.join(inFlight).pipe(Effect.timeout("2 seconds"))).toBe("in flight")
      const refused = yield* Fiber.join(waiting).pipe(Effect.timeout("2 seconds"))
      expect(Either.isLeft(refused) && refused.left.failure.code).toBe("cancelled")
      const later = yield* Effect.either(write("later", pause(1)))
      expect(Either.isLeft(later) && later.left.failure.code).toBe("cancelled")
      expect(ran).toEqual(["in flight"])
    }))
})
