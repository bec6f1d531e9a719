/**
 * What recovery writes for a session found with work left open by a stopped process
 * (DESIGN §6). Nothing is re-run: every started effect without an outcome becomes its failure
 * with `ambiguous: true`; a running activation and turn fail with `interrupted`; a running
 * creation fails; a running ending is closed.
 */
import { HashMap } from "effect"
import { failure } from "./Failure.js"
import type { SessionState } from "./Projection.js"
import { entry, type Entry } from "./Records.js"

/** What stopped the work: the process (a restart), or a journal write that failed under it. */
export type RecoveryCause = "restart" | "write_failure"

const stoppedBy = (cause: RecoveryCause) => (cause === "restart" ? "the server stopped" : "a journal write failed")

export const needsRecovery = (s: SessionState): boolean =>
  HashMap.size(s.pending) > 0 || s.activation !== undefined || s.turn !== undefined || s.creation !== undefined ||
  s.ending !== undefined

export const recoveryEntries = (s: SessionState, cause: RecoveryCause = "restart"): ReadonlyArray<Entry> => {
  const interrupted = (what: string, environment?: string) =>
    failure("interrupted", `${stoppedBy(cause)} while ${what} was running; nothing was re-run`, {
      ambiguous: true,
      ...(environment !== undefined ? { details: { environment } } : {})
    })
  const out: Array<Entry> = []
  const pending = [...HashMap.values(s.pending)].sort((a, b) => a.sequence - b.sequence)
  for (const p of pending) {
    const sequence = p.sequence
    switch (p.kind) {
      case "model_call_started":
        out.push(entry("model_call_failed", { sequence, failure: interrupted("this model call") }))
        break
      case "tool_call_started":
        out.push(
          entry("tool_call_failed", {
            sequence,
            outcome: "unknown",
            failure: failure("unknown", `${stoppedBy(cause)} during this tool call; it may or may not have run`, {
              ambiguous: true,
              // A call in an Environment names it, as the Environment's own failures do.
              ...(p.environment !== undefined ? { details: { environment: p.environment } } : {})
            }),
            is_error: true
          })
        )
        break
      case "environment_setup_started":
        out.push(entry("environment_setup_failed", { sequence, failure: interrupted("this environment setup", p.environment) }))
        break
      case "environment_detach_started":
        out.push(entry("environment_detach_failed", { sequence, failure: interrupted("this environment detach", p.environment) }))
        break
      case "environment_teardown_started":
        out.push(entry("environment_teardown_failed", { sequence, failure: interrupted("this environment teardown", p.environment) }))
        break
    }
  }
  if (s.activation !== undefined) {
    out.push(entry("activation_failed", { sequence: s.activation, failure: interrupted("the agentloop") }))
  }
  if (s.turn !== undefined) out.push(entry("turn_failed", { sequence: s.turn, failure: interrupted("this turn") }))
  if (s.creation !== undefined) {
    // The Environment whose setup was running, named as a stop's record of the creation names it.
    const setup = pending.find((p) => p.kind === "environment_setup_started")
    out.push(entry("session_creation_failed", { sequence: s.creation, failure: interrupted("the session's creation", setup?.environment) }))
  }
  if (s.ending !== undefined) out.push(entry("session_ended", { sequence: s.ending }))
  return out
}
