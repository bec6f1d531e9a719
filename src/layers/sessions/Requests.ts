/**
 * Keyed sends and submits whose `Idempotency-Key` lives in their session's journal: the claim is
 * a `request_claimed` record in the append of the turn's `turn_started`, and a send's answer is
 * its turn's closing append (which carries `request_answered`). A keyed turn costs no write
 * beyond the turn's own. A retry with the key is answered from the folded state and, for a send,
 * the closing record read back: the same value the first request got, built by the same function
 * (`turnOutcome`), so its JSON is equal byte for byte.
 */
import { Effect } from "effect"
import { Overloaded } from "../../domain/Errors.js"
import { type JournalRecord } from "../../domain/Records.js"
import { type SessionState } from "../../domain/Projection.js"
import { liveRequest, requestExpired, requestId } from "../../domain/Requests.js"
import type { JournalShape } from "../../services/Journal.js"
import type { Keyed, KeptRequest, Receipt, TurnOutcome, TurnRequest } from "../../services/Sessions.js"
import type { SessionId } from "../../domain/Ids.js"
import type { Failure } from "../../domain/Failure.js"
import type { Cell } from "./Cell.js"
import { fromJournal } from "./FromJournal.js"

/** How a turn closed, as its closing record says. */
export type TurnClose =
  | { readonly kind: "turn_ended"; readonly result: unknown }
  | { readonly kind: "turn_failed"; readonly failure: Failure }

/**
 * A send's answer once its closing append is durable: `lastSequence` is that append's last record.
 * The one builder of a recorded outcome, for the first answer and for every replay.
 */
export const turnOutcome = (session: TurnOutcome["session_id"], turn: number, lastSequence: number, close: TurnClose): TurnOutcome => ({
  session_id: session,
  status: "idle",
  last_sequence: lastSequence,
  turn: close.kind === "turn_ended"
    ? { sequence: turn, status: "ended", result: close.result }
    : { sequence: turn, status: "failed", failure: close.failure }
})

const CONFLICT = { _tag: "Conflict" } as const
const IN_FLIGHT = { _tag: "Ambiguous", inFlight: true } as const
const NEVER_ANSWERED = { _tag: "Ambiguous", inFlight: false } as const

const closeOf = (r: JournalRecord | undefined): TurnClose | undefined =>
  r?.kind === "turn_ended"
    ? { kind: "turn_ended", result: r.payload.result }
    : r?.kind === "turn_failed"
    ? { kind: "turn_failed", failure: r.payload.failure }
    : undefined

/** The closing record of a turn, read back; undefined when the journal has no such close there. */
const readClose = (journal: JournalShape, session: SessionId, closed: number) =>
  Effect.map(
    journal.read(session, { after: closed - 1, limit: 1 }).pipe(Effect.mapError((j) => fromJournal(j))),
    ([record]) => closeOf(record?.sequence === closed ? record : undefined)
  )

/**
 * What the session's journal says of a keyed send (undefined: never seen within retention, so
 * it runs). Reads one record (the closing one) for a replay.
 */
export const seenSend = Effect.fnUntraced(function*(journal: JournalShape, cell: Cell, request: TurnRequest, now: number, retentionMs: number) {
  const e = liveRequest(cell.state, requestId("send", request.key), now, retentionMs)
  if (e === undefined) return undefined
  if (e.hash !== request.hash) return CONFLICT
  if (e.answered === undefined || e.closed === undefined) return e.closed === undefined ? IN_FLIGHT : NEVER_ANSWERED
  const close = yield* readClose(journal, cell.session, e.closed)
  // The state and the journal disagree: never answer from a guess.
  if (close === undefined) return NEVER_ANSWERED
  return { _tag: "Answered", value: turnOutcome(cell.session, e.turn, e.answered, close) } satisfies Keyed<TurnOutcome>
})

/**
 * The keyed sends and submits the session's journal answers within retention, each with the
 * answer a retry gets (`seenSend` and `seenSubmit`'s): what a delete hands on (`KeptRequest`). A
 * send never answered (kept whatever its age), or whose close cannot be read back, is kept without
 * its outcome (a retry is ambiguous).
 */
export const keptRequests = Effect.fnUntraced(function*(journal: JournalShape, session: SessionId, state: SessionState, now: number, retentionMs: number) {
  const kept: Array<KeptRequest> = []
  for (const [id, e] of state.requests) {
    if (requestExpired(id, e, now, retentionMs)) continue
    const colon = id.indexOf(":")
    const mode = id.slice(0, colon)
    const key = id.slice(colon + 1)
    if (mode === "submit") {
      kept.push({ mode, key, hash: e.hash, atMs: e.atMs, receipt: { session_id: session, sequence: e.turn } })
      continue
    }
    const close = e.answered !== undefined && e.closed !== undefined ? yield* readClose(journal, session, e.closed) : undefined
    const outcome = close === undefined ? undefined : turnOutcome(session, e.turn, e.answered!, close)
    kept.push({ mode: "send", key, hash: e.hash, atMs: e.atMs, outcome })
  }
  return kept
})

/** What the session's journal says of a keyed submit (undefined: never seen within retention). */
export const seenSubmit = (cell: Cell, request: TurnRequest, now: number, retentionMs: number): Keyed<Receipt> | undefined => {
  const e = liveRequest(cell.state, requestId("submit", request.key), now, retentionMs)
  if (e === undefined) return undefined
  if (e.hash !== request.hash) return CONFLICT
  return { _tag: "Answered", value: { session_id: cell.session, sequence: e.turn } }
}

/**
 * The refusal of a keyed send or submit with a new key by a session holding `keys` keys, its
 * maximum `maxKeys` or more (BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS): nothing was done, and a retry
 * with the key runs once older keys have expired.
 */
export const sessionKeysFull = (keys: number, maxKeys: number) =>
  new Overloaded({
    message:
      `the session holds ${keys} Idempotency-Keys of keyed sends and submits, its maximum (BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS is ${maxKeys}), and takes a new one once older ones expire (BRAIN_REQUEST_RETENTION_SECS); nothing was done: retry later with the same key. Keys it already holds still answer, and sends without a key are served`,
    details: { setting: "BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS", keys, max_keys: maxKeys }
  })
