/**
 * One guest worker thread (GuestWorker.ts) as the main thread drives it: it starts activations on
 * it, answers their host calls, and hands each event the worker signals to the activation that
 * runs there now (`listener`). A thread runs one activation at a time; activations pinned to it
 * (Pinned.ts) wait there, suspended, between their turns on it.
 */
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads"
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
  START_RESUME,
  START_SAME,
  START_WORD,
  STOP_WORD,
  TO_MAIN_OFFSET,
  TO_WORKER_OFFSET,
  type ResumeMessage,
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
  /** Held by an activation (running, or waiting here for a slot): nothing else may start on it. */
  busy = false
  /** One of the pool's threads for pinned activations (Pool, `shared`). */
  shared = false
  /** Pinned activations whose instance lives on this thread (suspended in a host call, or running now). */
  pins = 0
  /** Pinned activations given up while suspended: the next message tells the worker to drop them. */
  private drops: Array<number> = []
  private nextPin = 0
  /** Pinned activations waiting for this thread to rewind them (the pool grants it to the first when it is free). */
  readonly resumers: Array<() => void> = []
  /** Told once when the worker dies (the pool counts out a free shared thread). */
  onDeath: (() => void) | undefined = undefined
  /** Whether the job running now is a pinned one: its host call does not keep the process alive. */
  private pinnedJob = false
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
    this.wakeResumers()
    this.onDeath?.()
  }

  /** A dead thread rewinds nothing: each pinned activation waiting for it goes on (and finds it dead). */
  private wakeResumers() {
    for (const resume of this.resumers.splice(0)) resume()
  }

  /** A number for a new pinned activation on this thread. */
  pin(): number {
    this.pins++
    return this.nextPin++
  }

  /** A pinned activation is over (ended, failed, or given up: `suspended`, its instance is dropped with the next message). */
  unpin(pin: number, suspended: boolean) {
    this.pins--
    if (suspended) this.drops.push(pin)
  }

  private takeDrops(): ReadonlyArray<number> {
    if (this.drops.length === 0) return []
    return this.drops.splice(0)
  }

  /** Starts a pinned activation (`module` its twin): always as a message, with the module only the first time. */
  startPinned(message: StartMessage & { readonly pin: number; readonly budgetMs: number }, module: WebAssembly.Module) {
    const inline = message.input.byteLength <= INLINE_BYTES
    if (inline) this.toWorkerBytes.set(message.input)
    const known = this.modules.has(message.moduleId)
    if (!known) {
      this.modules.add(message.moduleId)
      if (this.modules.size > WORKER_MODULES) this.modules.delete(this.modules.values().next().value!)
    }
    const activate: ActivateMessage = {
      ...message,
      type: "activate",
      module: known ? undefined : module,
      input: inline ? undefined : message.input,
      drops: this.takeDrops()
    }
    this.toWorker.postMessage(activate, inline ? [] : [message.input.buffer as ArrayBuffer])
    this.lastStart = undefined
    this.go(START_POSTED, inline ? message.input.byteLength : -1, true)
  }

  /** Rewinds pinned activation `pin` into its host call with `text`, its answer. */
  resume(pin: number, text: string, budgetMs: number) {
    const length = this.writeAnswer(text, (bytes) => {
      const m: ResumeMessage = { type: "resume", pin, answer: bytes, budgetMs, drops: this.takeDrops() }
      this.toWorker.postMessage(m, [bytes.buffer as ArrayBuffer])
    })
    if (length >= 0) {
      const m: ResumeMessage = { type: "resume", pin, answer: undefined, budgetMs, drops: this.takeDrops() }
      this.toWorker.postMessage(m)
    }
    this.go(START_RESUME, length, true)
  }

  /** Tells the worker a job is there (its message posted or its bytes inline first). */
  private go(kind: number, length: number, pinned: boolean) {
    this.pinnedJob = pinned
    Atomics.store(this.words, START_KIND_WORD, kind)
    Atomics.store(this.words, START_LENGTH_WORD, length)
    this.worker.ref()
    Atomics.add(this.words, START_WORD, 1)
    Atomics.notify(this.words, START_WORD)
    this.await()
  }

  /** Writes `text` into the shared buffer when it fits (its length), else hands its bytes to `posted` (-1). */
  private writeAnswer(text: string, posted: (bytes: Uint8Array) => void): number {
    // At most 3 bytes per UTF-16 unit: a text that short surely fits.
    if (text.length * 3 <= INLINE_BYTES) return encoder.encodeInto(text, this.toWorkerBytes).written
    const bytes = encoder.encode(text)
    if (bytes.byteLength <= INLINE_BYTES) {
      this.toWorkerBytes.set(bytes)
      return bytes.byteLength
    }
    posted(bytes)
    return -1
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
    this.pinnedJob = false
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
    const length = this.writeAnswer(text, (bytes) => this.toWorker.postMessage(bytes, [bytes.buffer as ArrayBuffer]))
    Atomics.store(this.words, ANSWER_LENGTH_WORD, length)
    Atomics.add(this.words, ANSWER_WORD, 1)
    Atomics.notify(this.words, ANSWER_WORD)
    this.await()
  }

  /** Waits (without blocking) for the worker's next event and hands it to the listener. */
  private await() {
    if (this.waiting) return
    // A job given to a dead worker never reports: its death is what it reports (nothing waits for ever).
    if (this.dead) return this.listener?.({ type: "died", reason: this.deathReason ?? "the worker died" })
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
    // Ended (or a pinned activation suspended: the thread waits for nothing), the thread no longer keeps the process alive.
    if (event.type !== "call" || this.pinnedJob) this.worker.unref()
    this.listener?.(event)
    return true
  }

  /**
   * Asks the worker to stop pinned activation `pin`, whose guest runs there now, at its metering's
   * next check (WorkerProtocol.ts, STOP); its job then reports `stopped`, or where it got first.
   */
  stop(pin: number) {
    Atomics.store(this.words, STOP_WORD, pin + 1)
  }

  /** Withdraws the stop once the stopped activation's job has reported. */
  clearStop() {
    Atomics.store(this.words, STOP_WORD, 0)
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
    this.wakeResumers()
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
