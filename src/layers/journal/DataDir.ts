/**
 * The data directory: a format marker, a lock, and `sessions/{id}/` per session.
 *
 * The lock is a file holding the owner's pid and kernel start time. A lock whose owner is gone
 * (killed with `kill -9`, say) or whose pid now names another process is stale and is taken
 * over, so a crash never blocks the restart; a live owner is waited for a bounded interval. What
 * an attempt killed in the middle leaves (its private files) is removed by the next attempt
 * (`removeLockDebris`).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Clock, Data, Duration, Effect } from "effect"
import { DATA_DIR_LOCK_WAIT_MS } from "../../domain/Limits.js"

/**
 * The format this build writes in `format`. Bump it (to `brain-ts/N+1`, kept in READ_FORMATS) with
 * any change to what is on disk that a build reading the last format would misread or not see: a
 * journal record kind it does not know (`request_claimed`: its keys would be new to it and run
 * again), the commit log (records only it holds would be lost), where idempotency keys or hosts are
 * kept, a segment's frame. A change older builds read correctly (a checkpoint's format, which each
 * build checks and rebuilds; a twin's, which it remakes) needs none. A start re-marks a directory of
 * an older format it reads, so from then on the builds that read only that format refuse it at
 * start instead of misreading it; a format leaves READ_FORMATS only when this build can no longer
 * read what it marks.
 *
 * `brain-ts/1`: every build before 2026-12-06 12:13 UTC, whatever it wrote (a build of 2026-12-01 keeps keys
 * only in `idempotency/claims.log`; later ones in journals, and a commit log). `brain-ts/2`: the
 * same files as the last `brain-ts/1` builds wrote, marked so that none of those builds opens them.
 */
export const FORMAT = "brain-ts/2"
/** Every format this build opens: its own, and each earlier one, which it re-marks FORMAT at open. */
export const READ_FORMATS: ReadonlyArray<string> = ["brain-ts/1", FORMAT]
export const FORMAT_FILE = "format"
export const LOCK_FILE = "lock"
export const SESSIONS_DIR = "sessions"

