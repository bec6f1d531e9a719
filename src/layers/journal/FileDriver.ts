/**
 * FileDriver: the few file-system calls the file journal makes, as an Effect port so tests can
 * count syncs and inject faults. The Node implementation uses the callback API of `node:fs`
 * (one libuv threadpool hop per call, no FileHandle bookkeeping), and a thread of its own for the
 * writes and syncs of a group-commit round of many files (SyncThread.ts).
 */
import * as fs from "node:fs"
import { Context, Data, Effect, Layer } from "effect"
import { encodeBatch } from "./CommitLogFormat.js"
import { syncRound } from "./SyncThread.js"
import type { SyncRoundLog } from "./SyncWorker.js"

export class FileError extends Data.TaggedError("FileError")<{
  readonly op: string
  readonly path: string
  readonly code: string
  readonly detail: string
}> {
  override get message() {
    return `${this.op} ${this.path}: ${this.code} ${this.detail}`
  }
  /** What failed and why, without the file's path: for errors that reach clients. */
  get reason() {
    return `${this.op} failed: ${this.code} ${this.detail}`
  }
}

export interface FileDriverShape {
  readonly open: (path: string, flags: string | number) => Effect.Effect<number, FileError>
  readonly close: (fd: number) => Effect.Effect<void, FileError>
  readonly writev: (fd: number, buffers: ReadonlyArray<Buffer>, position: number) => Effect.Effect<number, FileError>
  readonly fdatasync: (fd: number) => Effect.Effect<void, FileError>
  readonly read: (fd: number, buffer: Buffer, position: number) => Effect.Effect<number, FileError>
  readonly ftruncate: (fd: number, length: number) => Effect.Effect<void, FileError>
  readonly size: (fd: number) => Effect.Effect<number, FileError>
  readonly readFile: (path: string) => Effect.Effect<Buffer, FileError>
  /** A file's size by its path (stat), without opening it; optional: a driver without it is never asked. */
  readonly fileSize?: (path: string) => Effect.Effect<number, FileError>
  readonly writeFile: (path: string, data: Buffer | string, flag?: string) => Effect.Effect<void, FileError>
  readonly readdir: (path: string) => Effect.Effect<ReadonlyArray<string>, FileError>
  readonly mkdir: (path: string) => Effect.Effect<void, FileError>
  readonly rename: (from: string, to: string) => Effect.Effect<void, FileError>
  readonly unlink: (path: string) => Effect.Effect<void, FileError>
  readonly rmrf: (path: string) => Effect.Effect<void, FileError>
  readonly exists: (path: string) => Effect.Effect<boolean>
  /** fsync a directory so that a file created or renamed in it survives a crash. */
  readonly syncDir: (path: string) => Effect.Effect<void, FileError>
  /**
   * Writes each item's buffers at its position and makes them durable, all items concurrently: by
   * an fdatasync of the file, or by the write itself when the item says its file was opened with
   * `O_DSYNC` (`synced`; SEGMENT_FLAGS), which the Node driver then does not follow with an
   * fdatasync. A driver may always fdatasync: for an `O_DSYNC` file it is redundant, never wrong.
   * `onDone(i, error)` is called as each item finishes (error undefined on success); the effect
   * completes when all have. One call per group-commit round, so a round costs no fiber per file.
   *
   * With `log` (the file store's commit log, CommitLog.ts), the items are only written, never
   * synced, and one batch (CommitLogFormat.ts) of the items, each file's name, position and bytes,
   * is written to the log at `log.position` and made durable; an item is done (`onDone` without
   * error) only once both are. The batch may be written at once with the items, holding all of
   * them (the small rounds from the main thread, `syncManyVia`), or after them, holding those
   * written (the sync thread). Either way, once the call is done the batch that stands at
   * `log.position` holds exactly the items written: one whose write failed is taken out of a batch
   * that landed (`loggedOutcome`). `log.onWritten` is called once, before any `onDone`, with that
   * batch's size (0 when no item was written and nothing stands) or a failure of the log's, which
   * is then every written item's failure too, and after which whatever landed of a batch at
   * `log.position` is the caller's to erase (CommitLog.ts `erased`). When the batch landed holding
   * every item and every item's write failed, the batch must be erased all the same: that is told
   * as a failure with `itemsFailed` (the first item's failure; the log's write did not fail).
   */
  readonly syncMany: (
    items: ReadonlyArray<SyncItem>,
    onDone: (index: number, error: FileError | undefined) => void,
    log?: CommitLogWrite
  ) => Effect.Effect<void>
}

