/**
 * The data directory: a format marker, a lock, and `sessions/{id}/` per session.
 *
 * The lock is a file holding the owner's pid and kernel start time. A lock whose owner is gone
 * (killed with `kill -9`, say) or whose pid now names another process is stale and is taken
 * over, so a crash never blocks the restart; a live owner is waited for a bounded interval.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Clock, Data, Duration, Effect } from "effect"
import { DATA_DIR_LOCK_WAIT_MS } from "../../domain/Limits.js"

export const FORMAT = "brain-ts/1"
export const FORMAT_FILE = "format"
export const LOCK_FILE = "lock"
export const SESSIONS_DIR = "sessions"

export class DataDirError extends Data.TaggedError("DataDirError")<{
  readonly dir: string
  readonly reason: string
}> {
  override get message() {
    return `data directory ${this.dir}: ${this.reason}`
  }
}

class LockHeld extends Data.TaggedError("LockHeld")<{ readonly owner: string }> {}

/** The kernel start time of a process (field 22 of /proc/pid/stat), or undefined off Linux. */
const startTimeOf = (pid: number): string | undefined => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]
  } catch {
    return undefined
  }
}

const isAlive = (pid: number, startTime: string | undefined): boolean => {
  try {
    process.kill(pid, 0)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return false
  }
  const now = startTimeOf(pid)
  return now === undefined || startTime === undefined || now === startTime
}

const tryLock = (lockPath: string) =>
  Effect.try({
    try: () => {
      const me = `${process.pid} ${startTimeOf(process.pid) ?? "-"}\n`
      for (;;) {
        try {
          const fd = fs.openSync(lockPath, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY, 0o644)
          fs.writeSync(fd, me)
          fs.fsyncSync(fd)
          fs.closeSync(fd)
          return me
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err
        }
        let owner = ""
        try {
          owner = fs.readFileSync(lockPath, "utf8")
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "ENOENT") continue
          throw err
        }
        const [pidText, start] = owner.trim().split(" ")
        const pid = Number(pidText)
        if (Number.isInteger(pid) && pid > 0 && isAlive(pid, start === "-" ? undefined : start)) {
          throw new LockHeld({ owner: owner.trim() })
        }
        // Stale: its owner is gone. Remove it only if it is still the same stale file.
        try {
          if (fs.readFileSync(lockPath, "utf8") === owner) fs.unlinkSync(lockPath)
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err
        }
      }
    },
    catch: (err) => err instanceof LockHeld ? err : new DataDirError({ dir: path.dirname(lockPath), reason: String(err) })
  })

/**
 * Acquires the data directory's lock for the life of the scope, waiting up to
 * DATA_DIR_LOCK_WAIT_MS for a live owner that may be exiting.
 */
export const acquireLock = (dir: string, waitMs: number = DATA_DIR_LOCK_WAIT_MS) => {
  const lockPath = path.join(dir, LOCK_FILE)
  return Effect.acquireRelease(
    Effect.gen(function*() {
      const deadline = (yield* Clock.currentTimeMillis) + waitMs
      // Poll a live owner until it exits or the wait runs out (a starting server may overlap
      // with an exiting one for a moment).
      for (;;) {
        const attempt = yield* Effect.either(tryLock(lockPath))
        if (attempt._tag === "Right") return attempt.right
        const err = attempt.left
        if (err._tag === "DataDirError") return yield* Effect.fail(err)
        if ((yield* Clock.currentTimeMillis) >= deadline) {
          return yield* Effect.fail(new DataDirError({ dir, reason: `locked by another live process (pid, start: ${err.owner})` }))
        }
        yield* Effect.sleep(Duration.millis(50))
      }
    }),
    (mine) =>
      Effect.sync(() => {
        try {
          if (fs.readFileSync(lockPath, "utf8") === mine) fs.unlinkSync(lockPath)
        } catch {
          // Already gone: nothing to release.
        }
      })
  )
}

/**
 * Opens (creating if new) a data directory for exclusive use by this process for the life of
 * the scope: takes the lock, then checks or writes the format marker.
 */
export const openDataDir = (dir: string, lockWaitMs?: number) =>
  Effect.gen(function*() {
    yield* Effect.try({
      try: () => fs.mkdirSync(dir, { recursive: true }),
      catch: (err) => new DataDirError({ dir, reason: String(err) })
    })
    yield* acquireLock(dir, lockWaitMs)
    yield* Effect.try({
      try: () => {
        const marker = path.join(dir, FORMAT_FILE)
        if (fs.existsSync(marker)) {
          const found = fs.readFileSync(marker, "utf8").trim()
          if (found !== FORMAT) throw new Error(`holds format ${JSON.stringify(found)}, this server writes ${FORMAT}`)
        } else {
          const others = fs.readdirSync(dir).filter((name) => name !== LOCK_FILE)
          if (others.length > 0) throw new Error(`is not empty and has no ${FORMAT_FILE} marker; refusing to use it`)
          const tmp = `${marker}.tmp`
          fs.writeFileSync(tmp, `${FORMAT}\n`)
          const fd = fs.openSync(tmp, "r+")
          fs.fsyncSync(fd)
          fs.closeSync(fd)
          fs.renameSync(tmp, marker)
        }
        fs.mkdirSync(path.join(dir, SESSIONS_DIR), { recursive: true })
        const dfd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY)
        fs.fsyncSync(dfd)
        fs.closeSync(dfd)
      },
      catch: (err) => new DataDirError({ dir, reason: err instanceof Error ? err.message : String(err) })
    })
  })

export const sessionDir = (dataDir: string, session: string) => path.join(dataDir, SESSIONS_DIR, session)
export const journalDir = (dataDir: string, session: string) => path.join(dataDir, SESSIONS_DIR, session, "journal")

/** Segment files are named by the first sequence they hold, zero-padded so names sort. */
export const segmentName = (firstSequence: number) => `${String(firstSequence).padStart(20, "0")}.seg`
export const parseSegmentName = (name: string): number | undefined => {
  const m = /^(\d{20})\.seg$/.exec(name)
  return m ? Number(m[1]) : undefined
}
