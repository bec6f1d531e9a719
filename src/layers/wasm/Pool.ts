/**
 * The pool of guest worker threads (GuestWorker.ts): at most `size`, started on demand, each
 * running one activation at a time. An activation takes a thread, gives it back when done, and
 * gives back a *broken* one (terminated: a runaway guest, a crash, an interrupted activation) to
 * be replaced: the pool never hands out a thread in an unknown state, and its size never shrinks.
 */
import { Worker } from "node:worker_threads"
import { MessageChannel, type MessagePort } from "node:worker_threads"
import { Deferred, Effect, FiberId } from "effect"
import type { ActivateMessage, WorkerMessage } from "./WorkerProtocol.js"

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
  /** The activation in progress listens here. */
  listener: ((event: ThreadEvent) => void) | undefined = undefined
  dead = false
  /** Modules the worker keeps (GuestWorker's WORKER_MODULES, same order of eviction). */
  private readonly modules = new Set<string>()

  constructor() {
    const channel = new MessageChannel()
    const signal = new SharedArrayBuffer(4)
    this.answers = channel.port1
    this.signal = new Int32Array(signal)
    this.worker = new Worker(WORKER_URL, {
      workerData: { answers: channel.port2, signal },
      transferList: [channel.port2]
    })
    this.worker.on("message", (m: WorkerMessage) => this.listener?.(m))
    this.worker.on("error", (err) => this.die(`the worker failed: ${err.message}`))
    this.worker.on("exit", (code) => this.die(`the worker exited (${code})`))
    // An idle worker must not keep the process alive.
    this.worker.unref()
  }

  private die(reason: string) {
    if (this.dead) return
    this.dead = true
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

  /** Answers the host call the guest is blocked in; the answer's buffer moves to the worker. */
  answer(bytes: Uint8Array) {
    this.answers.postMessage(bytes, [bytes.buffer as ArrayBuffer])
    Atomics.add(this.signal, 0, 1)
    Atomics.notify(this.signal, 0)
  }

  terminate() {
    this.dead = true
    this.listener = undefined
    this.answers.close()
    void this.worker.terminate()
  }
}

export class Pool {
  private readonly idle: Array<GuestThread> = []
  private readonly waiting: Array<Deferred.Deferred<GuestThread>> = []
  private started = 0
  private closed = false

  constructor(readonly size: number) {}

  /** A thread for one activation: an idle one, a new one while under the size, else the next one released. */
  readonly acquire: Effect.Effect<GuestThread> = Effect.suspend(() => {
    const thread = this.idle.pop()
    if (thread) return Effect.succeed(thread)
    if (this.started < this.size) {
      this.started++
      return Effect.sync(() => new GuestThread())
    }
    const next = Deferred.unsafeMake<GuestThread>(FiberId.none)
    this.waiting.push(next)
    return Deferred.await(next).pipe(
      // Given up (the activation was interrupted while waiting): hand a thread it got on.
      Effect.onInterrupt(() =>
        Effect.sync(() => {
          const i = this.waiting.indexOf(next)
          if (i >= 0) this.waiting.splice(i, 1)
        }).pipe(
          Effect.zipRight(Deferred.poll(next)),
          Effect.flatMap((got) => (got._tag === "Some" ? Effect.flatMap(got.value, (t) => this.release(t, true)) : Effect.void))
        )
      )
    )
  })

  /** Gives a thread back; a broken one is terminated and replaced. */
  release(thread: GuestThread, healthy: boolean): Effect.Effect<void> {
    return Effect.sync(() => {
      thread.listener = undefined
      let next = thread
      if (!healthy || thread.dead) {
        if (!thread.dead) thread.terminate()
        if (this.closed) {
          this.started--
          return
        }
        next = new GuestThread()
      }
      if (this.closed) {
        next.terminate()
        this.started--
        return
      }
      const waiter = this.waiting.shift()
      if (waiter) Deferred.unsafeDone(waiter, Effect.succeed(next))
      else this.idle.push(next)
    })
  }

  /** Terminates every idle thread; threads in use are terminated when given back. */
  readonly close = Effect.sync(() => {
    this.closed = true
    for (const t of this.idle.splice(0)) {
      t.terminate()
      this.started--
    }
  })
}
