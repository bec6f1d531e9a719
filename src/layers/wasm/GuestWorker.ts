/**
 * The guest side of a pool worker (a `worker_threads` thread): it runs one activation at a time,
 * each in a fresh instance whose memory is new or indistinguishable from new (below). A guest run
 * as uploaded blocks the thread on every host call until the main thread has answered; a pinned
 * one (its module's twin, GuestTwin.ts) unwinds at the call, stays here suspended, and the thread
 * takes the next job — another activation, or the answer that rewinds a suspended one.
 *
 * Protocol (WorkerProtocol.ts): the worker never returns to its event loop once it has said
 * `ready`. Idle, it waits with `Atomics.wait` on the START word; woken, it takes the activation
 * (the same module and limits as its last one with the input inline, or an ActivateMessage from
 * `toWorker`), runs it, and signals each host call and the end on the EVENT word (inline when
 * short, else a WorkerMessage on `toMain`). In a host call it waits on the ANSWER word and takes
 * the answer inline or from `toWorker` with `receiveMessageOnPort`: the guest's call returns
 * only then.
 *
 * Memory: a memory its activation left at its initial size is zero-filled and kept for the next
 * instance of the same limits, instead of a new one. To the guest it is a new memory — its
 * declared initial size, every byte zero — but its pages are already mapped: on a VM, touching a
 * new memory's pages costs more than the guest's own work (a page fault per 4 KiB page, ~100 µs
 * for the first). A memory the guest grew is dropped (it cannot shrink back).
 *
 * Plain JavaScript on purpose: a guest may spin, trap or exhaust memory; only `terminate()` stops a
 * spinning one run as uploaded (a twin's metering stops its own: its budget, the STOP word), and
 * nothing here may outlive an activation.
 */
import { isUtf8 } from "node:buffer"
import { guestFailureMessage } from "../../domain/CutText.js"
import { parentPort, receiveMessageOnPort, workerData } from "node:worker_threads"
import { GuestError, Overrun, type Step, Stopped, TwinRun } from "./GuestTwin.js"
import {
  type ActivateMessage,
  ANSWER_LENGTH_WORD,
  ANSWER_WORD,
  EVENT_CALL,
  EVENT_DONE,
  EVENT_KIND_WORD,
  EVENT_LENGTH_WORD,
  EVENT_OP_LENGTH_WORD,
  EVENT_POSTED,
  EVENT_WORD,
  HEADER_BYTES,
  INLINE_BYTES,
  INSTANCES_WORD,
  requestTooLarge,
  START_KIND_WORD,
  START_LENGTH_WORD,
  START_POSTED,
  START_RESUME,
  START_WORD,
  STOP_WORD,
  TO_MAIN_OFFSET,
  TO_WORKER_OFFSET,
  trapReason,
  type ResumeMessage,
  type WorkerData,
  type WorkerMessage
} from "./WorkerProtocol.js"

const { shared, toMain, toWorker } = workerData as WorkerData
const words = new Int32Array(shared, 0, HEADER_BYTES / 4)
const fromMainBytes = new Uint8Array(shared, TO_WORKER_OFFSET, INLINE_BYTES)
const toMainBytes = new Uint8Array(shared, TO_MAIN_OFFSET, INLINE_BYTES)
const decoder = new TextDecoder("utf-8", { fatal: true })
const encoder = new TextEncoder()

const PAGE_BYTES = 65536

/** Modules. Compiled modules a worker keeps (the pool tracks which, in the same order, and sends the rest). */
const WORKER_MODULES = 64

/** Spare memories a worker keeps (by limits), and the largest it keeps. */
const SPARE_MEMORIES = 4
const SPARE_MEMORY_BYTES = 32 << 20

const modules = new Map<string, WebAssembly.Module>()

