/**
 * The durable Idempotency store: one append-only log, `{dataDir}/idempotency/claims.log`, in the
 * journal's frame format (sequence = record number from 1, recorded_at_ms = the record's time,
 * kind `idem_claim` or `idem_answer`, JSON payload), and an in-memory index rebuilt from it on
 * open. The data directory is opened and locked by the journal layer; this store takes no lock.
 *
 * - A claim or answer returns only after its frame is written and fdatasync'd. One writer fiber
 *   group-commits everything pending (one write, one sync), as the journal writer does: the claim
 *   is on the path of every mutating request. A write failure is sticky.
 * - Open follows the journal's recovery rules: an incomplete final frame is a torn write and is
 *   truncated; a complete frame that fails a check is corruption and the store refuses to open.
 * - Compaction drops expired entries from the index and, once enough of the log is dead, the
 *   writer itself rewrites it (tmp, fdatasync, rename, directory fsync) between rounds, so no
 *   concurrent claim or answer can fall between the snapshot and the swap.
 *
 * Concurrent claims of one key are decided in memory, at once: the first reserves the key and
 * waits for its frame; the others see the reservation (Ambiguous, in flight) without waiting.
 * An answer becomes visible to replays only once it is durable.
 */
import * as path from "node:path"
import { Clock, Data, Duration, Effect, Either, Layer, Schema, type Scope } from "effect"
import {
  IDEMPOTENCY_BATCH_RECORDS,
  IDEMPOTENCY_COMPACT_MIN_INTERVAL_MS,
  IDEMPOTENCY_QUEUE_BYTES,
  IDEMPOTENCY_QUEUE_RECORDS,
  IDEMPOTENCY_REWRITE_DEAD_BYTES,
  MAX_FRAME_BYTES
} from "../domain/Limits.js"
import {
  type Answer,
  type ClaimResult,
  Idempotency,
  type IdempotencyShape,
  IdempotencyStoreFailed
} from "../services/Idempotency.js"
import { FileDriver, type FileError, nodeDriver } from "./journal/FileDriver.js"
import { BODY_FIXED_BYTES } from "./journal/Frame.js"
import { scanSegment } from "./journal/Scan.js"
import { failedBy, type IdempotencyFileLimits, Log, LOG_FILE, type LogRecord, REWRITE_FILE } from "./idempotency/Log.js"

export { type IdempotencyFileLimits, LOG_FILE } from "./idempotency/Log.js"

export const IDEMPOTENCY_DIR = "idempotency"
const CLAIM_KIND = "idem_claim"
const ANSWER_KIND = "idem_answer"
const claimKind = Buffer.from(CLAIM_KIND, "utf8")
const answerKind = Buffer.from(ANSWER_KIND, "utf8")

/** The log holds a frame that is complete but fails a check: the store refuses to open. */
export class IdempotencyLogCorrupt extends Data.TaggedError("IdempotencyLogCorrupt")<{
  readonly file: string
  readonly offset: number
  readonly reason: string
}> {
  override get message() {
    return `idempotency log ${this.file} is corrupt at offset ${this.offset}: ${this.reason}`
  }
}


export const defaultLimits: IdempotencyFileLimits = {
  queueRecords: IDEMPOTENCY_QUEUE_RECORDS,
  queueBytes: IDEMPOTENCY_QUEUE_BYTES,
  batchRecords: IDEMPOTENCY_BATCH_RECORDS,
  rewriteDeadBytes: IDEMPOTENCY_REWRITE_DEAD_BYTES
}

export interface IdempotencyFileOptions {
  readonly dataDir: string
  /** How long a claim (or, once answered, its answer) is kept, in milliseconds. 0 = forever. */
  readonly retentionMs: number
  readonly limits?: Partial<IdempotencyFileLimits>
  /** Background compaction interval of the layer; default retention / 4 (at least the named minimum). */
  readonly compactEveryMs?: number
}

