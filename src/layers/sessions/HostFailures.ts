/** How a host call's refusals and storage failures reach the loop: shared by Host.ts and ToolCalls.ts. */
import { Effect } from "effect"
import { failure, type Failure } from "../../domain/Failure.js"
import { HostCallFailed } from "../../services/Agentloop.js"
import type { FenceError } from "../../services/EffectFence.js"
import type { CancelReason } from "./Cell.js"

/**
 * What a cancel (`interrupt`, the wall deadline, a stop) makes of the work it stopped. `ambiguous`
 * when it cut short an effect that was already sent (its record says so too): nothing is rolled
 * back, so what the work did is uncertain (seed: "Neither promises that external effects were
 * rolled back").
 */
export const cancelFailure = (reason: CancelReason, ambiguous = false): Failure =>
  reason === "timeout"
    ? failure("timeout", "the turn's wall deadline passed", { ambiguous })
    : reason === "cancelled"
    ? failure("cancelled", "the turn was cancelled", { ambiguous })
    : failure("interrupted", "the server is stopping", { ambiguous })

export const refuse = (f: Failure) => Effect.fail(new HostCallFailed({ failure: f }))

/** A fence's storage failure as the loop sees it. */
export const storageFailure = (e: FenceError): HostCallFailed =>
  new HostCallFailed({
    failure: e._tag === "OutcomeUnrecorded"
      ? failure(
        "journal_write_failed",
        `${e.message}: the effect may have happened, and its result is withheld until something durable says how it ended; the session recovers on its next access`,
        { ambiguous: true }
      )
      : e._tag === "RecordRejected"
      ? failure("invalid_request", e.reason)
      : e._tag === "JournalCorrupt"
      ? failure("journal_corrupt", e.message, { details: e.details })
      // Refused before anything was written (the session's journal could not be opened).
      : e._tag === "JournalUnavailable"
      ? failure("overloaded", e.message, { retryable: true })
      : e._tag === "SessionNotFound"
      ? failure("not_found", e.message)
      : failure("journal_write_failed", e.message, { ambiguous: true })
  })
