/**
 * The idempotency store's in-memory index: per (scope, key), the claim's body hash and times,
 * the entry's state, and where its records lie in the log — never an answer's body, so memory
 * grows with the number of keys, not with the size of their answers.
 *
 * - An entry claimed or reserved by this process and not yet answered (reserved, running,
 *   answering, releasing) is a request in flight: it never expires under it.
 * - Any other entry expires `retentionMs` after its answer, or after its claim when it has none;
 *   retention 0 keeps everything.
 * - `liveBytes` counts the log bytes of the entries in the index; the rest of the log is dead
 *   weight that a rewrite drops.
 */
import type { LiveRecord } from "./Log.js"
import type { IndexRecord, NotKept } from "./Records.js"

export type EntryState =
  /** Reserved by this process and never written (`reserve`): in flight; a release forgets it. */
  | "reserved"
  /** Claimed by this process (its claim durable or on its way), no answer yet. */
  | "running"
  /** Its answer is on its way to the log. */
  | "answering"
  /** Its release is on its way to the log; once durable the entry goes. */
  | "releasing"
  /** Answered: the answer frame is at `answerOffset`, or `notKept` says what was not kept. */
  | "answered"
  /** Claimed but never answered: by an earlier process, or an answer that could not be written. */
  | "unanswered"

export interface Entry {
  readonly scope: string
  readonly key: string
  readonly bodyHash: string
  readonly claimAtMs: number
  state: EntryState
  claimOffset: number
  /** Bytes of the claim frame in the log; 0 until it is durable. */
  claimSize: number
  answerOffset: number
  answerSize: number
  answerAtMs: number
  notKept: NotKept | undefined
  /**
   * Handed over by `adopt` (a deleted session's key), possibly in place of a reservation a request
   * in flight holds: that request's own `complete` or `release` leaves it alone.
   */
  adopted: boolean
}

/** Scope and key as one map key; the length prefix keeps `("ab", "c")` apart from `("a", "bc")`. */
export const idOf = (scope: string, key: string) => `${scope.length}:${scope}${key}`

export const newEntry = (scope: string, key: string, bodyHash: string, claimAtMs: number, state: EntryState): Entry => ({
  scope,
  key,
  bodyHash,
  claimAtMs,
  state,
  claimOffset: 0,
  claimSize: 0,
  answerOffset: 0,
  answerSize: 0,
  answerAtMs: 0,
  notKept: undefined,
  adopted: false
})

export class Index {
  readonly entries = new Map<string, Entry>()
  liveBytes = 0

  constructor(private readonly retentionMs: number) {}

  expired(e: Entry, now: number) {
    return this.retentionMs > 0 &&
      e.state !== "reserved" && e.state !== "running" && e.state !== "answering" && e.state !== "releasing" &&
      now - (e.state === "answered" ? e.answerAtMs : e.claimAtMs) >= this.retentionMs
  }

  drop(id: string, e: Entry) {
    if (this.entries.get(id) !== e) return
    this.entries.delete(id)
    this.liveBytes -= e.claimSize + e.answerSize
  }

  /** Applies one record read at open, in log order (before `opened`). */
  apply(record: IndexRecord, offset: number, size: number) {
    const id = idOf(record.scope, record.key)
    if (record._tag === "Claim") {
      // A claim for a key already present follows that entry's expiry: it starts a new entry.
      const e = newEntry(record.scope, record.key, record.bodyHash, record.atMs, "unanswered")
      e.claimOffset = offset
      e.claimSize = size
      this.entries.set(id, e)
      return
    }
    const e = this.entries.get(id)
    // The first answer (or release) stands; one for a key never claimed is not kept.
    if (e === undefined || e.state !== "unanswered") return
    if (record._tag === "Release") {
      this.entries.delete(id)
      return
    }
    e.state = "answered"
    e.answerOffset = offset
    e.answerSize = size
    e.answerAtMs = record.atMs
    e.notKept = record.notKept
  }

  /** After the records are applied: drops what expired while the server was down, counts the rest. */
  opened(now: number) {
    for (const [id, e] of this.entries) {
      if (this.expired(e, now)) this.entries.delete(id)
      else this.liveBytes += e.claimSize + e.answerSize
    }
  }

  /** The durable records of the live entries, each told where a rewrite moves it. */
  live(): ReadonlyArray<LiveRecord> {
    const out: Array<LiveRecord> = []
    for (const e of this.entries.values()) {
      if (e.claimSize === 0) continue // still queued: the writer appends it after the rewrite
      out.push({ offset: e.claimOffset, size: e.claimSize, moved: (offset) => void (e.claimOffset = offset) })
      if (e.state === "answered") {
        out.push({ offset: e.answerOffset, size: e.answerSize, moved: (offset) => void (e.answerOffset = offset) })
      }
    }
    return out
  }
}
