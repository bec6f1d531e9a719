/**
 * The journal's sync thread (SyncThread.ts): each message is one group-commit round, `{id, data,
 * items}` where `items` holds `[fd, position, offset, bytes, synced]` per file and `data` every file's
 * bytes one after another (transferred). Each file's bytes are written at its position (a short
 * write is continued from where it stopped) and the file is fdatasync'd unless it was opened with
 * `O_DSYNC` (its write was durable when it returned), all files at once on
 * libuv's threadpool; one answer `{id, failures}` comes back when every file is done, naming the
 * items that failed and why.
 *
 * A round with `log` (the file store's commit log): the files are written one after another from
 * this thread (plain writes to the page cache, a few microseconds each: cheaper here than a pool
 * job each), none synced; then the batch of those written (CommitLogFormat.ts) is written to the log
 * file at `log.position` and made durable, and the answer says how many bytes it took, or why it
 * failed (then every written file's failure too).
 */
import * as fs from "node:fs"
import { parentPort } from "node:worker_threads"
import { encodeBatch, type LogPiece, type LogUse } from "./CommitLogFormat.js"

/** A round's batch for the commit log, as this thread writes it (FileDriver.ts `CommitLogWrite` adds the caller's callback). */
export interface SyncRoundLog {
  readonly fd: number
  readonly position: number
  /** The log file's use (CommitLogFormat.ts): its batches' epoch and salt. */
  readonly use: LogUse
  /** The log file was opened with `O_DSYNC`: its write is durable when it returns, no fdatasync follows. */
  readonly synced: boolean
  /** Each item's file as the log names it (UTF-8, relative to the data directory), in the items' order. */
  readonly paths: ReadonlyArray<Uint8Array>
}

export interface SyncRequest {
  readonly id: number
  readonly data: ArrayBuffer
  /** Per file: fd, position in the file, offset in `data`, bytes, and 1 when the file has `O_DSYNC` (no fdatasync follows its write). */
  readonly items: ReadonlyArray<readonly [number, number, number, number, 0 | 1]>
  readonly log?: SyncRoundLog
}

export interface LogFailure {
  readonly op: "write" | "fdatasync"
  readonly code: string
  readonly detail: string
}

export interface SyncFailure {
  readonly index: number
  readonly op: "write" | "fdatasync"
  readonly code: string
  readonly detail: string
}

export interface SyncAnswer {
  readonly id: number
  readonly failures: ReadonlyArray<SyncFailure>
  /** With `log`: the batch's bytes (0 when nothing was logged), or why the log's write failed. */
  readonly logBytes?: number
  readonly logFailure?: LogFailure
}

/** Node's message without its trailing `, syscall 'path'`. */
const withoutPath = (message: string) => message.replace(/, \w+ '[^']*'( -> '[^']*')?$/, "")

const writeAll = (fd: number, bytes: Buffer, position: number, done: (failure: Omit<SyncFailure, "index"> | undefined) => void) => {
  fs.write(fd, bytes, 0, bytes.length, position, (err, written) => {
    if (err) return done({ op: "write", code: err.code ?? "EIO", detail: withoutPath(err.message) })
    if (written === bytes.length) return done(undefined)
    if (written === 0) return done({ op: "write", code: "EIO", detail: `no progress: 0 of ${bytes.length} bytes written` })
    writeAll(fd, bytes.subarray(written), position + written, done)
  })
}

const failureOf = (op: "write" | "fdatasync", err: unknown): LogFailure => {
  const e = err as NodeJS.ErrnoException
  return { op, code: e.code ?? "EIO", detail: withoutPath(e.message ?? String(err)) }
}

/** Writes every byte of `bytes` at `position`, from this thread; the failure, if any. */
const writeAllNow = (fd: number, bytes: Uint8Array, position: number): LogFailure | undefined => {
  let done = 0
  try {
    while (done < bytes.length) {
      const n = fs.writeSync(fd, bytes, done, bytes.length - done, position + done)
      if (n === 0) return { op: "write", code: "EIO", detail: `no progress: 0 of ${bytes.length - done} bytes written` }
      done += n
    }
  } catch (err) {
    return failureOf("write", err)
  }
  return undefined
}

const loggedRound = ({ data, id, items, log }: SyncRequest & { log: NonNullable<SyncRequest["log"]> }) => {
  const failures: Array<SyncFailure> = []
  const entries: Array<LogPiece> = []
  items.forEach(([fd, position, offset, bytes], index) => {
    const piece = new Uint8Array(data, offset, bytes)
    const failure = writeAllNow(fd, piece, position)
    if (failure !== undefined) failures.push({ index, ...failure })
    else entries.push({ path: log.paths[index]!, position, pieces: [piece] })
  })
  if (entries.length === 0) return parentPort!.postMessage({ id, failures, logBytes: 0 } satisfies SyncAnswer)
  const batch = encodeBatch(log.use, entries)
  let logFailure = writeAllNow(log.fd, batch, log.position)
  if (logFailure === undefined && !log.synced) {
    try {
      fs.fdatasyncSync(log.fd)
    } catch (err) {
      logFailure = failureOf("fdatasync", err)
    }
  }
  const answer: SyncAnswer = logFailure === undefined ? { id, failures, logBytes: batch.length } : { id, failures, logBytes: 0, logFailure }
  parentPort!.postMessage(answer)
}

parentPort!.on("message", (request: SyncRequest) => {
  if (request.log !== undefined) return loggedRound(request as SyncRequest & { log: NonNullable<SyncRequest["log"]> })
  const { data, id, items } = request
  const failures: Array<SyncFailure> = []
  let pending = items.length
  const finish = (index: number, failure: Omit<SyncFailure, "index"> | undefined) => {
    if (failure !== undefined) failures.push({ index, ...failure })
    if (--pending === 0) parentPort!.postMessage({ id, failures } satisfies SyncAnswer)
  }
  items.forEach(([fd, position, offset, bytes, synced], index) => {
    writeAll(fd, Buffer.from(data, offset, bytes), position, (failure) => {
      if (failure !== undefined || synced === 1) return finish(index, failure)
      fs.fdatasync(fd, (err) => finish(index, err ? { op: "fdatasync", code: err.code ?? "EIO", detail: withoutPath(err.message) } : undefined))
    })
  })
})
