/**
 * One session's open journal: its segments, the durable end, a sparse read index, and the
 * sticky failure flag. Opening validates every segment by the recovery rules and truncates a
 * torn final write (then syncs) before anything else sees the journal.
 */
import * as path from "node:path"
import { Effect } from "effect"
import { READ_INDEX_STRIDE, RECENT_BYTES, RECENT_RECORDS } from "../../domain/Limits.js"
import type { SessionId } from "../../domain/Ids.js"
import type { JournalRecord, RecordKind } from "../../domain/Records.js"
import { JournalCorrupt, type JournalWriteFailed, SessionNotFound } from "../../services/Journal.js"
import { journalDir, parseSegmentName, segmentName } from "./DataDir.js"
import type { FileDriverShape, FileError } from "./FileDriver.js"
import { readFrame } from "./Frame.js"
import { scanSegment } from "./Scan.js"

export interface Segment {
  readonly firstSequence: number
  readonly path: string
  /** Durable bytes: everything before this offset is committed. */
  size: number
}

export interface IndexEntry {
  readonly sequence: number
  readonly segment: number
  readonly offset: number
}

/** A committed record as kept in the recent tail: the payload stays JSON text until read. */
export interface RecentRecord {
  readonly sequence: number
  readonly recordedAtMs: number
  readonly kind: string
  readonly json: string
  readonly size: number
}

export class SessionHandle {
  readonly segments: Array<Segment> = []
  readonly index: Array<IndexEntry> = []
  /** The newest committed records (at most RECENT_RECORDS and about RECENT_BYTES), oldest first. */
  recent: Array<RecentRecord> = []
  recentBytes = 0
  lastSequence = 0
  lastRecordedAtMs = 0
  /** Write descriptor of the final segment, opened by the writer on demand. */
  fd: number | undefined = undefined
  broken: JournalWriteFailed | undefined = undefined
  /** Appends queued or being written; a handle is dropped from memory only at zero. */
  inflight = 0
  /** Dropped from memory: appends must go to a freshly opened handle. */
  evicted = false
  constructor(readonly session: SessionId, readonly dir: string) {}

  get finalSegment(): Segment | undefined {
    return this.segments[this.segments.length - 1]
  }

  remember(sequence: number, segment: number, offset: number) {
    if (offset === 0 || sequence % READ_INDEX_STRIDE === 0) this.index.push({ sequence, segment, offset })
  }

  /** Adds committed records (in sequence order) to the recent tail, dropping the oldest. */
  keepRecent(records: ReadonlyArray<RecentRecord>) {
    for (const r of records) {
      this.recent.push(r)
      this.recentBytes += r.size
    }
    let drop = 0
    while (
      this.recent.length - drop > 1 &&
      (this.recent.length - drop > RECENT_RECORDS || this.recentBytes > RECENT_BYTES)
    ) {
      this.recentBytes -= this.recent[drop]!.size
      drop++
    }
    if (drop > 0) this.recent = this.recent.slice(drop)
  }

  /** Drops the recent tail (memory budget); reads then go to the files. */
  dropRecent() {
    this.recent = []
    this.recentBytes = 0
  }

  /** Records after `after` served from memory, or undefined when the tail does not reach back that far. */
  readRecent(after: number, limit: number, maxBytes: number | undefined): Array<JournalRecord> | undefined {
    const first = this.recent[0]
    if (!first || first.sequence > after + 1) return undefined
    const out: Array<JournalRecord> = []
    let bytes = 0
    for (let i = after + 1 - first.sequence; i < this.recent.length && out.length < limit; i++) {
      const r = this.recent[i]!
      bytes += r.size
      if (maxBytes !== undefined && out.length > 0 && bytes > maxBytes) break
      out.push({ sequence: r.sequence, recorded_at_ms: r.recordedAtMs, kind: r.kind as RecordKind, payload: JSON.parse(r.json) })
    }
    return out
  }

