/**
 * The committed outcomes of a transcript's unanswered tool calls (src/layers/sessions/CommittedResults.ts),
 * picked out of journal records.
 */
import { describe, expect, it } from "@effect/vitest"
import { resultsIn } from "../../src/layers/sessions/CommittedResults.js"
import { Lengths } from "../../src/domain/Lengths.js"
import type { JournalRecord } from "../../src/domain/Records.js"

let sequence = 0
const record = (kind: string, payload: unknown): JournalRecord => ({ sequence: ++sequence, recorded_at_ms: 0, kind: kind as JournalRecord["kind"], payload })
const started = (callId: string, tool = "t") => record("tool_call_started", { tool, call_id: callId, input: {}, deadline_at_ms: 0 })

describe("committed results", () => {
  it("each asked-for call gets its outcome record as dispatch shows it: ok with its output, a failure with its {code, message}; calls not asked for, and calls started but not closed, get none", () => {
    const a = started("a", "echo")
    const b = started("b", "slow")
    const c = started("c")
    const other = started("other")
    const records = [
      a, b, c, other,
      record("tool_call_ended", { sequence: a.sequence, outcome: "ok", output: { e: 1 }, is_error: false }),
      record("tool_call_ended", { sequence: other.sequence, outcome: "ok", output: 2, is_error: false }),
      record("tool_call_failed", { sequence: b.sequence, outcome: "unknown", failure: { code: "unknown", message: "recovered", retryable: false, ambiguous: true }, is_error: true })
    ]
    expect(resultsIn(records, new Set(["a", "b", "c"]))).toEqual([
      { call_id: "a", name: "echo", outcome: "ok", output: { e: 1 }, is_error: false },
      { call_id: "b", name: "slow", outcome: "unknown", output: { code: "unknown", message: "recovered" }, is_error: true }
    ])
  })

  it("a call id started again answers with its latest start's outcome, or none while that one is open", () => {
    const first = started("a")
    const records = [first, record("tool_call_ended", { sequence: first.sequence, outcome: "ok", output: "old", is_error: false })]
    const again = started("a")
    expect(resultsIn([...records, again], new Set(["a"]))).toEqual([])
    const closed = record("tool_call_ended", { sequence: again.sequence, outcome: "error", output: "new", is_error: true })
    expect(resultsIn([...records, again, closed], new Set(["a"]))).toEqual([{ call_id: "a", name: "t", outcome: "error", output: "new", is_error: true }])
  })

  it("where to read from: the last transcript change that left it no longer than a message's index (0 when none did)", () => {
    const lengths = Lengths.fromPairs([[3, 2], [7, 5], [9, 4], [12, 8]])
    expect(lengths.lastAtMost(4)).toBe(9)
    expect(lengths.lastAtMost(5)).toBe(9)
    expect(lengths.lastAtMost(7)).toBe(9)
    expect(lengths.lastAtMost(8)).toBe(12)
    expect(lengths.lastAtMost(1)).toBe(0)
  })
})
