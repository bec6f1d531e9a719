/**
 * The idempotency log file and its single group-committing writer.
 *
 * - Appends: one write and one fdatasync per round for everything pending; each record learns
 *   its offset and size once durable. A round, once taken, always completes (uninterruptible,
 *   bounded by its write and sync), so no caller is left without an answer.
 * - A failed round fails only its own records. The file is cut back to its last durable size
 *   (ftruncate + fdatasync) at once, or, if that fails too, before the next round, which fails
 *   in turn while the cut cannot be made: the writer is never broken for good.
 * - Rewrites run between rounds: the live records are copied from the current file by offset,
 *   checked and renumbered, into a temporary file (fdatasync, rename, directory fsync); their
 *   new offsets are applied in the same step that makes the new file current. A failure before
 *   the rename leaves the old log in use. A directory fsync owed after a rename is made before
 *   the next round acknowledges anything.
 * - Reads (replays, copies) go through a handle that a rewrite retires only once its last
 *   reader is done, so a read never lands on a closed or reused descriptor.
 */
import * as path from "node:path"
import { Deferred, Effect, FiberId } from "effect"
import { IDEMPOTENCY_READ_CHUNK_BYTES } from "../../domain/Limits.js"
import { type IdempotencyError, IdempotencyLogDamaged, IdempotencyStoreFailed } from "../../services/Idempotency.js"
import { batchedWriter, type FileDriverShape, type FileError } from "../journal/FileDriver.js"
import { encodeFrame, frameBytes } from "../journal/Frame.js"
import { readFrameAt } from "./Reader.js"

export const LOG_FILE = "claims.log"
export const REWRITE_FILE = `${LOG_FILE}.rewrite.tmp`
/** The log's name relative to the data directory: what every message names. */
export const LOG_NAME = `idempotency/${LOG_FILE}`

export interface IdempotencyFileLimits {
  readonly queueRecords: number
  readonly queueBytes: number
  readonly batchRecords: number
  readonly rewriteDeadBytes: number
}
/** One record on its way to the log. */
export interface LogRecord {
  readonly kind: Buffer
  readonly json: Buffer
  readonly atMs: number
}

/** A live record a rewrite keeps: where it is, and whom to tell where it went. */
export interface LiveRecord {
  readonly offset: number
  readonly size: number
  readonly moved: (offset: number) => void
}

interface Pending extends LogRecord {
  readonly bytes: number
  /** Runs once the frame is durable, before the caller hears of it. */
  readonly onDurable: (offset: number, size: number) => void
  /** Answers the appender (the resume of its `Effect.async`); called exactly once. */
  readonly done: (result: Effect.Effect<void, IdempotencyStoreFailed>) => void
}

interface RewriteRequest {
  /** The live records, taken when the writer is between rounds. */
  readonly snapshot: () => ReadonlyArray<LiveRecord>
  readonly done: Deferred.Deferred<void, IdempotencyError>
}

/** A descriptor of the log and the reads still using it. */
class Handle {
  readers = 0
  retired = false
  constructor(readonly fd: number) {}
}

/** A file error as a message: the operation and the real errno, never an absolute path. */
export const failedBy = (e: FileError, dataDir?: string) => {
  const detail = dataDir === undefined ? e.detail : e.detail.split(`${dataDir}${path.sep}`).join("")
  return detail.startsWith(e.code) ? `${e.op} failed: ${detail}` : `${e.op} failed: ${e.code} ${detail}`
}

export class Log {
  private queue: Array<Pending> = []
  private queuedBytes = 0
  private rewrites: Array<RewriteRequest> = []
  /** Resumes the loop waiting for work (the resume of its `Effect.async`), when it waits. */
  private wake: ((go: Effect.Effect<void>) => void) | undefined
  private spaceWaiters: Array<Deferred.Deferred<void>> = []
  private closed = false
  private current: Handle
  /** A failed round may have left bytes past `size`: cut them before anything else is written. */
  private cutOwed = false
  /** A rename whose directory entry is not yet known to be durable. */
  private dirSyncOwed = false

  constructor(
    private readonly driver: FileDriverShape,
    private readonly dataDir: string,
    private readonly dir: string,
    private readonly file: string,
    fd: number,
    /** Durable bytes: everything before this offset is committed. */
    public size: number,
    private nextSequence: number,
    private readonly limits: IdempotencyFileLimits
  ) {
    this.current = new Handle(fd)
  }

  private failed(what: string) {
    return new IdempotencyStoreFailed({ reason: `${LOG_NAME}: ${what}` })
  }

  /** Why the log takes no more records (closed), if it does not. */
  refused() {
    return this.closed ? new IdempotencyStoreFailed({ reason: "the idempotency store is closed" }) : undefined
  }

