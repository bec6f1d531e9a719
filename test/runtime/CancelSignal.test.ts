/**
 * The turn's cancel signal and the waits that race it (src/layers/sessions/Cell.ts): whichever of
 * a fiber's exit, the turn's cancel and a deadline comes first answers the wait, the first cancel
 * reason stands, and no wait leaves its callback on the signal or its observers on the fibers.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, TestClock } from "effect"
import { cancelSignal, cancelTurn, exitOrCancel, type RunningTurn } from "../../src/layers/sessions/Cell.js"
import type { TurnOutcome } from "../../src/services/Sessions.js"
import { Once } from "../../src/layers/Waits.js"

const turnWith = () =>
  ({
    sequence: 1,
    done: new Once<TurnOutcome>(),
    closed: new Once<void>(),
    signal: cancelSignal()
  }) satisfies RunningTurn

describe("the turn's cancel signal", () => {
  it.effect("a fiber that ends first answers the wait with its exit, and leaves no callback on the signal", () =>
    Effect.gen(function*() {
      const turn = turnWith()
      const fiber = yield* Effect.fork(Effect.succeed(7))
      const first = yield* exitOrCancel(fiber, turn.signal)
      expect(first).toEqual({ _tag: "done", exit: Exit.succeed(7) })
      expect(turn.signal.listeners.size).toBe(0)
    }))

  it.effect("a cancel answers every wait on the signal with the first reason, and the later reason does not replace it", () =>
    Effect.gen(function*() {
      const turn = turnWith()
      const never = yield* Effect.fork(Effect.never)
      const waits = yield* Effect.forEach([1, 2, 3], () => Effect.fork(exitOrCancel(never, turn.signal)))
      yield* Effect.yieldNow()
      expect(turn.signal.listeners.size).toBe(3)
      expect(yield* cancelTurn(turn, "cancelled")).toBe(true)
      expect(yield* cancelTurn(turn, "timeout")).toBe(false)
      for (const w of waits) expect(yield* Fiber.join(w)).toEqual({ _tag: "cancel", reason: "cancelled" })
      expect(turn.signal.reason).toBe("cancelled")
      expect(turn.signal.listeners.size).toBe(0)
      // A wait that starts after the cancel is answered at once.
      expect(yield* exitOrCancel(never, turn.signal)).toEqual({ _tag: "cancel", reason: "cancelled" })
      yield* Fiber.interrupt(never)
    }))

  it.effect("a deadline on the Clock answers the wait when it passes first", () =>
    Effect.gen(function*() {
      const turn = turnWith()
      const never = yield* Effect.fork(Effect.never)
      const deadline = yield* Effect.fork(Effect.sleep(Duration.millis(500)))
      const wait = yield* Effect.fork(exitOrCancel(never, turn.signal, deadline))
      yield* TestClock.adjust(Duration.millis(499))
      expect(wait.unsafePoll()).toBeNull()
      yield* TestClock.adjust(Duration.millis(1))
      expect(yield* Fiber.join(wait)).toEqual({ _tag: "deadline" })
      expect(turn.signal.listeners.size).toBe(0)
      yield* Fiber.interrupt(never)
    }))

  it.effect("an interrupted wait takes its callback off the signal", () =>
    Effect.gen(function*() {
      const turn = turnWith()
      const never = yield* Effect.fork(Effect.never)
      const wait = yield* Effect.fork(exitOrCancel(never, turn.signal))
      yield* Effect.yieldNow()
      expect(turn.signal.listeners.size).toBe(1)
      yield* Fiber.interrupt(wait)
      expect(turn.signal.listeners.size).toBe(0)
      yield* Fiber.interrupt(never)
    }))
  it.effect("an interrupted wait runs its onInterrupted after taking its callbacks off, once; a wait answered (or after a cancel) never runs it", () =>
    Effect.gen(function*() {
      const turn = turnWith()
      const never = yield* Effect.fork(Effect.never)
      const ran: Array<number> = []
      const onInterrupted = Effect.sync(() => void ran.push(turn.signal.listeners.size))
      const wait = yield* Effect.fork(exitOrCancel(never, turn.signal, undefined, onInterrupted))
      yield* Effect.yieldNow()
      expect(turn.signal.listeners.size).toBe(1)
      yield* Fiber.interrupt(wait)
      // It ran once, with the wait's callback already off the signal.
      expect(ran).toEqual([0])
      const done = yield* Effect.fork(Effect.succeed(1))
      expect(yield* exitOrCancel(done, turn.signal, undefined, onInterrupted)).toEqual({ _tag: "done", exit: Exit.succeed(1) })
      yield* cancelTurn(turn, "cancelled")
      expect(yield* exitOrCancel(never, turn.signal, undefined, onInterrupted)).toEqual({ _tag: "cancel", reason: "cancelled" })
      expect(ran).toEqual([0])
      yield* Fiber.interrupt(never)
    }))
})
