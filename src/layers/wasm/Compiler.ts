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

/**
 * What one WasmHost has handed the compiling thread and not had answered: compiling, or waiting
 * their turn (one at a time, in order). An upload is refused while `max` are (BRAIN_WASM_COMPILE_QUEUE):
 * without a bound, a burst of uploads of large modules queued without limit, each holding its bytes
 * (up to BRAIN_MAX_WASM_MODULE_BYTES, twice) and its request for seconds each.
 */
export class CompileQueue {
  /** Modules handed over and not yet answered. */
  queued = 0
  /** Their answers, by content hash: the same bytes uploaded again meanwhile wait for that answer, not in the queue. */
  private readonly underWay = new Map<string, Promise<Answer<WebAssembly.Module>>>()
  constructor(
    readonly max: number = Number.POSITIVE_INFINITY,
    private readonly compile: (bytes: Uint8Array) => Promise<Answer<WebAssembly.Module>> = compileOffThread
  ) {}

  /** Whether an upload is refused now. */
  get full(): boolean {
    return this.queued >= this.max
  }

  /** The answer for the module of `hash` being compiled now, if it is. */
  underWayFor(hash: string): Promise<Answer<WebAssembly.Module>> | undefined {
    return this.underWay.get(hash)
  }

  run(bytes: Uint8Array, hash: string): Promise<Answer<WebAssembly.Module>> {
    this.queued++
    const answer = this.compile(bytes).finally(() => {
      this.queued--
      this.underWay.delete(hash)
    })
    this.underWay.set(hash, answer)
    return answer
  }
}

/** `bytes` compiled off the main thread, or V8's reason it does not compile (`transient` when the thread failed instead). */
export const compileOffThread = (bytes: Uint8Array): Promise<Answer<WebAssembly.Module>> => {
  compilerStats.requests++
  // A copy of its own to hand over: the caller keeps its bytes (to store them).
  const copy = new Uint8Array(bytes)
  return compiler({ bytes: copy }, [copy.buffer as ArrayBuffer])
}