export class DataDirError extends Data.TaggedError("DataDirError")<{
  readonly dir: string
  readonly reason: string
  /** Another live process holds the lock: stopping it, not fixing the directory, is the remedy. */
  readonly held?: boolean
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

const errno = (err: unknown) => (err as NodeJS.ErrnoException).code

const readOrEmpty = (file: string): string | undefined => {
  try {
    return fs.readFileSync(file, "utf8")
  } catch (err) {
    if (errno(err) === "ENOENT") return undefined
    throw err
  }
}

/** Words an operator can act on for the errors a mistaken data directory path gives. */
const ERRNO_WORDS: Readonly<Record<string, string>> = {
  ENOENT: "no such file or directory",
  ENOTDIR: "not a directory",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EROFS: "read-only file system",
  ENOSPC: "no space left on the device",
  EDQUOT: "disk quota exceeded",
  ELOOP: "too many symbolic links",
  ENAMETOOLONG: "name too long",
  EISDIR: "is a directory"
}

/** A file-system error in words, with its code for a search: never Node's raw `Error: CODE: …, op 'path'`. */
export const fsFailure = (err: unknown): string => {
  const code = errno(err)
  if (code === undefined) return err instanceof Error ? err.message : String(err)
  return `${ERRNO_WORDS[code] ?? (err as Error).message.replace(/^\w+: /, "").replace(/, \w+ '.*'$/, "")} (${code})`
}

const notDirectory = (dir: string, at: string) => at === path.resolve(dir) ? "not a directory" : `a part of its path, ${at}, is not a directory`

/** The directory the path names, or why there is none there: the first part of the path that is not a directory. */
const notDirectoryOnPath = (dir: string): string => {
  const parts = path.resolve(dir).split(path.sep)
  for (let i = 2; i <= parts.length; i++) {
    const prefix = parts.slice(0, i).join(path.sep)
    try {
      if (!fs.statSync(prefix).isDirectory()) return notDirectory(dir, prefix)
    } catch {
      break
    }
  }
  return "not a directory"
}

/** Names a data directory may hold before its format marker: a lock, its private files, a marker whose rename a crash interrupted. */
const beforeMarker = (name: string) => name === LOCK_FILE || name.startsWith(`${LOCK_FILE}.`) || name === `${FORMAT_FILE}.tmp`

/**
 * What a path holds, as a data directory, read without writing anything:
 * - Missing: nothing (a server creates it);
 * - Unusable: not a directory, a part of its path not a directory, or unreadable;
 * - Empty: a directory a server takes as new (nothing but what a start leaves before the marker);
 * - Foreign: a directory a server refuses (other files and no marker, or another format);
 * - Marked: a data directory of this format.
 */
export type DataDirState =
  | { readonly _tag: "Missing" }
  | { readonly _tag: "Unusable"; readonly reason: string }
  | { readonly _tag: "Empty" }
  | { readonly _tag: "Foreign"; readonly reason: string }
  | { readonly _tag: "Marked" }

export const inspectDataDir = (dir: string): DataDirState => {
  let names: Array<string>
  try {
    if (!fs.statSync(dir).isDirectory()) return { _tag: "Unusable", reason: "not a directory" }
    names = fs.readdirSync(dir)
  } catch (err) {
    const code = errno(err)
    if (code === "ENOENT") return { _tag: "Missing" }
    if (code === "ENOTDIR") return { _tag: "Unusable", reason: notDirectoryOnPath(dir) }
    return { _tag: "Unusable", reason: `cannot be read: ${fsFailure(err)}` }
  }
  if (!names.includes(FORMAT_FILE)) {
    return names.some((name) => !beforeMarker(name))
      ? { _tag: "Foreign", reason: `not empty, and has no ${FORMAT_FILE} marker; not a ${FORMAT} data directory` }
      : { _tag: "Empty" }
  }
  let found: string
  try {
    found = fs.readFileSync(path.join(dir, FORMAT_FILE), "utf8").trim()
  } catch (err) {
    return { _tag: "Unusable", reason: `its ${FORMAT_FILE} marker cannot be read: ${fsFailure(err)}` }
  }
  return READ_FORMATS.includes(found) ? { _tag: "Marked" } : { _tag: "Foreign", reason: unreadFormat(found) }
}

/** Why a marker this build does not read is refused: what it holds, what this build reads and writes. */
const unreadFormat = (found: string) =>
  `holds format ${JSON.stringify(found)}, which this build does not read (it reads ${READ_FORMATS.join(" and ")}, and writes ${FORMAT}): ` +
  `a newer build has opened it, or it is not a Brain data directory`

/**
 * Writes the marker as one step: a temporary file, fsynced, renamed over `format`, and the
 * directory fsynced, so that a crash leaves the old marker or the new one (and at most a
 * `format.tmp`, which the next start writes over), never a torn one.
 */
const writeMarker = (dir: string) => {
  const marker = path.join(dir, FORMAT_FILE)
  const tmp = `${marker}.tmp`
  fs.writeFileSync(tmp, `${FORMAT}\n`)
  const fd = fs.openSync(tmp, "r+")
  fs.fsyncSync(fd)
  fs.closeSync(fd)
  fs.renameSync(tmp, marker)
  syncDir(dir)
}

const syncDir = (dir: string) => {
  const dfd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY)
  try {
    fs.fsyncSync(dfd)
  } finally {
    fs.closeSync(dfd)
  }
}

const isDirectory = (at: string) => {
  try {
    return fs.statSync(at).isDirectory()
  } catch {
    return false
  }
}

/**
 * Creates the directory and its missing parents one at a time. Not `mkdir -p` (`recursive`):
 * Node's loops forever where a parent refuses a child with ENOENT (under /proc, say).
 */
