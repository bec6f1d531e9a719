/**
 * The commit log (docs/journal.md, "The commit log"): how one durable write per group-commit round
 * stands for the writes of every session in it. A round writes each session's frames to its
 * segment file without syncing it, and one batch holding all of them — each file's name, the
 * position and the bytes — to the commit log, a file opened with `O_DSYNC` (at once with the
 * segment writes, or after them: FileDriver.ts `syncMany`); a round's appends are acknowledged once
 * both are done. So a round of 40 sessions costs one durable write, not 40.
 *
 * - Two log files, `a.log` and `b.log`, under `{dataDir}/commit-log/`, each sized ahead to the
 *   capacity at start (`recover`). Rounds append batches to the current one; once it holds
 *   `capacity` bytes the next round switches to the other, which is written again from its start
 *   under a new epoch and salt (CommitLogFormat.ts: what an earlier use left there never passes
 *   for a batch of this one).
 * - A log file is written again only once everything its batches wrote to segment files is
 *   durable there: at each switch the segment files written while the log now left was current
 *   are fdatasync'd, in the background, and the next switch back to that log waits for it. A
 *   segment file closed meanwhile (rotated, its session dropped, its descriptor reclaimed) is
 *   fdatasync'd as it is closed (`closing`), before its descriptor can name another file.
 * - On start (`recover`, with the data directory locked, before any session opens), both logs'
 *   whole batches are written again where they say, the older epoch's first, and the files
 *   fdatasync'd: whatever an acknowledged round wrote is in its segment file again even if the
 *   machine lost the page cache; then both logs are emptied, their first header zeroed (a clean
 *   stop syncs every segment written and empties them too, so the start after it has nothing to
 *   write). A session deleted
 *   while a log may still hold its writes cannot be created again until both logs have moved on.
 *   Writing a batch again is harmless when its bytes already are there: segment files are only
 *   appended to, and a torn end is cut only after this, at open. A file that no longer exists was
 *   deleted with its session, and is skipped. A file the log would write past its end (a hole) is
 *   one no crash leaves: the session's files were copied or restored beside a log that still held
 *   writes to them. Nothing is written to that session (its files stay as they are, and open as
 *   they are), and the start says so in the log.
 * - A failed write of the log (or a batch that landed while every segment write of its round
 *   failed, which the driver reports as one) fails its round's appends, and nothing of them may stand (Store.ts):
 *   the batch, whatever of it landed, is erased (`erased`: its header, if it landed, zeroed durably) before they
 *   are answered, and the file store cuts their segment files back to where the round began. The
 *   next round writes its batch where the failed one began. A segment that cannot be cut back is
 *   synced instead (`notCutBack`: what stands of the failed write is durable then, so that nothing
 *   a later append follows is missing after a power loss). A batch that cannot be erased, a failure
 *   of such a sync, or of a segment's sync before its log is written over, is sticky: nothing more
 *   is acknowledged (a log that cannot be trusted cannot be written over).
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { Cause, Deferred, Effect, Exit, Fiber, FiberId, Option } from "effect"
import { isSessionId } from "../../domain/Ids.js"
import { DataDirError } from "./DataDir.js"
import { type CommitLogWrite, type FileDriverShape, type FileError, SEGMENT_WRITES_SYNCED } from "./FileDriver.js"
import { BATCH_HEADER_BYTES, isBatchHeader, type LogEntry, type LogUse, type ScannedLog, scanLog, scanNeedsMore } from "./CommitLogFormat.js"
import type { Segment, SessionHandle } from "./Handle.js"

export const COMMIT_LOG_DIR = "commit-log"
export const LOG_FILES = ["a.log", "b.log"] as const

/** A new use's salt: 48 random bits, known only to this process (CommitLogFormat.ts). */
const newSalt = () => crypto.randomBytes(6).readUIntLE(0, 6)

