/**
 * Runs an activation on the main thread, in a fresh instance of the module as Instrument.ts made
 * it: no thread is taken, and no host call crosses a thread. A host call unwinds the guest
 * (Asyncify), the host performs it as a fiber like any other, and the guest is rewound into the
 * call with the answer; the fiber waits, the thread does not.
 *
 * The main thread lends a guest `inlineMs` of compute per activation (BRAIN_WASM_INLINE_MS),
 * counted by its metering: a guest that needs more, a guest whose call stack at a host call
 * does not fit the suspension buffer, and a guest that overflows the main thread's stack are all
 * **moved**: the activation is given up here and run again from its start on a worker thread
 * (Activation.ts), where the host calls it already made are answered from what was recorded here,
 * not performed again. A guest sees only its input, its memory and the host's answers, so it makes
 * the same calls again (WasmHostWorkers checks that it does). The budget
 * (BRAIN_MAX_WASM_COMPUTE_MS) counts the worker's run from its start.
 *
 * Everything else is as on a worker: a fresh memory (new, or one an earlier activation left at its
 * initial size, zero-filled), the same limits, the same failures with the same messages.
 *
 * **Every activation starts from a new instance's state.** For a module whose twin can be reset
 * (Instrument.ts, RESET_EXPORTS), an instance whose activation completed — memory still at its
 * initial size — is put back exactly as instantiation left it and kept for the module's next
 * activation: its memory written again from the image taken right after instantiation (the data
 * segments and whatever the start function stored, zero beyond), its mutable globals restored from
 * the copy saved at that moment; its tables and segments its code cannot change. The guest cannot
 * tell it from a new instance (nothing else of an instance is state a guest can read), and the
 * main thread is spared V8's instantiation (about a fifth of a text turn's guest-side cost). An
 * instance whose activation failed, trapped, moved or grew its memory is never kept. Spare memories
 * and instances put back, and their bounds, are Spares.ts's.
 */
import * as crypto from "node:crypto"
import { guestFailureMessage } from "../../domain/CutText.js"
import { Effect, Exit } from "effect"
import type { MemoryLimits } from "../../services/WasmHost.js"
import { type Activation, type ActivationFailure, type ActivationLimits, inputBytes, memoryLimitsOf } from "./Activation.js"
import { eventLoopTurn } from "../Waits.js"
import { chargedCall, yieldsAfter } from "./HostCallCost.js"
import { packPair, unpackPair, unpacked } from "./Pairs.js"
import { ENTER, LOW_EXPORT, RESET_EXPORTS, STEP_EXPORTS, SUSPEND_BYTES, UNWIND_LEN, WRITTEN_EXPORT } from "./TwinExports.js"
import { requestTooLarge, trapReason } from "./WorkerProtocol.js"
import { activationEnded, activationStarted, dropped, imageKept, instanceStats, memoryFor, newMemoryReason, newMemoryRefused, putBack, recycle, type Resting, spareRun } from "./Spares.js"

export interface InlineLimits extends ActivationLimits {
  /** Milliseconds of compute the main thread lends one activation before moving it to a worker. */
  readonly inlineMs: number
}

/**
 * A host call the guest made inline: its op, its request (a long one by its SHA-256 only, so a
 * record does not keep every transcript a loop sent), and the answer it was given.
 */
export interface RecordedCall {
  readonly op: string
  readonly request: string
  readonly answer: string
}

/** Requests longer than this are recorded by their digest. */
const KEPT_REQUEST_CHARS = 4096

/** What a record keeps of a request: the text when short, else `sha256:<hex>` (a request is JSON, which never starts so). */
export const requestKey = (request: string): string =>
  request.length <= KEPT_REQUEST_CHARS ? request : `sha256:${crypto.createHash("sha256").update(request).digest("hex")}`

export type InlineOutcome =
  | { readonly _tag: "done"; readonly output: string }
  /** The activation must run again on a worker thread, answered `calls` first. */
  | { readonly _tag: "moved"; readonly reason: string; readonly calls: ReadonlyArray<RecordedCall> }

/**
 * What each way an activation can end here goes on to: its output, its move to a worker thread
 * (to run again from its start, answered `calls` first), its failure. Taken at the end itself, so
 * that what the caller does with the output is the next step of the same effect, not a step
 * mapped over an outcome value.
 */
