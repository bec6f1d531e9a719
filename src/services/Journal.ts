/**
 * Journal: one append-only, durable, densely sequenced log per session.
 *
 * An append resolves only when its records are durable (on disk: written and fdatasync'd);
 * reads and subscribers see only durable records. Several records appended together get
 * consecutive sequences and become durable all or none.
 */
import { Context, Data, type Effect, type Exit, type Scope, type Stream } from "effect"
import type { Entry, JournalRecord } from "../domain/Records.js"
import type { SessionId } from "../domain/Ids.js"

/** Latency lane: effect fences and state writes. Background: informational writes. */
export type Lane = "latency" | "background"

export class SessionNotFound extends Data.TaggedError("SessionNotFound")<{
  readonly session: string
}> {
  override get message() {
    return `session ${this.session} has no journal`
  }
}

export class SessionAlreadyExists extends Data.TaggedError("SessionAlreadyExists")<{
  readonly session: string
}> {
  override get message() {
    return `session ${this.session} already has a journal`
  }
}

/** A complete frame failed a check, or a non-final segment is incomplete: the session is refused. */
export class JournalCorrupt extends Data.TaggedError("JournalCorrupt")<{
  readonly session: string
  /** The damaged file, relative to the store's root (the data directory for the file journal). */
  readonly file: string
  readonly offset: number
  readonly reason: string
}> {
  override get message() {
    return `journal of ${this.session} is corrupt at ${this.file} offset ${this.offset}: ${this.reason}`
  }

  /** Where the damage is, as a refusal's `details` carries it (docs/api.md). */
  get details(): { readonly file: string; readonly offset: number; readonly reason: string } {
    return { file: this.file, offset: this.offset, reason: this.reason }
  }
}

/**
 * A write or sync failed. Sticky: the session's journal refuses every later append rather than
 * continue past a hole. What landed of the failed append is taken back before it is reported, so
 * its records never read as committed later; when that cannot be done, the session's durable end
 * is refused (`lastSequence`) until `reset`, and what is stored then stands.
 */
export class JournalWriteFailed extends Data.TaggedError("JournalWriteFailed")<{
  readonly session: string
  readonly reason: string
}> {
  override get message() {
    return `journal of ${this.session} refuses appends after a failed write: ${this.reason}`
  }
}

/**
 * The store cannot serve this now for want of something it gets back: open-file descriptors, at
 * the process's or the system's limit (EMFILE, ENFILE). Nothing is damaged and nothing was written;
 * the same call can succeed once descriptors are given back. Never sticky.
 *
 * `unreadable`: the file system refuses to read the journal's files (EACCES, EPERM: their owner or
 * mode; EIO: the disk). Not damage found in the journal, which is never judged on a read that did
 * not happen: nothing was written, and the same call succeeds once the files can be read.
 *
 * `outcome_unknown`: a session's durable end, asked (`lastSequence`) after a failed write whose
 * records may stand all the same (the store could not take back what landed of it): it is known
 * again once the session is reset and opened from what is stored.
 */
export class JournalUnavailable extends Data.TaggedError("JournalUnavailable")<{
  /** The session whose journal was being reached; undefined for the list of sessions. */
  readonly session: string | undefined
  readonly reason: string
  readonly why?: "descriptors" | "outcome_unknown" | "unreadable"
}> {
  override get message() {
    const what = this.session === undefined ? "the sessions directory" : `the journal of ${this.session}`
    if (this.why === "outcome_unknown") {
      return `${what} cannot say its durable end now: ${this.reason}; it is known again once the session is opened again from what is stored`
    }
    if (this.why === "unreadable") {
      return `${what} cannot be read now: ${this.reason}; this is not damage found in it: the file system refused the read (the files' owner or mode, or the disk), and it is read again at the next access`
    }
    return `${what} cannot be reached now: ${this.reason} (the open-file limit is reached); nothing is damaged, try again shortly`
  }
}

/** The list of sessions cannot be read (its directory refuses: EACCES, EIO), for a reason that is not a lack of descriptors. */
export class JournalListFailed extends Data.TaggedError("JournalListFailed")<{
  readonly reason: string
}> {
  override get message() {
    return `the sessions directory cannot be listed: ${this.reason}`
  }
}

/**
 * Bad input: unknown kind, payload that does not match its schema, not JSON, or too large; or a
 * session id to create that is not one (a store builds no path from it).
 */
export class RecordRejected extends Data.TaggedError("RecordRejected")<{
  readonly reason: string
  /** The kind of the record refused, when one record was (its payload, its size). */
  readonly kind?: string
}> {
  override get message() {
    return this.reason
  }
}