  private poke() {
    const wake = this.wake
    if (wake) {
      this.wake = undefined
      wake(Effect.void)
    }
  }

  /**
   * Queues a record and waits until it is durable (or refused). The hot path, twice per keyed
   * request, takes no Deferred and no generator: the round answers through the `Effect.async`'s
   * resume, as the journal's writer does. An appender interrupted while it waits stops waiting;
   * its record is written all the same.
   */
  append(record: LogRecord, onDurable: (offset: number, size: number) => void): Effect.Effect<void, IdempotencyStoreFailed> {
    return Effect.suspend(() => {
      const refused = this.refused()
      if (refused) return Effect.fail(refused)
      const bytes = frameBytes(record.kind, record.json)
      if (this.queue.length >= this.limits.queueRecords || (this.queuedBytes > 0 && this.queuedBytes + bytes > this.limits.queueBytes)) {
        // Full: wait for the next round to take some, then try again.
        const space = Deferred.unsafeMake<void>(FiberId.none)
        this.spaceWaiters.push(space)
        return Effect.zipRight(Deferred.await(space), this.append(record, onDurable))
      }
      return Effect.async<void, IdempotencyStoreFailed>((resume) => {
        this.queue.push({ kind: record.kind, json: record.json, atMs: record.atMs, bytes, onDurable, done: resume })
        this.queuedBytes += bytes
        this.poke()
      })
    })
  }

  /**
   * Reads the frame `locate` names, checked. `locate` runs in the same step that pins the current
   * file, so the offsets it gives and the file they are read from always belong together; it
   * returns undefined when the record is no longer live.
   */
  readAt(locate: () => { readonly offset: number; readonly size: number } | undefined) {
    return Effect.suspend(() => {
      const where = locate()
      if (where === undefined) return Effect.succeed(undefined)
      const handle = this.current
      if (handle.retired) return Effect.fail(new IdempotencyStoreFailed({ reason: "the idempotency store is closed" }))
      handle.readers++
      return readFrameAt(this.driver, handle.fd, where.offset, where.size).pipe(
        Effect.mapError((e) => this.failed(`reading the record at offset ${where.offset}: ${failedBy(e, this.dataDir)}`)),
        Effect.flatMap((frame) =>
          typeof frame === "string"
            ? Effect.fail(new IdempotencyLogDamaged({ file: LOG_NAME, offset: where.offset, reason: frame }))
            : Effect.succeed(frame)
        ),
        Effect.ensuring(this.unpin(handle))
      )
    })
  }

  private unpin(handle: Handle) {
    return Effect.suspend(() => {
      handle.readers--
      return handle.retired && handle.readers === 0 ? Effect.ignore(this.driver.close(handle.fd)) : Effect.void
    })
  }

  private retire(handle: Handle) {
    handle.retired = true
    return handle.readers === 0 ? Effect.ignore(this.driver.close(handle.fd)) : Effect.void
  }

  /** Rewrites the log with only the snapshot's records, serialized with every append. */
  rewrite(snapshot: () => ReadonlyArray<LiveRecord>) {
    return Effect.gen(this, function*() {
      const refused = this.refused()
      if (refused) return yield* Effect.fail(refused)
      const done = yield* Deferred.make<void, IdempotencyError>()
      this.rewrites.push({ snapshot, done })
      this.poke()
      return yield* Deferred.await(done)
    })
  }

  readonly run: Effect.Effect<void> = Effect.gen(this, function*() {
    for (;;) {
      if (this.rewrites.length > 0) {
        const requests = this.rewrites
        this.rewrites = []
        const exit = yield* Effect.uninterruptible(Effect.exit(this.swap(requests[0]!.snapshot())))
        for (const r of requests) Deferred.unsafeDone(r.done, exit)
        continue
      }
      if (this.queue.length === 0) {
        if (this.closed) return
        yield* Effect.async<void>((resume) => {
          // Checked again where the wait starts: the run loop may yield between the check above and here.
          if (this.queue.length > 0 || this.rewrites.length > 0 || this.closed) resume(Effect.void)
          else this.wake = resume
        })
        continue
      }
      const batch = this.queue.splice(0, this.limits.batchRecords)
      for (const p of batch) this.queuedBytes -= p.bytes
      const waiters = this.spaceWaiters
      this.spaceWaiters = []
      for (const w of waiters) Deferred.unsafeDone(w, Effect.void)
      yield* Effect.uninterruptible(this.commit(batch))
    }
  })

  /** Pays what an earlier failure left owed: the cut back to `size`, a directory fsync. */
  private settle = Effect.gen(this, function*() {
    if (this.cutOwed) {
      yield* this.driver.ftruncate(this.current.fd, this.size).pipe(Effect.zipRight(this.driver.fdatasync(this.current.fd)))
      this.cutOwed = false
    }
    if (this.dirSyncOwed) {
      yield* this.driver.syncDir(this.dir)
      this.dirSyncOwed = false
    }
  })

