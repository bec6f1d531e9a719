/**
 * The journal's sync thread (SyncThread.ts): each message is one group-commit round, `{id, data,
 * items}` where `items` holds `[fd, position, offset, bytes, synced]` per file and `data` every file's
 * bytes one after another (transferred). Each file's bytes are written at its position (a short
 * write is continued from where it stopped) and the file is fdatasync'd unless it was opened with
 * `O_DSYNC` (its write was durable when it returned), all files at once on
 * libuv's threadpool; one answer `{id, failures}` comes back when every file is done, naming the
 * items that failed and why.
 */
import * as fs from "node:fs"
import { parentPort } from "node:worker_threads"

export interface SyncRequest {
  readonly id: number
  readonly data: ArrayBuffer
  /** Per file: fd, position in the file, offset in `data`, bytes, and 1 when the file has `O_DSYNC` (no fdatasync follows its write). */
  readonly items: ReadonlyArray<readonly [number, number, number, number, 0 | 1]>
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

parentPort!.on("message", ({ data, id, items }: SyncRequest) => {
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
