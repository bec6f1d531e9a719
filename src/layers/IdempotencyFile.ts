/**
 * The durable Idempotency store: one append-only log, `{dataDir}/idempotency/claims.log`, in the
 * journal's frame format (sequence = record number from 1, recorded_at_ms = the record's time,
 * records as in `idempotency/Records.ts`), and an in-memory index rebuilt from it on open. The
 * data directory is opened and locked by the journal layer; this store takes no lock.
 *
 * - Answers live in the log only: the index keeps where each answer frame is, and a replay reads
 *   it back (one positioned read, checksums checked). A frame damaged since it was written is
 *   reported as `IdempotencyLogDamaged`, never replayed.
 * - An answer whose JSON is above `maxAnswerBytes` is recorded as not kept (status and size), so
 *   the key resolves and the log stays within retention × request rate × that maximum.
 * - A claim, answer or release returns only after its frame is written and fdatasync'd,
 *   group-committed by the log's writer. A failed write fails only the records of its round: a
 *   failed claim frees its key; a failed answer leaves the key ambiguous (the work happened),
 *   never in progress; a failed release frees the key in this process only (its request did
 *   nothing; after a restart the unreleased claim is ambiguous, the cautious reading).
 * - Open reads the log in bounded chunks and follows the journal's recovery rules: an incomplete
 *   final frame is a torn write and is truncated. A damaged log (a complete frame failing a
 *   check, an unreadable record) is left as it is, said loudly, and the store refuses every
 *   keyed request with `IdempotencyLogDamaged` until an operator repairs it (`brain idempotency
 *   repair`); requests without a key are not its business. It never starts a fresh log, which
 *   would let old keys run twice.
 * - Compaction drops expired entries from the index and, once enough of the log is dead, the
 *   writer rewrites it between rounds by copying the live frames from the file. A claim never
 *   answered and an ambiguous verdict never expire (idempotency/Index.ts): they are always live.
 * - The index holds at most `maxKeys` entries (BRAIN_MAX_IDEMPOTENCY_KEYS): at the bound a claim
 *   of a new key, the completion of a reservation and an adoption that would pass it are refused
 *   (`IdempotencyFull`) before anything is written, once the expired entries in the way are
 *   dropped (idempotency/KeyBound.ts). Keys already held answer as always; a live key is never
 *   dropped for room. A log holding more live keys than the bound (a lowered setting) is opened
 *   whole. Refusing, the store logs a warning, at most once per IDEMPOTENCY_FULL_SWEEP_MS.
 * - The keys of requests about one session (its cancels, ends, deletes, kept refusals of sends)
 *   are bounded by `maxSessionKeys` (BRAIN_MAX_SESSION_LOG_KEYS): past it that session's new keys
 *   are refused the same way, naming it, counted again from the log at open. A keyed delete's own
 *   key and the keys a deleted session hands over may pass `maxKeys` by `deleteReserveKeys`
 *   (BRAIN_DELETE_RESERVE_KEYS), so that other sessions' keys never leave a session undeletable.
 *
 * Concurrent claims of one key are decided in memory, at once: the first reserves the key and
 * waits for its frame; the others see the reservation (Ambiguous, in flight) without waiting.
 * An answer becomes visible to replays only once it is durable.
 */
