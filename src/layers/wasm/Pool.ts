/**
 * The pool of guest worker threads (GuestWorker.ts): started on demand, each running one
 * activation at a time; the guests that run at once are bounded apart from the threads (see
 * Pool). An activation takes a thread, gives it back when done, and gives back a *broken* one
 * (terminated: a runaway guest, a crash, an interrupted activation) to be replaced: the pool
 * never hands out a thread in an unknown state.
 */
import { Worker } from "node:worker_threads"
import { MessageChannel, type MessagePort } from "node:worker_threads"
import { Deferred, Effect, FiberId } from "effect"
import { type ActivateMessage, HEADER_BYTES, INLINE_ANSWER_BYTES, LENGTH_WORD, SIGNAL_WORD, type WorkerMessage } from "./WorkerProtocol.js"

/** Modules a worker keeps; GuestWorker evicts in the same order (oldest first). */
const WORKER_MODULES = 64

/**
 * The worker's script, compiled. Run from the sources (the test runner loads .ts files), this
 * module finds it in the build: a worker thread cannot load TypeScript.
 */
const WORKER_URL = import.meta.url.endsWith(".ts")
  ? new URL("../../../dist/layers/wasm/GuestWorker.js", import.meta.url)
  : new URL("./GuestWorker.js", import.meta.url)

/** What a thread reports to the activation it runs: the worker's messages, or its death. */
export type ThreadEvent = WorkerMessage | { readonly type: "died"; readonly reason: string }

export class GuestThread {
  private readonly worker: Worker
  private readonly answers: MessagePort
  private readonly signal: Int32Array
  private readonly inline: Uint8Array
  /** The activation in progress listens here. */
  listener: ((event: ThreadEvent) => void) | undefined = undefined
  dead = false
  /** Held by an Agentloop's activation (the pool counts those). */
  loop = false
  /** Modules the worker keeps (GuestWorker's WORKER_MODULES, same order of eviction). */
  private readonly modules = new Set<string>()
  /** Whether `ready` has settled: an activation on a loaded thread need not wait on it. */
  loaded = false
  private settle!: () => void
  private started = () => {
    this.loaded = true
    this.settle()
  }
  /**
   * Settles once the worker has loaded (or died first). An activation waits for it before it
   * starts its guest, so starting a thread never counts against a guest's compute budget.
   */
  readonly ready: Promise<void> = new Promise((resolve) => (this.settle = resolve))

  constructor() {
    const channel = new MessageChannel()
    const signal = new SharedArrayBuffer(HEADER_BYTES + INLINE_ANSWER_BYTES)
    this.answers = channel.port1
    this.signal = new Int32Array(signal, 0, HEADER_BYTES / 4)
    this.inline = new Uint8Array(signal, HEADER_BYTES)
    this.worker = new Worker(WORKER_URL, {
      workerData: { answers: channel.port2, signal },
      transferList: [channel.port2]
    })
    this.worker.on("message", (m: WorkerMessage) => (m.type === "ready" ? this.started() : this.listener?.(m)))
    this.worker.on("error", (err) => this.die(`the worker failed: ${err.message}`))
    this.worker.on("exit", (code) => this.die(`the worker exited (${code})`))
    // An idle worker must not keep the process alive.
    this.worker.unref()
  }

  /** Why the worker died, once it has. */
  deathReason: string | undefined = undefined

  private die(reason: string) {
    if (this.dead) return
    this.dead = true
    this.deathReason = reason
    this.started()
    this.listener?.({ type: "died", reason })
  }

  /** Starts an activation; the module itself crosses to the worker only the first time. */
  start(message: Omit<ActivateMessage, "module">, module: WebAssembly.Module) {
    const known = this.modules.has(message.moduleId)
    if (!known) {
      this.modules.add(message.moduleId)
      if (this.modules.size > WORKER_MODULES) this.modules.delete(this.modules.values().next().value!)
    }
    // The input's buffer moves to the worker (Activation encodes it into one of its own).
    this.worker.postMessage({ ...message, module: known ? undefined : module }, [message.input.buffer as ArrayBuffer])
  }

  /**
   * Answers the host call the guest is blocked in: a short answer is copied into the shared
   * buffer, a long one's buffer moves to the worker on the port; then the guest is woken.
   */
  answer(bytes: Uint8Array) {
    if (bytes.byteLength <= INLINE_ANSWER_BYTES) {
      this.inline.set(bytes)
      Atomics.store(this.signal, LENGTH_WORD, bytes.byteLength)
    } else {
      this.answers.postMessage(bytes, [bytes.buffer as ArrayBuffer])
      Atomics.store(this.signal, LENGTH_WORD, -1)
    }
    Atomics.add(this.signal, SIGNAL_WORD, 1)
    Atomics.notify(this.signal, SIGNAL_WORD)
  }

  terminate() {
    this.dead = true
    this.deathReason ??= "the worker was stopped"
    this.started()
    this.listener = undefined
    this.answers.close()
    void this.worker.terminate()
  }
}

/** Milliseconds a thread above the pool's `compute` count may sit idle before it is stopped. */
export const SPARE_THREAD_IDLE_MS = 10_000