/** How a log file is opened: written in place, each write durable as it returns where the platform has `O_DSYNC`. */
const LOG_FLAGS = fs.constants.O_RDWR | fs.constants.O_CREAT | (fs.constants.O_DSYNC ?? 0)

/** What a log may name: a segment of a session's journal, relative to the data directory. */
const SEGMENT_PATH = /^sessions\/([^/]+)\/journal\/\d{20}\.seg$/

/** The session whose journal segment a logged write names (its path), or undefined when it names no segment: a log naming one is damaged. */
export const loggedSession = (logged: string): string | undefined => {
  const named = SEGMENT_PATH.exec(logged)
  return named !== null && isSessionId(named[1]!) ? named[1] : undefined
}

export interface Recovered {
  readonly fds: readonly [number, number]
  /** The epoch to write with (above any the logs held; both are empty now, `a.log` is written first). */
  readonly epoch: number
  /** Entries written again, and the files they went to (logged when there were any). */
  readonly redone: number
  readonly files: number
}

const failed = (dataDir: string, what: string) => (e: FileError) => new DataDirError({ dir: dataDir, reason: `${what}: ${e.message}` })

/** A log file is given this size at most ahead of its use (`recover`); a larger capacity's log grows past it. */
export const LOG_PREALLOCATED_MAX = 64 << 20

/**
 * Writes again what both logs hold, older epoch first, syncs what it wrote, and opens the logs
 * for this process (creating them the first time), each extended to `preallocate` bytes (capped
 * at LOG_PREALLOCATED_MAX; a hole, which reads as zeros and takes no space until written): a
 * round's `O_DSYNC` write then waits for no change of the file's size, about a tenth less per
 * commit on this project's VM (docs/benchmarks.md, "Commit logs sized ahead"). The data
 * directory must be locked.
 */
