/**
 * Sessions: the registry of session actors. One turn at a time per session; actors open on
 * demand and are released after creation and after each turn unless an idle TTL keeps them.
 * Reads (summary, transcript, Events) never activate an actor.
 */
import type { Readable } from "node:stream"
import { Context, type Effect, type Scope } from "effect"
import type {
  AgentloopFailed,
  Conflict,
  CreationFailed,
  Internal,
  InvalidRequest,
  JournalWriteFailed,
  Overloaded,
  PayloadTooLarge,
  SessionBusy,
  SessionEnded,
  SessionStorageError,
  TeardownFailed
} from "../domain/Errors.js"
import type { SessionId } from "../domain/Ids.js"
import type { Failure } from "../domain/Failure.js"
import type { Message, TurnInput } from "../domain/Messages.js"
import type { Event } from "../domain/Events.js"
import type { SessionStatus } from "../domain/Projection.js"
import type { SessionConfiguration } from "../domain/Configuration.js"
import type { EnvironmentDeclaration } from "../domain/Environment.js"

/**
 * What each method can fail with (domain/Errors.ts). Every method that reaches a session can meet
 * its storage refusing (`SessionStorageError`: unknown, damaged, a write or a recovery that failed).
 */
export type CreateError =
  | InvalidRequest
  | PayloadTooLarge
  | Conflict
  | CreationFailed
  | Internal
  | SessionStorageError
/** A turn refused: by the session's state, its loop, or its storage. */
export type TurnError = SessionStorageError | SessionEnded | SessionBusy | Conflict | AgentloopFailed | PayloadTooLarge
/** A keyed turn refused: as any turn, or `Overloaded` for a new key when its session holds BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS. */
export type KeyedTurnError = TurnError | Overloaded
export type EndError = SessionStorageError | Conflict
export type DeleteError = SessionStorageError | Conflict | TeardownFailed
/**
 * A list refused rather than shortened: the sessions directory cannot be read (`overloaded` when
 * the process is out of descriptors, `internal` otherwise), or a session in it cannot be read now.
 */
export type ListError = Overloaded | JournalWriteFailed | Internal
/** An SSE subscription refused: beyond the subscriber limits, or a catch-up read that failed unexpectedly. */
export type FollowError = SessionStorageError | Overloaded | Internal

/**
 * An admitted SSE subscription: the response body, already checked (the session exists, its
 * journal read, the cursor valid, a subscriber slot taken) before anything is answered.
 */
export interface Following {
  /**
   * The SSE bytes, as a byte stream to pipe to the socket (it reads as the socket drains):
   * recorded Events (`id: <sequence>`), heartbeat comments, and — when the stream ends other than
   * after `session_ended` — a `stream_lagged` or `stream_error` control frame.
   */
  readonly body: Readable
  /** Ends the stream with a retryable `stream_error` (the server is stopping). */
  readonly stop: Effect.Effect<void>
  /**
   * The session is over (ended, or its creation failed) and the cursor is at its last record:
   * nothing will ever be sent, and `body` ends at once. HTTP answers 204, which tells an
   * EventSource to stop reconnecting (docs/api.md).
   */
  readonly over: boolean
}

export type CreateSession = Omit<SessionConfiguration, "agentloop" | "environments"> & {
  readonly agentloop?: string | undefined
  /** Declarations (docs/environments.md); the server admits them and records what their bindings stand for. */
  readonly environments?: ReadonlyArray<EnvironmentDeclaration> | undefined
}

export interface SessionSummary {
  readonly session_id: SessionId
  /** `corrupt` only in lists: the journal is damaged (`failure` says where); other routes answer `journal_corrupt`. */
  readonly status: SessionStatus
  /** The last committed sequence; 0 for a corrupt session, whose journal is not read. */
  readonly last_sequence: number
  readonly failure?: Failure
}

export interface TurnOutcome extends SessionSummary {
  readonly turn: {
    readonly sequence: number
    readonly status: "ended" | "failed"
    readonly result?: unknown
    readonly failure?: Failure
  }
}

/** A keyed send's or submit's `Idempotency-Key` and the hash of its request body. */
export interface TurnRequest {
  readonly key: string
  readonly hash: string
}

/**
 * What a keyed send or submit comes to. Its key is claimed in its session's journal, in the
 * append of its `turn_started`; a send's answer is its turn's closing append. Once the turn has
 * started, a retry with the key is answered from the journal:
 *
 * - `Answered`: the turn ran now, or a retry gets what the first request got (the receipt of a
 *   submit, the outcome of a send), equal byte for byte as JSON;
 * - `Conflict`: the key was used with another body;
 * - `Ambiguous`: a send whose turn is still running (`inFlight`), or that was never answered (its
 *   turn closed by recovery): never run again.
 *
 * A request refused before its turn started left nothing in the journal; its caller decides what
 * the key keeps (http/Idempotent.ts).
 */
export type Keyed<A> =
  | { readonly _tag: "Answered"; readonly value: A }
  | { readonly _tag: "Conflict" }
  | { readonly _tag: "Ambiguous"; readonly inFlight: boolean }

export interface Receipt {
  readonly session_id: SessionId
  readonly sequence: number
}

/**
 * A keyed send or submit whose key its session's journal still holds (within retention), as a
 * delete hands it on before it removes that journal (`delete`'s `keep`): so the key outlives the
 * session (DESIGN §7), and a retry gets the same answer. `atMs`: when it was answered (or claimed,
 * for a send never answered, whose `outcome` is then undefined).
 */
export type KeptRequest =
  | {
    readonly mode: "send"
    readonly key: string
    readonly hash: string
    readonly atMs: number
    readonly outcome: TurnOutcome | undefined
  }
  | { readonly mode: "submit"; readonly key: string; readonly hash: string; readonly atMs: number; readonly receipt: Receipt }