export interface InlineEnds<A, E> {
  readonly done: (output: string) => Effect.Effect<A, E>
  readonly moved: (reason: string, calls: ReadonlyArray<RecordedCall>) => Effect.Effect<A, E>
  readonly failed: (failure: ActivationFailure) => Effect.Effect<A, E>
}

/** The ends as values (`tryInline`): an `Exit` of the outcome. */
const asOutcome: InlineEnds<InlineOutcome, ActivationFailure> = {
  done: (output) => Exit.succeed({ _tag: "done", output }),
  moved: (reason, calls) => Exit.succeed({ _tag: "moved", reason, calls }),
  failed: (failure) => Exit.fail(failure)
}

/** Metering units between two reads of the clock. */
const FUEL = 20_000


export { SUSPEND_BYTES }

/**
 * Asyncify's states as this host needs them: UNWINDING from the host call it answered with the
 * unwind (TwinExports.ts, UNWIND_LEN) until the step that unwound returned. The twin rewinds
 * itself (STEP_EXPORTS).
 */
const NORMAL = 0
const UNWINDING = 1

/**
 * The instance the next activation of a module will take, made when the main thread is next idle
 * after one of its activations completed (as a worker thread does, GuestWorker.ts): instantiation
 * leaves the activation's path. Still a fresh instance per activation: nothing has run in it but
 * its start function, which cannot call the host (a call from it fails the activation that takes
 * it) and sees nothing an activation could change. One per module, for the modules last run.
 */
const ahead = new Map<WebAssembly.Module, { readonly key: string; readonly run: Run }>()
const AHEAD_MODULES = 16

const makeAhead = (instrumented: WebAssembly.Module, limits: InlineLimits, cap: number, memoryLimits: { initial: number; maximum: number }, key: string) => {
  // Not a new memory the module's activations would not make themselves (Spares.ts, `newMemoryRefused`).
  if (ahead.has(instrumented) || newMemoryRefused(instrumented, memoryLimits)) return
  setImmediate(() => {
    if (ahead.has(instrumented)) return
    const run = new Run(limits, cap, memoryLimits, key)
    try {
      run.instantiate(instrumented)
    } catch {
      // A start function that fails fails the next activation, which instantiates for itself.
      return
    }
    ahead.set(instrumented, { key, run })
    if (ahead.size > AHEAD_MODULES) ahead.delete(ahead.keys().next().value!)
  })
}

const FROM_ALLOC = 'a host call from brain_alloc: host calls are for brain_run and brain_tool, and Brain calls brain_alloc from inside them (docs/abi.md, "Exports")'

/** The guest broke the ABI or gave up. */
class GuestError extends Error {}
/** The guest computed past what the main thread lends it. */
class Overrun extends Error {}

const encoder = new TextEncoder()
const decoder = new TextDecoder("utf-8", { fatal: true })
const EMPTY = Buffer.alloc(0)

/**
 * The text of `view`'s bytes from `start` to `end` as the fatal UTF-8 decoder reads it (a leading
 * byte-order mark dropped), or undefined when they are not UTF-8. Decoded without a view of their
 * own: bytes that are not UTF-8 decode to U+FFFD, so text without one is the fatal decoder's, and
 * only text with one (a replacement, or a U+FFFD the bytes hold) goes through that decoder to tell
 * which. test/layers/wasm/Inline.test.ts holds it to the decoder on arbitrary bytes.
 */
export const utf8Text = (view: Buffer, start: number, end: number): string | undefined => {
  const text = view.toString("utf8", start, end)
  if (!text.includes("\ufffd")) return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text
  try {
    return decoder.decode(view.subarray(start, end))
  } catch {
    return undefined
  }
}

const guestFailure = (message: string): ActivationFailure => ({ _tag: "guest", message })

/** Above every byte of a memory: the host wrote none since the instance was put back. */
const NOT_WRITTEN = 2 ** 32

