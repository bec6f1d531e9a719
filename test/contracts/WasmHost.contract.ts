/**
 * The WasmHost contract (docs/abi.md), at the service level: `admit`, `runLoop` and `runTool`
 * called directly, with a Host (and ToolServices) built here that records every call it gets and
 * answers canned values — the session runtime is not involved. Every implementation must pass it.
 *
 * - Admission: a module is admitted under its content hash, saying which entries it has; every
 *   ABI rule it breaks is a `ModuleRejected` naming the rule.
 * - Activations: a loop's `{"ok": v}` is v and its `{"error": {code}}` that failure when the code is
 *   Brain's; everything else a guest does wrong (a trap, bad output, its compute budget, memory,
 *   ABI misuse) is `agentloop_failed` for a loop and outcome `error` for a tool — and never harms
 *   the pool: the next activation completes.
 * - Host calls: each op reaches its Host method with the request decoded, and the method's value
 *   or failure reaches the guest; anything else answers `invalid_request` and reaches no method.
 *
 * Real time and real threads (`it.scopedLive`). No test asserts a duration: budget tests spin and
 * assert what failed; tests that must see a guest stopped give it no compute bound at all, so a
 * guest left running would hang the pool rather than pass late.
 */
import * as crypto from "node:crypto"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Either, Exit, Fiber, Option, Queue, type Scope } from "effect"
import { failure, type Failure } from "../../src/domain/Failure.js"
import type { Message, ToolCallRequest } from "../../src/domain/Messages.js"
import type { ModelResult } from "../../src/domain/Model.js"
import { MAX_FAILURE_MESSAGE_BYTES, MAX_JSON_DEPTH } from "../../src/domain/Limits.js"
import { MAX_WASM_TABLE_ENTRIES, MIN_WASM_MODULE_BYTES } from "../../src/layers/wasm/Module.js"
import { TRANSCRIPT_TAIL } from "../../src/domain/TranscriptTail.js"
import type { Event } from "../../src/domain/Events.js"
import { type ActivationInput, AgentloopFailed, type Host, HostCallFailed, type ToolResult } from "../../src/services/Agentloop.js"
import {
  type AdmittedModule,
  ModuleRejected,
  type ToolActivation,
  type ToolRun,
  type ToolServices,
  type WasmHostShape
} from "../../src/services/WasmHost.js"
import { calling, data, echoing, type Entry, guest, padded, returning, wat } from "../support/wat.js"

/** The host's limits, as the contract sets them for each test. */
export interface WasmHostLimits {
  readonly memoryBytes: number
  /** 0 = no bound. */
  readonly computeMs: number
  readonly ioBytes: number
  readonly moduleBytes: number
}

/** A WasmHost with these limits, its pool closed with the scope. */
export type MakeWasmHost = (limits: WasmHostLimits) => Effect.Effect<WasmHostShape, unknown, Scope.Scope>

/** Small limits: 64 pages of memory, 64 KiB of io, 256 KiB modules; a compute budget no well-behaved guest nears. */
const LIMITS: WasmHostLimits = { memoryBytes: 4 * 1024 * 1024, computeMs: 10_000, ioBytes: 64 * 1024, moduleBytes: 256 * 1024 }
const MAX_PAGES = LIMITS.memoryBytes / 65536

/** The compute budget of the tests that spin past it. */
const BUDGET_MS = 500

/** How long a test waits for activations that must complete before it calls the pool stuck. */
const STUCK = Duration.seconds(30)

// ---------------------------------------------------------------------------------------------
// What the guests are given, and what the recording Host answers

const USER: Message = { role: "user", content: "hi" }
const ASSISTANT: Message = { role: "assistant", content: "hello" }
const CALL: ToolCallRequest = { id: "call_1", name: "echo", input: { n: 1 } }
const MODEL_RESULT: ModelResult = { text: "hello", tool_calls: [], stop_reason: "end" }
const TOOL_RESULT: ToolResult = { call_id: "call_1", name: "echo", outcome: "ok", output: { n: 1 }, is_error: false }
const EVENT: Event = { session_id: "ses_0000000000test0000000000", sequence: 4, recorded_at_ms: 1_767_225_600_000, kind: "progress", data: { pct: 50 } }

/** `n` messages, user and assistant in turn, each with its own text. */
const conversation = (n: number): Array<Message> =>
  Array.from({ length: n }, (_, i): Message => ({ role: i % 2 === 0 ? "user" : "assistant", content: `message ${i}` }))

const input = (activation = 4, transcript: ReadonlyArray<Message> = [USER]): ActivationInput => ({
  input: { message: "go" },
  transcript,
  configuration: { agentloop: "wasm", model: { provider: "scripted" }, system: "be brief" },
  events: [EVENT],
  runtime: { session_id: "ses_0000000000test0000000000", turn: 3, activation, now_ms: 1_767_225_600_000, seed: 123_456_789 }
})

const TOOL_ACTIVATION: ToolActivation = {
  input: { n: 1, text: "héllo 😀" },
  call: { session_id: "ses_0000000000test0000000000", sequence: 9, name: "echo", deadline_at_ms: 1_767_225_660_000 }
}

interface Recorded {
  readonly method: string
  readonly args: ReadonlyArray<unknown>
}

type Fn = (...args: Array<any>) => Effect.Effect<any, any>

/** Wraps each method so that every call is recorded (method and arguments) before it runs. */
const recordAll = <S extends Record<string, Fn>>(answers: S, calls: Array<Recorded>): S =>
  Object.fromEntries(
    Object.entries(answers).map(([method, f]) => [method, (...args: Array<unknown>) => Effect.suspend(() => (calls.push({ method, args }), f(...args)))])
  ) as S

/** A Host that records every call and answers canned values; `overrides` replaces some methods. */
const recordingHost = (overrides: Partial<Host> = {}) => {
  const calls: Array<Recorded> = []
  const answers: Host = {
    model: () => Effect.succeed(MODEL_RESULT),
    dispatch: () => Effect.succeed([TOOL_RESULT]),
    emit: () => Effect.succeed(7),
    telemetry: () => Effect.void,
    kvRead: (key) => Effect.succeed(key === "k" ? Option.some({ v: 1 }) : Option.none()),
    kvPut: () => Effect.void,
    kvDelete: () => Effect.void,
    setTranscript: () => Effect.void,
    setTranscriptAtEnd: () => Effect.void,
    events: () => Effect.succeed([EVENT]),
    refusal: () => undefined,
    ...overrides
  }
  // `refusal` is a plain check, not a call: left as it is.
  const { refusal, ...performed } = answers
  return { host: { ...recordAll(performed as unknown as Record<string, Fn>, calls), refusal } as unknown as Host, calls }
}

/** ToolServices that record every call: emit answers sequence 7. */
/** A tool run's output; a run stopped (the host closing) has none, and gives itself, so that what a test expects of an output fails on it. */
const outputOf = (run: ToolRun): unknown => ("output" in run ? run.output : run)

const recordingServices = (overrides: Partial<ToolServices> = {}) => {
  const calls: Array<Recorded> = []
  const answers: ToolServices = { emit: () => Effect.succeed(7), telemetry: () => Effect.void, ...overrides }
  return { services: recordAll(answers as unknown as Record<string, Fn>, calls) as unknown as ToolServices, calls }
}

/** The fields of a Failure a guest can see. */
const seen = (f: Failure) => ({ code: f.code, message: f.message, retryable: f.retryable, ambiguous: f.ambiguous })

// ---------------------------------------------------------------------------------------------
// Guests (WAT, compiled in the test)

/** JSON text of arrays nested `levels` deep: `[[…]]`. */
const nested = (levels: number) => "[".repeat(levels) + "]".repeat(levels)

