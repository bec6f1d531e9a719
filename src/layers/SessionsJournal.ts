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
import { interruptWaitMs } from "../services/ServerConfig.js"
import { Sessions, type SessionsShape } from "../services/Sessions.js"
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
  const service: SessionsShape = {
    create: makeCreate(shared),
    get: reads.get,
    list: reads.list,
    send: turnRequests.send,
    submit: turnRequests.submit,
    sendKeyed: turnRequests.sendKeyed,
    submitKeyed: turnRequests.submitKeyed,
    interrupt: lifecycle.interrupt,
    end: lifecycle.end,
    delete: lifecycle.delete,
    transcript: reads.transcript,
    events: reads.events,
    follow: reads.follow,
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

export const layer = Layer.scoped(Sessions, make)
