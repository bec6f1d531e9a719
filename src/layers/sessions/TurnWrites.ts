/**
 * What a turn's host calls write to its session's journal, weighed by their bytes there, and the
 * turn's bound on them (BRAIN_MAX_TURN_WRITE_BYTES).
 *
 * A host request is bounded (BRAIN_MAX_WASM_IO_BYTES), but how many a loop makes is bounded only
 * by the turn's wall time, and a call that writes costs the guest a pointer while the host parses
 * and journals what it points to: a turn repeating an 8 MiB `kv_put` wrote 2 GiB in 41 s, well
 * within its compute budget. So every record a turn's host calls write is weighed as the journal
 * holds it — its frame (30 bytes), its record kind and its payload's JSON, in UTF-8 — and the
 * turn's records are counted together:
 *
 * - a kv change, a transcript save (`set_transcript`, one riding on a call, the one at the end), an
 *   Event (the loop's or a tool's) and the start of a model or tool call are refused, nothing of
 *   them written, when they would take the turn past the bound (`turn_write_limit`), as an Event
 *   past BRAIN_MAX_EMITTED_BYTES is;
 * - the outcome of a model or tool call is always recorded (the effect was sent, and its start must
 *   be closed) and counted: a turn passes the bound by at most the outcomes of the calls under way
 *   when it reached it, and every write after them is refused.
 *
 * The turn's opening and closing records (its input, its result) are the turn's, not its host
 * calls': BRAIN_MAX_INPUT_BYTES and BRAIN_MAX_WASM_IO_BYTES bound them, once a turn.
 *
 * A payload is written as JSON once, here, and the journal writes that text (`writtenEntry`), so
 * weighing a record costs no second serialization.
 */
import { failure, type Failure } from "../../domain/Failure.js"
import { kvPutGrowth, type SessionState } from "../../domain/Projection.js"
import { type Entry, entry, type PayloadOf, type RecordKind, type WrittenEntry, writtenEntry } from "../../domain/Records.js"
import type { ServerConfigShape } from "../../services/ServerConfig.js"
import { BODY_FIXED_BYTES, HEADER_BYTES } from "../journal/Frame.js"

/** What a turn has written so far (its `ActivationScope`'s count; absent, nothing). */
export interface TurnWritten {
  writtenBytes?: number | undefined
  /** The bytes of the session's journal when the turn was admitted; absent, BRAIN_MAX_SESSION_JOURNAL_BYTES is not applied. */
  readonly journalBytes?: number | undefined
}

/** A record to write, its payload's JSON made once, and its bytes in the journal. */
export interface Weighed<K extends RecordKind = RecordKind> {
  readonly entry: Entry<K>
  readonly bytes: number
}

/** The bytes of a record of `kind` whose payload's JSON is `json`, as the journal writes it (journal/Frame.ts). */
export const recordBytes = (kind: string, json: string): number =>
  HEADER_BYTES + BODY_FIXED_BYTES + Buffer.byteLength(kind, "utf8") + Buffer.byteLength(json, "utf8")

/**
 * A record of `kind` with `payload`, weighed. A payload JSON cannot write (a cycle, a BigInt: an
 * in-process loop's value) weighs nothing: the journal refuses it whole, writing nothing.
 */
export const weigh = <K extends RecordKind>(kind: K, payload: PayloadOf<K>): Weighed<K> => {
  const json = jsonOf(payload)
  return json === undefined ? { entry: entry(kind, payload), bytes: 0 } : { entry: writtenEntry(kind, payload, json), bytes: recordBytes(kind, json) }
}

/** The bytes of a record already made (an effect's outcome), its JSON reused when its maker wrote it. */
export const weightOf = (e: Entry): number => {
  const json = (e as Partial<WrittenEntry>).json ?? jsonOf(e.payload)
  return json === undefined ? 0 : recordBytes(e.kind, json)
}

/**
 * Why a write of `bytes` is refused: it would take the turn past BRAIN_MAX_TURN_WRITE_BYTES, or the
 * session's journal (its bytes when the turn was admitted, and the turn's writes since) past
 * BRAIN_MAX_SESSION_JOURNAL_BYTES (sessions/StorageRoom.ts); undefined when it fits. Both are
 * `turn_write_limit`; the second says so in `details.reason: "session_journal_limit"`.
 */
export const writeRefusal = (
  config: Pick<ServerConfigShape, "maxTurnWriteBytes" | "maxSessionJournalBytes">,
  turn: TurnWritten,
  bytes: number
): Failure | undefined => {
  const written = turn.writtenBytes ?? 0
  if (config.maxTurnWriteBytes > 0 && written + bytes > config.maxTurnWriteBytes) {
    return failure(
      "turn_write_limit",
      `this turn would pass BRAIN_MAX_TURN_WRITE_BYTES (${config.maxTurnWriteBytes}): its host calls have written ${written} bytes to the journal, and this write is ${bytes}`
    )
  }
  const limit = config.maxSessionJournalBytes
  const before = turn.journalBytes
  if (limit <= 0 || before === undefined || before + written + bytes <= limit) return undefined
  return failure(
    "turn_write_limit",
    `this write would take the session's journal past BRAIN_MAX_SESSION_JOURNAL_BYTES (${limit}): it held ${before} bytes when this turn began, the turn's host calls have written ${written} since, and this write is ${bytes}`,
    { details: { reason: "session_journal_limit", setting: "BRAIN_MAX_SESSION_JOURNAL_BYTES", limit, journal_bytes: before + written } }
  )
}

/**
 * Why a `kv_put` of `value` under `key` is refused: it would grow the session's kv past
 * BRAIN_MAX_SESSION_KV_BYTES (each entry as the state counts it, Projection.ts `kvEntryBytes`);
 * undefined when it fits. A put that does not grow the kv (a value no larger than the one it
 * replaces) always fits, as does every `kv_delete`. Unlike a turn's writes, the kv stays: the
 * bound holds across the session's turns, and only a delete or a smaller value makes room.
 */
export const kvRefusal = (config: Pick<ServerConfigShape, "maxSessionKvBytes">, state: Pick<SessionState, "kv" | "kvBytes">, key: string, value: unknown): Failure | undefined => {
  if (config.maxSessionKvBytes <= 0) return undefined
  const growth = kvPutGrowth(state, key, value)
  if (growth <= 0 || state.kvBytes + growth <= config.maxSessionKvBytes) return undefined
  return failure(
    "kv_limit",
    `this put would take the session's kv past BRAIN_MAX_SESSION_KV_BYTES (${config.maxSessionKvBytes}): it holds ${state.kvBytes} bytes, and this put adds ${growth}; delete keys or store smaller values to make room`,
    { details: { setting: "BRAIN_MAX_SESSION_KV_BYTES", limit: config.maxSessionKvBytes, kv_bytes: state.kvBytes, growth } }
  )
}

/** Counts a write of `bytes` against the turn: one `writeRefusal` let through, or an outcome, which is never refused. */
export const countWrite = (turn: TurnWritten, bytes: number): void => {
  turn.writtenBytes = (turn.writtenBytes ?? 0) + bytes
}

/** `outcome`, counted against the turn: an effect's outcome is always recorded, never refused. */
export const counted = <E extends Entry>(turn: TurnWritten, outcome: E): E => {
  countWrite(turn, weightOf(outcome))
  return outcome
}

/** `JSON.stringify(value)`, or undefined when it throws or writes nothing. */
const jsonOf = (value: unknown): string | undefined => {
  try {
    return JSON.stringify(value)
  } catch {
    return undefined
  }
}
