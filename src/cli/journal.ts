/**
 * `brain journal verify|dump`: read-only operator tools. They never take the lock and never
 * write: verify reports what an open would truncate instead of truncating it. Verifying a whole
 * data directory also checks the idempotency log by the rules the server opens it with.
 * `brain journal remove`, with the server stopped, takes a damaged session away. All three refuse
 * a data directory or session that is not there with the codes of cli/dataDir.ts. Verifying a
 * whole data directory also reads every other file a start reads — the idempotency log, the commit
 * log and the host registrations — with the start's own readers, and names what a start would
 * refuse (a file it cannot read, a commit log naming what is not a segment), skip or lose.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Console, Effect, Either } from "effect"
import { isSessionId, type SessionId } from "../domain/Ids.js"
import { PAGE_BYTES, PAGE_EVENTS } from "../domain/Limits.js"
import { acquireLock, fsFailure, journalDir, liveLockOwner, SESSIONS_DIR, sessionDir } from "../layers/journal/DataDir.js"
import { COMMIT_LOG_DIR, LOG_FILES, logBytes, loggedSession } from "../layers/journal/CommitLog.js"
import { BATCH_HEADER_BYTES, type ScannedLog, scanLog } from "../layers/journal/CommitLogFormat.js"
import { nodeDriver } from "../layers/journal/FileDriver.js"
import { listSegments, openHandle, readRecords } from "../layers/journal/Handle.js"
import { scanSegment } from "../layers/journal/Scan.js"
import { readPayload } from "../domain/Records.js"
import type { JournalReadError, JournalUnavailable } from "../services/Journal.js"
import { inspectLog } from "../layers/idempotency/Inspect.js"
import { failedBy, LOG_NAME } from "../layers/idempotency/Log.js"
import { HOSTS_DIR, readRegistrations, registrationsFile, REGISTRATIONS_FILE } from "../layers/hosts/Registrations.js"
import { existingDataDir, existingSession, exitOnRefusal, noSuchSession, sessionArg } from "./dataDir.js"

/** Exit codes of `verify`: the worst finding across the sessions checked. */
export const VERIFY_CLEAN = 0
export const VERIFY_TORN = 1
export const VERIFY_CORRUPT = 2
/**
 * Exit code when a journal (or the idempotency log) could not be read at all: the file system
 * refused (EACCES, EPERM, EIO) or this process is out of descriptors. Not a verdict on what it
 * holds, so never "corrupt" (which `remove` answers); sysexits.h's EX_IOERR. It outranks the others:
 * what was not read may hold anything.
 */
export const VERIFY_UNREADABLE = 74
/** Exit code of `remove` refusing a session the commit log may mend: a start and a stop come first. */
export const REMOVE_MENDABLE = 1

/** The session ids in the data directory, or why its sessions directory cannot be listed. */
const sessionsIn = (dataDir: string): Array<SessionId> | string => {
  const dir = path.join(dataDir, SESSIONS_DIR)
  if (!fs.existsSync(dir)) return []
  try {
    return fs.readdirSync(dir).filter(isSessionId).sort() as Array<SessionId>
  } catch (err) {
    return `${dir} cannot be listed: ${fsFailure(err)}`
  }
}

/** A journal that could not be read, in words that neither call it damaged nor invite its removal. */
const unreadLine = (e: JournalUnavailable) =>
  e.why === "unreadable"
    ? `cannot read: ${e.reason}; not checked (nothing is known about what it holds: let the server's user read its files, or see to the disk, and verify again)`
    : `cannot read: ${e.message}; not checked`

/** An error as the operator needs it: a damaged file named by its full path. */
const shown = (dataDir: string, e: JournalReadError) =>
  e._tag === "JournalCorrupt"
    ? `journal of ${e.session} is corrupt at ${path.join(dataDir, e.file)} offset ${e.offset}: ${e.reason}`
    : e._tag === "JournalUnavailable"
    ? `${e.session}: ${unreadLine(e)}`
    : e.message

/** A read's failure as an exit code: not read is not corrupt. */
const exitFor = (e: JournalReadError) => (e._tag === "JournalUnavailable" ? VERIFY_UNREADABLE : VERIFY_CORRUPT)

