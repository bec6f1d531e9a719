/**
 * Transcripts made by appending to another, remembered so that comparing them with it costs what
 * was appended, not the whole transcript.
 *
 * A save, a model call's context and the fold of a `transcript_delta` each compare the new
 * transcript with the saved one, message by message from the first, and each used to copy it: on
 * a busy server the saved transcript's array is rarely in the processor's cache, so the scan cost
 * about 20 ns a message (3 µs for 150 messages, measured inside a server under 64 sessions; 0.3 µs
 * for the same scan on a warm array), and it grows with the conversation. `appendMessages` makes
 * `base` + `append` and remembers it under `base` (the latest one per base); `appendedTo(base)`
 * answers it while something else still holds it. A transcript is never changed once made, so the
 * one remembered is still `base` followed by its appended messages when it is looked up.
 *
 * What is remembered is held weakly, both ways: a WeakMap from the base to a `WeakRef` of the
 * transcript made. Held strongly, each transcript would keep the next alive (a session's
 * transcript is appended to at every save, each version the base of the next), so one early
 * version still referenced held every later one: one session's heap grew with the square of its
 * turns, about 1 GB after 8,000 turns, and its garbage collection with it (docs/benchmarks.md,
 * "One session's keyed turn, stop 61").
 */
import type { Message } from "./Messages.js"

const appended = new WeakMap<ReadonlyArray<Message>, WeakRef<ReadonlyArray<Message>>>()

/** `base` followed by `append` (`base` itself when there is nothing to append), remembered as appended to `base`. */
export const appendMessages = (base: ReadonlyArray<Message>, append: ReadonlyArray<Message>): ReadonlyArray<Message> => {
  if (append.length === 0) return base
  const out = base.concat(append)
  appended.set(base, new WeakRef(out))
  return out
}

/** The transcript last made by `appendMessages(base, …)`, if it is still alive. */
export const appendedTo = (base: ReadonlyArray<Message>): ReadonlyArray<Message> | undefined => appended.get(base)?.deref()