/** A round's batch for the commit log (`syncMany`): what the sync thread writes, and who is told what it took. */
export interface CommitLogWrite extends SyncRoundLog {
  readonly onWritten: (bytes: number, error: FileError | undefined, itemsFailed?: boolean) => void
}

/** The batch of the items whose write succeeded (`written[i]`), or undefined when none did. */
export const batchOf = (log: CommitLogWrite, items: ReadonlyArray<SyncItem>, written: ReadonlyArray<boolean>): Buffer | undefined => {
  const entries = []
  for (let i = 0; i < items.length; i++) {
    if (written[i]) entries.push({ path: log.paths[i]!, position: items[i]!.position, pieces: items[i]!.buffers })
  }
  return entries.length === 0 ? undefined : encodeBatch(log.use, entries)
}

export interface SyncItem {
  readonly fd: number
  readonly buffers: ReadonlyArray<Buffer>
  readonly position: number
  readonly bytes: number
  /** The file was opened with `O_DSYNC`: a write returns once its bytes (and the size that reaches them) are durable. */
  readonly synced?: boolean
}

/**
 * How the file journal opens the segment it appends to: with `O_DSYNC`, so that each write
 * returns only once its data, and the file size that makes it readable, are on stable storage —
 * what an fdatasync after it would do (open(2), "O_DSYNC"), in one system call and one threadpool
 * job instead of two. `create` makes a new segment (`O_EXCL`: never one that exists).
 */
export const SEGMENT_FLAGS = {
  create: fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL | (fs.constants.O_DSYNC ?? 0),
  append: fs.constants.O_RDWR | (fs.constants.O_DSYNC ?? 0)
} as const

/**
 * How the file journal opens segments when a commit log makes its rounds durable (CommitLog.ts):
 * plain writes, synced only when the log is about to be written over.
 */
export const PLAIN_SEGMENT_FLAGS = {
  create: fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL,
  append: fs.constants.O_RDWR
} as const

/** This platform has `O_DSYNC` (Linux, macOS): a segment's writes are durable as they return. Elsewhere each is fdatasync'd. */
export const SEGMENT_WRITES_SYNCED: boolean = typeof fs.constants.O_DSYNC === "number" && fs.constants.O_DSYNC !== 0

/** `syncMany` built from a driver's own `writev` and `fdatasync` (for drivers that wrap calls). */
export const syncManyVia = (driver: Pick<FileDriverShape, "writev" | "fdatasync">): FileDriverShape["syncMany"] =>
  (items, onDone, log) =>
    log !== undefined ? loggedVia(driver, items, onDone, log) : Effect.forEach(
      items,
      (item, i) =>
        driver.writev(item.fd, item.buffers, item.position).pipe(
          Effect.flatMap((n) => n === item.bytes ? driver.fdatasync(item.fd) : Effect.fail(shortWrite(item.fd, n, item.bytes))),
          Effect.match({ onFailure: (e) => onDone(i, e), onSuccess: () => onDone(i, undefined) })
        ),
      { concurrency: "unbounded", discard: true }
    )

const shortWrite = (fd: number, n: number, bytes: number) =>
  new FileError({ op: "write", path: `fd ${fd}`, code: "EIO", detail: `short write: ${n} of ${bytes} bytes` })

/**
 * What a round's batch comes to once every write of it is done, the batch holding every item (it
 * was written at once with them): when the log's write failed, that failure (every item's too);
 * when every item's write landed, the batch as written; when some failed, their bytes in the batch
 * are taken back before anything is answered — the batch is written again in its place holding
 * only the items written (`rewrite`; its failure is the log's), or, when none was, reported as
 * every item's failure (`none`: the first item's), which the file store erases from the log all
 * the same (CommitLog.ts `erased`).
 */