export const verify = (dataDir: string, only?: string) =>
  exitOnRefusal(Effect.gen(function*() {
    const session = only === undefined ? undefined : yield* sessionArg(only)
    const state = yield* existingDataDir(dataDir, VERIFY_CORRUPT)
    if (session !== undefined) yield* existingSession(dataDir, session, state)
    if (state === "Empty") {
      yield* Console.log(`${dataDir}: an empty data directory (a server takes it as a new one); nothing to verify`)
      return VERIFY_CLEAN
    }
    const listed = session !== undefined ? [session] : sessionsIn(dataDir)
    if (typeof listed === "string") {
      yield* Console.log(`cannot read: ${listed}; nothing checked`)
      return VERIFY_UNREADABLE
    }
    const sessions = listed
    let worst = VERIFY_CLEAN
    let unread = 0
    for (const session of sessions) {
      const result = yield* Effect.either(openHandle(nodeDriver, dataDir, session, false))
      if (result._tag === "Left") {
        const e = result.left
        if (e._tag === "SessionNotFound") {
          yield* Console.log(isDirectory(sessionDir(dataDir, session)) ? `${session}: ${residueOf(dataDir, session)} (no journal directory)` : `${session}: ${NOT_A_DIRECTORY}`)
        } else if (e._tag === "JournalUnavailable") {
          // Not checked, and not damage either: the file system refused the read, or this process is out of descriptors.
          yield* Console.log(`${session}: ${unreadLine(e)}`)
          unread++
        } else {
          yield* Console.log(`${session}: corrupt: ${path.join(dataDir, e.file)} offset ${e.offset}: ${e.reason}`)
          worst = VERIFY_CORRUPT
        }
        continue
      }
      const { handle, lastSequence, torn } = result.right
      if (lastSequence === 0 && !torn) {
        yield* Console.log(`${session}: ${residueOf(dataDir, session)} (a journal with no record)`)
      } else if (torn) {
        yield* Console.log(
          `${session}: torn final write: open would truncate ${torn.bytes} bytes of ${torn.file} at offset ${torn.offset} (${torn.reason}); ${lastSequence} records committed`
        )
        worst = Math.max(worst, VERIFY_TORN)
      } else {
        yield* Console.log(`${session}: ok, ${lastSequence} records in ${handle.segments.length} segment(s)`)
      }
    }
    // The files a start reads beside the journals, each by the start's own reader.
    const others = only === undefined
      ? [
        yield* verifyIdempotencyLog(path.resolve(dataDir)),
        ...(yield* Effect.forEach(LOG_FILES, (name) => verifyCommitLog(dataDir, name))),
        yield* verifyRegistrations(dataDir)
      ]
      : []
    for (const checked of others) {
      if (checked === VERIFY_UNREADABLE) unread++
      else worst = Math.max(worst, checked)
    }
    const found = worst === VERIFY_CLEAN ? undefined : yield* commitLogBatches(dataDir)
    const logged = found === undefined || typeof found === "string" ? 0 : found.total
    const running = worst === VERIFY_CLEAN ? undefined : liveLockOwner(path.resolve(dataDir))
    if (logged === 0 && running !== undefined) {
      yield* Console.log(
        `note: a server runs on this data directory (pid, start: ${running}): what is reported here may be a write it has under way; verify again once it is stopped`
      )
    }
    if (logged > 0) {
      yield* Console.log(
        running !== undefined
          ? `note: the commit log holds ${logged} batch(es) of segment writes, and a server runs on this data directory (pid, start: ${running}): what is reported here may be a write it has under way; verify again once it is stopped`
          : `note: the commit log holds ${logged} batch(es) of segment writes that the server writes again at its start, which may mend what is reported here (a machine that lost power loses unsynced segment writes, not the log): start the server, stop it, and verify again`
      )
    }
    const what = `${sessions.length} session(s)${only === undefined ? ", the idempotency log, the commit log and the host registrations" : ""}`
    const verdict = ["clean", "torn write found", "corruption found"][worst]
    if (unread > 0) {
      yield* Console.log(`verified ${what}: ${unread} could not be read (not checked); in what was read, ${verdict}`)
      return VERIFY_UNREADABLE
    }
    yield* Console.log(`verified ${what}: ${verdict}`)
    return worst
  }))

