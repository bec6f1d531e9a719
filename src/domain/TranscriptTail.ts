/**
 * The part of a saved transcript an activation of a loop that reads the tail is given
 * (docs/abi.md, "The transcript's tail"): its last TRANSCRIPT_TAIL messages (or as many as the loop
 * asks for with `brain_transcript_tail_length`, none included), reaching further back
 * to the first assistant message with a tool call that no later tool message answers, so that a
 * loop repairing what an interruption left sees every such call with what follows it.
 *
 * Where that message is, is kept with the transcript (`UnansweredCalls`, in the session's folded
 * state) and brought up to date by each change, so that an activation finds its tail in time
 * independent of the conversation's length: scanning the whole transcript for it, as this did,
 * cost every activation O(conversation) (a Set entry per tool message).
 */
import type { Message } from "./Messages.js"

/** Messages at least in a tail (fewer only when the transcript is shorter). */
export const TRANSCRIPT_TAIL = 16

/** An assistant message with tool calls that no later tool message answers: its index, and those calls' ids. */
export interface Unanswered {
  readonly index: number
  readonly ids: ReadonlyArray<string>
}

/** A transcript's assistant messages with unanswered calls, in index order (usually none, or one round's). */
export type UnansweredCalls = ReadonlyArray<Unanswered>

export const noUnanswered: UnansweredCalls = []

/** `calls` without the calls `id` answers (a tool message answers every earlier call with its id). */
const answer = (calls: UnansweredCalls, id: string): UnansweredCalls => {
  let out: Array<Unanswered> | undefined
  for (let i = 0; i < calls.length; i++) {
    const c = calls[i]!
    if (!c.ids.includes(id)) {
      out?.push(c)
      continue
    }
    out ??= calls.slice(0, i)
    const ids = c.ids.filter((x) => x !== id)
    if (ids.length > 0) out.push({ index: c.index, ids })
  }
  return out ?? calls
}

/**
 * The unanswered calls of a transcript after `messages` were appended to it at index `from` (its
 * length before them): O(appended messages × unanswered calls). Never changes `calls`.
 */
export const unansweredAfter = (calls: UnansweredCalls, from: number, messages: ReadonlyArray<Message>): UnansweredCalls => {
  let out = calls
  for (let k = 0; k < messages.length; k++) {
    const m = messages[k]!
    if (m.role === "tool") {
      if (m.tool_call_id && out.length > 0) out = answer(out, m.tool_call_id)
    } else if (m.role === "assistant" && m.tool_calls !== undefined && m.tool_calls.length > 0) {
      out = [...out, { index: from + k, ids: m.tool_calls.map((c) => c.id) }]
    }
  }
  return out
}

/** The unanswered calls of a whole transcript (a scan: for a transcript replaced, or read from a checkpoint). */
export const unansweredOf = (messages: ReadonlyArray<Message>): UnansweredCalls => unansweredAfter(noUnanswered, 0, messages)

/**
 * The index of the tail's first message in a transcript of `length` messages whose unanswered
 * calls are `calls`: `length - messages` (0 for a shorter transcript), or the first
 * assistant message with an unanswered tool call if that comes earlier. A call is answered by a
 * tool message with its id anywhere after it (as the official loop's repair has it), so a call in
 * the tail is answered, or not, by messages in the tail.
 */
export const tailStart = (length: number, calls: UnansweredCalls, messages: number = TRANSCRIPT_TAIL): number => {
  const start = Math.max(0, length - messages)
  const first = calls.length > 0 ? calls[0]!.index : start
  return first < start ? first : start
}

/** The tail's start of `messages`, by a scan (what `tailStart` gives from calls kept up to date). */
export const transcriptTailStart = (messages: ReadonlyArray<Message>, last: number = TRANSCRIPT_TAIL): number =>
  messages.length <= last ? 0 : tailStart(messages.length, unansweredOf(messages), last)

/**
 * The tail of `transcript` a loop that reads the tail is given, and where it starts. `calls`: the
 * transcript's unanswered calls when the caller keeps them (the session's state does); scanned
 * for otherwise. `messages`: the last messages it holds at least.
 */
export const transcriptTail = (
  transcript: ReadonlyArray<Message>,
  calls?: UnansweredCalls,
  messages: number = TRANSCRIPT_TAIL
): { readonly transcript: ReadonlyArray<Message>; readonly transcript_start: number } => {
  const start = calls !== undefined ? tailStart(transcript.length, calls, messages) : transcriptTailStart(transcript, messages)
  return { transcript: start === 0 ? transcript : transcript.slice(start), transcript_start: start }
}

