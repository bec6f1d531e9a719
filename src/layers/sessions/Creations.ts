/**
 * The creates in flight in this process, from their session's registration to their answer, so
 * that a stop treats them as it treats running turns (seed, Lifecycle: the drain "drains admitted
 * operations"): the drain waits for them, and a stop past its drain deadline interrupts them. An
 * interrupted create stops waiting for the Environment setup in flight, sends nothing more, and
 * records its creation failed `interrupted` (EnvironmentLifecycle.setUpEnvironments).
 */
import { Effect } from "effect"
import { Once } from "../Waits.js"

interface Creation {
  /** Given by a stop past its drain deadline: the create is interrupted. */
  readonly stop: Once<void>
  /** Given once the create has answered. */
  readonly done: Once<void>
}

export class Creations {
  private readonly inFlight = new Set<Creation>()

  get size() {
    return this.inFlight.size
  }

  /** Runs a create's `body` as one in flight, handing it the stop it must obey. */
  track<A, E, R>(body: (stop: Once<void>) => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> {
    return Effect.suspend(() => {
      const creation: Creation = { stop: new Once<void>(), done: new Once<void>() }
      this.inFlight.add(creation)
      return Effect.ensuring(
        body(creation.stop),
        Effect.sync(() => {
          this.inFlight.delete(creation)
          creation.done.give(undefined)
        })
      )
    })
  }

  /** Waits until every create now in flight has answered. */
  readonly drain: Effect.Effect<void> = Effect.suspend(() => Effect.forEach([...this.inFlight], (c) => c.done.await, { discard: true }))

  /** Interrupts every create now in flight and waits until each has answered. */
  readonly interruptAll: Effect.Effect<void> = Effect.suspend(() => {
    const creations = [...this.inFlight]
    for (const c of creations) c.stop.give(undefined)
    return Effect.forEach(creations, (c) => c.done.await, { discard: true })
  })
}
