/**
 * The bound on request bodies held in memory at once (BRAIN_INFLIGHT_BODY_BYTES), shared by every
 * reader of a body: the gate's (BodyRead.ts) and the one at the socket (SocketRoutes.ts).
 */
import { Overloaded } from "../domain/Errors.js"

/**
 * Request bodies held in memory at once, in bytes. A body is charged as its bytes arrive — never
 * by the length it declares, so a slow client holds only what it has sent — and holds them until
 * its request is answered (its parsed value lives that long). A body whose bytes are all that is
 * held is always admitted, so every legal request can be served alone; past the budget, a body
 * whose next bytes do not fit is refused with 503 `overloaded` rather than let concurrent large
 * bodies exhaust the heap.
 */
export class BodyBudget {
  private held = 0
  constructor(readonly limit: number) {}
  /** Takes `bytes` more for a body that holds `mine` already; false (nothing taken) when they do not fit beside the others. */
  take(bytes: number, mine = 0): boolean {
    if (this.held > mine && this.held + bytes > this.limit) return false
    this.held += bytes
    return true
  }
  /** Counts bytes already in memory, handed over by another reader (SocketRoutes.ts's `preRead`): never refused. */
  hold(bytes: number) {
    this.held += bytes
  }
  give(bytes: number) {
    this.held -= bytes
  }
  get inUse() {
    return this.held
  }
}

export const busyBodies = () =>
  new Overloaded({ message: "the server holds as many request bodies as it can at once (BRAIN_INFLIGHT_BODY_BYTES); try again shortly" })