/** One commit-log file as a start reads it (CommitLog.ts `recover`): absent, not read, damaged, or its whole batches. */
type CommitLogRead =
  | { readonly _tag: "Absent" }
  | { readonly _tag: "Unreadable"; readonly reason: string }
  | { readonly _tag: "Damaged"; readonly reason: string }
  | { readonly _tag: "Read"; readonly scan: ScannedLog; readonly bytes: Buffer }

/**
 * Reads a commit-log file with the start's reader (`logBytes`: from its start up to its last whole
 * batch and the next header) and scans it; a batch the start would refuse (an entry past its
 * batch, a name that is not a journal segment) is damage.
 */
const readCommitLog = (dataDir: string, name: string): Effect.Effect<CommitLogRead> =>
  Effect.gen(function*() {
    const file = path.join(dataDir, COMMIT_LOG_DIR, name)
    if (!(yield* nodeDriver.exists(file))) return { _tag: "Absent" } as const
    const bytes = yield* Effect.either(logBytes(nodeDriver, file))
    if (bytes._tag === "Left") return { _tag: "Unreadable", reason: failedBy(bytes.left, path.resolve(dataDir)) } as const
    const scanned = Either.try(() => scanLog(bytes.right))
    if (scanned._tag === "Left") return { _tag: "Damaged", reason: (scanned.left as Error).message } as const
    for (const batch of scanned.right.batches) {
      for (const entry of batch) {
        if (loggedSession(entry.path) === undefined) {
          return { _tag: "Damaged", reason: `it names ${JSON.stringify(entry.path)}, which is not a journal segment` } as const
        }
      }
    }
    return { _tag: "Read", scan: scanned.right, bytes: bytes.right } as const
  })

/** The commit log's file `name` as the operator needs it: its verdict's exit code, with a line saying why. */
const verifyCommitLog = (dataDir: string, name: string) =>
  Effect.gen(function*() {
    const shownAs = `${COMMIT_LOG_DIR}/${name}`
    const read = yield* readCommitLog(dataDir, name)
    switch (read._tag) {
      case "Absent":
        yield* Console.log(`${shownAs}: absent (a start creates it)`)
        return VERIFY_CLEAN
      case "Unreadable":
        yield* Console.log(`${shownAs}: cannot read: ${read.reason}; not checked (a start refuses a commit log it cannot read)`)
        return VERIFY_UNREADABLE
      case "Damaged":
        yield* Console.log(`${shownAs}: corrupt: ${read.reason}; a start refuses it`)
        return VERIFY_CORRUPT
      case "Read": {
        const batches = read.scan.batches.length
        // A log holds no batch when its first header is zeros (a new log, or one a start or a clean stop emptied).
        const first = read.bytes.subarray(0, BATCH_HEADER_BYTES)
        if (batches === 0 && first.some((b) => b !== 0)) {
          yield* Console.log(
            `${shownAs}: its first batch is not whole (${first.length < BATCH_HEADER_BYTES ? "a header cut short" : "a header or body whose checksum fails"}: a write cut off by a power loss, or damage); a start finds no batch in it, and writes back nothing it may have held`
          )
          return VERIFY_TORN
        }
        yield* Console.log(`${shownAs}: ok, ${batches === 0 ? "no batch" : `${batches} batch(es) of segment writes, which a start writes again`}`)
        return VERIFY_CLEAN
      }
    }
  })

/**
 * The whole batches the data directory's commit log holds (CommitLog.ts): how many in all, and how
 * many write to each session's segments; or why a log cannot be read (no log is none: a data
 * directory never started, or from before the log).
 */
const commitLogBatches = (dataDir: string) =>
  Effect.gen(function*() {
    let total = 0
    const bySession = new Map<string, number>()
    for (const name of LOG_FILES) {
      const read = yield* readCommitLog(dataDir, name)
      if (read._tag === "Absent") continue
      if (read._tag !== "Read") return `the commit log ${path.join(dataDir, COMMIT_LOG_DIR, name)} ${read._tag === "Unreadable" ? "cannot be read" : "is damaged"}: ${read.reason}`
      total += read.scan.batches.length
      for (const batch of read.scan.batches) {
        for (const session of new Set(batch.map((entry) => loggedSession(entry.path)))) {
          if (session !== undefined) bySession.set(session, (bySession.get(session) ?? 0) + 1)
        }
      }
    }
    const found: { readonly total: number; readonly bySession: ReadonlyMap<string, number> } = { total, bySession }
    return found
  })