const AnswerSchema = Schema.Struct({
  status: Schema.Number,
  headers: Schema.Record({ key: Schema.String, value: Schema.String }),
  body: Schema.String
})
const ClaimPayload = Schema.parseJson(
  Schema.Struct({ scope: Schema.String, key: Schema.String, bodyHash: Schema.String, atMs: Schema.Number })
)
const AnswerPayload = Schema.parseJson(
  Schema.Struct({ scope: Schema.String, key: Schema.String, answer: AnswerSchema, atMs: Schema.Number })
)
const decodeClaim = Schema.decodeUnknownEither(ClaimPayload)
const decodeAnswer = Schema.decodeUnknownEither(AnswerPayload)

interface Entry {
  readonly scope: string
  readonly key: string
  readonly bodyHash: string
  readonly claimAtMs: number
  /** Claimed by this process: unanswered, it is a request still running, not a crash. */
  readonly ours: boolean
  /** Bytes of the claim frame in the log; 0 until it is durable. */
  claimBytes: number
  answer: Answer | undefined
  answerAtMs: number
  answerBytes: number
  /** An answer is on its way to the log. */
  answering: boolean
}

const CLAIMED: ClaimResult = { _tag: "Claimed" }
const CONFLICT: ClaimResult = { _tag: "Conflict" }
const IN_FLIGHT: ClaimResult = { _tag: "Ambiguous", inFlight: true }
const FROM_EARLIER_PROCESS: ClaimResult = { _tag: "Ambiguous", inFlight: false }

/** Scope and key as one map key; the length prefix keeps `("ab", "c")` apart from `("a", "bc")`. */
const idOf = (scope: string, key: string) => `${scope.length}:${scope}${key}`

const claimJson = (e: Entry) =>
  Buffer.from(JSON.stringify({ scope: e.scope, key: e.key, bodyHash: e.bodyHash, atMs: e.claimAtMs }), "utf8")
const answerJson = (scope: string, key: string, answer: Answer, atMs: number) =>
  Buffer.from(JSON.stringify({ scope, key, answer, atMs }), "utf8")

type OpenError = IdempotencyLogCorrupt | IdempotencyStoreFailed

const storeFailed = (e: FileError) => new IdempotencyStoreFailed({ reason: failedBy(e) })

