/**
 * A tool call sent to the Environment the session's configuration names for the tool
 * (docs/environments.md, "How Brain reads an answer"), as Host.ts runs every tool: inside the
 * fence, raced by Host against the call's deadline and the turn's cancel.
 *
 * - Before an abort: a 200 `{"ok"}` or `{"error"}` is the tool's answer; a failure is recorded as
 *   it is: `error` when nothing ran (not sent, refused), `unknown` when it may have run.
 * - After an abort (Host's deadline or cancel): one `/tools/cancel` goes out, and the first of the
 *   call's own 200 answer (it finished anyway) or `{"stopped": true}` settles the call. Nothing
 *   else confirms: a 5xx, a dropped call or `{"stopped": false}` leaves the call waiting until
 *   Host's grace (BRAIN_CANCEL_GRACE_MS) ends, and Host records it unconfirmed and closes the
 *   request by interrupting this.
 *
 * Nothing here retries; the call and the cancel are each sent at most once.
 */
import { Effect, Either, Fiber } from "effect"
import type { AdmittedEnvironment } from "../../domain/Environment.js"
import type { Failure } from "../../domain/Failure.js"
import type { SessionId } from "../../domain/Ids.js"
import type { ToolCallRequest } from "../../domain/Messages.js"
import type { CallAnswer, EnvironmentCall, EnvironmentsShape } from "../../services/Environments.js"
import type { ToolReply } from "../../services/Tools.js"
import { exitOrAbort } from "../AbortWait.js"

/** What a remote call came to: an answer (or a confirmed stop), or a failure with its outcome. */
export type RemoteVerdict =
  | { readonly _tag: "reply"; readonly reply: ToolReply }
  | { readonly _tag: "failed"; readonly outcome: "error" | "unknown"; readonly failure: Failure }

export const callRemote = (
  environments: EnvironmentsShape,
  environment: AdmittedEnvironment,
  invocation: {
    readonly session: SessionId
    readonly sequence: number
    readonly call: ToolCallRequest
    readonly deadlineAtMs: number | undefined
    readonly signal: AbortSignal
    /** Read once the signal has aborted: the call's own deadline, or the turn's cancel. */
    readonly stoppedBy: () => "cancel" | "deadline"
    /** Commits a tool-origin Event of this call (a host posts them); refused once the call is over. */
    readonly emit?: EnvironmentCall["emit"]
  }
): Effect.Effect<RemoteVerdict> =>
  Effect.gen(function*() {
    const { session, sequence, call, signal } = invocation
    const sending = yield* Effect.fork(Effect.either(environments.call({
      session,
      sequence,
      environment,
      name: call.name,
      callId: call.id,
      input: call.input ?? null,
      deadlineAtMs: invocation.deadlineAtMs ?? 0,
      ...(invocation.emit !== undefined ? { emit: invocation.emit } : {})
    })))
    const answered = (a: CallAnswer): RemoteVerdict => ({ _tag: "reply", reply: a })
    const first = yield* exitOrAbort(sending, signal)
    if (first._tag === "answer") {
      // `sending` answers its failures as values; one that died or was interrupted ends the call so.
      const r = yield* first.exit
      if (Either.isRight(r)) return answered(r.right)
      const e = r.left
      return { _tag: "failed", outcome: e._tag === "EnvironmentUncertain" ? "unknown" : "error", failure: e.failure } as const
    }
    // Aborted: one cancel, and only a definite answer or a confirmed stop settles the call.
    const reason = invocation.stoppedBy()
    const callAnswer = Effect.flatMap(Fiber.join(sending), (r) => (Either.isRight(r) ? Effect.succeed(answered(r.right)) : Effect.never))
    const confirmed = Effect.flatMap(
      environments.cancel({ session, sequence, environment, name: call.name, reason }),
      (c) => (c.confirmed ? Effect.succeed<RemoteVerdict>({ _tag: "reply", reply: { outcome: "stopped" } }) : Effect.never)
    )
    return yield* Effect.raceFirst(callAnswer, confirmed).pipe(Effect.ensuring(Fiber.interrupt(sending)))
  })
