/**
 * What a turn's host calls write to its session's journal, weighed by their bytes there: a
 * record's frame (30 bytes), its record kind and its payload's JSON, in UTF-8 — what the journal
 * takes for it, so that a bound counted in these bytes bounds the journal's growth, however small
 * each record (an Event of `{"kind":"a","payload":0}` is a record of about 106 bytes, not 4).
 */
import { BODY_FIXED_BYTES, HEADER_BYTES } from "../journal/Frame.js"

/** The bytes of a record of `kind` whose payload's JSON is `json`, as the journal writes it (journal/Frame.ts). */
export const recordBytes = (kind: string, json: string): number =>
  HEADER_BYTES + BODY_FIXED_BYTES + Buffer.byteLength(kind, "utf8") + Buffer.byteLength(json, "utf8")
