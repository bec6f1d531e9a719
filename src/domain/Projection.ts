/**
 * Projections: pure folds over a session's journal. Status, the current transcript, kv and the
 * effects still waiting for an outcome are all derived here; nothing else is a source of truth.
 * Public Events are a per-record view that needs only the transcript length before the record.
 */
import { HashMap, Option } from "effect"
import { Lengths } from "./Lengths.js"
import type { SessionConfiguration } from "./Configuration.js"
import { appendedTo, appendMessages } from "./Appended.js"
import type { Message } from "./Messages.js"
import { Catalogue, EffectKinds, EXTENSION_KIND, type JournalRecord, type Origin, TRANSCRIPT_REPLACED } from "./Records.js"
import { stringifyKept } from "./JsonText.js"
import { jsonBytes } from "./Size.js"
import { noUnanswered, unansweredAfter, unansweredOf, type UnansweredCalls } from "./TranscriptTail.js"

export type SessionStatus = "creating" | "idle" | "running" | "ending" | "ended" | "failed" | "corrupt"

export interface PendingEffect {
  readonly kind: keyof typeof EffectKinds
  readonly sequence: number
}

/**
 * A keyed send or submit as its session's journal holds it (`request_claimed`, and for a send
 * `request_answered`): what a retry with the same key is answered from.
 */
export interface RequestEntry {
  /** The hash of the request's body: another body under the key is a conflict. */
  readonly hash: string
  /** The `turn_started` it made. */
  readonly turn: number
  /** When it was claimed, or (a send) answered: retention counts from here. */
  readonly atMs: number
  /** The `turn_ended` or `turn_failed` that closed its turn, once closed. */
  readonly closed?: number | undefined
  /** A send's `request_answered`: the last record of the closing append that answered it. */
  readonly answered?: number | undefined
}

/**
 * A request entry with every field in place (undefined until known), so each update keeps one
 * object shape: a spread adding a field spilled it into a separate property array.
 */
const requestEntry = (hash: string, turn: number, atMs: number, closed?: number, answered?: number): RequestEntry => ({
  hash,
  turn,
  atMs,
  closed,
  answered
})

/** A request's key in `requests`: its mode's scope and its key. */
export const requestId = (mode: "send" | "submit", key: string) => `${mode}:${key}`

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
/**
 * Bytes. One request entry besides its id's and hash's JSON bytes: the entry object, the map's
 * node, the id (a concatenation) and both strings' headers. Measured: 100,000 entries as
 * `request_claimed` folds them take 393 bytes each on the heap after a full collection, their id
 * and hash 109 of them as JSON (a UUID key, a SHA-256 hash).
 */
const REQUEST_ENTRY_BYTES = 288

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
const requestBytes = (id: string, e: RequestEntry) => REQUEST_ENTRY_BYTES + jsonBytes(id) + jsonBytes(e.hash)

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
 * Applies a transcript delta: keep the first `keep` messages, then append. With `concat`, whose
 * array is allocated at its final length: a spread grows its array as it goes (about 1.7 times
 * the bytes for a transcript of a few hundred messages, and slower), and every save folds one.
 */
export const applyDelta = (
  transcript: ReadonlyArray<Message>,
  delta: { readonly keep: number; readonly append: ReadonlyArray<Message> }
): ReadonlyArray<Message> => {
  if (delta.keep < transcript.length) return transcript.slice(0, delta.keep).concat(delta.append)
  // The transcript the delta was taken from, when it was made by appending these very messages
  // (Appended.ts): that array, not a copy, so that the next comparison with it is cheap too.
  const made = appendedTo(transcript)
  if (made !== undefined && made.length === transcript.length + delta.append.length) {
    let i = 0
    while (i < delta.append.length && made[transcript.length + i] === delta.append[i]) i++
    if (i === delta.append.length) return made
  }
  return appendMessages(transcript, delta.append)
}

/** The smallest delta that turns `from` into `to`: keep the common prefix, append the rest. */
export const diffTranscript = (from: ReadonlyArray<Message>, to: ReadonlyArray<Message>) => {
  // `to` is `from` itself, or was made by appending to it (Appended.ts): no message to compare.
  if (to === from) return { keep: from.length, append: [] as ReadonlyArray<Message> }
  if (appendedTo(from) === to) return { keep: from.length, append: to.slice(from.length) }
  let keep = 0
  const n = Math.min(from.length, to.length)
  while (keep < n && (from[keep] === to[keep] || jsonEqual(from[keep], to[keep]))) keep++
  return { keep, append: to.slice(keep) }
}

/** The delta that turns the saved transcript `from` into `to`, or undefined when `to` is `from` (nothing to save). */
export const transcriptChange = (from: ReadonlyArray<Message>, to: ReadonlyArray<Message>) => {
  const delta = diffTranscript(from, to)
  return delta.keep === from.length && delta.append.length === 0 ? undefined : delta
}

