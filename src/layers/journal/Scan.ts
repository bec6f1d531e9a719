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
 *
 * - A frame below `recordsFrom` (the records a valid checkpoint covers, Handle.ts) is checked by
 *   everything above but its record: its payload is neither parsed nor held to its kind's schema
 *   here, but by the read that returns it (Handle.ts, `readRecords`), as every read checks every
 *   record it returns.
 *
 * Every frame is checked, so a segment (up to 64 MiB) is a lot of main-thread work: it is done
 * in slices of at most SCAN_SLICE_BYTES of frames or SCAN_SLICE_MS, and the event loop gets a turn
 * (`setImmediate`: timers and sockets too, not only other fibers) between two slices, so that
 * opening a long session does not hold every other request for the whole scan.
 */
import { Effect, Either } from "effect"
import { readPayload } from "../../domain/Records.js"
import { readFrame, isZeroTail, type DecodedFrame } from "./Frame.js"
import { eventLoopTurn } from "../Waits.js"

/** Bytes of frames checked between two turns of the event loop. */
export const SCAN_SLICE_BYTES = 256 * 1024
/** Milliseconds of checking between two turns of the event loop (whichever of the two comes first). */
export const SCAN_SLICE_MS = 10
/** Frames checked between two readings of the clock (a power of two). */
const SCAN_CLOCK_FRAMES = 32

export interface ScanOptions {
  readonly isFinal: boolean
  /** The sequence the first frame must carry. */
  readonly firstSequence: number
  /** Frames with a lower sequence have their checksums, bounds and density checked, not their records. Default: every record is. */
  readonly recordsFrom?: number
  /**
   * Called for each committed frame, in order (frames of an atomic append only once it is whole).
   * Its payload is `frame.json` (a view of the segment's bytes): a caller that keeps the text
   * makes it, so that the frames nobody keeps are not turned into strings twice.
   */
  readonly onFrame?: (frame: DecodedFrame, offset: number) => void
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

export const scanSegment = (buf: Buffer, options: ScanOptions): Effect.Effect<ScanResult> =>
  Effect.gen(function*() {
    let offset = 0
    let expected = options.firstSequence
    const recordsFrom = options.recordsFrom ?? 0
    let committedEnd = 0
    let lastSequence = options.firstSequence - 1
    let lastRecordedAtMs = 0
    let group: Array<[DecodedFrame, number]> = []
    let groupStart = -1
    let sliceStart = 0
    let sliceStartedMs = performance.now()
    let frames = 0

    const torn = (reason: string): ScanResult =>
      options.isFinal
        ? { _tag: "Torn", end: committedEnd, lastSequence, lastRecordedAtMs, reason }
        : {
          _tag: "Corrupt",
          offset: groupStart >= 0 ? groupStart : offset,
          reason: `incomplete non-final segment: ${reason}`
        }

    while (offset < buf.length) {
      // The clock is read every SCAN_CLOCK_FRAMES frames: reading it at each cost more than many a frame's check.
      if (offset - sliceStart >= SCAN_SLICE_BYTES || ((++frames & (SCAN_CLOCK_FRAMES - 1)) === 0 && performance.now() - sliceStartedMs >= SCAN_SLICE_MS)) {
        yield* eventLoopTurn
        sliceStart = offset
        sliceStartedMs = performance.now()
      }
      const read = readFrame(buf, offset)
      if (read._tag === "Incomplete") return torn(read.reason)
      if (read._tag === "Corrupt") {
        if (options.isFinal && isZeroTail(buf, offset)) return torn("the segment ends in unwritten (zero) space")
        return { _tag: "Corrupt", offset, reason: read.reason } satisfies ScanResult
      }
      const frame = read.frame
      if (frame.sequence !== expected) {
        return { _tag: "Corrupt", offset, reason: `sequence ${frame.sequence} where ${expected} was expected` } satisfies ScanResult
      }
      if (frame.sequence >= recordsFrom) {
        const record = readPayload(frame.kind, frame.json.toString("utf8"))
        if (Either.isLeft(record)) return { _tag: "Corrupt", offset, reason: `unreadable record: ${record.left}` } satisfies ScanResult
      }
      if (groupStart < 0) groupStart = offset
      group.push([frame, offset])
      offset += frame.size
      expected++
      if (!frame.groupContinues) {
        for (const [f, at] of group) options.onFrame?.(f, at)
        lastSequence = frame.sequence
        lastRecordedAtMs = frame.recordedAtMs
        committedEnd = offset
        group = []
        groupStart = -1
      }
    }
    if (group.length > 0) return torn("the segment ends inside an atomic append")
    return { _tag: "Clean", end: committedEnd, lastSequence, lastRecordedAtMs } satisfies ScanResult
  })