/** One activation's instance and where it stands. */
class Run implements Resting {
  readonly memory: WebAssembly.Memory
  exports: Record<string, any> = {}
  /** The module it is an instance of (once instantiated). */
  module: WebAssembly.Module | undefined = undefined
  /** Instantiating: a host call now comes from the start function. */
  starting = true
  /** Asyncify's state: UNWINDING from the host call answered with the unwind until its step returned. */
  state: typeof NORMAL | typeof UNWINDING = NORMAL
  /** The host call the guest unwound from. */
  pending: { readonly op: string; readonly request: string } | undefined = undefined
  /** Where the suspended stack goes (0: not taken yet). */
  suspendAt = 0
  /** The answer to a host call that unwinds the guest into the buffer at `suspendAt` (TwinExports.ts, UNWIND_LEN). */
  unwindAnswer = 0n
  /** Milliseconds computed here so far, and when the current stretch began. */
  used = 0
  stretchStart = 0
  calls: Array<RecordedCall> = []
  /** Its twin has RESET_EXPORTS, and they saved the globals as instantiation left them. */
  resettable = false
  /** Its twin counts the bytes its guest writes (WRITTEN_EXPORT, LOW_EXPORT). */
  counted = false
  /** The twin's written marks, as its last restore answered them (restore). */
  twinWritten = 0
  twinLow = NOT_WRITTEN
  /** One past the highest byte of its memory the host wrote (or read) since it was put back. */
  hostEnd = 0
  /** The lowest byte of its memory the host wrote since it was put back (NOT_WRITTEN: none). */
  hostLow = NOT_WRITTEN
  /**
   * The suspension buffer's part above everything Asyncify stored in it (Resting.quietFrom,
   * quietTo; none while no host call was made): the host handed it out and wrote none of it.
   */
  quietFrom = 0
  quietTo = 0

  constructor(public limits: InlineLimits, public cap: number, memory: { initial: number; maximum: number }, readonly key: string) {
    this.memory = memoryFor(memory)
    this.imports.env.memory = this.memory
  }

  /**
   * Makes the instance (its start function metered from now); throws what instantiation throws. The
   * twin's exports named in the host's namespace (RESET_EXPORTS, WRITTEN_EXPORT) are the
   * instrumentation's own: admission refuses a guest's, and Instrument.ts drops them (TwinExports.ts).
   */
  instantiate(instrumented: WebAssembly.Module) {
    this.stretchStart = performance.now()
    this.module = instrumented
    this.exports = new WebAssembly.Instance(instrumented, this.imports).exports as Record<string, any>
    instanceStats.made++
    this.counted = this.exports[WRITTEN_EXPORT] !== undefined && this.exports[LOW_EXPORT] !== undefined
    const save = this.exports[RESET_EXPORTS.save]
    if (typeof save === "function" && typeof this.exports[RESET_EXPORTS.restore] === "function") {
      // What its start function stored is the image (the same in every instance of the module:
      // the start function sees only a zeroed memory and its globals): nothing is written below
      // the image's end yet, and each reset says so again.
      const low = this.exports[LOW_EXPORT] as { value: number } | undefined
      if (low !== undefined) low.value = -1
      save()
      imageKept(instrumented, this.memory)
      this.resettable = true
    }
  }

  /** Back to where an activation starts, its instance having been put back (putBack). */
  rest() {
    this.state = NORMAL
    this.pending = undefined
    this.suspendAt = 0
    this.used = 0
    this.calls = []
    this.allocating = false
    this.hostEnd = 0
    this.hostLow = NOT_WRITTEN
    this.quietFrom = 0
    this.quietTo = 0
  }

  /**
   * The guest has unwound into the suspension buffer: Asyncify's stack ends where its header's
   * first word now points. What lies above that, to the buffer's end, is quiet unless the guest
   * stored there itself (which the put-back checks before it skips any of it).
   */
  unwound() {
    const at = this.suspendAt
    const data = this.memoryView().readUInt32LE(at)
    const from = Math.min(Math.max(data, at + 8, this.quietFrom), at + SUSPEND_BYTES)
    this.quietFrom = from
    this.quietTo = at + SUSPEND_BYTES
  }

  /**
   * Restores its twin's globals as instantiation left them (RESET_EXPORTS.restore), keeping the
   * written marks the restore answers (as they were before it) for `written` and `low`.
   */
  restore(): void {
    const marks = this.exports[RESET_EXPORTS.restore]() as bigint
    if (!this.counted) return
    unpackPair(marks)
    this.twinWritten = unpacked.ptr
    this.twinLow = unpacked.len
  }

  /** One past the highest byte of memory written since instantiation or the last put-back (as `restore` read the twin's mark): the guest's (WRITTEN_EXPORT) and the host's; the memory's size when its twin does not count. */
  written(): number {
    return this.counted ? Math.max(this.twinWritten, this.hostEnd) : this.memory.buffer.byteLength
  }

