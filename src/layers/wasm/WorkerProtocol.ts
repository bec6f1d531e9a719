/**
 * The messages between the main thread and a guest worker (GuestWorker.ts).
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
  readonly input: string
  readonly memory: { readonly initial: number; readonly maximum: number }
  /** Bytes: a host call request larger than this is answered `invalid_request` in the worker. */
  readonly maxRequestBytes: number
}

export type WorkerMessage =
  | { readonly type: "call"; readonly op: string; readonly request: string }
  | { readonly type: "done"; readonly output: string }
  | { readonly type: "failed"; readonly kind: "guest" | "trap" | "link" | "error"; readonly reason: string }
