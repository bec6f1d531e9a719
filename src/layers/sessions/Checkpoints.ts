/**
 * When a released session cell writes a checkpoint of its folded state (Registry.ts calls
 * `checkpointDue` as it releases one), and when a cell kept warm writes one in the background after
 * a turn (`warmCheckpointDue`): the bounds, in records and in journal bytes, that grow with the
 * state so that checkpoints cost at most a constant per record and byte folded.
 */

/** Records folded since the last checkpoint before a released cell writes a new one, at least. */
export const CHECKPOINT_EVERY_RECORDS = 256

/**
 * Bytes of folded state a checkpoint may encode per record folded since the previous one: a
 * session whose state is larger waits for more records (`checkpointDue`).
 */
export const CHECKPOINT_BYTES_PER_RECORD = 256

/**
 * Journal bytes folded since the last checkpoint before a released cell writes a new one, at
 * least (the records' floor, counting each record at CHECKPOINT_BYTES_PER_RECORD bytes).
 */
export const CHECKPOINT_EVERY_BYTES = CHECKPOINT_EVERY_RECORDS * CHECKPOINT_BYTES_PER_RECORD

/** What was folded into a session's state since its last checkpoint: records, and their journal bytes. */
export interface FoldedSince {
  readonly records: number
  readonly bytes: number
}

/**
 * Whether a released cell writes a checkpoint: once as many records or as many journal bytes were
 * folded since the last one as the state would take to encode. By records: CHECKPOINT_EVERY_RECORDS
 * at least, and at least one per CHECKPOINT_BYTES_PER_RECORD bytes of the state. By bytes:
 * CHECKPOINT_EVERY_BYTES at least, and at least the state's bytes. A checkpoint encodes the whole
 * state, so at a fixed interval a long conversation paid for its whole transcript again every few
 * dozen turns: quadratic over its life, about a tenth of a long session's main-thread time
 * (docs/benchmarks.md, "Long conversations"). With the interval growing with the state, the
 * bytes encoded stay at most CHECKPOINT_BYTES_PER_RECORD per record folded plus one per journal
 * byte folded, and an open folds after the checkpoint at most about as many bytes of journal as
 * the checkpoint holds. Records count alone missed sessions of large records (MiB messages or kv
 * values): thousands of records of them are a journal many times the state, and such a session
 * was folded from its start on every access. Records of CHECKPOINT_BYTES_PER_RECORD bytes or
 * fewer meet the records' bound first, as before the bytes were counted.
 */
export const checkpointDue = (since: FoldedSince, stateBytes: number): boolean =>
  since.records >= Math.max(CHECKPOINT_EVERY_RECORDS, Math.ceil(stateBytes / CHECKPOINT_BYTES_PER_RECORD)) ||
  since.bytes >= Math.max(CHECKPOINT_EVERY_BYTES, stateBytes)

/**
 * Whether a cell kept warm (never released while the server runs) is due a checkpoint written in
 * the background after a turn (Registry.ts, `checkpointWarmLater`): once its journal grew by
 * `afterBytes` (BRAIN_CHECKPOINT_AFTER_BYTES) since its last checkpoint, and by at least that
 * checkpoint's bytes (`checkpointBytes`; the state's own count of its bytes until this process has
 * written one). Never with `afterBytes` 0. A checkpoint rewrites the whole state, so each is written
 * after at least as many journal bytes as the one before it holds: over a session's life the
 * checkpoints written come to at most the journal bytes appended for a state that keeps its size,
 * twice them for one that grows as fast as its journal (each is the one before plus its growth),
 * and a small state is written once per `afterBytes`. An open after a `kill -9` folds
 * what the journal gained since, less than max(`afterBytes`, the checkpoint's bytes) plus a turn's.
 */
export const warmCheckpointDue = (sinceBytes: number, checkpointBytes: number, afterBytes: number): boolean =>
  afterBytes > 0 && sinceBytes >= Math.max(afterBytes, checkpointBytes)
