/**
 * One session's journal files as the file store (FileStore.ts) keeps them while the session is
 * open: its segments, their durable sizes, a sparse read index and the write descriptor. Opening
 * validates every segment by the recovery rules and truncates a torn final write (then syncs)
 * before anything else sees the journal; reading checks every frame again on the way out.
 */
import * as path from "node:path"
import { Effect, Either } from "effect"
import { READ_INDEX_BYTES, READ_INDEX_STRIDE, RECENT_BYTES, RECENT_RECORDS } from "../../domain/Limits.js"
import type { SessionId } from "../../domain/Ids.js"
import { type JournalRecord, readPayload, type RecordKind } from "../../domain/Records.js"
import { JournalCorrupt, JournalUnavailable, SessionNotFound } from "../../services/Journal.js"
import { journalDir, parseSegmentName, SESSIONS_DIR, segmentName } from "./DataDir.js"
import { type FileDriverShape, type FileError, isExhausted, withFile } from "./FileDriver.js"
import { type DecodedFrame, HEADER_BYTES, readFrame } from "./Frame.js"
import { recordDigest } from "../projection/Checkpoint.js"
import { type Cover, readCover } from "./Cover.js"
import { scanSegment } from "./Scan.js"
import { type RecentRecord, RecentTail } from "./Tail.js"

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

/** One session's journal files as the file store keeps them while it is open. */
export class SessionHandle {
  readonly segments: Array<Segment> = []
  readonly index: Array<IndexEntry> = []
  /** Write descriptor of the final segment, opened by the store on demand. */
  fd: number | undefined = undefined
  /** Its last write failed: the descriptor is closed once the round ends, and nothing more is written. */
  failed = false
  constructor(readonly session: SessionId, readonly dir: string) {}

  get finalSegment(): Segment | undefined {
    return this.segments[this.segments.length - 1]
  }

  remember(sequence: number, segment: number, offset: number) {
    const last = this.index[this.index.length - 1]
    if (
      offset === 0 || sequence % READ_INDEX_STRIDE === 0 ||
      (last !== undefined && (last.segment !== segment || offset - last.offset >= READ_INDEX_BYTES))
    ) this.index.push({ sequence, segment, offset })
  }