import * as path from "node:path"
import { Duration, Effect, Either, Layer, type Scope } from "effect"
import {
  IDEMPOTENCY_BATCH_RECORDS,
  IDEMPOTENCY_COMPACT_MIN_INTERVAL_MS,
  IDEMPOTENCY_MAX_ANSWER_BYTES,
  IDEMPOTENCY_MAX_ANSWER_CEILING_BYTES,
  IDEMPOTENCY_QUEUE_BYTES,
  IDEMPOTENCY_QUEUE_RECORDS,
  IDEMPOTENCY_REWRITE_DEAD_BYTES,
  TIMER_SETTING_MAX_MS
} from "../domain/Limits.js"
import {
  type AdoptedKey,
  type Answer,
  type ClaimResult,
  type CompleteOptions,
  Idempotency,
  IdempotencyLogDamaged,
  type IdempotencyError,
  IdempotencyFull,
  type IdempotencyShape,
  IdempotencyStoreFailed,
  sessionOfScope,
  takesDeleteReserve
} from "../services/Idempotency.js"
import { FileDriver, type FileError, nodeDriver } from "./journal/FileDriver.js"
import { type Entry, idOf, Index, newEntry } from "./idempotency/Index.js"
import { IDEMPOTENCY_FULL_SWEEP_MS, keyBounds } from "./idempotency/KeyBound.js"
import { failedBy, type IdempotencyFileLimits, Log, LOG_FILE, LOG_NAME, REWRITE_FILE } from "./idempotency/Log.js"
import { IDEMPOTENCY_DIR } from "./idempotency/Inspect.js"
import { scanLog } from "./idempotency/Reader.js"
import {
  answerKind,
  answerText,
  claimJson,
  claimKind,
  decodeIndexRecord,
  decodeKeptAnswer,
  isAmbiguousVerdict,
  keptAnswerJson,
  notKeptJson,
  releaseJson,
  releaseKind
} from "./idempotency/Records.js"

export { type IdempotencyFileLimits, LOG_FILE, LOG_NAME } from "./idempotency/Log.js"

export { IDEMPOTENCY_DIR } from "./idempotency/Inspect.js"

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
  /** Bytes: the largest answer JSON kept; a larger one is recorded as not kept. Default 1 MiB. */
  readonly maxAnswerBytes?: number
  /** Live keys held at most (BRAIN_MAX_IDEMPOTENCY_KEYS); default `maxIdempotencyKeys(undefined)`. */
  readonly maxKeys?: number | undefined
  /** Keys of requests about one session held at most (BRAIN_MAX_SESSION_LOG_KEYS); default `maxSessionLogKeys`. */
  readonly maxSessionKeys?: number | undefined
  /** Keys deletes may take past `maxKeys` (BRAIN_DELETE_RESERVE_KEYS); default `deleteReserveKeys`. */
  readonly deleteReserveKeys?: number | undefined
  readonly limits?: Partial<IdempotencyFileLimits>
  /** Background compaction interval of the layer; default retention / 4 (at least the named minimum). */
  readonly compactEveryMs?: number
}

const CLAIMED: ClaimResult = { _tag: "Claimed" }
const CONFLICT: ClaimResult = { _tag: "Conflict" }
const IN_FLIGHT: ClaimResult = { _tag: "Ambiguous", inFlight: true }
const NEVER_ANSWERED: ClaimResult = { _tag: "Ambiguous", inFlight: false }

/** An unanswered entry's Ambiguous, naming the session its claim named. */
const ambiguous = (entry: Entry): ClaimResult => {
  const plain = entry.state === "unanswered" ? NEVER_ANSWERED : IN_FLIGHT
  return entry.session === undefined ? plain : { ...plain, session: entry.session }
}

/** Adopted keys written at once: their frames share the log's rounds. */
const ADOPT_CONCURRENCY = 64

const REPAIR_HINT = "stop the server and run `brain idempotency repair <data-dir>`"

/** The store over a damaged log: every keyed request is refused; nothing is written. */
const refusing = (damaged: IdempotencyLogDamaged): IdempotencyShape => ({
  claim: () => Effect.fail(damaged),
  reserve: () => Effect.fail(damaged),
  complete: () => Effect.fail(damaged),
  release: () => Effect.fail(damaged),
  adopt: () => Effect.fail(damaged),
  compact: Effect.succeed(0)
})