export const recover = (driver: FileDriverShape, dataDir: string, preallocate = 0) =>
  Effect.gen(function*() {
    const dir = path.join(dataDir, COMMIT_LOG_DIR)
    if (!(yield* driver.exists(dir))) {
      yield* driver.mkdir(dir).pipe(Effect.zipRight(driver.syncDir(dataDir)), Effect.mapError(failed(dataDir, "cannot create the commit log")))
    }
    const scans: Array<ScannedLog> = []
    for (const name of LOG_FILES) {
      const file = path.join(dir, name)
      const bytes = (yield* driver.exists(file))
        ? yield* logBytes(driver, file).pipe(Effect.mapError(failed(dataDir, "cannot read the commit log")))
        : Buffer.alloc(0)
      scans.push(yield* Effect.try({
        try: () => scanLog(bytes),
        catch: (err) => new DataDirError({ dir: dataDir, reason: `the commit log ${name} is damaged: ${(err as Error).message}` })
      }))
    }
    const order = scans
      .map((scan, index) => ({ scan, index }))
      .filter((s) => s.scan.epoch !== undefined)
      .sort((x, y) => x.scan.epoch! - y.scan.epoch!)
    // Each file's entries in the logs' order (the older epoch's first); every name checked before anything is written.
    const byFile = new Map<string, Array<LogEntry>>()
    for (const { scan } of order) {
      for (const batch of scan.batches) {
        for (const entry of batch) {
          if (loggedSession(entry.path) === undefined) {
            return yield* Effect.fail(new DataDirError({ dir: dataDir, reason: `the commit log names ${JSON.stringify(entry.path)}, which is not a journal segment` }))
          }
          const entries = byFile.get(entry.path)
          if (entries === undefined) byFile.set(entry.path, [entry])
          else entries.push(entry)
        }
      }
    }
    // A session any of whose files the log would write past their end is left as it is: no crash
    // leaves that (segments are only appended to), and a write there would leave a hole.
    const gaps = new Map<string, string>()
    yield* Effect.forEach(byFile, ([name, entries]) =>
      Effect.map(gapIn(driver, dataDir, name, entries), (gap) => {
        if (gap !== undefined) gaps.set(loggedSession(name)!, gap)
      }), { concurrency: REDO_FILES_AT_ONCE, discard: true })
    for (const [session, gap] of gaps) {
      yield* Effect.logWarning(
        `the journal's commit log holds a write to ${gap}: a state no crash leaves (the session's files were copied or restored beside a log that still held writes to them; docs/operations.md, "Backups and restores"). ` +
          `Nothing of what the log holds is written to session ${session}: its files are left as they are, and it opens from what they hold`
      )
    }
    let redone = 0
    let files = 0
    yield* Effect.forEach([...byFile].filter(([name]) => !gaps.has(loggedSession(name)!)), ([name, entries]) =>
      Effect.map(redoFile(driver, dataDir, name, entries), (written) => {
        if (written) {
          redone += entries.length
          files++
        }
      }), { concurrency: REDO_FILES_AT_ONCE, discard: true })
    const opened: Array<number> = []
    for (const name of LOG_FILES) opened.push(yield* driver.open(path.join(dir, name), LOG_FLAGS).pipe(Effect.mapError(failed(dataDir, "cannot open the commit log"))))
    yield* driver.syncDir(dir).pipe(Effect.mapError(failed(dataDir, "cannot sync the commit log's directory")))
    // What they held is durable in the segments now: emptied, they hold nothing a later start could
    // write again into a file that has since changed (a deleted session's name taken again).
    if (order.length > 0) {
      for (const fd of opened) yield* emptied(driver, fd).pipe(Effect.mapError(failed(dataDir, "cannot empty the commit log")))
    }
    const size = Math.min(preallocate, LOG_PREALLOCATED_MAX)
    for (const fd of opened) yield* sized(driver, fd, size).pipe(Effect.mapError(failed(dataDir, "cannot size the commit log")))
    if (redone > 0) {
      yield* Effect.logInfo(`the journal's commit log: ${redone} logged write(s) put again into ${files} segment file(s), which are synced`)
    }
    const newest = order.length === 0 ? 0 : order[order.length - 1]!.scan.epoch!
    const recovered: Recovered = {
      fds: [opened[0]!, opened[1]!],
      epoch: (newest + 1) >>> 0,
      redone,
      files
    }
    return recovered
  })

/**
 * A log emptied: its first batch's header zeroed, and synced. A scan reads batches from the start
 * only while each is one of the first one's use (CommitLogFormat.ts), so it finds none; the file
 * keeps its size and its bytes, which the next use writes over.
 */
const emptied = (driver: FileDriverShape, fd: number) =>
  Effect.zipRight(driver.writev(fd, [Buffer.alloc(BATCH_HEADER_BYTES)], 0), driver.fdatasync(fd))

/** A log extended to `bytes` (a hole), and synced; nothing when it is that long already. */
const sized = (driver: FileDriverShape, fd: number, bytes: number) =>
  Effect.flatMap(driver.size(fd), (size) => (size >= bytes ? Effect.void : Effect.zipRight(driver.ftruncate(fd, bytes), driver.fdatasync(fd))))

/** What is read of a log first; each further read is as long as all before it. */
const FIRST_READ_BYTES = 64 << 10

/**
 * A log's bytes from its start up to where its scan ends, not its whole size: a log sized ahead
 * and mostly unwritten (or emptied) is read no further than its last batch and the next header.
 */
export const logBytes = (driver: FileDriverShape, file: string) =>
  Effect.acquireUseRelease(
    driver.open(file, fs.constants.O_RDONLY),
    (fd) =>
      Effect.gen(function*() {
        const size = yield* driver.size(fd)
        let bytes = Buffer.alloc(0)
        while (bytes.length < size) {
          const next = Buffer.alloc(Math.min(Math.max(FIRST_READ_BYTES, bytes.length), size - bytes.length))
          const n = yield* driver.read(fd, next, bytes.length)
          bytes = Buffer.concat([bytes, next.subarray(0, n)])
          if (n < next.length || !scanNeedsMore(bytes)) break
        }
        return bytes
      }),
    (fd) => Effect.ignore(driver.close(fd))
  )