  /**
   * An upper bound on the bytes a read of the record after `after` goes through: from the index
   * entry it starts at (`seek`) to the next entry in that segment, or the segment's end. Every
   * segment's start is indexed, so the record lies between the two.
   */
  bytesToRead(after: number): number {
    let lo = 0
    let hi = this.index.length - 1
    let at = -1
    while (lo <= hi) {
      const mid = (lo + hi) >> 1
      if (this.index[mid]!.sequence <= after + 1) {
        at = mid
        lo = mid + 1
      } else hi = mid - 1
    }
    const start = this.index[at]
    if (start === undefined) return 0
    const next = this.index[at + 1]
    const end = next !== undefined && next.segment === start.segment ? next.offset : this.segments[start.segment]?.size ?? start.offset
    return Math.max(0, end - start.offset)
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

/**
 * A segment named relative to the data directory (`sessions/{id}/journal/{name}`): errors reach
 * clients, and a client has no business knowing where the server keeps its files.
 */
const corrupt = (session: string, file: string, offset: number, reason: string) =>
  new JournalCorrupt({ session, file: path.join(SESSIONS_DIR, session, "journal", path.basename(file)), offset, reason })

/** Out of descriptors (EMFILE, ENFILE): the journal cannot be reached now, and nothing is wrong with it. */
export const unavailable = (session: SessionId | undefined, e: FileError) => new JournalUnavailable({ session, reason: e.reason })

/**
 * The file system refused to read (or, at open, to cut a torn end off) a journal's file: EACCES,
 * EPERM, EIO. Nothing was read, so nothing is judged: not corruption, which an operator repairs by
 * removing the session (docs/journal.md, "Opening and recovery").
 */
const unreadable = (session: SessionId, file: string, what: string, e: FileError) =>
  new JournalUnavailable({ session, reason: `${what} ${path.join(SESSIONS_DIR, session, "journal", path.basename(file))}: ${e.detail}`, why: "unreadable" })

/**
 * A file that cannot be read. One that vanished was removed with its session (a delete racing
 * this read): the session is not found; a lack of descriptors, or a read the file system refused,
 * is unavailable. None of them is corruption.
 */
const notRead = (session: SessionId, file: string, what = "cannot read") => (e: FileError): SessionNotFound | JournalUnavailable =>
  e.code === "ENOENT"
    ? new SessionNotFound({ session })
    : isExhausted(e)
    ? unavailable(session, e)
    : unreadable(session, file, what, e)

/**
 * Lists a journal's segments in order; fails if the session has no journal directory (not found),
 * if descriptors are lacking (unavailable), or if the directory is there and cannot be listed.
 */
export const listSegments = (driver: FileDriverShape, dataDir: string, session: SessionId) => {
  const dir = journalDir(dataDir, session)
  return driver.readdir(dir).pipe(
    Effect.mapError((e) =>
      e.code === "ENOENT" || e.code === "ENOTDIR"
        ? new SessionNotFound({ session })
        : isExhausted(e)
        ? unavailable(session, e)
        : new JournalUnavailable({ session, reason: `cannot list ${path.join(SESSIONS_DIR, session, "journal")}: ${e.detail}`, why: "unreadable" })
    ),
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

/** What an open found: its handle, committed end, recent tail and torn final write (if any). */
export interface Opened {
  readonly handle: SessionHandle
  readonly lastSequence: number
  readonly lastRecordedAtMs: number
  readonly recent: ReadonlyArray<RecentRecord>
  readonly torn: TornTail | undefined
}

/**
 * Validates every segment. `repair` truncates a torn final write and syncs; without it
 * (the read-only CLI) the torn tail is only reported.
 *
 * `withCheckpoint` (the server's opens; never the CLI's, which checks everything) lets a valid
 * checkpoint shorten the check (docs/journal.md, "Opening and recovery"): the frames before the
 * record it was folded through are checked by their checksums, bounds and density, and their
 * records by the reads that return them, as every read checks what it returns — save those the
 * recent tail keeps, which it serves from memory: they are checked here. The checkpoint covers
 * them only if its checksum holds (Cover.ts) and the journal's record at its sequence has its
 * digest, which the scan reaches and checks in full. A checkpoint that does not hold, or any damage
 * found while it covers, and the whole open is done again checking every record, so that what it
 * refuses, and where, is what an open without the checkpoint finds.
 */
export const openHandle = (driver: FileDriverShape, dataDir: string, session: SessionId, repair: boolean, withCheckpoint = false) =>
  Effect.gen(function*() {
    const cover = withCheckpoint ? yield* readCover(driver, dataDir, session) : undefined
    if (cover !== undefined) {
      const covered = yield* openSegments(driver, dataDir, session, repair, cover)
      if (covered !== undefined) return covered
    }
    return (yield* openSegments(driver, dataDir, session, repair, undefined))!
  })

/** Undefined (only with a cover) when the cover does not hold or damage was found: the caller opens again without it. */
const openSegments = (driver: FileDriverShape, dataDir: string, session: SessionId, repair: boolean, cover: Cover | undefined) =>
  Effect.gen(function*() {
    const { dir, segments } = yield* listSegments(driver, dataDir, session)
    const handle = new SessionHandle(session, dir)
    const tail = new RecentTail()
    let lastSequence = 0
    let lastRecordedAtMs = 0
    let torn: TornTail | undefined
    let expected = 1
    /** Whether the record at the cover's sequence is the one the checkpoint was folded through (undefined: not reached). */
    let coverHolds: boolean | undefined
    const recordsFrom = cover?.sequence ?? 0
    /** Damage: refused, or (with a cover) the open done again without it. */
    const refuse = (e: JournalCorrupt) => (cover === undefined ? Effect.fail(e) : Effect.succeed(undefined))
    for (let i = 0; i < segments.length; i++) {
      const seg = segments[i]!
      const file = seg.path
      if (seg.firstSequence !== expected) {
        return yield* refuse(corrupt(session, file, 0, `segment starts at sequence ${seg.firstSequence} where ${expected} was expected`))
      }
      const buf = yield* driver.readFile(file).pipe(Effect.mapError(notRead(session, file)))
      const isFinal = i === segments.length - 1
      const segIndex = handle.segments.length
      // The recent tail can only hold the final segment's last RECENT_RECORDS frames: only those
      // are remembered (trimmed now and then, not at every frame) and only those become text.
      let last: Array<DecodedFrame> = []
      const result = yield* scanSegment(buf, {
        isFinal,
        firstSequence: seg.firstSequence,
        recordsFrom,
        onFrame: (frame, offset) => {
          handle.remember(frame.sequence, segIndex, offset)
          if (isFinal) {
            last.push(frame)
            if (last.length >= 2 * RECENT_RECORDS) last = last.slice(-RECENT_RECORDS)
          }
          if (cover !== undefined && frame.sequence === cover.sequence) coverHolds = digestOf(frame) === cover.digest
        }
      })
      if (result._tag === "Corrupt") return yield* refuse(corrupt(session, file, result.offset, result.reason))
      if (coverHolds === false || (isFinal && cover !== undefined && coverHolds !== true)) return undefined
      if (isFinal) {
        // The frames the tail keeps (its bounds, RECENT_RECORDS and RECENT_BYTES, at least one):
        // only they are made text, not a record of megabytes the tail would drop at once.
        let from = last.length
        let bytes = 0
        while (from > 0) {
          const size = last[from - 1]!.size
          if (from < last.length && (last.length - from >= RECENT_RECORDS || bytes + size > RECENT_BYTES)) break
          bytes += size
          from--
        }
        const kept: Array<RecentRecord> = []
        for (const frame of last.slice(from)) {
          const json = frame.json.toString("utf8")
          // The tail serves its records from memory, unchecked: one the scan left to its read is
          // checked now, and damage is judged by the open without the cover.
          if (frame.sequence < recordsFrom && Either.isLeft(readPayload(frame.kind, json))) return undefined
          kept.push({ sequence: frame.sequence, recordedAtMs: frame.recordedAtMs, kind: frame.kind, json, size: frame.size })
        }
        tail.keep(kept)
      }
      if (!isFinal && result.lastSequence < seg.firstSequence) {
        return yield* refuse(corrupt(session, file, 0, "empty non-final segment"))
      }
      if (result._tag === "Torn") {
        torn = { file, offset: result.end, bytes: buf.length - result.end, reason: result.reason ?? "torn write" }
        if (repair) {
          yield* withFile(driver, file, "r+", (fd) => Effect.zipRight(driver.ftruncate(fd, result.end), driver.fdatasync(fd))).pipe(
            Effect.mapError(notRead(session, file, "cannot cut the torn end off"))
          )
        }
      }
      seg.size = result.end
      handle.segments.push(seg)
      if (result.lastSequence >= seg.firstSequence) {
        lastSequence = result.lastSequence
        lastRecordedAtMs = result.lastRecordedAtMs
      }
      expected = result.lastSequence + 1
    }
    if (cover !== undefined && coverHolds !== true) return undefined
    const opened: Opened = { handle, lastSequence, lastRecordedAtMs, recent: tail.records, torn }
    return opened
  })

/** The digest of a frame's record (Checkpoint.ts, `recordDigest`); undefined when it cannot be read. */
const digestOf = (frame: DecodedFrame): number | undefined => {
  const payload = readPayload(frame.kind, frame.json.toString("utf8"))
  return Either.isLeft(payload)
    ? undefined
    : recordDigest({ sequence: frame.sequence, recorded_at_ms: frame.recordedAtMs, kind: frame.kind as RecordKind, payload: payload.right })
}

export const newSegmentPath = (handle: SessionHandle, firstSequence: number) =>
  path.join(handle.dir, segmentName(firstSequence))

const READ_CHUNK = 256 * 1024
/**
 * Bytes a read asking for fewer than READ_CHUNK (`maxBytes`: a small Events page) starts with; it
 * doubles at each refill, up to READ_CHUNK, so that reading past frames to the first one wanted
 * takes a few calls, not one per chunk.
 */
const FIRST_READ_CHUNK = 16 * 1024

/**
 * Reads durable records after `after`, up to `last` (the committed end). Every frame is checked
 * again on the way out: damage that appeared after open is reported as corruption, never returned
 * as data.
 */
export const readRecords = (
  driver: FileDriverShape,
  handle: SessionHandle,
  after: number,
  last: number,
  limit: number,
  maxBytes: number | undefined
) =>
  Effect.gen(function*() {
    const out: Array<JournalRecord> = []
    if (after >= last || limit <= 0) return out
    const start = handle.seek(after)
    if (!start) return out
    let bytes = 0
    for (let s = start.segment; s < handle.segments.length; s++) {
      const seg = handle.segments[s]!
      const end = seg.size
      let offset = s === start.segment ? start.offset : 0
      if (offset >= end) continue
      // Opened and closed in one interruption-safe step: a reader that goes away (a client that
      // hangs up) interrupts the read anywhere, and the descriptor is given back all the same.
      const done = yield* Effect.acquireUseRelease(
        driver.open(seg.path, "r").pipe(Effect.mapError(notRead(handle.session, seg.path))),
        (fd) =>
          Effect.gen(function*() {
            let buf = Buffer.allocUnsafe(maxBytes === undefined ? READ_CHUNK : Math.min(READ_CHUNK, Math.max(FIRST_READ_CHUNK, maxBytes)))
            let bufStart = offset
            let bufLen = 0
            for (;;) {
              if (offset >= end) return false
              // Full: the next frame would not be taken, so it is not read.
              if (maxBytes !== undefined && out.length > 0 && bytes >= maxBytes) return true
              let read = readFrame(buf, offset - bufStart, bufLen)
              // Refill from this frame's start. A first refill may show only the header, which says
              // how big the frame is (a valid header's length is at most the frame maximum): then grow
              // the buffer and read again. Still incomplete with every byte up to `end` read means
              // the committed frame cannot be read whole: corruption.
              while (read._tag === "Incomplete") {
                const at = offset - bufStart
                const known = bufLen - at >= HEADER_BYTES ? buf.readUInt32LE(at) + HEADER_BYTES : 0
                const available = end - offset
                if (bufStart === offset && bufLen >= Math.min(Math.max(known, buf.length), available)) {
                  return yield* Effect.fail(corrupt(handle.session, seg.path, offset, `committed frame unreadable: ${read.reason}`))
                }
                if (known > buf.length) buf = Buffer.allocUnsafe(known)
                else if (bufLen > 0 && buf.length < READ_CHUNK) buf = Buffer.allocUnsafe(Math.min(READ_CHUNK, 2 * buf.length))
                bufStart = offset
                const wanted = Math.min(buf.length, available)
                // Never abandoned in flight: the descriptor is closed only once no call on it is under way.
                bufLen = yield* driver.read(fd, buf.subarray(0, wanted), offset).pipe(
                  Effect.uninterruptible,
                  Effect.mapError(notRead(handle.session, seg.path))
                )
                if (bufLen < wanted) {
                  return yield* Effect.fail(corrupt(handle.session, seg.path, offset, "the file is shorter than what was committed to it"))
                }
                read = readFrame(buf, 0, bufLen)
              }
              if (read._tag === "Corrupt") return yield* Effect.fail(corrupt(handle.session, seg.path, offset, read.reason))
              const f = read.frame
              offset += f.size
              if (f.sequence <= after) continue
              if (f.sequence > last) return true
              bytes += f.size
              if (maxBytes !== undefined && out.length > 0 && bytes > maxBytes) return true
              const payload = readPayload(f.kind, f.json.toString("utf8"))
              if (Either.isLeft(payload)) {
                return yield* Effect.fail(corrupt(handle.session, seg.path, offset - f.size, `unreadable record: ${payload.left}`))
              }
              out.push({ sequence: f.sequence, recorded_at_ms: f.recordedAtMs, kind: f.kind as RecordKind, payload: payload.right })
              if (out.length >= limit) return true
            }
          }),
        (fd) => Effect.ignore(driver.close(fd))
      )
      if (done) break
    }
    return out
  })
