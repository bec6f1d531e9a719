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

const run = (msg: ActivateMessage) => {
  const memory = new WebAssembly.Memory({ initial: msg.memory.initial, maximum: msg.memory.maximum })
  let exports: Record<string, any> = {}

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
  /** A copy of UTF-8 text the guest gave, out of its memory, checked well-formed. */
  const copyAt = (ptr: number, len: number, what: string): Uint8Array => {
    const bytes = bytesAt(ptr, len)
    if (!isUtf8(bytes)) throw new GuestError(`${what} is not UTF-8`)
    return bytes.slice()
  }
  /** Copies bytes into memory the guest allocates; returns the packed (ptr, len). */
  const give = (bytes: Uint8Array): bigint => {
    const ptr = exports.brain_alloc(bytes.length) >>> 0
    bytesAt(ptr, bytes.length).set(bytes)
    return (BigInt(ptr) << 32n) | BigInt(bytes.length)
  }
  const unpack = (packed: unknown, what: string): Uint8Array => {
    if (typeof packed !== "bigint") throw new GuestError(`${what} did not return an i64 (ptr, len) pair`)
    const value = BigInt.asUintN(64, packed)
    return copyAt(Number(value >> 32n), Number(value & 0xffffffffn), what)
  }

  const imports = {
    env: { memory },
    brain: {
      call: (opPtr: number, opLen: number, reqPtr: number, reqLen: number): bigint => {
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

  try {
    const instance = new WebAssembly.Instance(moduleOf(msg), imports)
    exports = instance.exports as Record<string, any>
    const input = give(msg.input)
    const output = unpack(exports[msg.entry](Number(input >> 32n), Number(input & 0xffffffffn)), `${msg.entry}`)
    post({ type: "done", output }, [output.buffer as ArrayBuffer])
  } catch (err) {
    const kind = err instanceof GuestError ? "guest" : err instanceof WebAssembly.RuntimeError ? "trap" : err instanceof WebAssembly.LinkError ? "link" : "error"
    post({ type: "failed", kind, reason: err instanceof Error ? err.message : String(err) })
  }
}

parentPort!.on("message", (msg: ActivateMessage) => run(msg))
