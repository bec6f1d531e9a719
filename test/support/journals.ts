/**
 * Journal harnesses for the contract suite: each builds a fresh journal in a scope and can make
 * the next write of a session fail the way a disk would.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, Layer, type Scope } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import type { JournalShape } from "../../src/services/Journal.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { FileDriver, FileError, type FileDriverShape, nodeDriver, syncManyVia } from "../../src/layers/journal/FileDriver.js"

export interface JournalHarness {
  readonly journal: JournalShape
  readonly failNextWrite: (session: SessionId) => void
}

/** The commit log's two files (CommitLog.ts). */
export const COMMIT_LOGS = ["a.log", "b.log"] as const

/** The commit log's files as they are now: what a crash at this moment leaves of them (their writes are `O_DSYNC`). */
export const logsNow = (dataDir: string) => COMMIT_LOGS.map((n) => fs.readFileSync(path.join(dataDir, "commit-log", n)))

/** Puts the commit log back as `logsNow` found it: a crash then, instead of the clean stop that has since emptied it. */
export const restoreLogs = (dataDir: string, logs: ReadonlyArray<Buffer>) =>
  COMMIT_LOGS.forEach((n, i) => fs.writeFileSync(path.join(dataDir, "commit-log", n), logs[i]!))

export const tempDir = (prefix = "brain-test-") =>
  Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), prefix))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/**
 * Empties the data directory's commit log (CommitLog.ts): the state its segment files are in once
 * the log has moved on from their frames (synced there, then the log written over). For tests that
 * damage frames as a bad disk or a torn write would: damage to frames the log still holds is
 * written over at the next start (test/layers/CommitLog.test.ts).
 */
export const forgetCommitLog = (dataDir: string) => {
  for (const name of ["a.log", "b.log"]) {
    const file = path.join(dataDir, "commit-log", name)
    if (fs.existsSync(file)) fs.truncateSync(file, 0)
  }
}

/** How a write that fails after landing (`landsThenFails`) goes: how many of its bytes reach the file, then the error's code. */
export interface Landing {
  readonly landed: (bytes: number) => number
  readonly code: "ENOSPC" | "EIO"
}

/**
 * Wraps a driver: counts calls, and fails writes to files whose path contains a marked session:
 * the next write only (`failNextWrite`, EIO), or every write until `diskFreed` (`diskFull`, ENOSPC
 * as a full disk answers), or the next write after part or all of it reached the file
 * (`landsThenFails`: a disk filling up in the middle of a write, or an `O_DSYNC` write whose data
 * landed and whose sync failed). `failTruncates`: every ftruncate of such a file fails (EIO) until `diskFreed`.
 */
export const instrumentedDriver = (base: FileDriverShape = nodeDriver) => {
  const counts = { fdatasync: 0, writev: 0 }
  const failing = new Set<string>()
  const full = new Set<string>()
  const landing = new Map<string, Landing>()
  const noTruncate = new Set<string>()
  const fdPaths = new Map<number, string>()
  const driver: FileDriverShape = {
    ...base,
    open: (p, flags) => Effect.tap(base.open(p, flags), (fd) => Effect.sync(() => fdPaths.set(fd, p))),
    ftruncate: (fd, length) =>
      Effect.suspend(() => {
        const p = fdPaths.get(fd) ?? ""
        for (const s of noTruncate) {
          if (p.includes(s)) return Effect.fail(new FileError({ op: "ftruncate", path: p, code: "EIO", detail: "injected" }))
        }
        return base.ftruncate(fd, length)
      }),
    writev: (fd, buffers, position) =>
      Effect.suspend(() => {
        counts.writev++
        const p = fdPaths.get(fd) ?? ""
        for (const [s, how] of landing) {
          if (!p.includes(s)) continue
          landing.delete(s)
          const all = Buffer.concat(buffers)
          const n = Math.max(0, Math.min(all.length, how.landed(all.length)))
          const failure = new FileError({ op: "write", path: p, code: how.code, detail: `${how.code}: injected after ${n} of ${all.length} bytes landed` })
          return Effect.zipRight(n > 0 ? base.writev(fd, [all.subarray(0, n)], position) : Effect.void, Effect.fail(failure))
        }
        for (const s of full) {
          if (p.includes(s)) {
            return Effect.fail(new FileError({ op: "write", path: p, code: "ENOSPC", detail: "ENOSPC: no space left on device" }))
          }
        }
        for (const s of failing) {
          if (p.includes(s)) {
            failing.delete(s)
            return Effect.fail(new FileError({ op: "write", path: p, code: "EIO", detail: "injected" }))
          }
        }
        return base.writev(fd, buffers, position)
      }),
    fdatasync: (fd) => Effect.suspend(() => {
      counts.fdatasync++
      return base.fdatasync(fd)
    }),
    // Rounds go through this driver's own writev and fdatasync, so they are counted and can fail.
    syncMany: (items, onDone, log) => syncManyVia(driver)(items, onDone, log)
  }
  return {
    driver,
    counts,
    failNextWrite: (session: string) => void failing.add(session),
    diskFull: (session: string) => void full.add(session),
    landsThenFails: (part: string, how: Landing) => void landing.set(part, how),
    failTruncates: (part: string) => void noTruncate.add(part),
    diskFreed: (part: string) => {
      full.delete(part)
      landing.delete(part)
      noTruncate.delete(part)
    }
  }
}

export type Refusal = (op: "open" | "readFile" | "readdir", file: string, flags?: string | number) => string | undefined

/**
 * A driver (the Node one by default) but for the calls `refuse` names, which fail with the code it
 * gives, as Node reports them (EMFILE: the process is out of descriptors).
 */
export const refusingDriver = (base: FileDriverShape = nodeDriver) => {
  let refuse: Refusal = () => undefined
  const fail = (op: string, file: string, code: string) =>
    Effect.fail(new FileError({ op, path: file, code, detail: `${code}: injected` }))
  const driver: FileDriverShape = {
    ...base,
    // Decided when the call runs (the store builds some effects once, its list among them).
    open: (file, flags) =>
      Effect.suspend(() => {
        const code = refuse("open", file, flags)
        return code ? fail("open", file, code) : base.open(file, flags)
      }),
    readFile: (file) =>
      Effect.suspend(() => {
        const code = refuse("readFile", file)
        return code ? fail("readFile", file, code) : base.readFile(file)
      }),
    readdir: (dir) =>
      Effect.suspend(() => {
        const code = refuse("readdir", dir)
        return code ? fail("readdir", dir, code) : base.readdir(dir)
      })
  }
  return {
    driver,
    set: (r: Refusal) => void (refuse = r),
    clear: () => void (refuse = () => undefined)
  }
}

export const memoryHarness: Effect.Effect<JournalHarness, never, Scope.Scope> = Effect.map(
  JournalMemory.make,
  (m) => ({ journal: m.journal, failNextWrite: m.control.failNextWrite })
)

export const fileHarness = (dataDir?: string): Effect.Effect<JournalHarness & { dataDir: string; counts: { fdatasync: number; writev: number } }, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const dir = dataDir ?? (yield* tempDir())
    const inst = instrumentedDriver()
    const journal = yield* JournalFile.make({ dataDir: dir }).pipe(
      Effect.provide(Layer.succeed(FileDriver, inst.driver))
    )
    return { journal, failNextWrite: inst.failNextWrite, dataDir: dir, counts: inst.counts }
  })
