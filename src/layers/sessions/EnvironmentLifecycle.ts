/**
 * A session's Environments over its life: set up in declaration order at create (a failure tears
 * down what was started), torn down in reverse order at delete (every one still standing tried;
 * any failure keeps the session). Each step is a fenced effect (EnvironmentSteps.ts).
 */
import { Effect } from "effect"
import type { AdmittedEnvironment } from "../../domain/Environment.js"
import { JournalWriteFailed, TeardownFailed } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import type { JournalRecord } from "../../domain/Records.js"
import { failure, type Failure } from "../../domain/Failure.js"
import type { FenceError } from "../../services/EffectFence.js"
import { nothingSent } from "../../services/Environments.js"
import type { JournalShape } from "../../services/Journal.js"
import type { Once } from "../Waits.js"
import type { Cell } from "./Cell.js"
import { runStep, standing, type StepDeps } from "./EnvironmentSteps.js"
import { fromJournal } from "./FromJournal.js"

/** A lifecycle step whose record the journal did not take: the session recovers on its next access. */
export const fromFence = (e: FenceError) =>
  e._tag === "OutcomeUnrecorded"
    ? new JournalWriteFailed({ message: `${e.message}; the session recovers on its next access`, details: { ambiguous: true } })
    : fromJournal(e)

/** Why a creation's setup stopped: the Environment that was not set up, and why. */
export interface SetupFailed {
  readonly environment: string
  readonly failure: Failure
  /** The stop ended it: nothing more was sent, teardowns included (a delete sends them). */
  readonly stopped: boolean
}

/**
 * Sets up each Environment in declaration order, each step durable before the next. On the
 * first failure nothing more is set up: every Environment whose setup was sent (all but a failed
 * one that nothing reached) is torn down (journaled), in reverse order, and the failure is returned.
 *
 * Once `stop` is given (the server is stopping past its drain), the setup in flight is abandoned
 * (recorded `interrupted`, ambiguous), no other step is sent, and nothing is torn down: as after a
 * crash, the failed session's delete tears down what may stand (docs/environments.md, "Restart").
 */
export const setUpEnvironments = (
  steps: StepDeps,
  cell: Cell,
  environments: ReadonlyArray<AdmittedEnvironment>,
  stop?: Once<void>
): Effect.Effect<SetupFailed | undefined, FenceError> =>
  Effect.gen(function*() {
    const started: Array<AdmittedEnvironment> = []
    for (const environment of environments) {
      if (stop?.isDone) {
        return { environment: environment.name, failure: failure("interrupted", "the server is stopping: its setup was not sent"), stopped: true }
      }
      started.push(environment)
      const outcome = yield* runStep(steps, cell, "setup", environment, stop)
      if (outcome.ok) continue
      // A setup that never reached its Environment left nothing there to tear down.
      if (nothingSent(outcome.failure)) started.pop()
      for (const e of [...started].reverse()) {
        if (stop?.isDone) break
        yield* runStep(steps, cell, "teardown", e, stop)
      }
      return { environment: environment.name, failure: outcome.failure, stopped: stop?.isDone === true && outcome.failure.code === "interrupted" }
    }
    return undefined
  })

/** Every record of a session, in pages (a delete of a session with Environments reads them once). */
const allRecords = (journal: JournalShape, session: SessionId) =>
  Effect.gen(function*() {
    const out: Array<JournalRecord> = []
    for (;;) {
      const page = yield* journal.read(session, { after: out.length > 0 ? out[out.length - 1]!.sequence : 0, limit: 1000 })
      if (page.length === 0) return out
      out.push(...page)
    }
  })

/**
 * Tears down, in reverse declaration order, every Environment still standing, trying all of
 * them. Any failure keeps the session: 409 `teardown_failed` naming them, and only a new
 * delete tries again. Only an admitted delete calls it, and only one is admitted at a time
 * (Registry.delete): one teardown per Environment.
 *
 * Once `stop` is given (a stop past its drain deadline), the teardown in flight is abandoned
 * (recorded `interrupted`, ambiguous) and no other is sent: each Environment not torn down is a
 * failure, and a delete once the server is back tries them again.
 */
export const tearDown = (steps: StepDeps, journal: JournalShape, cell: Cell, stop?: Once<void>) =>
  Effect.gen(function*() {
    const declared = cell.state.configuration?.environments ?? []
    if (declared.length === 0) return
    const up = standing(yield* allRecords(journal, cell.session).pipe(Effect.mapError((e) => fromJournal(e, { ambiguous: false }))))
    const failed: Array<{ readonly environment: string; readonly failure: Failure }> = []
    for (const environment of [...declared].reverse()) {
      if (!up.has(environment.name)) continue
      if (stop?.isDone) {
        failed.push({ environment: environment.name, failure: failure("interrupted", "the server is stopping: its teardown was not sent") })
        continue
      }
      const outcome = yield* runStep(steps, cell, "teardown", environment, stop).pipe(Effect.mapError(fromFence))
      if (!outcome.ok) failed.push({ environment: environment.name, failure: outcome.failure })
    }
    if (failed.length > 0) {
      const names = failed.map((f) => JSON.stringify(f.environment)).join(", ")
      const message = stop?.isDone
        ? `the server is stopping: the teardown of Environment ${names} was interrupted; the session and its journal stay, and a delete with a new Idempotency-Key tries again once the server is back`
        : `the teardown of Environment ${names} failed; the session and its journal stay, and a delete with a new Idempotency-Key tries again`
      return yield* Effect.fail(new TeardownFailed({
        message,
        details: { environments: failed.map((f) => f.environment), failures: failed }
      }))
    }
  })
