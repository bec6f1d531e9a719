/**
 * The committed outcomes of a transcript's unanswered tool calls: what a loop repairing an
 * interrupted round shows its model instead of "it may or may not have run" (docs/abi.md, "The
 * input's tool results").
 *
 * A round cut short (a cancel, a crash, the turn's deadline) leaves the transcript's assistant
 * message with tool calls that no tool message answers, while the journal holds each call's
 * outcome as committed: the ones that finished, and for the rest the `cancelled`, `timeout` or
 * `unknown` that the cancel or the restart's recovery recorded. The journal is the source of truth
 * (the seed: "Any already committed effect record remains the source of truth"): a call that
 * finished is shown as it finished, so its model is not invited to run it again.
 *
 * Read only when the transcript has unanswered calls (after an interruption, until a loop saves
 * its repair), from just before the oldest such message was saved: its calls' records all come
 * after that save. Bounded by COMMITTED_RESULTS_RECORDS; a call whose records lie beyond it (or
 * that never started) is left to the loop's placeholder.
 */
import { Effect } from "effect"
import type { Failure } from "../../domain/Failure.js"
import type { SessionId } from "../../domain/Ids.js"
import { PAGE_BYTES } from "../../domain/Limits.js"
import type { SessionState } from "../../domain/Projection.js"
import type { JournalRecord } from "../../domain/Records.js"
import type { ToolResult } from "../../services/Agentloop.js"
import type { JournalShape } from "../../services/Journal.js"

/** Records. At most this many are read to find an interrupted round's outcomes (a round's records and a turn's around them are far fewer). */
export const COMMITTED_RESULTS_RECORDS = 10_000

/** Records per read. */
const PAGE_RECORDS = 1_000

/** What a loop is shown of a call whose outcome record has `payload` (the same as a dispatch's answer gives it). */
export const toolResultOf = (
  callId: string,
  name: string,
  payload: { readonly outcome: ToolResult["outcome"]; readonly output?: unknown; readonly failure?: Failure }
): ToolResult => ({
  call_id: callId,
  name,
  outcome: payload.outcome,
  output: payload.output !== undefined ? payload.output : { code: payload.failure!.code, message: payload.failure!.message },
  is_error: payload.outcome !== "ok"
})

/**
 * The results of the calls named `ids` among `records` (in journal order): each call's last
 * `tool_call_started` with its id, closed by its `tool_call_ended` or `tool_call_failed`. A call
 * not started, or started and not closed, among them has none.
 */
export const resultsIn = (records: ReadonlyArray<JournalRecord>, ids: ReadonlySet<string>): ReadonlyArray<ToolResult> => {
  const started = new Map<number, { readonly callId: string; readonly name: string }>()
  const byCall = new Map<string, ToolResult>()
  for (const r of records) {
    const p = r.payload as any
    if (r.kind === "tool_call_started") {
      if (ids.has(p.call_id)) {
        started.set(r.sequence, { callId: p.call_id, name: p.tool })
        // A later start of the same id (a model that reused it) answers for it from now on.
        byCall.delete(p.call_id)
      }
    } else if (r.kind === "tool_call_ended" || r.kind === "tool_call_failed") {
      const call = started.get(p.sequence)
      if (call !== undefined) byCall.set(call.callId, toolResultOf(call.callId, call.name, p))
    }
  }
  return [...byCall.values()]
}

/**
 * The committed results of `state`'s unanswered calls, read from the journal; none when it has
 * none (the usual case: nothing is read).
 */
export const committedResults = (journal: JournalShape, session: SessionId, state: SessionState) =>
  Effect.suspend(() => {
    const unanswered = state.unanswered
    if (unanswered.length === 0) return Effect.succeed<ReadonlyArray<ToolResult>>([])
    const ids = new Set<string>()
    for (const u of unanswered) for (const id of u.ids) ids.add(id)
    // Every record from the last change that left the transcript too short to hold the oldest
    // unanswered message: that message, and the calls it asked for, were written after it.
    const from = state.transcriptLengths.lastAtMost(unanswered[0]!.index)
    const records: Array<JournalRecord> = []
    const page = (after: number): Effect.Effect<ReadonlyArray<ToolResult>, unknown> =>
      Effect.flatMap(journal.read(session, { after, limit: PAGE_RECORDS, maxBytes: PAGE_BYTES }), (read) => {
        for (const r of read) records.push(r)
        const last = read.length > 0 ? read[read.length - 1]!.sequence : after
        return read.length === 0 || last >= state.lastSequence || records.length >= COMMITTED_RESULTS_RECORDS
          ? Effect.succeed(resultsIn(records, ids))
          : page(last)
      })
    return page(from)
  })
