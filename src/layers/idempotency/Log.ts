/**
 * The idempotency log file and its single group-committing writer: appends (one write and one
 * fdatasync per round for everything pending) and atomic rewrites between rounds.
 */
import * as path from "node:path"
import { Deferred, Effect, Either } from "effect"
import { IdempotencyStoreFailed } from "../../services/Idempotency.js"
import type { FileDriverShape, FileError } from "../journal/FileDriver.js"
import { encodeFrame, frameBytes } from "../journal/Frame.js"

export const LOG_FILE = "claims.log"
export const REWRITE_FILE = `${LOG_FILE}.rewrite.tmp`

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

interface Pending extends LogRecord {
  readonly bytes: number
  /** Runs once the frame is durable, before the caller hears of it; gets the frame's size. */
  readonly onDurable: (bytes: number) => void
  readonly done: Deferred.Deferred<void, IdempotencyStoreFailed>
}

interface RewriteRequest {
  /** The live records, taken when the writer is between rounds. */
  readonly snapshot: () => ReadonlyArray<LogRecord>
  readonly done: Deferred.Deferred<void, IdempotencyStoreFailed>
}

export const failedBy = (e: FileError) => `${e.op} failed: ${e.code} ${e.detail}`

/**
 * The log file and its single writer. A round, once taken, always completes (uninterruptible,
 * bounded by its write and sync), so no caller is left without an answer.
 */
export class Log {
  private queue: Array<Pending> = []
  private queuedBytes = 0
  private rewrites: Array<RewriteRequest> = []
  private wake: Deferred.Deferred<void> | undefined
  private spaceWaiters: Array<Deferred.Deferred<void>> = []
  private closed = false
  broken: IdempotencyStoreFailed | undefined

  constructor(
    private readonly driver: FileDriverShape,
    private readonly dir: string,
    private readonly file: string,
    private fd: number,
    /** Durable bytes: everything before this offset is committed. */
    public size: number,
    private nextSequence: number,
    private readonly limits: IdempotencyFileLimits
  ) {}

  private refusal() {
    return this.broken ?? (this.closed ? new IdempotencyStoreFailed({ reason: "the idempotency store is closed" }) : undefined)
  }

  private poke() {
    if (this.wake) {
      Deferred.unsafeDone(this.wake, Effect.void)
      this.wake = undefined
    }
  }

  /** Queues a record and waits until it is durable (or refused). */
  append(record: LogRecord, onDurable: (bytes: number) => void) {
    return Effect.gen(this, function*() {
      const bytes = frameBytes(record.kind, record.json)
      while (
        this.refusal() === undefined &&
        (this.queue.length >= this.limits.queueRecords ||
          (this.queuedBytes > 0 && this.queuedBytes + bytes > this.limits.queueBytes))
      ) {
        const space = yield* Deferred.make<void>()
        this.spaceWaiters.push(space)
        yield* Deferred.await(space)
      }
      const refused = this.refusal()
      if (refused) return yield* Effect.fail(refused)
      const done = yield* Deferred.make<void, IdempotencyStoreFailed>()
      this.queue.push({ ...record, bytes, onDurable, done })
      this.queuedBytes += bytes
      this.poke()
      return yield* Deferred.await(done)
    })
  }

