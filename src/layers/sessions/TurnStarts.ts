/**
 * Starting a turn on a session already open and its request admitted (TurnAdmission.ts): whether
 * the session can start one now (`refusedStart`), the room for a keyed request's key
 * (BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS), the room on disk for it (StorageRoom.ts), the turn's opening records, and its fiber, owned by the
 * service's FiberSet, which answers whoever waits for the turn when it closes.
 */
import { Effect, FiberSet, HashMap } from "effect"
import { AgentloopFailed, Conflict, Overloaded, SessionBusy, SessionEnded, toFailure } from "../../domain/Errors.js"
import { failure } from "../../domain/Failure.js"
import { SESSION_KEYS_PRUNE_MS } from "../../domain/Limits.js"
import type { TurnInput } from "../../domain/Messages.js"
import { pruneRequests, requestId } from "../../domain/Requests.js"
import { entry, type Entry } from "../../domain/Records.js"
import type { KeyedTurnError, TurnError, TurnOutcome, TurnRequest } from "../../services/Sessions.js"
import { Once } from "../Waits.js"
import { cancelSignal, type Cell, flushOpening, type RunningTurn, stage } from "./Cell.js"
import { inputTooLarge } from "./InputBytes.js"
import { fromJournal } from "./FromJournal.js"
import { sessionKeysFull } from "./Requests.js"
import { beingCreated, type Shared, stopping, summary, type TurnHold } from "./Shared.js"
import { runTurn } from "./Turn.js"

export interface TurnStarts {
  /**
   * Admits a turn: checks the state, then commits turn_started with activation_started (and a
   * keyed request's `request_claimed`: its key is claimed exactly when the turn starts). Only a
   * keyed request can be refused `overloaded` (its session's keys at their bound).
   */
  readonly startTurn: {
    (cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest | undefined, held: TurnHold): Effect.Effect<RunningTurn, TurnError>
    (cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest, held: TurnHold): Effect.Effect<RunningTurn, KeyedTurnError>
  }
  /** Why the session cannot start a turn now, if it cannot (the first: the drain has begun). */
  readonly refusedStart: (cell: Cell) => Overloaded | SessionEnded | Conflict | SessionBusy | undefined
}