  /** The index entry to start reading from to find the record after `after`. */
  seek(after: number): IndexEntry | undefined {
    let lo = 0
    let hi = this.index.length - 1
    let found: IndexEntry | undefined
    while (lo <= hi) {
      const mid = (lo + hi) >> 1
      const e = this.index[mid]!
      if (e.sequence <= after + 1) {
        found = e
        lo = mid + 1
      } else hi = mid - 1
    }
    return found
  }
}

const corrupt = (session: string, file: string, offset: number, reason: string) =>
  new JournalCorrupt({ session, file, offset, reason })

const asCorrupt = (session: string, file: string) => (e: FileError) =>
  corrupt(session, file, 0, `cannot read: ${e.code} ${e.detail}`)

/** Lists a journal's segments in order; fails if the session has no journal directory. */
export const listSegments = (driver: FileDriverShape, dataDir: string, session: SessionId) => {
  const dir = journalDir(dataDir, session)
  return driver.readdir(dir).pipe(
    Effect.mapError(() => new SessionNotFound({ session })),
    Effect.map((names) =>
      names
        .map((name) => ({ name, first: parseSegmentName(name) }))
        .filter((s): s is { name: string; first: number } => s.first !== undefined)
        .sort((a, b) => a.first - b.first)
        .map((s) => ({ firstSequence: s.first, path: path.join(dir, s.name), size: 0 }))
    ),
    Effect.map((segments) => ({ dir, segments }))
  )
}

/** What opening found at the end of the final segment (for the operator CLI). */
export interface TornTail {
  readonly file: string
  readonly offset: number
  readonly bytes: number
  readonly reason: string
}

/**
 * Validates every segment. `repair` truncates a torn final write and syncs; without it
 * (the read-only CLI) the torn tail is only reported.
 */
export const openHandle = (driver: FileDriverShape, dataDir: string, session: SessionId, repair: boolean) =>
  Effect.gen(function*() {
    const { dir, segments } = yield* listSegments(driver, dataDir, session)
    const handle = new SessionHandle(session, dir)
    let torn: TornTail | undefined
    let expected = 1
    for (let i = 0; i < segments.length; i++) {
      const seg = segments[i]!
      const file = seg.path
      if (seg.firstSequence !== expected) {
        return yield* Effect.fail(
          corrupt(session, file, 0, `segment starts at sequence ${seg.firstSequence} where ${expected} was expected`)
        )
      }
      const buf = yield* driver.readFile(file).pipe(Effect.mapError(asCorrupt(session, file)))
      const isFinal = i === segments.length - 1
      const segIndex = handle.segments.length
      const result = scanSegment(buf, {
        isFinal,
        firstSequence: seg.firstSequence,
        onFrame: (frame, offset) => {
          handle.remember(frame.sequence, segIndex, offset)
          if (isFinal) {
            handle.keepRecent([{
              sequence: frame.sequence,
              recordedAtMs: frame.recordedAtMs,
              kind: frame.kind,
              json: frame.json.toString("utf8"),
              size: frame.size
            }])
          }
        }
      })
      if (result._tag === "Corrupt") return yield* Effect.fail(corrupt(session, file, result.offset, result.reason))
      if (!isFinal && result.lastSequence < seg.firstSequence) {
        return yield* Effect.fail(corrupt(session, file, 0, "empty non-final segment"))
      }
      if (result._tag === "Torn") {
        torn = { file, offset: result.end, bytes: buf.length - result.end, reason: result.reason ?? "torn write" }
        if (repair) {
          const fd = yield* driver.open(file, "r+").pipe(Effect.mapError(asCorrupt(session, file)))
          yield* driver.ftruncate(fd, result.end).pipe(
            Effect.zipRight(driver.fdatasync(fd)),
            Effect.ensuring(Effect.ignore(driver.close(fd))),
            Effect.mapError(asCorrupt(session, file))
          )
        }
      }
      seg.size = result.end
      handle.segments.push(seg)
      if (result.lastSequence >= seg.firstSequence) {
        handle.lastSequence = result.lastSequence
        handle.lastRecordedAtMs = result.lastRecordedAtMs
      }
      expected = result.lastSequence + 1
    }
    return { handle, torn }
  })