const createDirs = (dir: string) => {
  const missing: Array<string> = []
  for (let at = path.resolve(dir);; at = path.dirname(at)) {
    try {
      if (fs.statSync(at).isDirectory()) break
      throw new Error(notDirectory(dir, at))
    } catch (err) {
      const code = errno(err)
      if (code !== "ENOENT" && code !== "ENOTDIR") throw err
      missing.push(at)
      if (path.dirname(at) === at) break
    }
  }
  for (const at of missing.reverse()) {
    try {
      fs.mkdirSync(at)
    } catch (err) {
      if (errno(err) === "EEXIST" && isDirectory(at)) continue
      // ENOENT with the parent there: a file system that takes no new directory (/proc, say).
      const why = errno(err) === "ENOENT" ? "the file system there takes no new directory (ENOENT)" : fsFailure(err)
      throw new Error(errno(err) === "EEXIST" ? notDirectory(dir, at) : `cannot create ${at}: ${why}`)
    }
  }
}

let lockAttempts = 0
/**
 * A private file of a lock attempt: `lock.{pid}.{start}.{ms}.{n}.{new|stale}`, naming the process
 * that made it by its pid and kernel start time (`-` where unknown), as the lock itself does.
 */
const uniqueName = (lockPath: string, suffix: "new" | "stale") =>
  `${lockPath}.${process.pid}.${startTimeOf(process.pid) ?? "-"}.${Date.now()}.${lockAttempts++}.${suffix}`

/** A lock attempt's private file: its maker (pid, and start time when the name has one) and kind; undefined for any other name. */
const lockFileOf = (name: string): { readonly pid: number; readonly start: string | undefined; readonly kind: "new" | "stale" } | undefined => {
  // lock.{pid}.{start}.{ms}.{n}.{kind}, or lock.{pid}.{ms}.{n}.{kind} as earlier versions named them.
  const m = /^lock\.(\d+)\.(?:(\d+|-)\.)?\d+\.\d+\.(new|stale)$/.exec(name)
  if (m === null) return undefined
  return { pid: Number(m[1]), start: m[2] === undefined || m[2] === "-" ? undefined : m[2], kind: m[3] as "new" | "stale" }
}

/**
 * Removes what lock attempts cut off by a crash left (`lock.*.new`, `lock.*.stale`: `tryLock`
 * removes its own before it returns, so a file is left only by a process that died in the middle).
 * Best effort: a file that cannot be removed is left for the next start; nothing reads them.
 *
 * The race. A file is a live attempt's only while its maker lives: an attempt is one synchronous
 * step that ends by removing its files. So only files whose maker is gone are touched, told as a
 * stale lock is told (its pid not alive, or alive with another kernel start time: a new process
 * that reuses the pid never matches the start time in an old name). A live maker's file (another
 * process's attempt under way, or this process's, made by another thread) is never touched; where
 * start times are unknown (off Linux) a pid that lives keeps its files, this process's own too.
 * A dead maker's `.stale` file holds a lock it moved aside; when that lock's owner still lives (the
 * maker died between its rename and its link back), the lock is linked back first, so its owner
 * keeps it. Several starts cleaning at once: a file already removed (ENOENT) and a lock already
 * back (EEXIST) are no failure.
 */
const removeLockDebris = (dir: string, lockPath: string) => {
  let names: Array<string>
  try {
    names = fs.readdirSync(dir)
  } catch {
    return
  }
  const me = startTimeOf(process.pid)
  for (const name of names) {
    const made = lockFileOf(name)
    if (made === undefined) continue
    if (made.pid === process.pid && (made.start === undefined || me === undefined || made.start === me)) continue
    if (isAlive(made.pid, made.start)) continue
    const file = path.join(dir, name)
    try {
      if (made.kind === "stale") {
        const [pidText, start] = (readOrEmpty(file) ?? "").trim().split(" ")
        const owner = Number(pidText)
        if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isAlive(owner, start === "-" ? undefined : start)) {
          try {
            fs.linkSync(file, lockPath)
          } catch (err) {
            if (errno(err) !== "EEXIST") throw err
          }
        }
      }
      fs.unlinkSync(file)
    } catch {
      // Left for the next start (ENOENT: another start removed it first).
    }
  }
}