export const make = (
  options: IdempotencyFileOptions
): Effect.Effect<IdempotencyShape, OpenError, FileDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const driver = yield* FileDriver
    const limits = { ...defaultLimits, ...options.limits }
    const dataDir = path.resolve(options.dataDir)
    const dir = path.join(dataDir, IDEMPOTENCY_DIR)
    const file = path.join(dir, LOG_FILE)
    const retentionMs = options.retentionMs
    const index = new Map<string, Entry>()
    /** Log bytes that belong to entries in the index; the rest of the log is dead. */
    let liveBytes = 0

    const expired = (e: Entry, now: number) =>
      retentionMs > 0 &&
      !(e.ours && e.answer === undefined) &&
      now - (e.answer ? e.answerAtMs : e.claimAtMs) >= retentionMs
    const drop = (id: string, e: Entry) => {
      index.delete(id)
      liveBytes -= e.claimBytes + e.answerBytes
    }

    // Open: a rewrite a crash interrupted before its rename left only a temporary file.
    yield* driver.mkdir(dir).pipe(Effect.mapError(storeFailed))
    yield* Effect.ignore(driver.unlink(path.join(dir, REWRITE_FILE)))
    const isNew = !(yield* driver.exists(file))
    const fd = yield* driver.open(file, isNew ? "wx+" : "r+").pipe(Effect.mapError(storeFailed))
    // Until the writer owns the descriptor (a failed open must not leak it).
    let handedOver = false
    yield* Effect.addFinalizer(() => handedOver ? Effect.void : Effect.ignore(driver.close(fd)))
    if (isNew) {
      yield* driver.syncDir(dir).pipe(Effect.zipRight(driver.syncDir(dataDir)), Effect.mapError(storeFailed))
    }
    const buf = isNew ? Buffer.alloc(0) : yield* driver.readFile(file).pipe(Effect.mapError(storeFailed))
    const frames: Array<{ readonly kind: string; readonly json: Buffer; readonly size: number; readonly offset: number }> = []
    const scan = scanSegment(buf, {
      isFinal: true,
      firstSequence: 1,
      onFrame: (frame, offset) => frames.push({ kind: frame.kind, json: frame.json, size: frame.size, offset })
    })
    if (scan._tag === "Corrupt") {
      return yield* Effect.fail(new IdempotencyLogCorrupt({ file, offset: scan.offset, reason: scan.reason }))
    }
    if (scan._tag === "Torn") {
      yield* Effect.logWarning(`idempotency log ${file}: truncating a torn final write at offset ${scan.end} (${scan.reason})`)
      yield* driver.ftruncate(fd, scan.end).pipe(Effect.zipRight(driver.fdatasync(fd)), Effect.mapError(storeFailed))
    }
    for (const f of frames) {
      const text = f.json.toString("utf8")
      const bad = (reason: string) => Effect.fail(new IdempotencyLogCorrupt({ file, offset: f.offset, reason }))
      if (f.kind === CLAIM_KIND) {
        const c = decodeClaim(text)
        if (Either.isLeft(c)) return yield* bad(`unreadable ${CLAIM_KIND} payload`)
        // A claim for a key already present follows that entry's expiry: it starts a new entry.
        index.set(idOf(c.right.scope, c.right.key), {
          scope: c.right.scope,
          key: c.right.key,
          bodyHash: c.right.bodyHash,
          claimAtMs: c.right.atMs,
          ours: false,
          claimBytes: f.size,
          answer: undefined,
          answerAtMs: 0,
          answerBytes: 0,
          answering: false
        })
      } else if (f.kind === ANSWER_KIND) {
        const a = decodeAnswer(text)
        if (Either.isLeft(a)) return yield* bad(`unreadable ${ANSWER_KIND} payload`)
        const entry = index.get(idOf(a.right.scope, a.right.key))
        if (entry && !entry.answer) {
          entry.answer = a.right.answer
          entry.answerAtMs = a.right.atMs
          entry.answerBytes = f.size
        }
      } else {
        return yield* bad(`unknown record kind ${JSON.stringify(f.kind)}`)
      }
    }
    const openedAt = yield* Clock.currentTimeMillis
    for (const [id, e] of index) {
      if (expired(e, openedAt)) index.delete(id)
      else liveBytes += e.claimBytes + e.answerBytes
    }

    const log = new Log(driver, dir, file, fd, scan.end, frames.length + 1, limits)
    handedOver = true
    // Close order: refuse new work, let the loop drain what was queued, then close the file.
    yield* Effect.addFinalizer(() => log.closeFile)
    const loop = yield* Effect.forkScoped(log.run)
    yield* Effect.addFinalizer(() => Effect.zipRight(log.close, loop.await))

    const liveRecords = (): ReadonlyArray<LogRecord> => {
      const out: Array<LogRecord> = []
      for (const e of index.values()) {
        if (e.claimBytes === 0) continue // still queued: the writer appends it after the swap
        out.push({ kind: claimKind, json: claimJson(e), atMs: e.claimAtMs })
        if (e.answer) {
          out.push({ kind: answerKind, json: answerJson(e.scope, e.key, e.answer, e.answerAtMs), atMs: e.answerAtMs })
        }
      }
      return out
    }

    const store: IdempotencyShape = {
      claim: Effect.fn("Idempotency.claim")(function*(scope, key, bodyHash) {
        if (log.broken) return yield* Effect.fail(log.broken)
        const now = yield* Clock.currentTimeMillis
        // Decided and reserved in one synchronous step: concurrent claims see the reservation.
        const id = idOf(scope, key)
        const found = index.get(id)
        if (found && !expired(found, now)) {
          if (found.bodyHash !== bodyHash) return CONFLICT
          if (found.answer) return { _tag: "Replay", answer: found.answer } satisfies ClaimResult
          return found.ours ? IN_FLIGHT : FROM_EARLIER_PROCESS
        }
        if (found) drop(id, found)
        const entry: Entry = {
          scope,
          key,
          bodyHash,
          claimAtMs: now,
          ours: true,
          claimBytes: 0,
          answer: undefined,
          answerAtMs: 0,
          answerBytes: 0,
          answering: false
        }
        index.set(id, entry)
        yield* log.append({ kind: claimKind, json: claimJson(entry), atMs: now }, (bytes) => {
          entry.claimBytes = bytes
          if (index.get(id) === entry) liveBytes += bytes
        }).pipe(
          // Refused or failed: the reservation goes (an interrupted caller's claim is still written).
          Effect.tapError(() => Effect.sync(() => index.get(id) === entry && index.delete(id)))
        )
        return CLAIMED
      }),
      complete: Effect.fn("Idempotency.complete")(function*(scope, key, answer) {
        if (log.broken) return yield* Effect.fail(log.broken)
        const now = yield* Clock.currentTimeMillis
        const id = idOf(scope, key)
        const entry = index.get(id)
        // The first answer stands; an answer for a key never claimed (or already dropped) has no
        // body hash to be replayed against and is not kept.
        if (!entry || entry.answer || entry.answering) return
        const json = answerJson(scope, key, answer, now)
        if (BODY_FIXED_BYTES + answerKind.length + json.length > MAX_FRAME_BYTES) {
          return yield* Effect.fail(new IdempotencyStoreFailed({ reason: `an answer of ${json.length} bytes is above the frame maximum` }))
        }
        // What is replayed is what a restart would read back.
        const stored = (JSON.parse(json.toString("utf8")) as { answer: Answer }).answer
        entry.answering = true
        yield* log.append({ kind: answerKind, json, atMs: now }, (bytes) => {
          entry.answer = stored
          entry.answerAtMs = now
          entry.answerBytes = bytes
          if (index.get(id) === entry) liveBytes += bytes
        }).pipe(Effect.tapError(() => Effect.sync(() => (entry.answering = false))))
      }),
      compact: Effect.gen(function*() {
        if (log.broken) return yield* Effect.fail(log.broken)
        const now = yield* Clock.currentTimeMillis
        let dropped = 0
        for (const [id, e] of index) {
          if (expired(e, now)) {
            drop(id, e)
            dropped++
          }
        }
        const dead = log.size - liveBytes
        if (dead > 0 && dead >= limits.rewriteDeadBytes && dead >= liveBytes) yield* log.rewrite(liveRecords)
        return dropped
      }).pipe(Effect.withSpan("Idempotency.compact"))
    }
    return store
  })

/** The interval of the layer's background compaction. */
export const compactInterval = (options: IdempotencyFileOptions) =>
  options.compactEveryMs ?? Math.max(IDEMPOTENCY_COMPACT_MIN_INTERVAL_MS, Math.floor(options.retentionMs / 4))

/**
 * The file store over a data directory, with the given file driver. A fiber owned by the
 * layer's scope compacts it every `compactInterval` (never when retention is 0 = forever).
 */
export const layer = (options: IdempotencyFileOptions) =>
  Layer.scoped(
    Idempotency,
    Effect.tap(make(options), (store) =>
      options.retentionMs > 0
        ? Effect.forkScoped(
          Effect.sleep(Duration.millis(compactInterval(options))).pipe(
            Effect.zipRight(
              store.compact.pipe(Effect.catchAll((e) => Effect.logWarning(`idempotency compaction failed: ${e.reason}`)))
            ),
            Effect.forever
          )
        )
        : Effect.void)
  )

/** The file store on Node's file system: the embedded default. */
export const layerNode = (options: IdempotencyFileOptions) =>
  layer(options).pipe(Layer.provide(Layer.succeed(FileDriver, nodeDriver)))
