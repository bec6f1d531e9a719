/**
 * Projections: pure folds over a session's journal. Status, the current transcript, kv and the
 * effects still waiting for an outcome are all derived here; nothing else is a source of truth.
 * The views beside it: public Events (Events.ts), keyed requests and their retention
 * (Requests.ts), transcript deltas (TranscriptDelta.ts), the checkpoint form (SerializedState.ts).
 */
import { HashMap, Option } from "effect"
import { Lengths } from "./Lengths.js"
import type { SessionConfiguration } from "./Configuration.js"
import type { Message } from "./Messages.js"
import { EffectKinds, EXTENSION_KIND, type JournalRecord } from "./Records.js"
import { requestBytes, requestEntry, type RequestEntry, requestId } from "./Requests.js"
import { jsonBytes } from "./Size.js"
import { applyDelta } from "./TranscriptDelta.js"
import { noUnanswered, unansweredAfter, unansweredOf, type UnansweredCalls } from "./TranscriptTail.js"

export type SessionStatus = "creating" | "idle" | "running" | "ending" | "ended" | "failed" | "corrupt"

export interface PendingEffect {
  readonly kind: keyof typeof EffectKinds
  readonly sequence: number
  /**
   * The Environment it is an operation of, if any: an Environment step's, or the one its tool's
   * definition names. What recovery's failure of it names in `details.environment`. (Absent in a
   * checkpoint written before it was kept.)
   */
  readonly environment?: string
}

/** The Environment a started effect is an operation of (`PendingEffect.environment`), or undefined. */
const environmentOf = (state: SessionState, kind: string, p: Record<string, unknown>): string | undefined => {
  if (kind === "tool_call_started") return state.configuration?.tools?.find((t) => t.name === p.tool)?.environment
  return kind.startsWith("environment_") && typeof p.environment === "string" ? p.environment : undefined
}

export interface SessionState {
  /** "none" until session_creation_started is folded. */
  readonly status: SessionStatus | "none"
  readonly lastSequence: number
  readonly configuration: SessionConfiguration | undefined
  /** Open operations: the `*_started` sequence of a creation, turn, activation or ending still running. */
  readonly creation: number | undefined
  readonly turn: number | undefined
  readonly activation: number | undefined
  readonly ending: number | undefined
  readonly transcript: ReadonlyArray<Message>
  /** The sequence of the last transcript change (0 when none). */
  readonly transcriptThrough: number
  /** The transcript's assistant messages with tool calls no later message answers (where its tail starts, TranscriptTail.ts). */
  readonly unanswered: UnansweredCalls
  /** Agentloop kv: a missing key is absent; a stored JSON null is present with value null. */
  readonly kv: HashMap.HashMap<string, unknown>
  /** Effects started without an outcome, by their `*_started` sequence. */
  readonly pending: HashMap.HashMap<number, PendingEffect>
  /** Model calls the session has started (the scripted provider's position). */
  readonly modelCalls: number
  /** The sequence of the last `activation_started` (0 when none); it stays after the activation closes. */
  readonly lastActivation: number
  /** The sequence of the last `activation_ended` or `activation_failed` (0 when none). */
  readonly lastActivationEnd: number
  /**
   * The sequence of the last record whose Event is a `turn_failed` (0 when none): an activation
   * whose loop reads only such Events skips its read when none came after its cursor
   * (`noEventsAfter`).
   */
  readonly lastTurnFailed: number
  /** `[sequence, transcript length after it]` for every transcript change, to project Events from any cursor. */
  readonly transcriptLengths: Lengths
  /** Keyed sends and submits by `requestId`, expired ones included until pruned (`pruneRequests`). */
  readonly requests: HashMap.HashMap<string, RequestEntry>
  /** The running turn's request (its `requestId`), if the turn was keyed. */
  readonly turnRequest: string | undefined
  /** No request that can expire has an `atMs` older than this (0 when there are none): when pruning could drop one. */
  readonly requestsOldest: number
  /**
   * The memory this state holds, in bytes (`jsonBytes` of its configuration, transcript and kv,
   * plus fixed costs per entry), kept current by every fold: what the memory budgets count.
   */
  readonly bytes: number
  /**
   * The part of `bytes` its kv holds (`kvEntryBytes` of each entry), kept current by every fold
   * and recounted from the entries when a checkpoint is read: what BRAIN_MAX_SESSION_KV_BYTES bounds.
   */
  readonly kvBytes: number
}