/**
 * A session directory with no journal, or a journal with no record: what a creation cut off by a
 * crash before its first record was durable leaves (or a creation under way right now). No client
 * was told such a session exists (create answers after that record), the server answers
 * `not_found` for it and removes it when it meets it (journal/Core.ts), and it is not damage.
 */
const RESIDUE =
  "not a session: the residue of a creation cut off before its first record; the server answers not_found and removes it when a list or an access meets it, `brain journal remove` takes it away"

/**
 * Empty directories (`sessions/{id}/`, with at most an empty `journal/`): what a creation cut off
 * before it wrote anything, or a delete cut off by a crash, leaves. They hold nothing; the server
 * answers `not_found` for them.
 */
const EMPTY_RESIDUE =
  "not a session: empty directories, left by a creation or a delete cut off by a crash; the server answers not_found and removes them when a list or an access meets them, `brain journal remove` takes them away"

/** Whether a session's directory holds nothing but, at most, an empty journal directory. */
const emptyResidue = (dataDir: string, session: string): boolean => {
  try {
    const names = fs.readdirSync(sessionDir(dataDir, session))
    return names.every((n) => n === "journal") && (names.length === 0 || fs.readdirSync(journalDir(dataDir, session)).length === 0)
  } catch {
    return false
  }
}

/** Something other than a directory (a regular file) named as a session: not the journal's, so nobody removes it. */
const NOT_A_DIRECTORY =
  "not a session: a file, not a directory; the server answers not_found for it and leaves it (a file the journal does not know is never removed), and so does `brain journal remove`"

const isDirectory = (at: string) => {
  try {
    return fs.statSync(at).isDirectory()
  } catch {
    return false
  }
}

const residueOf = (dataDir: string, session: string) => (emptyResidue(dataDir, session) ? EMPTY_RESIDUE : RESIDUE)

/**
 * Removes a damaged session's directory: the repair path for a session whose journal is corrupt,
 * or the residue of a cut-off creation (a healthy one is ended and deleted through the API).
 * Takes the data directory's lock, so the server must be stopped; refuses a session whose journal
 * opens cleanly with records, and one the commit log holds writes to (REMOVE_MENDABLE): after a
 * power loss those are what the segments lack, and only a start writes them back.
 */
export const remove = (dataDir: string, session: string) =>
  exitOnRefusal(Effect.scoped(Effect.gen(function*() {
    const id = yield* sessionArg(session)
    const state = yield* existingDataDir(dataDir, VERIFY_CORRUPT)
    if (state === "Empty") return yield* Effect.fail(noSuchSession(dataDir, id))
    const locked = yield* Effect.either(acquireLock(path.resolve(dataDir), 0))
    if (locked._tag === "Left") {
      yield* Console.error(`${locked.left.message}${locked.left.held ? "; stop the server first" : ""}`)
      return VERIFY_CORRUPT
    }
    yield* existingSession(dataDir, id, state)
    const dir = sessionDir(dataDir, id)
    if (!isDirectory(dir)) {
      yield* Console.error(`${id}: ${NOT_A_DIRECTORY}; nothing removed`)
      return VERIFY_CORRUPT
    }
    const opened = yield* Effect.either(openHandle(nodeDriver, dataDir, id, false))
    if (opened._tag === "Right" && (opened.right.lastSequence > 0 || opened.right.torn)) {
      yield* Console.error(`${id}: its journal is not corrupt; end and delete it through the API instead`)
      return VERIFY_CORRUPT
    }
    // A journal that could not be read (the file system refused, or descriptors lacked) may be healthy: never removed on that.
    if (opened._tag === "Left" && opened.left._tag === "JournalUnavailable") {
      yield* Console.error(`${id}: ${unreadLine(opened.left)}; nothing removed`)
      return VERIFY_UNREADABLE
    }
    // After a power loss the commit log alone may hold what the segments lack, and a start writes it
    // back: a session it may mend is not judged by its files as they are now.
    const logged = yield* commitLogBatches(dataDir)
    if (typeof logged === "string") {
      yield* Console.error(`${id}: ${logged}; nothing removed (what it holds may mend the session)`)
      return VERIFY_UNREADABLE
    }
    const batches = logged.bySession.get(id) ?? 0
    if (batches > 0) {
      yield* Console.error(
        `${id}: not removed: the commit log holds ${batches} batch(es) of writes to its journal, which the server writes back at its start and which may mend it (a machine that lost power loses unsynced segment writes, not the log). ` +
          `Start the server and stop it, so that the log is written back, then verify again (\`brain journal verify ${dataDir} ${id}\`), and remove the session only if it is still damaged`
      )
      return REMOVE_MENDABLE
    }
    const residue = residueOf(dataDir, id)
    const removed = yield* Effect.either(Effect.try({
      try: () => {
        fs.rmSync(dir, { recursive: true, force: true })
        const parent = fs.openSync(path.dirname(dir), fs.constants.O_RDONLY | fs.constants.O_DIRECTORY)
        fs.fsyncSync(parent)
        fs.closeSync(parent)
      },
      catch: fsFailure
    }))
    if (removed._tag === "Left") {
      yield* Console.error(`${id}: cannot remove ${dir}: ${removed.left}`)
      return VERIFY_CORRUPT
    }
    const why = opened._tag === "Right" ? residue : opened.left._tag === "JournalCorrupt" ? shown(dataDir, opened.left) : residue
    yield* Console.log(`${id}: removed (${why})`)
    return VERIFY_CLEAN
  })))

