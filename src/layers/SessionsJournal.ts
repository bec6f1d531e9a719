/**
 * The Sessions service: creation, turns, lifecycle and reads over the registry of session cells
 * (sessions/Registry.ts: open on demand, recovery on first access, release, delete). Turns run in
 * fibers owned by this service, not by callers. Startup reads nothing.
 *
 * This module assembles the service from its parts, each made once from what they share
 * (sessions/Shared.ts): creating a session (Create.ts), admitting a turn's request
 * (TurnAdmission.ts) and starting its turn (TurnStarts.ts), the lifecycle past creation and the
 * stop (Lifecycle.ts), and the reads (Reads.ts).
 */
import { Duration, Effect, Layer } from "effect"
import type { InvalidRequest } from "../domain/Errors.js"
import type { SessionId } from "../domain/Ids.js"
import { interruptWaitMs } from "../services/ServerConfig.js"
import { Sessions, type SessionsShape } from "../services/Sessions.js"
import { createRefused, idRefused, inputRefused } from "./sessions/CallerInput.js"
import { makeCreate } from "./sessions/Create.js"
import { makeLifecycle } from "./sessions/Lifecycle.js"
import { makeReads } from "./sessions/Reads.js"
import { makeShared } from "./sessions/Shared.js"
import { makeTurnAdmission } from "./sessions/TurnAdmission.js"
import { makeTurnStarts } from "./sessions/TurnStarts.js"

export const make = Effect.gen(function*() {
  const shared = yield* makeShared
  const { admitted, config, running } = shared
  const turnRequests = makeTurnAdmission(shared, makeTurnStarts(shared))
  const lifecycle = makeLifecycle(shared)
  const reads = makeReads(shared)
  const create = makeCreate(shared)
  // A session id (and a turn's input) from the caller is checked before anything is read, built
  // or written from it (sessions/CallerInput.ts): an application calling the service directly has
  // no HTTP decoder before it. One pattern test for a request HTTP already decoded.
  const service: SessionsShape = {
    create: (request, id) => {
      const refused = (id === undefined ? undefined : idRefused(id)) ?? createRefused(request)
      return refused === undefined ? create(request, id) : Effect.fail(refused)
    },
    get: (session) => checkedId(session, reads.get),
    // A list's `after` is only compared with the ids listed: nothing is built from it.
    list: reads.list,
    send: (session, input) => {
      const refused = idRefused(session) ?? inputRefused(input)
      return refused === undefined ? turnRequests.send(session, input) : Effect.fail(refused)
    },
    submit: (session, input) => {
      const refused = idRefused(session) ?? inputRefused(input)
      return refused === undefined ? turnRequests.submit(session, input) : Effect.fail(refused)
    },
    sendKeyed: (session, input, request) => {
      const refused = idRefused(session) ?? inputRefused(input)
      return refused === undefined ? turnRequests.sendKeyed(session, input, request) : Effect.fail(refused)
    },
    submitKeyed: (session, input, request) => {
      const refused = idRefused(session) ?? inputRefused(input)
      return refused === undefined ? turnRequests.submitKeyed(session, input, request) : Effect.fail(refused)
    },
    interrupt: (session) => checkedId(session, lifecycle.interrupt),
    end: (session) => checkedId(session, lifecycle.end),
    delete: (session, keep) => {
      const refused = idRefused(session)
      return refused === undefined ? lifecycle.delete(session, keep) : Effect.fail(refused)
    },
    transcript: (session) => checkedId(session, reads.transcript),
    events: (session, options) => {
      const refused = idRefused(session)
      return refused === undefined ? reads.events(session, options) : Effect.fail(refused)
    },
    follow: (session, after) => {
      const refused = idRefused(session)
      return refused === undefined ? reads.follow(session, after) : Effect.fail(refused)
    },
    warm: reads.warm,
    whenIdle: reads.whenIdle,
    drain: lifecycle.drain,
    interruptAll: lifecycle.interruptAll,
    checkpointWarm: shared.registry.checkpointWarm
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
        : Effect.asVoid(Effect.timeoutOption(lifecycle.interruptAll, Duration.millis(interruptWaitMs(config))))
    )
  )
  return service
})

/** `run(session)`, or the refusal of a session id that is not one. */
const checkedId = <A, E>(session: SessionId, run: (session: SessionId) => Effect.Effect<A, E>): Effect.Effect<A, E | InvalidRequest> => {
  const refused = idRefused(session)
  return refused === undefined ? run(session) : Effect.fail(refused)
}

export const layer = Layer.scoped(Sessions, make)
