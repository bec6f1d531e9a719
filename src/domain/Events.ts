/**
 * Public Events: the per-record view of a journal that readers see. An Event needs only its record
 * and the transcript's length before it (Projection.ts keeps those lengths for any cursor).
 */
import { Catalogue, EXTENSION_KIND, type JournalRecord, type Origin, TRANSCRIPT_REPLACED } from "./Records.js"
import { stringifyKept } from "./JsonText.js"

/** The public Event envelope. */
export interface Event {
  readonly session_id: string
  readonly sequence: number
  readonly recorded_at_ms: number
  readonly kind: string
  readonly data: unknown
  readonly origin?: Origin
}

/**
 * The public Event a record projects to, if any. `transcriptLength` is the transcript's length
 * just before this record: a delta that keeps fewer messages replaces part of the saved tail
 * and is public as `transcript_replaced`; pure appends and kv changes stay private.
 */
export const toEvent = (session: string, record: JournalRecord, transcriptLength: number): Event | undefined => {
  // Each Event written out as one literal, never `{ ...base, kind, data }`: on this runtime an
  // object spread followed by fields its source lacks costs about a microsecond and gives every
  // object a hidden class of its own, which slows each later read of its fields
  // (docs/benchmarks.md, "Objects spread with new fields").
  if (record.kind === EXTENSION_KIND) {
    return {
      session_id: session,
      sequence: record.sequence,
      recorded_at_ms: record.recorded_at_ms,
      kind: record.payload.kind,
      data: record.payload.payload ?? {},
      origin: record.payload.origin
    }
  }
  if (record.kind === "transcript_delta") {
    return record.payload.keep < transcriptLength
      ? { session_id: session, sequence: record.sequence, recorded_at_ms: record.recorded_at_ms, kind: TRANSCRIPT_REPLACED, data: record.payload }
      : undefined
  }
  if (Catalogue[record.kind].visibility === "private") return undefined
  return { session_id: session, sequence: record.sequence, recorded_at_ms: record.recorded_at_ms, kind: record.kind, data: record.payload ?? {} }
}

/**
 * An Event's JSON, exactly as `JSON.stringify(event)` writes an Event `toEvent` made, without
 * writing its `data` again when that is a payload read with its text (JsonText.ts).
 */
export const eventJson = (e: Event): string =>
  `{"session_id":${JSON.stringify(e.session_id)},"sequence":${JSON.stringify(e.sequence)},"recorded_at_ms":${JSON.stringify(e.recorded_at_ms)},"kind":${JSON.stringify(e.kind)}${e.data === undefined ? "" : `,"data":${stringifyKept(e.data)}`}${e.origin === undefined ? "" : `,"origin":${JSON.stringify(e.origin)}`}}`

/** The public Events of consecutive records, given the transcript length before the first. */
export const eventsOf = (session: string, records: Iterable<JournalRecord>, transcriptLength: number): Array<Event> => {
  const out: Array<Event> = []
  let length = transcriptLength
  for (const r of records) {
    const e = toEvent(session, r, length)
    if (e) out.push(e)
    if (r.kind === "transcript_delta") length = Math.min(length, r.payload.keep) + r.payload.append.length
  }
  return out
}
