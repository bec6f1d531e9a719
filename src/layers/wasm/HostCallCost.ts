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
 * So a call is charged for reading its request, by its length: READ_CHARS_PER_MS characters a
 * millisecond, about what checking and parsing JSON costs the main thread (JsonText.ts
 * `scanJsonText` and JSON.parse: 2-6 ms a MiB of strings, up to 20 of numbers, on this project's
 * 2-core machine). By length, not by the clock: a clock would also count a garbage collection or
 * a loaded machine's descheduling that happened to fall inside a small request's parse, and move
 * an honest activation off the main thread for it. What the call's effect does is not charged:
 * the time it waits (a model's answer, a tool, the journal's fdatasync) never is (docs/abi.md,
 * "Limits").
 *
 * And a call whose request is long enough to take a millisecond to read gives the event loop a
 * turn before its guest goes on (Waits.ts `eventLoopTurn`): without it, the calls of such a loop, each
 * answered at once, ran back to back for hundreds of milliseconds with no other request served.
 */

/** Characters of a host request read per millisecond of its guest's compute budget. */
export const READ_CHARS_PER_MS = 256 * 1024

/** The milliseconds of compute a host request of `length` characters is charged (HostCallCost.ts). */
export const readingMs = (length: number): number => length / READ_CHARS_PER_MS

/** Whether a call whose reading was charged `ms` gives the event loop a turn before its guest goes on. */
export const yieldsAfter = (ms: number): boolean => ms >= 1
