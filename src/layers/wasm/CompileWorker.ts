/**
 * A worker thread that compiles guest modules (Compiler.ts), one request at a time: each message is
 * `{id, bytes}`, each answer `{id, ok: module}` (a WebAssembly.Module, which crosses threads
 * without being compiled again) or `{id, error}` (V8's reason). Compiling validates the whole
 * module: seconds for a large one, which the main thread must not spend.
 */
import { parentPort } from "node:worker_threads"
import type { ThreadAnswer } from "./OneThread.js"

export interface CompileRequest {
  readonly bytes: Uint8Array
}

parentPort!.on("message", ({ id, bytes }: CompileRequest & { readonly id: number }) => {
  let answer: ThreadAnswer<WebAssembly.Module>
  try {
    answer = { id, ok: new WebAssembly.Module(bytes) }
  } catch (err) {
    answer = { id, error: err instanceof Error ? err.message : String(err) }
  }
  parentPort!.postMessage(answer)
})
