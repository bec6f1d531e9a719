/**
 * The tool calls of an activation that are under way, and those a cancel could not stop: what a
 * turn closing after its cancel says did not stop, and waits for.
 *
 * A round is open from its dispatch to the fence's answer, which comes only once every call's
 * outcome is committed (or its commit failed or missed BRAIN_CLEANUP_DEADLINE_MS). A turn that
 * abandons its activation (it did not end within the grace once interrupted) while a round is open
 * waits for the round first, bounded: the outcomes are recorded before the turn's close, and the
 * turn's failure names the tool calls it waited on, not the loop, which was only waiting for them.
 */
import { Duration, Effect, Option } from "effect"
import { waitFor } from "../Waits.js"

export class OpenCalls {
  readonly #rounds = new Set<ReadonlyArray<string>>()
  #idle: Array<() => void> = []
  /** The tools of calls stopped by the turn's cancel whose executor did not confirm it stopped. */
  readonly unconfirmed: Array<string> = []

  /** A round of calls to these tools is under way; answers what `close` takes. */
  open(tools: ReadonlyArray<string>): ReadonlyArray<string> {
    const round = [...tools]
    this.#rounds.add(round)
    return round
  }

  /** The round has its answer. */
  close(round: ReadonlyArray<string>): void {
    if (!this.#rounds.delete(round) || this.#rounds.size > 0) return
    const idle = this.#idle
    this.#idle = []
    for (const wake of idle) wake()
  }

  /** The tools of the calls under way, in the order their rounds began. */
  get tools(): ReadonlyArray<string> {
    return [...this.#rounds].flat()
  }

  /** Waits until no round is under way, at most `ms`: true when none is. Interruptible. */
  settled(ms: number): Effect.Effect<boolean> {
    if (this.#rounds.size === 0) return Effect.succeed(true)
    const none = waitFor<void>((resume) => {
      const wake = () => resume(Effect.void)
      this.#idle.push(wake)
      return () => {
        this.#idle = this.#idle.filter((w) => w !== wake)
      }
    })
    return Effect.interruptible(none).pipe(Effect.timeoutOption(Duration.millis(ms)), Effect.map(Option.isSome))
  }
}

/** `tools` named for a message: `the tool call "a"`, `the tool calls "a" and "b"`. */
export const namedCalls = (tools: ReadonlyArray<string>): string => {
  const names = [...new Set(tools)].map((t) => JSON.stringify(t))
  const listed = names.length === 1 ? names[0]! : `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]!}`
  return `the tool call${tools.length === 1 ? "" : "s"} ${listed}`
}
