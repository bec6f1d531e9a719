/**
 * The SSE catch-up pages streams hold until their sockets have taken them, counted against one
 * bound for the whole process (BRAIN_ANSWER_BYTES, as much again as the large answers of the page
 * and transcript routes). A page is read only while what is held is below the bound, and reads run
 * SSE_CATCH_UP_READS at a time: what is held stays below the bound and that many pages (a page is
 * about SSE_CATCH_UP_BYTES; a larger Event comes alone). A stream held back waits in line, holding
 * nothing, and reads once room is made: when a stream's socket has taken its page (it asks for the
 * next) or the stream is over and its connection closed.
 *
 * Before, each stream that did not read held its page for BRAIN_SSE_STALL_MS: 672 streams (every
 * limit at its default) on sessions of 4 MiB Events held 672 of them, 2.7 GB outside the heap.
 */
import { Effect } from "effect"

export class HeldPages {
  private bytes = 0
  private readonly waiters: Array<() => void> = []

  constructor(readonly limit: number) {}

  /** Bytes held now. */
  get held(): number {
    return this.bytes
  }

  /** Whether a page may be read now. */
  get room(): boolean {
    return this.bytes < this.limit
  }

  /** Waits in line until a page may be read (at once when it may and nobody waits). */
  readonly whenRoom: Effect.Effect<void> = Effect.async<void>((resume) => {
    if (this.room && this.waiters.length === 0) return resume(Effect.void)
    const go = () => resume(Effect.void)
    this.waiters.push(go)
    return Effect.sync(() => {
      const at = this.waiters.indexOf(go)
      if (at >= 0) this.waiters.splice(at, 1)
    })
  })

  /** Holds `bytes` until the answer is called (once, whatever calls it again). */
  take(bytes: number): () => void {
    this.bytes += bytes
    let given = false
    return () => {
      if (given) return
      given = true
      this.bytes -= bytes
      this.wake()
    }
  }

  /** Lets the first waiter try (it reads only if room is left once it has its read's turn). */
  private wake() {
    if (this.room) this.waiters.shift()?.()
  }

  /** Wakes the next waiter: a waiter that found no room once it had its turn gives way this way. */
  next() {
    this.wake()
  }
}
