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
export const fold = (state: SessionState, record: JournalRecord): SessionState => foldWith(state, record, undefined)

const foldWith = (state: SessionState, record: JournalRecord, transcripts: FoldTranscripts | undefined): SessionState => {
  const p = record.payload
  const next: { -readonly [K in keyof SessionState]: SessionState[K] } = {
    ...state,
    lastSequence: Math.max(state.lastSequence, record.sequence)
  }
  switch (record.kind) {
    case "session_creation_started":
      next.status = "creating"
      next.bytes += (p.configuration ? jsonBytes(p.configuration) : 0) - (state.configuration ? jsonBytes(state.configuration) : 0)
      next.configuration = p.configuration
      next.creation = record.sequence
      break
    case "session_creation_ended":
      next.status = "idle"
      next.creation = undefined
      break
    case "session_creation_failed":
      next.status = "failed"
      next.creation = undefined
      break
    case "turn_started":
      next.status = "running"
      next.turn = record.sequence
      break
    case "turn_ended":
    case "turn_failed":
      if (record.kind === "turn_failed") next.lastTurnFailed = record.sequence
      next.turn = undefined
      if (state.status === "running") next.status = "idle"
      if (state.turnRequest !== undefined) {
        const r = HashMap.get(state.requests, state.turnRequest)
        if (Option.isSome(r) && r.value.turn === p.sequence) {
          next.requests = HashMap.set(state.requests, state.turnRequest, requestEntry(r.value.hash, r.value.turn, r.value.atMs, record.sequence, r.value.answered))
        }
        next.turnRequest = undefined
      }
      break
    case "activation_started":
      next.activation = record.sequence
      next.lastActivation = record.sequence
      break
    case "activation_ended":
    case "activation_failed":
      next.activation = undefined
      next.lastActivationEnd = record.sequence
      break
    case "session_end_started":
      next.status = "ending"
      next.ending = record.sequence
      break
    case "session_ended":
      next.status = "ended"
      next.ending = undefined
      break
    case "transcript_delta": {
      // Read before the delta is applied: a fold's own transcript is appended to in place.
      const length = state.transcript.length
      const before = p.keep >= length ? 0 : messagesBytes(state.transcript)
      next.transcript = transcripts === undefined ? applyDelta(state.transcript, p) : transcripts.next(state.transcript, p)
      // An append adds its messages' bytes; a replacement recounts what is kept (rare, and its
      // copy of the transcript costs as much).
      next.bytes += LENGTH_ENTRY_BYTES + (p.keep >= length ? messagesBytes(p.append) : messagesBytes(next.transcript) - before)
      next.transcriptThrough = record.sequence
      next.unanswered = p.keep >= length
        ? unansweredAfter(state.unanswered, length, p.append)
        : unansweredOf(next.transcript)
      next.transcriptLengths = state.transcriptLengths.append(record.sequence, next.transcript.length)
      break
    }
    case "kv_put": {
      const growth = kvPutGrowth(state, p.key, p.value)
      next.bytes += growth
      next.kvBytes += growth
      next.kv = HashMap.set(state.kv, p.key as string, p.value)
      break
    }
    case "kv_delete": {
      const old = HashMap.get(state.kv, p.key as string)
      if (Option.isSome(old)) {
        const freed = kvEntryBytes(p.key, old.value)
        next.bytes -= freed
        next.kvBytes -= freed
      }
      next.kv = HashMap.remove(state.kv, p.key as string)
      break
    }
    case "request_claimed": {
      const id = requestId(p.mode, p.key)
      const old = HashMap.get(state.requests, id)
      const e = requestEntry(p.request_hash, state.turn ?? 0, p.at_ms)
      next.bytes += requestBytes(id, e) - (Option.isSome(old) ? requestBytes(id, old.value) : 0)
      next.requests = HashMap.set(state.requests, id, e)
      next.turnRequest = id
      next.requestsOldest = HashMap.size(state.requests) === 0 ? e.atMs : Math.min(state.requestsOldest, e.atMs)
      break
    }
    case "request_answered": {
      const id = requestId("send", p.key)
      const r = HashMap.get(state.requests, id)
      if (Option.isSome(r)) next.requests = HashMap.set(state.requests, id, requestEntry(r.value.hash, r.value.turn, p.at_ms, r.value.closed, record.sequence))
      break
    }
    default: {
      // A journal from before `turn_failed` was reserved may hold an extension Event of that kind.
      if (record.kind === EXTENSION_KIND && p.kind === TURN_FAILED) next.lastTurnFailed = record.sequence
      if (record.kind in EffectKinds) {
        if (record.kind === "model_call_started") next.modelCalls = state.modelCalls + 1
        if (!HashMap.has(state.pending, record.sequence)) next.bytes += PENDING_BYTES
        const kind = record.kind as keyof typeof EffectKinds
        const environment = environmentOf(state, kind, p)
        next.pending = HashMap.set(
          state.pending,
          record.sequence,
          environment === undefined ? { kind, sequence: record.sequence } : { kind, sequence: record.sequence, environment }
        )
      } else if (closingKinds.has(record.kind)) {
        if (HashMap.has(state.pending, p.sequence as number)) next.bytes -= PENDING_BYTES
        next.pending = HashMap.remove(state.pending, p.sequence as number)
      }
    }
  }
  return next
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

export const foldAll = (records: Iterable<JournalRecord>, from: SessionState = empty): SessionState => {
  let s = from
  const transcripts = new FoldTranscripts()
  for (const r of records) s = foldWith(s, r, transcripts)
  return s
}

/** The transcript's length just after `sequence` (0 before any change). */
export const transcriptLengthAt = (state: Pick<SessionState, "transcriptLengths">, sequence: number): number => state.transcriptLengths.at(sequence)

/** kv_read: missing (None) is distinct from a stored JSON null (Some(null)). */
export const kvRead = (state: SessionState, key: string): Option.Option<unknown> => HashMap.get(state.kv, key)