export const newSegmentPath = (handle: SessionHandle, firstSequence: number) =>
  path.join(handle.dir, segmentName(firstSequence))

const READ_CHUNK = 256 * 1024

/**
 * Reads durable records after `after`. Every frame is checked again on the way out: damage that
 * appeared after open is reported as corruption, never returned as data.
 */
export const readRecords = (
  driver: FileDriverShape,
  handle: SessionHandle,
  after: number,
  limit: number,
  maxBytes: number | undefined
) =>
  Effect.gen(function*() {
    const out: Array<JournalRecord> = []
    const last = handle.lastSequence
    if (after >= last || limit <= 0) return out
    const fromMemory = handle.readRecent(after, limit, maxBytes)
    if (fromMemory) return fromMemory
    const start = handle.seek(after)
    if (!start) return out
    let bytes = 0
    for (let s = start.segment; s < handle.segments.length; s++) {
      const seg = handle.segments[s]!
      const end = seg.size
      let offset = s === start.segment ? start.offset : 0
      if (offset >= end) continue
      const fd = yield* driver.open(seg.path, "r").pipe(Effect.mapError(asCorrupt(handle.session, seg.path)))
      const done = yield* Effect.gen(function*() {
        let buf = Buffer.allocUnsafe(READ_CHUNK)
        let bufStart = offset
        let bufLen = 0
        for (;;) {
          if (offset >= end) return false
          let read = readFrame(buf, offset - bufStart, bufLen)
          if (read._tag === "Incomplete") {
            // Refill from this frame's start; grow the buffer for a frame larger than a chunk.
            const at = offset - bufStart
            const frameSize = bufLen - at >= 4 ? buf.readUInt32LE(at) + 12 : 0
            const need = Math.max(frameSize, READ_CHUNK)
            if (need > buf.length) buf = Buffer.allocUnsafe(need)
            bufStart = offset
            bufLen = yield* driver.read(fd, buf.subarray(0, Math.min(buf.length, end - offset)), offset).pipe(
              Effect.mapError(asCorrupt(handle.session, seg.path))
            )
            read = readFrame(buf, 0, bufLen)
            if (read._tag === "Incomplete" && bufLen >= 12 && buf.readUInt32LE(0) + 12 > buf.length) {
              // The chunk before ended inside this frame's length, so the refill may be too small.
              // Its header is whole and checked now (readFrame says so): read the frame whole.
              buf = Buffer.allocUnsafe(buf.readUInt32LE(0) + 12)
              bufLen = yield* driver.read(fd, buf.subarray(0, Math.min(buf.length, end - offset)), offset).pipe(
                Effect.mapError(asCorrupt(handle.session, seg.path))
              )
              read = readFrame(buf, 0, bufLen)
            }
            if (read._tag === "Incomplete") {
              return yield* Effect.fail(corrupt(handle.session, seg.path, offset, `committed frame unreadable: ${read.reason}`))
            }
          }
          if (read._tag === "Corrupt") return yield* Effect.fail(corrupt(handle.session, seg.path, offset, read.reason))
          const f = read.frame
          offset += f.size
          if (f.sequence <= after) continue
          if (f.sequence > last) return true
          bytes += f.size
          if (maxBytes !== undefined && out.length > 0 && bytes > maxBytes) return true
          out.push({
            sequence: f.sequence,
            recorded_at_ms: f.recordedAtMs,
            kind: f.kind as RecordKind,
            payload: JSON.parse(f.json.toString("utf8"))
          })
          if (out.length >= limit) return true
        }
      }).pipe(Effect.ensuring(Effect.ignore(driver.close(fd))))
      if (done) break
    }
    return out
  })
