/**
 * A pinned activation on a worker thread (GuestWorker.ts): the guest's instrumented twin
 * (Instrument.ts) in a fresh instance, driven as the main thread drives it (Inline.ts). A host
 * call unwinds the guest's stack into its own memory (Asyncify) and returns to the worker, which
 * signals the call and goes on to other work; the answer, when it comes, rewinds the guest into the
 * same call, which then returns it. The instance stays on this thread between the two: the
 * activation is pinned here, and only its thread can resume it.
 *
 * The twin's metering (`brain.tick`) stops a guest at its compute budget (the milliseconds left,
 * given with each start and resume), or when the main thread has given its activation up (`stopped`:
 * its pin in the STOP word, WorkerProtocol.ts), without the thread being terminated, so one guest's
 * runaway or interruption never costs the activations pinned beside it.
 *
 * Plain JavaScript, as GuestWorker.ts: it runs in the worker, never on the main thread.
 */
import { isUtf8 } from "node:buffer"
import { guestFailureMessage } from "../../domain/CutText.js"
import { ENTER, STEP_EXPORTS, SUSPEND_BYTES, UNWIND_LEN } from "./TwinExports.js"
import { type ActivateMessage, requestTooLarge } from "./WorkerProtocol.js"

/** The guest broke the ABI or gave up: the activation fails with this message. */
export class GuestError extends Error {}
/** The guest computed past its budget. */
export class Overrun extends Error {}
/** The guest's activation was given up while it computed (the main thread asked it stopped). */
export class Stopped extends Error {}

/** Metering units between two reads of the clock (as on the main thread, Inline.ts). */
const FUEL = 20_000

const NORMAL = 0
const UNWINDING = 1

const decoder = new TextDecoder("utf-8", { fatal: true })
const encoder = new TextEncoder()

/** Where a step of a pinned activation stopped: at a host call (its op and request, views into the guest's memory), or at its end (its output). */
export type Step =
  | { readonly _tag: "call"; readonly op: Uint8Array; readonly request: Uint8Array }
  | { readonly _tag: "done"; readonly output: Uint8Array }

export class TwinRun {
  readonly memory: WebAssembly.Memory
  private exports: Record<string, any> = {}
  private state: typeof NORMAL | typeof UNWINDING = NORMAL
  private starting = true
  private allocating = false
  private suspendAt = 0
  /** The answer to a host call that unwinds the guest into the buffer at `suspendAt` (TwinExports.ts, UNWIND_LEN). */
  private unwindAnswer = 0n
  private pending: { readonly op: Uint8Array; readonly request: Uint8Array } | undefined = undefined
  /** `performance.now()` past which the guest is stopped (0: no bound). */
  private deadline = 0
  private ptr = 0
  private len = 0

  /**
   * Instantiates `module` (a twin) with `memory`; throws what instantiation throws. `stopped` says
   * whether the main thread has asked this activation stopped: read where the clock is.
   */
  constructor(readonly msg: ActivateMessage, module: WebAssembly.Module, memory: WebAssembly.Memory, private readonly stopped: () => boolean) {
    this.memory = memory
    // Its start function is the activation's compute too.
    this.limit(msg.budgetMs ?? 0)
    this.exports = new WebAssembly.Instance(module, this.imports()).exports as Record<string, any>
    this.starting = false
  }

  /** Whether it failed while unwinding: its stack at a host call did not fit SUSPEND_BYTES. */
  get unwinding(): boolean {
    return this.state === UNWINDING
  }

  /** Gives the guest its input and runs it to its first host call or its end. */
  begin(input: Uint8Array): Step {
    const given = this.give(input)
    this.ptr = Number(given >> 32n)
    this.len = Number(given & 0xffffffffn)
    return this.step(0, 0, ENTER)
  }

  /** Rewinds the guest into the host call it unwound from, which returns `answer`; runs it to its next call or its end. */
  resume(answer: Uint8Array, budgetMs: number): Step {
    this.limit(budgetMs)
    // Written where the guest allocates it before the rewind, which changes nothing the allocator reads.
    const given = this.give(answer)
    return this.step(Number(given >> 32n), answer.length, this.suspendAt)
  }

  private limit(budgetMs: number) {
    this.deadline = budgetMs > 0 ? performance.now() + budgetMs : 0
  }

