/**
 * The scheduler every fiber of the server runs on: one run queue for the whole process, drained
 * in a microtask, instead of Effect 3.22's default of one queue (and one microtask chain) per
 * fiber.
 *
 * Effect's `MixedScheduler` gives each fiber a runner of its own since 3.20, held in a `WeakMap`
 * keyed by the fiber, so that code run by concurrent fibers keeps its own `AsyncLocalStorage`
 * context: a shared drain runs every fiber's task inside whichever microtask started it. Brain
 * uses no `AsyncLocalStorage`, nor does any library it runs on its main thread, and every fiber it
 * starts (a turn's activation, each tool call of a round, each model call) paid for a runner, a
 * bucket list and a weak-map entry of its own, and each wake-up a microtask of its own.
 *
 * Behaviour otherwise as Effect's: tasks run in ascending order of their priority number, first in
 * first out within one; when one drain's tasks schedule more, the next drain is another microtask,
 * except every `maxNextTickBeforeTimer`-th, which is a `setTimeout` so that I/O and timers get their
 * turn; a fiber yields when Effect's own rule says so (`shouldYield` is the default scheduler's).
 */
import { Scheduler } from "effect"
import type * as Fiber from "effect/Fiber"

export class SharedScheduler implements Scheduler.Scheduler {
  private tasks = new Scheduler.PriorityBuckets()
  private running = false

  constructor(
    /** Consecutive microtask drains before one goes through a timer (Effect's default: 2048). */
    readonly maxNextTickBeforeTimer: number = 2048
  ) {}

  shouldYield(fiber: Fiber.RuntimeFiber<unknown, unknown>): number | false {
    return Scheduler.defaultScheduler.shouldYield(fiber)
  }

  scheduleTask(task: Scheduler.Task, priority: number): void {
    this.tasks.scheduleTask(task, priority)
    if (!this.running) {
      this.running = true
      this.next(0)
    }
  }

  private next(depth: number) {
    if (depth >= this.maxNextTickBeforeTimer) setTimeout(() => this.drain(0), 0)
    else queueMicrotask(() => this.drain(depth + 1))
  }

  private drain(depth: number) {
    const buckets = this.tasks.buckets
    this.tasks.buckets = []
    for (const [, tasks] of buckets) {
      for (let i = 0; i < tasks.length; i++) tasks[i]!()
    }
    if (this.tasks.buckets.length === 0) this.running = false
    else this.next(depth)
  }
}

/** The process's one instance (the server runs its whole program on it). */
export const sharedScheduler = new SharedScheduler()