  /** Rewrites the log with only the snapshot's records, serialized with every append. */
  rewrite(snapshot: () => ReadonlyArray<LogRecord>) {
    return Effect.gen(this, function*() {
      const refused = this.refusal()
      if (refused) return yield* Effect.fail(refused)
      const done = yield* Deferred.make<void, IdempotencyStoreFailed>()
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
        const exit = yield* Effect.uninterruptible(Effect.either(this.swap(requests[0]!.snapshot())))
        for (const r of requests) {
          Deferred.unsafeDone(r.done, Either.isLeft(exit) ? Effect.fail(exit.left) : Effect.void)
        }
        continue
      }
      if (this.queue.length === 0) {
        if (this.closed) return
        const wake = yield* Deferred.make<void>()
        this.wake = wake
        yield* Deferred.await(wake)
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

  private commit(batch: ReadonlyArray<Pending>) {
    return Effect.gen(this, function*() {
      if (this.broken) {
        for (const p of batch) Deferred.unsafeDone(p.done, Effect.fail(this.broken))
        return
      }
      const buffers: Array<Buffer> = []
      let bytes = 0
      let sequence = this.nextSequence
      for (const p of batch) {
        buffers.push(...encodeFrame(sequence++, p.atMs, p.kind, p.json, false))
        bytes += p.bytes
      }
      const failed = yield* this.driver.writev(this.fd, buffers, this.size).pipe(
        Effect.flatMap((written) =>
          written === bytes ? Effect.as(this.driver.fdatasync(this.fd), undefined) : Effect.succeed(`short write: ${written} of ${bytes} bytes`)
        ),
        Effect.catchAll((e) => Effect.succeed(failedBy(e)))
      )
      if (failed !== undefined) {
        this.broken = new IdempotencyStoreFailed({ reason: `${this.file}: ${failed}` })
        for (const p of batch) Deferred.unsafeDone(p.done, Effect.fail(this.broken))
        return
      }
      this.size += bytes
      this.nextSequence = sequence
      for (const p of batch) {
        p.onDurable(p.bytes)
        Deferred.unsafeDone(p.done, Effect.void)
      }
    })
  }

  /**
   * Writes the records to a temporary file, syncs it and renames it over the log. A failure
   * before the rename leaves the old log in use; one after it (the new name may not be durable,
   * or the new file cannot be opened) breaks the store.
   */
  private swap(records: ReadonlyArray<LogRecord>) {
    const driver = this.driver
    return Effect.gen(this, function*() {
      const refused = this.refusal()
      if (refused) return yield* Effect.fail(refused)
      const tmp = path.join(this.dir, REWRITE_FILE)
      const buffers: Array<Buffer> = []
      let bytes = 0
      records.forEach((r, i) => {
        const frame = encodeFrame(i + 1, r.atMs, r.kind, r.json, false)
        buffers.push(...frame)
        bytes += frame[0].length + frame[1].length
      })
      yield* Effect.gen(this, function*() {
        const fd = yield* driver.open(tmp, "w")
        yield* Effect.gen(function*() {
          const written = buffers.length > 0 ? yield* driver.writev(fd, buffers, 0) : 0
          if (written !== bytes) {
            return yield* Effect.fail(new IdempotencyStoreFailed({ reason: `${tmp}: short write: ${written} of ${bytes} bytes` }))
          }
          yield* driver.fdatasync(fd)
        }).pipe(Effect.ensuring(Effect.ignore(driver.close(fd))))
        yield* driver.rename(tmp, this.file)
      }).pipe(
        Effect.mapError((e) => e._tag === "FileError" ? new IdempotencyStoreFailed({ reason: `rewrite: ${failedBy(e)}` }) : e),
        Effect.tapError(() => Effect.ignore(driver.unlink(tmp)))
      )
      // Renamed: from here on the old descriptor names an unlinked file.
      yield* Effect.gen(this, function*() {
        yield* Effect.ignore(driver.close(this.fd))
        this.fd = -1
        yield* driver.syncDir(this.dir)
        this.fd = yield* driver.open(this.file, "r+")
      }).pipe(
        Effect.catchAll((e) => {
          this.broken = new IdempotencyStoreFailed({ reason: `rewrite of ${this.file} after rename: ${failedBy(e)}` })
          return Effect.fail(this.broken)
        })
      )
      this.size = bytes
      this.nextSequence = records.length + 1
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
    for (const p of this.queue) Deferred.unsafeDone(p.done, Effect.fail(closed))
    for (const r of this.rewrites) Deferred.unsafeDone(r.done, Effect.fail(closed))
    this.queue = []
    this.rewrites = []
    const fd = this.fd
    this.fd = -1
    return fd < 0 ? Effect.void : Effect.ignore(this.driver.close(fd))
  })
}

