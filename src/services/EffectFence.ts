/**
 * EffectFence: commit `*_started` durably ⇒ dispatch exactly once ⇒ commit the outcome
 * referencing the started sequence ⇒ only then return. The outcome is committed even while the
 * caller is being interrupted. Nothing here retries.
 */
import { Context, type Effect, type Exit } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { Entry } from "../domain/Records.js"
import type { JournalAppendError } from "./Journal.js"

export interface Fenced<A, E> {
  readonly started: number
  /** How the dispatch ended; an interruption before dispatch means it never ran. */
  readonly exit: Exit.Exit<A, E>
  /** Whether dispatch ran (false when interrupted between the started commit and dispatch). */
  readonly dispatched: boolean
  /** The outcome record's sequence, or undefined when it could not be committed in time. */
  readonly outcome: number | undefined
}

export interface EffectFenceShape {
  readonly fence: <A, E>(
    session: SessionId,
    started: Entry,
    dispatch: (started: number) => Effect.Effect<A, E>,
    outcome: (started: number, exit: Exit.Exit<A, E>, dispatched: boolean) => Entry,
    /** Called with the outcome entry's records folded, before the caller sees the result. */
    onCommit?: (entries: ReadonlyArray<readonly [number, Entry]>) => void
  ) => Effect.Effect<Fenced<A, E>, JournalAppendError>
}

export class EffectFence extends Context.Tag("brain/EffectFence")<EffectFence, EffectFenceShape>() {}
