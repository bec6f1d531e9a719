/**
 * How the main thread and a guest worker (GuestWorker.ts) talk. Both directions go through one
 * SharedArrayBuffer per thread, woken with `Atomics.notify`: the worker blocks in `Atomics.wait`
 * (when idle, and while a guest run as uploaded waits in a host call; a pinned guest unwinds
 * instead, and its answer comes as a job of its own, START_RESUME), the main thread in `Atomics.waitAsync`
 * (it never blocks). A payload up to INLINE_BYTES is copied into the buffer; a longer one, and
 * anything rare (a module the worker has not seen, a failure), goes on a MessagePort that the
 * other side reads with `receiveMessageOnPort` once woken — neither thread's event loop is in the
 * path of an activation, and no message is cloned on the common one.
 *
 * Every payload — input, host call requests, answers, output — is UTF-8 JSON; one that crosses
 * on a port crosses as bytes whose buffer is transferred, not copied.
 */
import type { MessagePort } from "node:worker_threads"

/**
 * The answer to a host call whose request is past BRAIN_MAX_WASM_IO_BYTES, given before anything of
 * it is done (docs/abi.md, "Limits"): `invalid_request`, its `details` the request's `bytes` and the
 * `limit`, which a loop reads to send what it meant in smaller requests (the official loop saves a
 * large round's results in pieces). One text for the three places a guest's call is answered.
 */
export const requestTooLarge = (bytes: number, limit: number): string =>
  JSON.stringify({
    error: { code: "invalid_request", message: `the request is above BRAIN_MAX_WASM_IO_BYTES (${limit})`, retryable: false, ambiguous: false, details: { bytes, limit } }
  })

/** Bytes of a payload that travel in the shared buffer (each direction has its own region). */
export const INLINE_BYTES = 64 * 1024

/**
 * Int32 words at the start of the shared buffer.
 *
 * Main → worker:
 * - START: bumped by the main thread to start an activation (the worker, idle, waits on it);
 * - START_KIND: how the activation comes — START_SAME: the same module, entry and limits as the
 *   thread's last one, input inline (START_LENGTH bytes in the `toWorker` region);
 *   START_POSTED: an ActivateMessage on `toWorker` (its input inline when START_LENGTH ≥ 0, else
 *   in the message);
 * - ANSWER (bumped after each answer) and ANSWER_LENGTH (the answer's length when its bytes are
 *   inline, -1 when it was posted on `toWorker`);
 * - STOP: the pin + 1 of a pinned activation given up while its guest computes (0: none). Its
 *   twin's metering reads the word where it reads the clock and stops the guest there (GuestTwin.ts):
 *   the worker drops its instance, reports it `stopped`, and goes on serving the thread's other
 *   pins. The main thread clears it once the activation's last job has reported (Pinned.ts).
 *
 * Worker → main:
 * - EVENT: bumped after each event (the main thread waits on it with `Atomics.waitAsync`);
 * - EVENT_KIND: EVENT_CALL (a host call: the op's EVENT_OP_LENGTH bytes then the request's,
 *   EVENT_LENGTH bytes in all, in the `toMain` region), EVENT_DONE (the output's EVENT_LENGTH
 *   bytes in `toMain`), EVENT_POSTED (a WorkerMessage on `toMain`);
 * - INSTANCES: bumped as the worker begins each instantiation, an activation's or one made ahead
 *   (read by tests; nothing waits on it).
 */
export const ANSWER_WORD = 0
export const ANSWER_LENGTH_WORD = 1
export const START_WORD = 2
export const START_KIND_WORD = 3
export const START_LENGTH_WORD = 4
export const EVENT_WORD = 5
export const EVENT_KIND_WORD = 6
export const EVENT_LENGTH_WORD = 7
export const EVENT_OP_LENGTH_WORD = 8
export const INSTANCES_WORD = 9
export const STOP_WORD = 10

export const START_SAME = 1
export const START_POSTED = 2
/** A ResumeMessage on `toWorker`: the answer to a pinned activation's host call, inline when START_LENGTH ≥ 0. */
export const START_RESUME = 3

export const EVENT_CALL = 1
export const EVENT_DONE = 2
export const EVENT_POSTED = 3

