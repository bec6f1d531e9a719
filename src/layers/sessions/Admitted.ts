/**
 * The operations in flight in this process (creates, ends, deletes, and sends and submits), from
 * the moment Sessions takes them to their answer, so that a stop treats them as it treats running
 * turns (seed, Lifecycle: the drain "drains admitted operations"): the drain waits for them, and a
 * stop past its drain deadline gives each its stop. A stopped lifecycle operation stops waiting for
 * the Environment step in flight (recorded `interrupted`), sends nothing more, and answers
 * (EnvironmentLifecycle.ts, Lifecycle.ts's end).
 *
 * Admission and the drain meet in one synchronous step (`admit`, `drain`): an operation taken
 * before the drain began is waited for; one that arrives after it (a request the HTTP gate let in
 * just before the stop, its body still arriving) is refused before it does anything, so that
 * nothing is journaled or sent to an Environment for work the drain does not wait for. A turn's
 * request taken before the drain is waited for, but starts its turn only if it reaches the start
 * before the drain begins (`closed`, checked where the turn is claimed): one still waiting then
 * (for its share of the working memory, for its session's open) is refused having written
 * nothing, and one whose answer is stored under its key is still answered (`lookups`).
 */
import { Effect } from "effect"
import { Once } from "../Waits.js"

export interface Operation {
  /** Given by a stop past its drain deadline: the operation is interrupted. */
  readonly stop: Once<void>
  /** Given once the operation has answered. */
  readonly done: Once<void>
}

/** How `admit` treats a request once the drain has begun. */
export interface AdmitOptions {
  /**
   * It is run all the same, though not waited for (a keyed send or submit: its answer may be
   * stored under its key, and a stored answer is never refused); it must start no work.
   */
  readonly lookups?: boolean
}

/** The stop of a request run once the drain has begun: given already. */
const stopped = new Once<void>()
stopped.give(undefined)

export class Admitted {
  private readonly inFlight = new Set<Operation>()
  private readonly closes = new Once<void>()

  get size() {
    return this.inFlight.size
  }

  /** Whether the drain has begun: from then on no turn starts. */
  get closed(): boolean {
    return this.closes.isDone
  }

  /** Given once the drain has begun. */
  readonly closing: Effect.Effect<void> = this.closes.await

  /**
   * Runs `body` as an operation in flight, handing it the stop it must obey; once the drain has
   * begun it fails with `refused()` instead, having run nothing (or, with `lookups`, runs it not
   * in flight, under a stop already given).
   */
  admit<A, E, R, E2>(refused: () => E2, body: (stop: Once<void>) => Effect.Effect<A, E, R>, options?: AdmitOptions): Effect.Effect<A, E | E2, R> {
    return Effect.suspend((): Effect.Effect<A, E | E2, R> => {
      if (this.closed) {
        if (options?.lookups !== true) return Effect.fail(refused())
        return body(stopped)
      }
      const operation: Operation = { stop: new Once<void>(), done: new Once<void>() }
      this.inFlight.add(operation)
      return Effect.ensuring(
        body(operation.stop),
        Effect.sync(() => {
          this.inFlight.delete(operation)
          operation.done.give(undefined)
        })
      )
    })
  }

  /**
   * `admit` taken in this synchronous step, for a caller that runs its body itself and calls
   * `leave` once it has answered: the operation in flight, or undefined once the drain has begun
   * (the caller then goes through `admit`). Its stop is given as `admit`'s is.
   */
  enter(): Operation | undefined {
    if (this.closed) return undefined
    const operation: Operation = { stop: new Once<void>(), done: new Once<void>() }
    this.inFlight.add(operation)
    return operation
  }

  /** An operation `enter` took has answered. */
  leave(operation: Operation): void {
    this.inFlight.delete(operation)
    operation.done.give(undefined)
  }

  /** Admits nothing more, and waits until every operation in flight has answered. */
  readonly drain: Effect.Effect<void> = Effect.suspend(() => {
    this.closes.give(undefined)
    return Effect.forEach([...this.inFlight], (o) => o.done.await, { discard: true })
  })

  /** Interrupts every operation in flight and waits until each has answered. */
  readonly interruptAll: Effect.Effect<void> = Effect.suspend(() => {
    const operations = [...this.inFlight]
    for (const o of operations) o.stop.give(undefined)
    return Effect.forEach(operations, (o) => o.done.await, { discard: true })
  })
}
