/**
 * A round's deadline as its calls watch it (ToolCalls.ts `roundOf`): it ends with success when its
 * time runs out, or is stopped (an interruption, which is no deadline) when the round is over.
 * A call reads it (`unsafePoll`) and is told of its end (`addObserver`, at once if it has ended).
 *
 * On the live Clock it is one host timer (`TimerDeadline`); on any other Clock (a TestClock, which
 * tests drive) it is a fiber sleeping on that Clock, which has the same shape. The timer spares
 * every round of tool calls a forked fiber, its sleep and its interruption and join at the round's
 * end (docs/benchmarks.md, "Host-tool loop and text turn CPU, stop 57").
 */
import { Clock, Duration, Effect, Exit, Fiber, FiberId } from "effect"
import { TIMER_SETTING_MAX_MS } from "../../domain/Limits.js"

export interface Deadline {
  /** How it ended (success: the time ran out), or null while it runs. */
  readonly unsafePoll: () => Exit.Exit<void, unknown> | null
  /** Calls `observer` once it ends: at once if it has. */
  readonly addObserver: (observer: (exit: Exit.Exit<void, unknown>) => void) => void
  readonly removeObserver: (observer: (exit: Exit.Exit<void, unknown>) => void) => void
}

/** A deadline on a host timer: ends with success after `ms` (never past the timer's range, as the live Clock's sleep), or interrupted by `stop`. */
export class TimerDeadline implements Deadline {
  private exit: Exit.Exit<void, unknown> | null = null
  private observers: Array<(exit: Exit.Exit<void, unknown>) => void> = []
  private readonly timer: ReturnType<typeof setTimeout> | undefined

  constructor(ms: number) {
    this.timer = ms <= TIMER_SETTING_MAX_MS ? setTimeout(() => this.end(Exit.void), ms) : undefined
  }

  readonly unsafePoll = (): Exit.Exit<void, unknown> | null => this.exit

  readonly addObserver = (observer: (exit: Exit.Exit<void, unknown>) => void): void => {
    if (this.exit !== null) observer(this.exit)
    else this.observers.push(observer)
  }

  readonly removeObserver = (observer: (exit: Exit.Exit<void, unknown>) => void): void => {
    const i = this.observers.indexOf(observer)
    if (i >= 0) this.observers.splice(i, 1)
  }

  /** Stops it (interrupted: no deadline); nothing if it has ended. */
  stop(): void {
    if (this.exit !== null) return
    clearTimeout(this.timer)
    this.end(Exit.interrupt(FiberId.none))
  }

  private end(exit: Exit.Exit<void, unknown>) {
    if (this.exit !== null) return
    this.exit = exit
    const observers = this.observers
    this.observers = []
    for (const observer of observers) observer(exit)
  }
}

/** The live Clock's sleep: a Clock whose sleep is another (a TestClock) gets a sleeping fiber. */
const liveSleep = Clock.make().sleep

/** Whether `clock` is the live one, whose sleeps are host timers. */
export const isLiveClock = (clock: Clock.Clock): boolean => clock.sleep === liveSleep

/**
 * Deadlines of `ms` each on a Clock that is not the live one (a TestClock), and what stops them
 * all: fibers forked (in the caller's scope) sleeping on it. On the live Clock a round makes its
 * `TimerDeadline`s itself (ToolCalls.ts `roundOf`).
 */
export const sleepingDeadlines = () => {
  const fibers: Array<Fiber.RuntimeFiber<void>> = []
  return {
    make: (ms: number): Effect.Effect<Deadline> =>
      Effect.map(Effect.fork(Effect.sleep(Duration.millis(ms))), (fiber) => {
        fibers.push(fiber)
        return fiber
      }),
    stopAll: Effect.suspend(() => Fiber.interruptAll(fibers))
  }
}