  /** The lowest byte of memory written since instantiation or the last put-back (as `restore` read the twin's mark), by the guest (LOW_EXPORT) or the host; 0 when its twin does not count. */
  low(): number {
    return this.counted ? Math.min(this.twinLow, this.hostLow) : 0
  }

  /**
   * The memory as one Buffer over its current ArrayBuffer, made again only once the guest grew it
   * (which detaches the last: its view reads as empty). Each host call and the input and output
   * used to take the memory's buffer (a call into V8's API) and a view of their own from it, three
   * to four times a step; a turn's few hundred bytes are read and written through this one.
   */
  private currentView: Buffer = EMPTY

  private memoryView(): Buffer {
    let view = this.currentView
    if (view.byteLength === 0) view = this.currentView = Buffer.from(this.memory.buffer)
    return view
  }

  /** The memory's Buffer (Resting.view): the same as the host reads and writes it through. */
  view(): Buffer {
    return this.memoryView()
  }

  /** The memory's view, once `len` bytes at `ptr` are checked to lie within it (and counted as the host's). */
  private within(ptr: number, len: number): Buffer {
    const view = this.memoryView()
    if (ptr < 0 || len < 0 || ptr + len > view.byteLength) {
      throw new GuestError(`a (ptr ${ptr}, len ${len}) pair runs past the guest's memory (${view.byteLength} bytes)`)
    }
    if (ptr + len > this.hostEnd) this.hostEnd = ptr + len
    return view
  }

  /** As `within`, for bytes the host is about to write: counted as written from `ptr`. */
  private writable(ptr: number, len: number): Buffer {
    const view = this.within(ptr, len)
    if (ptr < this.hostLow) this.hostLow = ptr
    return view
  }

  /** A view of `len` bytes at `ptr`, which its holder can write: counted as written (only a failure's message is read so, and its instance is never kept). */
  bytesAt(ptr: number, len: number): Uint8Array {
    return this.writable(ptr, len).subarray(ptr, ptr + len)
  }

  /** The UTF-8 text of `len` bytes at `ptr` (utf8Text), or a GuestError when it is not UTF-8. */
  textAt(ptr: number, len: number, what: string): string {
    const text = utf8Text(this.within(ptr, len), ptr, ptr + len)
    if (text === undefined) throw new GuestError(`${what} is not UTF-8`)
    return text
  }

  /** Brain is in a call of `brain_alloc`: a host call now comes from the allocator. */
  allocating = false

  alloc(size: number): number {
    this.allocating = true
    try {
      return this.exports.brain_alloc(size) >>> 0
    } finally {
      this.allocating = false
    }
  }

  /** Copies bytes into memory the guest allocates; where. */
  put(bytes: Uint8Array): number {
    const ptr = this.alloc(bytes.length)
    this.writable(ptr, bytes.length).set(bytes, ptr)
    return ptr
  }

  /**
   * Writes `length` bytes of `text` as UTF-8 straight into memory the guest allocates (no copy made
   * first; a lone surrogate as U+FFFD, as TextEncoder writes it); where.
   */
  putText(text: string, length: number): number {
    const ptr = this.alloc(length)
    this.writable(ptr, length).write(text, ptr, length, "utf8")
    return ptr
  }

  give(bytes: Uint8Array): bigint {
    return packPair(this.put(bytes), bytes.length)
  }



