/**
 * The Sessions registry. Each session has at most one in-memory cell (its actor), opened on
 * demand; concurrent first accesses share one open. The first access of any kind in this process
 * checks the journal for work a stopped process left open and records its recovery. Turns run in
 * fibers owned by the registry, not by callers. Cells are released when unused unless an idle TTL
 * keeps them warm. Startup reads nothing.
 */
import { Clock, Deferred, Duration, Effect, Exit, FiberId, FiberMap, FiberSet, Layer } from "effect"
import { failure, type Failure } from "../domain/Failure.js"
import { mintSessionId, type SessionId } from "../domain/Ids.js"
import type { SessionStatus } from "../domain/Projection.js"
import { needsRecovery, recoveryEntries } from "../domain/Recovery.js"
import { checkPayload, entry, type Entry } from "../domain/Records.js"
import { Agentloops } from "../services/Agentloop.js"
import { EffectFence } from "../services/EffectFence.js"
import { Journal, type JournalAppendError, type JournalReadError, type SessionAlreadyExists } from "../services/Journal.js"
import { Models } from "../services/Models.js"
import { Projection } from "../services/Projection.js"
import { ServerConfig } from "../services/ServerConfig.js"
import {
  SessionError,
  Sessions,
  type SessionsShape,
  type SessionSummary,
  type TurnOutcome
} from "../services/Sessions.js"
import { Tools } from "../services/Tools.js"
import { type CancelReason, Cell, commit, type RunningTurn } from "./sessions/Cell.js"
import { readEvents } from "./sessions/Events.js"
import type { HostDeps } from "./sessions/Host.js"
import * as LiveFeeds from "./sessions/LiveFeeds.js"
import { runTurn } from "./sessions/Turn.js"

/** Records folded since the last checkpoint before a released cell writes a new one. */
const CHECKPOINT_EVERY_RECORDS = 256

const refuse = (f: Failure) => new SessionError({ failure: f })

const fromJournal = (e: JournalReadError | JournalAppendError | SessionAlreadyExists): SessionError =>
  refuse(
    e._tag === "SessionNotFound"
      ? failure("not_found", "no such session")
      : e._tag === "JournalCorrupt"
      ? failure("journal_corrupt", e.message)
      : e._tag === "RecordRejected"
      ? failure("invalid_request", e.reason)
      : e._tag === "SessionAlreadyExists"
      ? failure("conflict", e.message)
      : failure("journal_write_failed", e.message, { ambiguous: true })
  )