/** Each op's request, of its shape, nested `depth` levels deep in all. */
const requestsAtDepth = (depth: number): Array<[string, string]> => [
  ["emit", `{"kind":"deep","payload":${nested(depth - 1)}}`],
  ["kv_put", `{"key":"k","value":${nested(depth - 1)}}`],
  ["telemetry", nested(depth)],
  ["model", `{"messages":[{"role":"user","content":"hi"}],"options":${nested(depth - 1)}}`],
  ["dispatch", `{"calls":[{"id":"c","name":"echo","input":${nested(depth - 3)}}]}`],
  ["set_transcript", `{"messages":[{"role":"user","content":[{"type":"x","v":${nested(depth - 5)}}]}]}`]
]

/** Makes the host call `first` and drops its answer, then makes `then` and returns its answer as its output. */
const callingTwice = (first: readonly [string, string], then: readonly [string, string], entry: Entry = "brain_run") => {
  const o1 = data(100, first[0])
  const o2 = data(130, then[0])
  const r2 = data(160, then[1])
  const r1 = data(300, first[1])
  return guest(`${o1.segment} ${o2.segment} ${r2.segment} ${r1.segment}
    (func (export "${entry}") (param i32 i32) (result i64)
      (drop (call $call (i32.const ${o1.ptr}) (i32.const ${o1.len}) (i32.const ${r1.ptr}) (i32.const ${r1.len})))
      (call $call (i32.const ${o2.ptr}) (i32.const ${o2.len}) (i32.const ${r2.ptr}) (i32.const ${r2.len})))`)
}

const spinning = (entry: Entry = "brain_run") => guest(`(func (export "${entry}") (param i32 i32) (result i64) (loop $l (br $l)) (unreachable))`)

/** Tells the host it is running (a telemetry call), then spins for ever. */
const announcedSpin = (entry: Entry = "brain_run") => {
  const op = data(200, "telemetry")
  const req = data(300, '{"spinning":true}')
  return guest(`${op.segment} ${req.segment}
    (func (export "${entry}") (param i32 i32) (result i64)
      (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${req.ptr}) (i32.const ${req.len})))
      (loop $l (br $l)) (unreachable))`)
}

const trapping = (entry: Entry = "brain_run") => guest(`(func (export "${entry}") (param i32 i32) (result i64) (unreachable))`)

/** Recurses without end: the engine's stack runs out (a RangeError, not a Wasm trap). */
const recursing = guest(`(func $deeper (param $n i32) (result i32) (i32.add (call $deeper (i32.add (local.get $n) (i32.const 1))) (i32.const 1)))
  (func (export "brain_run") (param i32 i32) (result i64) (drop (call $deeper (i32.const 0))) (unreachable))`)

const FAIL_IMPORT = `(import "brain" "fail" (func $fail (param i32 i32)))`

/** Gives up with `brain.fail(message)`. */
const giving = (message: string, entry: Entry = "brain_run") => {
  const m = data(100, message)
  return guest(`${m.segment}
    (func (export "${entry}") (param i32 i32) (result i64) (call $fail (i32.const ${m.ptr}) (i32.const ${m.len})) (unreachable))`, { imports: FAIL_IMPORT })
}

/** Gives up with `brain.fail` over `len` bytes of "a" from address 0 (its memory grown to hold them). */
const givingLong = (len: number, entry: Entry = "brain_run") =>
  guest(`(func (export "${entry}") (param i32 i32) (result i64)
      (drop (memory.grow (i32.const ${Math.ceil(len / 65536) + 1})))
      (memory.fill (i32.const 0) (i32.const 97) (i32.const ${len}))
      (call $fail (i32.const 0) (i32.const ${len})) (unreachable))`, { imports: FAIL_IMPORT })

/** Counts activations in a global and in memory: `{"ok":1}` when both read 1, else `{"ok":"again"}`. */
const counting = (() => {
  const one = data(100, '{"ok":1}')
  const again = data(120, '{"ok":"again"}')
  return guest(`${one.segment} ${again.segment}
    (global $count (mut i32) (i32.const 0))
    (func (export "brain_run") (param i32 i32) (result i64)
      (global.set $count (i32.add (global.get $count) (i32.const 1)))
      (i32.store (i32.const 64) (i32.add (i32.load (i32.const 64)) (i32.const 1)))
      (if (result i64) (i32.and (i32.eq (global.get $count) (i32.const 1)) (i32.eq (i32.load (i32.const 64)) (i32.const 1)))
        (then (call $out (i32.const ${one.ptr}) (i32.const ${one.len})))
        (else (call $out (i32.const ${again.ptr}) (i32.const ${again.len})))))`)
})()

/**
 * Grows its memory to `maxPages` (which must work), then by one page more (which must answer -1),
 * and says what happened: `{"ok":"capped"}` when both went as the host's maximum says.
 */
const growing = (maxPages: number, memory?: string) => {
  const capped = data(100, '{"ok":"capped"}')
  const short = data(140, '{"ok":"could not grow to the maximum"}')
  const past = data(200, '{"ok":"grew past the maximum"}')
  return guest(`${capped.segment} ${short.segment} ${past.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (if (i32.lt_s (memory.grow (i32.sub (i32.const ${maxPages}) (memory.size))) (i32.const 0))
        (then (return (call $out (i32.const ${short.ptr}) (i32.const ${short.len})))))
      (if (i32.ge_s (memory.grow (i32.const 1)) (i32.const 0))
        (then (return (call $out (i32.const ${past.ptr}) (i32.const ${past.len})))))
      (call $out (i32.const ${capped.ptr}) (i32.const ${capped.len})))`, memory === undefined ? {} : { memory })
}

/** Allocates more than the memory can hold; its allocator traps when `memory.grow` answers -1. */
const allocatingTooMuch = guest(`(func (export "brain_run") (param i32 i32) (result i64)
  (drop (call $alloc (i32.const ${LIMITS.memoryBytes * 2}))) (i64.const 0))`)

/** Returns a (ptr, len) pair of `len` bytes from address 0, having grown its memory to hold them. */
const returningBytes = (len: number) =>
  guest(`(func (export "brain_run") (param i32 i32) (result i64)
    (drop (memory.grow (i32.const ${Math.ceil(len / 65536) + 1})))
    (call $out (i32.const 0) (i32.const ${len})))`)

/** Makes a host call whose request is `len` bytes from address 0; returns the answer. */
const requestingBytes = (op: string, len: number) => {
  const o = data(200, op)
  return guest(`${o.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (drop (memory.grow (i32.const ${Math.ceil(len / 65536) + 1})))
      (call $call (i32.const ${o.ptr}) (i32.const ${o.len}) (i32.const 0) (i32.const ${len})))`)
}

/** Returns a (ptr, len) pair that runs past its memory. */
/** A guest whose `entry` returns two bytes that are not UTF-8 as its output. */
const notUtf8Output = (entry: Entry) => guest(`(data (i32.const 100) "\\ff\\fe") (func (export "${entry}") (param i32 i32) (result i64) (call $out (i32.const 100) (i32.const 2)))`)

const pastMemory = guest(`(func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const 65000) (i32.const 100000)))`)

/** Returns bytes that are not UTF-8. */
const notUtf8 = guest(`(data (i32.const 100) "\\ff\\fe\\fd")
  (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const 100) (i32.const 3)))`)

/** Its allocator makes a host call (kv_read) before it allocates. */
const allocCalling = (() => {
  const op = data(200, "kv_read")
  const req = data(220, '{"key":"k"}')
  const ok = data(260, '{"ok":"fine"}')
  return guest(`${op.segment} ${req.segment} ${ok.segment}
    (func (export "brain_alloc") (param $n i32) (result i32)
      (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${req.ptr}) (i32.const ${req.len})))
      (call $alloc (local.get $n)))
    (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const ${ok.ptr}) (i32.const ${ok.len})))`, { alloc: false })
})()

const FINE = returning('{"ok":"fine"}')
const FINE_TOOL = returning('{"ok":"fine"}', "brain_tool")

// ---------------------------------------------------------------------------------------------

const compile = (text: string, features: { readonly threads?: boolean; readonly reference_types?: boolean } = {}) => Effect.promise(() => wat(text, features))

const admitted = (host: WasmHostShape, text: string) => Effect.flatMap(compile(text), (bytes) => Effect.orDie(host.admit(bytes)))