  readonly imports = {
    env: { memory: undefined as unknown as WebAssembly.Memory },
    brain: {
      call: (opPtr: number, opLen: number, reqPtr: number, reqLen: number): bigint => {
        if (this.starting) throw new GuestError("a host call from the module's start function: host calls are for brain_run and brain_tool")
        if (this.allocating) throw new GuestError(FROM_ALLOC)
        const op = this.textAt(opPtr >>> 0, opLen >>> 0, "a host call's op")
        if (reqLen >>> 0 > this.limits.ioBytes) {
          return this.give(encoder.encode(requestTooLarge(reqLen >>> 0, this.limits.ioBytes)))
        }
        const request = this.textAt(reqPtr >>> 0, reqLen >>> 0, "a host call's request")
        if (this.suspendAt === 0) {
          const at = this.alloc(SUSPEND_BYTES)
          // Its header is the host's to write (below), the rest Asyncify's (counted by the twin).
          this.writable(at, SUSPEND_BYTES)
          this.suspendAt = at
          this.unwindAnswer = packPair(at, UNWIND_LEN)
        }
        // Asyncify's buffer header: where its data goes next, and where it ends.
        const memory = this.memoryView()
        memory.writeInt32LE(this.suspendAt + 8, this.suspendAt)
        memory.writeInt32LE(this.suspendAt + SUSPEND_BYTES, this.suspendAt + 4)
        this.pending = { op, request }
        this.state = UNWINDING
        // The twin unwinds into the buffer, and the step that entered it stops the unwind.
        return this.unwindAnswer
      },
      fail: (ptr: number, len: number): never => {
        // Read no further than the bound Brain keeps of a failure's message (docs/abi.md, "Limits").
        throw new GuestError(guestFailureMessage(this.bytesAt(ptr >>> 0, len >>> 0), decoder))
      },
      tick: (): number => {
        if (this.used + (performance.now() - this.stretchStart) > this.cap) throw new Overrun()
        return FUEL
      }
    }
  }
}

/**
 * Runs `activation` here with `instrumented` (Instrument.ts's module of the same code), and goes
 * on to what `ends` makes of its end: its output, its failure (as the worker would fail), or its
 * move when the rest must run on a worker thread.
 */
export const runInline = <A, E>(instrumented: WebAssembly.Module, activation: Activation, limits: InlineLimits, ends: InlineEnds<A, E>): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    activationStarted()
    // Counted out once: when the activation ends here, or when its wait in a host call ends
    // otherwise (interrupted, or the call died).
    let over = false
    const ended = () => {
      if (over) return
      over = true
      activationEnded()
    }
    let started: Started<A, E>
    try {
      started = start(instrumented, activation, limits, false, ends, ended)
    } catch (err) {
      ended()
      throw err
    }
    // An activation that ended before any host call (a Wasm tool's usual case) is over already:
    // what is left is what its end goes on to. One waiting in a host call is over when that wait
    // and the rest here are, however they end.
    return started.inHostCall ? Effect.ensuring(started.outcome, Effect.sync(ended)) : started.outcome
  })

/**
 * Tries `activation` here, now, to its end, as `runInline` would run it: its outcome (done, moved
 * or failed: an `Exit`, nothing left to run) when it ended before any host call; undefined when it
 * reached one. Then it is given up before that call is performed — nothing the guest asked for was
 * done, its instance is dropped and its memory zeroed — so that running it again (`runInline`, a
 * worker) is the same activation from its start: a guest sees only its input, its memory and the
 * host's answers. What it computed up to the call is computed again; a Wasm tool's usual call
 * makes none (WasmHostWorkers.ts, `tryTool`, tries each call so; InlineModules.ts stops trying a
 * module whose tries give up).
 */
export const tryInline = (instrumented: WebAssembly.Module, activation: Activation, limits: InlineLimits): Exit.Exit<InlineOutcome, ActivationFailure> | undefined => {
  activationStarted()
  try {
    const started = start(instrumented, activation, limits, true, asOutcome, noop)
    return started.inHostCall ? undefined : (started.outcome as Exit.Exit<InlineOutcome, ActivationFailure>)
  } finally {
    activationEnded()
  }
}

const noop = () => {}

/**
 * An activation's memory limits (memoryLimitsOf) and their key for the spares, `initial:maximum`:
 * the last module's kept, so that an activation of the module the last one ran makes neither again.
 */
let lastLimits: { initial: number; maximum: number | undefined; memoryBytes: number; memoryLimits: { initial: number; maximum: number }; key: string } | undefined
const limitsOf = (memory: MemoryLimits, memoryBytes: number) => {
  const last = lastLimits
  if (last !== undefined && last.initial === memory.initial && last.maximum === memory.maximum && last.memoryBytes === memoryBytes) return last
  const memoryLimits = memoryLimitsOf(memory, memoryBytes)
  return (lastLimits = { initial: memory.initial, maximum: memory.maximum, memoryBytes, memoryLimits, key: `${memoryLimits.initial}:${memoryLimits.maximum}` })
}

/** An activation run up to its end or its first host call: what is left of it, and which. */
interface Started<A, E> {
  readonly outcome: Effect.Effect<A, E>
  readonly inHostCall: boolean
}