/** Bytes. The fixed part of a state. */
const STATE_BYTES = 512
/** Bytes. One `(sequence, length)` pair of `transcriptLengths` (two small integers in flat arrays, with their slack). */
const LENGTH_ENTRY_BYTES = 16
/** Bytes. One pending effect (its entry in the map). */
const PENDING_BYTES = 96
/** Bytes. One kv entry besides its key's and value's own bytes (the map's node). */
const KV_ENTRY_BYTES = 64

const messagesBytes = (messages: ReadonlyArray<unknown>) => {
  let n = 0
  for (const m of messages) n += jsonBytes(m)
  return n
}
/** The bytes one kv entry holds in a state (`bytes`, `kvBytes`). */
export const kvEntryBytes = (key: string, value: unknown) => KV_ENTRY_BYTES + jsonBytes(key) + jsonBytes(value)

/** The bytes a state's kv holds, counted from scratch; a fold keeps the same count incrementally. */
export const kvBytesOf = (kv: HashMap.HashMap<string, unknown>): number => {
  let n = 0
  for (const [k, v] of kv) n += kvEntryBytes(k, v)
  return n
}

/** How many bytes putting `value` under `key` adds to the state's kv (negative or 0 when it does not grow it). */
export const kvPutGrowth = (state: Pick<SessionState, "kv">, key: string, value: unknown): number => {
  const old = HashMap.get(state.kv, key)
  return kvEntryBytes(key, value) - (Option.isSome(old) ? kvEntryBytes(key, old.value) : 0)
}

/** The bytes of a state counted from scratch (its kv's given when already counted); a fold keeps the same count incrementally. */
export const stateBytes = (s: Omit<SessionState, "bytes" | "kvBytes">, kvBytes: number = kvBytesOf(s.kv)): number => {
  let n = STATE_BYTES + (s.configuration ? jsonBytes(s.configuration) : 0) + messagesBytes(s.transcript)
  n += s.transcriptLengths.size * LENGTH_ENTRY_BYTES + HashMap.size(s.pending) * PENDING_BYTES
  n += kvBytes
  for (const [id, e] of s.requests) n += requestBytes(id, e)
  return n
}

export const empty: SessionState = {
  status: "none",
  lastSequence: 0,
  configuration: undefined,
  creation: undefined,
  turn: undefined,
  activation: undefined,
  ending: undefined,
  transcript: [],
  transcriptThrough: 0,
  unanswered: noUnanswered,
  kv: HashMap.empty(),
  pending: HashMap.empty(),
  modelCalls: 0,
  lastActivation: 0,
  lastActivationEnd: 0,
  lastTurnFailed: 0,
  transcriptLengths: Lengths.empty,
  requests: HashMap.empty(),
  turnRequest: undefined,
  requestsOldest: 0,
  bytes: STATE_BYTES,
  kvBytes: 0
}

const closingKinds = new Map<string, keyof typeof EffectKinds>(
  Object.entries(EffectKinds).flatMap(([started, closers]) =>
    closers.map((c) => [c, started as keyof typeof EffectKinds] as const)
  )
)

/**
 * The transcripts one `foldAll` makes. Each fold of a `transcript_delta` used to copy the whole
 * transcript (`applyDelta`), which is right for a live session's state (the one before is still
 * held by views and reads) but made folding a journal quadratic: a session of 15,600 turns folded
 * from its start copied about 500 million message references, 76 s and 4 GB. Within one `foldAll`
 * the states between its first and its last are seen by no one, so a transcript this fold made is
 * appended to in place; one it was given (its `from`, or one made by a live fold) is copied first.
 */
class FoldTranscripts {
  private made: Array<Message> | undefined