export const make = Effect.gen(function*() {
  const journal = yield* Journal
  const projection = yield* Projection
  const config = yield* ServerConfig
  const agentloops = yield* Agentloops
  const deps: HostDeps = { journal, fence: yield* EffectFence, models: yield* Models, tools: yield* Tools, config }

  const cells = new Map<SessionId, Deferred.Deferred<Cell, SessionError>>()
  /** Sessions checked for interrupted work by this process. */
  const checked = new Set<SessionId>()
  const checkpointedAt = new Map<SessionId, number>()
  const turns = yield* FiberSet.make<TurnOutcome>()
  const timers = yield* FiberMap.make<SessionId>()
  const running = new Set<RunningTurn>()
  const feeds = yield* LiveFeeds.make(journal, config, fromJournal)

  // Wall deadlines (BRAIN_MAX_TURN_SECS): one fiber for all turns rather than a timer per turn.
  // The limit is the same for every turn, so deadlines arrive in start order: the Map's first entry
  // is always the next one due.
  const deadlines = new Map<RunningTurn, number>()
  let wakeDeadlines: Deferred.Deferred<void> | undefined
  yield* Effect.forkScoped(Effect.gen(function*() {
    for (;;) {
      const head = deadlines.entries().next()
      if (head.done) {
        wakeDeadlines = yield* Deferred.make<void>()
        yield* Deferred.await(wakeDeadlines)
        continue
      }
      const now = yield* Clock.currentTimeMillis
      if (head.value[1] > now) {
        yield* Effect.sleep(Duration.millis(head.value[1] - now))
        continue
      }
      for (const [turn, due] of deadlines) {
        if (due > now) break
        deadlines.delete(turn)
        yield* Deferred.succeed(turn.cancel, "timeout")
      }
    }
  }))

  /** Loads the state, recovering interrupted work first if this process has not yet looked. */
  const load = (session: SessionId) =>
    Effect.gen(function*() {
      const { state } = yield* projection.state(session)
      // A journal with no creation record is a create that never finished: nobody was given its id.
      if (state.status === "none") {
        return yield* Effect.fail(refuse(failure("not_found", "no such session")))
      }
      const ttl = state.configuration?.idle_ttl_ms ?? config.sessionIdleTtlMs
      const cell = new Cell(session, state, ttl)
      if (!checked.has(session) && needsRecovery(state)) {
        yield* commit(journal, cell, recoveryEntries(state))
      }
      checked.add(session)
      return cell
    }).pipe(Effect.catchTags({
      SessionNotFound: (e) => Effect.fail(fromJournal(e)),
      JournalCorrupt: (e) => Effect.fail(fromJournal(e)),
      JournalWriteFailed: (e) => Effect.fail(fromJournal(e)),
      RecordRejected: (e) => Effect.fail(fromJournal(e))
    }))

  /** The session's cell, opened on demand and shared; the caller must `release` it. */
  const acquire = (session: SessionId): Effect.Effect<Cell, SessionError> =>
    Effect.suspend(() => {
      const existing = cells.get(session)
      const opened = existing ?? Deferred.unsafeMake<Cell, SessionError>(FiberId.none)
      if (!existing) cells.set(session, opened)
      const open = existing
        ? Effect.void
        : load(session).pipe(
          Effect.exit,
          Effect.tap((exit) => {
            if (Exit.isFailure(exit)) cells.delete(session)
            return Deferred.done(opened, exit)
          }),
          Effect.uninterruptible
        )
      return Effect.zipRight(open, Deferred.await(opened)).pipe(
        Effect.tap((cell) => Effect.sync(() => void cell.users++)),
        Effect.tap(() => FiberMap.remove(timers, session))
      )
    })

  /** Drops a use; an unused cell with no turn is released now, after its TTL, or kept (TTL 0). */
  const release = (cell: Cell) =>
    Effect.gen(function*() {
      cell.users--
      if (cell.users > 0 || cell.running) return
      const evict = Effect.gen(function*() {
        if (cell.users > 0 || cell.running) return
        const current = cells.get(cell.session)
        if (current && (yield* Deferred.poll(current))._tag === "Some") cells.delete(cell.session)
        yield* projection.remember(cell.session, cell.state)
        const last = checkpointedAt.get(cell.session) ?? 0
        if (cell.state.lastSequence - last >= CHECKPOINT_EVERY_RECORDS) {
          checkpointedAt.set(cell.session, cell.state.lastSequence)
          yield* Effect.ignore(projection.checkpoint(cell.session, cell.state))
        }
      })
      if (cell.idleTtlMs === undefined) return yield* evict
      if (cell.idleTtlMs === 0) return
      yield* FiberMap.run(timers, cell.session, Effect.interruptible(Effect.zipRight(Effect.sleep(Duration.millis(cell.idleTtlMs)), evict)))
    })

  const using = <A>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, SessionError>) =>
    Effect.acquireUseRelease(acquire(session), body, release)

  const summary = (cell: Cell): SessionSummary => ({
    session_id: cell.session,
    status: (cell.state.status === "none" ? "creating" : cell.state.status) as SessionStatus,
    last_sequence: cell.state.lastSequence
  })

  const write = (cell: Cell, entries: ReadonlyArray<Entry>) => Effect.mapError(commit(journal, cell, entries), fromJournal)

  /** Admits a turn: checks the state, then commits turn_started with activation_started. */
  const startTurn = (cell: Cell, input: { message: string }, mode: "send" | "submit") =>
    Effect.gen(function*() {
      const status = cell.state.status
      if (cell.ending || status === "ending" || status === "ended") {
        return yield* Effect.fail(refuse(failure("session_ended", "the session has ended")))
      }
      if (status === "failed") return yield* Effect.fail(refuse(failure("conflict", "the session's creation failed")))
      if (cell.running || status === "running") {
        return yield* Effect.fail(refuse(failure("session_busy", "a turn is running in this session", { retryable: true })))
      }
      if (status !== "idle") return yield* Effect.fail(refuse(failure("conflict", `the session is ${status}`)))
      const agentloop = cell.state.configuration!.agentloop
      const loop = yield* agentloops.resolve(agentloop).pipe(Effect.mapError((e) => refuse(e.failure)))
      const turn: RunningTurn = {
        sequence: 0,
        cancel: yield* Deferred.make<CancelReason>(),
        done: yield* Deferred.make<TurnOutcome>()
      }
      cell.running = turn // claimed before the commit, so a concurrent send is refused
      // The new activation sees the public Events from the previous activation's start on: what it
      // did, how it ended (including what recovery recorded for it), and what came after.
      const eventsAfter = Math.max(0, cell.state.lastActivation - 1)
      const committed = yield* Effect.either(
        write(cell, [entry("turn_started", { input, mode }), entry("activation_started", { agentloop })])
      )
      if (committed._tag === "Left") {
        cell.running = undefined
        // Anyone who saw the claim (interrupt, end) is waiting on it: answer them.
        yield* Deferred.succeed(turn.done, {
          ...summary(cell),
          turn: { sequence: 0, status: "failed", failure: committed.left.failure }
        })
        return yield* Effect.fail(committed.left)
      }
      const [turnSeq, activation] = committed.right
      const started: RunningTurn = { ...turn, sequence: turnSeq! }
      cell.running = started
      running.add(started)
      if (config.maxTurnMs > 0) {
        deadlines.set(started, (yield* Clock.currentTimeMillis) + config.maxTurnMs)
        if (wakeDeadlines) {
          Deferred.unsafeDone(wakeDeadlines, Effect.void)
          wakeDeadlines = undefined
        }
      }
      cell.users++ // the turn holds the cell until it closes
      // The turn's fiber belongs to the registry and is interruptible whatever the caller's
      // region (an idempotent request runs uninterruptibly so its answer is always recorded).
      yield* FiberSet.run(
        turns,
        Effect.interruptible(runTurn(deps, { cell, turn: started, activation: activation!, input, loop, eventsAfter })).pipe(
          Effect.tap((outcome) => Deferred.succeed(started.done, outcome)),
          Effect.ensuring(Effect.suspend(() => {
            cell.running = undefined
            running.delete(started)
            deadlines.delete(started)
            return release(cell)
          }))
        )
      )
      return started
    })

  const service: SessionsShape = {
    create: (request) =>
      Effect.gen(function*() {
        const agentloop = request.agentloop ?? "official"
        if (!(yield* agentloops.has(agentloop))) {
          return yield* Effect.fail(refuse(failure("invalid_request", `no agentloop ${JSON.stringify(agentloop)}`)))
        }
        if (request.environments && request.environments.length > 0) {
          return yield* Effect.fail(refuse(failure("invalid_request", "environments are not supported yet (they arrive with [5/7])")))
        }
        const configuration = { ...request, agentloop }
        // Refuse bad input before anything exists on disk.
        const refused = checkPayload("session_creation_started", { configuration }) ??
          (request.transcript?.length ? checkPayload("transcript_delta", { keep: 0, append: request.transcript }) : undefined)
        if (refused !== undefined) return yield* Effect.fail(refuse(failure("invalid_request", refused)))
        const session = yield* mintSessionId
        yield* journal.create(session).pipe(Effect.mapError(fromJournal))
        checked.add(session)
        const cell = new Cell(session, (yield* projection.state(session).pipe(Effect.mapError(fromJournal))).state, configuration.idle_ttl_ms ?? config.sessionIdleTtlMs)
        const opening: Array<Entry> = [entry("session_creation_started", { configuration })]
        if (request.transcript && request.transcript.length > 0) {
          opening.push(entry("transcript_delta", { keep: 0, append: request.transcript }))
        }
        const [first] = yield* write(cell, opening).pipe(
          // Nothing was recorded: leave no empty session behind.
          Effect.tapError(() => Effect.ignore(journal.remove(session)))
        )
        yield* write(cell, [entry("session_creation_ended", { sequence: first! })])
        const opened = Deferred.unsafeMake<Cell, SessionError>(FiberId.none)
        Deferred.unsafeDone(opened, Exit.succeed(cell))
        cells.set(session, opened)
        cell.users++
        yield* release(cell)
        return summary(cell)
      }),
    get: (session) => using(session, (cell) => Effect.succeed(summary(cell))),
    list: ({ after, limit }) =>
      Effect.gen(function*() {
        const ids = [...(yield* journal.list)].sort().filter((id) => after === undefined || id > after)
        const page = ids.slice(0, limit)
        const sessions: Array<SessionSummary> = []
        for (const id of page) {
          const s = yield* Effect.either(service.get(id))
          if (s._tag === "Right") sessions.push(s.right)
        }
        return { sessions, next_cursor: ids.length > limit ? page[page.length - 1] : undefined }
      }),
    send: (session, input) =>
      using(session, (cell) => Effect.flatMap(startTurn(cell, input, "send"), (turn) => Deferred.await(turn.done))),
    submit: (session, input) =>
      using(session, (cell) => Effect.map(startTurn(cell, input, "submit"), (turn) => ({ session_id: session, sequence: turn.sequence }))),
    interrupt: (session) =>
      using(session, (cell) =>
        Effect.gen(function*() {
          const turn = cell.running
          if (turn) {
            yield* Deferred.succeed(turn.cancel, "cancelled")
            yield* Deferred.await(turn.done)
          }
          return summary(cell)
        })),
    end: (session) =>
      using(session, (cell) =>
        Effect.gen(function*() {
          if (cell.state.status === "ended") return summary(cell)
          if (cell.state.status === "failed" || cell.state.status === "creating") {
            return yield* Effect.fail(refuse(failure("conflict", `the session is ${cell.state.status}`)))
          }
          cell.ending = true
          while (cell.running) yield* Deferred.await(cell.running.done)
          if ((cell.state.status as SessionStatus) === "ended") return summary(cell)
          const [started] = cell.state.ending !== undefined ? [cell.state.ending] : yield* write(cell, [entry("session_end_started", {})])
          // Environments are detached here once they exist ([5/7]); ending is recorded first.
          yield* write(cell, [entry("session_ended", { sequence: started! })])
          return summary(cell)
        })),
    delete: (session) =>
      Effect.gen(function*() {
        yield* using(session, (cell) =>
          cell.state.status === "ended" || cell.state.status === "failed"
            ? Effect.void
            : Effect.fail(refuse(failure("conflict", "only an ended or failed session can be deleted"))))
        cells.delete(session)
        yield* FiberMap.remove(timers, session)
        yield* projection.forget(session)
        yield* journal.remove(session).pipe(Effect.mapError(fromJournal))
      }),
    transcript: (session) =>
      using(session, (cell) =>
        Effect.succeed({ messages: cell.state.transcript, through_sequence: cell.state.transcriptThrough })),
    events: (session, { after, limit }) =>
      Effect.flatMap(using(session, (cell) => Effect.succeed(cell.state)), (state) =>
        readEvents(journal, session, state, after, limit).pipe(
          Effect.mapError((e) => (e._tag === "SessionError" ? e : fromJournal(e)))
        )),
    follow: (session, after) => feeds.follow(session, after, using(session, (cell) => Effect.succeed(cell.state))),
    warm: Effect.sync(() => cells.size),
    drain: Effect.suspend(() => Effect.forEach([...running], (t) => Deferred.await(t.done), { discard: true })),
    interruptAll: Effect.suspend(() =>
      Effect.forEach(
        [...running],
        (t) => Effect.zipRight(Deferred.succeed(t.cancel, "interrupted"), Deferred.await(t.done)),
        { concurrency: "unbounded", discard: true }
      ))
  }
  return service
})

export const layer = Layer.scoped(Sessions, make)