/**
 * Runs the activation, synchronously, up to its end or its first host call. `giveUp`: at that
 * call, the guest is unwound and dropped instead of waiting for the call (`tryInline`). `ended`
 * is called as the activation ends here, before what its end goes on to.
 */
const start = <A, E>(
  instrumented: WebAssembly.Module,
  activation: Activation,
  limits: InlineLimits,
  giveUp: boolean,
  ends: InlineEnds<A, E>,
  ended: () => void
): Started<A, E> => {
  const done = (outcome: Effect.Effect<A, E>): Started<A, E> => ({ outcome, inHostCall: false })
  const input = activation.input
  const inputLength = inputBytes(input)
  if (inputLength > limits.ioBytes) {
    ended()
    return done(ends.failed(guestFailure(`the activation's input is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})`)))
  }
  const { memoryLimits, key } = limitsOf(activation.memory, limits.memoryBytes)
  const budgetFirst = limits.computeMs > 0 && limits.computeMs <= limits.inlineMs
  const cap = budgetFirst ? limits.computeMs : limits.inlineMs
  const made = ahead.get(instrumented)
  let run: Run
  const spare = spareRun<Run>(instrumented, key)
  if (spare !== undefined) {
    instanceStats.reused++
    run = spare
    run.limits = limits
    run.cap = cap
  } else if (made !== undefined && made.key === key) {
    ahead.delete(instrumented)
    run = made.run
    run.limits = limits
    run.cap = cap
    // Its start function's compute, ahead of the activation, is not the activation's.
    run.used = 0
  } else if (newMemoryRefused(instrumented, memoryLimits)) {
    // Before the guest runs: nothing was computed or asked for (Spares.ts).
    ended()
    return done(ends.moved(newMemoryReason(memoryLimits), []))
  } else {
    run = new Run(limits, cap, memoryLimits, key)
    try {
      run.instantiate(instrumented)
    } catch (err) {
      return done(end(run, memoryLimits, err, budgetFirst, ends, ended))
    }
  }
  run.starting = false
  // The input's allocation begins the activation's first stretch of compute, which goes on into
  // its entry (one stretch, two clock reads, not two of each): an instance put back or made ahead
  // rested since its last stretch, and that rest is not the activation's (a guest whose allocator
  // runs out of fuel would tick against it and be moved). A new instance's stretch began with its
  // start function, which is this activation's.
  if (spare !== undefined || run === made?.run) run.stretchStart = performance.now()
  let ptr: number
  const len = inputLength
  try {
    ptr = typeof input === "string" ? run.putText(input, inputLength) : run.put(input)
  } catch (err) {
    run.used += performance.now() - run.stretchStart
    return done(end(run, memoryLimits, err, budgetFirst, ends, ended))
  }
  // The entry's step: entered with the input, then rewound with each host call's answer (TwinExports.ts).
  const enter = run.exports[STEP_EXPORTS[activation.entry]] as (ptr: number, len: number, answerPtr: number, answerLen: number, buffer: number) => unknown

  /** Set when the guest unwinds for a host call: from the first step on, the activation waits in one. */
  let inHostCall = false
  /** Milliseconds of compute the activation's host calls were charged for the main thread's work on them (HostCallCost.ts). */
  let reading = 0
  /** The first step goes on with the input's stretch; each after a host call begins one. */
  let first = true
  /** When the last stretch of compute ended: where the host call that unwound it begins (HostCallCost.ts). */
  let stretchEnd = 0
  /** Runs the guest: into its entry, or (`answer`) rewound into the host call it unwound from, which answers it. */
  const step = (answer?: string): Effect.Effect<A, E> => {
    let result: unknown
    if (first) first = false
    else run.stretchStart = performance.now()
    try {
      // The answer is written where the guest allocates it before the rewind, not in its call:
      // the rewind changes nothing the allocator reads, so the guest finds what it would have.
      if (answer === undefined) result = enter(ptr, len, 0, 0, ENTER)
      else {
        const answerLen = Buffer.byteLength(answer, "utf8")
        result = enter(ptr, len, run.putText(answer, answerLen), answerLen, run.suspendAt)
      }
    } catch (err) {
      return end(run, memoryLimits, err, budgetFirst, ends, ended)
    } finally {
      stretchEnd = performance.now()
      run.used += stretchEnd - run.stretchStart
    }
    if (run.state === UNWINDING) {
      // The step stopped the unwind.
      run.state = NORMAL
      run.unwound()
      const { op, request } = run.pending!
      run.pending = undefined
      inHostCall = true
      if (giveUp) {
        // Nothing performed: the memory is all that is kept (zeroed), never the instance mid-call.
        recycle(run.memory, memoryLimits)
        return Effect.never
      }
      // The main thread's work on the call is the guest's compute (HostCallCost.ts): the next tick
      // counts it, and once that work alone passes what the main thread lends the activation, it
      // moves (or fails at its budget) here, between calls.
      return chargedCall(activation.perform, op, request, (answer, callMs) => {
        run.used += callMs
        reading += callMs
        run.calls.push({ op, request: requestKey(request), answer })
        if (reading > run.cap) return end(run, memoryLimits, new Overrun(), budgetFirst, ends, ended)
        const rewind = () => step(answer)
        // A call that held the main thread a while gives the event loop a turn before the guest goes on.
        return yieldsAfter(callMs) ? Effect.flatMap(eventLoopTurn, rewind) : rewind()
      }, stretchEnd)
    }
    let output: string
    try {
      output = unpack(run, result, activation.entry)
    } catch (err) {
      return end(run, memoryLimits, err, budgetFirst, ends, ended)
    }
    // Its instance kept for the next activation, else one made for it when the thread is idle.
    if (!putBack(run, instrumented, memoryLimits)) makeAhead(instrumented, limits, cap, memoryLimits, key)
    ended()
    return ends.done(output)
  }
  const outcome = step()
  return { outcome, inHostCall }
}

