import { Effect } from "effect"

/**
 * The pool's compute slots: a counting semaphore whose take is synchronous when a slot is free
 * (`tryTake`), as it is on most host calls' answers, so the common path costs no fiber
 * suspension. Waiters are served first come, first served.
 */
export class ComputeSlots {
  private free: number
  private readonly waiters: Array<{ granted: boolean; readonly resume: () => void }> = []

  constructor(slots: number) {
    this.free = slots
  }

  /** Takes a slot if one is free and nobody waits for one. */
  tryTake(): boolean {
    if (this.free === 0 || this.waiters.length > 0) return false
    this.free--
    return true
  }

  /** Takes a slot, waiting for one; interrupted while waiting, it takes none (a slot handed to it then is passed on). */
  readonly take: Effect.Effect<void> = Effect.suspend(() =>
    this.tryTake() ? Effect.void : Effect.async<void>((resume) => {
      const waiter = { granted: false, resume: () => resume(Effect.void) }
      this.waiters.push(waiter)
      return Effect.sync(() => {
        if (waiter.granted) return this.give()
        const i = this.waiters.indexOf(waiter)
        if (i >= 0) this.waiters.splice(i, 1)
      })
    })
  )

  /** Gives a slot back: to the first waiter, else to the free ones. */
  give(): void {
    const waiter = this.waiters.shift()
    if (waiter === undefined) {
      this.free++
      return
    }
    waiter.granted = true
    waiter.resume()
  }

  /** Slots free now (for tests). */
  get available(): number {
    return this.free
  }
}