/**
 * One attempt. The lock appears whole or not at all: the owner line is written to a private file
 * first and then hard-linked to `lock` (link fails if `lock` exists). A stale lock is first
 * renamed aside, then checked again, so a takeover never removes a lock another process has just
 * taken; if what was moved turns out to be live, it is linked back.
 */
const tryLock = (lockPath: string) =>
  Effect.try({
    try: () => {
      const me = `${process.pid} ${startTimeOf(process.pid) ?? "-"}\n`
      const mine = uniqueName(lockPath, "new")
      const fd = fs.openSync(mine, "wx", 0o644)
      try {
        // Written within the step that removes the file: a write that fails (ENOSPC) leaves nothing.
        try {
          fs.writeSync(fd, me)
          fs.fsyncSync(fd)
        } finally {
          fs.closeSync(fd)
        }
        for (;;) {
          try {
            fs.linkSync(mine, lockPath)
            return me
          } catch (err) {
            if (errno(err) !== "EEXIST") throw err
          }
          const owner = readOrEmpty(lockPath)
          if (owner === undefined) continue
          const [pidText, start] = owner.trim().split(" ")
          const pid = Number(pidText)
          if (Number.isInteger(pid) && pid > 0 && isAlive(pid, start === "-" ? undefined : start)) {
            throw new LockHeld({ owner: owner.trim() })
          }
          const aside = uniqueName(lockPath, "stale")
          try {
            fs.renameSync(lockPath, aside)
          } catch (err) {
            if (errno(err) === "ENOENT") continue
            throw err
          }
          if (readOrEmpty(aside) !== owner) {
            // Another process took the lock between our read and our rename: give it back.
            try {
              fs.linkSync(aside, lockPath)
            } catch (err) {
              if (errno(err) !== "EEXIST") throw err
            }
          }
          fs.unlinkSync(aside)
        }
      } finally {
        fs.rmSync(mine, { force: true })
      }
    },
    catch: (err) =>
      err instanceof LockHeld ? err : new DataDirError({ dir: path.dirname(lockPath), reason: `cannot take its ${LOCK_FILE}: ${fsFailure(err)}${remedy(err)}` })
  })

/**
 * What to do about a lock a full file system refuses: a start writes (the lock's owner line first,
 * then what recovery writes), so it needs some space; nothing of the directory is changed by the
 * refusal (docs/operations.md, "A full disk").
 */
const remedy = (err: unknown): string =>
  errno(err) === "ENOSPC" || errno(err) === "EDQUOT"
    ? "; a start writes to the data directory (its lock first, then what recovery writes), so free space on its file system (files beside it, or grow it) and start again: nothing in it was changed"
    : ""

/**
 * Acquires the data directory's lock for the life of the scope, waiting up to
 * DATA_DIR_LOCK_WAIT_MS for a live owner that may be exiting.
 */
