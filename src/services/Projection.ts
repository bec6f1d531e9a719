/**
 * Projection: a session's folded state, from a checkpoint plus the journal tail when the
 * checkpoint still matches the journal, otherwise from the whole journal.
 */
import { Context, Data, type Effect, type Option } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { SessionState } from "../domain/Projection.js"
import type { JournalReadError, JournalUnavailable } from "./Journal.js"

export interface Projected {
  readonly state: SessionState
  /**
   * Where the fold started: a state this process folded recently ("memory"), a checkpoint (then
   * only the tail was read) or the journal's start.
   */
  readonly source: "memory" | "checkpoint" | "journal"
  /** How many records were folded to reach the state. */
  readonly folded: number
}

export class CheckpointWriteFailed extends Data.TaggedError("CheckpointWriteFailed")<{
  readonly session: string
  readonly reason: string
}> {}

export interface ProjectionShape {
  /** The state as of the journal's last durable record. */
  readonly state: (session: SessionId) => Effect.Effect<Projected, JournalReadError>
  /**
   * Keeps a state folded by this process (a released actor's) in a bounded in-memory cache, so the
   * next open folds only what came after it. A cache, never a source of truth: the journal's tail
   * is always read.
   */
  readonly remember: (session: SessionId, state: SessionState) => Effect.Effect<void>
  /**
   * The state `remember` keeps of the session, if it keeps one: without a read, so it may be
   * behind the journal. For a look that the journal's state then confirms (a keyed request's key).
   */
  readonly cached?: (session: SessionId) => SessionState | undefined
  /** Drops a session's cached state (session delete). */
  readonly forget: (session: SessionId) => Effect.Effect<void>
  /**
   * About the bytes `state` would hold at once, told without reading a record (from file names and
   * sizes): for a state not in memory, the checkpoint and the journal segments that may hold
   * records after the sequence it covers (the whole journal without one); for a journal that must
   * be opened (validated a segment at a time), its largest segment; nothing for a state in memory
   * over a journal already open. The larger of what opening the journal holds and what the fold
   * holds, for these come one after the other. For the working-memory admission
   * (BRAIN_WORKING_MEMORY_BYTES).
   */
  readonly openBytes?: (session: SessionId) => Effect.Effect<number>
  /**
   * Writes a checkpoint of this state (taken at a quiet point); atomic, never required. Answers the
   * checkpoint's bytes, or undefined when none was written (no record covers the state) or the
   * projection cannot say.
   */
  readonly checkpoint: (session: SessionId, state: SessionState) => Effect.Effect<number | undefined, JournalReadError | CheckpointWriteFailed>
}

export class Projection extends Context.Tag("brain/Projection")<Projection, ProjectionShape>() {}

/**
 * A checkpoint's bytes as they are made, never whole in one string (a state can be larger than
 * the largest): `rest` is computed as it is iterated, and `head`, `headBytes` long, is known only
 * once `rest` has been iterated to its end (the checksum of it); the file holds `head` then `rest`.
 * Iterating `rest` may throw (a bug, or memory): the save then fails.
 */
export interface CheckpointPieces {
  readonly headBytes: number
  readonly rest: Iterable<Uint8Array>
  readonly head: () => Uint8Array
}

/** Where checkpoints are kept: opaque bytes per session. */
export interface CheckpointStoreShape {
  /** The session's checkpoint, none when there is none or it cannot be read; `JournalUnavailable` when it cannot be read now (out of descriptors). */
  readonly load: (session: SessionId) => Effect.Effect<Option.Option<Uint8Array>, JournalUnavailable>
  /** Replaces the session's checkpoint with these bytes, atomically (the old one or the new one, never a mix). */
  readonly save: (session: SessionId, pieces: CheckpointPieces) => Effect.Effect<void, CheckpointWriteFailed>
  /** The bytes of the session's checkpoint, told without reading it (0: none); optional: without it, `load` is weighed as the journal. */
  readonly size?: (session: SessionId) => Effect.Effect<number>
  /**
   * The sequence the session's checkpoint says it covers, read from its first bytes alone
   * (undefined: none, or its start does not say); optional: without it, an open with a
   * checkpoint is weighed as reading the whole journal after it.
   */
  readonly through?: (session: SessionId) => Effect.Effect<number | undefined>
}

export class CheckpointStore extends Context.Tag("brain/CheckpointStore")<CheckpointStore, CheckpointStoreShape>() {}