/** Checks `idempotency/claims.log` as the server would open it; returns its verdict's exit code. */
const verifyIdempotencyLog = (dataDir: string) =>
  Effect.gen(function*() {
    const found = yield* Effect.either(inspectLog(nodeDriver, dataDir))
    if (found._tag === "Left") {
      yield* Console.log(`${LOG_NAME}: cannot read: ${failedBy(found.left, dataDir)}; not checked`)
      return VERIFY_UNREADABLE
    }
    const r = found.right
    switch (r._tag) {
      case "Absent":
        yield* Console.log(`${LOG_NAME}: absent (no keyed request yet)`)
        return VERIFY_CLEAN
      case "Clean":
        yield* Console.log(`${LOG_NAME}: ok, ${r.records} records`)
        return VERIFY_CLEAN
      case "Torn":
        yield* Console.log(
          `${LOG_NAME}: torn final write: open would truncate ${r.fileSize - r.end} bytes at offset ${r.end} (${r.reason}); ${r.records} records committed`
        )
        return VERIFY_TORN
      case "Damaged":
        yield* Console.log(
          `${LOG_NAME}: corrupt at offset ${r.offset}: ${r.reason}; the server refuses keyed requests until it is repaired: stop the server and run \`brain idempotency repair <data-dir>\``
        )
        return VERIFY_CORRUPT
    }
  })

/** Lines of the registrations file named one by one at most; past them, how many more. */
const SKIPPED_LINES_SHOWN = 20

const REGISTRATIONS_NAME = `${HOSTS_DIR}/${REGISTRATIONS_FILE}`

/**
 * Checks `hosts/registrations.jsonl` with the reader a start uses (hosts/Registrations.ts): a file
 * it cannot read is not read (a start refuses it); each line it skips is named. A line that is not
 * JSON is what a write cut off by a crash leaves (its registration never answered; an append ends
 * it), or damage: torn. JSON of no known shape no write leaves: damage, and what it said is lost
 * (a host's registration: the host is unknown to the server).
 */
const verifyRegistrations = (dataDir: string) =>
  Effect.gen(function*() {
    const read = yield* Effect.either(readRegistrations(registrationsFile(dataDir)))
    if (read._tag === "Left") {
      yield* Console.log(`${REGISTRATIONS_NAME}: cannot read: ${read.left.message}; not checked (a start refuses it)`)
      return VERIFY_UNREADABLE
    }
    const { lines, skipped, standing } = read.right
    if (lines === 0) {
      yield* Console.log(`${REGISTRATIONS_NAME}: no registration`)
      return VERIFY_CLEAN
    }
    let worst = VERIFY_CLEAN
    for (const s of skipped.slice(0, SKIPPED_LINES_SHOWN)) {
      yield* Console.log(
        s.why === "not JSON"
          ? `${REGISTRATIONS_NAME}: line ${s.line}: not JSON, which the server skips: a write cut off by a crash (its request was never answered), or damage (what the line said is lost)`
          : `${REGISTRATIONS_NAME}: line ${s.line}: of no known shape, which the server skips: damage (no write leaves it); if it was a host's registration, the server does not know that host and its token opens nothing`
      )
    }
    if (skipped.length > SKIPPED_LINES_SHOWN) yield* Console.log(`${REGISTRATIONS_NAME}: and ${skipped.length - SKIPPED_LINES_SHOWN} more line(s) skipped`)
    for (const s of skipped) worst = Math.max(worst, s.why === "not JSON" ? VERIFY_TORN : VERIFY_CORRUPT)
    yield* Console.log(
      `${REGISTRATIONS_NAME}: ${skipped.length === 0 ? "ok, " : ""}${standing.size} registration(s) standing in ${lines} line(s)${skipped.length > 0 ? `, ${skipped.length} skipped` : ""}`
    )
    return worst
  })