export interface TranscriptView {
  readonly messages: ReadonlyArray<Message>
  readonly through_sequence: number
}

export interface EventPage {
  readonly events: ReadonlyArray<Event>
  /** The cursor to pass as `after` for the next page (the last sequence examined). */
  readonly next_cursor: number
}

export interface SessionsShape {
  /**
   * Creates a session under `id` (one `mintSessionId` minted for it, never used before), or under
   * a fresh id: a caller that must name the session before it exists (a keyed create's claim)
   * mints it first.
   */
  readonly create: (request: CreateSession, id?: SessionId) => Effect.Effect<SessionSummary, CreateError>
  readonly get: (session: SessionId) => Effect.Effect<SessionSummary, SessionStorageError>
  /**
   * A damaged session is listed as `corrupt`, a vanished one left out; a list that cannot be read
   * whole fails (ListError), never answering fewer sessions than there are.
   */
  readonly list: (options: { readonly after?: SessionId; readonly limit: number }) => Effect.Effect<
    { readonly sessions: ReadonlyArray<SessionSummary>; readonly next_cursor: SessionId | undefined },
    ListError
  >
  /** Runs a turn and waits for its end. The turn belongs to the session: interrupting the caller does not cancel it. */
  readonly send: (session: SessionId, input: TurnInput) => Effect.Effect<TurnOutcome, TurnError>
  /** Starts a turn and returns once `turn_started` is durable. */
  readonly submit: (session: SessionId, input: TurnInput) => Effect.Effect<Receipt, TurnError>
  /**
   * `send` under an `Idempotency-Key` kept in the session's journal (`Keyed`); keys expire after
   * `BRAIN_REQUEST_RETENTION_SECS`. A session holds at most `BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS`
   * keys: at the bound a new key is refused `Overloaded` before anything is journaled.
   */
  readonly sendKeyed: (session: SessionId, input: TurnInput, request: TurnRequest) => Effect.Effect<Keyed<TurnOutcome>, KeyedTurnError>
  /** `submit` under an `Idempotency-Key` kept in the session's journal (`Keyed`), bounded as `sendKeyed`. */
  readonly submitKeyed: (session: SessionId, input: TurnInput, request: TurnRequest) => Effect.Effect<Keyed<Receipt>, KeyedTurnError>
  /** Cancels the running turn, if any, and waits until it is closed. */
  readonly interrupt: (session: SessionId) => Effect.Effect<SessionSummary, SessionStorageError>
  /** Waits for active work, then records the ending. Meanwhile no turn starts: a send or submit is refused `SessionBusy` until the ending is recorded, `SessionEnded` from then on. */
  readonly end: (session: SessionId) => Effect.Effect<SessionSummary, EndError>
  /**
   * Removes an ended or failed session. `keep` is given the keyed sends and submits its journal
   * still answers, after the session is admitted for deletion and before its journal goes; a
   * failure of `keep` fails the delete and leaves the journal in place.
   */
  readonly delete: <E = never>(
    session: SessionId,
    keep?: (requests: ReadonlyArray<KeptRequest>) => Effect.Effect<void, E>
  ) => Effect.Effect<void, DeleteError | E>
  readonly transcript: (session: SessionId) => Effect.Effect<TranscriptView, SessionStorageError>
  /** A page of Events; a cursor past the last sequence is refused (`invalid_request`, details `{last_sequence}`). */
  readonly events: (session: SessionId, options: { readonly after: number; readonly limit: number }) => Effect.Effect<EventPage, SessionStorageError>
  /**
   * The public Events after `after`, then live ones as they commit, as SSE, without gaps or
   * duplicates. Ends after the session's end; a reader that falls too far behind is cut off and
   * resumes by cursor. The subscription lasts as long as the scope. Refused (`overloaded`,
   * retryable) beyond the subscriber limits.
   */
  readonly follow: (session: SessionId, after: number) => Effect.Effect<Following, FollowError, Scope.Scope>
  /** How many actors are in memory (warm), for tests and metrics. */
  readonly warm: Effect.Effect<number>
  /**
   * Waits until the session runs no turn in this process: the turn running now, if any, has
   * closed, its claim on the session and its share of the working memory given back, so that a
   * send is admitted at once. Opens nothing, reads nothing; unbounded (bound it with a timeout).
   * A session's status reads `idle` a little earlier, once the turn's closing records are in.
   */
  readonly whenIdle: (session: SessionId) => Effect.Effect<void>
  /**
   * A graceful stop's drain: admits no create, end, delete, send or submit from now on (each is
   * refused `overloaded`, having done nothing), starts no turn (a send or submit taken before it
   * that has not started its turn is refused so, having written nothing; a keyed one whose answer
   * is stored is still answered), and waits until each request in flight has answered and every
   * running turn has closed.
   */
  readonly drain: Effect.Effect<void>
  /**
   * Cancels every running turn as `interrupted` and interrupts every create, end and delete in
   * flight (a stop past its drain deadline: the Environment step in flight is abandoned, recorded
   * `interrupted`, and nothing more is sent), and waits for them to close and answer.
   */
  readonly interruptAll: Effect.Effect<void>
  /**
   * A graceful stop's last step, once the drain is over: writes the checkpoint of each session kept
   * warm (`BRAIN_SESSION_IDLE_TTL_MS`) that is due one, as its release would have, so that its next
   * open folds from it rather than from its journal's start. Answers how many were written.
   * Unbounded: the caller bounds it (a checkpoint cut short leaves the one before it).
   */
  readonly checkpointWarm: Effect.Effect<number>
}

export class Sessions extends Context.Tag("brain/Sessions")<Sessions, SessionsShape>() {}
