/**
 * The lifecycle operations in flight in this process (creates, ends, deletes), from the moment
 * Sessions takes them to their answer, so that a stop treats them as it treats running turns
 * (seed, Lifecycle: the drain "drains admitted operations"): the drain waits for them, and a stop
 * past its drain deadline gives each its stop. A stopped operation stops waiting for the
 * Environment step in flight (recorded `interrupted`), sends nothing more, and answers
 * (EnvironmentLifecycle.ts, SessionsJournal's end).
 *
 * Admission and the drain meet in one synchronous step (`admit`, `drain`): an operation taken
 * before the drain began is waited for; one that arrives after it (a request the HTTP gate let in
 * just before the stop, its body still arriving) is refused before it does anything, so that
 * nothing is journaled or sent to an Environment for work the drain does not wait for.
 */
import { Effect } from "effect"
import { Once } from "../Waits.js"

interface Operation {
  /** Given by a stop past its drain deadline: the operation is interrupted. */
  readonly stop: Once<void>
  /** Given once the operation has answered. */
  readonly done: Once<void>
}

export class Admitted {
  private readonly inFlight = new Set<Operation>()
  private closed = false

  get size() {
    return this.inFlight.size
  }

  /**
   * Runs `body` as an operation in flight, handing it the stop it must obey; once the drain has
   * begun it fails with `refused()` instead, having run nothing.
   */
  admit<A, E, R, E2>(refused: () => E2, body: (stop: Once<void>) => Effect.Effect<A, E, R>): Effect.Effect<A, E | E2, R> {
    return Effect.suspend((): Effect.Effect<A, E | E2, R> => {
      if (this.closed) return Effect.fail(refused())
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

  /** Admits nothing more, and waits until every operation in flight has answered. */
  readonly drain: Effect.Effect<void> = Effect.suspend(() => {
    this.closed = true
    return Effect.forEach([...this.inFlight], (o) => o.done.await, { discard: true })
  })

  /** Interrupts every operation in flight and waits until each has answered. */
  readonly interruptAll: Effect.Effect<void> = Effect.suspend(() => {
    const operations = [...this.inFlight]
    for (const o of operations) o.stop.give(undefined)
    return Effect.forEach(operations, (o) => o.done.await, { discard: true })
  })
}