  private commit(batch: ReadonlyArray<Pending>) {
    return Effect.gen(this, function*() {
      const fail = (what: string) => {
        const error = this.failed(what)
        for (const p of batch) p.done(Effect.fail(error))
      }
      const owed = yield* Effect.either(this.settle)
      if (owed._tag === "Left") return fail(`an earlier failed write could not be undone yet: ${failedBy(owed.left, this.dataDir)}`)
      const buffers: Array<Buffer> = []
      let bytes = 0
      let sequence = this.nextSequence
      for (const p of batch) {
        buffers.push(...encodeFrame(sequence++, p.atMs, p.kind, p.json, false))
        bytes += p.bytes
      }
      const fd = this.current.fd
      const failed = yield* this.driver.writev(fd, buffers, this.size).pipe(
        Effect.flatMap((written) =>
          written === bytes
            ? Effect.as(this.driver.fdatasync(fd), undefined)
            : Effect.succeed(`short write: ${written} of ${bytes} bytes`)
        ),
        Effect.catchAll((e) => Effect.succeed(failedBy(e, this.dataDir)))
      )
      if (failed !== undefined) {
        // Whatever reached the file past `size` was never acknowledged: cut it now if possible.
        this.cutOwed = true
        yield* Effect.ignore(this.settle)
        return fail(failed)
      }
      let offset = this.size
      this.size += bytes
      this.nextSequence = sequence
      for (const p of batch) {
        p.onDurable(offset, p.bytes)
        offset += p.bytes
        p.done(Effect.void)
      }
    })
  }

  /**
   * Copies the live records, in file order, into a temporary file, syncs it and renames it over
   * the log; the temporary file's descriptor becomes the log's.
   */
  private swap(records: ReadonlyArray<LiveRecord>) {
    const driver = this.driver
    return Effect.gen(this, function*() {
      const refused = this.refused()
      if (refused) return yield* Effect.fail(refused)
      yield* this.settle.pipe(Effect.mapError((e) => this.failed(`rewrite: ${failedBy(e, this.dataDir)}`)))
      const tmp = path.join(this.dir, REWRITE_FILE)
      const ordered = [...records].sort((a, b) => a.offset - b.offset)
      const fd = yield* driver.open(tmp, "w+").pipe(Effect.mapError((e) => this.failed(`rewrite: ${failedBy(e, this.dataDir)}`)))
      const copied = yield* Effect.gen(this, function*() {
        const moves: Array<number> = []
        const out = batchedWriter(driver, fd, tmp, IDEMPOTENCY_READ_CHUNK_BYTES)
        for (const [i, r] of ordered.entries()) {
          const frame = yield* this.readAt(() => r)
          // A bug if it happens: the locator above always names the record.
          if (frame === undefined) return yield* Effect.dieMessage("a rewrite lost track of a live record")
          moves.push(out.offset)
          yield* out.push(encodeFrame(i + 1, frame.recordedAtMs, Buffer.from(frame.kind, "utf8"), frame.json, false))
        }
        yield* out.flush
        yield* driver.fdatasync(fd)
        yield* driver.rename(tmp, this.file)
        return { moves, bytes: out.written }
      }).pipe(
        Effect.mapError((e) => e._tag === "FileError" ? this.failed(`rewrite: ${failedBy(e, this.dataDir)}`) : e),
        Effect.tapError(() => Effect.zipRight(Effect.ignore(driver.close(fd)), Effect.ignore(driver.unlink(tmp))))
      )
      // Renamed: the new file is the log. Offsets, size and descriptor change in one step.
      const old = this.current
      this.current = new Handle(fd)
      this.size = copied.bytes
      this.nextSequence = ordered.length + 1
      ordered.forEach((r, i) => r.moved(copied.moves[i]!))
      this.dirSyncOwed = true
      yield* this.retire(old)
      yield* Effect.ignore(this.settle)
    })
  }

  /** Refuses new work and wakes the loop so it drains what is queued and returns. */
  readonly close = Effect.sync(() => {
    this.closed = true
    for (const w of this.spaceWaiters) Deferred.unsafeDone(w, Effect.void)
    this.spaceWaiters = []
    this.poke()
  })

  /** After the loop has returned: answers whatever is left and closes the descriptor. */
  readonly closeFile = Effect.suspend(() => {
    const closed = new IdempotencyStoreFailed({ reason: "the idempotency store closed" })
    for (const p of this.queue) p.done(Effect.fail(closed))
    for (const r of this.rewrites) Deferred.unsafeDone(r.done, Effect.fail(closed))
    this.queue = []
    this.rewrites = []
    this.closed = true
    return this.current.retired ? Effect.void : this.retire(this.current)
  })
}
