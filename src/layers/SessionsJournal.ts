/**
 * The Sessions service: creation, turns, lifecycle and reads over the registry of session cells
 * (sessions/Registry.ts: open on demand, recovery on first access, release, delete). Turns run in
 * fibers owned by this service, not by callers. Startup reads nothing.
 */
import { Duration, Effect, Either, Exit, FiberSet, HashMap, Layer, Option, Runtime } from "effect"
import { admitEnvironments, type AdmittedEnvironment, noEnvironmentBindings } from "../domain/Environment.js"
import { EnvironmentBindings, Environments } from "../services/Environments.js"
import { Hosts } from "../services/Hosts.js"
import { runStep } from "./sessions/EnvironmentSteps.js"
import { fromFence, setUpEnvironments, tearDown } from "./sessions/EnvironmentLifecycle.js"
import {
  AgentloopFailed,
  Conflict,
  CreationFailed,
  Internal,
  InvalidRequest,
  JournalWriteFailed,
  Overloaded,
  type SessionStorageError,
  SessionBusy,
  SessionEnded,
  toFailure
} from "../domain/Errors.js"
import { failure } from "../domain/Failure.js"
import { type HostId, mintSessionId, type SessionId } from "../domain/Ids.js"
import { CREATE_HEAP_PER_BODY_BYTE, OPEN_HEAP_PER_BYTE, SESSION_KEYS_PRUNE_MS, TURN_HEAP_PER_INPUT_BYTE, WORKING_MEMORY_WAIT_MS } from "../domain/Limits.js"
import { empty, liveRequest, pruneRequests, requestId, type SessionState, type SessionStatus } from "../domain/Projection.js"
import { checkPayload, entry, type Entry } from "../domain/Records.js"
import { type AgentloopStoreFailed, Agentloops } from "../services/Agentloop.js"
import { carriedBytes, refusalText, transcriptRoom } from "./sessions/TranscriptRoom.js"
import { noUnanswered } from "../domain/TranscriptTail.js"
import { EffectFence } from "../services/EffectFence.js"
import { Journal, type JournalListError } from "../services/Journal.js"
import { type RecordedBinding, toolNameRule } from "../domain/ModelBinding.js"
import { ModelBindings, noBindings } from "../services/ModelBindings.js"
import { Models } from "../services/Models.js"
import { Projection } from "../services/Projection.js"
import { interruptWaitMs, ServerConfig } from "../services/ServerConfig.js"
import {
  type EndError,
  type Keyed,
  type KeyedTurnError,
  type KeptRequest,
  type ListError,
  type Receipt,
  Sessions,
  type SessionsShape,
  type SessionSummary,
  type TurnError,
  type TurnOutcome,
  type TurnRequest
} from "../services/Sessions.js"
import { Telemetry } from "../services/Telemetry.js"
import { Tools } from "../services/Tools.js"
import { memoryBudget, workingMemoryBytes } from "./MemoryBudget.js"
import { type Held, WorkingMemory } from "./WorkingMemory.js"
import { cancelSignal, cancelTurn, Cell, commit, flushOpening, type RunningTurn, stage } from "./sessions/Cell.js"
import { Once } from "./Waits.js"
import { Admitted } from "./sessions/Admitted.js"
import { makeDeadlines } from "./sessions/Deadlines.js"
import { readEvents } from "./sessions/Events.js"
import type { HostDeps } from "./sessions/Host.js"
import type { TurnInput } from "../domain/Messages.js"
import { inputTooLarge, inputWeight, jsonWeight } from "./sessions/InputBytes.js"
import { fromJournal, makeRegistry } from "./sessions/Registry.js"
import * as LiveFeeds from "./sessions/LiveFeeds.js"
import { keptRequests, seenSend, seenSubmit, sessionKeysFull } from "./sessions/Requests.js"
import { runTurn } from "./sessions/Turn.js"

/** A turn's share of the working memory: `keep` hands it to the turn's fiber, which gives it back when the turn closes. */
interface TurnHold extends Held {
  readonly keep: () => void
}

/** The hosts a session's Environments name, each once. */
const namedHosts = (environments: ReadonlyArray<AdmittedEnvironment>): ReadonlyArray<HostId> => [
  ...new Set(environments.flatMap((e) => (e.driver === "host" ? [e.host] : [])))
]

/** A create refused for the field at `path` (DESIGN §7: `details` lists each issue with its field's path). */
const refusedAt = (message: string, path: ReadonlyArray<string | number>) => new InvalidRequest({ message, details: [{ path, message }] })