/** Structural equality of JSON values (key order ignored, as JSON objects are unordered). */
export const jsonEqual = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  const ka = Object.keys(a).filter((k) => (a as any)[k] !== undefined)
  const kb = Object.keys(b).filter((k) => (b as any)[k] !== undefined)
  if (ka.length !== kb.length) return false
  for (const k of ka) if (!jsonEqual((a as any)[k], (b as any)[k])) return false
  return true
}

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
      if (record.kind in EffectKinds) {
        if (record.kind === "model_call_started") next.modelCalls = state.modelCalls + 1
        if (!HashMap.has(state.pending, record.sequence)) next.bytes += PENDING_BYTES
        next.pending = HashMap.set(state.pending, record.sequence, {
          kind: record.kind as keyof typeof EffectKinds,
          sequence: record.sequence
        })
      } else if (closingKinds.has(record.kind)) {
        if (HashMap.has(state.pending, p.sequence as number)) next.bytes -= PENDING_BYTES
        next.pending = HashMap.remove(state.pending, p.sequence as number)
      }
    }
  }
  return next
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

/**
 * Whether the request under `id` is a send never answered: its turn still running, or closed
 * without its answer (by recovery, after a crash). A retry is ambiguous and never runs it again
 * (the seed: "never executes the request again"), so it never expires: it stays until the session
 * is deleted. A submit is answered by its receipt as soon as it is claimed.
 */
export const unansweredSend = (id: string, e: RequestEntry) => e.answered === undefined && id.startsWith("send:")

/** Whether the request under `id` is past retention at `now` (retention 0 keeps it for ever; an unanswered send never expires). */
export const requestExpired = (id: string, e: RequestEntry, now: number, retentionMs: number) =>
  retentionMs > 0 && now - e.atMs >= retentionMs && !unansweredSend(id, e)

/** The request under `id` if it is within retention. */
export const liveRequest = (state: SessionState, id: string, now: number, retentionMs: number): RequestEntry | undefined => {
  const e = HashMap.get(state.requests, id)
  return Option.isSome(e) && !requestExpired(id, e.value, now, retentionMs) ? e.value : undefined
}

/**
 * The state without its expired requests (the running turn's kept): they are answered as never
 * seen either way, and dropping them frees their memory. Only once the oldest is `slackMs` past
 * its expiry (by default an eighth of retention), so that a session with steady traffic prunes
 * once per `slackMs`, not on every request: a prune walks every request. The oldest counts only
 * requests that can expire (not an unanswered send): with none left, the next prune is a
 * retention from now (a send answered later takes its answer's time, no sooner).
 */
export const pruneRequests = (state: SessionState, now: number, retentionMs: number, slackMs = retentionMs / 8): SessionState => {
  if (retentionMs <= 0 || HashMap.size(state.requests) === 0 || now - state.requestsOldest < retentionMs + slackMs) return state
  let requests = state.requests
  let bytes = state.bytes
  let oldest = Infinity
  for (const [id, e] of state.requests) {
    if (id !== state.turnRequest && requestExpired(id, e, now, retentionMs)) {
      requests = HashMap.remove(requests, id)
      bytes -= requestBytes(id, e)
    } else if (!unansweredSend(id, e)) oldest = Math.min(oldest, e.atMs)
  }
  const requestsOldest = oldest !== Infinity ? oldest : HashMap.size(requests) === 0 ? 0 : now
  return { ...state, requests, bytes, requestsOldest }
}

/** The public Event envelope. */
export interface Event {
  readonly session_id: string
  readonly sequence: number
  readonly recorded_at_ms: number
  readonly kind: string
  readonly data: unknown
  readonly origin?: Origin
}

/**
 * The public Event a record projects to, if any. `transcriptLength` is the transcript's length
 * just before this record: a delta that keeps fewer messages replaces part of the saved tail
 * and is public as `transcript_replaced`; pure appends and kv changes stay private.
 */
export const toEvent = (session: string, record: JournalRecord, transcriptLength: number): Event | undefined => {
  // Each Event written out as one literal, never `{ ...base, kind, data }`: on this runtime an
  // object spread followed by fields its source lacks costs about a microsecond and gives every
  // object a hidden class of its own, which slows each later read of its fields
  // (docs/benchmarks.md, "Objects spread with new fields").
  if (record.kind === EXTENSION_KIND) {
    return {
      session_id: session,
      sequence: record.sequence,
      recorded_at_ms: record.recorded_at_ms,
      kind: record.payload.kind,
      data: record.payload.payload ?? {},
      origin: record.payload.origin
    }
  }
  if (record.kind === "transcript_delta") {
    return record.payload.keep < transcriptLength
      ? { session_id: session, sequence: record.sequence, recorded_at_ms: record.recorded_at_ms, kind: TRANSCRIPT_REPLACED, data: record.payload }
      : undefined
  }
  if (Catalogue[record.kind].visibility === "private") return undefined
  return { session_id: session, sequence: record.sequence, recorded_at_ms: record.recorded_at_ms, kind: record.kind, data: record.payload ?? {} }
}

