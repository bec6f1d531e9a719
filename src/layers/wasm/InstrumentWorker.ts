/**
 * A worker thread that instruments guest modules (Instrument.ts), one request at a time: each
 * message is `{id, bytes}`, each answer `{id, ok: bytes}` (transferred) or `{id, error}`. A thread
 * of its own keeps Binaryen's memory and time off the main thread; Binaryen is loaded once per
 * thread, which the host keeps while requests come and stops when idle.
 */
import { parentPort } from "node:worker_threads"
import { instrument } from "./Instrument.js"

export interface InstrumentRequest {
  readonly id: number
  readonly bytes: Uint8Array
}

export type InstrumentAnswer = { readonly id: number; readonly ok: Uint8Array } | { readonly id: number; readonly error: string }

parentPort!.on("message", ({ id, bytes }: InstrumentRequest) => {
  let answer: InstrumentAnswer
  try {
    answer = { id, ok: instrument(bytes) }
  } catch (err) {
    answer = { id, error: err instanceof Error ? err.message : String(err) }
  }
  parentPort!.postMessage(answer, "ok" in answer ? [answer.ok.buffer as ArrayBuffer] : [])
})
