/**
 * Keyed requests as a session's state holds them: a send or submit's entry under its key, what a
 * retry with the same key is answered from, how long it is kept (retention), and the pruning that
 * frees the expired ones. The entries are made by the fold (Projection.ts).
 */
import { HashMap, Option } from "effect"
import type { SessionState } from "./Projection.js"
import { jsonBytes } from "./Size.js"

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
export const requestEntry = (hash: string, turn: number, atMs: number, closed?: number, answered?: number): RequestEntry => ({
  hash,
  turn,
  atMs,
  closed,
  answered
})

/** A request's key in `requests`: its mode's scope and its key. */
export const requestId = (mode: "send" | "submit", key: string) => `${mode}:${key}`

/**
 * Bytes. One request entry besides its id's and hash's JSON bytes: the entry object, the map's
 * node, the id (a concatenation) and both strings' headers. Measured: 100,000 entries as
 * `request_claimed` folds them take 393 bytes each on the heap after a full collection, their id
 * and hash 109 of them as JSON (a UUID key, a SHA-256 hash).
 */
const REQUEST_ENTRY_BYTES = 288

/** The bytes one request entry holds in a state (`bytes`). */
export const requestBytes = (id: string, e: RequestEntry) => REQUEST_ENTRY_BYTES + jsonBytes(id) + jsonBytes(e.hash)

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