/** Segment files written again at once at start (each a few threadpool jobs). */
const REDO_FILES_AT_ONCE = 32

/**
 * Where a segment's logged entries, written again in order, would leave a hole: the first that
 * begins past the file's end as the entries before it leave it (undefined when none does, or the
 * file no longer exists).
 */
const gapIn = (driver: FileDriverShape, dataDir: string, name: string, entries: ReadonlyArray<LogEntry>) =>
  Effect.acquireUseRelease(
    Effect.either(driver.open(path.join(dataDir, name), fs.constants.O_RDONLY)),
    (opened) => {
      if (opened._tag === "Left") {
        return opened.left.code === "ENOENT" ? Effect.succeed(undefined) : Effect.fail(failed(dataDir, "cannot open a segment to recover")(opened.left))
      }
      return Effect.map(driver.size(opened.right), (size) => {
        let end = size
        for (const entry of entries) {
          if (entry.position > end) return `${name} at offset ${entry.position}, past its end at ${end}`
          end = Math.max(end, entry.position + entry.bytes.byteLength)
        }
        return undefined
      }).pipe(Effect.mapError(failed(dataDir, "cannot read a segment's size to recover")))
    },
    (opened) => opened._tag === "Right" ? Effect.ignore(driver.close(opened.right)) : Effect.void
  )

/**
 * Writes one segment's logged entries again, in order (runs of adjacent ones in one write), and
 * syncs it; false when the file no longer exists (its session was deleted).
 */
const redoFile = (driver: FileDriverShape, dataDir: string, name: string, entries: ReadonlyArray<LogEntry>) =>
  // The files are redone concurrently: one that fails interrupts the others, whose descriptors are released all the same.
  Effect.acquireUseRelease(
    Effect.either(driver.open(path.join(dataDir, name), fs.constants.O_RDWR)),
    (opened) => {
      if (opened._tag === "Left") {
        return opened.left.code === "ENOENT" ? Effect.succeed(false) : Effect.fail(failed(dataDir, "cannot open a segment to recover")(opened.left))
      }
      const fd = opened.right
      return Effect.gen(function*() {
        let i = 0
        while (i < entries.length) {
          const from = entries[i]!.position
          const buffers: Array<Buffer> = []
          let end = from
          while (i < entries.length && entries[i]!.position === end) {
            const bytes = entries[i]!.bytes
            buffers.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength))
            end += bytes.byteLength
            i++
          }
          yield* driver.writev(fd, buffers, from)
        }
        yield* driver.fdatasync(fd)
        return true
      }).pipe(Effect.mapError(failed(dataDir, "cannot write a segment to recover")))
    },
    (opened) => opened._tag === "Right" ? Effect.ignore(driver.close(opened.right)) : Effect.void
  )