type LoggedOutcome =
  | { readonly _tag: "failed"; readonly error: FileError }
  | { readonly _tag: "none"; readonly error: FileError }
  | { readonly _tag: "written"; readonly bytes: number }
  | { readonly _tag: "rewrite"; readonly batch: Buffer }

const loggedOutcome = (
  log: CommitLogWrite,
  items: ReadonlyArray<SyncItem>,
  errors: ReadonlyArray<FileError | undefined>,
  logError: FileError | undefined,
  batch: Buffer
): LoggedOutcome => {
  if (logError !== undefined) return { _tag: "failed", error: logError }
  const first = errors.find((e) => e !== undefined)
  if (first === undefined) return { _tag: "written", bytes: batch.length }
  const reduced = batchOf(log, items, errors.map((e) => e === undefined))
  if (reduced !== undefined) return { _tag: "rewrite", batch: reduced }
  return { _tag: "none", error: first }
}

/** Tells the round's outcome: the log's first, then each item's. */
const tellLogged = (
  log: CommitLogWrite,
  errors: ReadonlyArray<FileError | undefined>,
  onDone: (index: number, error: FileError | undefined) => void,
  logError: FileError | undefined,
  bytes: number,
  itemsFailed = false
) => {
  log.onWritten(logError === undefined ? bytes : 0, logError, itemsFailed)
  errors.forEach((e, i) => onDone(i, e ?? logError))
}

/** `syncMany` with a commit log, from a driver's own `writev` and `fdatasync`: the items and the batch written at once. */
const loggedVia = (
  driver: Pick<FileDriverShape, "writev" | "fdatasync">,
  items: ReadonlyArray<SyncItem>,
  onDone: (index: number, error: FileError | undefined) => void,
  log: CommitLogWrite
) =>
  Effect.gen(function*() {
    const batch = batchOf(log, items, items.map(() => true))
    if (batch === undefined) return log.onWritten(0, undefined)
    const logged = (bytes: Buffer) =>
      driver.writev(log.fd, [bytes], log.position).pipe(
        Effect.flatMap((n) => n === bytes.length ? driver.fdatasync(log.fd) : Effect.fail(shortWrite(log.fd, n, bytes.length))),
        Effect.as(undefined),
        Effect.merge
      )
    const [logError, errors] = yield* Effect.all([
      logged(batch),
      Effect.forEach(
        items,
        (item) =>
          driver.writev(item.fd, item.buffers, item.position).pipe(
            Effect.flatMap((n) => n === item.bytes ? Effect.succeed(undefined) : Effect.fail(shortWrite(item.fd, n, item.bytes))),
            Effect.merge
          ),
        { concurrency: "unbounded" }
      )
    ], { concurrency: "unbounded" })
    const outcome = loggedOutcome(log, items, errors, logError, batch)
    if (outcome._tag === "failed") return tellLogged(log, errors, onDone, outcome.error, 0)
    if (outcome._tag === "none") return tellLogged(log, errors, onDone, outcome.error, 0, true)
    if (outcome._tag === "written") return tellLogged(log, errors, onDone, undefined, outcome.bytes)
    const rewritten = yield* logged(outcome.batch)
    tellLogged(log, errors, onDone, rewritten, outcome.batch.length)
  })

export class FileDriver extends Context.Tag("brain/FileDriver")<FileDriver, FileDriverShape>() {}

/** Node's message without its trailing `, syscall 'path'` (the path is kept in `path` instead). */
const withoutPath = (message: string) => message.replace(/, \w+ '[^']*'( -> '[^']*')?$/, "")

const fail = (op: string, path: string, err: NodeJS.ErrnoException) =>
  new FileError({ op, path, code: err.code ?? "EIO", detail: withoutPath(err.message) })

const call = <A>(op: string, path: string, run: (cb: (err: NodeJS.ErrnoException | null, a?: A) => void) => void) =>
  Effect.async<A, FileError>((resume) => {
    run((err, a) => resume(err ? Effect.fail(fail(op, path, err)) : Effect.succeed(a as A)))
  })