/** A subscriber fell too far behind the committed feed; resume by reading from its cursor. */
export class SubscriberLagged extends Data.TaggedError("SubscriberLagged")<{
  readonly session: string
  readonly after: number
}> {
  override get message() {
    return `subscriber of ${this.session} lagged behind sequence ${this.after}; resume by cursor`
  }
}

export type JournalReadError = SessionNotFound | JournalCorrupt | JournalUnavailable
export type JournalAppendError = SessionNotFound | JournalCorrupt | JournalUnavailable | JournalWriteFailed | RecordRejected
/** Why the sessions cannot be listed: never an empty list instead. */
export type JournalListError = JournalUnavailable | JournalListFailed

export interface ReadOptions {
  /** Records with a sequence greater than this (0 reads from the start). */
  readonly after: number
  /** At most this many records. */
  readonly limit: number
  /** Stop before passing about this many frame bytes; the first record always comes. */
  readonly maxBytes?: number
}

/**
 * What `stage` did: staged the records (not durable yet; here as they will be read once they
 * are), or, with appends in flight for the session, appended them (durable).
 */
export type Staged =
  | { readonly _tag: "Staged"; readonly records: ReadonlyArray<JournalRecord> }
  | { readonly _tag: "Appended"; readonly sequences: ReadonlyArray<number> }

/** A journal segment as stored: the sequence its first record has (or would have) and its bytes. */
export interface StoredSegment {
  readonly firstSequence: number
  readonly bytes: number
}

/** What `stored` tells of a session's journal without reading a record. */
export interface StoredJournal {
  readonly bytes: number
  readonly open: boolean
  readonly segments?: ReadonlyArray<StoredSegment>
}

/** `Journal.enqueue`'s options. */
export interface EnqueueOptions {
  readonly lane?: Lane
  /** Told the records' sequences once they are given and their writes submitted, before `done` (see `enqueue`). */
  readonly sequenced?: (sequences: ReadonlyArray<number>) => void
}

