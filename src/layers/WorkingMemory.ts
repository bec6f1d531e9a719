/**
 * The working-memory admission (BRAIN_WORKING_MEMORY_BYTES): session creates, opens and turns hold
 * bytes of it while they run, each weighted by the heap it will take (a create by its request, a
 * session open by the bytes it reads, a turn by its input and the session's state;
 * domain/Limits.ts says how those weights were measured). Request bodies have their own bound (BRAIN_INFLIGHT_BODY_BYTES); this one counts
 * what a request makes of the data it reads or brings, which is many times its body.
 *
 * - What does not fit beside what is held waits, in order of arrival: a small request never
 *   overtakes a large one waiting before it, so a large one is never starved.
 * - A wait is bounded (WORKING_MEMORY_WAIT_MS); past it the request is refused 503 `overloaded`,
 *   retryable, having taken nothing.
 * - A weight above the whole bound takes the whole bound: such a request runs alone, never waits
 *   forever.
 * - What is taken is always given back: when the work ends, fails or is interrupted, and when a
 *   wait ends any way but with the bytes handed to the caller.
 */
import { Deferred, Duration, Effect, Exit, FiberId } from "effect"
import { Overloaded } from "../domain/Errors.js"

/** Bytes held for a piece of work; `release` gives them back (once, whatever calls it again). */
export interface Held {
  readonly bytes: number
  readonly release: () => void
}

interface Waiter {
  readonly bytes: number
  readonly granted: Deferred.Deferred<void>
  held: Held | undefined
}

const nothingHeld: Held = { bytes: 0, release: () => {} }

export class WorkingMemory {
  private taken = 0
  private readonly queue: Array<Waiter> = []

  constructor(readonly limit: number, readonly waitMs: number) {}

  /** Bytes held now. */
  get held(): number {
    return this.taken
  }

  /** Requests waiting now. */
  get waiting(): number {
    return this.queue.length
  }

  private hold(bytes: number): Held {
    this.taken += bytes
    let given = false
    return {
      bytes,
      release: () => {
        if (given) return
        given = true
        this.taken -= bytes
        this.grant()
      }
    }
  }

  /** Hands bytes to the waiters at the head of the line, in order, for as long as they fit. */
  private grant() {
    for (;;) {
      const head = this.queue[0]
      if (head === undefined || this.taken + head.bytes > this.limit) return
      this.queue.shift()
      head.held = this.hold(head.bytes)
      Deferred.unsafeDone(head.granted, Exit.void)
    }
  }

  private leave(waiter: Waiter) {
    if (waiter.held !== undefined) return waiter.held.release()
    const at = this.queue.indexOf(waiter)
    if (at >= 0) this.queue.splice(at, 1)
    // The head may have been what held the others back.
    if (at === 0) this.grant()
  }

  private refusal(bytes: number, what: string) {
    return new Overloaded({
      message: `the server's working memory for session creates, opens and turns is in use (BRAIN_WORKING_MEMORY_BYTES, ${this.limit} bytes); ${what} needs about ${bytes} bytes of it and waited ${this.waitMs} ms: try again shortly`
    })
  }

  /**
   * Runs `use` with `weight` bytes taken (at most the whole bound), then gives them back; when
   * `use` succeeds and `keep` says so, they stay taken and `use`'s `Held` is the caller's to
   * release. Waits in line for them at most `waitMs`, then fails `overloaded` having run nothing;
   * `cutShort`, if it fails first, ends the wait with its failure, having run nothing too (a turn's
   * request waiting when a stop's drain begins).
   */
  holding<A, E, R>(
    weight: number,
    what: string,
    use: (held: Held) => Effect.Effect<A, E, R>,
    keep: (a: A) => boolean = () => false,
    cutShort?: Effect.Effect<never, Overloaded>
  ): Effect.Effect<A, E | Overloaded, R> {
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(this.take(weight, what, restore, cutShort), (held) =>
        restore(Effect.suspend(() => use(held))).pipe(
          Effect.onExit((exit) => Effect.sync(() => Exit.isSuccess(exit) && keep(exit.value) ? undefined : held.release()))
        ))
    )
  }

  /**
   * `holding` without a wait: runs `use` only if `weight` fits now and nobody waits before it
   * (so it never overtakes a waiter); otherwise answers undefined at once, having run nothing.
   * For work that already holds something a wait must not hold (a session opened in memory).
   */
  holdingNow<A, E, R>(weight: number, use: (held: Held) => Effect.Effect<A, E, R>, keep: (a: A) => boolean = () => false): Effect.Effect<A | undefined, E, R> {
    return Effect.uninterruptibleMask((restore) =>
      Effect.suspend((): Effect.Effect<A | undefined, E, R> => {
        const bytes = Math.min(this.limit, Math.max(0, Math.ceil(weight)))
        if (bytes > 0 && (this.queue.length > 0 || this.taken + bytes > this.limit)) return Effect.succeed(undefined)
        const held = bytes === 0 ? nothingHeld : this.hold(bytes)
        return restore(Effect.suspend(() => use(held))).pipe(
          Effect.onExit((exit) => Effect.sync(() => Exit.isSuccess(exit) && keep(exit.value) ? undefined : held.release()))
        )
      })
    )
  }

  /**
   * `weight` bytes taken now, in this synchronous step, if they fit and nobody waits before them
   * (as `holdingNow` takes them); undefined otherwise, having taken nothing. The caller must give
   * them back (`release`) whatever its work does.
   */
  holdNow(weight: number): Held | undefined {
    const bytes = Math.min(this.limit, Math.max(0, Math.ceil(weight)))
    if (bytes === 0) return nothingHeld
    return this.queue.length > 0 || this.taken + bytes > this.limit ? undefined : this.hold(bytes)
  }

  /** Takes the bytes, waiting in line; called uninterruptibly, with `restore` for the wait. */
  private take(
    weight: number,
    what: string,
    restore: <A, E, R>(e: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>,
    cutShort: Effect.Effect<never, Overloaded> | undefined
  ): Effect.Effect<Held, Overloaded> {
    return Effect.suspend(() => {
      const bytes = Math.min(this.limit, Math.max(0, Math.ceil(weight)))
      if (bytes === 0) return Effect.succeed(nothingHeld)
      if (this.queue.length === 0 && this.taken + bytes <= this.limit) return Effect.succeed(this.hold(bytes))
      const waiter: Waiter = { bytes, granted: Deferred.unsafeMake<void>(FiberId.none), held: undefined }
      this.queue.push(waiter)
      // The wait itself interruptible, so its deadline fires in an uninterruptible caller too (a
      // session's shared open is one); the caller's own interruptibility is kept around it.
      const granted = Deferred.await(waiter.granted)
      const wait = cutShort === undefined ? granted : Effect.raceFirst(granted, cutShort)
      return restore(Effect.interruptible(wait).pipe(Effect.timeoutOption(Duration.millis(this.waitMs)))).pipe(
        // Whatever ended the wait (its deadline, an interruption, `cutShort`, even one racing the grant),
        // bytes granted and not handed over are given back.
        Effect.onExit((exit) => Exit.isSuccess(exit) && exit.value._tag === "Some" ? Effect.void : Effect.sync(() => this.leave(waiter))),
        Effect.flatMap((granted) => granted._tag === "Some" && waiter.held !== undefined ? Effect.succeed(waiter.held) : Effect.fail(this.refusal(bytes, what)))
      )
    })
  }
}