export const makeTurnStarts = (shared: Shared): TurnStarts => {
  const { admitted, agentloops, config, deadlines, deps, journal, open, release, room, running, runFork, turns, write } = shared

  const refusedStart = (cell: Cell): Overloaded | SessionEnded | Conflict | SessionBusy | undefined => {
    if (admitted.closed) return stopping()
    const status = cell.state.status
    // Only an ending that is recorded refuses for good: a refusal kept under a key must stay true after a crash.
    if (status === "ending" || status === "ended") return new SessionEnded({ message: "the session has ended" })
    if (status === "failed") return new Conflict({ message: "the session's creation failed" })
    if (status === "creating") return beingCreated()
    if (cell.endsWaiting > 0) {
      return new SessionBusy({
        message: cell.running !== undefined
          ? "a turn is running in this session, and an end of the session is waiting for it: no new turn starts before the ending is recorded"
          : "an end of this session is under way: no new turn starts before the ending is recorded"
      })
    }
    if (cell.running || status === "running") return new SessionBusy({ message: "a turn is running in this session" })
    if (status !== "idle") return new Conflict({ message: `the session is ${status}` })
    return undefined
  }

  /**
   * How many keys the session holds when a keyed request's key does not fit in it
   * (BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS), or undefined when it fits. A key the session holds
   * (expired, not yet pruned) is claimed again in its place; a new one needs room, which a full
   * session makes by dropping the keys SESSION_KEYS_PRUNE_MS past their expiry (an eighth of
   * retention, when that is sooner).
   */
  const noRoomFor = (cell: Cell, id: string): number | undefined => {
    const maxKeys = config.maxSessionIdempotencyKeys
    if (HashMap.size(cell.state.requests) < maxKeys || HashMap.has(cell.state.requests, id)) return undefined
    const retentionMs = config.requestRetentionMs
    const now = deps.clock.unsafeCurrentTimeMillis()
    cell.state = pruneRequests(cell.state, now, retentionMs, Math.min(retentionMs / 8, SESSION_KEYS_PRUNE_MS))
    const keys = HashMap.size(cell.state.requests)
    return keys < maxKeys ? undefined : keys
  }

  let keysFullSaidAtMs = Number.NEGATIVE_INFINITY
  /** A full session's refusal, said in the log at most once per SESSION_KEYS_PRUNE_MS for all sessions (they may be refusing a flood). */
  const refuseFull = (cell: Cell, keys: number) => {
    const full = sessionKeysFull(keys, config.maxSessionIdempotencyKeys)
    const now = deps.clock.unsafeCurrentTimeMillis()
    if (now - keysFullSaidAtMs < SESSION_KEYS_PRUNE_MS && now >= keysFullSaidAtMs) return Effect.fail(full)
    keysFullSaidAtMs = now
    return Effect.zipRight(
      Effect.logWarning(
        `the session ${cell.session} holds ${keys} Idempotency-Keys, its maximum (BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS is ${config.maxSessionIdempotencyKeys}): its keyed sends and submits with a new key are refused with 503 overloaded until keys expire (BRAIN_REQUEST_RETENTION_SECS); keys it holds still answer. Said at most once a minute, whichever sessions refuse`
      ),
      Effect.fail(full)
    )
  }

  function startTurn(cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest | undefined, held: TurnHold): Effect.Effect<RunningTurn, TurnError>
  function startTurn(cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest, held: TurnHold): Effect.Effect<RunningTurn, KeyedTurnError>
  function startTurn(cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest | undefined, held: TurnHold): Effect.Effect<RunningTurn, KeyedTurnError> {
    return startTurnOf(cell, input, mode, request, held)
  }

  const startTurnOf = Effect.fnUntraced(function*(cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest | undefined, held: TurnHold) {
    const tooLarge = inputTooLarge(input, config.maxInputBytes)
    if (tooLarge !== undefined) return yield* Effect.fail(tooLarge)
    const refused = refusedStart(cell)
    if (refused !== undefined) return yield* Effect.fail(refused)
    // A journal at BRAIN_MAX_SESSION_JOURNAL_BYTES, a disk below BRAIN_MIN_FREE_DISK_BYTES: refused, nothing written.
    const journalBytes = yield* room.forTurn(cell)
    const agentloop = cell.state.configuration!.agentloop
    const loop = yield* agentloops.resolve(agentloop).pipe(
      Effect.mapError((e) => new AgentloopFailed({ message: e.failure.message, retryable: e.failure.retryable }))
    )
    // Resolving may have waited (an uploaded module read from the store) while another start or
    // an end went ahead: the session is checked again, and claimed in the same synchronous step.
    const changed = refusedStart(cell)
    if (changed !== undefined) return yield* Effect.fail(changed)
    // So is the room for a key: no other start passes `refusedStart` until this turn is over, and
    // by then its `request_claimed` is folded into the state (or was never written).
    const heldKeys = request === undefined ? undefined : noRoomFor(cell, requestId(mode, request.key))
    if (heldKeys !== undefined) return yield* refuseFull(cell, heldKeys)
    const turn: RunningTurn = {
      sequence: 0,
      done: new Once<TurnOutcome>(),
      closed: new Once<void>(),
      signal: cancelSignal(),
      ...(request && mode === "send" ? { answers: request.key } : {})
    }
    cell.running = turn // claimed before the commit, so a concurrent send is refused
    // The new activation sees the public Events from the previous activation's start on: what it
    // did, how it ended (including what recovery recorded for it), and what came after; or, for a
    // loop that asks, from the previous activation's end on: how it ended and what came after.
    const eventsAfter = Math.max(0, (loop.eventsFromEnd === true ? cell.state.lastActivationEnd : cell.state.lastActivation) - 1)
    const starting: Array<Entry> = [entry("turn_started", { input, mode }), entry("activation_started", { agentloop })]
    if (request) {
      const at_ms = deps.clock.unsafeCurrentTimeMillis()
      starting.push(entry("request_claimed", { mode, key: request.key, request_hash: request.hash, at_ms }))
    }
    // A sync send promises its client nothing before the outcome, and a turn's start is no effect:
    // its opening is staged, and is written with the turn's first write (its first effect's
    // start, or its close). A submit's receipt names a durable turn_started: committed now.
    const committed = yield* Effect.either(
      mode === "send" ? Effect.mapError(stage(journal, cell, starting), fromJournal) : write(cell, starting)
    )
    if (committed._tag === "Left") {
      cell.running = undefined
      // Anyone who saw the claim (interrupt, end) is waiting on it: answer them.
      turn.done.give({
        ...summary(cell),
        turn: { sequence: 0, status: "failed", failure: toFailure(committed.left) }
      })
      turn.closed.give()
      return yield* Effect.fail(committed.left)
    }
    const [turnSeq, activation] = committed.right
    // Staged, the opening waits for the turn's first write at most BRAIN_STAGED_OPENING_MS: a
    // turn that runs longer without one (a loop computing, reading) is durably started, so a
    // crash then records it interrupted and its key claimed, as for any turn that ran.
    const flushLater = cell.opening === undefined ? undefined : setTimeout(() => runFork(flushOpening(journal, cell)), config.stagedOpeningMs)
    const started: RunningTurn = { ...turn, sequence: turnSeq! }
    cell.running = started
    running.add(started)
    open.set(cell.session, started)
    if (config.maxTurnMs > 0) deadlines.add(started, deps.clock.unsafeCurrentTimeMillis() + config.maxTurnMs)
    cell.users++ // the turn holds the cell until it closes
    held.keep() // the turn's fiber gives it back when the turn closes
    // The turn's fiber belongs to the registry and is interruptible whatever the caller's
    // region (an idempotent request runs uninterruptibly so its answer is always recorded).
    yield* FiberSet.run(
      turns,
      Effect.interruptible(runTurn(deps, { cell, turn: started, activation: activation!, input, loop, eventsAfter, journalBytes })).pipe(
        Effect.tap((outcome) => void started.done.give(outcome)),
        Effect.ensuring(Effect.suspend(() => {
          // Interrupted before it answered (its runtime closing past the wait of the finalizer at
          // the end of SessionsJournal's `make`): whoever waits is told so, not left waiting. Its
          // closing records may or may not have landed; if not, the next start's recovery records
          // it interrupted.
          if (!started.done.isDone) {
            started.done.give({
              ...summary(cell),
              turn: {
                sequence: started.sequence,
                status: "failed",
                failure: failure("interrupted", "the runtime stopped before the turn closed: whether its end was recorded is not known", { ambiguous: true })
              }
            })
          }
          clearTimeout(flushLater)
          held.release()
          cell.running = undefined
          cell.opening = undefined
          running.delete(started)
          deadlines.remove(started)
          // Closed only once the release is over, whatever it waited on (an evicted cell's checkpoint).
          // A healthy cell's release comes after a yield, so that the request given the outcome
          // above answers its client first: its own release of the cell then finds the turn's use
          // still held, and the eviction (the state to the projection's cache, in one synchronous
          // step, then a checkpoint when due) is done here, after the answer is written. A broken
          // or deleted cell is released first, as before: its eviction (a broken one's journal
          // reset) is over before the answer, so a retry once answered finds the session recovered.
          const releasing = cell.broken || cell.deleted ? release(cell) : Effect.zipRight(Effect.yieldNow(), release(cell))
          return Effect.ensuring(releasing, Effect.sync(() => {
            if (open.get(cell.session) === started) open.delete(cell.session)
            started.closed.give()
          }))
        }))
      )
    )
    return started
  })

  return { startTurn, refusedStart }
}
