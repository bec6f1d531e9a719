/**
 * Turns entries into bytes before anything is queued, so bad input is refused whole and the
 * writer only assembles frames.
 */
import { BODY_FIXED_BYTES, HEADER_BYTES } from "./Frame.js"
import { MAX_FRAME_BYTES, MAX_KIND_BYTES } from "../../domain/Limits.js"
import { checkPayload, type Entry, type RecordKind, type WrittenEntry } from "../../domain/Records.js"
import { RecordRejected } from "../../services/Journal.js"

export interface Prepared {
  readonly kind: RecordKind
  readonly kindBytes: Buffer
  readonly jsonText: string
  readonly json: Buffer
}

const kindBytesCache = new Map<string, Buffer>()
const kindBytes = (kind: string) => {
  let b = kindBytesCache.get(kind)
  if (!b) {
    b = Buffer.from(kind, "utf8")
    kindBytesCache.set(kind, b)
  }
  return b
}

const stringify = (payload: unknown): string | undefined => {
  try {
    return JSON.stringify(payload)
  } catch {
    return undefined
  }
}

/** The entries as bytes, or why they are refused (plain, not an effect: it runs on every append). */
export const prepareEntries = (entries: ReadonlyArray<Entry>): ReadonlyArray<Prepared> | RecordRejected => {
  if (entries.length === 0) return new RecordRejected({ reason: "an append needs at least one record" })
  const out: Array<Prepared> = []
  for (const e of entries) {
    const refused = checkPayload(e.kind, e.payload)
    if (refused !== undefined) return new RecordRejected({ reason: refused, kind: e.kind })
    // Written already by its maker (`writtenEntry`), or now.
    const jsonText = (e as Partial<WrittenEntry>).json ?? stringify(e.payload)
    if (jsonText === undefined) return new RecordRejected({ reason: `${e.kind} payload is not serializable as JSON`, kind: e.kind })
    const kb = kindBytes(e.kind)
    if (kb.length > MAX_KIND_BYTES) return new RecordRejected({ reason: "kind name too long" })
    const json = Buffer.from(jsonText, "utf8")
    if (BODY_FIXED_BYTES + kb.length + json.length > MAX_FRAME_BYTES) {
      return new RecordRejected({
        reason: `${e.kind} record of ${HEADER_BYTES + json.length} bytes is above the journal's frame maximum (${MAX_FRAME_BYTES} bytes)`,
        kind: e.kind
      })
    }
    out.push({ kind: e.kind, kindBytes: kb, jsonText, json })
  }
  return out
}
