/**
 * A tiny host for compiled guests, in the test's own thread: it instantiates a module with an
 * imported `env.memory` and a synchronous `brain.call` that answers from a script, runs one entry
 * and records every host call as the guest sent it (op and request text, byte for byte).
 *
 * It follows docs/abi.md the way Brain's host must: the input and every answer are copied into
 * memory from `brain_alloc`, pairs are packed `(ptr << 32) | len`, text is UTF-8 (decoded
 * strictly, so a guest that sent bad UTF-8 fails the test), and `brain.fail` does not return (it
 * throws through the guest).
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { compileGuest, ROOT } from "../../scripts/build-guests.js"

export { ROOT }

/**
 * The WebAssembly JavaScript API, typed here: the project compiles without the DOM library, which
 * is where TypeScript declares it.
 */
export interface WasmModule {
  readonly __brand: "WebAssembly.Module"
}
interface WasmMemory {
  readonly buffer: ArrayBuffer
}
interface WasmApi {
  readonly Module: {
    new (bytes: Uint8Array): WasmModule
    imports(module: WasmModule): Array<{ module: string; name: string; kind: string }>
    exports(module: WasmModule): Array<{ name: string; kind: string }>
  }
  readonly Instance: new (module: WasmModule, imports: object) => { readonly exports: Record<string, any> }
  readonly Memory: new (descriptor: { initial: number; maximum?: number }) => WasmMemory
}
export const Wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly

export interface HostCall {
  readonly op: string
  /** The request's JSON text, exactly as the guest wrote it. */
  readonly request: string
}

/** Answers one host call: an object is sent as its JSON text, a string as it is (to send malformed answers). */
export type Answerer = (op: string, request: any) => unknown

export interface GuestRun {
  readonly calls: ReadonlyArray<HostCall>
  /** The entry's result text, when it returned. */
  readonly output?: string
  /** The message of `brain.fail`, when the guest gave up. */
  readonly failed?: string
  /** The guest memory's size when the entry ended, in bytes. */
  readonly memoryBytes: number
}

export interface RunOptions {
  /** The memory's maximum, in 64 KiB pages (Brain's default: 128 MiB = 2048 pages). */
  readonly maximumPages?: number
  readonly entry?: string
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true })
const encoder = new TextEncoder()

class GuestFailed extends Error {}

/** The module's memory import limits, read from its import section (Brain must honour the minimum). */
export const memoryImport = (bytes: Uint8Array): { initial: number; maximum?: number } => {
  let at = 8
  const u32 = () => {
    let result = 0
    let shift = 0
    for (;;) {
      const b = bytes[at++]!
      result |= (b & 0x7f) << shift
      if ((b & 0x80) === 0) return result >>> 0
      shift += 7
    }
  }
  const name = () => {
    const n = u32()
    const s = new TextDecoder().decode(bytes.subarray(at, at + n))
    at += n
    return s
  }
  while (at < bytes.length) {
    const id = bytes[at++]!
    const size = u32()
    const end = at + size
    if (id === 2) {
      for (let count = u32(); count > 0; count--) {
        const module = name()
        const field = name()
        const kind = bytes[at++]!
        if (kind === 0) u32() // function: type index
        else if (kind === 1) { at++; const flags = u32(); u32(); if (flags & 1) u32() } // table
        else if (kind === 3) at += 2 // global: type, mutability
        else if (kind === 2) {
          const flags = u32()
          const initial = u32()
          const maximum = flags & 1 ? u32() : undefined
          if (module === "env" && field === "memory") return maximum === undefined ? { initial } : { initial, maximum }
        }
      }
    }
    at = end
  }
  throw new Error("the module does not import env.memory")
}

/** A compiled guest and its memory import's limits. */
export interface Guest {
  readonly module: WasmModule
  readonly memory: { readonly initial: number; readonly maximum?: number }
  readonly size: number
}