export const acquireLock = (dir: string, waitMs: number = DATA_DIR_LOCK_WAIT_MS) => {
  const lockPath = path.join(dir, LOCK_FILE)
  return Effect.acquireRelease(
    Effect.gen(function*() {
      // Before the first attempt: a live lock a crashed attempt left moved aside is back in place.
      yield* Effect.sync(() => removeLockDebris(dir, lockPath))
      const deadline = (yield* Clock.currentTimeMillis) + waitMs
      // Poll a live owner until it exits or the wait runs out (a starting server may overlap
      // with an exiting one for a moment).
      for (;;) {
        const attempt = yield* Effect.either(tryLock(lockPath))
        if (attempt._tag === "Right") return attempt.right
        const err = attempt.left
        if (err._tag === "DataDirError") return yield* Effect.fail(err)
        // This process holds it (a runtime an application composed and has not closed): it will not exit to let go.
        if (err.owner.split(" ")[0] === String(process.pid)) {
          return yield* Effect.fail(
            new DataDirError({ dir, reason: `held by another runtime of this process, still open (pid, start: ${err.owner}); close it first`, held: true })
          )
        }
        if ((yield* Clock.currentTimeMillis) >= deadline) {
          return yield* Effect.fail(new DataDirError({ dir, reason: `locked by another live process (pid, start: ${err.owner})`, held: true }))
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
 * The owner line of the data directory's lock when a live process holds it (a server running on
 * it), read without taking or touching it; undefined when there is no lock or its owner is gone.
 */
export const liveLockOwner = (dir: string): string | undefined => {
  let owner: string | undefined
  try {
    owner = readOrEmpty(path.join(dir, LOCK_FILE))?.trim()
  } catch {
    return undefined
  }
  if (owner === undefined) return undefined
  const [pidText, start] = owner.split(" ")
  const pid = Number(pidText)
  return Number.isInteger(pid) && pid > 0 && isAlive(pid, start === "-" ? undefined : start) ? owner : undefined
}

/** Creates the data directory if it is missing, with its missing parents; a path that cannot hold one fails saying why. */
export const createDataDir = (dir: string) =>
  Effect.try({
    try: () => createDirs(dir),
    catch: (err) => new DataDirError({ dir, reason: errno(err) === undefined ? (err as Error).message : fsFailure(err) })
  })

/**
 * Opens (creating if new) a data directory for exclusive use by this process for the life of
 * the scope: takes the lock, then checks or writes the format marker.
 *
 * A directory of an earlier format this build reads (READ_FORMATS) is re-marked FORMAT here, after
 * the lock is taken and before anything else in the directory is written (only the lock, and what
 * earlier lock attempts left, is touched before it; the journal, the commit log and the stores
 * beside it are all opened after it): a directory holding anything this build wrote is never left
 * marked for a build that would misread it. A start killed in the middle leaves the old marker (and
 * a `format.tmp` the next start writes over) or the new one; either opens. A marker this build does
 * not read is refused, and the directory left as it was.
 */
export const openDataDir = (dir: string, lockWaitMs?: number) =>
  Effect.gen(function*() {
    yield* createDataDir(dir)
    yield* acquireLock(dir, lockWaitMs)
    yield* Effect.try({
      try: () => {
        const marker = path.join(dir, FORMAT_FILE)
        if (fs.existsSync(marker)) {
          const found = fs.readFileSync(marker, "utf8").trim()
          if (!READ_FORMATS.includes(found)) throw new Error(unreadFormat(found))
          if (found !== FORMAT) writeMarker(dir)
        } else {
          // Our own lock, its private files, and a marker whose rename a crash interrupted.
          const others = fs.readdirSync(dir).filter((name) => !beforeMarker(name))
          if (others.length > 0) throw new Error(`is not empty and has no ${FORMAT_FILE} marker; refusing to use it`)
          writeMarker(dir)
        }
        fs.mkdirSync(path.join(dir, SESSIONS_DIR), { recursive: true })
        syncDir(dir)
      },
      catch: (err) => new DataDirError({ dir, reason: errno(err) === undefined ? (err as Error).message : fsFailure(err) })
    })
  })

export const sessionDir = (dataDir: string, session: string) => path.join(dataDir, SESSIONS_DIR, session)
/** A session's checkpoint, in its directory (written by CheckpointStore.ts; its head read by the journal's open, Cover.ts). */
export const CHECKPOINT_FILE = "checkpoint"
/**
 * Where a deleted session's directory is renamed before its files are removed, so that a delete is
 * one atomic step (a crash in the middle of removing files never leaves a session missing some).
 * Outside `sessions/`, so that no listing takes it for a session and a start that removes what a
 * stop left there reads nothing under `sessions/`.
 */
export const DELETED_DIR = "deleted"
export const tombstoneDir = (dataDir: string, session: string) => path.join(dataDir, DELETED_DIR, session)
export const JOURNAL_DIR = "journal"
export const journalDir = (dataDir: string, session: string) => path.join(dataDir, SESSIONS_DIR, session, JOURNAL_DIR)

/** Segment files are named by the first sequence they hold, zero-padded so names sort. */
export const segmentName = (firstSequence: number) => `${String(firstSequence).padStart(20, "0")}.seg`
export const parseSegmentName = (name: string): number | undefined => {
  const m = /^(\d{20})\.seg$/.exec(name)
  return m ? Number(m[1]) : undefined
}