/** The output text the guest's `(ptr, len)` names, checked (UTF-8, size). */
const unpack = (run: Run, packed: unknown, entry: string): string => {
  if (typeof packed !== "bigint") throw new GuestError(`${entry} did not return an i64 (ptr, len) pair`)
  unpackPair(packed)
  const len = unpacked.len
  const text = run.textAt(unpacked.ptr, len, `the output ${entry} returned`)
  if (len > run.limits.ioBytes) throw new GuestError(`the guest's output is above BRAIN_MAX_WASM_IO_BYTES (${run.limits.ioBytes})`)
  return text
}

/** How an activation that threw ends (`ended` called first): moved, or failed with the worker's message for the same cause. */
const end = <A, E>(
  run: Run,
  memoryLimits: { initial: number; maximum: number },
  err: unknown,
  budgetFirst: boolean,
  ends: InlineEnds<A, E>,
  ended: () => void
): Effect.Effect<A, E> => {
  ended()
  const moved = (reason: string) => ends.moved(reason, run.calls)
  const failed = (message: string) => ends.failed(guestFailure(message))
  if (err instanceof Overrun) {
    if (budgetFirst) {
      return ends.failed({
        _tag: "budget",
        message: `the guest ran past its compute budget of ${run.limits.computeMs} ms (BRAIN_MAX_WASM_COMPUTE_MS) and was stopped`
      })
    }
    return moved(`it computed past BRAIN_WASM_INLINE_MS (${run.limits.inlineMs} ms)`)
  }
  // A trap while unwinding: the stack did not fit the suspension buffer (Asyncify traps at its end).
  if (run.state === UNWINDING) return moved(`its call stack at a host call is above ${SUSPEND_BYTES} bytes`)
  if (err instanceof RangeError && /call stack/i.test(err.message)) return moved("it overflowed the main thread's stack")
  const memoryBytes = run.memory.buffer.byteLength
  // The memory is the guest's own and at most zeroed for the next: a failure leaves nothing behind.
  recycle(run.memory, memoryLimits)
  if (run.module !== undefined) dropped(run.module, memoryLimits)
  if (err instanceof GuestError) return failed(err.message)
  if (err instanceof WebAssembly.RuntimeError) return failed(`the guest trapped: ${trapReason(err.message, memoryBytes, memoryLimits.maximum)}`)
  if (err instanceof WebAssembly.LinkError || (run.starting && err instanceof WebAssembly.CompileError)) {
    return failed(`the guest could not be instantiated: ${err.message}`)
  }
  return failed(`the guest failed: ${err instanceof Error ? err.message : String(err)}`)
}
