/**
 * A session's recent tail: its newest committed records (at most RECENT_RECORDS and about
 * RECENT_BYTES), oldest first, with payloads kept as JSON text until read. Reads that start
 * inside it are served from memory, whatever store holds the journal; a payload read keeps its
 * text (JsonText.ts), for the Event that writes it out again.
 */
import { RECENT_BYTES, RECENT_RECORDS } from "../../domain/Limits.js"
import { parseKept } from "../../domain/JsonText.js"
import type { JournalRecord, RecordKind } from "../../domain/Records.js"

/** A committed record as kept in the recent tail. */
export interface RecentRecord {
  readonly sequence: number
  readonly recordedAtMs: number
  readonly kind: string
  readonly json: string
  /** Its frame's size in bytes (the unit of every byte bound on reads). */
  readonly size: number
}

export class RecentTail {
  records: Array<RecentRecord> = []
  bytes = 0

  /** Adds committed records (in sequence order), dropping the oldest past the bounds. */
  keep(records: ReadonlyArray<RecentRecord>) {
    for (const r of records) {
      this.records.push(r)
      this.bytes += r.size
    }
    let drop = 0
    while (
      this.records.length - drop > 1 &&
      (this.records.length - drop > RECENT_RECORDS || this.bytes > RECENT_BYTES)
    ) {
      this.bytes -= this.records[drop]!.size
      drop++
    }
    if (drop > 0) this.records = this.records.slice(drop)
  }

  /** Drops the tail (memory budget); reads then go to the store. */
  drop() {
    this.records = []
    this.bytes = 0
  }

  /** Records after `after` served from memory, or undefined when the tail does not reach back that far. */
  read(after: number, limit: number, maxBytes: number | undefined): Array<JournalRecord> | undefined {
    const first = this.records[0]
    if (!first || first.sequence > after + 1) return undefined
    const out: Array<JournalRecord> = []
    let bytes = 0
    for (let i = after + 1 - first.sequence; i < this.records.length && out.length < limit; i++) {
      const r = this.records[i]!
      bytes += r.size
      if (maxBytes !== undefined && out.length > 0 && bytes > maxBytes) break
      out.push({ sequence: r.sequence, recorded_at_ms: r.recordedAtMs, kind: r.kind as RecordKind, payload: parseKept(r.json) })
    }
    return out
  }
}
