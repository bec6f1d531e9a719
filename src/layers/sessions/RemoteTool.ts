/**
 * A tool call sent to the Environment the session's configuration names for the tool
 * (docs/environments.md, "How Brain reads an answer"), as ToolCalls.ts runs every tool: inside the
 * fence, in an executor fiber raced against the call's deadline and the turn's cancel.
 *
 * - Before an abort: a 200 `{"ok"}` or `{"error"}` is the tool's answer; a failure is recorded as
 *   it is: `error` when nothing ran (not sent, refused), `unknown` when it may have run.
 * - After an abort (the call's deadline or the turn's cancel): one `/tools/cancel` goes out, and
 *   the first of the call's own 200 answer (it finished anyway) or `{"stopped": true}` settles
 *   the call. Nothing
 *   else confirms: a 5xx, a dropped call or `{"stopped": false}` leaves the call waiting until
 *   the grace (BRAIN_CANCEL_GRACE_MS) ends, and ToolCalls records it unconfirmed and closes the
 *   request by interrupting this. A confirmed stop ends the executor's fiber interrupted.
 *
 * Nothing here retries; the call and the cancel are each sent at most once.
 *
 * A driver that can send a call with no fiber of the caller's (`Environments.send`: a host's, and
 * the http driver's, whose exchange runs in a fiber of its own) has it sent so
 * (RemoteNow.ts), and `awaitSent` is this wait for it once a cancel or a deadline came first;
 * `callRemote` sends and waits for the others (a driver without `send`).
 */
import { Effect, Either, Fiber, Runtime } from "effect"
import type { AdmittedEnvironment } from "../../domain/Environment.js"
import type { Failure } from "../../domain/Failure.js"
import type { SessionId } from "../../domain/Ids.js"
import type { ToolCallRequest } from "../../domain/Messages.js"
import type { CallAnswer, EnvironmentCall, EnvironmentFailed, EnvironmentsShape, SentCall } from "../../services/Environments.js"
import type { Stop, ToolReply } from "../../services/Tools.js"
import { waitFor } from "../Waits.js"

/** What a remote call came to: an answer (or a confirmed stop), or a failure with its outcome. */
export type RemoteVerdict =
  | { readonly _tag: "reply"; readonly reply: ToolReply }
  | { readonly _tag: "failed"; readonly outcome: "error" | "unknown"; readonly failure: Failure }

/** What a remote call is given: where it goes, its stop, and (for a host) how its Events are committed. */
export interface RemoteInvocation {
  readonly session: SessionId
  readonly sequence: number
  readonly call: ToolCallRequest
  readonly deadlineAtMs: number | undefined
  readonly stop: Stop
  /** Read once the call is stopped: the call's own deadline, or the turn's cancel. */
  readonly stoppedBy: () => "cancel" | "deadline"
  /** Commits a tool-origin Event of this call (a host posts them); refused once the call is over. */
  readonly emit?: EnvironmentCall["emit"]
  /** Whether the call's outcome record became durable (a host's result waits for it). */
  readonly recorded?: EnvironmentCall["recorded"]
}

/** The call as its Environment is sent it. */
export const environmentCall = (environment: AdmittedEnvironment, invocation: RemoteInvocation): EnvironmentCall => ({
  session: invocation.session,
  sequence: invocation.sequence,
  environment,
  name: invocation.call.name,
  callId: invocation.call.id,
  input: invocation.call.input ?? null,
  deadlineAtMs: invocation.deadlineAtMs ?? 0,
  ...(invocation.emit !== undefined ? { emit: invocation.emit } : {}),
  ...(invocation.recorded !== undefined ? { recorded: invocation.recorded } : {})
})

/** A call's answer (or failure) as its verdict, before any abort. */
export const verdictOf = (r: Either.Either<CallAnswer, EnvironmentFailed>): RemoteVerdict => {
  if (Either.isRight(r)) return { _tag: "reply", reply: r.right }
  const e = r.left
  return { _tag: "failed", outcome: e._tag === "EnvironmentUncertain" ? "unknown" : "error", failure: e.failure }
}

export const callRemote = (
  environments: EnvironmentsShape,
  environment: AdmittedEnvironment,
  invocation: RemoteInvocation
): Effect.Effect<RemoteVerdict> =>
  Effect.flatMap(
    Effect.runtime<never>(),
    (runtime) => awaitRemote(environments, environment, invocation, Effect.either(environments.call(environmentCall(environment, invocation))), runtime)
  )

/** The call already sent (`Environments.send`) waited for as `callRemote` waits for it. */
export const awaitSent = (
  environments: EnvironmentsShape,
  environment: AdmittedEnvironment,
  invocation: RemoteInvocation,
  sent: SentCall,
  runtime: Runtime.Runtime<never>
): Effect.Effect<RemoteVerdict> =>
  awaitRemote(
    environments,
    environment,
    invocation,
    waitFor<Either.Either<CallAnswer, EnvironmentFailed>>((resume) => {
      sent.await((exit) => resume(Effect.either(exit)))
      return sent.abandon
    }),
    runtime
  )

/** The answer of a call sent (`answer`), with what an abort does meanwhile. */
const awaitRemote = (
  environments: EnvironmentsShape,
  environment: AdmittedEnvironment,
  invocation: RemoteInvocation,
  answer: Effect.Effect<Either.Either<CallAnswer, EnvironmentFailed>>,
  runtime: Runtime.Runtime<never>
): Effect.Effect<RemoteVerdict> =>
  Effect.withFiberRuntime<RemoteVerdict>((executor) => {
    const { session, sequence, call, stop } = invocation
    // Aborted: one cancel, in a fiber of its own (only then: the call itself runs in the
    // executor's fiber). A confirmed stop interrupts the executor, which ends the call as
    // confirmed stopped (services/Tools.ts); the call's own answer, if it comes first, settles it.
    let cancelling: Fiber.RuntimeFiber<void> | undefined
    const onAbort = () => {
      const reason = invocation.stoppedBy()
      // Interruptible whatever the flags `runtime` was taken with: a settled call stops it.
      cancelling = Runtime.runFork(runtime)(
        Effect.interruptible(Effect.flatMap(
          environments.cancel({ session, sequence, environment, name: call.name, reason }),
          (c) => (c.confirmed ? Effect.sync(() => executor.unsafeInterruptAsFork(executor.id())) : Effect.void)
        ))
      )
    }
    const unlisten = stop.onAbort(onAbort)
    // After an abort only a definite answer or a confirmed stop settles the call.
    const sent = Effect.flatMap(answer, (r): Effect.Effect<RemoteVerdict> => (Either.isLeft(r) && stop.aborted ? Effect.never : Effect.succeed(verdictOf(r))))
    return Effect.ensuring(
      sent,
      Effect.suspend(() => {
        unlisten()
        // The call is settled: a cancel still in flight is no longer needed.
        return cancelling !== undefined ? Fiber.interrupt(cancelling) : Effect.void
      })
    )
  })