/** The commit log as the file store writes it, from what `recover` opened. */
export const make = (driver: FileDriverShape, dataDir: string, recovered: Recovered, capacity: number) => {
  let current: 0 | 1 = 0
  let use: LogUse = { epoch: recovered.epoch, salt: newSalt() }
  let position = 0
  /** Handles written under the current log's epoch, and under the previous one (until its flush is done). */
  let dirty = new Set<SessionHandle>()
  let flushing = new Set<SessionHandle>()
  let flush: Fiber.RuntimeFiber<void> | undefined
  let failure: string | undefined
  /**
   * The last round's batch failed, or stands for no write that landed (it is erased before its
   * appends are answered: `erased`): why, and what is left when the erase fails.
   */
  let roundFailed: { readonly why: string; readonly left: string } | undefined
  /** Sessions deleted while either log may still hold their writes: created again, a start after a crash would write those into the new one. */
  let deleted = new Set<string>()
  let deletedBefore = new Set<string>()
  /** Closes under way of handles written under either log (`closing`): done once their fdatasync is. */
  const closingNow = new Map<SessionHandle, Deferred.Deferred<void>>()
  const names = new WeakMap<Segment, Uint8Array>()
  const encoder = new TextEncoder()
  const fail = (why: string) => {
    failure ??= why
  }

  const nameOf = (segment: Segment) => {
    let name = names.get(segment)
    if (name === undefined) {
      name = encoder.encode(path.relative(dataDir, segment.path).split(path.sep).join("/"))
      names.set(segment, name)
    }
    return name
  }

  /** An fdatasync's outcome: undefined when done, else why not (a driver's defect too: it never escapes a round). */
  const syncOf = (fd: number): Effect.Effect<string | undefined> =>
    Effect.map(Effect.exit(driver.fdatasync(fd)), (exit) =>
      Exit.isSuccess(exit)
        ? undefined
        : Cause.failureOption(exit.cause).pipe(Option.match({ onNone: () => Cause.pretty(exit.cause), onSome: (e) => e.reason })))

  /** fdatasyncs the handles written under the log just left; a handle closed meanwhile was synced as it closed. */
  const flushAll = (handles: Set<SessionHandle>) =>
    Effect.forEach([...handles], (h) =>
      Effect.suspend(() => {
        const fd = h.fd
        if (fd === undefined || !handles.has(h)) return Effect.void
        return Effect.map(syncOf(fd), (why) => {
          if (why === undefined) handles.delete(h)
          // A handle closed (and so synced) while this ran is not this flush's failure.
          else if (h.fd === fd && handles.has(h)) fail(`a journal file's flush failed: ${why}`)
        })
      }), { concurrency: "unbounded", discard: true })

  /** Waits for the flush under way; one that died (a driver's defect) leaves its files unsynced: sticky. */
  const flushed = Effect.suspend(() =>
    flush === undefined ? Effect.void : Effect.map(Fiber.await(flush), (exit) => {
      if (Exit.isFailure(exit)) fail(`the flush of the commit log's segment files failed: ${Cause.pretty(exit.cause)}`)
    })
  )

  /** Switches to the other log once this one is full: after the flush of what the other held. */
  const switchLog = Effect.gen(function*() {
    yield* flushed
    // A handle the flush found closed is synced by its close: wait for that too.
    for (const h of [...flushing]) {
      const closed = closingNow.get(h)
      if (closed !== undefined) yield* Deferred.await(closed)
    }
    if (flushing.size > 0) fail("a journal file could not be synced before its commit log was written over")
    if (failure !== undefined) return
    flushing = dirty
    dirty = new Set()
    // The log now written over held nothing of sessions deleted before the last switch.
    deletedBefore = deleted
    deleted = new Set()
    current = current === 0 ? 1 : 0
    use = { epoch: (use.epoch + 1) >>> 0, salt: newSalt() }
    position = 0
    flush = yield* Effect.forkDaemon(flushAll(flushing))
  })

  return {
    get failure() {
      return failure
    },
    /**
     * After a round, before its failures are answered: when its batch failed, whatever of it landed
     * is erased from the log (a zeroed header where it began, made durable), so that no start
     * writes it into a segment file again. False when the batch failed and could not be erased:
     * the failure is sticky (`failure`), and what the batch held may stand. True otherwise.
     */
    erased: (): Effect.Effect<boolean> => {
      if (roundFailed === undefined) return Effect.succeed(true)
      const { left, why } = roundFailed
      roundFailed = undefined
      const fd = recovered.fds[current]
      const at = position
      const header = Buffer.alloc(BATCH_HEADER_BYTES)
      // Only a header that landed is written over: bytes already there take no new space on a full
      // disk, where zeros written over a hole (a log sized ahead) or past the file's end could fail.
      const erase = Effect.flatMap(driver.read(fd, header, at), (n) =>
        isBatchHeader(header.subarray(0, n))
          ? Effect.zipRight(driver.writev(fd, [Buffer.alloc(BATCH_HEADER_BYTES)], at), driver.fdatasync(fd))
          : Effect.void)
      return Effect.map(
        Effect.exit(erase),
        (exit) => {
          if (Exit.isSuccess(exit)) return true
          fail(`${why}, and ${left}: ${Cause.failureOption(exit.cause).pipe(Option.match({ onNone: () => Cause.pretty(exit.cause), onSome: (e) => e.reason }))}`)
          return false
        }
      )
    },
    /**
     * A failed write's segment file could not be cut back to where the write began: it is synced,
     * so that what stands of the write is durable before anything follows it (without that, a later
     * append logged after it would follow a hole after a power loss); a sync that fails too is sticky.
     */
    notCutBack: (fd: number, why: string): Effect.Effect<void> =>
      Effect.map(syncOf(fd), (failed) => {
        if (failed !== undefined) fail(`${why}, and a journal file's sync after it failed: ${failed}`)
      }),
    /** What must happen before the next round's batch: a switch when the current log is full (else undefined). */
    beforeRound: (): Effect.Effect<void> | undefined => position >= capacity && failure === undefined ? switchLog : undefined,
    /** The round's batch, naming each write's segment; `written` is told which handles it made dirty once the round is done. */
    batch: (segments: ReadonlyArray<Segment>): CommitLogWrite => ({
      fd: recovered.fds[current],
      position,
      use,
      synced: SEGMENT_WRITES_SYNCED,
      paths: segments.map(nameOf),
      onWritten: (bytes, error, itemsFailed) => {
        if (error === undefined) position += bytes
        else if (itemsFailed === true) {
          roundFailed = { why: `every segment write of a round failed (${error.reason})`, left: "the round's batch, which landed in the commit log, could not be erased from it" }
        } else roundFailed = { why: `the commit log's write failed: ${error.reason}`, left: "the failed batch could not be erased from the log" }
      }
    }),
    written: (handle: SessionHandle) => {
      dirty.add(handle)
    },
    /** A session was deleted: its id is not to be created again while a log may hold its writes. */
    deletedSession: (session: string) => {
      deleted.add(session)
    },
    /** Whether a session of this id may be created (not deleted while a log may still hold its writes). */
    mayCreate: (session: string) => !deleted.has(session) && !deletedBefore.has(session),
    /** A handle's descriptor is about to close: what it wrote since the last flush is made durable first. */
    closing: (handle: SessionHandle, fd: number): Effect.Effect<void> => {
      if (!dirty.has(handle) && !flushing.has(handle)) return Effect.void
      const closed = Deferred.unsafeMake<void>(FiberId.none)
      closingNow.set(handle, closed)
      return Effect.map(syncOf(fd), (why) => {
        if (why !== undefined) return fail(`a journal file's flush failed: ${why}`)
        dirty.delete(handle)
        flushing.delete(handle)
      }).pipe(Effect.ensuring(Effect.suspend(() => {
        if (closingNow.get(handle) === closed) closingNow.delete(handle)
        return Deferred.succeed(closed, undefined)
      })))
    },
    /** After the last round: waits for a flush under way, syncs what is left, closes the logs. */
    close: Effect.gen(function*() {
      yield* flushed
      for (const closed of [...closingNow.values()]) yield* Deferred.await(closed)
      yield* flushAll(flushing)
      yield* flushAll(dirty)
      // Everything logged is durable in its segment now: a clean stop leaves nothing to write again.
      if (failure === undefined && flushing.size === 0 && dirty.size === 0) {
        for (const fd of recovered.fds) yield* Effect.ignore(emptied(driver, fd))
      }
      for (const fd of recovered.fds) yield* Effect.ignore(driver.close(fd))
    })
  }
}

export type CommitLog = ReturnType<typeof make>
