/**
 * The pool of guest worker threads (GuestWorker.ts): started on demand, each running one
 * activation at a time; the guests that run at once are bounded apart from the threads (see
 * Pool). An activation takes a thread, gives it back when done, and gives back a *broken* one
 * (terminated: a runaway guest, a crash, an interrupted activation) to be replaced: the pool
 * never hands out a thread in an unknown state.
 */
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads"
import { Deferred, Effect, FiberId } from "effect"
import { DIST_ROOT } from "../../DistRoot.js"
import {
  type ActivateMessage,
  ANSWER_LENGTH_WORD,
  ANSWER_WORD,
  EVENT_CALL,
  EVENT_DONE,
  EVENT_KIND_WORD,
  EVENT_LENGTH_WORD,
  EVENT_OP_LENGTH_WORD,
  EVENT_WORD,
  HEADER_BYTES,
  INLINE_BYTES,
  INSTANCES_WORD,
  SHARED_BYTES,
  START_KIND_WORD,
  START_LENGTH_WORD,
  START_POSTED,
  START_SAME,
  START_WORD,
  TO_MAIN_OFFSET,
  TO_WORKER_OFFSET,
  type WorkerMessage
} from "./WorkerProtocol.js"

/** Modules a worker keeps; GuestWorker evicts in the same order (oldest first). */
const WORKER_MODULES = 64

/**
 * MiB. A worker's JavaScript heap (its old generation). What a guest costs there is its instance
 * and its tables (bounded at admission, wasm/Module.ts: 1 MiB at most); its memory and compiled
 * code are outside the heap, and every payload crosses as bytes. Without a bound a worker shares
 * the process's, and a worker whose heap runs out ends the process; with one, Node stops only the
 * worker (ERR_WORKER_OUT_OF_MEMORY): its activation fails and the thread is replaced. (One
 * allocation far past the bound still ends the process — V8 gives the heap no more than a little
 * room to finish — which is why admission bounds tables, the one large allocation a guest asks for.)
 */
export const WORKER_HEAP_MB = 128

/**
 * The worker's script, compiled. Run from the sources (the test runner loads .ts files), this
 * module finds it in the build: a worker thread cannot load TypeScript.
 */
export const WORKER_URL = new URL("layers/wasm/GuestWorker.js", DIST_ROOT)

/**
 * What a thread reports to the activation it runs: a host call (its op and request text), the
 * output (its text and its length in bytes), a failure, or the worker's death.
 */
export type ThreadEvent =
  | { readonly type: "call"; readonly op: string; readonly request: string }
  | { readonly type: "done"; readonly output: string; readonly bytes: number }
  | Extract<WorkerMessage, { type: "failed" }>
  | { readonly type: "died"; readonly reason: string }

/** What a thread is told to run: everything of an ActivateMessage but the module (sent when the worker lacks it). */
export type StartMessage = Omit<ActivateMessage, "type" | "module" | "input"> & { readonly input: Uint8Array }

const utf8 = new TextDecoder()

