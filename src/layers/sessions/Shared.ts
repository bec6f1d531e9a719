/**
 * What the parts of the Sessions service share (SessionsJournal.ts makes it once, in `make`, and
 * hands it to each part): the services they run on, the registry of session cells, the working
 * memory, the operations in flight (`admitted`), the running turns, their live feeds and wall
 * deadlines, and the few helpers every part uses. Each part reads what it needs of it once, when
 * it is made, never per request.
 */
import { Effect, FiberSet, Option, Runtime } from "effect"
import { type AdmittedEnvironment, noEnvironmentBindings } from "../../domain/Environment.js"
import { Conflict, Overloaded } from "../../domain/Errors.js"
import type { HostId, SessionId } from "../../domain/Ids.js"
import { SESSION_RELEASE_GRACE_MS, WORKING_MEMORY_WAIT_MS } from "../../domain/Limits.js"
import type { SessionStatus } from "../../domain/Projection.js"
import type { Entry } from "../../domain/Records.js"
import { Agentloops } from "../../services/Agentloop.js"
import { EffectFence } from "../../services/EffectFence.js"
import { EnvironmentBindings, Environments } from "../../services/Environments.js"
import { Hosts } from "../../services/Hosts.js"
import { Journal } from "../../services/Journal.js"
import { ModelBindings, noBindings } from "../../services/ModelBindings.js"
import { Models } from "../../services/Models.js"
import { Projection } from "../../services/Projection.js"
import { ServerConfig } from "../../services/ServerConfig.js"
import type { SessionSummary, TurnOutcome } from "../../services/Sessions.js"
import { Telemetry } from "../../services/Telemetry.js"
import { Tools } from "../../services/Tools.js"
import { memoryBudget, workingMemoryBytes } from "../MemoryBudget.js"
import { type Held, WorkingMemory } from "../WorkingMemory.js"
import { Admitted } from "./Admitted.js"
import { cancelTurn, type Cell, commit, type RunningTurn } from "./Cell.js"
import { makeDeadlines } from "./Deadlines.js"
import type { HostDeps } from "./Host.js"
import * as LiveFeeds from "./LiveFeeds.js"
import { fromJournal } from "./FromJournal.js"
import { makeRegistry } from "./Registry.js"
import { makeStorageRoom } from "./StorageRoom.js"

/** A turn's share of the working memory: `keep` hands it to the turn's fiber, which gives it back when the turn closes. */
export interface TurnHold extends Held {
  readonly keep: () => void
}

export const makeShared = Effect.gen(function*() {
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
    graceMs: SESSION_RELEASE_GRACE_MS,
    warmBytes: memoryBudget(config.cacheBytes).warmBytes,
    viewBytes: memoryBudget(config.cacheBytes).viewBytes,
    releasedBytes: memoryBudget(config.cacheBytes).projectionBytes,
    checkpointAfterBytes: config.checkpointAfterBytes,
    workingMemory
  })
  const turns = yield* FiberSet.make<TurnOutcome>()
  const running = new Set<RunningTurn>()
  /** Each session's turn from its start until it has closed (`RunningTurn.closed`): what `whenIdle` waits on. */
  const open = new Map<SessionId, RunningTurn>()
  // Creates, ends, deletes, sends and submits in flight: a stop drains them, and past its deadline stops them.
  const admitted = new Admitted()
  const feeds = yield* LiveFeeds.make(journal, config, fromJournal)
  deps.live = { delta: feeds.delta }

  // Wall deadlines (BRAIN_MAX_TURN_SECS) arrive as a cancel with reason "timeout".
  const deadlines = yield* makeDeadlines((turn) => cancelTurn(turn, "timeout"))

  const using = <A, E>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, E>) => registry.using(session, body)
  /** `using` for a turn's request, which holds the working memory its session's open takes (TurnAdmission.ts, `admitTurn`). */
  const admittedUsing = <A, E>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, E>) => registry.using(session, body, true)
  /** A read: it neither activates the session nor keeps it warm (Registry.reading). */
  const reading = <A, E>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, E>) => registry.reading(session, body)
  const release = (cell: Cell) => registry.release(cell)

  const write = (cell: Cell, entries: ReadonlyArray<Entry>) => Effect.mapError(commit(journal, cell, entries), fromJournal)

  const runFork = Runtime.runFork(yield* Effect.runtime<never>())
  // BRAIN_MAX_SESSION_JOURNAL_BYTES and BRAIN_MIN_FREE_DISK_BYTES: whether a turn or a create may write.
  const room = yield* makeStorageRoom(journal, config)

  return {
    journal,
    projection,
    config,
    agentloops,
    bindings,
    environmentBindings,
    hosts,
    deps,
    steps,
    workingMemory,
    registry,
    turns,
    running,
    open,
    admitted,
    feeds,
    deadlines,
    using,
    admittedUsing,
    reading,
    release,
    write,
    runFork,
    room
  }
})

export type Shared = Effect.Effect.Success<typeof makeShared>

/** Refused once the drain has begun: a request taken just before it that reaches here after it does nothing. */
export const stopping = () => new Overloaded({ message: "the server is stopping and admits no new work" })

/** A mutating request on a session whose creation is still under way in this process. */
export const beingCreated = () => new Conflict({ message: "the session is being created; retry once its create has answered" })

export const summary = (cell: Cell): SessionSummary => ({
  session_id: cell.session,
  status: (cell.state.status === "none" ? "creating" : cell.state.status) as SessionStatus,
  last_sequence: cell.state.lastSequence
})

/** The hosts a session's Environments name, each once. */
export const namedHosts = (environments: ReadonlyArray<AdmittedEnvironment>): ReadonlyArray<HostId> => [
  ...new Set(environments.flatMap((e) => (e.driver === "host" ? [e.host] : [])))
]