export const make = Effect.gen(function*() {
  const journal = yield* Journal
  const projection = yield* Projection
  const config = yield* ServerConfig
  const agentloops = yield* Agentloops
  const bindings = Option.getOrElse(yield* Effect.serviceOption(ModelBindings), () => noBindings)
  const deps: { -readonly [K in keyof HostDeps]: HostDeps[K] } = {
    journal,
    fence: yield* EffectFence,
    models: yield* Models,
    tools: yield* Tools,
    config,
    clock: yield* Effect.clock,
    // Optional like the bindings: a runtime without a sink drops the loops' telemetry.
    telemetry: Option.getOrUndefined(yield* Effect.serviceOption(Telemetry)),
    // Optional: a runtime without the http driver fails an http Environment's steps unsent.
    environments: Option.getOrUndefined(yield* Effect.serviceOption(Environments))
  }
  const environmentBindings = Option.getOrElse(yield* Effect.serviceOption(EnvironmentBindings), () => noEnvironmentBindings)
  // Optional: without the host registry no host is registered, and a `host` Environment is refused at create.
  const hosts = Option.getOrUndefined(yield* Effect.serviceOption(Hosts))
  const steps = { fence: deps.fence, environments: deps.environments }
  const workingMemory = new WorkingMemory(workingMemoryBytes(config.workingMemoryBytes), WORKING_MEMORY_WAIT_MS)
  const registry = yield* makeRegistry({
    journal,
    projection,
    idleTtlMs: config.sessionIdleTtlMs,
    warmBytes: memoryBudget(config.cacheBytes).warmBytes,
    viewBytes: memoryBudget(config.cacheBytes).viewBytes,
    workingMemory
  })
  const turns = yield* FiberSet.make<TurnOutcome>()
  const running = new Set<RunningTurn>()
  // Creates, ends, deletes, sends and submits in flight: a stop drains them, and past its deadline stops them.
  const admitted = new Admitted()
  /** Refused once the drain has begun: a request taken just before it that reaches here after it does nothing. */
  const stopping = () => new Overloaded({ message: "the server is stopping and admits no new work" })
  /** Ends a turn's wait for its share of the working memory once the drain has begun: it would start no turn. */
  const cutByDrain: Effect.Effect<never, Overloaded> = Effect.zipRight(admitted.closing, Effect.failSync(stopping))
  /**
   * Cancels every running turn as `interrupted` and interrupts every create, end and delete in
   * flight (and ends a keyed send's or submit's wait for its share of the working memory), and
   * waits until each turn has closed and each of those has answered.
   */
  const interruptAll = Effect.suspend(() =>
    Effect.zip(
      Effect.forEach(
        [...running],
        (t) => Effect.zipRight(cancelTurn(t, "interrupted"), t.done.await),
        { concurrency: "unbounded", discard: true }
      ),
      admitted.interruptAll,
      { concurrent: true }
    )
  )
  const feeds = yield* LiveFeeds.make(journal, config, fromJournal)
  deps.live = { delta: feeds.delta }

  // Wall deadlines (BRAIN_MAX_TURN_SECS) arrive as a cancel with reason "timeout".
  const deadlines = yield* makeDeadlines((turn) => cancelTurn(turn, "timeout"))

  const using = <A, E>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, E>) => registry.using(session, body)
  /** `using` for a turn's request, which holds the working memory its session's open takes (`admitTurn`). */
  const admittedUsing = <A, E>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, E>) => registry.using(session, body, true)
  /** A read: it neither activates the session nor keeps it warm (Registry.reading). */
  const reading = <A, E>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, E>) => registry.reading(session, body)
  const release = (cell: Cell) => registry.release(cell)

  const summary = (cell: Cell): SessionSummary => ({
    session_id: cell.session,
    status: (cell.state.status === "none" ? "creating" : cell.state.status) as SessionStatus,
    last_sequence: cell.state.lastSequence
  })

  /**
   * The summary, its `last_sequence` durable: while a turn's opening is only staged, the journal's
   * durable end (a client reading Events after it must not skip the opening once it lands).
   */
  const durableSummary = (cell: Cell): Effect.Effect<SessionSummary> => {
    const opening = cell.opening
    if (opening === undefined) return Effect.succeed(summary(cell))
    return Effect.map(
      Effect.orElseSucceed(journal.lastSequence(cell.session), () => opening[0]!.sequence - 1),
      (durable) => ({ ...summary(cell), last_sequence: Math.min(durable, cell.state.lastSequence) })
    )
  }

  /** The time of a keyed access, its session's expired requests pruned when due (`pruneRequests`). */
  const keyedAccess = (cell: Cell): number => {
    const now = deps.clock.unsafeCurrentTimeMillis()
    cell.state = pruneRequests(cell.state, now, config.requestRetentionMs)
    return now
  }

  const write = (cell: Cell, entries: ReadonlyArray<Entry>) => Effect.mapError(commit(journal, cell, entries), fromJournal)

  /** A mutating request on a session whose creation is still under way in this process. */
  const beingCreated = () => new Conflict({ message: "the session is being created; retry once its create has answered" })

  const runFork = Runtime.runFork(yield* Effect.runtime<never>())

  /**
   * A keyed send or submit. Its key is looked up before it is weighed as a turn, since a replay
   * never uses a turn's share of the working memory (a send's holds what reading its stored answer
   * back takes):
   * - its session's state in memory (its cell's, or the projection's cache) holds the key: the
   *   request is answered from it;
   * - nothing of the session is in memory: it is opened with its open's weight alone (Registry)
   *   and its key looked up there; a new key runs its turn on that open if the turn's share is
   *   free now (`holdingNow`: the open is not held while a share is waited for), else the session
   *   is let go and the request runs as a turn (`admitTurn`), waiting for its share holding nothing;
   * - otherwise (its key not held) it runs as a turn, which answers a key it finds too.
   * The lookup is in flight as the turn's request is (`admitTurn`), and starts no turn once the
   * drain has begun.
   */
  const keyedTurn = <A>(
    session: SessionId,
    mode: "send" | "submit",
    input: TurnInput,
    request: TurnRequest,
    answer: (cell: Cell, now: number) => Effect.Effect<Keyed<A> | undefined, SessionStorageError | Overloaded>,
    run: (cell: Cell, held: TurnHold) => Effect.Effect<Keyed<A>, KeyedTurnError>
  ): Effect.Effect<Keyed<A>, KeyedTurnError> =>
    Effect.suspend(() => {
      const asTurn = admitTurn(session, input, true, (held) => admittedUsing(session, (cell) => run(cell, held)))
      const known = registry.opened(session)?.state ?? projection.cached?.(session)
      if (known !== undefined) {
        if (!HashMap.has(known.requests, requestId(mode, request.key))) return asTurn
        return Effect.flatMap(using(session, (cell) => Effect.suspend(() => answer(cell, keyedAccess(cell)))), (replayed) => replayed === undefined ? asTurn : Effect.succeed(replayed))
      }
      const tooLarge = inputTooLarge(input, config.maxInputBytes)
      if (tooLarge !== undefined) return Effect.fail(tooLarge)
      const opened = admitted.admit(stopping, () =>
        using(session, (cell) =>
          Effect.flatMap(Effect.suspend(() => answer(cell, keyedAccess(cell))), (replayed) => {
            if (replayed !== undefined) return Effect.succeed(replayed)
            let kept = false
            return workingMemory.holdingNow(
              TURN_HEAP_PER_INPUT_BYTE * inputWeight(input) + cell.state.bytes,
              (held) => run(cell, { bytes: held.bytes, release: held.release, keep: () => void (kept = true) }),
              () => kept
            )
          })), { lookups: true })
      return Effect.flatMap(opened, (done) => done === undefined ? asTurn : Effect.succeed(done))
    })

  /** A keyed send's replay (`keyedTurn`), holding what reading its closing record takes. */
  const sendReplayOf = (cell: Cell, request: TurnRequest, now: number) =>
    Effect.suspend(() => {
      const e = liveRequest(cell.state, requestId("send", request.key), now, config.requestRetentionMs)
      if (e === undefined) return Effect.succeed(undefined)
      const reads = e.hash === request.hash && e.closed !== undefined && journal.readBytes !== undefined
        ? Effect.orElseSucceed(journal.readBytes(cell.session, e.closed - 1), () => 0)
        : Effect.succeed(0)
      return Effect.flatMap(reads, (bytes) =>
        workingMemory.holding(OPEN_HEAP_PER_BYTE * bytes, "this keyed send's stored answer", () => seenSend(journal, cell, request, now, config.requestRetentionMs)))
    })

  function* sendKeyedOf(cell: Cell, input: TurnInput, request: TurnRequest, held: TurnHold) {
    const now = keyedAccess(cell)
    const seen = yield* seenSend(journal, cell, request, now, config.requestRetentionMs)
    if (seen) return seen
    const turn = yield* startTurn(cell, input, "send", request, held)
    return { _tag: "Answered", value: yield* turn.done.await } satisfies Keyed<TurnOutcome>
  }

  function* submitKeyedOf(cell: Cell, input: TurnInput, request: TurnRequest, held: TurnHold) {
    const now = keyedAccess(cell)
    const seen = seenSubmit(cell, request, now, config.requestRetentionMs)
    if (seen) return seen
    const turn = yield* startTurn(cell, input, "submit", request, held)
    return { _tag: "Answered", value: { session_id: cell.session, sequence: turn.sequence } } satisfies Keyed<Receipt>
  }

  /** Why the session cannot start a turn now, if it cannot (the first: the drain has begun). */
  const refusedStart = (cell: Cell): Overloaded | SessionEnded | Conflict | SessionBusy | undefined => {
    if (admitted.closed) return stopping()
    const status = cell.state.status
    if (cell.ending || status === "ending" || status === "ended") return new SessionEnded({ message: "the session has ended" })
    if (status === "failed") return new Conflict({ message: "the session's creation failed" })
    if (status === "creating") return beingCreated()
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

  /**
   * Admits a turn: checks the state, then commits turn_started with activation_started (and a
   * keyed request's `request_claimed`: its key is claimed exactly when the turn starts). Only a
   * keyed request can be refused `overloaded` (its session's keys at their bound).
   */
  function startTurn(cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest | undefined, held: TurnHold): Effect.Effect<RunningTurn, TurnError>
  function startTurn(cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest, held: TurnHold): Effect.Effect<RunningTurn, KeyedTurnError>
  function startTurn(cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest | undefined, held: TurnHold): Effect.Effect<RunningTurn, KeyedTurnError> {
    return startTurnOf(cell, input, mode, request, held)
  }

  /**
   * Runs a turn's request holding its share of the working memory (BRAIN_WORKING_MEMORY_BYTES),
   * taken before its session is opened: TURN_HEAP_PER_INPUT_BYTE per byte of its input, and what
   * reaching the session's state takes (its state in memory, or its open: Registry.openWeight),
   * so a turn waiting for its share holds nothing of its session. Several large turns at once took
   * more heap than the process has; past the bound a turn waits in order, or is refused overloaded
   * with nothing written. A turn that starts keeps its share until it closes (its fiber gives it
   * back); an input above BRAIN_MAX_INPUT_BYTES, and a session in memory that cannot start a turn,
   * are refused first, without waiting; but not a keyed request's: its key may have been answered
   * (a retry), and its answer is what the retry gets whatever the session is doing now.
   *
   * The request is in flight (`admitted`) from here to its answer: a stop's drain waits for it.
   * Once the drain has begun no turn starts (`refusedStart`): a request still waiting for its share
   * then is refused at once, and one whose session is being opened once the open is over. A keyed
   * one is the exception to both: its share is waited for until its stop (past the drain
   * deadline), and one arriving after the drain began is still run, for its key's stored answer.
   */
  const admitTurn = <A, E>(session: SessionId, input: TurnInput, keyed: boolean, body: (held: TurnHold) => Effect.Effect<A, E>): Effect.Effect<A, E | TurnError> =>
    admitted.admit(stopping, (stop) => weighTurn(session, input, keyed, keyed ? Effect.zipRight(stop.await, Effect.failSync(stopping)) : cutByDrain, body), { lookups: keyed })

  const weighTurn = <A, E>(
    session: SessionId,
    input: TurnInput,
    keyed: boolean,
    cutShort: Effect.Effect<never, Overloaded>,
    body: (held: TurnHold) => Effect.Effect<A, E>
  ): Effect.Effect<A, E | TurnError> =>
    Effect.suspend((): Effect.Effect<A, E | TurnError> => {
      const tooLarge = inputTooLarge(input, config.maxInputBytes)
      if (tooLarge !== undefined) return Effect.fail(tooLarge)
      // A session in memory that cannot start a turn (busy, ended) says so now, not after a wait.
      const cell = keyed ? undefined : registry.opened(session)
      const refused = cell === undefined ? undefined : refusedStart(cell)
      if (refused !== undefined) return Effect.fail(refused)
      // Kept past the request only once a turn's fiber has taken it (a keyed replay starts none).
      let kept = false
      return Effect.flatMap(registry.openWeight(session), (reach) =>
        workingMemory.holding(
          TURN_HEAP_PER_INPUT_BYTE * inputWeight(input) + reach,
          "this turn",
          (held) => body({ bytes: held.bytes, release: held.release, keep: () => void (kept = true) }),
          () => kept,
          cutShort
        ))
    })

  const startTurnOf = Effect.fnUntraced(function*(cell: Cell, input: TurnInput, mode: "send" | "submit", request: TurnRequest | undefined, held: TurnHold) {
    const tooLarge = inputTooLarge(input, config.maxInputBytes)
    if (tooLarge !== undefined) return yield* Effect.fail(tooLarge)
    const refused = refusedStart(cell)
    if (refused !== undefined) return yield* Effect.fail(refused)
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
    if (config.maxTurnMs > 0) deadlines.add(started, deps.clock.unsafeCurrentTimeMillis() + config.maxTurnMs)
    cell.users++ // the turn holds the cell until it closes
    held.keep() // the turn's fiber gives it back when the turn closes
    // The turn's fiber belongs to the registry and is interruptible whatever the caller's
    // region (an idempotent request runs uninterruptibly so its answer is always recorded).
    yield* FiberSet.run(
      turns,
      Effect.interruptible(runTurn(deps, { cell, turn: started, activation: activation!, input, loop, eventsAfter })).pipe(
        Effect.tap((outcome) => void started.done.give(outcome)),
        Effect.ensuring(Effect.suspend(() => {
          // Interrupted before it answered (its runtime closing past the wait of the finalizer at
          // the end of `make`): whoever waits is told so, not left waiting. Its closing records may or may not have landed;
          // if not, the next start's recovery records it interrupted.
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
          return release(cell)
        }))
      )
    )
    return started
  })

  /**
   * Commits an ending: `session_end_started` first, so that a partly detached session never
   * accepts a message, then each Environment's detach (a failed one is recorded and does not
   * prevent the ending), then `session_ended`. Once `stop` is given (a stop past its drain
   * deadline) the detach in flight is abandoned (recorded `interrupted`) and no other is sent: the
   * ending is closed as a restart's recovery closes it.
   */
  const closeOf = (cell: Cell, stop: Once<void>) =>
    Effect.gen(function*() {
      const [started] = cell.state.ending !== undefined ? [cell.state.ending] : yield* write(cell, [entry("session_end_started", {})])
      for (const environment of cell.state.configuration?.environments ?? []) {
        if (stop.isDone) break
        yield* runStep(steps, cell, "detach", environment, stop).pipe(Effect.mapError(fromFence))
      }
      yield* write(cell, [entry("session_ended", { sequence: started! })])
      return summary(cell)
    })

  /**
   * Runs a create holding its share of the working memory (BRAIN_WORKING_MEMORY_BYTES) from its
   * checks to its answer: CREATE_HEAP_PER_BODY_BYTE per byte of its request (its configuration and
   * opening transcript). Many creates of large opening transcripts at once took more heap than the
   * process has; past the bound a create waits in order, or is refused overloaded having checked
   * and written nothing.
   */
  const admitCreate = <A, E>(request: Parameters<SessionsShape["create"]>[0], create: Effect.Effect<A, E>): Effect.Effect<A, E | Overloaded> =>
    Effect.suspend(() => workingMemory.holding(CREATE_HEAP_PER_BODY_BYTE * jsonWeight(request), "this session's create", () => create))

  const service: SessionsShape = {
    // In flight from here until it answers (`admitted`): a stop drains it, and past its drain deadline stops it.
    create: (request, id) =>
      admitted.admit(stopping, (stop) => admitCreate(request, Effect.gen(function*() {
        const agentloop = request.agentloop ?? "official"
        const tools = request.tools ?? []
        // A loop or a Wasm tool that cannot run is refused now, not at the first turn.
        yield* agentloops.check(agentloop).pipe(Effect.mapError((e) => e._tag === "AgentloopRejected" ? refusedAt(e.reason, ["agentloop"]) : moduleStoreFailed(e)))
        const modules = [...new Set(tools.flatMap((t) => (t.module !== undefined ? [t.module] : [])))]
        for (const module of modules) {
          yield* agentloops.tool(module).pipe(
            Effect.mapError((e) => e._tag === "AgentloopRejected" ? refusedAt(e.reason, ["tools", tools.findIndex((t) => t.module === module), "module"]) : moduleStoreFailed(e))
          )
        }
        // A model's call names a tool by its name alone: one name declared twice has no one meaning.
        const firstOf = new Map<string, number>()
        for (let i = 0; i < tools.length; i++) {
          const first = firstOf.get(tools[i]!.name)
          if (first !== undefined) {
            return yield* Effect.fail(
              refusedAt(`the tool name ${JSON.stringify(tools[i]!.name)} is declared twice (tools ${first} and ${i}): a model's call names one tool`, ["tools", i, "name"])
            )
          }
          firstOf.set(tools[i]!.name, i)
        }
        // Environments are admitted now: names, bindings and placements, before anything is written.
        const declared = request.environments ?? []
        const admitted = admitEnvironments(declared, tools, environmentBindings, (host) => hosts?.isRegistered(host) ?? false)
        if (Either.isLeft(admitted)) return yield* Effect.fail(new InvalidRequest({ message: admitted.left }))
        const environments = admitted.right
        // A binding name is resolved now and its non-secret fields recorded with the session.
        let modelBinding: RecordedBinding | undefined
        if (typeof request.model === "string") {
          const bound = bindings.get(request.model)
          if (!bound) {
            const known = bindings.names.length > 0 ? `the configured bindings are ${bindings.names.map((n) => JSON.stringify(n)).join(", ")}` : "no bindings are configured (BRAIN_MODELS)"
            return yield* Effect.fail(refusedAt(`no model binding named ${JSON.stringify(request.model)}; ${known}`, ["model"]))
          }
          modelBinding = { name: request.model, ...bound.binding }
          // A tool name the provider's API would refuse fails the create, not every model call.
          const rule = toolNameRule(bound.binding)
          const misnamed = rule === undefined ? -1 : tools.findIndex((t) => !rule.pattern.test(t.name))
          if (rule !== undefined && misnamed >= 0) {
            return yield* Effect.fail(
              refusedAt(
                `the tool name ${JSON.stringify(tools[misnamed]!.name)} is not one ${bound.binding.provider} takes (${rule.says}), as binding ${JSON.stringify(request.model)} would send it`,
                ["tools", misnamed, "name"]
              )
            )
          }
        }
        // The opening transcript is recorded once, as the session's first transcript_delta (a
        // record carries references, not copies): not in the configuration every activation gets.
        const { environments: _declared, transcript: _opening, ...rest } = request
        const configuration = {
          ...rest,
          agentloop,
          ...(modelBinding ? { model_binding: modelBinding } : {}),
          ...(environments.length > 0 ? { environments } : {})
        }
        // Refuse bad input before anything exists on disk.
        const refused = checkPayload("session_creation_started", { configuration }) ??
          (request.transcript?.length ? checkPayload("transcript_delta", { keep: 0, append: request.transcript }) : undefined)
        if (refused !== undefined) return yield* Effect.fail(new InvalidRequest({ message: refused }))
        // An opening transcript the loop's input could not carry would fail every turn: refused now.
        if (request.transcript !== undefined && request.transcript.length > 0) {
          // (A loop that cannot be loaded now, its store out of descriptors, is no fault of the request.)
          const loop = yield* agentloops.resolve(agentloop).pipe(Effect.mapError((e) =>
            e.failure.retryable ? new Overloaded({ message: `the agentloop cannot be loaded now: ${e.failure.message}` }) : refusedAt(e.failure.message, ["agentloop"])
          ))
          const room = transcriptRoom(config, loop.input, () => JSON.stringify(configuration))
          if (room !== undefined) {
            const bytes = carriedBytes(room, [], noUnanswered, request.transcript, 0)
            if (bytes > room.bytes) return yield* Effect.fail(refusedAt(`the opening ${refusalText(room, bytes)}`, ["transcript"]))
          }
        }
        // Stopped before anything exists: refused as a request that arrived after the drain began.
        if (stop.isDone) return yield* Effect.fail(stopping())
        const session = id ?? (yield* mintSessionId)
        yield* journal.create(session).pipe(Effect.mapError((e) => fromJournal(e, { ambiguous: false })))
        // The modules' uses are recorded before the session names them, so none is removed under
        // it (one removed since its check above is refused here as it would have been there); so
        // are its hosts', so that no registration expires under it (HostsFile.ts).
        const uses = [agentloop, ...modules]
        const named = namedHosts(environments)
        const unuse = Effect.zipRight(
          Effect.forEach(uses, (id) => agentloops.unuse(id, session), { discard: true }),
          Effect.forEach(named, (host) => hosts?.release(host, session) ?? Effect.void, { discard: true })
        )
        const fieldOf = (id: string) => (id === agentloop ? ["agentloop"] : ["tools", tools.findIndex((t) => t.module === id), "module"])
        yield* Effect.zipRight(
          Effect.forEach(uses, (id) =>
            agentloops.use(id, session).pipe(
              Effect.mapError((e) => (e._tag === "AgentloopRejected" ? refusedAt(e.reason, fieldOf(id)) : moduleStoreFailed(e)))
            ), { discard: true }),
          Effect.forEach(named, (host) => hosts?.use(host, session) ?? Effect.void, { discard: true })
        ).pipe(Effect.tapError(() => Effect.zipRight(Effect.ignore(journal.remove(session)), unuse)))
        const cell = new Cell(session, empty)
        // The creation is live work of this process: registered before its first record, so that
        // an access meanwhile sees it `creating` and never recovers it (Registry.creating), and
        // uninterruptible from here, so that it always ends with `adopt` or `abandon`.
        yield* registry.creating(cell)
        return yield* Effect.uninterruptible(Effect.gen(function*() {
          const opening: Array<Entry> = [entry("session_creation_started", { configuration })]
          if (request.transcript && request.transcript.length > 0) {
            opening.push(entry("transcript_delta", { keep: 0, append: request.transcript }))
          }
          const [first] = yield* commit(journal, cell, opening).pipe(
            // Nothing was recorded: no session is left behind (Registry.abandon), and the caller is
            // told so; if its journal could not be removed, the refusal stays ambiguous.
            Effect.catchAll((e) =>
              Effect.flatMap(Effect.zipLeft(registry.abandon(cell), unuse), (removed) =>
                Effect.fail(
                  removed && e._tag === "JournalWriteFailed"
                    ? new JournalWriteFailed({ message: `${e.message}; the session's creation was not recorded, and nothing was created` })
                    : fromJournal(e)
                ))
            )
          )
          // The creation is left open when a write fails: the next access (by whoever learns the id) records it failed.
          const setup = yield* setUpEnvironments(steps, cell, environments, stop).pipe(
            Effect.mapError(fromFence),
            Effect.tapError(() => registry.abandon(cell))
          )
          if (setup !== undefined) {
            const { environment, failure: why, stopped } = setup
            // Interrupted by a stop, the creation is recorded failed as the restart's recovery would record it.
            const message = stopped
              ? `the server is stopping: the creation was interrupted before Environment ${JSON.stringify(environment)} was set up`
              : `Environment ${JSON.stringify(environment)} could not be set up: ${why.message}`
            const code = stopped ? "interrupted" : "creation_failed"
            yield* write(cell, [
              entry("session_creation_failed", { sequence: first!, failure: failure(code, message, { details: { environment, failure: why } }) })
            ]).pipe(Effect.tapError(() => registry.abandon(cell)))
            yield* registry.adopt(cell)
            return yield* Effect.fail(
              new CreationFailed({
                message: `${message}; the session ${session} has failed and can be deleted`,
                details: { session_id: session, environment, failure: why }
              })
            )
          }
          yield* write(cell, [entry("session_creation_ended", { sequence: first! })]).pipe(
            Effect.tapError(() => registry.abandon(cell))
          )
          // The answer is the creation's: taken before another request can use the session.
          const created = summary(cell)
          yield* registry.adopt(cell)
          return created
        }))
      }))),
    // A released session's status is its view's when nothing was written since (Registry.currentView).
    get: (session) =>
      Effect.flatMap(registry.currentView(session), (view) =>
        view === undefined
          ? reading(session, durableSummary)
          : Effect.succeed<SessionSummary>({ session_id: session, status: view.status as SessionStatus, last_sequence: view.lastSequence })),
    list: ({ after, limit }) =>
      Effect.gen(function*() {
        // One more than the page: whether another follows.
        const ids = journal.listPage !== undefined
          ? yield* journal.listPage(after, limit + 1).pipe(Effect.mapError(listingFailed))
          : [...(yield* journal.list.pipe(Effect.mapError(listingFailed)))].sort().filter((id) => after === undefined || id > after)
        const page = ids.slice(0, limit)
        const sessions: Array<SessionSummary> = []
        for (const id of page) {
          const s = yield* Effect.either(service.get(id))
          if (s._tag === "Right") sessions.push(s.right)
          // A damaged session is listed as such (GET of it names the damage); a vanished one is not;
          // one that cannot be read now fails the list, which without it would say it is gone.
          else if (s.left._tag === "JournalCorrupt") {
            sessions.push({ session_id: id, status: "corrupt", last_sequence: 0, failure: toFailure(s.left) })
          } else if (s.left._tag !== "NotFound") return yield* Effect.fail(unlisted(id, s.left))
        }
        return { sessions, next_cursor: ids.length > limit ? page[page.length - 1] : undefined }
      }),
    send: (session, input) =>
      admitTurn(session, input, false, (held) =>
        admittedUsing(session, (cell) => Effect.flatMap(startTurn(cell, input, "send", undefined, held), (turn) => turn.done.await))),
    submit: (session, input) =>
      admitTurn(session, input, false, (held) =>
        admittedUsing(session, (cell) => Effect.map(startTurn(cell, input, "submit", undefined, held), (turn) => ({ session_id: session, sequence: turn.sequence })))),
    sendKeyed: (session, input, request) =>
      keyedTurn(session, "send", input, request, (cell, now) => sendReplayOf(cell, request, now), (cell, held) => Effect.gen(() => sendKeyedOf(cell, input, request, held))),
    submitKeyed: (session, input, request) =>
      keyedTurn(
        session,
        "submit",
        input,
        request,
        (cell, now) => Effect.succeed(seenSubmit(cell, request, now, config.requestRetentionMs)),
        (cell, held) => Effect.gen(() => submitKeyedOf(cell, input, request, held))
      ),
    interrupt: (session) =>
      using(session, (cell) =>
        Effect.gen(function*() {
          const turn = cell.running
          if (turn) {
            yield* cancelTurn(turn, "cancelled")
            yield* turn.done.await
          }
          return summary(cell)
        })),
    end: (session) =>
      admitted.admit(stopping, (stop) => using(session, (cell) =>
        Effect.gen(function*() {
          if (cell.state.status === "ended") return summary(cell)
          if (cell.state.status === "creating") return yield* Effect.fail(beingCreated())
          if (cell.state.status === "failed") return yield* Effect.fail(new Conflict({ message: "the session is failed" }))
          cell.ending = true
          // Each end waits for the running turn itself (its wait is its own to give up) ...
          while (cell.running) yield* cell.running.done.await
          if ((cell.state.status as SessionStatus) === "ended") return summary(cell)
          // ... and the first to get here commits the ending, once; the others answer what it did.
          if (cell.closing !== undefined) return yield* Effect.flatten(cell.closing.await)
          const closing = new Once<Exit.Exit<SessionSummary, EndError>>()
          cell.closing = closing
          const closed = yield* Effect.exit(Effect.uninterruptible(closeOf(cell, stop)))
          if (Exit.isFailure(closed)) cell.closing = undefined
          closing.give(closed)
          return yield* closed
        }))),
    delete: <E>(session: SessionId, keep?: (requests: ReadonlyArray<KeptRequest>) => Effect.Effect<void, E>) =>
      admitted.admit(stopping, (stop) => Effect.suspend(() => {
        let uses: Array<string> = []
        let named: ReadonlyArray<HostId> = []
        let state: SessionState | undefined
        // Its keyed sends and submits are handed on (`keep`) while the journal that answers them
        // is still there: their keys outlive the session (DESIGN §7).
        const handOn = keep === undefined
          ? Effect.void
          : Effect.suspend(() => {
            const kept = state
            if (kept === undefined || HashMap.size(kept.requests) === 0) return Effect.void
            return Effect.flatMap(keptRequests(journal, session, kept, deps.clock.unsafeCurrentTimeMillis(), config.requestRetentionMs), (requests) =>
              requests.length === 0 ? Effect.void : keep(requests))
          })
        return registry.delete(
          session,
          (cell) => {
            const status = cell.state.status
            if (status === "ended" || status === "failed") return undefined
            return status === "creating" ? beingCreated() : new Conflict({ message: "only an ended or failed session can be deleted" })
          },
          (cell) => {
            const configuration = cell.state.configuration
            uses = configuration
              ? [configuration.agentloop, ...(configuration.tools ?? []).flatMap((t) => (t.module !== undefined ? [t.module] : []))]
              : []
            named = namedHosts(configuration?.environments ?? [])
            state = cell.state
            return tearDown(steps, journal, cell, stop)
          },
          Effect.zipRight(
            handOn,
            journal.remove(session).pipe(
              Effect.mapError(fromJournal),
              Effect.zipRight(Effect.suspend(() => Effect.forEach(uses, (id) => agentloops.unuse(id, session), { discard: true }))),
              // Deleted: it no longer holds its hosts (a release lost in a crash is found by the expiry's sweep).
              Effect.zipRight(Effect.suspend(() => Effect.forEach(named, (host) => hosts?.release(host, session) ?? Effect.void, { discard: true })))
            )
          )
        )
      })),
    transcript: (session) =>
      reading(session, (cell) =>
        Effect.succeed({ messages: cell.state.transcript, through_sequence: cell.state.transcriptThrough })),
    events: (session, { after, limit }) =>
      Effect.flatMap(registry.view(session), (view) =>
        readEvents(journal, session, view, after, limit).pipe(
          Effect.mapError((e) => (e._tag === "InvalidRequest" ? e : fromJournal(e)))
        )),
    follow: (session, after) => feeds.follow(session, after, reading(session, (cell) => Effect.succeed(cell.state))),
    warm: Effect.sync(() => registry.size),
    // The operations' admission closes first, in the drain's first step; then every turn is waited for.
    drain: Effect.zipRight(admitted.drain, Effect.suspend(() => Effect.forEach([...running], (t) => t.done.await, { discard: true }))),
    interruptAll
  }
  // A runtime closed while turns or creates run (an application disposing its own; the server has
  // already drained them, main.ts): each turn is cancelled as `interrupted` and closes as a stop
  // past the drain deadline closes it, within the loops' cancel grace and the closing append's
  // deadline, and each create is interrupted as that stop interrupts it.
  // Added last, so it runs first: the live feeds (their streams then end, after the turns'
  // closing records), the deadlines and the turns' FiberSet (which interrupts what is left) close
  // after it.
  yield* Effect.addFinalizer(() =>
    Effect.suspend(() =>
      running.size === 0 && admitted.size === 0
        ? Effect.void
        : Effect.asVoid(Effect.timeoutOption(interruptAll, Duration.millis(interruptWaitMs(config))))
    )
  )
  return service
})

/**
 * The module store could not answer (a module that exists but cannot be read now is never "no such
 * module", which would refuse the create 400): 503 `overloaded` out of descriptors, else a 500.
 */
const moduleStoreFailed = (e: AgentloopStoreFailed): Overloaded | Internal =>
  e.exhausted === true
    ? new Overloaded({ message: `the module store cannot be read now: ${e.reason}; try again shortly` })
    : new Internal({ message: `the module store failed: ${e.reason}` })

/** The sessions directory could not be listed: an error, never an empty list. */
const listingFailed = (e: JournalListError): Overloaded | Internal =>
  e._tag === "JournalUnavailable"
    ? new Overloaded({ message: e.message })
    : new Internal({ message: e.message, retryable: false })

/** A listed session that cannot be read now (other than damaged or gone), as the list's failure. */
const unlisted = (session: SessionId, e: Exclude<SessionStorageError, { readonly _tag: "NotFound" | "JournalCorrupt" }>): ListError =>
  e._tag === "InvalidRequest" ? new Internal({ message: `session ${session} cannot be read: ${e.message}`, retryable: false }) : e

export const layer = Layer.scoped(Sessions, make)
