/**
 * The guest side of a pool worker (a `worker_threads` thread): it runs one activation at a time,
 * each in a fresh instance with a fresh memory, and blocks on every host call until the main
 * thread has answered.
 *
 * Protocol (messages are plain objects; every payload is UTF-8 bytes whose buffer is transferred;
 * see WorkerProtocol.ts):
 * - main → worker (`parentPort`): `activate` — the compiled module, the entry, the input JSON, the
 *   memory's initial and maximum pages, the largest request it may send;
 * - worker → main (`parentPort`): `call` (a host call's op and request JSON), then `done` with the
 *   output JSON or `failed` with a reason;
 * - main → worker (the `answers` port), while the worker waits: the answer JSON. The worker waits
 *   with `Atomics.wait` on the shared `signal` word, which the main thread bumps after posting an
 *   answer, and takes the answer with `receiveMessageOnPort`: the guest's call returns only then.
 *
 * Plain JavaScript on purpose: a guest may spin, trap or exhaust memory; only `terminate()` stops a
 * spinning one, and nothing here may outlive an activation.
 */
import { isUtf8 } from "node:buffer"
import { parentPort, receiveMessageOnPort, workerData } from "node:worker_threads"
import type { MessagePort } from "node:worker_threads"
import { type ActivateMessage, HEADER_BYTES, LENGTH_WORD, SIGNAL_WORD, type WorkerData, type WorkerMessage } from "./WorkerProtocol.js"

const { answers, signal } = workerData as WorkerData
const words = new Int32Array(signal, 0, HEADER_BYTES / 4)
const inline = new Uint8Array(signal, HEADER_BYTES)
const decoder = new TextDecoder("utf-8", { fatal: true })
const encoder = new TextEncoder()

/** Modules. Compiled modules a worker keeps (the pool tracks which, in the same order, and sends the rest). */
const WORKER_MODULES = 64

const modules = new Map<string, WebAssembly.Module>()

/** The guest broke the ABI or gave up: the activation fails with this message. */
class GuestError extends Error {}

const post = (message: WorkerMessage, transfer: ReadonlyArray<ArrayBuffer> = []) => parentPort!.postMessage(message, transfer as Array<ArrayBuffer>)

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
}

const keyOf = (msg: ActivateMessage) => `${msg.moduleId}:${msg.memory.initial}:${msg.memory.maximum}`

/**
 * Instantiates `module` with a fresh memory. Its start function (if any) runs here, before any
 * input exists: a host call from it is ABI misuse (the context has no activation yet).
 */
const instantiate = (module: WebAssembly.Module, limits: ActivateMessage["memory"], key: string): Instance => {
  const memory = new WebAssembly.Memory({ initial: limits.initial, maximum: limits.maximum })
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
        const op = textAt(opPtr >>> 0, opLen >>> 0, "a host call's op")
        if (reqLen >>> 0 > msg.maxRequestBytes) {
          return give(encoder.encode(JSON.stringify({ error: { code: "invalid_request", message: `the request is above BRAIN_MAX_WASM_IO_BYTES (${msg.maxRequestBytes})`, retryable: false, ambiguous: false } })))
        }
        const request = copyAt(reqPtr >>> 0, reqLen >>> 0, "a host call's request")
        const seen = Atomics.load(words, SIGNAL_WORD)
        post({ type: "call", op, request }, [request.buffer as ArrayBuffer])
        Atomics.wait(words, SIGNAL_WORD, seen)
        const length = Atomics.load(words, LENGTH_WORD)
        if (length >= 0) return give(inline.subarray(0, length))
        const received = receiveMessageOnPort(answers as MessagePort)
        if (!received) throw new GuestError("the host's answer was lost")
        return give(received.message as Uint8Array)
      },
      fail: (ptr: number, len: number): never => {
        throw new GuestError(textAt(ptr >>> 0, len >>> 0, "the guest's failure message"))
      }
    }
  }
  /** A copy of UTF-8 text the guest gave, out of its memory, checked well-formed. */
  const copyAt = (ptr: number, len: number, what: string): Uint8Array => {
    const bytes = bytesAt(ptr, len)
    if (!isUtf8(bytes)) throw new GuestError(`${what} is not UTF-8`)
    return bytes.slice()
  }
  /** Copies bytes into memory the guest allocates; returns the packed (ptr, len). */
  const give = (bytes: Uint8Array): bigint => {
    const ptr = context.exports.brain_alloc(bytes.length) >>> 0
    bytesAt(ptr, bytes.length).set(bytes)
    return (BigInt(ptr) << 32n) | BigInt(bytes.length)
  }
  const guest = {
    give,
    unpack: (packed: unknown, what: string): Uint8Array => {
      if (typeof packed !== "bigint") throw new GuestError(`${what} did not return an i64 (ptr, len) pair`)
      const value = BigInt.asUintN(64, packed)
      return copyAt(Number(value >> 32n), Number(value & 0xffffffffn), what)
    }
  }
  context.exports = new WebAssembly.Instance(module, imports).exports as Record<string, any>
  return { key, module, memory, context, guest }
}

/**
 * The instance the next activation of the same module (and memory limits) will take: made
 * after each activation whose own instantiation succeeded, while this thread would sit idle, so
 * instantiation leaves the activation's path. It is still a fresh instance per activation —
 * nothing has run in it but its start function, which is deterministic (a start function can
 * neither call the host nor see the time) and ran to its end for the activation just finished.
 */
let ready: Instance | undefined

const run = (msg: ActivateMessage) => {
  let instance: Instance | undefined
  try {
    const module = moduleOf(msg)
    const key = keyOf(msg)
    instance = ready !== undefined && ready.key === key ? ready : instantiate(module, msg.memory, key)
    ready = undefined
    const { context, guest } = instance
    context.msg = msg
    const input = guest.give(msg.input)
    const output = guest.unpack(context.exports[msg.entry](Number(input >> 32n), Number(input & 0xffffffffn)), `${msg.entry}`)
    post({ type: "done", output }, [output.buffer as ArrayBuffer])
  } catch (err) {
    const kind = err instanceof GuestError ? "guest" : err instanceof WebAssembly.RuntimeError ? "trap" : err instanceof WebAssembly.LinkError ? "link" : "error"
    post({ type: "failed", kind, reason: err instanceof Error ? err.message : String(err) })
  }
  if (instance) {
    const { module, key } = instance
    const limits = msg.memory
    // After the answer is posted; a failure to instantiate is left for the next activation to meet.
    setImmediate(() => {
      if (ready !== undefined) return
      try {
        ready = instantiate(module, limits, key)
      } catch {
        ready = undefined
      }
    })
  }
}

parentPort!.on("message", (msg: ActivateMessage) => run(msg))
post({ type: "ready" })