/** Tells the main thread an event is ready (the words and the `toMain` region or port written first). */
const signal = (kind: number, length: number, opLength: number) => {
  Atomics.store(words, EVENT_KIND_WORD, kind)
  Atomics.store(words, EVENT_LENGTH_WORD, length)
  Atomics.store(words, EVENT_OP_LENGTH_WORD, opLength)
  Atomics.add(words, EVENT_WORD, 1)
  Atomics.notify(words, EVENT_WORD)
}

const post = (message: WorkerMessage, transfer: ReadonlyArray<ArrayBuffer> = []) => {
  toMain.postMessage(message, transfer as Array<ArrayBuffer>)
  signal(EVENT_POSTED, 0, 0)
}

/** Signals a host call: inline when it fits, else posted (its request copied, then transferred). */
const sendCall = (op: Uint8Array, request: Uint8Array) => {
  if (op.length + request.length <= INLINE_BYTES) {
    toMainBytes.set(op)
    toMainBytes.set(request, op.length)
    signal(EVENT_CALL, op.length + request.length, op.length)
  } else {
    const copy = request.slice()
    post({ type: "call", op: decoder.decode(op), request: copy }, [copy.buffer as ArrayBuffer])
  }
}

/** Signals the activation's output: inline when it fits, else posted. */
const sendDone = (output: Uint8Array) => {
  if (output.length <= INLINE_BYTES) {
    toMainBytes.set(output)
    signal(EVENT_DONE, output.length, 0)
  } else {
    const copy = output.slice()
    post({ type: "done", output: copy }, [copy.buffer as ArrayBuffer])
  }
}

/** Memories left at their initial size by their activation, zero-filled, by `initial:maximum` (oldest first). */
const spareMemories = new Map<string, WebAssembly.Memory>()

/** A memory as a new one would be: a spare one of these limits (all zero, at its initial size), else a new one. */
const memoryFor = (limits: ActivateMessage["memory"]): WebAssembly.Memory => {
  const key = `${limits.initial}:${limits.maximum}`
  const spare = spareMemories.get(key)
  if (spare === undefined) return new WebAssembly.Memory({ initial: limits.initial, maximum: limits.maximum })
  spareMemories.delete(key)
  return spare
}

/**
 * Keeps an activation's memory for a later instance when it is still at its initial size: zeroed
 * now, so what the activation wrote is gone before anything else runs on this thread.
 */
const recycle = (memory: WebAssembly.Memory, limits: ActivateMessage["memory"]) => {
  const bytes = memory.buffer.byteLength
  if (bytes !== limits.initial * PAGE_BYTES || bytes > SPARE_MEMORY_BYTES) return
  new Uint8Array(memory.buffer).fill(0)
  const key = `${limits.initial}:${limits.maximum}`
  spareMemories.delete(key)
  spareMemories.set(key, memory)
  if (spareMemories.size > SPARE_MEMORIES) spareMemories.delete(spareMemories.keys().next().value!)
}

const moduleOf = (msg: ActivateMessage): WebAssembly.Module => {
  if (msg.module) {
    modules.set(msg.moduleId, msg.module)
    if (modules.size > WORKER_MODULES) modules.delete(modules.keys().next().value!)
    return msg.module
  }
  const known = modules.get(msg.moduleId)
  if (!known) throw new Error(`the worker has no module ${msg.moduleId}`)
  return known
}

/** What an instance's imports read: set when an activation takes the instance, never before. */
interface Context {
  msg: ActivateMessage | undefined
  exports: Record<string, any>
}

/** A fresh instance with a fresh memory, made before the activation that will take it. */
interface Instance {
  readonly key: string
  readonly module: WebAssembly.Module
  readonly memory: WebAssembly.Memory
  readonly context: Context
  readonly guest: Record<string, any>
  /** Milliseconds V8 took to make it, its start function included. */
  readonly madeMs: number
}

const keyOf = (msg: ActivateMessage) => `${msg.moduleId}:${msg.memory.initial}:${msg.memory.maximum}`

