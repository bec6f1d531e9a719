/**
 * What a draining server still takes of the requests that reach it, and how it refuses the bodies
 * still arriving when the drain begins (docs/operations.md, "Stopping").
 */
import { Overloaded } from "../domain/Errors.js"

/**
 * What a draining server still takes (seed, Lifecycle: the drain stops admitting work, while
 * "deadlines, interrupt, and forced process termination can still interrupt a turn"): a host's
 * answers for work already admitted, so that its calls can end, and a session's cancel, which
 * brings admitted work to an end sooner and starts none.
 */
const WHILE_DRAINING = /^(POST \/v1\/hosts\/[^/]+\/(results|events)|POST \/v1\/sessions\/[^/]+\/cancel)\/?$/

/**
 * The routes whose Idempotency-Key holds an answer (Handlers.ts), taken while draining when they
 * carry one: a create, a send or submit (the one route of both), an end, a delete, a module's
 * upload and its removal. A host's registration and removal check their key and ignore it: no
 * answer is kept under it, so a draining server refuses them as any new work.
 */
const KEYED_ROUTE =
  /^(POST \/v1\/sessions|POST \/v1\/sessions\/[^/]+\/(messages|end)|DELETE \/v1\/sessions\/[^/]+|POST \/v1\/agentloops|DELETE \/v1\/agentloops\/[^/]+)\/?$/

/**
 * Whether a draining server takes this request: a route of `WHILE_DRAINING`, or a keyed route
 * with its key. A key may hold an answer, which a retry gets whatever the server is doing
 * (docs/operations.md, "Stopping"): a key held is answered (or said to be still in flight), and
 * one not held is refused 503 `overloaded` having written nothing — by the sessions for a send or
 * submit, which start no turn once the drain has begun (TurnStarts.ts, `refusedStart`), and by
 * the idempotency lookup for the others (Idempotent.ts, `idempotent`'s `stopping`). The drain
 * waits for neither lookup (Admitted.ts, `lookups`), so neither holds the stop.
 */
export const takenWhileDraining = (method: string, path: string, idempotencyKey: string | ReadonlyArray<string> | undefined): boolean => {
  const line = `${method} ${path}`
  return WHILE_DRAINING.test(line) || (idempotencyKey !== undefined && KEYED_ROUTE.test(line))
}

/**
 * Bodies still arriving on routes a draining server no longer admits, each with how to refuse it
 * at once: when the drain starts (`refuseArrivingBodies`), a request whose headers came before it
 * but whose body has not arrived whole is answered 503 `overloaded` (nothing of it was done), its
 * bytes given back and the rest discarded, instead of its connection being cut at the drain's end
 * with no answer.
 */
const arriving = new Set<() => void>()

/** Refuses every body still arriving on a route not taken while draining (the drain has started). */
export const refuseArrivingBodies = (): void => {
  const refusals = [...arriving]
  arriving.clear()
  for (const refuse of refusals) refuse()
}

/** Registers a body's refusal while it arrives; the returned function unregisters it. */
export const whileArriving = (refuse: () => void): (() => void) => {
  arriving.add(refuse)
  return () => void arriving.delete(refuse)
}

/** The answer to a request whose body was still arriving when the drain started. */
export const drainedBody = () =>
  new Overloaded({ message: "the server is stopping and admits no new work: this request's body had not arrived whole when the stop began, and nothing of it was done" })
