/**
 * Compiles an uploaded module on a thread of its own (CompileWorker.ts, started on demand, stopped
 * when idle): V8 validates a module whole as it compiles it, seconds for a large one (28 MiB of
 * nested blocks: about 2 s), and `WebAssembly.compile` on the main thread still spends most of that
 * there when the module turns out invalid. The main thread copies the bytes and gets the module.
 */
import { DIST_ROOT } from "../../DistRoot.js"
import type { CompileRequest } from "./CompileWorker.js"
import { type Answer, oneThread } from "./OneThread.js"

/** The compiling thread's module (compiled; under the tests too). */
export const COMPILE_WORKER_URL = new URL("layers/wasm/CompileWorker.js", DIST_ROOT)

/** Modules handed to the compiling thread in this process (for tests). */
export const compilerStats = { requests: 0 }

const compiler = oneThread<CompileRequest, WebAssembly.Module>(COMPILE_WORKER_URL)

/** `bytes` compiled off the main thread, or V8's reason it does not compile (`transient` when the thread failed instead). */
export const compileOffThread = (bytes: Uint8Array): Promise<Answer<WebAssembly.Module>> => {
  compilerStats.requests++
  // A copy of its own to hand over: the caller keeps its bytes (to store them).
  const copy = new Uint8Array(bytes)
  return compiler({ bytes: copy }, [copy.buffer as ArrayBuffer])
}