export const loadGuest = (file: string): Guest => {
  const bytes = fs.readFileSync(file)
  return { module: new Wasm.Module(bytes), memory: memoryImport(bytes), size: bytes.length }
}

/** A live instance: its exports, the host calls so far, and helpers to pass bytes in and results out. */
export interface Instance {
  readonly exports: Record<string, any>
  readonly calls: ReadonlyArray<HostCall>
  readonly memoryBytes: () => number
  /** Copies `text` (UTF-8) into memory from `brain_alloc`; returns `[ptr, len]`. */
  readonly place: (text: string | Uint8Array) => [number, number]
  /** Calls an export that returns a packed result; `output` is its text, `failed` the message of brain.fail. */
  readonly result: (call: () => bigint) => { output?: string; failed?: string }
}

/** Instantiates `guest` with a fresh memory (its declared minimum, Brain's maximum unless told) and a scripted host. */
export const instantiate = (guest: Guest, answer: Answerer, options: RunOptions = {}): Instance => {
  const calls: Array<HostCall> = []
  const memory = new Wasm.Memory({ initial: guest.memory.initial, maximum: options.maximumPages ?? 2048 })
  let exports: Record<string, any> = {}
  const read = (ptr: number, len: number) => strictUtf8.decode(new Uint8Array(memory.buffer, ptr >>> 0, len >>> 0))
  const place = (data: Uint8Array): [number, number] => {
    const ptr = exports.brain_alloc(data.length) >>> 0
    new Uint8Array(memory.buffer, ptr, data.length).set(data)
    return [ptr, data.length]
  }
  const pack = ([ptr, len]: [number, number]) => (BigInt(ptr) << 32n) | BigInt(len)
  const brain = {
    call(opPtr: number, opLen: number, reqPtr: number, reqLen: number): bigint {
      const op = read(opPtr, opLen)
      const request = read(reqPtr, reqLen)
      calls.push({ op, request })
      const reply = answer(op, JSON.parse(request))
      return pack(place(encoder.encode(typeof reply === "string" ? reply : JSON.stringify(reply))))
    },
    fail(ptr: number, len: number): never {
      throw new GuestFailed(read(ptr, len))
    }
  }
  exports = new Wasm.Instance(guest.module, { env: { memory }, brain }).exports
  return {
    exports,
    calls,
    memoryBytes: () => memory.buffer.byteLength,
    place: (text) => place(typeof text === "string" ? encoder.encode(text) : text),
    result: (call) => {
      try {
        const packed = BigInt.asUintN(64, call())
        return { output: read(Number(packed >> 32n), Number(packed & 0xffffffffn)) }
      } catch (e) {
        if (e instanceof GuestFailed) return { failed: e.message }
        throw e
      }
    }
  }
}

/** Runs the entry (`brain_run` unless told) once, in a fresh instance with a fresh memory. */
export const runGuest = (guest: Guest, input: string | Uint8Array, answer: Answerer, options: RunOptions = {}): GuestRun => {
  const instance = instantiate(guest, answer, options)
  const [ptr, len] = instance.place(input)
  const run = instance.result(() => instance.exports[options.entry ?? "brain_run"](ptr, len))
  return { calls: instance.calls, ...run, memoryBytes: instance.memoryBytes() }
}

/** Compiles an AssemblyScript entry that is not shipped (a test probe) into a temporary file. */
export const compileProbe = async (entry: string): Promise<Guest> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-guest-probe-"))
  try {
    const out = path.join(dir, "probe.wasm")
    await compileGuest(path.join(ROOT, entry), out, { checkEntry: false })
    return loadGuest(out)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** The shipped module `dist/loops/<name>.wasm` (`npm run build` makes it). */
export const shippedGuest = (name: string): Guest => {
  const file = path.join(ROOT, "dist", "loops", `${name}.wasm`)
  if (!fs.existsSync(file)) throw new Error(`${file} is missing: run npm run build`)
  return loadGuest(file)
}