  next(transcript: ReadonlyArray<Message>, delta: { readonly keep: number; readonly append: ReadonlyArray<Message> }): ReadonlyArray<Message> {
    const made = this.made
    if (transcript === made && delta.keep >= made.length) {
      for (let i = 0; i < delta.append.length; i++) made.push(delta.append[i]!)
      return made
    }
    const fresh = delta.keep < transcript.length ? transcript.slice(0, delta.keep).concat(delta.append) : transcript.concat(delta.append)
    this.made = fresh
    return fresh
  }
}

/** Folds one record. Records must come in sequence order. */
export const fold = (state: SessionState, record: JournalRecord): SessionState => {
  const next: Folding = { ...state }
  foldInto(next, record, undefined)
  return next
}

/**
 * Folds records in order: the state `fold` gives one record at a time, made with one copy of the
 * state for them all instead of one per record (the states between are seen by no one); `state`
 * itself is left as it is, and is what comes back when there is no record. A live session folds
 * what each of its writes committed this way: a keyed text turn's ten records come in four
 * writes, and each copy of the state (22 fields) is a few hundred nanoseconds warm, more in the
 * cold caches of one session's turn (docs/benchmarks.md, "One session's keyed turn, stop 62").
 */
export const foldMany = (state: SessionState, records: Iterable<JournalRecord>): SessionState => foldRecords(state, records, undefined)

const foldRecords = (state: SessionState, records: Iterable<JournalRecord>, transcripts: FoldTranscripts | undefined): SessionState => {
  let next: Folding | undefined
  for (const r of records) {
    next ??= { ...state }
    foldInto(next, r, transcripts)
  }
  return next ?? state
}

/** A state being folded: one copy, changed record by record, then handed out and never changed again. */
type Folding = { -readonly [K in keyof SessionState]: SessionState[K] }

/**
 * Folds one record into `s` in place. Each case reads what it needs of the state before it writes
 * that field: `s` is the state before the record until the case changes it.
 */
