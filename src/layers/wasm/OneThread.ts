/**
 * One worker thread for one kind of work the main thread must not do itself (instrumenting a
 * module: InlineModules.ts; compiling one: Compiler.ts), one request at a time in the order asked:
 * started on demand, stopped once idle for IDLE_MS, and never keeping the process alive.
 *
 * Each request goes as `{id, ...request}`; the thread answers `{id, ok}` or `{id, error}`. A
 * thread that fails or exits answers every pending request with a `transient` error (the thread
 * failed, not the request), and the next request starts a new one.
 */
import { Worker } from "node:worker_threads"

/** Milliseconds a thread stays after its last answer. */
const IDLE_MS = 5_000

/** A thread's answer; `transient` when the thread failed, not the request. */
export type Answer<A> = { readonly ok: A } | { readonly error: string; readonly transient?: boolean }

/** What a thread posts back. */
export type ThreadAnswer<A> = { readonly id: number; readonly ok: A } | { readonly id: number; readonly error: string }

/** Asks the thread of `url` (started if it is not running): the request, and what to transfer with it. */
export const oneThread = <R extends object, A>(url: URL) => {
  let worker: Worker | undefined
  let idle: ReturnType<typeof setTimeout> | undefined
  let nextId = 0
  const pending = new Map<number, (answer: Answer<A>) => void>()
  const stop = (reason: string) => {
    const w = worker
    worker = undefined
    for (const resolve of pending.values()) resolve({ error: reason, transient: true })
    pending.clear()
    if (w !== undefined) void w.terminate()
  }
  const start = () => {
    const w = new Worker(url)
    w.unref()
    w.on("message", (answer: ThreadAnswer<A>) => {
      const resolve = pending.get(answer.id)
      pending.delete(answer.id)
      resolve?.(answer)
      if (pending.size === 0) idle = setTimeout(() => pending.size === 0 && worker === w && stop("stopped"), IDLE_MS)
      idle?.unref()
    })
    w.on("error", (err) => worker === w && stop(`the thread failed: ${err.message}`))
    w.on("exit", () => worker === w && stop("the thread exited"))
    return w
  }
  return (request: R, transfer: ReadonlyArray<ArrayBuffer> = []): Promise<Answer<A>> =>
    new Promise((resolve) => {
      if (idle !== undefined) clearTimeout(idle)
      idle = undefined
      worker ??= start()
      const id = nextId++
      pending.set(id, resolve)
      worker.postMessage({ id, ...request }, transfer as Array<ArrayBuffer>)
    })
}
