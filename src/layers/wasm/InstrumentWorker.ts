/**
 * A worker thread that instruments guest modules (Instrument.ts), one request at a time: each
 * message is `{id, bytes}`, each answer `{id, ok: bytes}` (transferred) or `{id, error}`
 * (OneThread.ts). A thread of its own keeps Binaryen's memory and time off the main thread;
 * Binaryen is loaded once per thread, which the host keeps while requests come and stops when idle.
 */
import { parentPort } from "node:worker_threads"
import { instrument } from "./Instrument.js"
import type { ThreadAnswer } from "./OneThread.js"

export interface InstrumentRequest {
  readonly bytes: Uint8Array
}

parentPort!.on("message", ({ id, bytes }: InstrumentRequest & { readonly id: number }) => {
  let answer: ThreadAnswer<Uint8Array>
  try {
    answer = { id, ok: instrument(bytes) }
  } catch (err) {
    answer = { id, error: err instanceof Error ? err.message : String(err) }
  }
  parentPort!.postMessage(answer, "ok" in answer ? [answer.ok.buffer as ArrayBuffer] : [])
})
