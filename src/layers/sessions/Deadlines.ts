/**
 * Turns' wall deadlines (BRAIN_MAX_TURN_SECS): one fiber for all turns rather than a timer per
 * turn. The limit is the same for every turn, so deadlines arrive in start order: the Map's first
 * entry is always the next one due. A turn past its deadline is handed to `onDue` (the service
 * cancels it with reason "timeout").
 */
import { Clock, Deferred, Duration, Effect, type Scope } from "effect"
import type { RunningTurn } from "./Cell.js"

export interface Deadlines {
  /** Arms `turn`'s deadline at `dueMs` (epoch milliseconds, never before an earlier turn's). */
  readonly add: (turn: RunningTurn, dueMs: number) => void
  /** Disarms it (the turn ended). */
  readonly remove: (turn: RunningTurn) => void
}

export const makeDeadlines = (onDue: (turn: RunningTurn) => Effect.Effect<unknown>): Effect.Effect<Deadlines, never, Scope.Scope> =>
  Effect.gen(function*() {
    const due = new Map<RunningTurn, number>()
    let wake: Deferred.Deferred<void> | undefined
    yield* Effect.forkScoped(Effect.gen(function*() {
      for (;;) {
        const head = due.entries().next()
        if (head.done) {
          wake = yield* Deferred.make<void>()
          yield* Deferred.await(wake)
          continue
        }
        const now = yield* Clock.currentTimeMillis
        if (head.value[1] > now) {
          yield* Effect.sleep(Duration.millis(head.value[1] - now))
          continue
        }
        for (const [turn, at] of due) {
          if (at > now) break
          due.delete(turn)
          yield* onDue(turn)
        }
      }
    }))
    return {
      add: (turn, dueMs) => {
        due.set(turn, dueMs)
        if (wake) {
          Deferred.unsafeDone(wake, Effect.void)
          wake = undefined
        }
      },
      remove: (turn) => void due.delete(turn)
    }
  })