/** The header's bytes (16 words, some spare); the `toWorker` region follows, then `toMain`. */
export const HEADER_BYTES = 64
export const TO_WORKER_OFFSET = HEADER_BYTES
export const TO_MAIN_OFFSET = HEADER_BYTES + INLINE_BYTES
export const SHARED_BYTES = HEADER_BYTES + 2 * INLINE_BYTES

export interface WorkerData {
  /** Main → worker: ActivateMessages and long answers (and long inputs), read with receiveMessageOnPort. */
  readonly toWorker: MessagePort
  /** Worker → main: long requests and outputs, failures (WorkerMessage), read with receiveMessageOnPort. */
  readonly toMain: MessagePort
  /** SHARED_BYTES: the words above, then the two inline regions. */
  readonly shared: SharedArrayBuffer
}

export interface ActivateMessage {
  readonly type: "activate"
  /** The module's content hash; the worker keeps the modules it was sent by it. */
  readonly moduleId: string
  /** Sent only when the worker does not have it yet. */
  readonly module: WebAssembly.Module | undefined
  readonly entry: "brain_run" | "brain_tool"
  /** The input JSON, UTF-8 (transferred), when it is not inline. */
  readonly input: Uint8Array | undefined
  readonly memory: { readonly initial: number; readonly maximum: number }
  /** Bytes: a host call request larger than this is answered `invalid_request` in the worker. */
  readonly maxRequestBytes: number
  /**
   * Set when `module` is the guest's instrumented twin (Instrument.ts): the activation is
   * **pinned** to this thread under this number. At a host call its guest unwinds and the thread
   * goes on to other work; a ResumeMessage with the answer rewinds it (GuestTwin.ts).
   */
  readonly pin?: number
  /** A pinned activation's compute left, in milliseconds (0: no bound); its twin's metering stops it there. */
  readonly budgetMs?: number
  /** Pinned activations given up by the main thread: the worker drops their suspended instances. */
  readonly drops?: ReadonlyArray<number>
}

/** The answer to a pinned activation's host call (START_RESUME). */
export interface ResumeMessage {
  readonly type: "resume"
  readonly pin: number
  /** The answer's JSON, UTF-8 (transferred), when it is not inline. */
  readonly answer: Uint8Array | undefined
  readonly budgetMs: number
  readonly drops: ReadonlyArray<number>
}

/** What the worker posts on `toMain` (EVENT_POSTED), or on `parentPort` once (`ready`). */
export type WorkerMessage =
  /** The worker has loaded and waits for activations: sent once, on `parentPort`, before any reaches it. */
  | { readonly type: "ready" }
  /** A host call too long to be inline: its op and its request JSON, UTF-8 (checked well-formed by the worker; transferred). */
  | { readonly type: "call"; readonly op: string; readonly request: Uint8Array }
  /** An output too long to be inline: its JSON, UTF-8 (checked well-formed by the worker; transferred). */
  | { readonly type: "done"; readonly output: Uint8Array }
  | { readonly type: "failed"; readonly kind: FailedKind; readonly reason: string }

/**
 * Why an activation failed in the worker. A pinned one may also fail `budget` (its twin's metering
 * stopped it at its budget; the thread is fine), `unwind` (its call stack at a host call is above
 * the suspension buffer: it runs again, blocking its thread, Pinned.ts) or `stopped` (its metering
 * read its pin in STOP: its activation was given up; the thread is fine).
 */
export type FailedKind = "guest" | "trap" | "link" | "error" | "budget" | "unwind" | "stopped"

/**
 * A trap's reason with what the guest's memory had grown to, on either side: a guest whose
 * allocator could not grow its memory past the maximum traps with a bare `unreachable`, so the
 * figures say what the trap alone cannot. Exact, in pages and bytes (a memory is whole pages).
 */
export const trapReason = (message: string, memoryBytes: number, maximumPages: number) =>
  `${message} (its memory at ${memoryBytes / 65536} pages (${memoryBytes} bytes) of its ${maximumPages}-page (${maximumPages * 65536}-byte) maximum: the lower of the module's own declared maximum and BRAIN_MAX_WASM_MEMORY_BYTES)`
