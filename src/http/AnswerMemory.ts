/**
 * The memory of large answers not yet taken by their clients (BRAIN_ANSWER_BYTES): a transcript
 * or an Events page holds its bytes of it from the moment it is built until its response has
 * been written or its connection closed, weighted by what the answer keeps in memory while its
 * socket has not taken it (the transcript it is written from, its encoded bytes).
 *
 * A client that reads nothing holds its answer until BRAIN_RESPONSE_STALL_MS cuts it: without a
 * bound, tens of such clients asking for large transcripts held more than the heap, and the
 * process died long before the cut. With it, an answer that does not fit beside those held is
 * refused at once with a retryable 503 `overloaded`, before anything of it is encoded; one
 * larger than the whole bound takes the whole bound (it is served when nothing else is held).
 * Nothing waits: a client that reads is served as soon as the clients that do not are cut.
 */
import * as v8 from "node:v8"
import { Effect, type Scope } from "effect"
import { Overloaded } from "../domain/Errors.js"
import { ANSWER_HEAP_FRACTION } from "../domain/Limits.js"

/** Large answers not yet taken by their clients (BRAIN_ANSWER_BYTES): the setting, or an eighth of the heap limit. */
export const answerBytes = (setting: number | undefined): number =>
  setting ?? Math.floor(v8.getHeapStatistics().heap_size_limit * ANSWER_HEAP_FRACTION)

export class AnswerMemory {
  private taken = 0

  constructor(readonly limit: number) {}

  /** Bytes held now. */
  get held(): number {
    return this.taken
  }

  /**
   * Takes `weight` bytes (at most the whole bound) for as long as the scope lasts (the response),
   * or fails `overloaded` at once, having taken nothing, when they do not fit beside what is held.
   */
  hold(weight: number, what: string): Effect.Effect<void, Overloaded, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.suspend(() => {
        const bytes = Math.min(this.limit, Math.max(0, Math.ceil(weight)))
        if (bytes > 0 && this.taken + bytes > this.limit) return Effect.fail(this.refusal(bytes, what))
        this.taken += bytes
        return Effect.succeed(bytes)
      }),
      (bytes) => Effect.sync(() => void (this.taken -= bytes))
    ).pipe(Effect.asVoid)
  }

  private refusal(bytes: number, what: string) {
    return new Overloaded({
      message: `the server holds its maximum of large answers not yet taken by their clients (BRAIN_ANSWER_BYTES, ${this.limit} bytes, ${this.taken} held); ${what} needs about ${bytes} bytes of it: try again shortly`
    })
  }
}
