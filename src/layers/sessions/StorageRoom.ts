/**
 * Room on disk for what sessions write: one session's journal across its turns
 * (BRAIN_MAX_SESSION_JOURNAL_BYTES) and the data directory's free bytes (BRAIN_MIN_FREE_DISK_BYTES).
 *
 * A turn's own writes are bounded (BRAIN_MAX_TURN_WRITE_BYTES), but not their sum over a session's
 * turns: a session re-putting one 1 MiB kv value, turn after turn, wrote 2.5 GB in 35 s, and a full
 * disk fails every session's writes, not the one that filled it. So:
 *
 * - a session whose journal (Journal `size`: its frames on disk, read from its segments when it is
 *   opened, so a restart measures the same) has reached its bound starts no turn: a send or submit
 *   is refused 409 `conflict`, `details.reason: "session_journal_limit"`, nothing written. A turn
 *   that started below it has its host calls' writes refused as past its own bound when they would
 *   take the journal past it (TurnWrites.ts `writeRefusal`). What ends a session or a turn is never
 *   refused (a turn's closing records, an effect's outcome, a cancel's, an end's and its
 *   teardowns'): the bound is passed by them, and by the opening of the turn that reached it;
 * - below the free-disk watermark no session is created and no turn started: 503 `overloaded`,
 *   retryable, nothing written. The free bytes are read (Journal `freeBytes`, statfs) at most once
 *   per DISK_STAT_INTERVAL_MS, shared by the requests in between. Turns already running are not
 *   stopped: their own bounds hold them, and what they write is what the watermark keeps room for.
 */
import { Deferred, Effect, Exit, FiberId } from "effect"
import { Conflict, Overloaded } from "../../domain/Errors.js"
import { DISK_STAT_INTERVAL_MS } from "../../domain/Limits.js"
import type { JournalReadError, JournalShape } from "../../services/Journal.js"
import type { ServerConfigShape } from "../../services/ServerConfig.js"
import type { Cell } from "./Cell.js"
import { fromJournal, type FromJournal } from "./FromJournal.js"

/** The refusal of a turn to a session whose journal of `journalBytes` has reached BRAIN_MAX_SESSION_JOURNAL_BYTES; undefined below it. */
export const journalFull = (config: Pick<ServerConfigShape, "maxSessionJournalBytes">, journalBytes: number): Conflict | undefined => {
  const limit = config.maxSessionJournalBytes
  if (limit <= 0 || journalBytes < limit) return undefined
  return new Conflict({
    message:
      `this session's journal holds ${journalBytes} bytes, at or past BRAIN_MAX_SESSION_JOURNAL_BYTES (${limit}): it starts no more turns; end it (an end is always written) and start a new session`,
    details: { reason: "session_journal_limit", setting: "BRAIN_MAX_SESSION_JOURNAL_BYTES", limit, journal_bytes: journalBytes }
  })
}

/** The refusal of new work when the file system holds `free` bytes, below BRAIN_MIN_FREE_DISK_BYTES; undefined when not below it. */
export const diskLow = (config: Pick<ServerConfigShape, "minFreeDiskBytes">, free: number | undefined): Overloaded | undefined => {
  const min = config.minFreeDiskBytes
  if (min <= 0 || free === undefined || free >= min) return undefined
  return new Overloaded({
    message:
      `the data directory's file system has ${free} bytes free, below BRAIN_MIN_FREE_DISK_BYTES (${min}): no session is created and no turn started until room is made; turns already running go on`,
    details: { setting: "BRAIN_MIN_FREE_DISK_BYTES", limit: min, free_bytes: free }
  })
}

export interface StorageRoom {
  /**
   * Whether `cell` may start a turn: refused when its journal has reached its bound, or when the
   * disk is below the watermark; else the bytes its journal holds now (a running turn's writes are
   * weighed against the bound from them), undefined when the journal is not bounded.
   */
  readonly forTurn: (cell: Cell) => Effect.Effect<number | undefined, Conflict | Overloaded | FromJournal<JournalReadError>>
  /** Refused below the free-disk watermark: for a create, before anything is written. */
  readonly forCreate: Effect.Effect<void, Overloaded>
}

export const makeStorageRoom = (journal: JournalShape, config: ServerConfigShape): Effect.Effect<StorageRoom> =>
  Effect.gen(function*() {
    const freeBytes = journal.freeBytes
    const clock = yield* Effect.clock
    const verdict = (free: number | undefined): Effect.Effect<void, Overloaded> => {
      const low = diskLow(config, free)
      return low === undefined ? Effect.void : Effect.fail(low)
    }
    // One reading serves every request for DISK_STAT_INTERVAL_MS from when it was taken, and the
    // requests arriving while it is taken wait for it. Kept by hand, not with Effect.cachedWithTTL:
    // its lock cost each send about 85 of the runtime's instructions (scripts/bench/effectOps.js),
    // where a fresh reading here is a clock read and a comparison.
    let reading: { readonly free: number | undefined; readonly at: number } | undefined
    let taking: Deferred.Deferred<number | undefined> | undefined
    const take = (statfs: Effect.Effect<number | undefined>): Effect.Effect<number | undefined> =>
      Effect.suspend(() => {
        if (taking !== undefined) return Deferred.await(taking)
        const taken = Deferred.unsafeMake<number | undefined>(FiberId.none)
        taking = taken
        // On its own fiber: a request interrupted while it waits leaves the reading to the others.
        const read = Effect.flatMap(Effect.exit(statfs), (exit) => {
          if (Exit.isSuccess(exit)) reading = { free: exit.value, at: clock.unsafeCurrentTimeMillis() }
          taking = undefined
          return Deferred.done(taken, exit)
        })
        return Effect.zipRight(Effect.forkDaemon(read), Deferred.await(taken))
      })
    const disk: Effect.Effect<void, Overloaded> = config.minFreeDiskBytes <= 0 || freeBytes === undefined
      ? Effect.void
      : Effect.suspend(() =>
        reading !== undefined && clock.unsafeCurrentTimeMillis() - reading.at <= DISK_STAT_INTERVAL_MS
          ? verdict(reading.free)
          : Effect.flatMap(take(freeBytes), verdict)
      )
    // The session's own bound first: it lasts, where the disk's may pass.
    const forTurn = (cell: Cell): Effect.Effect<number | undefined, Conflict | Overloaded | FromJournal<JournalReadError>> =>
      config.maxSessionJournalBytes <= 0
        ? Effect.as(disk, undefined)
        : Effect.flatMap(Effect.mapError(journal.size(cell.session), (e) => fromJournal(e)), (bytes): Effect.Effect<number, Conflict | Overloaded> => {
          const full = journalFull(config, bytes)
          return full === undefined ? Effect.as(disk, bytes) : Effect.fail(full)
        })
    return { forTurn, forCreate: disk }
  })
