/**
 * An Environment's lifecycle steps as fenced effects (docs/environments.md, "The journal"):
 * `environment_{setup,detach,teardown}_started` is durable before the step is sent, the step is
 * sent once, and its `*_ended` or `*_failed` is durable before the caller goes on. A `brain`
 * Environment (the built-in pool) has nothing to prepare: its steps end at once with a null
 * result, but are journaled the same. Nothing here retries.
 */
import { Effect, Exit } from "effect"
import type { AdmittedEnvironment } from "../../domain/Environment.js"
import { boundedFailure, failure, type Failure } from "../../domain/Failure.js"
import type { JournalRecord } from "../../domain/Records.js"
import { entry, type Entry } from "../../domain/Records.js"
import type { EffectFenceShape, FenceError } from "../../services/EffectFence.js"
import {
  type EnvironmentFailed,
  EnvironmentNotSent,
  type EnvironmentsShape,
  type LifecycleEnded,
  type LifecycleStep,
  nothingSent
} from "../../services/Environments.js"
import type { Once } from "../Waits.js"
import type { Cell } from "./Cell.js"

export interface StepDeps {
  readonly fence: EffectFenceShape
  /** The `http` and `host` drivers; absent, such a step fails before anything is sent. */
  readonly environments: EnvironmentsShape | undefined
}

/** How a step ended: `dispatched` is false only when it was never started past its record. */
export type StepOutcome =
  | { readonly ok: true }
  | { readonly ok: false; readonly failure: Failure }

/** The record that starts `step` of `environment` (a create weighs its Environments' setup starts by it). */
export const startedOf = (step: LifecycleStep, environment: AdmittedEnvironment): Entry =>
  step === "setup"
    ? entry("environment_setup_started", { environment: environment.name, request: { options: environment.options ?? {} } })
    : step === "detach"
    ? entry("environment_detach_started", { environment: environment.name })
    : entry("environment_teardown_started", { environment: environment.name })

/**
 * A step in flight abandoned because the server is stopping (`runStep`'s `stop`): it was sent, so
 * whether the Environment did it is not known, as after a crash.
 */
class StepStopped {
  readonly _tag = "StepStopped"
  constructor(readonly step: LifecycleStep, readonly environment: string) {}
  get failure(): Failure {
    return failure("interrupted", `the server is stopping: the ${this.step} was abandoned before its answer`, {
      ambiguous: true,
      details: { environment: this.environment }
    })
  }
}

const outcomeOf = (
  step: LifecycleStep,
  environment: string,
  sequence: number,
  exit: Exit.Exit<LifecycleEnded, EnvironmentFailed | StepStopped>,
  dispatched: boolean
): Entry => {
  if (Exit.isSuccess(exit)) {
    const result = exit.value.result ?? null
    return step === "setup"
      ? entry("environment_setup_ended", { sequence, result })
      : step === "detach"
      ? entry("environment_detach_ended", { sequence, result })
      : entry("environment_teardown_ended", { sequence, result })
  }
  const f = exit.cause._tag === "Fail"
    // An Environment's text (its message, its answer as details): bounded before it is recorded.
    ? boundedFailure(exit.cause.error.failure)
    : failure("interrupted", `the ${step} was abandoned before its answer`, { ambiguous: dispatched, details: { environment } })
  return step === "setup"
    ? entry("environment_setup_failed", { sequence, failure: f })
    : step === "detach"
    ? entry("environment_detach_failed", { sequence, failure: f })
    : entry("environment_teardown_failed", { sequence, failure: f })
}

/**
 * Runs one step through the fence. Fails only when the journal did not take a record: the cell
 * is then broken, and the session recovers on its next access. Once `stop` is given (the server
 * is stopping), a step in flight stops waiting for its Environment: its request is closed and it
 * ends `interrupted`, ambiguous.
 */
export const runStep = (
  deps: StepDeps,
  cell: Cell,
  step: LifecycleStep,
  environment: AdmittedEnvironment,
  stop?: Once<void>
): Effect.Effect<StepOutcome, FenceError> => {
  const sendOrStop = (sequence: number): Effect.Effect<LifecycleEnded, EnvironmentFailed | StepStopped> => {
    const sent = send(sequence)
    if (stop === undefined) return sent
    // Interruptible, as the send is, whatever the caller's region: the loser is interrupted.
    const stopped = Effect.interruptible(Effect.zipRight(stop.await, Effect.fail(new StepStopped(step, environment.name))))
    return Effect.raceFirst(sent, stopped)
  }
  const send = (sequence: number): Effect.Effect<LifecycleEnded, EnvironmentFailed> => {
    if (environment.driver === "brain") return Effect.succeed({ result: null })
    const driver = deps.environments
    if (driver === undefined) {
      return Effect.fail(
        new EnvironmentNotSent({
          environment: environment.name,
          reason: "driver_unavailable",
          message: `Environment ${JSON.stringify(environment.name)}: this server cannot run a ${environment.driver} Environment; nothing was sent`
        })
      )
    }
    const operation = { session: cell.session, sequence, environment }
    // Interruptible whatever the caller's region (an idempotent request runs uninterruptibly), so
    // that the driver's lifecycle timeout can close the request.
    return Effect.interruptible(step === "setup" ? driver.setup(operation) : step === "detach" ? driver.detach(operation) : driver.teardown(operation))
  }
  return deps.fence.fence(cell.session, startedOf(step, environment), sendOrStop, (seq, exit, dispatched) => outcomeOf(step, environment.name, seq, exit, dispatched), {
    committed: (committed) => cell.foldIn(committed),
    unrecorded: () => void (cell.broken = true)
  }).pipe(
    Effect.tapError(() => Effect.sync(() => void (cell.broken = true))),
    Effect.map(({ exit }): StepOutcome =>
      Exit.isSuccess(exit)
        ? { ok: true }
        : { ok: false, failure: exit.cause._tag === "Fail" ? exit.cause.error.failure : failure("interrupted", `the ${step} was abandoned`, { ambiguous: true, details: { environment: environment.name } }) }
    )
  )
}

/**
 * The Environments still standing, from a session's records: each whose setup was started, did
 * not fail before anything reached it (`nothingSent`), and has no `environment_teardown_ended`
 * since.
 */
export const standing = (records: Iterable<JournalRecord>): ReadonlySet<string> => {
  const up = new Set<string>()
  const setups = new Map<number, string>()
  const teardowns = new Map<number, string>()
  for (const r of records) {
    if (r.kind === "environment_setup_started") {
      up.add(r.payload.environment)
      setups.set(r.sequence, r.payload.environment)
    } else if (r.kind === "environment_setup_failed") {
      const name = setups.get(r.payload.sequence)
      if (name !== undefined && nothingSent(r.payload.failure)) up.delete(name)
    } else if (r.kind === "environment_teardown_started") teardowns.set(r.sequence, r.payload.environment)
    else if (r.kind === "environment_teardown_ended") {
      const name = teardowns.get(r.payload.sequence)
      if (name !== undefined) up.delete(name)
    }
  }
  return up
}