const fdName = (fd: number) => `fd ${fd}`

const ignoreClose = () => {}

/**
 * `fs.open` as an effect that never loses its descriptor: interrupted while the open is in flight,
 * the fiber goes on at once and the descriptor the late callback brings is closed there. (An
 * `Effect.async` without a canceller drops that callback's result: an aborted read kept its
 * segment open for the life of the process.)
 */
const openFd = (path: string, flags: string | number, mode?: number) =>
  Effect.async<number, FileError>((resume) => {
    let abandoned = false
    fs.open(path, flags, mode, (err, fd) => {
      if (err) return resume(Effect.fail(fail("open", path, err)))
      if (abandoned) return fs.close(fd, ignoreClose)
      resume(Effect.succeed(fd))
    })
    return Effect.sync(() => {
      abandoned = true
    })
  })

/**
 * The open-file limit was reached (EMFILE: this process's, ENFILE: the system's): nothing is wrong
 * with the file, the call can succeed once descriptors are given back.
 */
export const isExhausted = (e: FileError) => e.code === "EMFILE" || e.code === "ENFILE"

/**
 * `use` with a descriptor of `path`, closed whatever `use` comes to (interrupted included): the
 * open is uninterruptible and its descriptor is always released, so nothing between the open
 * and the close can keep it (Effect.acquireUseRelease).
 */
