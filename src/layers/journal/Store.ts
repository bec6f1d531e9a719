/**
 * A journal store: where a journal's records are kept, and nothing else. The journal core
 * (Core.ts) does everything a store does not: validation, sequencing, group commit, the recent
 * tails, subscribers, sticky failures and which sessions are open. A store keeps and syncs
 * records it is handed with their sequences already assigned, reads them back, and reports the
 * end of what it holds; so a new place to keep journals (memory, files, later a database) is a
 * store of a few hundred lines, and every store runs the same journal contract suite.
 *
 * The rules a store keeps:
 * - `commit` makes a round durable per session before calling `onDone` for it: an item's records
 *   are written all or none as one atomic append per `atomic` group (the file store's frames say
 *   which records belong together, so recovery drops an incomplete group). `onDone` is called
 *   exactly once per item, with the reason when that item failed; one item's failure never
 *   affects another's. The round itself never fails.
 * - An item reported failed leaves nothing that a later `open`, `read` or start would take as
 *   committed: what landed of it is taken back before `onDone` is called. When the store cannot
 *   make sure of that, it says so (`onDone`'s `unknown`): the failure's records may stand, and a
 *   later open reads them as committed. No failure is reported before it is one or the other.
 * - `open` returns only committed records' end: a torn final write is repaired (dropped and the
 *   store synced) before anything is returned; damage anywhere else is `JournalCorrupt`.
 * - A lack of something the store gets back (the file store's descriptors: EMFILE, ENFILE), or a
 *   read its files refuse (EACCES, EPERM, EIO), is `JournalUnavailable`, never corruption nor an
 *   answer that leaves something out: nothing is known damaged, and the same call succeeds later. `list` fails rather than list fewer sessions.
 * - Between `commit` rounds nothing of a session changes but through `remove` (and `sweep`, which
 *   removes only what holds no record).
 * - Debris: a journal that holds no record when this process did not create it is what a crash
 *   left of a creation (every creator writes a record once its create returns, and nobody is given
 *   a session's id before that record is durable). Over a store with `sweep`, the core treats it
 *   as absent and removes it when an open meets it; never at startup, which reads no session.
 * - Ownership: a store that several journal cores (owners) can share has `claim`. A core claims a
 *   session once, before its first append to it (its open: reads, recovery); each claim takes a
 *   new generation, and `commit` (and `remove`) refuses an item whose `generation` is not the
 *   session's latest claim, writing nothing of it. So once another owner has claimed a session,
 *   nothing the old owner still had in flight can land after what the new one recovered. A store
 *   that only one owner can ever reach has no `claim`: the file store's owner is the process
 *   holding the data directory's lock (DataDir.ts), which no second process can hold while it lives.
 */
import type { Effect } from "effect"
import type { SessionId } from "../../domain/Ids.js"
import type { JournalRecord } from "../../domain/Records.js"
import type {
  JournalCorrupt,
  JournalListError,
  JournalUnavailable,
  JournalWriteFailed,
  RecordRejected,
  SessionAlreadyExists,
  SessionNotFound,
  StoredSegment
} from "../../services/Journal.js"
import type { Prepared } from "./Encode.js"
import type { RecentRecord } from "./Tail.js"

export interface Opened<S> {
  /** The store's own per-session state, handed back on every later call for this session. */
  readonly state: S
  readonly lastSequence: number
  readonly lastRecordedAtMs: number
  /** The newest records it read while opening (oldest first), to seed the recent tail; may be empty. */
  readonly recent: ReadonlyArray<RecentRecord>
}

/** One record of a round, its sequence assigned. `continues`: the next record belongs to the same atomic append. */
export interface StoredRecord {
  readonly sequence: number
  readonly prepared: Prepared
  readonly continues: boolean
  /** Its own time, when it was staged before the round (never after the item's time); otherwise the item's. */
  readonly recordedAtMs?: number
}

export interface CommitItem<S> {
  readonly session: SessionId
  readonly state: S
  /** The committing owner's claim on the session (stores with `claim`). */
  readonly generation: number | undefined
  readonly recordedAtMs: number
  readonly records: ReadonlyArray<StoredRecord>
}

