/**
 * Transcript deltas: a `transcript_delta` record keeps the first `keep` messages of the saved
 * transcript and appends the rest. Applying one, and finding the smallest between two transcripts.
 */
import { appendedTo, appendMessages } from "./Appended.js"
import type { Message } from "./Messages.js"

/**
 * Applies a transcript delta: keep the first `keep` messages, then append. With `concat`, whose
 * array is allocated at its final length: a spread grows its array as it goes (about 1.7 times
 * the bytes for a transcript of a few hundred messages, and slower), and every save folds one.
 */
export const applyDelta = (
  transcript: ReadonlyArray<Message>,
  delta: { readonly keep: number; readonly append: ReadonlyArray<Message> }
): ReadonlyArray<Message> => {
  if (delta.keep < transcript.length) return transcript.slice(0, delta.keep).concat(delta.append)
  // The transcript the delta was taken from, when it was made by appending these very messages
  // (Appended.ts): that array, not a copy, so that the next comparison with it is cheap too.
  const made = appendedTo(transcript)
  if (made !== undefined && made.length === transcript.length + delta.append.length) {
    let i = 0
    while (i < delta.append.length && made[transcript.length + i] === delta.append[i]) i++
    if (i === delta.append.length) return made
  }
  return appendMessages(transcript, delta.append)
}

/** The smallest delta that turns `from` into `to`: keep the common prefix, append the rest. */
export const diffTranscript = (from: ReadonlyArray<Message>, to: ReadonlyArray<Message>) => {
  // `to` is `from` itself, or was made by appending to it (Appended.ts): no message to compare.
  if (to === from) return { keep: from.length, append: [] as ReadonlyArray<Message> }
  if (appendedTo(from) === to) return { keep: from.length, append: to.slice(from.length) }
  let keep = 0
  const n = Math.min(from.length, to.length)
  while (keep < n && (from[keep] === to[keep] || jsonEqual(from[keep], to[keep]))) keep++
  return { keep, append: to.slice(keep) }
}

/** The delta that turns the saved transcript `from` into `to`, or undefined when `to` is `from` (nothing to save). */
export const transcriptChange = (from: ReadonlyArray<Message>, to: ReadonlyArray<Message>) => {
  const delta = diffTranscript(from, to)
  return delta.keep === from.length && delta.append.length === 0 ? undefined : delta
}

/** Structural equality of JSON values (key order ignored, as JSON objects are unordered). */
export const jsonEqual = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  const ka = Object.keys(a).filter((k) => (a as any)[k] !== undefined)
  const kb = Object.keys(b).filter((k) => (b as any)[k] !== undefined)
  if (ka.length !== kb.length) return false
  for (const k of ka) if (!jsonEqual((a as any)[k], (b as any)[k])) return false
  return true
}
