/**
 * The transcript's tail a loop that reads only the tail is given (domain/TranscriptTail.ts): never
 * more than the last TRANSCRIPT_TAIL messages unless a tool call before them is unanswered, and
 * then from the first assistant message holding one, so no such call is ever left out.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { Message } from "../../src/domain/Messages.js"
import { empty, fold, type SessionState } from "../../src/domain/Projection.js"
import { deserializeState, serializeState } from "../../src/domain/SerializedState.js"
import {
  noUnanswered,
  TRANSCRIPT_TAIL,
  tailStart,
  transcriptTail,
  transcriptTailStart,
  unansweredAfter,
  unansweredOf
} from "../../src/domain/TranscriptTail.js"

const ids = ["a", "b", "c", "d", "e", "f"]
const message: fc.Arbitrary<Message> = fc.oneof(
  fc.constant<Message>({ role: "user", content: "hi" }),
  fc.constant<Message>({ role: "assistant", content: "ok" }),
  fc.subarray(ids, { minLength: 1, maxLength: 3 }).map((calls): Message => ({
    role: "assistant",
    content: "",
    tool_calls: calls.map((id) => ({ id, name: "t", input: {} }))
  })),
  fc.constantFrom(...ids).map((id): Message => ({ role: "tool", tool_call_id: id, content: "1" }))
)

/** Indices of assistant messages with a call no later tool message answers. */
const openRounds = (messages: ReadonlyArray<Message>) =>
  messages.flatMap((m, i) => {
    const later = new Set(messages.slice(i + 1).filter((t) => t.role === "tool").map((t) => t.tool_call_id))
    return m.role === "assistant" && (m.tool_calls ?? []).some((c) => !later.has(c.id)) ? [i] : []
  })

describe("the transcript's tail", () => {
  it("is the whole of a short transcript, and the last TRANSCRIPT_TAIL messages of a long one with every call answered", () => {
    const talk = (n: number) => Array.from({ length: n }, (_, i): Message => ({ role: i % 2 ? "assistant" : "user", content: `${i}` }))
    expect(transcriptTailStart([])).toBe(0)
    expect(transcriptTailStart(talk(TRANSCRIPT_TAIL))).toBe(0)
    expect(transcriptTailStart(talk(TRANSCRIPT_TAIL + 1))).toBe(1)
    expect(transcriptTailStart(talk(1000))).toBe(1000 - TRANSCRIPT_TAIL)
  })

  it("starts at the first assistant message with a call no later tool message answers, and never after the last TRANSCRIPT_TAIL messages", () => {
    fc.assert(
      fc.property(fc.array(message, { maxLength: 60 }), (messages) => {
        const start = transcriptTailStart(messages)
        const open = openRounds(messages)
        const last = Math.max(0, messages.length - TRANSCRIPT_TAIL)
        expect(start).toBe(open.length > 0 ? Math.min(open[0]!, last) : last)
      }),
      { numRuns: 500 }
    )
  })

  it("a loop asking for n last messages (brain_transcript_tail_length) gets them, never fewer, and still every message from the first unanswered call on; kept calls and a scan agree", () => {
    fc.assert(
      fc.property(fc.array(message, { maxLength: 60 }), fc.nat({ max: 70 }), (messages, n) => {
        const open = openRounds(messages)
        const last = Math.max(0, messages.length - n)
        const expected = open.length > 0 ? Math.min(open[0]!, last) : last
        expect(transcriptTailStart(messages, n)).toBe(expected)
        expect(tailStart(messages.length, unansweredOf(messages), n)).toBe(expected)
        expect(transcriptTail(messages, unansweredOf(messages), n)).toEqual({ transcript: messages.slice(expected), transcript_start: expected })
      }),
      { numRuns: 500 }
    )
  })

  it("kept up to date by appends, the unanswered calls equal a scan's and give its start after every change", () => {
    fc.assert(
      fc.property(fc.array(fc.array(message, { maxLength: 8 }), { maxLength: 20 }), (batches) => {
        let transcript: Array<Message> = []
        let calls = noUnanswered
        for (const batch of batches) {
          calls = unansweredAfter(calls, transcript.length, batch)
          transcript = [...transcript, ...batch]
          expect(calls).toEqual(unansweredOf(transcript))
          const open = openRounds(transcript)
          const last = Math.max(0, transcript.length - TRANSCRIPT_TAIL)
          expect(tailStart(transcript.length, calls)).toBe(open.length > 0 ? Math.min(open[0]!, last) : last)
        }
      }),
      { numRuns: 300 }
    )
  })

  it("the session's folded state keeps the unanswered calls through appends, replacements and a checkpoint, and the tail it gives is the scan's", () => {
    // A delta keeps a prefix (the whole transcript or less) and appends a batch.
    const delta = fc.record({ keepAll: fc.boolean(), keep: fc.nat({ max: 40 }), append: fc.array(message, { maxLength: 6 }) })
    fc.assert(
      fc.property(fc.array(delta, { maxLength: 25 }), (deltas) => {
        let state: SessionState = empty
        deltas.forEach((d, i) => {
          const keep = d.keepAll ? state.transcript.length : Math.min(d.keep, state.transcript.length)
          state = fold(state, { sequence: i + 1, recorded_at_ms: i, kind: "transcript_delta", payload: { keep, append: d.append } })
          expect(state.unanswered).toEqual(unansweredOf(state.transcript))
          const kept = transcriptTail(state.transcript, state.unanswered)
          const scanned = transcriptTail(state.transcript)
          const open = openRounds(state.transcript)
          const last = Math.max(0, state.transcript.length - TRANSCRIPT_TAIL)
          expect(kept.transcript_start).toBe(open.length > 0 ? Math.min(open[0]!, last) : last)
          expect(kept.transcript_start).toBe(scanned.transcript_start)
          expect(kept.transcript).toEqual(state.transcript.slice(kept.transcript_start))
        })
        const restored = deserializeState(JSON.parse(JSON.stringify(serializeState(state))))
        expect(restored.unanswered).toEqual(state.unanswered)
      }),
      { numRuns: 300 }
    )
  })
})