export class GuestThread {
  private readonly worker: Worker
  private readonly toWorker: MessagePort
  private readonly toMain: MessagePort
  private readonly words: Int32Array
  private readonly toWorkerBytes: Uint8Array
  /** The `toMain` region as a Buffer: its text is decoded straight from the shared memory. */
  private readonly toMainBytes: Buffer
  /** EVENT words taken: the next event is there when the word differs. */
  private events = 0
  /** Whether an `Atomics.waitAsync` for the next event is pending. */
  private waiting = false
  /** The limits and module of the thread's last activation, as `moduleId|entry|initial|maximum|maxRequestBytes`. */
  private lastStart: string | undefined = undefined
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
    const toWorker = new MessageChannel()
    const toMain = new MessageChannel()
    const shared = new SharedArrayBuffer(SHARED_BYTES)
    this.toWorker = toWorker.port1
    this.toMain = toMain.port2
    this.words = new Int32Array(shared, 0, HEADER_BYTES / 4)
    this.toWorkerBytes = new Uint8Array(shared, TO_WORKER_OFFSET, INLINE_BYTES)
    this.toMainBytes = Buffer.from(shared, TO_MAIN_OFFSET, INLINE_BYTES)
    this.worker = new Worker(WORKER_URL, {
      workerData: { toWorker: toWorker.port2, toMain: toMain.port1, shared },
      transferList: [toWorker.port2, toMain.port1],
      resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB }
    })
    this.worker.on("message", (m: WorkerMessage) => {
      if (m.type !== "ready") return
      // Loaded and idle, the worker must not keep the process alive (it does while it loads, for an activation waiting on it).
      if (this.listener === undefined) this.worker.unref()
      this.started()
    })
    this.worker.on("error", (err) => this.die(`the worker failed: ${err.message}`))
    this.worker.on("exit", (code) => this.die(`the worker exited (${code})`))
  }

  /** Why the worker died, once it has. */
  deathReason: string | undefined = undefined

  private die(reason: string) {
    if (this.dead) return
    this.dead = true
    this.deathReason = reason
    this.started()
    this.release()
    this.listener?.({ type: "died", reason })
  }

  /** Ends a pending `Atomics.waitAsync` of this thread's (the main thread may wake its own wait). */
  private release() {
    if (this.waiting) Atomics.notify(this.words, EVENT_WORD)
  }

  /**
   * Starts an activation: the same module and limits as the thread's last one go as the input
   * alone (inline when it fits); anything else as a message, with the module only the first time.
   */
  start(message: StartMessage, module: WebAssembly.Module) {
    const key = `${message.moduleId}|${message.entry}|${message.memory.initial}|${message.memory.maximum}|${message.maxRequestBytes}`
    const inline = message.input.byteLength <= INLINE_BYTES
    if (inline) this.toWorkerBytes.set(message.input)
    if (key === this.lastStart && inline) {
      Atomics.store(this.words, START_KIND_WORD, START_SAME)
    } else {
      const known = this.modules.has(message.moduleId)
      if (!known) {
        this.modules.add(message.moduleId)
        if (this.modules.size > WORKER_MODULES) this.modules.delete(this.modules.values().next().value!)
      }
      const activate: ActivateMessage = { ...message, type: "activate", module: known ? undefined : module, input: inline ? undefined : message.input }
      // A long input's buffer moves to the worker (Activation encodes it into one of its own).
      this.toWorker.postMessage(activate, inline ? [] : [message.input.buffer as ArrayBuffer])
      Atomics.store(this.words, START_KIND_WORD, START_POSTED)
      this.lastStart = key
    }
    Atomics.store(this.words, START_LENGTH_WORD, inline ? message.input.byteLength : -1)
    // Running, the thread keeps the process alive (its events come through Atomics.waitAsync, which does not).
    this.worker.ref()
    Atomics.add(this.words, START_WORD, 1)
    Atomics.notify(this.words, START_WORD)
    this.await()
  }

  /**
   * Answers the host call the guest is blocked in: a short answer is written into the shared
   * buffer, a long one's bytes move to the worker on the port; then the guest is woken.
   */
  answer(text: string) {
    // At most 3 bytes per UTF-16 unit: a text that short surely fits.
    let length = -1
    if (text.length * 3 <= INLINE_BYTES) length = encoder.encodeInto(text, this.toWorkerBytes).written
    else {
      const bytes = encoder.encode(text)
      if (bytes.byteLength <= INLINE_BYTES) {
        this.toWorkerBytes.set(bytes)
        length = bytes.byteLength
      } else this.toWorker.postMessage(bytes, [bytes.buffer as ArrayBuffer])
    }
    Atomics.store(this.words, ANSWER_LENGTH_WORD, length)
    Atomics.add(this.words, ANSWER_WORD, 1)
    Atomics.notify(this.words, ANSWER_WORD)
    this.await()
  }

  /** Waits (without blocking) for the worker's next event and hands it to the listener. */
  private await() {
    if (this.waiting || this.dead) return
    const result = waitAsync(this.words, EVENT_WORD, this.events)
    if (!result.async) {
      this.take()
      return
    }
    this.waiting = true
    void result.value.then(() => {
      this.waiting = false
      // A wake may be stale: the worker's notify for an event this thread already took (it read
      // the word before the notify came) wakes the wait armed for the next one. Wait again.
      if (!this.take()) this.await()
    })
  }

  /** Reads the event the worker signalled, if it has, and hands it on; false when there is none (yet). */
  private take(): boolean {
    if (this.dead) return true
    const now = Atomics.load(this.words, EVENT_WORD)
    if (now === this.events) return false
    this.events = now
    const kind = Atomics.load(this.words, EVENT_KIND_WORD)
    const length = Atomics.load(this.words, EVENT_LENGTH_WORD)
    let event: ThreadEvent
    if (kind === EVENT_CALL) {
      const opLength = Atomics.load(this.words, EVENT_OP_LENGTH_WORD)
      event = { type: "call", op: this.toMainBytes.toString("utf8", 0, opLength), request: this.toMainBytes.toString("utf8", opLength, length) }
    } else if (kind === EVENT_DONE) {
      event = { type: "done", output: this.toMainBytes.toString("utf8", 0, length), bytes: length }
    } else {
      const received = receiveMessageOnPort(this.toMain)
      const message = received?.message as WorkerMessage | undefined
      event = message === undefined || message.type === "ready"
        ? { type: "failed", kind: "error", reason: "the worker's message was lost" }
        : message.type === "call"
        ? { type: "call", op: message.op, request: utf8.decode(message.request) }
        : message.type === "done"
        ? { type: "done", output: utf8.decode(message.output), bytes: message.output.byteLength }
        : message
    }
    // Ended, the thread no longer keeps the process alive.
    if (event.type !== "call") this.worker.unref()
    this.listener?.(event)
    return true
  }

  /** Instances the worker has begun to make, its activations' and those made ahead (WorkerProtocol.ts, INSTANCES). */
  get instancesBegun(): number {
    return Atomics.load(this.words, INSTANCES_WORD)
  }

  terminate() {
    this.dead = true
    this.deathReason ??= "the worker was stopped"
    this.started()
    this.release()
    this.listener = undefined
    this.toWorker.close()
    this.toMain.close()
    void this.worker.terminate()
  }
}

