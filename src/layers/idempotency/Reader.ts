/**
 * Reading the idempotency log without holding it in memory: a cursor reads the file in chunks
 * of IDEMPOTENCY_READ_CHUNK_BYTES (a larger frame whole, never more than the frame maximum), and
 * every frame is checked (header and body CRC-32) before anything uses it.
 *
 * - `scanLog` applies the journal's recovery rules to the one file (DESIGN §2, final segment):
 *   the file ending inside a frame, or in a run of zero bytes, is a torn write (the caller
 *   truncates it); a complete frame that fails a check, a sequence that is not dense from 1, or
 *   a record the caller cannot read is damage, reported with its offset.
 * - `salvageLog` (the operator's repair) keeps going past damage: it resynchronises on the next
 *   offset where a whole frame's header and body checksums hold, and reports the bytes skipped.
 * - `readFrameAt` reads one frame whose offset and size the index knows (a replay, a compaction
 *   copy) with one positioned read.
 */
import { Effect } from "effect"
import { IDEMPOTENCY_READ_CHUNK_BYTES } from "../../domain/Limits.js"
import type { FileDriverShape, FileError } from "../journal/FileDriver.js"
import { type DecodedFrame, type FrameRead, HEADER_BYTES, readFrame } from "../journal/Frame.js"

const INCOMPLETE: FrameRead = { _tag: "Incomplete", reason: "the log ends inside a frame header" }

/** Reads `buf.length` bytes at `position`, or fewer only where the file ends. */
const readFully = (driver: FileDriverShape, fd: number, buf: Buffer, position: number) =>
  Effect.gen(function*() {
    let got = 0
    while (got < buf.length) {
      const n = yield* driver.read(fd, buf.subarray(got), position + got)
      if (n === 0) break
      got += n
    }
    return got
  })

/** A window over the file: frames are decoded from it, and it is refilled from the frame asked for. */
class Cursor {
  private buf = Buffer.alloc(0)
  private start = 0
  private len = 0

  constructor(
    private readonly driver: FileDriverShape,
    private readonly fd: number,
    readonly fileSize: number,
    private readonly chunk: number
  ) {}

  private load(offset: number, want: number) {
    return Effect.gen(this, function*() {
      const size = Math.min(want, this.fileSize - offset)
      // A buffer grown for one large frame is given back at the next ordinary chunk.
      if (size > this.buf.length || (this.buf.length > this.chunk && size <= this.chunk)) {
        this.buf = Buffer.allocUnsafe(Math.max(size, this.chunk))
      }
      this.start = offset
      this.len = yield* readFully(this.driver, this.fd, this.buf.subarray(0, size), offset)
    })
  }

  /** The frame at `offset`: whole, damaged, or cut short by the end of the file. */
  at(offset: number): Effect.Effect<FrameRead, FileError> {
    return Effect.gen(this, function*() {
      const inWindow = offset >= this.start && offset < this.start + this.len
      let read = inWindow ? readFrame(this.buf, offset - this.start, this.len) : INCOMPLETE
      if (read._tag !== "Incomplete" || (inWindow && this.start + this.len >= this.fileSize)) return read
      yield* this.load(offset, this.chunk)
      read = readFrame(this.buf, 0, this.len)
      // Incomplete with a whole header means the header passed its checks: its length is sound.
      if (read._tag === "Incomplete" && this.len >= HEADER_BYTES && this.len < this.fileSize - offset) {
        yield* this.load(offset, HEADER_BYTES + this.buf.readUInt32LE(0))
        read = readFrame(this.buf, 0, this.len)
      }
      return read
    })
  }

  /** Whether every byte from `offset` to the end of the file is zero (space never written). */
  zeroFrom(offset: number): Effect.Effect<boolean, FileError> {
    return Effect.gen(this, function*() {
      for (let at = offset; at < this.fileSize; at += this.len) {
        yield* this.load(at, this.chunk)
        if (this.len === 0) return true
        for (let i = 0; i < this.len; i++) if (this.buf[i] !== 0) return false
      }
      return true
    })
  }
}

/** One frame of the log, as the scan hands it over: `json` is valid only during the callback. */
export interface LogFrame {
  readonly offset: number
  readonly size: number
  readonly sequence: number
  readonly recordedAtMs: number
  readonly kind: string
  readonly json: Buffer
}

