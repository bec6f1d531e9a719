/**
 * A session's state as JSON, for checkpoints: written with its entries sorted, so that equal
 * states are equal text, and read back with its memory counts recounted from the content.
 */
import { HashMap } from "effect"
import type { SessionConfiguration } from "./Configuration.js"
import { Lengths } from "./Lengths.js"
import type { Message } from "./Messages.js"
import { kvBytesOf, type PendingEffect, type SessionState, type SessionStatus, stateBytes } from "./Projection.js"
import { requestEntry, type RequestEntry } from "./Requests.js"
import { unansweredOf } from "./TranscriptTail.js"

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
  /** Absent from a checkpoint written before it was kept: read as its last sequence (`deserializeState`). */
  readonly lastTurnFailed?: number
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
  lastTurnFailed: s.lastTurnFailed,
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
    // A checkpoint from before it was kept cannot say where the last one is: as if at its end, so
    // that a turn reads the Events from before it in full, as it always did.
    lastTurnFailed: j.lastTurnFailed ?? j.lastSequence,
    transcriptLengths: Lengths.fromPairs(j.transcriptLengths),
    requests: HashMap.fromIterable(j.requests.map(([id, e]) => [id, requestEntry(e.hash, e.turn, e.atMs, e.closed, e.answered)] as const)),
    turnRequest: orUndefined(j.turnRequest),
    requestsOldest: j.requestsOldest
  }
  // Counted from the content, never taken from the file; the kv once (each value's JSON measured).
  const kvBytes = kvBytesOf(state.kv)
  return { ...state, bytes: stateBytes(state, kvBytes), kvBytes }
}