  /** Runs the entry's step (TwinExports.ts, STEP_EXPORTS): entered (`buffer` ENTER), or rewound from `buffer` with the answer at (answerPtr, answerLen). */
  private step(answerPtr: number, answerLen: number, buffer: number): Step {
    const result = this.exports[STEP_EXPORTS[this.msg.entry]](this.ptr, this.len, answerPtr, answerLen, buffer)
    if (this.state === UNWINDING) {
      // The step stopped the unwind.
      this.state = NORMAL
      const pending = this.pending!
      this.pending = undefined
      return { _tag: "call", ...pending }
    }
    if (typeof result !== "bigint") throw new GuestError(`${this.msg.entry} did not return an i64 (ptr, len) pair`)
    const value = BigInt.asUintN(64, result)
    return { _tag: "done", output: this.checkedAt(Number(value >> 32n), Number(value & 0xffffffffn), `the output ${this.msg.entry} returned`) }
  }

  private bytesAt(ptr: number, len: number): Uint8Array {
    if (!Number.isInteger(ptr) || !Number.isInteger(len) || ptr < 0 || len < 0 || ptr + len > this.memory.buffer.byteLength) {
      throw new GuestError(`a (ptr ${ptr}, len ${len}) pair runs past the guest's memory (${this.memory.buffer.byteLength} bytes)`)
    }
    return new Uint8Array(this.memory.buffer, ptr, len)
  }

  private checkedAt(ptr: number, len: number, what: string): Uint8Array {
    const bytes = this.bytesAt(ptr, len)
    if (!isUtf8(bytes)) throw new GuestError(`${what} is not UTF-8`)
    return bytes
  }

  /** Copies bytes into memory the guest allocates; the packed (ptr, len). */
  private give(bytes: Uint8Array): bigint {
    this.allocating = true
    let ptr: number
    try {
      ptr = this.exports.brain_alloc(bytes.length) >>> 0
    } finally {
      this.allocating = false
    }
    this.bytesAt(ptr, bytes.length).set(bytes)
    return (BigInt(ptr) << 32n) | BigInt(bytes.length)
  }

  private imports() {
    return {
      env: { memory: this.memory },
      brain: {
        call: (opPtr: number, opLen: number, reqPtr: number, reqLen: number): bigint => {
          if (this.starting) throw new GuestError("a host call from the module's start function: host calls are for brain_run and brain_tool")
          if (this.allocating) {
            throw new GuestError('a host call from brain_alloc: host calls are for brain_run and brain_tool, and Brain calls brain_alloc from inside them (docs/abi.md, "Exports")')
          }
          // The suspend buffer first: its allocation may grow the memory, which detaches every view
          // of it taken before (the op's and the request's below are sent after the unwind).
          if (this.suspendAt === 0) {
            const at = this.give(new Uint8Array(SUSPEND_BYTES))
            this.suspendAt = Number(at >> 32n)
            this.unwindAnswer = (BigInt(this.suspendAt) << 32n) | BigInt(UNWIND_LEN)
          }
          const op = this.bytesAt(opPtr >>> 0, opLen >>> 0)
          try {
            decoder.decode(op)
          } catch {
            throw new GuestError("a host call's op is not UTF-8")
          }
          if (reqLen >>> 0 > this.msg.maxRequestBytes) {
            return this.give(encoder.encode(requestTooLarge(reqLen >>> 0, this.msg.maxRequestBytes)))
          }
          const request = this.checkedAt(reqPtr >>> 0, reqLen >>> 0, "a host call's request")
          // Asyncify's buffer header: where its data goes next, and where it ends.
          const header = new DataView(this.memory.buffer, this.suspendAt, 8)
          header.setInt32(0, this.suspendAt + 8, true)
          header.setInt32(4, this.suspendAt + SUSPEND_BYTES, true)
          // Views: the guest's memory does not change until it is rewound (its stack goes into the buffer).
          this.pending = { op, request }
          this.state = UNWINDING
          // The twin unwinds into the buffer, and the step stops the unwind.
          return this.unwindAnswer
        },
        fail: (ptr: number, len: number): never => {
          throw new GuestError(guestFailureMessage(this.bytesAt(ptr >>> 0, len >>> 0), decoder))
        },
        tick: (): number => {
          if (this.stopped()) throw new Stopped("its activation was given up while it computed")
          if (this.deadline > 0 && performance.now() > this.deadline) throw new Overrun()
          return FUEL
        }
      }
    }
  }
}