/** Writes `text` to stdout and waits until it has left the process (or stdout failed: a closed pipe). */
const written = (text: string) =>
  Effect.async<void>((resume) => {
    process.stdout.write(text, () => resume(Effect.void))
  })

/** How much text `dump` gathers before writing it out. */
const DUMP_WRITE_CHARS = 1024 * 1024

/**
 * A corrupt journal's records before its damage, as `dump` prints records: each segment checked in
 * order by the open's rules (Scan.ts), its whole appends printed, up to the first that fails. A
 * damaged journal is read a segment at a time (each up to JOURNAL_SEGMENT_BYTES), not in pages.
 */
const dumpBeforeDamage = (dataDir: string, session: SessionId) =>
  Effect.gen(function*() {
    const listed = yield* Effect.either(listSegments(nodeDriver, dataDir, session))
    if (listed._tag === "Left") return
    let expected = 1
    for (const [i, seg] of listed.right.segments.entries()) {
      if (seg.firstSequence !== expected) return
      const buf = yield* Effect.either(nodeDriver.readFile(seg.path))
      if (buf._tag === "Left") return
      const lines: Array<string> = []
      const scanned = yield* scanSegment(buf.right, {
        isFinal: i === listed.right.segments.length - 1,
        firstSequence: seg.firstSequence,
        onFrame: (frame) => {
          const payload = readPayload(frame.kind, frame.json.toString("utf8"))
          if (Either.isRight(payload)) {
            lines.push(JSON.stringify({ sequence: frame.sequence, recorded_at_ms: frame.recordedAtMs, kind: frame.kind, payload: payload.right }))
          }
        }
      })
      if (lines.length > 0) yield* written(lines.join("\n") + "\n")
      if (scanned._tag === "Corrupt") return
      expected = scanned.lastSequence + 1
    }
  })

export const dump = (dataDir: string, session: string) =>
  exitOnRefusal(Effect.gen(function*() {
    const id = yield* sessionArg(session)
    yield* existingSession(dataDir, id, yield* existingDataDir(dataDir, VERIFY_CORRUPT))
    const result = yield* Effect.either(openHandle(nodeDriver, dataDir, id, false))
    if (result._tag === "Left") {
      // What is intact before the damage is shown, so that the operator sees what a removal would lose.
      if (result.left._tag === "JournalCorrupt") yield* dumpBeforeDamage(dataDir, id)
      yield* Console.error(shown(dataDir, result.left))
      return exitFor(result.left)
    }
    const { handle, lastSequence } = result.right
    let after = 0
    for (;;) {
      // Pages bounded in bytes as the server's are (a page of 1,000 records of megabytes each would
      // not fit the heap, nor its text one string), written a few lines at a time.
      const page = yield* Effect.either(readRecords(nodeDriver, handle, after, lastSequence, PAGE_EVENTS, PAGE_BYTES))
      if (page._tag === "Left") {
        yield* Console.error(shown(dataDir, page.left))
        return exitFor(page.left)
      }
      if (page.right.length === 0) break
      let lines: Array<string> = []
      let bytes = 0
      for (const record of page.right) {
        const line = JSON.stringify(record)
        lines.push(line)
        bytes += line.length
        if (bytes >= DUMP_WRITE_CHARS) {
          // Each part once the previous one has left: a slow reader (a pipe into `less`) gets it all.
          yield* written(lines.join("\n") + "\n")
          lines = []
          bytes = 0
        }
      }
      if (lines.length > 0) yield* written(lines.join("\n") + "\n")
      after = page.right[page.right.length - 1]!.sequence
    }
    return VERIFY_CLEAN
  }))