/** The admission's refusal; the test fails if the module was admitted. */
const refusal = (host: WasmHostShape, bytes: Uint8Array) =>
  Effect.map(Effect.either(host.admit(bytes)), (r) => {
    if (Either.isRight(r)) return expect.fail("the module was admitted")
    expect(r.left).toBeInstanceOf(ModuleRejected)
    expect(r.left._tag).toBe("ModuleRejected")
    return r.left
  })

/** The activation's failure; the test fails if it succeeded. */
const loopFailure = (run: Effect.Effect<unknown, AgentloopFailed>) =>
  Effect.map(Effect.either(run), (r) => {
    if (Either.isRight(r)) return expect.fail(`the activation succeeded with ${JSON.stringify(r.right)}`)
    expect(r.left).toBeInstanceOf(AgentloopFailed)
    return r.left.failure
  })

/**
 * `workers`: the pool's compute slots. `inline`: activations run on the main thread (Inline.ts)
 * and move to the pool only past their allowance, so one waiting in a host call holds no thread.
 */
export const wasmHostContract = (name: string, options: { readonly workers: number; readonly make: MakeWasmHost; readonly inline?: boolean }) =>
  describe(`WasmHost contract: ${name}`, () => {
    const N = options.workers
    const makeHost = (limits: Partial<WasmHostLimits> = {}) => options.make({ ...LIMITS, ...limits })

    /** Runs `module` as a loop with a fresh recording Host. */
    const runLoop = (host: WasmHostShape, module: AdmittedModule, overrides: Partial<Host> = {}, activation = input()) => {
      const recording = recordingHost(overrides)
      return Effect.map(Effect.either(host.runLoop(module, activation, recording.host)), (result) => ({ result, calls: recording.calls }))
    }

    /** The pool still works: a well-behaved loop completes. */
    const servesNext = (host: WasmHostShape) =>
      Effect.gen(function*() {
        const fine = yield* admitted(host, FINE)
        expect(yield* host.runLoop(fine, input(), recordingHost().host).pipe(Effect.timeout(STUCK))).toBe("fine")
      })

    describe("admission", () => {
      it.scopedLive("a valid module is admitted under the SHA-256 of its bytes: the same bytes give the same hash, other bytes another", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const bytes = yield* compile(returning('{"ok":1}'))
          const first = yield* host.admit(bytes)
          expect(first.hash).toBe(crypto.createHash("sha256").update(bytes).digest("hex"))
          expect(first.bytes).toBe(bytes.length)
          expect((yield* host.admit(bytes.slice())).hash).toBe(first.hash)
          const other = yield* host.admit(yield* compile(returning('{"ok":2}')))
          expect(other.hash).not.toBe(first.hash)
        }))

      it.scopedLive("admission says which entries a module has: brain_run makes it a loop, brain_tool a tool, both make it both", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          expect(yield* admitted(host, returning('{"ok":1}', "brain_run"))).toMatchObject({ loop: true, tool: false })
          expect(yield* admitted(host, returning('{"ok":1}', "brain_tool"))).toMatchObject({ loop: false, tool: true })
          const both = guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))
            (func (export "brain_tool") (param i32 i32) (result i64) (i64.const 0))`)
          expect(yield* admitted(host, both)).toMatchObject({ loop: true, tool: true })
        }))

      it.scopedLive("bytes that are not a WebAssembly module are refused: empty, text, another version's header, a Wasm header with garbage after it, too few bytes to be a module", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const header = [0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]
          const bodies = [
            new Uint8Array(),
            new TextEncoder().encode("hello, world"),
            // A component's header: the magic, then another version.
            new Uint8Array([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0, ...new Array<number>(MIN_WASM_MODULE_BYTES).fill(0)]),
            // Past the first bytes' check: V8's compile refuses it.
            new Uint8Array([...header, ...new Array<number>(MIN_WASM_MODULE_BYTES).fill(0xff)])
          ]
          for (const bytes of bodies) expect((yield* refusal(host, bytes)).reason).toMatch(/not a valid WebAssembly module/)
          const short = new Uint8Array([...header, 1, 2, 3])
          expect((yield* refusal(host, short)).reason).toContain(`the module is 11 bytes, fewer than the ${MIN_WASM_MODULE_BYTES}`)
        }))

      it.scopedLive("a module of exactly the module-size limit is admitted; one byte more is refused, naming BRAIN_MAX_WASM_MODULE_BYTES", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const bytes = yield* compile(FINE)
          let size = LIMITS.moduleBytes - bytes.length - 16
          while (padded(bytes, size).length < LIMITS.moduleBytes) size++
          const atLimit = padded(bytes, size)
          expect(atLimit.length).toBe(LIMITS.moduleBytes)
          expect((yield* host.admit(atLimit)).bytes).toBe(LIMITS.moduleBytes)
          const above = padded(bytes, size + 1)
          expect(above.length).toBe(LIMITS.moduleBytes + 1)
          expect((yield* refusal(host, above)).reason).toMatch(/BRAIN_MAX_WASM_MODULE_BYTES/)
        }))

      it.scopedLive("a shipped module (built with Brain, not uploaded) is not held to the module-size limit, which bounds uploads", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const above = padded(yield* compile(FINE), LIMITS.moduleBytes)
          expect(above.length).toBeGreaterThan(LIMITS.moduleBytes)
          expect((yield* host.admit(above, { shipped: true })).bytes).toBe(above.length)
          expect((yield* refusal(host, above)).reason).toMatch(/BRAIN_MAX_WASM_MODULE_BYTES/)
        }))

      it.scopedLive("a module without the brain_abi_v1 marker is refused; the marker may be a global or a function", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const entry = `(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`
          expect((yield* refusal(host, yield* compile(guest(entry, { marker: false })))).reason).toMatch(/brain_abi_v1/)
          expect(yield* admitted(host, guest(`${entry} (func (export "brain_abi_v1"))`, { marker: false }))).toMatchObject({ loop: true })
          expect(yield* admitted(host, guest(entry))).toMatchObject({ loop: true })
        }))

      it.scopedLive("a module importing anything outside the ABI is refused, naming the import: WASI, another env or brain name, an ABI name of the wrong kind", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const entry = `(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`
          const imports: Array<[string, RegExp]> = [
            [`(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))`, /wasi_snapshot_preview1\.fd_write/],
            [`(import "env" "abort" (func (param i32 i32 i32 i32)))`, /env\.abort/],
            [`(import "brain" "clock" (func (result i64)))`, /brain\.clock/],
            [`(import "brain" "fail" (global i32))`, /brain\.fail \(global\)/],
            [`(import "env" "table" (table 1 funcref))`, /env\.table/]
          ]
          for (const [imported, named] of imports) {
            const reason = (yield* refusal(host, yield* compile(guest(entry, { imports: imported })))).reason
            expect(reason, imported).toMatch(named)
            expect(reason, imported).toMatch(/the ABI allows only env\.memory, brain\.call and brain\.fail/)
          }
          // The ABI's own optional import is fine.
          expect(yield* admitted(host, guest(entry, { imports: FAIL_IMPORT }))).toMatchObject({ loop: true })
        }))

      it.scopedLive("a module that does not import its memory as env.memory is refused", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const own = guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`, { ownMemory: true })
          expect((yield* refusal(host, yield* compile(own))).reason).toMatch(/does not import its memory as env\.memory/)
        }))

      it.scopedLive("a module whose initial memory is above the host's maximum is refused; one at it, or declaring a larger maximum, is admitted", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const entry = `(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`
          const above = yield* compile(guest(entry, { memory: `${MAX_PAGES + 1}` }))
          expect((yield* refusal(host, above)).reason).toMatch(/BRAIN_MAX_WASM_MEMORY_BYTES/)
          expect((yield* admitted(host, guest(entry, { memory: `${MAX_PAGES}` }))).memory).toEqual({ initial: MAX_PAGES, maximum: undefined })
          expect((yield* admitted(host, guest(entry, { memory: "1 65536" }))).memory).toEqual({ initial: 1, maximum: 65536 })
        }))

      it.scopedLive("a shared env.memory is refused: the guest's memory is a plain 32-bit one", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const shared = yield* compile(guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`, { memory: "1 10 shared" }), { threads: true })
          expect((yield* refusal(host, shared)).reason).toMatch(/neither shared nor 64-bit/)
        }))

      it.scopedLive("a module that does not export the function brain_alloc is refused", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const noAlloc = guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`, { alloc: false })
          expect((yield* refusal(host, yield* compile(noAlloc))).reason).toMatch(/brain_alloc/)
        }))

      it.scopedLive("a module exporting neither brain_run nor brain_tool is refused", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          expect((yield* refusal(host, yield* compile(guest(`(func (export "brain_other") (param i32 i32) (result i64) (i64.const 0))`)))).reason)
            .toMatch(/neither brain_run .* nor brain_tool/)
        }))

      it.scopedLive("a module exporting a name in the host's namespace (brain$…, the names of its instrumented twin's exports) is refused, naming it: a global or a function, a loop's or a tool's", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const entry of ["brain_run", "brain_tool"] as const) {
            for (const [name, field] of [
              ["brain$written", `(global (export "brain$written") i32 (i32.const 0))`],
              ["brain$save", `(func (export "brain$save"))`],
              ["brain$restore", `(func (export "brain$restore"))`],
              ["brain$run", `(func (export "brain$run") (param i32 i32 i32 i32 i32) (result i64) (i64.const 0))`],
              ["brain$anything", `(global (export "brain$anything") (mut i32) (i32.const 0))`]
            ] as const) {
              const bytes = yield* compile(guest(`${field} (func (export "${entry}") (param i32 i32) (result i64) (i64.const 0))`))
              expect((yield* refusal(host, bytes)).reason, `${entry} ${name}`).toMatch(new RegExp(`exports ${name.replace("$", "\\$")}: names starting with brain\\$ are reserved for the host`))
            }
          }
        }))

      it.scopedLive(`tables are bounded: each must declare a maximum, and their maxima together at most MAX_WASM_TABLE_ENTRIES (${MAX_WASM_TABLE_ENTRIES}); thirteen tables of 10,000,000 entries are refused, and one at the bound is admitted`, () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const withTables = (tables: string) => compile(guest(`${tables} (func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`), { reference_types: true })
          const thirteen = Array.from({ length: 13 }, (_, i) => `(table $t${i} 10000000 funcref)`).join(" ")
          expect((yield* refusal(host, yield* withTables(thirteen))).reason).toMatch(/table 0 declares no maximum/)
          const bounded = Array.from({ length: 13 }, (_, i) => `(table $t${i} 10000000 10000000 funcref)`).join(" ")
          expect((yield* refusal(host, yield* withTables(bounded))).reason).toMatch(new RegExp(`130000000 entries in all .*above ${MAX_WASM_TABLE_ENTRIES}`))
          expect((yield* refusal(host, yield* withTables("(table 1 1 funcref) (table 1 externref)"))).reason).toMatch(/table 1 declares no maximum/)
          const half = MAX_WASM_TABLE_ENTRIES / 2
          expect((yield* refusal(host, yield* withTables(`(table 1 ${half} funcref) (table 0 ${half + 1} externref)`))).reason).toMatch(/above/)
          const atBound = yield* withTables(`(table 1 ${half} funcref) (table 0 ${half} externref)`)
          expect((yield* host.admit(atBound)).loop).toBe(true)
        }))
    })

    describe("runLoop", () => {
      it.scopedLive("the guest is given the activation's input as JSON, whole", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const activation = input(4, [USER, { role: "assistant", content: "héllo 😀 \u2028" }])
          const { result } = yield* runLoop(host, yield* admitted(host, echoing()), {}, activation)
          expect(result).toEqual(Either.right(JSON.parse(JSON.stringify(activation))))
        }))

      it.scopedLive("a loop exporting brain_transcript_tail is given the transcript from transcript_start on (its last TRANSCRIPT_TAIL messages); one without it, the whole", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const long = conversation(40)
          const activation = input(4, long)
          const tail = yield* runLoop(host, yield* admitted(host, echoing("brain_run", undefined, { tail: true })), {}, activation)
          expect(tail.result).toEqual(Either.right(JSON.parse(JSON.stringify({ ...activation, transcript: long.slice(40 - TRANSCRIPT_TAIL), transcript_start: 40 - TRANSCRIPT_TAIL }))))
          const whole = yield* runLoop(host, yield* admitted(host, echoing()), {}, activation)
          expect(whole.result).toEqual(Either.right(JSON.parse(JSON.stringify(activation))))
          const short = input(4, long.slice(0, 3))
          const all = yield* runLoop(host, yield* admitted(host, echoing("brain_run", undefined, { tail: true })), {}, short)
          expect(all.result).toEqual(Either.right(JSON.parse(JSON.stringify({ ...short, transcript_start: 0 }))))
        }))

      it.scopedLive("the tail reaches back to the first assistant message with a tool call no tool message answers", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const long = conversation(40)
          long[5] = { role: "assistant", content: "", tool_calls: [{ id: "open", name: "echo", input: {} }, { id: "done", name: "echo", input: {} }] }
          long[6] = { role: "tool", tool_call_id: "done", content: "1" }
          const { result } = yield* runLoop(host, yield* admitted(host, echoing("brain_run", undefined, { tail: true })), {}, input(4, long))
          expect(result).toEqual(Either.right(expect.objectContaining({ transcript: JSON.parse(JSON.stringify(long.slice(5))), transcript_start: 5 })))
        }))

      it.scopedLive("a loop exporting brain_transcript_tail_length n is given the last n messages (none for 0), still reaching back to an unanswered tool call", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const long = conversation(40)
          const lasting = (n: number) => echoing("brain_run", undefined, { tail: true, tailLength: `i32 (i32.const ${n})` })
          for (const n of [0, 3, 40, 100]) {
            const { result } = yield* runLoop(host, yield* admitted(host, lasting(n)), {}, input(4, long))
            const start = Math.max(0, 40 - n)
            expect(result, `n = ${n}`).toEqual(Either.right(JSON.parse(JSON.stringify({ ...input(4, long), transcript: long.slice(start), transcript_start: start }))))
          }
          long[30] = { role: "assistant", content: "", tool_calls: [{ id: "open", name: "echo", input: {} }] }
          const open = yield* runLoop(host, yield* admitted(host, lasting(0)), {}, input(4, long))
          expect(open.result).toEqual(Either.right(expect.objectContaining({ transcript: JSON.parse(JSON.stringify(long.slice(30))), transcript_start: 30 })))
        }))

      it.scopedLive("the transcript host call answers the saved messages from `from` up to `to`, and refuses a range outside them (invalid_request)", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const long = conversation(40)
          const range = yield* runLoop(host, yield* admitted(host, calling("transcript", '{"from":2,"to":5}', "brain_run", { tail: true })), {}, input(4, long))
          expect(range.result).toEqual(Either.right(JSON.parse(JSON.stringify(long.slice(2, 5)))))
          for (const bad of ['{"from":3,"to":2}', '{"from":-1,"to":2}', '{"from":0,"to":41}', '{"from":0}', '{"from":0,"to":1,"x":1}']) {
            const refused = yield* runLoop(host, yield* admitted(host, calling("transcript", bad, "brain_run", { tail: true })), {}, input(4, long))
            expect(Either.isLeft(refused.result) && refused.result.left.failure.code, bad).toBe("invalid_request")
          }
        }))

      it.scopedLive('an {"ok": v} output is the activation\'s value v', () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const value = { text: "done", items: [1, "two", null, { three: true }], nested: { deep: [] } }
          const { result } = yield* runLoop(host, yield* admitted(host, returning(JSON.stringify({ ok: value }))))
          expect(result).toEqual(Either.right(value))
          expect((yield* runLoop(host, yield* admitted(host, returning('{"ok":null}')))).result).toEqual(Either.right(null))
        }))

      it.scopedLive('an {"error"} output with one of Brain\'s failure codes fails with that code, its message, retryable and ambiguous', () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const errors = [
            { code: "model_rate_limited", message: "slow down", retryable: true, ambiguous: false },
            { code: "tool_failed", message: "the tool went away", retryable: false, ambiguous: true },
            { code: "cancelled", message: "a cancel", retryable: false, ambiguous: false }
          ]
          for (const error of errors) {
            const f = yield* loopFailure(host.runLoop(yield* admitted(host, returning(JSON.stringify({ error }))), input(), recordingHost().host))
            expect(seen(f), error.code).toEqual(error)
          }
        }))

      it.scopedLive('an {"error"} output with a code Brain does not know fails agentloop_failed with its message', () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const error of [{ code: "no_such_code", message: "mine" }, { message: "mine" }, { code: 42, message: "mine" }]) {
            const f = yield* loopFailure(host.runLoop(yield* admitted(host, returning(JSON.stringify({ error }))), input(), recordingHost().host))
            expect(seen(f), JSON.stringify(error)).toEqual({ code: "agentloop_failed", message: "mine", retryable: false, ambiguous: false })
          }
        }))

      it.scopedLive('output that is not {"ok": …} or {"error": {…}} JSON fails agentloop_failed', () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const output of ["not json", "", "[1,2]", "null", "42", '"ok"', '{"result":1}', '{"error":"a string"}', '{"error":null}', '{"ok":1', '{"ok":1,"error":{"code":"x","message":"m"}}']) {
            const f = yield* loopFailure(host.runLoop(yield* admitted(host, returning(output)), input(), recordingHost().host))
            expect(f.code, output).toBe("agentloop_failed")
          }
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, notUtf8), input(), recordingHost().host))
          expect(f.code).toBe("agentloop_failed")
          expect(f.message).toMatch(/not UTF-8/)
        }))

      it.scopedLive("a trap, or a stack the guest exhausts, fails agentloop_failed, and the pool serves the next activation", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const trap = yield* loopFailure(host.runLoop(yield* admitted(host, trapping()), input(), recordingHost().host))
          expect(trap.code).toBe("agentloop_failed")
          expect(trap.message).toMatch(/trapped: unreachable/)
          yield* servesNext(host)
          const deep = yield* loopFailure(host.runLoop(yield* admitted(host, recursing), input(), recordingHost().host))
          expect(deep.code).toBe("agentloop_failed")
          yield* servesNext(host)
        }))

      it.scopedLive("a host call from inside brain_alloc fails agentloop_failed naming it, reaches no Host method, and the pool serves the next activation", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const { result, calls } = yield* runLoop(host, yield* admitted(host, allocCalling))
          if (Either.isRight(result)) return expect.fail("the activation succeeded")
          expect(result.left.failure.code).toBe("agentloop_failed")
          expect(result.left.failure.message).toMatch(/a host call from brain_alloc/)
          expect(calls).toEqual([])
          yield* servesNext(host)
        }))

      it.scopedLive("a guest that gives up with brain.fail fails agentloop_failed with its message", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, giving("no way forward")), input(), recordingHost().host))
          expect(seen(f)).toEqual({ code: "agentloop_failed", message: "no way forward", retryable: false, ambiguous: false })
          yield* servesNext(host)
        }))

      it.scopedLive("a brain.fail message longer than MAX_FAILURE_MESSAGE_BYTES is cut to it with a marker, for a loop and for a tool, and the pool serves the next", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const len = 2 * 1024 * 1024
          const cut = new RegExp(`^a{${MAX_FAILURE_MESSAGE_BYTES}} … \\[cut: ${len - MAX_FAILURE_MESSAGE_BYTES} more bytes; Brain keeps at most ${MAX_FAILURE_MESSAGE_BYTES} bytes of a failure's message\\]$`)
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, givingLong(len)), input(), recordingHost().host))
          expect(f.code).toBe("agentloop_failed")
          expect(f.message).toMatch(cut)
          const tool = yield* host.runTool(yield* admitted(host, givingLong(len, "brain_tool")), TOOL_ACTIVATION, recordingServices().services)
          expect(tool._tag).toBe("error")
          expect((outputOf(tool) as { message: string }).message).toMatch(cut)
          yield* servesNext(host)
        }))

      it.scopedLive("an output holding a number beyond a double's range (1e400) fails agentloop_failed, and a tool's is its error outcome: refused, never kept as null", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, returning('{"ok":[1,1e400]}')), input(), recordingHost().host))
          expect(f.code).toBe("agentloop_failed")
          expect(f.message).toMatch(/beyond the range of a double/)
          const tool = yield* host.runTool(yield* admitted(host, returning('{"ok":{"x":1e400}}', "brain_tool")), TOOL_ACTIVATION, recordingServices().services)
          expect(tool).toEqual({ _tag: "error", output: { message: expect.stringMatching(/beyond the range of a double/) } })
          yield* servesNext(host)
        }))

      it.scopedLive("an output pair that runs past the guest's memory is ABI misuse: agentloop_failed", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, pastMemory), input(), recordingHost().host))
          expect(f.code).toBe("agentloop_failed")
          expect(f.message).toMatch(/runs past the guest's memory/)
          yield* servesNext(host)
        }))

      it.scopedLive("a guest that runs past its compute budget fails agentloop_failed, and the next activation on the same pool completes", () =>
        Effect.gen(function*() {
          const host = yield* makeHost({ computeMs: BUDGET_MS })
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, spinning()), input(), recordingHost().host))
          expect(f.code).toBe("agentloop_failed")
          expect(f.message).toMatch(/compute budget/)
          yield* servesNext(host)
        }))

      it.scopedLive("time spent in host calls does not count against the compute budget: a Host that answers after twice the budget still lets the guest finish", () =>
        Effect.gen(function*() {
          const host = yield* makeHost({ computeMs: 1_000 })
          // A thread already started: its start-up is not the point here.
          yield* servesNext(host)
          const slow = { kvRead: () => Effect.as(Effect.sleep(Duration.millis(2_000)), Option.some("late")) }
          const { result, calls } = yield* runLoop(host, yield* admitted(host, calling("kv_read", '{"key":"k"}')), slow)
          expect(result).toEqual(Either.right({ found: true, value: "late" }))
          expect(calls).toEqual([{ method: "kvRead", args: ["k"] }])
        }))

      it.scopedLive("memory grows up to the host's maximum and no further: memory.grow answers -1 past it, even when the module declares a larger maximum", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          expect((yield* runLoop(host, yield* admitted(host, growing(MAX_PAGES)))).result).toEqual(Either.right("capped"))
          expect((yield* runLoop(host, yield* admitted(host, growing(MAX_PAGES, "1 65536")))).result).toEqual(Either.right("capped"))
          yield* servesNext(host)
        }))

      it.scopedLive("a guest whose allocation finds no more memory and traps fails agentloop_failed, its message giving the memory's size and maximum, and the pool serves the next activation", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, allocatingTooMuch), input(), recordingHost().host))
          expect(f.code).toBe("agentloop_failed")
          expect(f.message).toMatch(/trapped/)
          // Exactly, in pages and bytes: a rounded figure cannot tell 2 pages from 2.5.
          const sizes = /its memory at (\d+) pages \((\d+) bytes\) of its 64-page \(4194304-byte\) maximum: the lower of the module's own declared maximum and BRAIN_MAX_WASM_MEMORY_BYTES/.exec(f.message)
          expect(sizes, f.message).not.toBeNull()
          expect(Number(sizes![1]) * 65536).toBe(Number(sizes![2]))
          yield* servesNext(host)
        }))

      it.scopedLive("an output that is not UTF-8 fails agentloop_failed saying it is the output, and a tool's is its error outcome", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, notUtf8Output("brain_run")), input(), recordingHost().host))
          expect(f.code).toBe("agentloop_failed")
          expect(f.message).toBe("the output brain_run returned is not UTF-8")
          const tool = yield* host.runTool(yield* admitted(host, notUtf8Output("brain_tool")), TOOL_ACTIVATION, recordingServices().services)
          expect(tool).toEqual({ _tag: "error", output: { message: "the output brain_tool returned is not UTF-8" } })
          yield* servesNext(host)
        }))

      it.scopedLive("an input above the io limit is refused before the guest runs: agentloop_failed, and no host call is made", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const big = input(4, [{ role: "user", content: "x".repeat(LIMITS.ioBytes) }])
          const { result, calls } = yield* runLoop(host, yield* admitted(host, calling("kv_read", '{"key":"k"}')), {}, big)
          expect(Either.isLeft(result) && seen(result.left.failure)).toMatchObject({ code: "agentloop_failed", message: expect.stringMatching(/BRAIN_MAX_WASM_IO_BYTES/) })
          expect(calls).toEqual([])
          yield* servesNext(host)
        }))

      it.scopedLive("an output above the io limit fails agentloop_failed", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const f = yield* loopFailure(host.runLoop(yield* admitted(host, returningBytes(LIMITS.ioBytes + 1)), input(), recordingHost().host))
          expect(f.code).toBe("agentloop_failed")
          expect(f.message).toMatch(/output is above BRAIN_MAX_WASM_IO_BYTES/)
          yield* servesNext(host)
        }))

      it.scopedLive("a host request above the io limit answers invalid_request and reaches no Host method", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const { result, calls } = yield* runLoop(host, yield* admitted(host, requestingBytes("kv_put", LIMITS.ioBytes + 1)))
          expect(Either.isLeft(result) && seen(result.left.failure)).toMatchObject({ code: "invalid_request", message: expect.stringMatching(/BRAIN_MAX_WASM_IO_BYTES/) })
          expect(calls).toEqual([])
        }))

      it.scopedLive("each host call reaches the Host method for its op with the request decoded, and the method's value reaches the guest as {\"ok\": value}", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const routes: Array<{ op: string; request: unknown; method: keyof Host; args: Array<unknown>; answer: unknown }> = [
            {
              op: "model",
              request: { messages: [USER], system: "be brief", options: { temperature: 0 } },
              method: "model",
              args: [{ messages: [USER], system: "be brief", options: { temperature: 0 } }, undefined],
              answer: MODEL_RESULT
            },
            // A save riding on the call (docs/abi.md, "A save that rides on a call") reaches the method with it.
            {
              op: "model",
              request: { transcript: { messages: [USER, ASSISTANT] }, context: { keep: 2, append: [USER] } },
              method: "model",
              args: [{ messages: [USER, ASSISTANT, USER] }, [USER, ASSISTANT]],
              answer: MODEL_RESULT
            },
            { op: "dispatch", request: { calls: [CALL] }, method: "dispatch", args: [[CALL], undefined], answer: [TOOL_RESULT] },
            { op: "dispatch", request: { calls: [CALL], transcript: { messages: [USER] } }, method: "dispatch", args: [[CALL], [USER]], answer: [TOOL_RESULT] },
            { op: "emit", request: { kind: "progress", payload: { pct: 50 } }, method: "emit", args: ["progress", { pct: 50 }], answer: { sequence: 7 } },
            { op: "telemetry", request: { step: 1, note: "héllo" }, method: "telemetry", args: [{ step: 1, note: "héllo" }], answer: null },
            { op: "kv_read", request: { key: "k" }, method: "kvRead", args: ["k"], answer: { found: true, value: { v: 1 } } },
            { op: "kv_read", request: { key: "absent" }, method: "kvRead", args: ["absent"], answer: { found: false } },
            { op: "kv_put", request: { key: "k", value: [1, { two: 2 }] }, method: "kvPut", args: ["k", [1, { two: 2 }]], answer: null },
            { op: "kv_delete", request: { key: "k" }, method: "kvDelete", args: ["k"], answer: null },
            { op: "set_transcript", request: { messages: [USER, { role: "assistant", content: "hello" }] }, method: "setTranscript", args: [[USER, { role: "assistant", content: "hello" }]], answer: null },
            { op: "events", request: { after: 3, limit: 10 }, method: "events", args: [{ after: 3, limit: 10 }], answer: [EVENT] }
          ]
          for (const route of routes) {
            const label = `${route.op} ${JSON.stringify(route.request)}`
            const { result, calls } = yield* runLoop(host, yield* admitted(host, calling(route.op, JSON.stringify(route.request))))
            expect(calls, label).toEqual([{ method: route.method, args: route.args }])
            expect(result, label).toEqual(Either.right(route.answer))
          }
        }))

      it.scopedLive("a Host method's failure reaches the guest as {\"error\": {code, message, retryable, ambiguous}}", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const failures = [
            ["kv_put", '{"key":"k","value":1}', failure("journal_write_failed", "the disk is full", { retryable: true })],
            ["emit", '{"kind":"progress"}', failure("emitted_bytes_limit", "too much", { ambiguous: true })],
            ["model", '{"messages":[]}', failure("model_rate_limited", "slow down", { retryable: true, ambiguous: true })]
          ] as const
          for (const [op, request, f] of failures) {
            const failing = Effect.fail(new HostCallFailed({ failure: f }))
            const { result, calls } = yield* runLoop(host, yield* admitted(host, calling(op, request)), { kvPut: () => failing, emit: () => failing, model: () => failing })
            expect(calls.length, op).toBe(1)
            // The guest returns the answer as its output, so the activation fails with what the guest saw.
            expect(Either.isLeft(result) && seen(result.left.failure), op).toEqual(seen(f))
          }
        }))

      it.scopedLive(`a request nested deeper than MAX_JSON_DEPTH (${MAX_JSON_DEPTH}) answers invalid_request before it is parsed and reaches no Host method, for every op`, () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const [op, request] of requestsAtDepth(MAX_JSON_DEPTH + 1)) {
            const { result, calls } = yield* runLoop(host, yield* admitted(host, calling(op, request)))
            expect(Either.isLeft(result) && seen(result.left.failure), op).toMatchObject({ code: "invalid_request", message: expect.stringMatching(/nests deeper than 64 levels/) })
            expect(calls, op).toEqual([])
          }
        }))

      it.scopedLive(`a request nested exactly MAX_JSON_DEPTH (${MAX_JSON_DEPTH}) deep reaches its Host method`, () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const [op, request] of requestsAtDepth(MAX_JSON_DEPTH)) {
            const { calls } = yield* runLoop(host, yield* admitted(host, calling(op, request)))
            expect(calls.map((c) => c.method), op).toHaveLength(1)
          }
        }))

      it.scopedLive("an emit whose payload nests 10,000 deep is answered invalid_request, not a crash: the guest goes on and its next call is performed", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const deep = `{"kind":"deep","payload":${nested(10_000)}}`
          const { result, calls } = yield* runLoop(host, yield* admitted(host, callingTwice(["emit", deep], ["kv_read", '{"key":"k"}'])))
          expect(result).toEqual(Either.right({ found: true, value: { v: 1 } }))
          expect(calls).toEqual([{ method: "kvRead", args: ["k"] }])
        }))

      it.scopedLive(`a loop's output nested deeper than MAX_JSON_DEPTH (${MAX_JSON_DEPTH}) fails agentloop_failed saying so; one at the bound is its value`, () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const levels of [MAX_JSON_DEPTH, 10_000]) {
            const f = yield* loopFailure(host.runLoop(yield* admitted(host, returning(`{"ok":${nested(levels)}}`)), input(), recordingHost().host))
            expect(seen(f), `ok nested ${levels}`).toMatchObject({ code: "agentloop_failed", message: expect.stringMatching(/nests deeper than 64 levels/) })
          }
          const { result } = yield* runLoop(host, yield* admitted(host, returning(`{"ok":${nested(MAX_JSON_DEPTH - 1)}}`)))
          expect(result).toEqual(Either.right(JSON.parse(nested(MAX_JSON_DEPTH - 1))))
          yield* servesNext(host)
        }))

      it.scopedLive("an op the ABI does not name answers invalid_request, and no Host method is called", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const op of ["teleport", "", "kvRead", "__next"]) {
            const { result, calls } = yield* runLoop(host, yield* admitted(host, calling(op, '{"key":"k"}')))
            expect(Either.isLeft(result) && result.left.failure.code, op).toBe("invalid_request")
            expect(calls, op).toEqual([])
          }
        }))

      it.scopedLive("a request that is not JSON answers invalid_request, and no Host method is called", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const op of ["kv_put", "emit", "telemetry", "model"]) {
            const { result, calls } = yield* runLoop(host, yield* admitted(host, calling(op, "{not json")))
            expect(Either.isLeft(result) && seen(result.left.failure), op).toMatchObject({ code: "invalid_request", message: expect.stringMatching(/not JSON/) })
            expect(calls, op).toEqual([])
          }
        }))

      it.scopedLive("a request not of its op's shape (a field missing, of the wrong type, or unknown) answers invalid_request, and no Host method is called", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const requests: Array<[string, unknown]> = [
            ["kv_read", {}],
            ["kv_read", { key: 1 }],
            ["kv_read", { key: "k", extra: true }],
            ["emit", { payload: {} }],
            ["events", { after: "3", limit: 10 }],
            ["events", { after: 1 }],
            ["dispatch", { calls: [{ id: "c", input: {} }] }],
            ["set_transcript", { messages: [{ role: "narrator", content: "x" }] }],
            ["model", { messages: "hi" }]
          ]
          for (const [op, request] of requests) {
            const label = `${op} ${JSON.stringify(request)}`
            const { result, calls } = yield* runLoop(host, yield* admitted(host, calling(op, JSON.stringify(request))))
            expect(Either.isLeft(result) && result.left.failure.code, label).toBe("invalid_request")
            expect(calls, label).toEqual([])
          }
        }))

      it.scopedLive("every activation gets a fresh instance and a fresh memory: a counter in a global and in memory reads 1 every time", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const module = yield* admitted(host, counting)
          for (let i = 0; i < 2 * N + 3; i++) expect((yield* runLoop(host, module)).result, `activation ${i}`).toEqual(Either.right(1))
        }))

      it.scopedLive("interrupting runLoop stops its guest: with no compute bound, every worker still serves the next activations", () =>
        Effect.gen(function*() {
          const host = yield* makeHost({ computeMs: 0 })
          const module = yield* admitted(host, announcedSpin())
          const running = yield* Queue.unbounded<void>()
          const h = recordingHost({ telemetry: () => Effect.asVoid(Queue.offer(running, undefined)) }).host
          const fibers = yield* Effect.forEach(Array.from({ length: N }), () => Effect.forkScoped(host.runLoop(module, input(), h)))
          yield* Queue.takeN(running, N).pipe(Effect.timeout(STUCK))
          yield* Fiber.interruptAll(fibers)
          const fine = yield* admitted(host, FINE)
          const next = yield* Effect.forEach(Array.from({ length: N }), () => host.runLoop(fine, input(), recordingHost().host), { concurrency: "unbounded" })
            .pipe(Effect.timeout(STUCK))
          expect(next).toEqual(Array.from({ length: N }, () => "fine"))
        }))
    })

    describe("runTool", () => {
      const runTool = (host: WasmHostShape, module: AdmittedModule, overrides: Partial<ToolServices> = {}) => {
        const recording = recordingServices(overrides)
        return Effect.map(host.runTool(module, TOOL_ACTIVATION, recording.services), (run): { run: ToolRun; calls: Array<Recorded> } => ({ run, calls: recording.calls }))
      }

      it.scopedLive('a tool\'s {"ok": v} is outcome ok with output v; the tool is given {input, call} as JSON', () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const { run } = yield* runTool(host, yield* admitted(host, echoing("brain_tool")))
          expect(run).toEqual({ _tag: "ok", output: TOOL_ACTIVATION })
        }))

      it.scopedLive('a tool\'s {"error": e} is outcome error with e as its output', () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const error = { message: "nope", code: "whatever_the_tool_says", details: [1] }
          const { run } = yield* runTool(host, yield* admitted(host, returning(JSON.stringify({ error }), "brain_tool")))
          expect(run).toEqual({ _tag: "error", output: error })
        }))

      it.scopedLive("a tool that traps, gives up with brain.fail or answers output that is not the ABI's JSON ends with outcome error saying why, and the pool serves the next call", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const cases: Array<[string, string, RegExp]> = [
            ["trap", trapping("brain_tool"), /trapped: unreachable/],
            ["brain.fail", giving("the tool gives up", "brain_tool"), /the tool gives up/],
            ["bad output", returning("not json", "brain_tool"), /not \{"ok"/]
          ]
          const fine = yield* admitted(host, FINE_TOOL)
          for (const [name, text, why] of cases) {
            const { run } = yield* runTool(host, yield* admitted(host, text))
            expect(run._tag, name).toBe("error")
            expect((outputOf(run) as { message: string }).message, name).toMatch(why)
            expect((yield* runTool(host, fine)).run, `a call after ${name}`).toEqual({ _tag: "ok", output: "fine" })
          }
        }))

      it.scopedLive("a tool that runs past its compute budget ends with outcome error, and the next call on the same pool completes", () =>
        Effect.gen(function*() {
          const host = yield* makeHost({ computeMs: BUDGET_MS })
          const { run } = yield* runTool(host, yield* admitted(host, spinning("brain_tool")))
          expect(run._tag).toBe("error")
          expect((outputOf(run) as { message: string }).message).toMatch(/compute budget/)
          expect((yield* runTool(host, yield* admitted(host, FINE_TOOL))).run).toEqual({ _tag: "ok", output: "fine" })
        }))

      it.scopedLive(`a tool's output nested deeper than MAX_JSON_DEPTH (${MAX_JSON_DEPTH}) is outcome error saying so; one at the bound is outcome ok`, () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const levels of [MAX_JSON_DEPTH, 10_000]) {
            const { run } = yield* runTool(host, yield* admitted(host, returning(`{"ok":${nested(levels)}}`, "brain_tool")))
            expect(run._tag, `ok nested ${levels}`).toBe("error")
            expect((outputOf(run) as { message: string }).message, `ok nested ${levels}`).toMatch(/nests deeper than 64 levels/)
          }
          const { run } = yield* runTool(host, yield* admitted(host, returning(`{"ok":${nested(MAX_JSON_DEPTH - 1)}}`, "brain_tool")))
          expect(run).toEqual({ _tag: "ok", output: JSON.parse(nested(MAX_JSON_DEPTH - 1)) })
        }))

      it.scopedLive(`a tool's emit nested deeper than MAX_JSON_DEPTH (${MAX_JSON_DEPTH}) answers invalid_request and reaches no service; the tool goes on`, () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          for (const levels of [MAX_JSON_DEPTH + 1, 10_000]) {
            const deep = `{"kind":"deep","payload":${nested(levels - 1)}}`
            const { run, calls } = yield* runTool(host, yield* admitted(host, callingTwice(["emit", deep], ["emit", '{"kind":"fine"}'], "brain_tool")))
            expect(run, `nested ${levels}`).toEqual({ _tag: "ok", output: { sequence: 7 } })
            expect(calls, `nested ${levels}`).toEqual([{ method: "emit", args: ["fine", {}] }])
          }
        }))

      it.scopedLive("a tool's emit and telemetry reach its services with the request decoded, and their answers reach the tool", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const emitted = yield* runTool(host, yield* admitted(host, calling("emit", '{"kind":"progress","payload":{"pct":50}}', "brain_tool")))
          expect(emitted.calls).toEqual([{ method: "emit", args: ["progress", { pct: 50 }] }])
          expect(emitted.run).toEqual({ _tag: "ok", output: { sequence: 7 } })
          const reported = yield* runTool(host, yield* admitted(host, calling("telemetry", '{"step":1}', "brain_tool")))
          expect(reported.calls).toEqual([{ method: "telemetry", args: [{ step: 1 }] }])
          expect(reported.run).toEqual({ _tag: "ok", output: null })
        }))

      it.scopedLive("a failed emit reaches the tool as {\"error\": {code, message, retryable, ambiguous}}", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const f = failure("emitted_bytes_limit", "too much", { ambiguous: true })
          const { run } = yield* runTool(host, yield* admitted(host, calling("emit", '{"kind":"progress"}', "brain_tool")), { emit: () => Effect.fail({ failure: f }) })
          expect(run).toEqual({ _tag: "error", output: seen(f) })
        }))

      it.scopedLive("a tool may call only emit and telemetry: every other op, even one a loop may use, answers invalid_request and reaches no service", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const requests: Array<[string, unknown]> = [
            ["model", { messages: [USER] }],
            ["dispatch", { calls: [CALL] }],
            ["kv_read", { key: "k" }],
            ["kv_put", { key: "k", value: 1 }],
            ["kv_delete", { key: "k" }],
            ["set_transcript", { messages: [USER] }],
            ["events", { after: 0, limit: 10 }],
            ["teleport", {}]
          ]
          for (const [op, request] of requests) {
            const { run, calls } = yield* runTool(host, yield* admitted(host, calling(op, JSON.stringify(request), "brain_tool")))
            expect(run._tag, op).toBe("error")
            expect((outputOf(run) as { code: string }).code, op).toBe("invalid_request")
            expect(calls, op).toEqual([])
          }
          const { run, calls } = yield* runTool(host, yield* admitted(host, calling("emit", "{not json", "brain_tool")))
          expect((outputOf(run) as { code: string }).code).toBe("invalid_request")
          expect(calls).toEqual([])
        }))

      it.scopedLive("interrupting runTool stops its guest: with no compute bound, every worker still serves the next activations", () =>
        Effect.gen(function*() {
          const host = yield* makeHost({ computeMs: 0 })
          const module = yield* admitted(host, announcedSpin("brain_tool"))
          const running = yield* Queue.unbounded<void>()
          const { services } = recordingServices({ telemetry: () => Effect.asVoid(Queue.offer(running, undefined)) })
          const fibers = yield* Effect.forEach(Array.from({ length: N }), () => Effect.forkScoped(host.runTool(module, TOOL_ACTIVATION, services)))
          yield* Queue.takeN(running, N).pipe(Effect.timeout(STUCK))
          yield* Fiber.interruptAll(fibers)
          for (const fiber of fibers) expect((yield* Fiber.await(fiber))._tag).toBe("Failure")
          const fine = yield* admitted(host, FINE_TOOL)
          const next = yield* Effect.forEach(Array.from({ length: N }), () => host.runTool(fine, TOOL_ACTIVATION, recordingServices().services), { concurrency: "unbounded" })
            .pipe(Effect.timeout(STUCK))
          expect(next).toEqual(Array.from({ length: N }, () => ({ _tag: "ok", output: "fine" })))
        }))

      it.scopedLive(
        options.inline === true
          ? "tryTool of a tool that makes no host call runs it to its end now and answers what runTool answers (ok, error, trap, bad output), as an Exit"
          : "tryTool runs nothing on a host whose guests all run on its workers: it answers undefined, and runTool runs the call",
        () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const modules = [echoing("brain_tool"), returning('{"error":{"message":"nope"}}', "brain_tool"), trapping("brain_tool"), returning("not json", "brain_tool")]
          for (const text of modules) {
            const module = yield* admitted(host, text)
            const ran = yield* runTool(host, module)
            const tried = host.tryTool?.(module, TOOL_ACTIVATION, recordingServices().services)
            if (options.inline !== true) {
              expect(tried).toBeUndefined()
              continue
            }
            expect(tried !== undefined && Exit.isExit(tried)).toBe(true)
            expect(yield* tried!).toEqual(ran.run)
          }
        })
      )

      it.scopedLive("tryTool of a tool that calls a service answers undefined having called none; runTool then runs the same call, which calls it once and gets its answer", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const module = yield* admitted(host, calling("emit", '{"kind":"progress","payload":{"pct":50}}', "brain_tool"))
          const recording = recordingServices()
          expect(host.tryTool?.(module, TOOL_ACTIVATION, recording.services)).toBeUndefined()
          expect(recording.calls).toEqual([])
          const run = yield* host.runTool(module, TOOL_ACTIVATION, recording.services)
          expect(run).toEqual({ _tag: "ok", output: { sequence: 7 } })
          expect(recording.calls).toEqual([{ method: "emit", args: ["progress", { pct: 50 }] }])
        }))
    })

    describe("concurrency", () => {
      /** A Host whose kv_read waits at a gate, counting the calls in progress. */
      const gatedHost = (gate: Deferred.Deferred<void>, arrived: Queue.Queue<void>) => {
        const state = { inFlight: 0, most: 0 }
        const { host } = recordingHost({
          kvRead: () =>
            Effect.sync(() => {
              state.inFlight++
              state.most = Math.max(state.most, state.inFlight)
            }).pipe(
              Effect.zipRight(Queue.offer(arrived, undefined)),
              Effect.zipRight(Deferred.await(gate)),
              Effect.ensuring(Effect.sync(() => void state.inFlight--)),
              Effect.as(Option.some("opened"))
            )
        })
        return { host, state }
      }

      // Every one of them reaches its host call: on the main thread a waiting guest holds no thread,
      // and on a worker it holds its thread but gives its compute slot to the next guest.
      const together = N + 2
      it.scopedLive(
        options.inline === true
          ? `${N + 2} activations started together all complete, each with its own answer, and all ${N + 2} wait in their host calls at once: a waiting guest on the main thread holds no thread`
          : `with ${N} worker(s), ${N + 2} activations started together all complete, each with its own answer, and all ${N + 2} wait in their host calls at once: a waiting guest holds its thread but no compute slot`,
        () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const module = yield* admitted(host, echoing("brain_run", { op: "kv_read", request: '{"key":"k"}' }))
          const gate = yield* Deferred.make<void>()
          const arrived = yield* Queue.unbounded<void>()
          const { host: h, state } = gatedHost(gate, arrived)
          const all = yield* Effect.forkScoped(
            Effect.forEach(Array.from({ length: N + 2 }, (_, i) => i), (i) => host.runLoop(module, input(100 + i), h), { concurrency: "unbounded" })
          )
          yield* Queue.takeN(arrived, together).pipe(Effect.timeout(STUCK))
          expect(state.inFlight).toBe(together)
          yield* Deferred.succeed(gate, undefined)
          const results = yield* Fiber.join(all).pipe(Effect.timeout(STUCK))
          expect(results.map((r) => (r as ActivationInput).runtime.activation)).toEqual(Array.from({ length: N + 2 }, (_, i) => 100 + i))
          expect(state.most).toBe(together)
        })
      )

      it.scopedLive("an activation interrupted while it waits for a thread gives up its place: every later activation still completes", () =>
        Effect.gen(function*() {
          const host = yield* makeHost()
          const module = yield* admitted(host, echoing("brain_run", { op: "kv_read", request: '{"key":"k"}' }))
          const gate = yield* Deferred.make<void>()
          const arrived = yield* Queue.unbounded<void>()
          const { host: h } = gatedHost(gate, arrived)
          const busy = yield* Effect.forkScoped(Effect.forEach(Array.from({ length: N }), () => host.runLoop(module, input(), h), { concurrency: "unbounded" }))
          yield* Queue.takeN(arrived, N).pipe(Effect.timeout(STUCK))
          const waiting = yield* Effect.forkScoped(host.runLoop(module, input(), h))
          yield* Effect.sleep(Duration.millis(50))
          yield* Fiber.interrupt(waiting)
          yield* Deferred.succeed(gate, undefined)
          expect((yield* Fiber.join(busy).pipe(Effect.timeout(STUCK))).length).toBe(N)
          const later = yield* Effect.forEach(Array.from({ length: N + 1 }), () => host.runLoop(module, input(), h), { concurrency: "unbounded" }).pipe(Effect.timeout(STUCK))
          expect(later.length).toBe(N + 1)
        }))
    })
  })