/**
 * An Event's JSON, exactly as `JSON.stringify(event)` writes an Event `toEvent` made, without
 * writing its `data` again when that is a payload read with its text (JsonText.ts).
 */
export const eventJson = (e: Event): string =>
  `{"session_id":${JSON.stringify(e.session_id)},"sequence":${JSON.stringify(e.sequence)},"recorded_at_ms":${JSON.stringify(e.recorded_at_ms)},"kind":${JSON.stringify(e.kind)}${e.data === undefined ? "" : `,"data":${stringifyKept(e.data)}`}${e.origin === undefined ? "" : `,"origin":${JSON.stringify(e.origin)}`}}`

/** The public Events of consecutive records, given the transcript length before the first. */
export const eventsOf = (session: string, records: Iterable<JournalRecord>, transcriptLength: number): Array<Event> => {
  const out: Array<Event> = []
  let length = transcriptLength
  for (const r of records) {
    const e = toEvent(session, r, length)
    if (e) out.push(e)
    if (r.kind === "transcript_delta") length = Math.min(length, r.payload.keep) + r.payload.append.length
  }
  return out
}

/** The JSON form of a state, for checkpoints. */
export interface SerializedState {
  readonly status: SessionStatus | "none"
  readonly lastSequence: number
  readonly configuration: SessionConfiguration | null
  readonly creation: number | null
  readonly turn: number | null
  readonly activation: number | null
  readonly ending: number | null
  readonly transcript: ReadonlyArray<Message>
  readonly transcriptThrough: number
  readonly kv: ReadonlyArray<readonly [string, unknown]>
  readonly pending: ReadonlyArray<PendingEffect>
  readonly modelCalls: number
  readonly lastActivation: number
  readonly lastActivationEnd: number
  readonly transcriptLengths: ReadonlyArray<readonly [number, number]>
  readonly requests: ReadonlyArray<readonly [string, RequestEntry]>
  readonly turnRequest: string | null
  readonly requestsOldest: number
}

const orNull = <A>(a: A | undefined): A | null => (a === undefined ? null : a)
const orUndefined = <A>(a: A | null): A | undefined => (a === null ? undefined : a)

/** Serializes a state; entries are sorted so equal states serialize to equal text. */
export const serializeState = (s: SessionState): SerializedState => ({
  status: s.status,
  lastSequence: s.lastSequence,
  configuration: orNull(s.configuration),
  creation: orNull(s.creation),
  turn: orNull(s.turn),
  activation: orNull(s.activation),
  ending: orNull(s.ending),
  transcript: s.transcript,
  transcriptThrough: s.transcriptThrough,
  kv: [...HashMap.toEntries(s.kv)].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  pending: [...HashMap.values(s.pending)].sort((a, b) => a.sequence - b.sequence),
  modelCalls: s.modelCalls,
  lastActivation: s.lastActivation,
  lastActivationEnd: s.lastActivationEnd,
  transcriptLengths: s.transcriptLengths.toArray(),
  requests: [...HashMap.toEntries(s.requests)].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  turnRequest: orNull(s.turnRequest),
  requestsOldest: s.requestsOldest
})

export const deserializeState = (j: SerializedState): SessionState => {
  const state = {
    status: j.status,
    lastSequence: j.lastSequence,
    configuration: orUndefined(j.configuration),
    creation: orUndefined(j.creation),
    turn: orUndefined(j.turn),
    activation: orUndefined(j.activation),
    ending: orUndefined(j.ending),
    transcript: j.transcript,
    transcriptThrough: j.transcriptThrough,
    unanswered: unansweredOf(j.transcript),
    kv: HashMap.fromIterable(j.kv.map(([k, v]) => [k, v] as const)),
    pending: HashMap.fromIterable(j.pending.map((p) => [p.sequence, p] as const)),
    modelCalls: j.modelCalls,
    lastActivation: j.lastActivation,
    lastActivationEnd: j.lastActivationEnd,
    transcriptLengths: Lengths.fromPairs(j.transcriptLengths),
    requests: HashMap.fromIterable(j.requests.map(([id, e]) => [id, requestEntry(e.hash, e.turn, e.atMs, e.closed, e.answered)] as const)),
    turnRequest: orUndefined(j.turnRequest),
    requestsOldest: j.requestsOldest
  }
  // Counted from the content, never taken from the file; the kv once (each value's JSON measured).
  const kvBytes = kvBytesOf(state.kv)
  return { ...state, bytes: stateBytes(state, kvBytes), kvBytes }
}