export type ScanVerdict =
  /** `end` = the file size. */
  | { readonly _tag: "Clean"; readonly end: number; readonly records: number }
  /** Everything from `end` on is a torn final write. */
  | { readonly _tag: "Torn"; readonly end: number; readonly records: number; readonly reason: string }
  | { readonly _tag: "Damaged"; readonly offset: number; readonly reason: string }

const toLogFrame = (frame: DecodedFrame, offset: number): LogFrame => ({
  offset,
  size: frame.size,
  sequence: frame.sequence,
  recordedAtMs: frame.recordedAtMs,
  kind: frame.kind,
  json: frame.json
})

/**
 * Walks the whole log in order, handing each frame to `onFrame`, which returns a reason when it
 * cannot use the record (the log is then damaged at that frame).
 */
export const scanLog = (
  driver: FileDriverShape,
  fd: number,
  fileSize: number,
  onFrame: (frame: LogFrame) => string | undefined,
  chunk: number = IDEMPOTENCY_READ_CHUNK_BYTES
): Effect.Effect<ScanVerdict, FileError> =>
  Effect.gen(function*() {
    const cursor = new Cursor(driver, fd, fileSize, chunk)
    let offset = 0
    let records = 0
    while (offset < fileSize) {
      const read = yield* cursor.at(offset)
      if (read._tag === "Incomplete") return { _tag: "Torn", end: offset, records, reason: read.reason } as const
      if (read._tag === "Corrupt") {
        if (yield* cursor.zeroFrom(offset)) {
          return { _tag: "Torn", end: offset, records, reason: "the log ends in unwritten (zero) space" } as const
        }
        return { _tag: "Damaged", offset, reason: read.reason } as const
      }
      const frame = read.frame
      if (frame.sequence !== records + 1) {
        return { _tag: "Damaged", offset, reason: `sequence ${frame.sequence} where ${records + 1} was expected` } as const
      }
      if (frame.groupContinues) return { _tag: "Damaged", offset, reason: "an atomic-group flag, which this log never writes" } as const
      const refused = onFrame(toLogFrame(frame, offset))
      if (refused !== undefined) return { _tag: "Damaged", offset, reason: refused } as const
      offset += frame.size
      records++
    }
    return { _tag: "Clean", end: offset, records } as const
  })

/** Bytes `salvageLog` skipped: from `offset`, `bytes` long, and what was wrong at their start. */
export interface Skipped {
  readonly offset: number
  readonly bytes: number
  readonly reason: string
}

/**
 * Walks the log keeping every whole frame: past damage it resynchronises on the next offset
 * where a frame's header and body checksums hold (and whose sequence is above the last kept
 * one). `onFrame` gets each whole frame in order; what lies between them is returned.
 */
export const salvageLog = (
  driver: FileDriverShape,
  fd: number,
  fileSize: number,
  onFrame: (frame: LogFrame) => Effect.Effect<void, FileError>,
  chunk: number = IDEMPOTENCY_READ_CHUNK_BYTES
): Effect.Effect<ReadonlyArray<Skipped>, FileError> =>
  Effect.gen(function*() {
    const cursor = new Cursor(driver, fd, fileSize, chunk)
    const skipped: Array<Skipped> = []
    let lastSequence = 0
    const usable = (read: FrameRead): read is { _tag: "Frame"; frame: DecodedFrame } =>
      read._tag === "Frame" && read.frame.sequence > lastSequence && !read.frame.groupContinues
    let offset = 0
    while (offset < fileSize) {
      const read = yield* cursor.at(offset)
      if (usable(read)) {
        yield* onFrame(toLogFrame(read.frame, offset))
        lastSequence = read.frame.sequence
        offset += read.frame.size
        continue
      }
      const reason = read._tag === "Frame"
        ? `sequence ${read.frame.sequence} after ${lastSequence}`
        : read.reason
      let next = offset + 1
      while (next < fileSize && !usable(yield* cursor.at(next))) next++
      skipped.push({ offset, bytes: next - offset, reason })
      offset = next
    }
    return skipped
  })

/** The frame the index placed at `offset` with `size` bytes, checked; a string says what is wrong. */
export const readFrameAt = (driver: FileDriverShape, fd: number, offset: number, size: number) =>
  Effect.gen(function*() {
    const buf = Buffer.allocUnsafe(size)
    const got = yield* readFully(driver, fd, buf, offset)
    if (got < size) return `the log ends ${size - got} bytes short of the record`
    const read = readFrame(buf, 0, size)
    if (read._tag !== "Frame") return read.reason
    if (read.frame.size !== size) return `a frame of ${read.frame.size} bytes where ${size} were recorded`
    return read.frame
  })