/**
 * Instantiates `module` with a fresh memory. Its start function (if any) runs here, before any
 * input exists: a host call from it is ABI misuse (the context has no activation yet).
 */
const instantiate = (module: WebAssembly.Module, limits: ActivateMessage["memory"], key: string): Instance => {
  const memory = memoryFor(limits)
  const context: Context = { msg: undefined, exports: {} }

  const bytesAt = (ptr: number, len: number): Uint8Array => {
    if (!Number.isInteger(ptr) || !Number.isInteger(len) || ptr < 0 || len < 0 || ptr + len > memory.buffer.byteLength) {
      throw new GuestError(`a (ptr ${ptr}, len ${len}) pair runs past the guest's memory (${memory.buffer.byteLength} bytes)`)
    }
    return new Uint8Array(memory.buffer, ptr, len)
  }
  const textAt = (ptr: number, len: number, what: string): string => {
    try {
      return decoder.decode(bytesAt(ptr, len))
    } catch (err) {
      if (err instanceof GuestError) throw err
      throw new GuestError(`${what} is not UTF-8`)
    }
  }
  const imports = {
    env: { memory },
    brain: {
      call: (opPtr: number, opLen: number, reqPtr: number, reqLen: number): bigint => {
        const msg = context.msg
        if (!msg) throw new GuestError("a host call from the module's start function: host calls are for brain_run and brain_tool")
        if (allocating) throw new GuestError('a host call from brain_alloc: host calls are for brain_run and brain_tool, and Brain calls brain_alloc from inside them (docs/abi.md, "Exports")')
        textAt(opPtr >>> 0, opLen >>> 0, "a host call's op")
        if (reqLen >>> 0 > msg.maxRequestBytes) {
          return give(encoder.encode(requestTooLarge(reqLen >>> 0, msg.maxRequestBytes)))
        }
        const request = checkedAt(reqPtr >>> 0, reqLen >>> 0, "a host call's request")
        const seen = Atomics.load(words, ANSWER_WORD)
        sendCall(bytesAt(opPtr >>> 0, opLen >>> 0), request)
        while (Atomics.load(words, ANSWER_WORD) === seen) Atomics.wait(words, ANSWER_WORD, seen)
        const length = Atomics.load(words, ANSWER_LENGTH_WORD)
        if (length >= 0) return give(fromMainBytes.subarray(0, length))
        const received = receiveMessageOnPort(toWorker)
        if (!received) throw new GuestError("the host's answer was lost")
        return give(received.message as Uint8Array)
      },
      fail: (ptr: number, len: number): never => {
        // Read no further than the bound Brain keeps of a failure's message (docs/abi.md, "Limits").
        throw new GuestError(guestFailureMessage(bytesAt(ptr >>> 0, len >>> 0), decoder))
      }
    }
  }
  /** UTF-8 text the guest gave, in its memory (not a copy: read it before the guest runs again), checked well-formed. */
  const checkedAt = (ptr: number, len: number, what: string): Uint8Array => {
    const bytes = bytesAt(ptr, len)
    if (!isUtf8(bytes)) throw new GuestError(`${what} is not UTF-8`)
    return bytes
  }
  /** Copies bytes into memory the guest allocates; returns the packed (ptr, len). */
  let allocating = false
  const give = (bytes: Uint8Array): bigint => {
    allocating = true
    let ptr: number
    try {
      ptr = context.exports.brain_alloc(bytes.length) >>> 0
    } finally {
      allocating = false
    }
    bytesAt(ptr, bytes.length).set(bytes)
    return (BigInt(ptr) << 32n) | BigInt(bytes.length)
  }
  const guest = {
    give,
    unpack: (packed: unknown, what: string): Uint8Array => {
      if (typeof packed !== "bigint") throw new GuestError(`${what} did not return an i64 (ptr, len) pair`)
      const value = BigInt.asUintN(64, packed)
      return checkedAt(Number(value >> 32n), Number(value & 0xffffffffn), `the output ${what} returned`)
    }
  }
  Atomics.add(words, INSTANCES_WORD, 1)
  const began = performance.now()
  context.exports = new WebAssembly.Instance(module, imports).exports as Record<string, any>
  return { key, module, memory, context, guest, madeMs: performance.now() - began }
}