export const withFile = <A, E, R>(
  driver: Pick<FileDriverShape, "open" | "close">,
  path: string,
  flags: string | number,
  use: (fd: number) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | FileError, R> => Effect.acquireUseRelease(driver.open(path, flags), use, (fd) => Effect.ignore(driver.close(fd)))

/** The buffers left after the first `written` bytes of `buffers`. */
export const remainingAfter = (buffers: ReadonlyArray<Buffer>, written: number): Array<Buffer> => {
  const out: Array<Buffer> = []
  let skip = written
  for (const b of buffers) {
    if (skip >= b.length) {
      skip -= b.length
      continue
    }
    out.push(skip > 0 ? b.subarray(skip) : b)
    skip = 0
  }
  return out
}

/**
 * Writes every byte: a short write (the kernel wrote part, as it does when the disk fills up) is
 * continued from where it stopped, so a failure is reported by the call that really failed, with
 * its own code (ENOSPC, not a made-up EIO). A write that makes no progress is an error.
 */
const writeAll = (fd: number, buffers: ReadonlyArray<Buffer>, position: number, bytes: number, done: (err: FileError | undefined) => void) => {
  fs.writev(fd, buffers as Array<Buffer>, position, (err, written) => {
    if (err) return done(fail("write", fdName(fd), err))
    if (written === bytes) return done(undefined)
    if (written === 0) {
      return done(new FileError({ op: "write", path: fdName(fd), code: "EIO", detail: `no progress: 0 of ${bytes} bytes written` }))
    }
    writeAll(fd, remainingAfter(buffers, written), position + written, bytes - written, done)
  })
}

/**
 * Rounds of this many files or more are written and synced from the sync thread (SyncThread.ts):
 * one message instead of a threadpool submission per write and per fdatasync. Smaller rounds (one
 * session's turn alone) stay here, where the hop would add its latency and save nothing.
 */
export const SYNC_THREAD_MIN_FILES = 4

/**
 * The Node `syncMany` on callbacks, without an effect: `end` is called once every item's `onDone`
 * (and the log's `onWritten`) has been. Plain callbacks, or the sync thread for a round of many
 * files.
 */
const nodeSyncManyNow = (
  items: ReadonlyArray<SyncItem>,
  onDone: (index: number, error: FileError | undefined) => void,
  log: CommitLogWrite | undefined,
  end: () => void
): void => {
  let pending = items.length
  if (pending === 0) {
    log?.onWritten(0, undefined)
    return end()
  }
  if (pending >= SYNC_THREAD_MIN_FILES) {
    return syncRound(items, (outcomes, logged) => {
      if (log !== undefined) {
        const failure = logged?.failure
        log.onWritten(logged?.bytes ?? 0, failure && new FileError({ op: failure.op, path: fdName(log.fd), code: failure.code, detail: failure.detail }))
      }
      outcomes.forEach((o, i) =>
        onDone(i, o === undefined ? undefined : new FileError({ op: o.op, path: fdName(o.log ? log!.fd : items[i]!.fd), code: o.code, detail: o.detail }))
      )
      end()
    }, log)
  }
  if (log !== undefined) return loggedDirect(items, onDone, log, end)
  const finish = (i: number, error: FileError | undefined) => {
    onDone(i, error)
    if (--pending === 0) end()
  }
  items.forEach((item, i) => {
    writeAll(item.fd, item.buffers, item.position, item.bytes, (err) => {
      if (err || item.synced === true) return finish(i, err)
      fs.fdatasync(item.fd, (err2) => finish(i, err2 ? fail("fdatasync", fdName(item.fd), err2) : undefined))
    })
  })
}

/** The Node `syncMany`: one `Effect.async` for the whole round (`nodeSyncManyNow`). */
const nodeSyncMany: FileDriverShape["syncMany"] = (items, onDone, log) =>
  Effect.async<void>((resume) => nodeSyncManyNow(items, onDone, log, () => resume(Effect.void)))

/**
 * A driver's `syncMany` on callbacks (`nodeSyncManyNow`), for a round started without an effect
 * (FileStore.ts `commitNow`): the Node driver's own, and only while `syncMany` is still its own,
 * so that a driver that wraps or replaces `syncMany` (a test's, injecting faults) sees every round.
 */
export const syncNowOf = (driver: Pick<FileDriverShape, "syncMany">) => driver.syncMany === nodeSyncMany ? nodeSyncManyNow : undefined

/**
 * A small round with a commit log, from this thread: the batch of every item submitted first, the
 * items' writes at once with it, so a commit waits for the longer of the two, not for both one
 * after the other (`loggedOutcome` for when an item's write failed).
 */
const loggedDirect = (
  items: ReadonlyArray<SyncItem>,
  onDone: (index: number, error: FileError | undefined) => void,
  log: CommitLogWrite,
  resume: () => void
) => {
  const batch = batchOf(log, items, items.map(() => true))!
  const errors: Array<FileError | undefined> = new Array(items.length).fill(undefined)
  let logError: FileError | undefined
  let pending = items.length + 1
  const finish = (error: FileError | undefined, bytes: number, itemsFailed = false) => {
    tellLogged(log, errors, onDone, error, bytes, itemsFailed)
    resume()
  }
  const settle = () => {
    if (--pending > 0) return
    const outcome = loggedOutcome(log, items, errors, logError, batch)
    if (outcome._tag === "failed") return finish(outcome.error, 0)
    if (outcome._tag === "none") return finish(outcome.error, 0, true)
    if (outcome._tag === "written") return finish(undefined, outcome.bytes)
    logWrite(log, outcome.batch, (err) => finish(err, outcome.batch.length))
  }
  logWrite(log, batch, (err) => {
    logError = err
    settle()
  })
  items.forEach((item, i) => {
    writeAll(item.fd, item.buffers, item.position, item.bytes, (err) => {
      errors[i] = err
      settle()
    })
  })
}

/** A batch written to the log at its position and made durable (by the write itself when the log has `O_DSYNC`). */
const logWrite = (log: CommitLogWrite, batch: Buffer, done: (err: FileError | undefined) => void) =>
  writeAll(log.fd, [batch], log.position, batch.length, (err) => {
    if (err || log.synced) return done(err)
    fs.fdatasync(log.fd, (err2) => done(err2 ? fail("fdatasync", fdName(log.fd), err2) : undefined))
  })

export const nodeDriver: FileDriverShape = {
  syncMany: nodeSyncMany,
  open: (path, flags) => openFd(path, flags, 0o644),
  close: (fd) => call("close", fdName(fd), (cb) => fs.close(fd, cb)),
  // Whole or failed: a short write is continued, so the count returned is always every byte.
  writev: (fd, buffers, position) =>
    Effect.async<number, FileError>((resume) => {
      let bytes = 0
      for (const b of buffers) bytes += b.length
      writeAll(fd, buffers, position, bytes, (err) => resume(err ? Effect.fail(err) : Effect.succeed(bytes)))
    }),
  fdatasync: (fd) => call("fdatasync", fdName(fd), (cb) => fs.fdatasync(fd, cb)),
  read: (fd, buffer, position) =>
    call<number>("read", fdName(fd), (cb) => fs.read(fd, buffer, 0, buffer.length, position, (err, n) => cb(err, n))),
  ftruncate: (fd, length) => call("ftruncate", fdName(fd), (cb) => fs.ftruncate(fd, length, cb)),
  size: (fd) => call<number>("fstat", fdName(fd), (cb) => fs.fstat(fd, (err, st) => cb(err, st?.size))),
  readFile: (path) => call<Buffer>("readFile", path, (cb) => fs.readFile(path, cb)),
  fileSize: (path) => call<number>("stat", path, (cb) => fs.stat(path, (err, st) => cb(err, st?.size))),
  writeFile: (path, data, flag = "w") => call("writeFile", path, (cb) => fs.writeFile(path, data, { flag }, cb)),
  readdir: (path) => call<Array<string>>("readdir", path, (cb) => fs.readdir(path, cb)),
  mkdir: (path) => call("mkdir", path, (cb) => fs.mkdir(path, { recursive: true }, (err) => cb(err))),
  rename: (from, to) => call("rename", from, (cb) => fs.rename(from, to, cb)),
  unlink: (path) => call("unlink", path, (cb) => fs.unlink(path, cb)),
  rmrf: (path) => call("rm", path, (cb) => fs.rm(path, { recursive: true, force: true }, cb)),
  exists: (path) => Effect.async<boolean>((resume) => fs.access(path, (err) => resume(Effect.succeed(!err)))),
  syncDir: (path) =>
    Effect.acquireUseRelease(
      openFd(path, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY),
      (fd) => call("fsync", path, (cb) => fs.fsync(fd, cb)),
      (fd) => Effect.async<void>((resume) => fs.close(fd, () => resume(Effect.void)))
    )
}

export const layerNode = Layer.succeed(FileDriver, nodeDriver)

/**
 * `syncDir` as a promise, for the stores written with `fs/promises` (host registrations, uploaded
 * modules): the directory opened read-only (`O_DIRECTORY`), fsynced and closed, so that a file
 * created or renamed in it survives a crash.
 */
export const syncDirectory = async (dir: string): Promise<void> => {
  const handle = await fs.promises.open(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY)
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}

/**
 * Writes a new file from its start in batches of about `batchBytes`: `push` queues frames and
 * writes once a batch is full, `flush` writes the rest. For rewrites that copy a file record by
 * record without holding it all in memory.
 */
export const batchedWriter = (driver: Pick<FileDriverShape, "writev">, fd: number, file: string, batchBytes: number) => {
  let batch: Array<Buffer> = []
  let pending = 0
  let written = 0
  const flush = Effect.suspend(() => {
    if (pending === 0) return Effect.void
    const buffers = batch
    const bytes = pending
    batch = []
    pending = 0
    return Effect.flatMap(driver.writev(fd, buffers, written), (n) => {
      if (n !== bytes) {
        return Effect.fail(new FileError({ op: "write", path: file, code: "EIO", detail: `short write: ${n} of ${bytes} bytes` }))
      }
      written += bytes
      return Effect.void
    })
  })
  return {
    /** Where the next pushed byte will land in the file. */
    get offset() {
      return written + pending
    },
    push: (buffers: ReadonlyArray<Buffer>) =>
      Effect.suspend(() => {
        for (const b of buffers) {
          batch.push(b)
          pending += b.length
        }
        return pending >= batchBytes ? flush : Effect.void
      }),
    flush,
    /** Bytes written so far (after a flush: the file's size). */
    get written() {
      return written
    }
  }
}
