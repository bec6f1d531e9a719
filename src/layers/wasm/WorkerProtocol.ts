/**
 * The messages between the main thread and a guest worker (GuestWorker.ts). Every payload —
 * input, host call requests, answers, output — crosses as UTF-8 bytes in an ArrayBuffer that is
 * transferred, not copied: a big message never sits on either thread's JavaScript heap as a
 * string longer than it takes to encode or parse it.
 */
import type { MessagePort } from "node:worker_threads"

export interface WorkerData {
  /** The worker's end of the channel answers come on (read with receiveMessageOnPort). */
  readonly answers: MessagePort
  /** One Int32 word, bumped by the main thread after each answer it posts. */
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
  /** A host call: its op and its request JSON, UTF-8 (checked well-formed by the worker; transferred). */
  | { readonly type: "call"; readonly op: string; readonly request: Uint8Array }
  /** The entry returned: its output JSON, UTF-8 (checked well-formed by the worker; transferred). */
  | { readonly type: "done"; readonly output: Uint8Array }
  | { readonly type: "failed"; readonly kind: "guest" | "trap" | "link" | "error"; readonly reason: string }
