/**
 * `brain idempotency repair <data-dir>`: rebuilds a damaged idempotency log from its intact
 * records, with the server stopped.
 *
 * - It takes the data directory's lock, so it refuses to run beside a server (and a server
 *   cannot start while it runs).
 * - Every whole frame whose checksums hold and whose record is readable is kept, in order,
 *   renumbered; past damage it resynchronises on the next whole frame. Keys whose records lay in
 *   the damaged bytes are forgotten: a retry with such a key runs again. A key whose claim was
 *   kept but whose answer was lost is ambiguous, as after a crash.
 * - The damaged file stays as `idempotency/claims.log.damaged-<time>`: a second name linked before
 *   the swap, so a crash at any point leaves the damaged log or the repaired one in place, never
 *   none. The new log is written to a temporary file, fdatasync'd, renamed over the log, and the
 *   directory fsync'd.
 * - It prints what it kept and what was lost. Exit 0 when the log is clean (or only torn, which
 *   the server truncates itself) or repaired, or the data directory is empty; 1 when it could not
 *   repair; 66 when there is no such data directory (cli/dataDir.ts).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Clock, Console, Effect, Either } from "effect"
import { IDEMPOTENCY_READ_CHUNK_BYTES } from "../domain/Limits.js"
import { acquireLock } from "../layers/journal/DataDir.js"
import { batchedWriter, FileError, nodeDriver } from "../layers/journal/FileDriver.js"
import { encodeFrame } from "../layers/journal/Frame.js"
import { IDEMPOTENCY_DIR, inspectLog, logPath } from "../layers/idempotency/Inspect.js"
import { failedBy, LOG_FILE, LOG_NAME } from "../layers/idempotency/Log.js"
import { salvageLog, type Skipped } from "../layers/idempotency/Reader.js"
import { decodeIndexRecord } from "../layers/idempotency/Records.js"
import { existingDataDir, exitOnRefusal } from "./dataDir.js"

export const REPAIR_OK = 0
export const REPAIR_FAILED = 1

const REPAIR_FILE = `${LOG_FILE}.repair.tmp`

interface Rebuilt {
  readonly claims: number
  readonly answers: number
  readonly releases: number
  readonly skipped: ReadonlyArray<Skipped>
  readonly dropped: ReadonlyArray<{ readonly offset: number; readonly reason: string }>
  readonly aside: string
}

const driver = nodeDriver

/** Writes the intact records to a temporary file, then puts it in place of the log. */
const rebuild = (dataDir: string) =>
  Effect.gen(function*() {
    const dir = path.join(dataDir, IDEMPOTENCY_DIR)
    const file = logPath(dataDir)
    const tmp = path.join(dir, REPAIR_FILE)
    const src = yield* Effect.acquireRelease(driver.open(file, "r"), (fd) => Effect.ignore(driver.close(fd)))
    const out = yield* Effect.acquireRelease(driver.open(tmp, "w"), (fd) => Effect.ignore(driver.close(fd)))
    let claims = 0
    let answers = 0
    let releases = 0
    const dropped: Array<{ offset: number; reason: string }> = []
    const copy = batchedWriter(driver, out, tmp, IDEMPOTENCY_READ_CHUNK_BYTES)
    const skipped = yield* salvageLog(driver, src, yield* driver.size(src), (frame) =>
      Effect.gen(function*() {
        const record = decodeIndexRecord(frame.kind, frame.json)
        if (Either.isLeft(record)) return void dropped.push({ offset: frame.offset, reason: record.left })
        if (record.right._tag === "Claim") claims++
        else if (record.right._tag === "Answer") answers++
        else releases++
        // The frame's bytes belong to the read buffer: the batch keeps copies.
        yield* copy.push(
          encodeFrame(claims + answers + releases, frame.recordedAtMs, Buffer.from(frame.kind, "utf8"), Buffer.from(frame.json), false)
        )
      }))
    yield* copy.flush
    yield* driver.fdatasync(out)
    const stamp = new Date(yield* Clock.currentTimeMillis).toISOString().replace(/[:.]/g, "-")
    const aside = `${LOG_FILE}.damaged-${stamp}`
    yield* Effect.try({
      try: () => fs.linkSync(file, path.join(dir, aside)),
      catch: (err) => {
        const e = err as NodeJS.ErrnoException
        return new FileError({ op: "link", path: file, code: e.code ?? "EIO", detail: e.message })
      }
    })
    yield* driver.syncDir(dir)
    yield* driver.rename(tmp, file)
    yield* driver.syncDir(dir)
    return { claims, answers, releases, skipped, dropped, aside } satisfies Rebuilt
  }).pipe(
    Effect.scoped,
    Effect.tapError(() => Effect.ignore(driver.unlink(path.join(dataDir, IDEMPOTENCY_DIR, REPAIR_FILE))))
  )

const report = (r: Rebuilt) =>
  Effect.gen(function*() {
    yield* Console.log(
      `${LOG_NAME}: repaired; kept ${r.claims + r.answers + r.releases} records (${r.claims} claims, ${r.answers} answers, ${r.releases} releases)`
    )
    for (const s of r.skipped) yield* Console.log(`  lost ${s.bytes} damaged bytes at offset ${s.offset} (${s.reason})`)
    for (const d of r.dropped) yield* Console.log(`  dropped an unreadable record at offset ${d.offset} (${d.reason})`)
    yield* Console.log(`the damaged file is kept as ${IDEMPOTENCY_DIR}/${r.aside}`)
    yield* Console.log(
      "keys whose records were in the lost bytes are forgotten: a retry with such a key runs again; a key whose answer was lost is ambiguous (409)"
    )
  })

export const repair = (dataDirArg: string): Effect.Effect<number> => {
  const dataDir = path.resolve(dataDirArg)
  return Effect.gen(function*() {
    if ((yield* existingDataDir(dataDir, REPAIR_FAILED)) === "Empty") {
      yield* Console.log(`${dataDir}: an empty data directory (a server takes it as a new one); nothing to repair`)
      return REPAIR_OK
    }
    const locked = yield* Effect.either(acquireLock(dataDir, 0))
    if (Either.isLeft(locked)) {
      yield* Console.error(`${dataDir}: ${locked.left.reason}${locked.left.held ? "; stop the server before repairing its idempotency log" : ""}`)
      return REPAIR_FAILED
    }
    const found = yield* inspectLog(driver, dataDir)
    switch (found._tag) {
      case "Absent":
        yield* Console.log(`${LOG_NAME}: absent; nothing to repair`)
        return REPAIR_OK
      case "Clean":
        yield* Console.log(`${LOG_NAME}: ok, ${found.records} records; nothing to repair`)
        return REPAIR_OK
      case "Torn":
        yield* Console.log(
          `${LOG_NAME}: ${found.records} records and a torn final write of ${found.fileSize - found.end} bytes at offset ${found.end}, which the server truncates when it starts; nothing to repair`
        )
        return REPAIR_OK
      case "Damaged":
        yield* Console.log(`${LOG_NAME}: damaged at offset ${found.offset} (${found.reason}); rebuilding it from its intact records`)
        yield* report(yield* rebuild(dataDir))
        return REPAIR_OK
    }
  }).pipe(
    Effect.scoped,
    exitOnRefusal,
    Effect.catchAll((e) => Effect.as(Console.error(`${LOG_NAME}: repair failed: ${failedBy(e, dataDir)}`), REPAIR_FAILED))
  )
}
