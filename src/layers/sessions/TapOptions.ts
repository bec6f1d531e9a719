/**
 * What a subscriber of a session's live feed (Tap.ts) is given: the commits the feed offers it, the
 * catch-up pages it reads, its limits, and the feed's hooks.
 */
import type { Effect } from "effect"
import type { ApiError } from "../../domain/Errors.js"

/** One commit's frames, as the feed offers them to every subscriber. */
export interface Commit {
  /** The first and last sequences it covers. */
  readonly first: number
  readonly last: number
  readonly bytes: Uint8Array
  /** How many Events (frames) it holds. */
  readonly events: number
  /** Whether it holds the session's final Event (`isFinalKind`). */
  readonly ended: boolean
}

/** One catch-up read: the frames of about a page of the Events in (after, until]. */
export interface CatchUpPage {
  readonly bytes: Uint8Array | undefined
  /** The last sequence examined. */
  readonly next: number
  /** The transcript's length just after `next`. */
  readonly length: number
  readonly ended: boolean
  /** Gives back what the page holds of the process's bound on held pages (HeldPages.ts), once its socket has taken it. */
  readonly release?: () => void
}

export type ReadCatchUp<E> = (after: number, length: number, until: number) => Effect.Effect<CatchUpPage, E>

export interface TapLimits {
  /** Events the backlog may hold. */
  readonly events: number
  /** Bytes the backlog may hold. */
  readonly bytes: number
  /** About the most bytes buffered toward the socket before offering more waits for it to drain. */
  readonly writeBytes: number
  /** Milliseconds a stream still catching up may wait for its socket to drain before it is cut off; 0: no bound. */
  readonly stallMs: number
  /** Milliseconds the socket of a stream that was cut off has to take what it was handed before it is closed; 0: no bound. */
  readonly closeMs: number
}

export interface TapOptions<E extends ApiError> {
  readonly from: { readonly after: number; readonly length: number }
  /** The feed's position when this subscriber is registered on it. */
  readonly registeredAt: number
  /** The session had ended or failed when this subscriber came: the stream ends once caught up. */
  readonly atEnd: boolean
  readonly limits: TapLimits
  readonly read: ReadCatchUp<E>
  /** Runs a catch-up read in a fiber the feeds own; `done` gets its outcome. Answers what interrupts it. */
  readonly run: (read: Effect.Effect<CatchUpPage, E>, done: (page: CatchUpPage | E) => void) => () => void
  /** The feed's position now. */
  readonly position: () => number
  /** Called once, when the stream has ended or was torn down. */
  readonly onDone: () => void
}