/**
 * The instance the next activation of the same module (and memory limits) will take: made
 * after each activation whose own instantiation succeeded within AHEAD_MAX_MS, before this thread
 * waits for the next one (unless that one is already there), so instantiation leaves the
 * activation's path. It is still a fresh instance per activation — nothing has run in it but its
 * start function, which is deterministic (a start function can neither call the host nor see the
 * time) and ran to its end for the activation just finished.
 */
let ready: Instance | undefined

/**
 * Milliseconds. An instance is made ahead only when the one it follows took at most this to make:
 * made ahead, its start function computes outside any activation — after the activation gave back
 * its compute slot (BRAIN_WASM_WORKERS) and outside its budget, on a thread the pool may already
 * have handed the next activation, whose budget would then run while it waits. Instantiation takes
 * tens of microseconds (the official loop); a start function that computes for long runs only
 * inside activations, each instantiating its own instance.
 */
const AHEAD_MAX_MS = 2

const run = (msg: ActivateMessage, input: Uint8Array) => {
  let instance: Instance | undefined
  try {
    const module = moduleOf(msg)
    const key = keyOf(msg)
    instance = ready !== undefined && ready.key === key ? ready : instantiate(module, msg.memory, key)
    ready = undefined
    const { context, guest } = instance
    context.msg = msg
    const given = guest.give(input)
    sendDone(guest.unpack(context.exports[msg.entry](Number(given >> 32n), Number(given & 0xffffffffn)), msg.entry))
  } catch (err) {
    const kind = err instanceof GuestError ? "guest" : err instanceof WebAssembly.RuntimeError ? "trap" : err instanceof WebAssembly.LinkError ? "link" : "error"
    const message = err instanceof Error ? err.message : String(err)
    const reason = kind === "trap" && instance !== undefined ? trapReason(message, instance.memory.buffer.byteLength, msg.memory.maximum) : message
    post({ type: "failed", kind, reason })
  }
  return instance
}

/** Pinned activations suspended in a host call on this thread (GuestTwin.ts), by pin. */
const pinned = new Map<number, TwinRun>()

/** Drops the suspended instances of pinned activations the main thread gave up (their memory kept for reuse, zeroed). */
const drop = (pins: ReadonlyArray<number> | undefined) => {
  if (pins === undefined) return
  for (const pin of pins) {
    const run = pinned.get(pin)
    if (run === undefined) continue
    pinned.delete(pin)
    recycle(run.memory, run.msg.memory)
  }
}

/** Signals where a pinned activation's step stopped: its host call (it stays pinned), or its end. */
const stepped = (pin: number, run: TwinRun, step: Step) => {
  if (step._tag === "call") return sendCall(step.op, step.request)
  pinned.delete(pin)
  sendDone(step.output)
  recycle(run.memory, run.msg.memory)
}

/** A pinned activation failed: its instance is dropped (its memory kept, zeroed), the thread is fine. */
const failPinned = (pin: number, run: TwinRun | undefined, msg: ActivateMessage, err: unknown) => {
  pinned.delete(pin)
  const stack = err instanceof RangeError && /call stack/i.test(err.message)
  const kind = err instanceof Stopped
    ? "stopped"
    : err instanceof Overrun
    ? "budget"
    : (run?.unwinding ?? false) || stack
    ? "unwind"
    : err instanceof GuestError
    ? "guest"
    : err instanceof WebAssembly.RuntimeError
    ? "trap"
    : err instanceof WebAssembly.LinkError
    ? "link"
    : "error"
  const message = err instanceof Error ? err.message : String(err)
  const reason = kind === "trap" && run !== undefined ? trapReason(message, run.memory.buffer.byteLength, msg.memory.maximum) : message
  if (run !== undefined) recycle(run.memory, msg.memory)
  post({ type: "failed", kind, reason })
}

