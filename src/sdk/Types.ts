/**
 * The wire shapes the Promise client sends and receives: the JSON side (`Encoded`) of the
 * contract's schemas (src/http/Schemas.ts), so that they cannot drift from what the server serves.
 */
import type * as Schemas from "../http/Schemas.js"
import type { ModelDelta as Delta } from "../domain/Model.js"

export type CreateSessionRequest = typeof Schemas.CreateSessionRequest.Encoded
export type SessionStatus = typeof Schemas.SessionStatus.Encoded
export type SessionSummary = typeof Schemas.SessionSummary.Encoded
export type SessionList = typeof Schemas.SessionList.Encoded
export type TurnInput = (typeof Schemas.SendMessageRequest.Encoded)["input"]
export type TurnOutcome = typeof Schemas.TurnOutcome.Encoded
export type Receipt = typeof Schemas.Receipt.Encoded
/** A recorded Event: `{session_id, sequence, recorded_at_ms, kind, data, origin?}`. */
export type Event = typeof Schemas.Event.Encoded
export type EventPage = typeof Schemas.EventPage.Encoded
export type Transcript = typeof Schemas.Transcript.Encoded
export type ErrorBody = typeof Schemas.ErrorBody.Encoded

/**
 * A live model token delta (an SSE `model_delta` frame): never journaled, never in a page, no
 * sequence. `model_call` is the sequence of the call's `model_call_started`; a reader that
 * reconnects gets the committed `model_call_ended` instead of the deltas it missed.
 */
export type ModelDelta = { readonly session_id: string; readonly model_call: number } & Delta

/** What `session.events(cursor, { deltas: true })` yields: recorded Events and live deltas, told apart by `type`. */
export type EventOrDelta =
  | { readonly type: "event"; readonly event: Event }
  | { readonly type: "delta"; readonly delta: ModelDelta }
