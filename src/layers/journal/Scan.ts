/**
 * Validates one segment's bytes by the open/recovery rules of DESIGN §2.
 *
 * - A complete frame that fails a check (header or body checksum, length bounds, a sequence
 *   that is not dense, a record that is not one of the catalogue: an unknown kind, a payload that
 *   is not JSON or not its kind's schema) is corruption.
 * - The bytes ending inside a frame, or inside an atomic append, is a torn write when this is the
 *   final segment (the caller truncates it) and corruption otherwise.
 * - In the final segment, a tail of zero bytes is space the file system allocated for a write
 *   that never landed: torn too. No valid frame starts with a zero byte run, because the header
 *   checksum of a zero length is not zero.
 */
import { Either } from "effect"
import { readPayload } from "../../domain/Records.js"
import { readFrame, isZeroTail, type DecodedFrame } from "./Frame.js"

export interface ScanOptions {
  readonly isFinal: boolean
  /** The sequence the first frame must carry. */
  readonly firstSequence: number
  /**
   * Called for each committed frame, in order (frames of an atomic append only once it is whole),
   * with its payload's JSON text.
   */
  readonly onFrame?: (frame: DecodedFrame, offset: number, json: string) => void
}

export type ScanResult =
  | {
    readonly _tag: "Clean" | "Torn"
    /** The offset after the last committed frame. */
    readonly end: number
    /** The last committed sequence (firstSequence - 1 when there is none). */
    readonly lastSequence: number
    readonly lastRecordedAtMs: number
    /** For Torn: what would be truncated and why. */
    readonly reason?: string
  }
  | { readonly _tag: "Corrupt"; readonly offset: number; readonly reason: string }

export const scanSegment = (buf: Buffer, options: ScanOptions): ScanResult => {
  let offset = 0
  let expected = options.firstSequence
  let committedEnd = 0
  let lastSequence = options.firstSequence - 1
  let lastRecordedAtMs = 0
  let group: Array<[DecodedFrame, number, string]> = []
  let groupStart = -1

  const torn = (reason: string): ScanResult =>
    options.isFinal
      ? { _tag: "Torn", end: committedEnd, lastSequence, lastRecordedAtMs, reason }
      : {
        _tag: "Corrupt",
        offset: groupStart >= 0 ? groupStart : offset,
        reason: `incomplete non-final segment: ${reason}`
      }

  while (offset < buf.length) {
    const read = readFrame(buf, offset)
    if (read._tag === "Incomplete") return torn(read.reason)
    if (read._tag === "Corrupt") {
      if (options.isFinal && isZeroTail(buf, offset)) return torn("the segment ends in unwritten (zero) space")
      return { _tag: "Corrupt", offset, reason: read.reason }
    }
    const frame = read.frame
    if (frame.sequence !== expected) {
      return { _tag: "Corrupt", offset, reason: `sequence ${frame.sequence} where ${expected} was expected` }
    }
    const json = frame.json.toString("utf8")
    const record = readPayload(frame.kind, json)
    if (Either.isLeft(record)) return { _tag: "Corrupt", offset, reason: `unreadable record: ${record.left}` }
    if (groupStart < 0) groupStart = offset
    group.push([frame, offset, json])
    offset += frame.size
    expected++
    if (!frame.groupContinues) {
      for (const [f, at, json] of group) options.onFrame?.(f, at, json)
      lastSequence = frame.sequence
      lastRecordedAtMs = frame.recordedAtMs
      committedEnd = offset
      group = []
      groupStart = -1
    }
  }
  if (group.length > 0) return torn("the segment ends inside an atomic append")
  return { _tag: "Clean", end: committedEnd, lastSequence, lastRecordedAtMs }
}
