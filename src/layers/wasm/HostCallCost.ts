/**
 * What one host call costs its guest's compute budget: the main thread's own work on it.
 *
 * A guest hands a request over as a pointer and a length; the main thread then checks and parses
 * it (JSON of up to BRAIN_MAX_WASM_IO_BYTES), and refuses it, answers it from memory, or starts
 * the effect it asks for. That work is done for the guest, not waited for, and it can be far more
 * than the guest's own: a loop repeating a 4 MiB `telemetry` call, or a write refused past
 * BRAIN_MAX_TURN_WRITE_BYTES, pays a pointer per call while the main thread parses 4 MiB. Uncharged,
 * such a loop ran on the main thread until its turn's wall-time bound, every other session waiting.
 *
 * So a call is charged the main thread's time on it: all of it when the call was answered without
 * the event loop turning (nothing waited for: a refusal, a read, a telemetry report), else the part
 * before its effect began (the checks and the parse). Waiting for the effect itself (a model's
 * answer, a tool, the journal's fdatasync) is never charged (docs/abi.md, "Limits").
 *
 * And a call whose work held the main thread for a millisecond or more gives the event loop a turn
 * before its guest goes on (`eventLoopTurn`): without it, the calls of such a loop, each answered
 * at once, ran back to back for hundreds of milliseconds with no other request served.
 */
import { Effect } from "effect"

/** `perform(op, request)`, telling `charge` the milliseconds of the main thread's own work on it once it is answered. */
export const chargedCall = (
  perform: (op: string, request: string) => Effect.Effect<string>,
  op: string,
  request: string,
  charge: (ms: number) => void
): Effect.Effect<string> => {
  const started = performance.now()
  // Set when the event loop turns before the answer: the call waited for something.
  let waited = false
  const watch = setImmediate(() => void (waited = true))
  const call = perform(op, request)
  const prepared = performance.now()
  return Effect.map(call, (answer) => {
    clearImmediate(watch)
    charge((waited ? prepared : performance.now()) - started)
    return answer
  })
}

/** A host call whose main-thread work took this long (ms) or more gives the event loop a turn before its guest goes on. */
export const YIELD_AFTER_HOST_MS = 1

/** One turn of the event loop (its I/O and timers run), not only of Effect's run queue. */
export const eventLoopTurn: Effect.Effect<void> = Effect.async<void>((resume) => {
  const turn = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(turn))
})