/** Starts a pinned activation: a fresh instance of its twin, run to its first host call or its end. */
const begin = (msg: ActivateMessage, input: Uint8Array) => {
  const pin = msg.pin!
  let run: TwinRun | undefined
  try {
    const module = moduleOf(msg)
    Atomics.add(words, INSTANCES_WORD, 1)
    // The main thread writes pin + 1 into STOP to give this activation up while it computes.
    run = new TwinRun(msg, module, memoryFor(msg.memory), () => Atomics.load(words, STOP_WORD) === pin + 1)
    pinned.set(pin, run)
    stepped(pin, run, run.begin(input))
  } catch (err) {
    failPinned(pin, run, msg, err)
  }
}

/** Rewinds a pinned activation into its host call with the answer. */
const resume = (msg: ResumeMessage, answer: Uint8Array) => {
  const run = pinned.get(msg.pin)
  if (run === undefined) {
    post({ type: "failed", kind: "error", reason: `the worker has no suspended activation ${msg.pin}` })
    return
  }
  try {
    stepped(msg.pin, run, run.resume(answer, msg.budgetMs))
  } catch (err) {
    failPinned(msg.pin, run, run.msg, err)
  }
}

/** The START count this worker has taken; the thread's last activation (its input left out), for START_SAME. */
let started = 0
let last: ActivateMessage | undefined

const serve = () => {
  for (;;) {
    while (Atomics.load(words, START_WORD) === started) Atomics.wait(words, START_WORD, started)
    started = Atomics.load(words, START_WORD)
    const length = Atomics.load(words, START_LENGTH_WORD)
    const kind = Atomics.load(words, START_KIND_WORD)
    if (kind === START_RESUME || kind === START_POSTED) {
      const msg = receiveMessageOnPort(toWorker)?.message as ResumeMessage | ActivateMessage | undefined
      if (msg === undefined) {
        post({ type: "failed", kind: "error", reason: `the ${kind === START_RESUME ? "answer" : "activation"} was lost on its way to the worker` })
        continue
      }
      drop(msg.drops)
      // Its bytes (an answer, an input) are inline, or came with the message.
      const bytes = length >= 0 ? fromMainBytes.subarray(0, length) : (msg.type === "resume" ? msg.answer : msg.input)!
      if (msg.type === "resume") resume(msg, bytes)
      else if (msg.pin !== undefined) begin(msg, bytes)
      else {
        // The module is kept by moduleOf: `last` holds no module and no input.
        last = { ...msg, module: undefined, input: undefined }
        after(run(msg, bytes), msg)
      }
    } else if (last === undefined) {
      post({ type: "failed", kind: "error", reason: "the worker has no activation to repeat" })
    } else {
      after(run(last, fromMainBytes.subarray(0, length)), last)
    }
  }
}

/**
 * After an activation: keep its memory if it may be, and make the next instance, when its module's
 * instantiation is quick (AHEAD_MAX_MS) and the next activation is not already waiting.
 */
const after = (instance: Instance | undefined, msg: ActivateMessage) => {
  if (!instance) return
  recycle(instance.memory, msg.memory)
  if (ready !== undefined || instance.madeMs > AHEAD_MAX_MS || Atomics.load(words, START_WORD) !== started) return
  try {
    ready = instantiate(instance.module, msg.memory, instance.key)
  } catch {
    // Left for the next activation to meet.
    ready = undefined
  }
}

parentPort!.postMessage({ type: "ready" } satisfies WorkerMessage)
// Once this module has loaded: from here on the thread runs activations and nothing else.
setImmediate(serve)