const foldInto = (s: Folding, record: JournalRecord, transcripts: FoldTranscripts | undefined): void => {
  const p = record.payload
  s.lastSequence = Math.max(s.lastSequence, record.sequence)
  switch (record.kind) {
    case "session_creation_started":
      s.status = "creating"
      s.bytes += (p.configuration ? jsonBytes(p.configuration) : 0) - (s.configuration ? jsonBytes(s.configuration) : 0)
      s.configuration = p.configuration
      s.creation = record.sequence
      break
    case "session_creation_ended":
      s.status = "idle"
      s.creation = undefined
      break
    case "session_creation_failed":
      s.status = "failed"
      s.creation = undefined
      break
    case "turn_started":
      s.status = "running"
      s.turn = record.sequence
      break
    case "turn_ended":
    case "turn_failed":
      if (record.kind === "turn_failed") s.lastTurnFailed = record.sequence
      s.turn = undefined
      if (s.status === "running") s.status = "idle"
      if (s.turnRequest !== undefined) {
        const r = HashMap.get(s.requests, s.turnRequest)
        if (Option.isSome(r) && r.value.turn === p.sequence) {
          s.requests = HashMap.set(s.requests, s.turnRequest, requestEntry(r.value.hash, r.value.turn, r.value.atMs, record.sequence, r.value.answered))
        }
        s.turnRequest = undefined
      }
      break
    case "activation_started":
      s.activation = record.sequence
      s.lastActivation = record.sequence
      break
    case "activation_ended":
    case "activation_failed":
      s.activation = undefined
      s.lastActivationEnd = record.sequence
      break
    case "session_end_started":
      s.status = "ending"
      s.ending = record.sequence
      break
    case "session_ended":
      s.status = "ended"
      s.ending = undefined
      break
    case "transcript_delta": {
      // Read before the delta is applied: a fold's own transcript is appended to in place.
      const transcript = s.transcript
      const length = transcript.length
      const before = p.keep >= length ? 0 : messagesBytes(transcript)
      const after = transcripts === undefined ? applyDelta(transcript, p) : transcripts.next(transcript, p)
      s.transcript = after
      // An append adds its messages' bytes; a replacement recounts what is kept (rare, and its
      // copy of the transcript costs as much).
      s.bytes += LENGTH_ENTRY_BYTES + (p.keep >= length ? messagesBytes(p.append) : messagesBytes(after) - before)
      s.transcriptThrough = record.sequence
      s.unanswered = p.keep >= length
        ? unansweredAfter(s.unanswered, length, p.append)
        : unansweredOf(after)
      s.transcriptLengths = s.transcriptLengths.append(record.sequence, after.length)
      break
    }
    case "kv_put": {
      const growth = kvPutGrowth(s, p.key, p.value)
      s.bytes += growth
      s.kvBytes += growth
      s.kv = HashMap.set(s.kv, p.key as string, p.value)
      break
    }
    case "kv_delete": {
      const old = HashMap.get(s.kv, p.key as string)
      if (Option.isSome(old)) {
        const freed = kvEntryBytes(p.key, old.value)
        s.bytes -= freed
        s.kvBytes -= freed
      }
      s.kv = HashMap.remove(s.kv, p.key as string)
      break
    }
    case "request_claimed": {
      const id = requestId(p.mode, p.key)
      const requests = s.requests
      const old = HashMap.get(requests, id)
      const e = requestEntry(p.request_hash, s.turn ?? 0, p.at_ms)
      s.bytes += requestBytes(id, e) - (Option.isSome(old) ? requestBytes(id, old.value) : 0)
      s.requests = HashMap.set(requests, id, e)
      s.turnRequest = id
      s.requestsOldest = HashMap.size(requests) === 0 ? e.atMs : Math.min(s.requestsOldest, e.atMs)
      break
    }
    case "request_answered": {
      const id = requestId("send", p.key)
      const r = HashMap.get(s.requests, id)
      if (Option.isSome(r)) s.requests = HashMap.set(s.requests, id, requestEntry(r.value.hash, r.value.turn, p.at_ms, r.value.closed, record.sequence))
      break
    }
    default: {
      // A journal from before `turn_failed` was reserved may hold an extension Event of that kind.
      if (record.kind === EXTENSION_KIND && p.kind === TURN_FAILED) s.lastTurnFailed = record.sequence
      if (record.kind in EffectKinds) {
        if (record.kind === "model_call_started") s.modelCalls = s.modelCalls + 1
        if (!HashMap.has(s.pending, record.sequence)) s.bytes += PENDING_BYTES
        const kind = record.kind as keyof typeof EffectKinds
        const environment = environmentOf(s, kind, p)
        s.pending = HashMap.set(
          s.pending,
          record.sequence,
          environment === undefined ? { kind, sequence: record.sequence } : { kind, sequence: record.sequence, environment }
        )
      } else if (closingKinds.has(record.kind)) {
        if (HashMap.has(s.pending, p.sequence as number)) s.bytes -= PENDING_BYTES
        s.pending = HashMap.remove(s.pending, p.sequence as number)
      }
    }
  }
}

const TURN_FAILED = "turn_failed"

/**
 * True when `state` knows that no Event of any of `kinds` comes after sequence `after`: each is
 * `turn_failed` (the kind a state follows, `lastTurnFailed`) and none came after it. A read of
 * the Events after `after` kept to `kinds` would then find none. False when it does not know.
 */
export const noEventsAfter = (state: Pick<SessionState, "lastTurnFailed">, kinds: ReadonlySet<string>, after: number): boolean => {
  for (const kind of kinds) if (kind !== TURN_FAILED) return false
  return state.lastTurnFailed <= after
}

export const foldAll = (records: Iterable<JournalRecord>, from: SessionState = empty): SessionState =>
  foldRecords(from, records, new FoldTranscripts())

/** The transcript's length just after `sequence` (0 before any change). */
export const transcriptLengthAt = (state: Pick<SessionState, "transcriptLengths">, sequence: number): number => state.transcriptLengths.at(sequence)

/** kv_read: missing (None) is distinct from a stored JSON null (Some(null)). */
export const kvRead = (state: SessionState, key: string): Option.Option<unknown> => HashMap.get(state.kv, key)

