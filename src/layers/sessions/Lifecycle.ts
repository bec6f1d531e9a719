/**
 * A session's lifecycle past its creation, and the service's own stop: `interrupt` (the running
 * turn cancelled), `end` (committed once, its Environments detached), `delete` (exclusive, its
 * keys handed on, its Environments torn down, its modules and hosts let go), and the stop's
 * `drain` and `interruptAll` over every turn and operation in flight.
 */
import { Duration, Effect, Exit, HashMap } from "effect"
import { Conflict } from "../../domain/Errors.js"
import type { HostId, SessionId } from "../../domain/Ids.js"
import type { SessionState, SessionStatus } from "../../domain/Projection.js"
import { entry } from "../../domain/Records.js"
import type { EndError, KeptRequest, SessionsShape, SessionSummary } from "../../services/Sessions.js"
import { Once } from "../Waits.js"
import { cancelTurn, type Cell } from "./Cell.js"
import { fromFence, tearDown } from "./EnvironmentLifecycle.js"
import { runStep } from "./EnvironmentSteps.js"
import { fromJournal } from "./FromJournal.js"
import { keptRequests } from "./Requests.js"
import { beingCreated, namedHosts, type Shared, stopping, summary } from "./Shared.js"

export const makeLifecycle = (shared: Shared): Pick<SessionsShape, "interrupt" | "end" | "delete" | "drain" | "interruptAll"> => {
  const { admitted, agentloops, config, deps, hosts, journal, registry, running, steps, using, write } = shared

  /**
   * Cancels every running turn as `interrupted` and interrupts every create, end and delete in
   * flight (and ends a keyed send's or submit's wait for its share of the working memory), and
   * waits until each turn has closed and each of those has answered.
   */
  const interruptAll = Effect.suspend(() =>
    Effect.zip(
      Effect.forEach(
        [...running],
        (t) => Effect.zipRight(cancelTurn(t, "interrupted"), t.done.await),
        { concurrency: "unbounded", discard: true }
      ),
      admitted.interruptAll,
      { concurrent: true }
    )
  )

  /**
   * Commits an ending: `session_end_started` first, so that a partly detached session never
   * accepts a message, then each Environment's detach (a failed one is recorded and does not
   * prevent the ending), then `session_ended`. Once `stop` is given (a stop past its drain
   * deadline) the detach in flight is abandoned (recorded `interrupted`) and no other is sent: the
   * ending is closed as a restart's recovery closes it.
   */
  const closeOf = (cell: Cell, stop: Once<void>) =>
    Effect.gen(function*() {
      const [started] = cell.state.ending !== undefined ? [cell.state.ending] : yield* write(cell, [entry("session_end_started", {})])
      for (const environment of cell.state.configuration?.environments ?? []) {
        if (stop.isDone) break
        yield* runStep(steps, cell, "detach", environment, stop).pipe(Effect.mapError(fromFence))
      }
      yield* write(cell, [entry("session_ended", { sequence: started! })])
      return summary(cell)
    })

  /** An end admitted on an open session: waits for the running turn, then commits the ending or answers what another end committed. */
  const endOf = (cell: Cell, stop: Once<void>) =>
    Effect.gen(function*() {
      // Each end waits for the running turn itself (its wait is its own to give up) ...
      while (cell.running) yield* cell.running.done.await
      if ((cell.state.status as SessionStatus) === "ended") return summary(cell)
      // ... and the first to get here commits the ending, once; the others answer what it did.
      if (cell.closing !== undefined) return yield* Effect.flatten(cell.closing.await)
      const closing = new Once<Exit.Exit<SessionSummary, EndError>>()
      cell.closing = closing
      const closed = yield* Effect.exit(Effect.uninterruptible(closeOf(cell, stop)))
      if (Exit.isFailure(closed)) cell.closing = undefined
      closing.give(closed)
      return yield* closed
    })

  return {
    interrupt: (session) =>
      using(session, (cell) =>
        Effect.gen(function*() {
          const turn = cell.running
          if (turn) {
            yield* cancelTurn(turn, "cancelled")
            yield* turn.done.await
            // Answered once the turn is closed as well (its claim on the session given back), so
            // that a send right after it is admitted, never refused busy for this turn. Bounded: a
            // turn whose late appends hold the session past its answer (BRAIN_CLEANUP_DEADLINE_MS)
            // is waited for that long at most; the session stays refused until they settle.
            const closing = turn.closed.await
            yield* config.cleanupDeadlineMs > 0 ? Effect.timeoutOption(closing, Duration.millis(config.cleanupDeadlineMs)) : closing
          }
          return summary(cell)
        })),
    end: (session) =>
      admitted.admit(stopping, (stop) => using(session, (cell) =>
        Effect.gen(function*() {
          if (cell.state.status === "ended") return summary(cell)
          if (cell.state.status === "creating") return yield* Effect.fail(beingCreated())
          if (cell.state.status === "failed") return yield* Effect.fail(new Conflict({ message: "the session is failed" }))
          // From here until it answers, no new turn starts (TurnStarts' `refusedStart`).
          return yield* Effect.acquireUseRelease(
            Effect.sync(() => void cell.endsWaiting++),
            () => endOf(cell, stop),
            () => Effect.sync(() => void cell.endsWaiting--)
          )
        }))),
    delete: <E>(session: SessionId, keep?: (requests: ReadonlyArray<KeptRequest>) => Effect.Effect<void, E>) =>
      admitted.admit(stopping, (stop) => Effect.suspend(() => {
        let uses: Array<string> = []
        let named: ReadonlyArray<HostId> = []
        let state: SessionState | undefined
        // Its keyed sends and submits are handed on (`keep`) while the journal that answers them
        // is still there: their keys outlive the session (DESIGN §7).
        const handOn = keep === undefined
          ? Effect.void
          : Effect.suspend(() => {
            const kept = state
            if (kept === undefined || HashMap.size(kept.requests) === 0) return Effect.void
            return Effect.flatMap(keptRequests(journal, session, kept, deps.clock.unsafeCurrentTimeMillis(), config.requestRetentionMs), (requests) =>
              requests.length === 0 ? Effect.void : keep(requests))
          })
        return registry.delete(
          session,
          (cell) => {
            const status = cell.state.status
            if (status === "ended" || status === "failed") return undefined
            return status === "creating" ? beingCreated() : new Conflict({ message: "only an ended or failed session can be deleted" })
          },
          (cell) => {
            const configuration = cell.state.configuration
            uses = configuration
              ? [configuration.agentloop, ...(configuration.tools ?? []).flatMap((t) => (t.module !== undefined ? [t.module] : []))]
              : []
            named = namedHosts(configuration?.environments ?? [])
            state = cell.state
            return tearDown(steps, journal, cell, stop)
          },
          Effect.zipRight(
            handOn,
            journal.remove(session).pipe(
              Effect.mapError(fromJournal),
              Effect.zipRight(Effect.suspend(() => Effect.forEach(uses, (id) => agentloops.unuse(id, session), { discard: true }))),
              // Deleted: it no longer holds its hosts (a release lost in a crash is found by the expiry's sweep).
              Effect.zipRight(Effect.suspend(() => Effect.forEach(named, (host) => hosts?.release(host, session) ?? Effect.void, { discard: true })))
            )
          )
        )
      })),
    // The operations' admission closes first, in the drain's first step; then every turn is waited for.
    drain: Effect.zipRight(admitted.drain, Effect.suspend(() => Effect.forEach([...running], (t) => t.done.await, { discard: true }))),
    interruptAll
  }
}
