/**
 * One worker thread for one kind of work the main thread must not do itself (instrumenting a
 * module: InlineModules.ts; compiling one: Compiler.ts), one request at a time in the order asked:
 * started on demand, stopped once idle for IDLE_MS, and never keeping the process alive.
 *
 * Each request goes as `{id, ...request}`; the thread answers `{id, ok}` or `{id, error}`. A
 * thread that fails or exits answers every pending request with a `transient` error (the thread
 * failed, not the request), and the next request starts a new one.
 *
 * With a deadline, a request the thread has not answered that many milliseconds after it became
 * the thread's (it was handed over to an idle thread, or the request before it was answered) is
 * answered `overdue`: the thread is terminated (whatever it computes, and its memory, go with it)
 * and a new one started for the requests waiting behind it, handed over again in their order. So
 * no request holds the ones behind it longer than the deadline. A request is then kept until it
 * is answered, and its bytes are copied to the thread rather than transferred.
 */
import { Worker } from "node:worker_threads"

/** Milliseconds a thread stays after its last answer. */
const IDLE_MS = 5_000

/** A thread's answer; `transient` when the thread failed, not the request; `overdue` when the request took past the deadline. */
export type Answer<A> = { readonly ok: A } | { readonly error: string; readonly transient?: boolean; readonly overdue?: boolean }

/** What a thread posts back. */
export type ThreadAnswer<A> = { readonly id: number; readonly ok: A } | { readonly id: number; readonly error: string }

/** `deadlineMs`: a request's, read as it becomes the thread's (none: no deadline). */
export interface OneThreadOptions<R> {
  readonly deadlineMs?: (request: R) => number
}

/** Asks the thread of `url` (started if it is not running): the request, and what to transfer with it. */
export const oneThread = <R extends object, A>(url: URL, options: OneThreadOptions<R> = {}) => {
  let worker: Worker | undefined
  let idle: ReturnType<typeof setTimeout> | undefined
  let overdue: ReturnType<typeof setTimeout> | undefined
  let nextId = 0
  /** Requests not answered, in the order handed over (the first is the thread's now). */
  const pending = new Map<number, { readonly resolve: (answer: Answer<A>) => void; readonly request: R; readonly message: object }>()
  const stop = (reason: string) => {
    const w = worker
    worker = undefined
    if (overdue !== undefined) clearTimeout(overdue)
    overdue = undefined
    for (const { resolve } of pending.values()) resolve({ error: reason, transient: true })
    pending.clear()
    if (w !== undefined) void w.terminate()
  }
  /** Times the request that is the thread's now, when there is a deadline. */
  const arm = () => {
    if (overdue !== undefined) clearTimeout(overdue)
    overdue = undefined
    const head = pending.keys().next()
    if (options.deadlineMs === undefined || head.done === true) return
    const id = head.value
    const ms = options.deadlineMs(pending.get(id)!.request)
    overdue = setTimeout(() => {
      overdue = undefined
      const late = pending.get(id)
      if (late === undefined) return
      pending.delete(id)
      const w = worker
      worker = undefined
      if (w !== undefined) void w.terminate()
      late.resolve({ error: `it took the thread past its deadline of ${ms} ms: the thread was stopped`, overdue: true })
      if (pending.size === 0) return
      // The requests behind it, to a new thread in their order.
      worker = start()
      for (const p of pending.values()) worker.postMessage(p.message)
      arm()
    }, ms)
    overdue.unref()
  }
  const start = () => {
    const w = new Worker(url)
    w.unref()
    w.on("message", (answer: ThreadAnswer<A>) => {
      if (worker !== w) return
      const p = pending.get(answer.id)
      pending.delete(answer.id)
      p?.resolve(answer)
      arm()
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
      const message = { id, ...request }
      pending.set(id, { resolve, request, message })
      // With a deadline the request may be handed to another thread: it keeps its bytes.
      worker.postMessage(message, options.deadlineMs === undefined ? transfer as Array<ArrayBuffer> : [])
      if (pending.size === 1) arm()
    })
}
