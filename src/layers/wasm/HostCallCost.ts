/**
 * What one host call costs its guest's compute budget: the main thread's own work on it.
 *
 * A guest hands a request over as a pointer and a length; the main thread then checks and parses
 * it (JSON of up to BRAIN_MAX_WASM_IO_BYTES), and refuses it, answers it from memory, or starts
 * the effect it asks for. That work is done for the guest, not waited for, and it can be far more
 * than the guest's own: a loop repeating a 16 MiB `telemetry` call, or a write refused past
 * BRAIN_MAX_TURN_WRITE_BYTES, pays a pointer per call while the main thread parses 16 MiB.
 * Uncharged, such a loop ran on the main thread until its turn's wall-time bound, every other
 * session waiting.
 *
 * So a call is charged what the main thread spent on it, by the clock (`chargedCall`): the checks
 * and the parse (the building of the call's effect), and all of its effect too when that answered
 * without waiting for anything (a refusal, a read answered from memory, a `telemetry` report). The
 * time the effect waits (a model's answer, a tool, the journal's fdatasync) is never charged
 * (docs/abi.md, "Limits"). And never less than the request's length at READ_CHARS_PER_MS: a
 * cheaper reading than that is not trusted to the clock.
 *
 * By the clock, not by the length alone: what a request costs depends on what it holds, not only
 * on its length. A JSON array of a million numbers costs the main thread 15-20 times what as many
 * characters of a string do (its scan, JSON.parse and the garbage of a million values), and a loop
 * charged by length at a string's rate held the main thread for ten times its budget. The clock
 * may also count a pause (a garbage collection, a loaded machine's descheduling) that falls inside
 * a call, as it may inside the guest's own compute, which is clocked too; a small request's
 * reading takes microseconds, so such a pause falls there about as rarely as that share of the
 * activation's time.
 *
 * And a call that held the main thread a millisecond or more gives the event loop a turn before
 * its guest goes on (Waits.ts `eventLoopTurn`): without it, the calls of such a loop, each
 * answered at once, ran back to back for hundreds of milliseconds with no other request served.
 */
import { Effect } from "effect"

/** Characters of a host request read per millisecond of its guest's compute budget, at least (a JSON string's rate). */
export const READ_CHARS_PER_MS = 256 * 1024

/** The milliseconds of compute a host request of `length` characters is charged at least (HostCallCost.ts). */
export const readingMs = (length: number): number => length / READ_CHARS_PER_MS

/**
 * `perform(op, request)`, then `answered` with its answer and the milliseconds of compute the call
 * costs its guest (HostCallCost.ts): the main thread's time on building it, and on its effect
 * when that answered without waiting; never less than `readingMs` of the request. `began`: when the
 * main thread's work on the call began, when its caller read the clock as the guest's stretch of
 * compute ended just before (a clock read the less per call); now by default. The answer goes on
 * to `answered` in the same step as it is charged (one step of the fiber a call, not two).
 */
export const chargedCall = <A, E>(
  perform: (op: string, request: string) => Effect.Effect<string>,
  op: string,
  request: string,
  answered: (answer: string, ms: number) => Effect.Effect<A, E>,
  began: number = performance.now()
): Effect.Effect<A, E> => {
  const call = perform(op, request)
  const built = performance.now()
  // Set by a microtask queued now: an answer that comes after it waited for something (the call
  // runs as its guest's step goes on, before any microtask).
  let waited = false
  queueMicrotask(() => void (waited = true))
  return Effect.flatMap(call, (answer) => {
    const ms = built - began + (waited ? 0 : performance.now() - built)
    return answered(answer, Math.max(ms, readingMs(request.length)))
  })
}

/** Whether a call charged `ms` gives the event loop a turn before its guest goes on. */
export const yieldsAfter = (ms: number): boolean => ms >= 1