const encoder = new TextEncoder()

/** `Atomics.waitAsync` (ES2024; in Node since 16), typed. */
const waitAsync = (Atomics as unknown as {
  waitAsync: (array: Int32Array, index: number, value: number) => { async: false; value: "not-equal" | "timed-out" } | { async: true; value: Promise<"ok" | "timed-out"> }
}).waitAsync

/**
 * The pool's compute slots: a counting semaphore whose take is synchronous when a slot is free
 * (`tryTake`), as it is on most host calls' answers, so the common path costs no fiber
 * suspension. Waiters are served first come, first served.
 */
export class ComputeSlots {
  private free: number
  private readonly waiters: Array<{ granted: boolean; readonly resume: () => void }> = []

  constructor(slots: number) {
    this.free = slots
  }

  /** Takes a slot if one is free and nobody waits for one. */
  tryTake(): boolean {
    if (this.free === 0 || this.waiters.length > 0) return false
    this.free--
    return true
  }

  /** Takes a slot, waiting for one; interrupted while waiting, it takes none (a slot handed to it then is passed on). */
  readonly take: Effect.Effect<void> = Effect.suspend(() =>
    this.tryTake() ? Effect.void : Effect.async<void>((resume) => {
      const waiter = { granted: false, resume: () => resume(Effect.void) }
      this.waiters.push(waiter)
      return Effect.sync(() => {
        if (waiter.granted) return this.give()
        const i = this.waiters.indexOf(waiter)
        if (i >= 0) this.waiters.splice(i, 1)
      })
    })
  )

  /** Gives a slot back: to the first waiter, else to the free ones. */
  give(): void {
    const waiter = this.waiters.shift()
    if (waiter === undefined) {
      this.free++
      return
    }
    waiter.granted = true
    waiter.resume()
  }

  /** Slots free now (for tests). */
  get available(): number {
    return this.free
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
  readonly compute: ComputeSlots

  constructor(size: number | PoolSize) {
    const s = typeof size === "number" ? { compute: size, threads: size } : size
    const compute = Math.max(1, s.compute)
    // With one thread per compute slot there is no spare for tools: give tools their own.
    this.size = { compute, threads: Math.max(compute + 1, s.threads) }
    this.compute = new ComputeSlots(compute)
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
      const now = this.tryAcquire(loop)
      if (now !== undefined) return Effect.succeed(now)
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

  /** A thread now (an idle one, else a new one while under the size), or none: `acquire` without waiting. */
  tryAcquire(loop: boolean): GuestThread | undefined {
    if (!this.mayTake(loop)) return undefined
    const idle = this.idle.pop()
    if (idle) return this.take(idle.thread, loop)
    if (this.started < this.size.threads) {
      this.started++
      return this.take(new GuestThread(), loop)
    }
    return undefined
  }

  /** Gives a thread back; a broken one is terminated and replaced. */
  release(thread: GuestThread, healthy: boolean): Effect.Effect<void> {
    return Effect.sync(() => this.releaseNow(thread, healthy))
  }

  /** `release`, synchronously. */
  releaseNow(thread: GuestThread, healthy: boolean): void {
    {
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
    }
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
