/**
 * The part of a saved transcript an activation of a loop that reads the tail is given
 * (docs/abi.md, "The transcript's tail"): its last TRANSCRIPT_TAIL messages, reaching further back
 * to the first assistant message with a tool call that no later tool message answers, so that a
 * loop repairing what an interruption left sees every such call with what follows it.
 */
import type { Message } from "./Messages.js"

/** Messages at least in a tail (fewer only when the transcript is shorter). */
export const TRANSCRIPT_TAIL = 16

/**
 * The index of the tail's first message in `messages`: `length - TRANSCRIPT_TAIL` (0 for a shorter
 * transcript), or the first assistant message with an unanswered tool call if that comes earlier.
 * A call is answered by a tool message with its id anywhere after it (as the official loop's
 * repair has it), so a call in the tail is answered, or not, by messages in the tail.
 */
export const transcriptTailStart = (messages: ReadonlyArray<Message>): number => {
  const n = messages.length
  let start = Math.max(0, n - TRANSCRIPT_TAIL)
  if (start === 0) return 0
  const later = new Set<string>()
  for (let i = n - 1; i >= 0; i--) {
    const m = messages[i]
    if (m.role === "tool") {
      if (m.tool_call_id) later.add(m.tool_call_id)
    } else if (i < start && m.role === "assistant" && m.tool_calls !== undefined && m.tool_calls.some((c) => !later.has(c.id))) {
      start = i
    }
  }
  return start
}

/**
 * An activation input as a loop that reads the tail is given it: `transcript` from
 * `transcript_start` on.
 */
export const withTranscriptTail = <I extends { readonly transcript: ReadonlyArray<Message> }>(
  input: I
): Omit<I, "transcript"> & { readonly transcript: ReadonlyArray<Message>; readonly transcript_start: number } => {
  const start = transcriptTailStart(input.transcript)
  return { ...input, transcript: start === 0 ? input.transcript : input.transcript.slice(start), transcript_start: start }
}
