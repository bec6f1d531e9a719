/**
 * Hosts: the registry of application processes that run `host` Environments' tools
 * (docs/environments.md, "The `host` driver").
 *
 * - A host registers once and gets an id and a token. Registrations survive a restart (a session's
 *   configuration names the host id); only a hash of the token is kept.
 * - A host holds at most one command stream. Calls go out on it once and are never replayed: a
 *   stream that drops makes its calls in flight uncertain, and a new stream carries only new
 *   commands. A call made while no stream is open is not sent.
 * - A host answers a call with a result and may commit the call's Events before it; both name the
 *   call by `{session_id, sequence}` (its `tool_call_started`) and are refused for a call that is
 *   not in flight on that host.
 * - A registration that has had no command stream, and that no session still existing names, for
 *   the idle expiry (BRAIN_HOST_IDLE_EXPIRY_SECS) is removed as its host's own removal would remove
 *   it. A session holds the hosts it names from before its first record until it is deleted, so no
 *   session can name an expired host.
 */
import { Context, type Effect } from "effect"
import type { Readable } from "node:stream"
import type { Conflict, Internal, InvalidRequest, JournalWriteFailed, Overloaded, PayloadTooLarge, SessionStorageError, Unauthorized } from "../domain/Errors.js"
import type { HostId, SessionId } from "../domain/Ids.js"
import type { CallAnswer, CancelAnswer, CancelRequest, EnvironmentCall, EnvironmentNotSent, EnvironmentUncertain, SentCall } from "./Environments.js"

export interface Registered {
  readonly host_id: HostId
  /** Shown once: never stored, never logged. */
  readonly token: string
}

/** A host's command stream: SSE bytes, read as the socket drains. Destroying it drops the connection. */
export interface CommandStream {
  readonly body: Readable
  /** Ends the stream (the server is stopping); its calls in flight become uncertain. */
  readonly stop: Effect.Effect<void>
}

/** What a host posted for a call: its answer, or (after a cancel) that it stopped. */
export type HostAnswer = { readonly ok: unknown } | { readonly error: unknown } | { readonly stopped: true }

export interface CallName {
  readonly session: SessionId
  readonly sequence: number
}

/** A registration refused: past MAX_HOSTS, or not stored. */
export type RegisterError = Overloaded | Internal
/**
 * A result refused: the call is not in flight (or was not cancelled, for `stopped`), or its value is
 * too large; or taken, but the call's outcome could not be recorded durably (`journal_write_failed`).
 */
export type ResultError = Conflict | PayloadTooLarge | JournalWriteFailed
/**
 * An Event refused: the call is not in flight or takes no Events, a reserved kind, the turn's byte
 * budget, or the session's storage.
 */
export type HostEventError = Conflict | InvalidRequest | PayloadTooLarge | SessionStorageError | Internal

export interface HostsShape {
  /**
   * Registers a new host, durably before it answers. Refused (`overloaded`) past MAX_HOSTS, counting
   * the registrations still being written.
   */
  readonly register: Effect.Effect<Registered, RegisterError>
  /**
   * Removes `host`'s registration, durably before it answers: its command stream ends (its calls
   * in flight become `unknown`), its token authorizes nothing more, and later calls to it are not
   * sent (`host_unknown`). A removed host is not known again, after a restart too.
   */
  readonly unregister: (host: HostId) => Effect.Effect<void, Internal>
  readonly isRegistered: (host: string) => boolean
  /**
   * Records, durably, that `session` names `host`: from then until the session is deleted the
   * registration does not expire. Made before the session's first record; refused
   * (`invalid_request`) when the host is no longer registered, and nothing is recorded then.
   */
  readonly use: (host: HostId, session: SessionId) => Effect.Effect<void, InvalidRequest | Internal>
  /** `session` is deleted (or its creation left nothing behind): it no longer holds `host`. */
  readonly release: (host: HostId, session: SessionId) => Effect.Effect<void>
  /**
   * Removes every registration idle past the expiry (no command stream for that long) that no
   * existing session names, each durably; answers their ids. Also run on a schedule, and by a
   * registration at MAX_HOSTS.
   */
  readonly expire: Effect.Effect<ReadonlyArray<HostId>>
  /**
   * Whether `token` is `host`'s own (compared as digests in constant time). False for an unknown
   * host, and for one whose registration has come due for expiry (removed or not yet).
   */
  readonly authorize: (host: string, token: string) => boolean
  /**
   * Opens `host`'s command stream, replacing (and dropping) the one it had, once the opening is
   * recorded (the idle clock counts from the last stream's close). Refused (`unauthorized`) for a
   * host removed meanwhile.
   */
  readonly connect: (host: HostId) => Effect.Effect<CommandStream, Unauthorized | Internal>
  /**
   * Settles a call in flight on `host` with the host's answer; answers once the call's outcome
   * record is durable (when a session records one), or fails `journal_write_failed` when it could
   * not be recorded.
   */
  readonly result: (host: HostId, call: CallName, answer: HostAnswer) => Effect.Effect<void, ResultError>
  /**
   * Settles several calls in flight on `host` at once, all or none: a refusal of any (its
   * `details.index` names it; a call named twice is `invalid_request`) settles none.
   */
  readonly results: (
    host: HostId,
    items: ReadonlyArray<{ readonly call: CallName; readonly answer: HostAnswer }>
  ) => Effect.Effect<void, ResultError | InvalidRequest>
  /** Commits a tool-origin Event of a call in flight on `host`; answers its sequence. */
  readonly event: (host: HostId, call: CallName, kind: string, payload: unknown) => Effect.Effect<number, HostEventError>
  /** Sends a call to `host` now, its answer to come by callback (the `host` driver's `send`). */
  readonly send: (host: string, call: EnvironmentCall) => SentCall<EnvironmentNotSent | EnvironmentUncertain> | EnvironmentNotSent
  /** Sends a call to `host` and waits for its answer (the `host` driver's `call`). */
  readonly call: (host: string, call: EnvironmentCall) => Effect.Effect<CallAnswer, EnvironmentNotSent | EnvironmentUncertain>
  /** Sends a cancel for a call in flight and waits up to the grace for the host to confirm it stopped. */
  readonly cancel: (host: string, request: CancelRequest) => Effect.Effect<CancelAnswer>
  /** Ends every command stream (the server is stopping). */
  readonly stopAll: Effect.Effect<void>
}

export class Hosts extends Context.Tag("brain/Hosts")<Hosts, HostsShape>() {}