export interface PoolSize {
  /** Guests that may run at once (BRAIN_WASM_WORKERS): the rest wait for a turn to compute. */
  readonly compute: number
  /**
   * Threads at most (BRAIN_WASM_THREADS), counting those whose guest is blocked in a host call:
   * such a guest holds its thread but no compute. At least `compute`.
   */
  readonly threads: number
}

/**
 * Threads and compute, counted apart. A guest blocked in a host call (`Atomics.wait`) keeps its
 * thread, because its stack lives there, but uses no CPU: so while Brain journals a model call or
 * runs a tool for one session, other sessions' guests run. `compute` bounds the guests running at
 * once; `threads` bounds the threads, which cost memory (an idle Node worker is about 8 MiB), and
 * threads above `compute` are stopped after SPARE_THREAD_IDLE_MS idle.
 *
 * Agentloops may hold at most `threads - compute` threads: a loop waits in `dispatch` for its
 * tools, and a Wasm tool needs a thread of its own, so the last `compute` threads are kept for
 * tools, which wait for nothing (they may only emit and report telemetry) — loops blocked on
 * their tools can never hold every thread.
 */
export class Pool {
  private readonly idle: Array<{ readonly thread: GuestThread; readonly since: number }> = []
  private readonly waiting: Array<{ readonly loop: boolean; readonly deferred: Deferred.Deferred<GuestThread> }> = []
  private started = 0
  private loops = 0
  private closed = false
  private readonly trim: ReturnType<typeof setInterval>
  readonly size: PoolSize
  /** Held while a guest runs: taken before it starts or gets a host call's answer, given back when it calls or ends. */
  readonly compute: Effect.Semaphore

  constructor(size: number | PoolSize) {
    const s = typeof size === "number" ? { compute: size, threads: size } : size
    const compute = Math.max(1, s.compute)
    // With one thread per compute slot there is no spare for tools: give tools their own.
    this.size = { compute, threads: Math.max(compute + 1, s.threads) }
    this.compute = Effect.unsafeMakeSemaphore(compute)
    this.trim = setInterval(() => this.stopSpares(), SPARE_THREAD_IDLE_MS)
    this.trim.unref()
  }

  /** Whether a waiter of this kind may take a thread now. */
  private mayTake(loop: boolean) {
    return !loop || this.loops < this.size.threads - this.size.compute
  }

  private take(thread: GuestThread, loop: boolean) {
    if (loop) this.loops++
    thread.loop = loop
    return thread
  }

  /**
   * A thread for one activation (`loop`: an Agentloop's, else a tool's): an idle one, a new one
   * while under the size, else the next one released.
   */
  acquire(loop: boolean): Effect.Effect<GuestThread> {
    return Effect.suspend(() => {
      if (this.mayTake(loop)) {
        const idle = this.idle.pop()
        if (idle) return Effect.succeed(this.take(idle.thread, loop))
        if (this.started < this.size.threads) {
          this.started++
          return Effect.sync(() => this.take(new GuestThread(), loop))
        }
      }
      const deferred = Deferred.unsafeMake<GuestThread>(FiberId.none)
      const waiter = { loop, deferred }
      this.waiting.push(waiter)
      return Deferred.await(deferred).pipe(
        // Given up (the activation was interrupted while waiting): hand on a thread it got.
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            const i = this.waiting.indexOf(waiter)
            if (i >= 0) this.waiting.splice(i, 1)
          }).pipe(
            Effect.zipRight(Deferred.poll(deferred)),
            Effect.flatMap((got) => (got._tag === "Some" ? Effect.flatMap(got.value, (t) => this.release(t, true)) : Effect.void))
          )
        )
      )
    })
  }

  /** Gives a thread back; a broken one is terminated and replaced. */
  release(thread: GuestThread, healthy: boolean): Effect.Effect<void> {
    return Effect.sync(() => {
      thread.listener = undefined
      if (thread.loop) this.loops--
      thread.loop = false
      let next: GuestThread | undefined = thread
      if (!healthy || thread.dead) {
        if (!thread.dead) thread.terminate()
        next = this.closed ? undefined : new GuestThread()
      }
      if (this.closed) {
        next?.terminate()
        this.started--
        return
      }
      this.handOn(next!)
    })
  }

  /** Gives a free thread to the first waiter allowed to take one, else keeps it idle. */
  private handOn(thread: GuestThread) {
    const i = this.waiting.findIndex((w) => this.mayTake(w.loop))
    if (i >= 0) {
      const [waiter] = this.waiting.splice(i, 1)
      Deferred.unsafeDone(waiter!.deferred, Effect.succeed(this.take(thread, waiter!.loop)))
      return
    }
    this.idle.push({ thread, since: Date.now() })
  }

  /** Stops threads above `compute` that have been idle for SPARE_THREAD_IDLE_MS. */
  private stopSpares() {
    const cutoff = Date.now() - SPARE_THREAD_IDLE_MS
    // The oldest idle threads are first (idle threads are taken from the end).
    while (this.started > this.size.compute && this.idle.length > 0 && this.idle[0]!.since <= cutoff) {
      this.idle.shift()!.thread.terminate()
      this.started--
    }
  }

  /** Terminates every idle thread; threads in use are terminated when given back. */
  readonly close = Effect.sync(() => {
    this.closed = true
    clearInterval(this.trim)
    for (const t of this.idle.splice(0)) {
      t.thread.terminate()
      this.started--
    }
  })
}