export const make = (
  options: IdempotencyFileOptions
): Effect.Effect<IdempotencyShape, IdempotencyStoreFailed, FileDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const driver = yield* FileDriver
    const limits = { ...defaultLimits, ...options.limits }
    const maxAnswerBytes = Math.min(options.maxAnswerBytes ?? IDEMPOTENCY_MAX_ANSWER_BYTES, IDEMPOTENCY_MAX_ANSWER_CEILING_BYTES)
    const dataDir = path.resolve(options.dataDir)
    const dir = path.join(dataDir, IDEMPOTENCY_DIR)
    const file = path.join(dir, LOG_FILE)
    const index = new Index(options.retentionMs, ...keyBounds(options))
    const full = new IdempotencyFull({ maxKeys: index.maxKeys })
    let warnedAtMs = Number.NEGATIVE_INFINITY
    let warnedSessionAtMs = Number.NEGATIVE_INFINITY
    /** The refusal at one session's share, said in the log at most once per interval, whichever sessions refuse. */
    const refuseSessionFull = (now: number, session: string): Effect.Effect<never, IdempotencyFull> => {
      const refusal = new IdempotencyFull({ maxKeys: index.sessionKeys, session, keys: index.ownedBy(session) })
      if (now - warnedSessionAtMs < IDEMPOTENCY_FULL_SWEEP_MS && now >= warnedSessionAtMs) return Effect.fail(refusal)
      warnedSessionAtMs = now
      return Effect.zipRight(
        Effect.logWarning(
          `${refusal.message} (BRAIN_MAX_SESSION_LOG_KEYS): requests about that session with a new Idempotency-Key are refused with 503 overloaded until its keys expire (BRAIN_REQUEST_RETENTION_SECS); keys already held still answer, and other sessions are not affected. Said at most once a minute, whichever sessions refuse`
        ),
        Effect.fail(refusal)
      )
    }
    /** The refusal at the bound, said in the log at most once per interval (a full store may be refusing a flood). */
    const refuseFull = (now: number): Effect.Effect<never, IdempotencyFull> => {
      if (now - warnedAtMs < IDEMPOTENCY_FULL_SWEEP_MS && now >= warnedAtMs) return Effect.fail(full)
      warnedAtMs = now
      return Effect.zipRight(
        Effect.logWarning(
          `${full.message} (BRAIN_MAX_IDEMPOTENCY_KEYS): requests with a new Idempotency-Key are refused with 503 overloaded until keys expire (BRAIN_REQUEST_RETENTION_SECS); keys already held still answer. Said at most once a minute`
        ),
        Effect.fail(full)
      )
    }
    const storeFailed = (e: FileError) => new IdempotencyStoreFailed({ reason: `${LOG_NAME}: ${failedBy(e, dataDir)}` })

    // Open: a rewrite a crash interrupted before its rename left only a temporary file.
    yield* driver.mkdir(dir).pipe(Effect.mapError(storeFailed))
    yield* Effect.ignore(driver.unlink(path.join(dir, REWRITE_FILE)))
    const isNew = !(yield* driver.exists(file))
    // Until the writer owns the descriptor (a failed, refusing or interrupted open must not leak it).
    let handedOver = false
    const fd = yield* Effect.acquireRelease(
      driver.open(file, isNew ? "wx+" : "r+").pipe(Effect.mapError(storeFailed)),
      (fd) => handedOver ? Effect.void : Effect.ignore(driver.close(fd))
    )
    if (isNew) {
      yield* driver.syncDir(dir).pipe(Effect.zipRight(driver.syncDir(dataDir)), Effect.mapError(storeFailed))
    }
    const fileSize = isNew ? 0 : yield* driver.size(fd).pipe(Effect.mapError(storeFailed))
    const verdict = yield* scanLog(driver, fd, fileSize, (frame) =>
      Either.match(decodeIndexRecord(frame.kind, frame.json), {
        onLeft: (reason) => reason,
        onRight: (record) => void index.apply(record, frame.offset, frame.size)
      })).pipe(Effect.mapError(storeFailed))
    if (verdict._tag === "Damaged") {
      const damaged = new IdempotencyLogDamaged({ file: LOG_NAME, offset: verdict.offset, reason: verdict.reason })
      yield* Effect.logError(
        `${damaged.message}. Every request with an Idempotency-Key is refused (503 idempotency_unavailable) until the log is repaired: ${REPAIR_HINT}. Requests without a key are served.`
      )
      return refusing(damaged)
    }
    if (verdict._tag === "Torn") {
      yield* Effect.logWarning(`idempotency log ${LOG_NAME}: truncating a torn final write at offset ${verdict.end} (${verdict.reason})`)
      yield* driver.ftruncate(fd, verdict.end).pipe(Effect.zipRight(driver.fdatasync(fd)), Effect.mapError(storeFailed))
    }
    // Read directly on the hot paths (each keyed request decides and completes), not through the
    // fiber's services; the clock of the fiber that opens the log, as the test clock in a test.
    const clock = yield* Effect.clock
    index.opened(clock.unsafeCurrentTimeMillis())

    const log = new Log(driver, dataDir, dir, file, fd, verdict.end, verdict.records + 1, limits)
    handedOver = true
    // Close order: refuse new work, let the loop drain what was queued, then close the file.
    yield* Effect.addFinalizer(() => log.closeFile)
    const loop = yield* Effect.forkScoped(log.run)
    yield* Effect.addFinalizer(() => Effect.zipRight(log.close, loop.await))

    const reportDamage = (e: IdempotencyLogDamaged | IdempotencyStoreFailed) =>
      e._tag === "IdempotencyLogDamaged" ? Effect.logError(`${e.message}; the key's answer cannot be replayed: ${REPAIR_HINT}`) : Effect.void

    /** Writes the claim frame of `entry` (reserved until now); a refused or failed write drops it. */
    const writeClaim = (id: string, scope: string, key: string, entry: Entry) => {
      entry.state = "running"
      return log.append({ kind: claimKind, json: claimJson(scope, key, entry.bodyHash, entry.atMs, entry.session, entry.adopted), atMs: entry.atMs }, (offset, size) => {
        entry.claimOffset = offset
        entry.claimSize = size
        if (index.entries.get(id) === entry) index.liveBytes += size
      }).pipe(
        // Refused or failed: the reservation goes (an interrupted caller's claim is still written).
        Effect.tapError(() => Effect.sync(() => index.drop(id, entry)))
      )
    }

    /** Writes the answer frame of a claimed `entry`; a failed write leaves it ambiguous. */
    const writeAnswer = (id: string, scope: string, key: string, entry: Entry, answer: Answer, atMs: number) => {
      const text = answerText(answer)
      const bytes = Buffer.byteLength(text, "utf8")
      const notKept = bytes > maxAnswerBytes ? { status: answer.status, bytes } : undefined
      const json = notKept ? notKeptJson(scope, key, atMs, notKept) : keptAnswerJson(scope, key, atMs, text)
      entry.state = "answering"
      return log.append({ kind: answerKind, json, atMs }, (offset, size) => {
        entry.state = "answered"
        entry.answerOffset = offset
        entry.answerSize = size
        entry.atMs = atMs
        entry.notKept = notKept
        entry.verdict = isAmbiguousVerdict(answer)
        if (index.entries.get(id) === entry) index.liveBytes += size
        index.settled(id, entry)
      }).pipe(
        // The work happened but its answer is not recorded: ambiguous from now on, as after a restart.
        Effect.tapError(() => Effect.sync(() => (entry.state = "unanswered")))
      )
    }

    /**
     * What adopting `keys` writes, decided at once for all of them: per new key, its claim, then
     * its answer, each with its original time (a crash between them leaves the key ambiguous;
     * adopting it again completes it); an answer for a key held unanswered with the same body.
     * Undefined when the new keys would take the index past its bound: nothing is adopted.
     */
    const adoptions = (keys: ReadonlyArray<AdoptedKey>, now: number): Array<Effect.Effect<void, IdempotencyStoreFailed>> | undefined => {
      const live = keys.filter((k) => !(options.retentionMs > 0 && now - k.atMs >= options.retentionMs))
      const ids = live.map((k) => idOf(k.scope, k.key))
      // Adding none is never refused (a held key, a reservation replaced in place). A delete's keys
      // may take the delete reserve.
      if (!index.hasRoomFor(now, ids, true)) return undefined
      const writes: Array<Effect.Effect<void, IdempotencyStoreFailed>> = []
      live.forEach((k, i) => {
        const id = ids[i]!
        const found = index.entries.get(id)
        // A reservation (a retry racing the delete, refused not_found, nothing written) gives way.
        if (found && !index.expired(found, now) && found.state !== "reserved") {
          if (found.state === "unanswered" && k.answer !== undefined && found.bodyHash === k.bodyHash) {
            // writeAnswer marks it answering at once: a second adopted answer for it is not written too.
            writes.push(writeAnswer(id, k.scope, k.key, found, k.answer, k.atMs))
          }
          return
        }
        if (found) index.drop(id, found)
        const entry = newEntry(k.bodyHash, k.atMs, "reserved")
        entry.adopted = true
        index.put(id, entry)
        const answer = k.answer
        writes.push(Effect.zipRight(
          writeClaim(id, k.scope, k.key, entry),
          Effect.suspend(() =>
            answer === undefined ? Effect.sync(() => void (entry.state = "unanswered")) : writeAnswer(id, k.scope, k.key, entry, answer, k.atMs)
          )
        ))
      })
      return writes
    }

    /** `claim` (durable) and `reserve` (in memory only until `complete`). */
    const decide = Effect.fnUntraced(function*(scope: string, key: string, bodyHash: string, durable: boolean, session?: string) {
      const id = idOf(scope, key)
      for (;;) {
        const now = clock.unsafeCurrentTimeMillis()
        // Decided and reserved in one synchronous step: concurrent claims see the reservation.
        const found = index.entries.get(id)
        if (found && !index.expired(found, now)) {
          if (found.bodyHash !== bodyHash) return CONFLICT
          if (found.state !== "answered") return ambiguous(found)
          if (found.notKept) return { _tag: "AnswerNotKept", ...found.notKept } satisfies ClaimResult
          const frame = yield* log.readAt(() =>
            index.entries.get(id) === found ? { offset: found.answerOffset, size: found.answerSize } : undefined
          ).pipe(Effect.tapError(reportDamage))
          // Dropped (expired) between the decision and the read: decide again.
          if (frame === undefined) continue
          const kept = decodeKeptAnswer(frame.kind, frame.json)
          if (Either.isRight(kept) && kept.right.scope === scope && kept.right.key === key) {
            return { _tag: "Replay", answer: kept.right.answer } satisfies ClaimResult
          }
          const reason = Either.isLeft(kept) ? kept.left : "the record there belongs to another key"
          const damaged = new IdempotencyLogDamaged({ file: LOG_NAME, offset: found.answerOffset, reason })
          yield* reportDamage(damaged)
          return yield* Effect.fail(damaged)
        }
        if (found) index.drop(id, found)
        // A closed or failed log refuses a reservation as it would refuse the claim's write.
        const refused = log.refused()
        if (refused) return yield* Effect.fail(refused)
        // A new key at the bound (a keyed delete's may take the delete reserve), or past its
        // session's share; a reservation counts while it lasts, and its `complete` is checked.
        const owner = durable ? sessionOfScope(scope) : undefined
        if (durable && !index.hasRoom(now, 1, takesDeleteReserve(scope))) return yield* refuseFull(now)
        if (owner !== undefined && !index.hasSessionRoom(now, owner)) return yield* refuseSessionFull(now, owner)
        const entry = newEntry(bodyHash, now, "reserved", session)
        entry.owner = owner
        index.put(id, entry)
        if (durable) yield* writeClaim(id, scope, key, entry)
        return CLAIMED
      }
    })

    // Untraced: these run twice per keyed request, and a traced call costs an Error captured for
    // its call site, a span and its clock reads, which no tracer of this server exports
    // (docs/benchmarks.md, "Main-thread CPU of a keyed text turn").
    const store: IdempotencyShape = {
      claim: (scope, key, bodyHash, session) => decide(scope, key, bodyHash, true, session),
      reserve: (scope, key, bodyHash) => decide(scope, key, bodyHash, false),
      complete: Effect.fnUntraced(function*(scope: string, key: string, answer: Answer, completeOptions?: CompleteOptions) {
        const refused = log.refused()
        if (refused) return yield* Effect.fail(refused)
        const now = clock.unsafeCurrentTimeMillis()
        const id = idOf(scope, key)
        const entry = index.entries.get(id)
        // The first answer stands; an answer for a key never claimed (or already dropped) has no
        // body hash to be replayed against and is not kept.
        if (!entry || entry.adopted || (entry.state !== "running" && entry.state !== "reserved")) return
        if (entry.state === "reserved") {
          // Reserved, so not yet kept: at the bound it goes, and nothing is written.
          const owner = sessionOfScope(scope)
          if (completeOptions?.beyondBound !== true) {
            if (!index.hasRoom(now, 0)) {
              index.drop(id, entry)
              return yield* refuseFull(now)
            }
            if (owner !== undefined && !index.hasSessionRoom(now, owner)) {
              index.drop(id, entry)
              return yield* refuseSessionFull(now, owner)
            }
          }
          // Kept from here: its session's share counts it (past the share, for an outcome kept beyond the bound).
          if (owner !== undefined) index.own(id, entry, owner)
          // Its claim goes first, then the answer (a crash between them leaves the key
          // ambiguous, the cautious reading).
          yield* writeClaim(id, scope, key, entry)
        }
        yield* writeAnswer(id, scope, key, entry, answer, now)
      }),
      adopt: (keys) =>
        Effect.suspend((): Effect.Effect<void, IdempotencyError> => {
          const refused = log.refused()
          if (refused) return Effect.fail(refused)
          const now = clock.unsafeCurrentTimeMillis()
          const writes = adoptions(keys, now)
          return writes === undefined ? refuseFull(now) : Effect.all(writes, { concurrency: ADOPT_CONCURRENCY, discard: true })
        }),
      release: Effect.fnUntraced(function*(scope: string, key: string) {
        const refused = log.refused()
        if (refused) return yield* Effect.fail(refused)
        const now = clock.unsafeCurrentTimeMillis()
        const id = idOf(scope, key)
        const entry = index.entries.get(id)
        if (entry?.adopted) return // a deleted session's key, handed over: not the releaser's
        if (entry?.state === "reserved") return index.drop(id, entry) // never written: forgotten at once
        if (!entry || entry.state !== "running") return
        // In flight until durable: concurrent claims wait it out, an answer is not taken.
        entry.state = "releasing"
        yield* log.append({ kind: releaseKind, json: releaseJson(scope, key, now), atMs: now }, () => index.drop(id, entry)).pipe(
          Effect.tapError(() => Effect.sync(() => index.drop(id, entry)))
        )
      }),
      compact: Effect.gen(function*() {
        const refused = log.refused()
        if (refused) return yield* Effect.fail(refused)
        const dropped = index.sweep(clock.unsafeCurrentTimeMillis())
        const dead = log.size - index.liveBytes
        if (dead > 0 && dead >= limits.rewriteDeadBytes && dead >= index.liveBytes) yield* log.rewrite(() => index.live())
        return dropped
      }).pipe(Effect.withSpan("Idempotency.compact"))
    }
    return store
  })

/**
 * The interval of the layer's background compaction: retention / 4, within
 * IDEMPOTENCY_COMPACT_MIN_INTERVAL_MS and Node's timer maximum (a longer sleep never fires, and
 * compaction would stop for a retention above about 99 days).
 */
export const compactInterval = (options: IdempotencyFileOptions) =>
  options.compactEveryMs ??
    Math.min(TIMER_SETTING_MAX_MS, Math.max(IDEMPOTENCY_COMPACT_MIN_INTERVAL_MS, Math.floor(options.retentionMs / 4)))

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
              store.compact.pipe(Effect.catchAll((e) => Effect.logWarning(`idempotency compaction failed: ${e.message}`)))
            ),
            Effect.forever
          )
        )
        : Effect.void)
  )

/** The file store on Node's file system: the embedded default. */
export const layerNode = (options: IdempotencyFileOptions) =>
  layer(options).pipe(Layer.provide(Layer.succeed(FileDriver, nodeDriver)))