export interface JournalStore<S> {
  readonly create: (session: SessionId) => Effect.Effect<void, SessionAlreadyExists | JournalWriteFailed | JournalUnavailable | RecordRejected>
  readonly exists: (session: SessionId) => Effect.Effect<boolean>
  readonly list: Effect.Effect<ReadonlyArray<SessionId>, JournalListError>
  /** Whether `list` names a session of this id (the file store lists only well-formed ids); all when omitted. */
  readonly listable?: (session: SessionId) => boolean
  readonly open: (session: SessionId) => Effect.Effect<Opened<S>, SessionNotFound | JournalCorrupt | JournalUnavailable>
  /**
   * Makes the caller the session's owner: a generation above every earlier claim, which its
   * commits then carry. Only on stores several owners can share (see the module's rules).
   */
  readonly claim?: (session: SessionId) => Effect.Effect<number, SessionNotFound>
  /**
   * One group-commit round; see the module's rules. `unknown`, with a failure only: what landed of
   * the item could not be taken back, so its records may stand.
   */
  readonly commit: (
    items: ReadonlyArray<CommitItem<S>>,
    onDone: (index: number, failure: string | undefined, unknown?: boolean) => void
  ) => Effect.Effect<void>
  /**
   * The same round, started now on callbacks when the store can (optional): its writes are
   * submitted in this synchronous step and `undefined` is answered; `onEnd` is called once, after
   * every item's `onDone`, with what is left of the round to run as an effect before the next
   * round (a failed write taken back, descriptors closed), or undefined when nothing is. When it
   * cannot start so (a file to open, a log to switch, a driver of its own), nothing is started and
   * the round is answered as an effect, to be run as `commit`'s would be; `onEnd` is not called.
   * The journal's writer so starts a round without a fiber's wake-up and answers its appenders
   * from the last write's callback (Writer.ts).
   */
  readonly commitNow?: (
    items: ReadonlyArray<CommitItem<S>>,
    onDone: (index: number, failure: string | undefined, unknown?: boolean) => void,
    onEnd: (rest: Effect.Effect<void> | undefined) => void
  ) => Effect.Effect<void> | undefined
  /** Committed records after `after` and up to `last`, in order (`maxBytes` as Journal.read). */
  readonly read: (
    state: S,
    after: number,
    last: number,
    limit: number,
    maxBytes: number | undefined
  ) => Effect.Effect<Array<JournalRecord>, SessionNotFound | JournalCorrupt | JournalUnavailable>
  /**
   * Deletes a session for good. `state` is its open state, if it was open (its appends are
   * refused by then); the store lets go of what it holds for it first.
   */
  readonly remove: (
    session: SessionId,
    state: S | undefined,
    /** The deleting owner's claim (stores with `claim`): refused, nothing removed, when another owner's overtook it. */
    generation: number | undefined
  ) => Effect.Effect<void, SessionNotFound | JournalWriteFailed>
  /**
   * About the heap the store keeps for an open session (its segments' names and sizes, its read
   * index), for the core's bound on opened journals (Core.ts, `maxHandleBytes`); none when omitted.
   */
  readonly weight?: (state: S) => number
  /** The bytes of the session's committed frames. */
  readonly size: (state: S) => number
  /**
   * A session's journal segments as stored, each with its bytes, read from its files' names and
   * sizes without opening it (a torn final write included); undefined when they cannot be told so
   * (then the session is opened).
   */
  readonly storedBytes?: (session: SessionId) => Effect.Effect<ReadonlyArray<StoredSegment> | undefined>
  /** About the bytes a read of the one record after `after` goes through (an upper bound, Journal.readBytes), told from memory. */
  readonly readBytes?: (state: S, after: number) => number
  /** The segments of an open session's journal, each with its committed bytes (stores that keep segments). */
  readonly segments?: (state: S) => ReadonlyArray<StoredSegment>
  /**
   * Removes what a crash left of a session that holds no record, and answers whether the session
   * is now absent: the file store's creation cut off before its first record was written (a
   * session directory without a journal, a journal without a segment, or with empty segments
   * only). Anything else (a record, a file it does not know) keeps the directory as it is, and the
   * answer is false. The core asks only about a session no request of this process is creating,
   * and holds every other access to it meanwhile (Core.ts); stores a crash leaves no such debris
   * in (memory) have none.
   */
  readonly sweep?: (session: SessionId) => Effect.Effect<boolean>
  /**
   * Whether the session's stored journal is such debris, told from its directory listings and file
   * sizes without opening it (`sweep`'s check, removing nothing): for `exists`, which opens nothing.
   */
  readonly isDebris?: (session: SessionId) => Effect.Effect<boolean>
  /** Lets go of what the store holds for a session dropped from memory (descriptors); never under a round in flight. */
  readonly release: (state: S) => Effect.Effect<void>
  /** After the last round: lets go of everything. */
  readonly close: Effect.Effect<void>
}
