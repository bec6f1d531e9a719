/**
 * A loop's working transcript as a delta against the saved one (docs/abi.md, "The transcript as a
 * delta"): the saved transcript's first `keep` messages, unchanged, then the messages added since.
 * `modelContext` and `setTranscriptDelta` (host.ts) send it as `{"keep", "append"}`, so a host call
 * costs what was appended since the last save, not the whole transcript; `returnOkSaving` (abi.ts)
 * puts it on the loop's output instead, saving it without a host call.
 *
 * Rules:
 * - It starts as the activation's transcript (`new Transcript(activation.transcript,
 *   activation.transcriptStart)`): everything kept, nothing appended. A loop that reads the tail
 *   holds only the messages from `transcriptStart` on; the delta counts the ones before as kept. `push` appends; `replace` swaps in a whole new array, and the kept
 *   prefix shrinks to where the new array first holds a different value (compared by identity: a
 *   message is unchanged only when it is the same `Json` value, as `shallowCopy` and `push` onto a
 *   new array keep them).
 * - After a successful save (`setTranscriptDelta` does it, or call `markSaved` after saving some
 *   other way) the whole transcript is the saved one: `keep` is its length and nothing is appended.
 *   A failed save changes nothing.
 * - The base is what Brain holds for this activation: the input's transcript, then what the last
 *   successful save saved. Saving with `setTranscript(messages)` without `markSaved` leaves this
 *   object out of step; make a new one from the saved messages instead.
 */
import { Json } from "./json"

export class Transcript {
  /** The messages from `start` on: the first `kept` are the saved transcript's, the same values. */
  private items: Json
  private kept: i32
  /** How many of the held saved messages there are (the base's, as Brain holds it for this activation). */
  private savedLength: i32

  /**
   * The saved transcript (an array, as `activation.transcript` gives it; copied one level deep, so
   * it is left as it came). `start` is the index of its first message in the saved transcript
   * (`activation.transcriptStart`): a loop that reads the tail holds only the messages from there,
   * and the ones before it count as kept.
   */
  constructor(saved: Json, private readonly start: i32 = 0) {
    if (!saved.isArray()) throw new Error("a transcript is a JSON array of messages")
    if (start < 0) throw new Error("a transcript starts at a message index, 0 or more")
    this.items = saved.shallowCopy()
    this.kept = this.items.length
    this.savedLength = this.kept
  }

  /** Whether it differs from the saved transcript: a message appended, or one of the saved ones changed or dropped. */
  get changed(): bool {
    return this.kept != this.savedLength || this.items.length != this.kept
  }

  /** How many of the saved transcript's first messages are unchanged (the delta's `keep`). */
  get keep(): i32 {
    return this.start + this.kept
  }

  /** How many messages: the kept ones (those before `start` too) and the appended ones. */
  get length(): i32 {
    return this.start + this.items.length
  }

  /** The message at `i`, counted from the saved transcript's first (aborts when out of range or before `start`). */
  at(i: i32): Json {
    if (i < this.start) throw new Error("the message is before the transcript's tail: read it with transcriptRange")
    return this.items.at(i - this.start)
  }

  /** Appends a message; returns this transcript. */
  push(message: Json): Transcript {
    this.items.push(message)
    return this
  }

  /**
   * The transcript becomes `messages` (an array, copied one level deep): the messages from `start`
   * on, those before it staying as they are. The kept prefix is the longest one in which
   * `messages` holds the same values (by identity) as the saved transcript.
   */
  replace(messages: Json): void {
    if (!messages.isArray()) throw new Error("a transcript is a JSON array of messages")
    const n = min(this.kept, messages.length)
    let keep = 0
    while (keep < n && changetype<usize>(messages.at(keep)) == changetype<usize>(this.items.at(keep))) keep++
    this.items = messages.shallowCopy()
    this.kept = keep
  }

  /** The messages after the kept ones (the delta's `append`), as a new array. */
  appended(): Json {
    const out = Json.array()
    const n = this.items.length
    for (let i = this.kept; i < n; i++) out.push(this.items.at(i))
    return out
  }

  /** All the messages as a new array (for the whole-transcript form, `model(messages)`); a transcript that holds only the tail has no such form. */
  messages(): Json {
    if (this.start > 0) throw new Error("the transcript holds only its tail: send it as a delta (modelContext, setTranscriptDelta)")
    return this.items.shallowCopy()
  }

  /** `{"keep", "append"}`: the request of `set_transcript`'s delta form, and `model`'s `context`. */
  delta(): Json {
    return Json.object().set("keep", Json.int(this.start + this.kept)).set("append", this.appended())
  }

  /** The transcript as it is now is the saved one (after a successful save). */
  markSaved(): void {
    this.kept = this.items.length
    this.savedLength = this.kept
  }

  /**
   * `{"keep", "append"}` saving only the messages before `end` (counted from the saved
   * transcript's first, as `at` counts): the kept ones and the appended ones up to `end`. How a
   * loop saves what it appended in pieces, each within a request's bound; `markSavedTo(end)` once
   * the save succeeded.
   */
  deltaTo(end: i32): Json {
    const to = end - this.start
    if (to < this.kept || to > this.items.length) throw new Error("a piece of the transcript ends between its kept messages and its end")
    const out = Json.array()
    for (let i = this.kept; i < to; i++) out.push(this.items.at(i))
    return Json.object().set("keep", Json.int(this.start + this.kept)).set("append", out)
  }

  /** Replaces the message at `i`, one appended and not saved yet (at or after `keep`). */
  setAt(i: i32, message: Json): void {
    const at = i - this.start
    if (at < this.kept || at >= this.items.length) throw new Error("only a message appended since the last save can be replaced")
    const out = Json.array()
    const n = this.items.length
    for (let k = 0; k < n; k++) out.push(k == at ? message : this.items.at(k))
    this.items = out
  }

  /** The messages before `end` are the saved transcript (after `deltaTo(end)` was saved). */
  markSavedTo(end: i32): void {
    this.kept = end - this.start
    this.savedLength = this.kept
  }
}
