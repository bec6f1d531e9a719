/**
 * The idempotency store's in-memory index: per (scope, key), the claim's body hash, a time, the
 * entry's state, and where its records lie in the log — never an answer's body, so memory grows
 * with the number of keys, not with the size of their answers.
 *
 * - An entry claimed or reserved by this process and not yet answered (reserved, running,
 *   answering, releasing) is a request in flight: it never expires under it. A claim never
 *   answered (by an earlier process, or whose answer could not be written) and an answered
 *   ambiguous verdict are unresolved: they never expire, but an adopted key (a deleted session's,
 *   which nothing can run again) expires as any. Expiry and the bound on the entries (`maxKeys`,
 *   `hasRoom`) are KeyBound.ts's, shared with the memory store.
 * - `liveBytes` counts the log bytes of the entries in the index; the rest of the log is dead
 *   weight that a rewrite drops.
 * - The map keeps its entries in the order they expire, nearly: an entry moves to the end when
 *   it is answered (`settled`), so the oldest answers lead and room is made from the front. An
 *   entry out of that order (an adopted key, with its original time) is found by a full sweep,
 *   made at most once per IDEMPOTENCY_FULL_SWEEP_MS while the index is full, and by every
 *   compaction.
 * - An entry is found by a digest of its scope and key (`idOf`), so neither is held in memory: a
 *   key of 256 bytes costs what a key of 1 byte does. The log's records carry them.
 */
import * as crypto from "node:crypto"
import { sessionOfScope } from "../../services/Idempotency.js"
import { IDEMPOTENCY_FULL_SWEEP_MS, KeyBound } from "./KeyBound.js"
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
  readonly bodyHash: string
  /** When it was claimed, or answered once it is (the time its expiry runs from). */
  atMs: number
  state: EntryState
  claimOffset: number
  /** Bytes of the claim frame in the log; 0 until it is durable. */
  claimSize: number
  answerOffset: number
  answerSize: number
  notKept: NotKept | undefined
  /** Its answer is an ambiguous verdict (Records.ts, `isAmbiguousVerdict`). */
  verdict: boolean
  /** The session its claim named (a create's minted id): an Ambiguous answer for the key names it. */
  session: string | undefined
  /**
   * Handed over by `adopt` (a deleted session's key), possibly in place of a reservation a request
   * in flight holds: that request's own `complete` or `release` leaves it alone.
   */
  adopted: boolean
  /**
   * The session whose request claimed it (`sessionOfScope`), counted toward that session's share
   * of the index: set for a claim, and for a reservation once it is kept; never for an adopted key.
   */
  owner: string | undefined
}

/** Any UTF-16 surrogate: text holding one is hashed as UTF-16 (a lone one has no UTF-8 form). */
const SURROGATE = /[\uD800-\uDFFF]/

/**
 * Scope and key as one map key: the SHA-256 of both, its 32 bytes as a one-byte string ("binary").
 * The length prefix keeps `("ab", "c")` apart from `("a", "bc")`. Text with a surrogate is hashed
 * as UTF-16 (UTF-8 would turn every lone surrogate into the same replacement character) under
 * another leading byte, so no two different pairs hash the same bytes.
 */
/** The pair `idOf` hashed last, and its digest (a key of at most IDEMPOTENCY_KEY_MAX_BYTES: nothing large kept). */
let last: { readonly scope: string; readonly key: string; readonly id: string } | undefined

export const idOf = (scope: string, key: string): string => {
  // A keyed request asks twice, for its reservation and for its release (or its answer), and at
  // low concurrency nothing comes between: the last pair's digest, not a second hash.
  if (last !== undefined && key === last.key && scope === last.scope) return last.id
  const text = `${scope.length}:${scope}${key}`
  const id = SURROGATE.test(text)
    ? crypto.hash("sha256", Buffer.from(`6${text}`, "utf16le"), "binary")
    : crypto.hash("sha256", `8${text}`, "binary")
  last = { scope, key, id }
  return id
}


export const newEntry = (bodyHash: string, atMs: number, state: EntryState, session?: string): Entry => ({
  bodyHash,
  atMs,
  state,
  claimOffset: 0,
  claimSize: 0,
  answerOffset: 0,
  answerSize: 0,
  notKept: undefined,
  verdict: false,
  session,
  adopted: false,
  owner: undefined
})

export class Index extends KeyBound<Entry> {
  liveBytes = 0

  constructor(
    retentionMs: number,
    maxKeys: number = Number.POSITIVE_INFINITY,
    sessionKeys: number = Number.POSITIVE_INFINITY,
    reserveKeys = 0
  ) {
    super(retentionMs, maxKeys, IDEMPOTENCY_FULL_SWEEP_MS, sessionKeys, reserveKeys)
  }

  protected inFlight(e: Entry) {
    return e.state === "reserved" || e.state === "running" || e.state === "answering" || e.state === "releasing"
  }

  protected unresolved(e: Entry) {
    return (e.state === "unanswered" && !e.adopted) || (e.state === "answered" && e.verdict)
  }

  /** Moves an entry just answered to the end, behind every entry that expires before it. */
  settled(id: string, e: Entry) {
    if (this.entries.get(id) !== e) return
    this.entries.delete(id)
    this.entries.set(id, e)
  }

  protected override dropped(e: Entry) {
    this.liveBytes -= e.claimSize + e.answerSize
  }

  /** Applies one record read at open, in log order (before `opened`). */
  apply(record: IndexRecord, offset: number, size: number) {
    const id = idOf(record.scope, record.key)
    if (record._tag === "Claim") {
      // A claim for a key already present follows that entry's expiry: it starts a new entry.
      const e = newEntry(record.bodyHash, record.atMs, "unanswered", record.session)
      e.adopted = record.adopted === true
      if (!e.adopted) e.owner = sessionOfScope(record.scope)
      e.claimOffset = offset
      e.claimSize = size
      // At the end, as a new entry is: the map stays in the order entries expire.
      this.forget(id)
      this.put(id, e)
      return
    }
    const e = this.entries.get(id)
    // The first answer (or release) stands; one for a key never claimed is not kept.
    if (e === undefined || e.state !== "unanswered") return
    if (record._tag === "Release") {
      this.forget(id)
      return
    }
    this.settled(id, e)
    e.state = "answered"
    e.answerOffset = offset
    e.answerSize = size
    e.atMs = record.atMs
    e.notKept = record.notKept
    e.verdict = record.verdict
  }

  /** After the records are applied: drops what expired while the server was down, counts the rest. */
  opened(now: number) {
    for (const [id, e] of this.entries) {
      if (this.expired(e, now)) this.forget(id)
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
