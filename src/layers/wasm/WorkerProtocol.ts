/**
 * The messages between the main thread and a guest worker (GuestWorker.ts). Every payload —
 * input, host call requests, answers, output — crosses as UTF-8 bytes in an ArrayBuffer that is
 * transferred, not copied: a big message never sits on either thread's JavaScript heap as a
 * string longer than it takes to encode or parse it.
 */
import type { MessagePort } from "node:worker_threads"

/** Bytes of an answer that travel in the shared buffer; a longer one goes on the `answers` port. */
export const INLINE_ANSWER_BYTES = 64 * 1024

/** Int32 words at the start of the shared buffer; the inline answer's bytes follow them. */
export const SIGNAL_WORD = 0
export const LENGTH_WORD = 1
export const HEADER_BYTES = 8

export interface WorkerData {
  /** The worker's end of the channel long answers come on (read with receiveMessageOnPort). */
  readonly answers: MessagePort
  /**
   * HEADER_BYTES + INLINE_ANSWER_BYTES, shared: word SIGNAL_WORD is bumped by the main thread
   * after each answer; word LENGTH_WORD is the answer's length when its bytes follow the header,
   * or -1 when it was posted on `answers`.
   */
  readonly signal: SharedArrayBuffer
}

export interface ActivateMessage {
  readonly type: "activate"
  /** The module's content hash; the worker keeps the modules it was sent by it. */
  readonly moduleId: string
  /** Sent only when the worker does not have it yet. */
  readonly module: WebAssembly.Module | undefined
  readonly entry: "brain_run" | "brain_tool"
  /** The input JSON, UTF-8 (transferred). */
  readonly input: Uint8Array
  readonly memory: { readonly initial: number; readonly maximum: number }
  /** Bytes: a host call request larger than this is answered `invalid_request` in the worker. */
  readonly maxRequestBytes: number
}

export type WorkerMessage =
  /** The worker has loaded and listens: sent once, before any activation reaches it. */
  | { readonly type: "ready" }
  /** A host call: its op and its request JSON, UTF-8 (checked well-formed by the worker; transferred). */
  | { readonly type: "call"; readonly op: string; readonly request: Uint8Array }
  /** The entry returned: its output JSON, UTF-8 (checked well-formed by the worker; transferred). */
  | { readonly type: "done"; readonly output: Uint8Array }
  | { readonly type: "failed"; readonly kind: "guest" | "trap" | "link" | "error"; readonly reason: string }