export interface JournalShape {
  /**
   * Creates an empty journal for a new session; durable (directories synced) when it resolves. An
   * id that is not a session id (`isSessionId`) is refused `RecordRejected`, and every other call
   * takes it as a session with no journal: the file store builds no path from it.
   */
  readonly create: (session: SessionId) => Effect.Effect<void, SessionAlreadyExists | JournalWriteFailed | JournalUnavailable | RecordRejected>
  /** Whether a journal exists for this session, without opening it. */
  readonly exists: (session: SessionId) => Effect.Effect<boolean>
  /** Every session that has a journal (a directory listing; opens nothing). A listing that fails fails: it is never shorter. */
  readonly list: Effect.Effect<ReadonlyArray<SessionId>, JournalListError>
  /**
   * Up to `limit` of the sessions `list` answers, those whose id is greater than `after` (all when
   * undefined), in ascending order of id: a page of them, at about the cost of the page once the
   * journal holds them in order (journal/Listing.ts). Optional: without it, `list` and sort.
   */
  readonly listPage?: (after: SessionId | undefined, limit: number) => Effect.Effect<ReadonlyArray<SessionId>, JournalListError>
  /**
   * Appends records atomically and in order; resolves with their sequences once durable.
   * Bad input is refused before anything is written.
   */
  readonly append: (
    session: SessionId,
    entries: ReadonlyArray<Entry>,
    options?: { readonly lane?: Lane }
  ) => Effect.Effect<ReadonlyArray<number>, JournalAppendError>
  /**
   * `append` without an effect, where the journal can: queues the records in this synchronous
   * step and calls `done` exactly once with what `append` would have answered. Answers false,
   * having queued nothing and called nothing, when it cannot queue at once (the session not open
   * in memory, the queue full, a journal that does not offer it): the caller then runs `append`.
   * Called as a method: a journal that decorates another's `append` (a copy of it with its own
   * `append`) answers false unless it offers its own `enqueue`, so its `append` sees every append.
   * For the appends that must go on whatever happens to their caller (an effect's outcome, a
   * turn's close: EffectFenceJournal's `appendWithin`), which otherwise take a fiber of their own.
   *
   * `sequenced`, when given, is told the records' sequences once a round has given them and
   * submitted their writes, before `done`: the sequences `done` answers if the append succeeds.
   * Nothing is durable then, and the append may still fail: what a caller makes of them is
   * provisional until `done` succeeds (a turn's close folds its records ahead, Cell.ts
   * `commitQueueable`). Called at most once, and never after `done`; not at all for an append
   * refused before a round took it.
   */
  readonly enqueue?: (
    session: SessionId,
    entries: ReadonlyArray<Entry>,
    done: (exit: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void,
    options?: EnqueueOptions
  ) => boolean
  /**
   * Gives records their sequences and time now, and writes them with the session's next append:
   * ahead of its records, in the same atomic write, durable with it or not at all. Until then no
   * read, `lastSequence` or subscriber sees them, and the session is kept open in memory. For
   * records that promise nothing until what follows them is written: a sync send's turn opening
   * rides on the turn's first effect. Records staged while others are (and no append is in
   * flight) join them, after them. When the session has appends in flight they are appended
   * instead, and this resolves once they are durable. Bad input is refused as `append` refuses
   * it; `reset` and `remove` drop what is staged.
   */
  readonly stage: (session: SessionId, entries: ReadonlyArray<Entry>) => Effect.Effect<Staged, JournalAppendError>
  /**
   * `stage` without an effect, where the journal can stage at once: the staged records, as `stage`
   * answers them. Undefined, having done nothing, in every other case (the session not open in
   * memory, an append in flight, bad input, a broken session, a journal that does not offer it,
   * or one decorating another's `stage`): the caller then runs `stage`, which answers for it. For
   * the save riding on a loop's host call, which every text turn makes (docs/abi.md, "A save that
   * rides on a call").
   */
  readonly stageNow?: (session: SessionId, entries: ReadonlyArray<Entry>) => ReadonlyArray<JournalRecord> | undefined
  /**
   * Writes what is staged on the session on its own (one atomic append of the staged records),
   * and resolves once it is durable; with nothing staged (or already written) it writes nothing.
   * For staged records that must not wait longer for the append they were to ride on.
   */
  readonly flush: (session: SessionId) => Effect.Effect<void, JournalAppendError>
  /** Durable records after `after`, in order. */
  readonly read: (session: SessionId, options: ReadOptions) => Effect.Effect<ReadonlyArray<JournalRecord>, JournalReadError>
  /**
   * Removes a session's journal and directory for good (session delete). Appends still queued for
   * it fail; later accesses are SessionNotFound.
   */
  readonly remove: (session: SessionId) => Effect.Effect<void, SessionNotFound | JournalWriteFailed>
  /**
   * After a write failure: drops the session's journal from memory so that its next access opens
   * it again from what is really stored (re-validated, a torn final write truncated), and appends
   * can resume. Until then the failure is sticky. A healthy journal is left as it is, but for
   * records staged and not yet written, which are dropped either way. The caller
   * must know that nothing still appends on behalf of what was in flight when the write failed.
   */
  readonly reset: (session: SessionId) => Effect.Effect<void>
  /**
   * The bytes of the session's durable journal as the store keeps them (its frames): it grows by
   * each append's frames. What a later open of the session has to read past a point is the
   * difference between two answers.
   */
  readonly size: (session: SessionId) => Effect.Effect<number, JournalReadError>
  /**
   * What opening the session's journal would read now, told without reading a record: the bytes
   * of its journal, whether it is open in memory already (then its next access reads none of
   * them to open it), and, where the store keeps its journal in segments, each segment's first
   * sequence and bytes (in order; from the files' names and sizes), so that what a read after a
   * sequence reaches can be told too. For weighing a session's open before it is admitted
   * (BRAIN_WORKING_MEMORY_BYTES).
   */
  readonly stored?: (session: SessionId) => Effect.Effect<StoredJournal, JournalReadError>
  /**
   * About the bytes a read of the one record after `after` goes through (an upper bound: from the
   * read index's entry at or before it to the next), told from what is kept in memory of the open
   * journal, without reading. For weighing a read of one stored record (BRAIN_WORKING_MEMORY_BYTES).
   */
  readonly readBytes?: (session: SessionId, after: number) => Effect.Effect<number, JournalReadError>
  /**
   * The bytes the store's file system has free for it now (statfs: the blocks an unprivileged
   * writer may still take), read anew at each run; undefined when it cannot tell. Absent for a
   * store that takes no disk (the memory journal). For the free-disk watermark
   * (BRAIN_MIN_FREE_DISK_BYTES, sessions/StorageRoom.ts), which reads it at most once a second.
   */
  readonly freeBytes?: Effect.Effect<number | undefined>
  /**
   * The last durable sequence (0 for an empty journal). Refused (`JournalUnavailable`,
   * `outcome_unknown`) after a failed write whose records may stand, until `reset`.
   */
  readonly lastSequence: (session: SessionId) => Effect.Effect<number, JournalReadError>
  /**
   * Records committed from now on, as they become durable. The subscription is registered when
   * this effect completes, so a reader can subscribe, then read history, then follow without gaps.
   * A subscriber that falls behind by SUBSCRIBER_BACKLOG_RECORDS fails with SubscriberLagged.
   */
  readonly subscribe: (
    session: SessionId
  ) => Effect.Effect<Stream.Stream<JournalRecord, SubscriberLagged>, JournalReadError, Scope.Scope>
}

export class Journal extends Context.Tag("brain/Journal")<Journal, JournalShape>() {}
