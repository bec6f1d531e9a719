/**
 * Activations on the main thread (Inline.ts, Instrument.ts, InlineModules.ts): what moves an
 * activation to a worker thread, that a moved activation's host calls are performed once, that the
 * instrumented official loop does exactly what the plain one does, and the budget on the main
 * thread. The WasmHost contract suite runs on this host too (test/contracts/WasmHost.test.ts).
 */
import * as fs from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { Effect, Either, Exit, Option } from "effect"
import { jsonBytes } from "../../../src/layers/wasm/Activation.js"
import { instanceStats } from "../../../src/layers/wasm/Spares.js"
import { admitModule } from "../../../src/layers/wasm/Module.js"
import { utf8Text } from "../../../src/layers/wasm/Inline.js"
import { packPair, pairOf } from "../../../src/layers/wasm/Pairs.js"
import { InlineModules, MAX_TWIN_MODULE_BYTES, MOVED_SESSIONS, twinOf } from "../../../src/layers/wasm/InlineModules.js"
import { Pool } from "../../../src/layers/wasm/Pool.js"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import type { ActivationInput, Host } from "../../../src/services/Agentloop.js"
import { activationInput, admit, hostWith } from "../../support/wasmHost.js"
import { calling, data, echoing, guest, wat } from "../../support/wat.js"

const LIMITS = { memoryBytes: 4 * 1024 * 1024, computeMs: 30_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }

const inlineHost = (inlineMs: number, limits: Partial<typeof LIMITS> = {}) =>
  WasmHostWorkers.make({ workers: 1, inlineMs, inlineAtAdmission: true, ...LIMITS, ...limits })

/** A Host that counts its kv calls: kv_put succeeds, kv_read finds 1. */
const countingHost = () => {
  const calls: Array<string> = []
  const host = hostWith({
    kvPut: (key) => Effect.sync(() => void calls.push(`put ${key}`)),
    kvRead: (key) => Effect.sync(() => (calls.push(`read ${key}`), Option.some(1)))
  })
  return { host, calls }
}

const KV_PUT = data(200, "kv_put")
const PUT_REQUEST = data(220, '{"key":"k","value":1}')
const KV_READ = data(260, "kv_read")
const READ_REQUEST = data(280, '{"key":"k"}')
const SEGMENTS = `${KV_PUT.segment} ${PUT_REQUEST.segment} ${KV_READ.segment} ${READ_REQUEST.segment}`
const putOf = (request: { ptr: number; len: number }) =>
  `(drop (call $call (i32.const ${KV_PUT.ptr}) (i32.const ${KV_PUT.len}) (i32.const ${request.ptr}) (i32.const ${request.len})))`
const put = putOf(PUT_REQUEST)
/** A kv_put of a 20,000-character value, placed above what the tests' allocator reaches. */
const LONG_PUT_REQUEST = data(32_768, `{"key":"k","value":"${"x".repeat(20_000)}"}`)
const read = `(call $call (i32.const ${KV_READ.ptr}) (i32.const ${KV_READ.len}) (i32.const ${READ_REQUEST.ptr}) (i32.const ${READ_REQUEST.len}))`

/** Puts k, counts down from `n` (compute far past a few milliseconds), then reads k and returns the answer. */
const putSpinRead = (n: number, long = false) =>
  guest(`${SEGMENTS} ${long ? LONG_PUT_REQUEST.segment : ""}
    (func (export "brain_run") (param i32 i32) (result i64) (local $i i32)
      ${long ? putOf(LONG_PUT_REQUEST) : put}
      (local.set $i (i32.const ${n}))
      (loop $l (br_if $l (i32.ne (local.tee $i (i32.sub (local.get $i) (i32.const 1))) (i32.const 0))))
      ${read})`)

/** Recurses `depth` calls deep, then reads k at the bottom: a suspended stack far above the suspension buffer. */
const deepRead = (depth: number) =>
  guest(`${SEGMENTS}
    (func $down (param $n i32) (param $a i64) (param $b i64) (param $c i64) (result i64)
      (if (result i64) (i32.eqz (local.get $n))
        (then ${read})
        (else (i64.add (call $down (i32.sub (local.get $n) (i32.const 1)) (local.get $a) (local.get $b) (local.get $c)) (i64.const 0)))))
    (func (export "brain_run") (param i32 i32) (result i64)
      (call $down (i32.const ${depth}) (i64.const 1) (i64.const 2) (i64.const 3)))`)

/**
 * Reads k `deepRead`'s way when its message starts with "d" (2,000 calls deep: a stack that moves it
 * off the main thread at the call, whatever the machine's speed), else at once.
 */
const deepWhenAsked = guest(`${SEGMENTS}
    (func $down (param $n i32) (param $a i64) (param $b i64) (param $c i64) (result i64)
      (if (result i64) (i32.eqz (local.get $n))
        (then ${read})
        (else (i64.add (call $down (i32.sub (local.get $n) (i32.const 1)) (local.get $a) (local.get $b) (local.get $c)) (i64.const 0)))))
    (func (export "brain_run") (param i32 i32) (result i64)
      ;; The message's first character: {"input":{"message":" is 21 bytes.
      (call $down
        (select (i32.const 2000) (i32.const 0) (i32.eq (i32.load8_u (i32.add (local.get 0) (i32.const 21))) (i32.const 100)))
        (i64.const 1) (i64.const 2) (i64.const 3)))`)

const EMIT = data(200, "emit")
const EMIT_REQUEST = data(220, '{"kind":"progress","payload":{}}')
const OK_ONE = data(300, '{"ok":1}')

/**
 * A tool that answers `{"ok":1}` at once, unless its input is a string starting with "d": then it
 * emits 2,000 calls deep first (a stack that moves its try off the main thread at the call).
 */
const deepToolWhenAsked = guest(`${EMIT.segment} ${EMIT_REQUEST.segment} ${OK_ONE.segment}
    (func $down (param $n i32) (param $a i64) (param $b i64) (param $c i64) (result i64)
      (if (result i64) (i32.eqz (local.get $n))
        (then
          (drop (call $call (i32.const ${EMIT.ptr}) (i32.const ${EMIT.len}) (i32.const ${EMIT_REQUEST.ptr}) (i32.const ${EMIT_REQUEST.len})))
          (call $out (i32.const ${OK_ONE.ptr}) (i32.const ${OK_ONE.len})))
        (else (i64.add (call $down (i32.sub (local.get $n) (i32.const 1)) (local.get $a) (local.get $b) (local.get $c)) (i64.const 0)))))
    (func (export "brain_tool") (param i32 i32) (result i64)
      ;; The input's first character: {"input":" is 10 bytes.
      (if (result i64) (i32.eq (i32.load8_u (i32.add (local.get 0) (i32.const 10))) (i32.const 100))
        (then (call $down (i32.const 2000) (i64.const 1) (i64.const 2) (i64.const 3)))
        (else (call $out (i32.const ${OK_ONE.ptr}) (i32.const ${OK_ONE.len})))))`)

/** `session`'s activation input with `message`. */
const sessionInput = (session: string, message: string): ActivationInput => {
  const input = activationInput(message)
  return { ...input, runtime: { ...input.runtime, session_id: session } }
}

const spinning = guest(`(func (export "brain_run") (param i32 i32) (result i64) (loop $l (br $l)) (unreachable))`)
const fine = guest(`${data(100, '{"ok":"fine"}').segment} (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const 100) (i32.const 13)))`)

/**
 * A Host that records every call: its model asks for `firstCalls` (echo tool calls) once, then
 * answers "done"; its dispatch answers each call with its input.
 */
const recordingToolHost = (firstCalls: ReadonlyArray<{ readonly id: string; readonly input: unknown }>) => {
  const calls: Array<unknown> = []
  let round = 0
  const host: Host = hostWith({
    model: (request) =>
      Effect.sync(() => {
        calls.push(["model", request])
        return round++ === 0
          ? { text: "", tool_calls: firstCalls.map((c) => ({ id: c.id, name: "echo", input: c.input })), stop_reason: "tool_calls" as const }
          : { text: "done", tool_calls: [], stop_reason: "end" as const }
      }),
    dispatch: (request) =>
      Effect.sync(() => {
        calls.push(["dispatch", request])
        return request.map((c) => ({ call_id: c.id, name: c.name, outcome: "ok" as const, output: c.input, is_error: false }))
      }),
    setTranscript: (messages) => Effect.sync(() => void calls.push(["set_transcript", messages])),
    setTranscriptAtEnd: (messages) => Effect.sync(() => void calls.push(["set_transcript_at_end", messages]))
  })
  return { host, calls }
}

const PRISTINE = data(100, '{"ok":"pristine"}')
const DIRTY = data(130, '{"ok":"dirty"}')

/**
 * Checks that everything it can change is as instantiation left it — a global with an initial
 * value, a global and a memory word its start function set, a data segment's byte, a byte far past
 * its data, its allocator's global (its input lands at 4096, the allocator's start) — then changes
 * all of them, and answers "pristine" or "dirty". `extra` is more of its body (run first).
 */
const stateful = (extra = "", fields = "") =>
  guest(`${PRISTINE.segment} ${DIRTY.segment} (data (i32.const 600) "\\2a") ${fields}
    (global $g (mut i32) (i32.const 5))
    (global $s (mut i64) (i64.const 0))
    (func $init (global.set $s (i64.const 7)) (i32.store (i32.const 700) (i32.const 9)))
    (start $init)
    (func (export "brain_run") (param i32 i32) (result i64) (local $ok i32)
      ${extra}
      (local.set $ok (i32.and (i32.and (i32.and (i32.eq (global.get $g) (i32.const 5)) (i64.eq (global.get $s) (i64.const 7)))
        (i32.and (i32.eq (i32.load8_u (i32.const 600)) (i32.const 42)) (i32.eq (i32.load (i32.const 700)) (i32.const 9))))
        (i32.and (i32.eqz (i32.load8_u (i32.const 60000))) (i32.eq (local.get 0) (i32.const 4096)))))
      (global.set $g (i32.const 6))
      (global.set $s (i64.const 8))
      (i32.store8 (i32.const 600) (i32.const 1))
      (i32.store (i32.const 700) (i32.const 1))
      (i32.store8 (i32.const 60000) (i32.const 1))
      (if (result i64) (local.get $ok)
        (then (call $out (i32.const ${PRISTINE.ptr}) (i32.const ${PRISTINE.len})))
        (else (call $out (i32.const ${DIRTY.ptr}) (i32.const ${DIRTY.len})))))`)

/**
 * A guest of two pages that answers "pristine" when every byte `writes` stores to is zero, then
 * stores to them all (each a WAT instruction that writes at its `at` a value whose first byte is not
 * zero). `alloc` (an address): its own allocator, handing the host room from there up, and a
 * `kv_read` after its checks, whose answer the host writes there.
 */
const scribbler = (writes: ReadonlyArray<{ readonly at: number; readonly code: string }>, alloc?: number) =>
  guest(`${PRISTINE.segment} ${DIRTY.segment} ${alloc === undefined ? "" : `${KV_READ.segment} ${READ_REQUEST.segment}`}
    ${alloc === undefined ? "" : `(global $next (mut i32) (i32.const ${alloc}))
    (func (export "brain_alloc") (param $n i32) (result i32) (local $p i32)
      (local.set $p (global.get $next)) (global.set $next (i32.add (global.get $next) (local.get $n))) (local.get $p))`}
    (func (export "brain_run") (param i32 i32) (result i64) (local $ok i32)
      (local.set $ok (i32.const 1))
      ${writes.map((w) => `(local.set $ok (i32.and (local.get $ok) (i32.eqz (i32.load8_u (i32.const ${w.at})))))`).join("\n      ")}
      ${alloc === undefined ? "" : `(drop ${read})`}
      ${writes.map((w) => w.code).join("\n      ")}
      (if (result i64) (local.get $ok)
        (then (call $out (i32.const ${PRISTINE.ptr}) (i32.const ${PRISTINE.len})))
        (else (call $out (i32.const ${DIRTY.ptr}) (i32.const ${DIRTY.len})))))`, { memory: "2", ...(alloc === undefined ? {} : { alloc: false }) })

/** A guest's static data at 4096, below 20480: 16 KiB of `*`, where `imageKeeper`'s allocator can hand the host room. */
const CANARY = data(4096, "*".repeat(16_384))
const CANARY_END = CANARY.ptr + CANARY.len

/**
 * A guest of one page whose image (what instantiation leaves in its memory) runs from 0 to the end
 * of CANARY, and that answers "pristine" when every byte of CANARY but its input's own is `*`
 * and every `stores[i].at` holds `stores[i].was`, then makes each store (WAT) and, with `call`, a
 * kv_read. Its allocator hands the host room from 32768 up, above the image, but for the
 * allocations `low` names (0: the input, 1: the suspension buffer at its host call, 2: the call's
 * answer), which it hands out inside CANARY: the host then writes below the image's end.
 */
const imageKeeper = (options: {
  readonly stores?: ReadonlyArray<{ readonly at: number; readonly was: number; readonly code: string }>
  readonly call?: boolean
  readonly low?: ReadonlyArray<0 | 1 | 2>
}) => {
  const stores = options.stores ?? []
  const low = (options.low ?? []).reduce((mask: number, i) => mask | (1 << i), 0)
  return guest(`${PRISTINE.segment} ${DIRTY.segment} ${KV_READ.segment} ${READ_REQUEST.segment} ${CANARY.segment}
    (global $high (mut i32) (i32.const 32768))
    (global $low (mut i32) (i32.const ${CANARY.ptr}))
    (global $allocs (mut i32) (i32.const 0))
    (func (export "brain_alloc") (param $n i32) (result i32) (local $p i32)
      (if (i32.and (i32.const ${low}) (i32.shl (i32.const 1) (global.get $allocs)))
        (then (local.set $p (global.get $low)) (global.set $low (i32.add (local.get $p) (local.get $n))))
        (else (local.set $p (global.get $high)) (global.set $high (i32.add (local.get $p) (local.get $n)))))
      (global.set $allocs (i32.add (global.get $allocs) (i32.const 1)))
      (local.get $p))
    (func $intact (param $i i32) (result i32)
      (block $done (result i32)
        (loop $next
          (br_if $done (i32.const 1) (i32.ge_u (local.get $i) (i32.const ${CANARY_END})))
          (br_if $done (i32.const 0) (i32.ne (i32.load8_u (local.get $i)) (i32.const 42)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $next))
        (i32.const 0)))
    (func (export "brain_run") (param i32 i32) (result i64) (local $ok i32)
      ;; Past its input when the input is inside CANARY (it is then at CANARY's start), else all of it.
      (local.set $ok (call $intact (select (i32.add (local.get 0) (local.get 1)) (i32.const ${CANARY.ptr}) (i32.lt_u (local.get 0) (i32.const ${CANARY_END})))))
      ${stores.map((w) => `(local.set $ok (i32.and (local.get $ok) (i32.eq (i32.load8_u (i32.const ${w.at})) (i32.const ${w.was}))))`).join("\n      ")}
      ${options.call === true ? `(drop ${read})` : ""}
      ${stores.map((w) => w.code).join("\n      ")}
      (if (result i64) (local.get $ok)
        (then (call $out (i32.const ${PRISTINE.ptr}) (i32.const ${PRISTINE.len})))
        (else (call $out (i32.const ${DIRTY.ptr}) (i32.const ${DIRTY.len})))))`, { alloc: false })
}

/** Every plain store instruction, each at its own address up to the memory's last byte. */
const PLAIN_STORES = [
  { at: 61000, code: "(i32.store offset=3000 (i32.const 58000) (i32.const 0x01020304))" },
  { at: 64000, code: "(i32.store16 (i32.const 64000) (i32.const 0x0102))" },
  { at: 65000, code: "(i32.store8 (i32.const 65000) (i32.const 9))" },
  { at: 100000, code: "(i64.store (i32.const 100000) (i64.const 0x0102030405060708))" },
  { at: 104000, code: "(i64.store8 (i32.const 104000) (i64.const 7))" },
  { at: 106000, code: "(i64.store16 (i32.const 106000) (i64.const 7))" },
  { at: 108000, code: "(i64.store32 (i32.const 108000) (i64.const 7))" },
  { at: 110000, code: "(f32.store (i32.const 110000) (f32.const 1.5))" },
  { at: 120000, code: "(f64.store (i32.const 120000) (f64.const 1.5e300))" },
  { at: 131071, code: "(i32.store8 (i32.const 131071) (i32.const 1))" }
]

describe("a guest's (ptr, len) pairs as the main thread packs and reads them", () => {
  it("packs a pair as (ptr << 32) | len, and reads any i64 a guest returns as its unsigned halves, as BigInt arithmetic does", () => {
    const u32 = fc.integer({ min: 0, max: 0xffffffff })
    fc.assert(fc.property(u32, u32, (ptr, len) => {
      expect(packPair(ptr, len)).toBe((BigInt(ptr) << 32n) | BigInt(len))
    }))
    // What a guest's i64 arrives as: a signed BigInt.
    fc.assert(fc.property(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (packed) => {
      const value = BigInt.asUintN(64, packed)
      expect(pairOf(packed)).toEqual([Number(value >> 32n), Number(value & 0xffffffffn)])
    }))
  })
})

describe("a guest's text as the main thread reads and writes it", () => {
  const fatal = new TextDecoder("utf-8", { fatal: true })
  /** Bytes of every kind: arbitrary, UTF-8 of any string (lone surrogates written as U+FFFD), and either after a byte-order mark or beside U+FFFD's own bytes. */
  const bytes = fc.oneof(
    fc.uint8Array({ maxLength: 40 }),
    fc.fullUnicodeString({ maxLength: 20 }).map((s) => new Uint8Array(Buffer.from(s, "utf8"))),
    fc.stringOf(fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)), { maxLength: 20 }).map((s) => new Uint8Array(Buffer.from(s, "utf8")))
  ).chain((b) => fc.constantFrom(b, Uint8Array.of(0xef, 0xbb, 0xbf, ...b), Uint8Array.of(0xef, 0xbf, 0xbd, ...b), Uint8Array.of(...b, 0xef, 0xbf, 0xbd), Uint8Array.of(0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf, ...b), Uint8Array.of(...b, 0xed, 0xa0, 0x80)))

  it("reads bytes anywhere in the memory as the fatal UTF-8 decoder does: the same text (a leading byte-order mark dropped), or none where the decoder throws", () => {
    fc.assert(
      fc.property(bytes, fc.nat(7), fc.nat(7), (b, before, after) => {
        const memory = Buffer.alloc(before + b.length + after, 0x41)
        memory.set(b, before)
        let expected: string | undefined
        try {
          expected = fatal.decode(b)
        } catch {
          expected = undefined
        }
        expect(utf8Text(memory, before, before + b.length)).toBe(expected)
      }),
      { numRuns: 2000 }
    )
  })

  it("writes text into the memory as TextEncoder.encodeInto does, byte for byte, lone surrogates as U+FFFD, in the bytes Buffer.byteLength counts", () => {
    fc.assert(
      fc.property(fc.stringOf(fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)), { maxLength: 30 }), fc.nat(7), (text, at) => {
        const length = Buffer.byteLength(text, "utf8")
        const written = Buffer.alloc(at + length + 3)
        const encoded = Buffer.alloc(at + length + 3)
        expect(written.write(text, at, length, "utf8")).toBe(length)
        expect(new TextEncoder().encodeInto(text, encoded.subarray(at, at + length)).written).toBe(length)
        expect(written.equals(encoded)).toBe(true)
      }),
      { numRuns: 2000 }
    )
  })
})

describe("InlineModules' cooldowns after moves", () => {
  it.live("are kept for at most MOVED_SESSIONS sessions, the one whose last move is oldest forgotten first; a session with none has no entry", () =>
    Effect.gen(function*() {
      const twins = new InlineModules()
      const bytes = yield* Effect.promise(() => wat(fine))
      const hash = "cooldown-bound-test"
      yield* twins.prepare(hash, bytes)
      const onMain = (session: string) => twins.take(hash, session) !== undefined
      expect(onMain("first")).toBe(true)
      expect(twins.coolingSessions).toBe(0)
      twins.moved(hash, "first")
      twins.moved(hash, "second")
      for (let i = 2; i < MOVED_SESSIONS; i++) twins.moved(hash, `s${i}`)
      // Moved again: now the last to be forgotten.
      twins.moved(hash, "first")
      twins.moved(hash, "one more")
      expect(twins.coolingSessions).toBe(MOVED_SESSIONS)
      expect(onMain("second")).toBe(true)
      expect(onMain("s2")).toBe(false)
      expect(onMain("first")).toBe(false)
      // Its cooldown after two moves in a row is 4: 3 more on the pool, then the main thread.
      expect([onMain("first"), onMain("first"), onMain("first"), onMain("first")]).toEqual([false, false, false, true])
      twins.completed(hash, "first")
      expect(twins.coolingSessions).toBe(MOVED_SESSIONS - 1)
    }))
})

describe("WasmHost on the main thread", () => {
  it.scopedLive("an instance put back after its activation completed is reused, and its guest finds every global, its memory and its allocator as a new instance's", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const module = yield* admit(wasm, stateful())
      const before = { ...instanceStats }
      for (let i = 0; i < 10; i++) expect(yield* wasm.runLoop(module, activationInput(), hostWith({})), `activation ${i}`).toBe("pristine")
      // Nine of ten on an instance put back: what the guest found is a reset's doing, not a new instance's.
      expect(instanceStats.reused - before.reused).toBeGreaterThanOrEqual(9)
      expect(wasm.stats).toEqual({ inline: 10, moved: 0, pool: 0 })
    }))

  it.scopedLive("an instance put back finds zero every byte the last activation wrote, whatever wrote it: each kind of plain store (counted by its twin), bulk, atomic and SIMD stores (a twin that does not count), and the host's own writes", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const cases = {
        plain: { bytes: yield* Effect.promise(() => wat(scribbler(PLAIN_STORES))), counted: true },
        bulk: {
          bytes: yield* Effect.promise(() => wat(scribbler([
            { at: 90050, code: "(memory.fill (i32.const 90000) (i32.const 7) (i32.const 100))" },
            { at: 95010, code: "(memory.copy (i32.const 95000) (i32.const 100) (i32.const 20))" }
          ]))),
          counted: false
        },
        atomic: {
          bytes: yield* Effect.promise(() => wat(scribbler([
            { at: 80000, code: "(i32.atomic.store (i32.const 80000) (i32.const 5))" },
            { at: 80008, code: "(drop (i32.atomic.rmw.add (i32.const 80008) (i32.const 5)))" }
          ]), { threads: true })),
          counted: false
        },
        simd: { bytes: yield* Effect.promise(() => wat(scribbler([{ at: 70000, code: "(v128.store (i32.const 70000) (v128.const i32x4 1 2 3 4))" }]))), counted: false },
        // The host writes each input, the suspension buffer (8 KiB) and the kv_read answer from 100000
        // up (the guest's allocator hands them out there): the first answer, 3 KB, covers 110692,
        // which the later, short ones do not.
        host: { bytes: yield* Effect.promise(() => wat(scribbler([{ at: 110692, code: "" }, { at: 60000, code: "(i32.store8 (i32.const 60000) (i32.const 1))" }], 100000))), counted: true }
      }
      for (const [name, { bytes, counted }] of Object.entries(cases)) {
        const module = yield* Effect.orDie(wasm.admit(bytes))
        const before = { ...instanceStats }
        for (let i = 0; i < 4; i++) {
          const host = hostWith({ kvRead: () => Effect.succeed(Option.some(i === 0 ? "x".repeat(3000) : 1)) })
          expect(yield* wasm.runLoop(module, activationInput(), host), `${name} ${i}`).toBe("pristine")
        }
        expect(instanceStats.reused - before.reused, `${name}: put back and reused`).toBeGreaterThanOrEqual(3)
        const zeroedEach = (instanceStats.zeroed - before.zeroed) / (instanceStats.putBack - before.putBack)
        if (!counted) expect(zeroedEach, `${name}: zeroed whole`).toBeGreaterThan(120_000)
      }
    }))

  it.scopedLive("an instance put back finds zero the suspension buffer's part above the stack Asyncify stored, which its put-back checks and does not write again, and zero again after its guest stored there itself", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      // The suspension buffer goes where the guest's allocator stands at its first host call (just
      // above its input); 6,000 bytes into it is far above the few words of stack this guest unwinds.
      // After its call (the buffer taken), with `scribble`, it stores there: its own store into the
      // buffer, which the put-back must find and zero.
      const reader = (scribble: boolean) => guest(`${SEGMENTS} ${PRISTINE.segment} ${DIRTY.segment}
        (func (export "brain_run") (param i32 i32) (result i64) (local $buffer i32) (local $ok i32)
          (local.set $buffer (global.get $heap))
          (local.set $ok (i32.eqz (i32.load8_u offset=6000 (local.get $buffer))))
          (drop ${read})
          ${scribble ? "(i32.store8 offset=6000 (local.get $buffer) (i32.const 7))" : ""}
          (if (result i64) (local.get $ok)
            (then (call $out (i32.const ${PRISTINE.ptr}) (i32.const ${PRISTINE.len})))
            (else (call $out (i32.const ${DIRTY.ptr}) (i32.const ${DIRTY.len})))))`)
      for (const scribble of [false, true]) {
        const module = yield* admit(wasm, reader(scribble))
        const host = hostWith({ kvRead: () => Effect.succeed(Option.some(1)) })
        yield* wasm.runLoop(module, activationInput(), host)
        const before = { ...instanceStats }
        for (let i = 0; i < 4; i++) expect(yield* wasm.runLoop(module, activationInput(), host), `scribbling ${scribble}, activation ${i}`).toBe("pristine")
        expect(instanceStats.reused - before.reused, `scribbling ${scribble}: put back and reused`).toBe(4)
        const checked = (instanceStats.checked - before.checked) / 4
        // Untouched, all but the stack's few words are checked, not zeroed; stored into, it is zeroed with the rest.
        if (scribble) expect(checked).toBe(0)
        else expect(checked).toBeGreaterThan(8000)
      }
    }))

  it.scopedLive("an instance put back finds its image again wherever the last activation wrote below the image's end, whatever wrote it: a plain store (counted by its twin), bulk, atomic and SIMD stores (a twin that does not count), the host's write of the input, of a host call's answer, and Asyncify's of the suspended stack; an activation that wrote nothing there has no byte of its image copied back", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const cases: Record<string, { readonly module: Promise<Uint8Array>; readonly copies: boolean }> = {
        "nothing below the image (its op and request, read there, are not writes)": { module: wat(imageKeeper({ call: true })), copies: false },
        "plain stores": {
          module: wat(imageKeeper({
            stores: [
              { at: 8, was: 0, code: "(i32.store (i32.const 8) (i32.const 7))" },
              { at: 5000, was: 42, code: "(i32.store8 (i32.const 5000) (i32.const 1))" },
              { at: 9003, was: 42, code: "(i64.store offset=3 (i32.const 9000) (i64.const 0x0102030405060708))" },
              { at: CANARY_END - 8, was: 42, code: `(f64.store (i32.const ${CANARY_END - 8}) (f64.const 1.5e300))` }
            ],
            call: true
          })),
          copies: true
        },
        "memory.fill and memory.copy": {
          module: wat(imageKeeper({
            stores: [
              { at: 6000, was: 42, code: "(memory.fill (i32.const 6000) (i32.const 7) (i32.const 100))" },
              { at: 7000, was: 42, code: "(memory.copy (i32.const 7000) (i32.const 100) (i32.const 20))" }
            ]
          })),
          copies: true
        },
        "an atomic store": { module: wat(imageKeeper({ stores: [{ at: 8000, was: 42, code: "(i32.atomic.store (i32.const 8000) (i32.const 5))" }] }), { threads: true }), copies: true },
        "a SIMD store": { module: wat(imageKeeper({ stores: [{ at: 8000, was: 42, code: "(v128.store (i32.const 8000) (v128.const i32x4 1 2 3 4))" }] })), copies: true },
        "the host's write of the input": { module: wat(imageKeeper({ low: [0] })), copies: true },
        "the host's write of a host call's answer": { module: wat(imageKeeper({ call: true, low: [2] })), copies: true },
        "the suspended stack and the host's header of its buffer": { module: wat(imageKeeper({ call: true, low: [1] })), copies: true }
      }
      for (const [name, { module: bytes, copies }] of Object.entries(cases)) {
        const module = yield* Effect.orDie(wasm.admit(yield* Effect.promise(() => bytes)))
        // The first activation's instance is new (its image taken then); those after it are put back.
        const before = { ...instanceStats }
        for (let i = 0; i < 6; i++) {
          // A long input and answer, then a short one: the next activation reads past the short one's end what the long one covered.
          const long = i % 2 === 0
          const host = hostWith({ kvRead: () => Effect.succeed(Option.some(long ? "x".repeat(3000) : 1)) })
          expect(yield* wasm.runLoop(module, activationInput(long ? "y".repeat(3000) : "go"), host), `${name}, activation ${i}`).toBe("pristine")
        }
        expect(instanceStats.reused - before.reused, `${name}: put back and reused`).toBeGreaterThanOrEqual(5)
        const copied = instanceStats.copied - before.copied
        if (copies) expect(copied, `${name}: its image copied back`).toBeGreaterThan(0)
        else expect(copied, `${name}: no byte of its image copied back`).toBe(0)
      }
    }))

  it.scopedLive("an instance whose start function stored into its memory, put back after an activation that wrote nothing below its image, has none of the image copied back, and its guest finds what the start function stored", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      // Its start function stores at 700 (inside its image); an activation that changes nothing in its memory below 4096 (its input's).
      const module = yield* admit(wasm, guest(`${PRISTINE.segment} ${DIRTY.segment}
        (func $init (i32.store (i32.const 700) (i32.const 9)))
        (start $init)
        (func (export "brain_run") (param i32 i32) (result i64)
          (if (result i64) (i32.eq (i32.load (i32.const 700)) (i32.const 9))
            (then (call $out (i32.const ${PRISTINE.ptr}) (i32.const ${PRISTINE.len})))
            (else (call $out (i32.const ${DIRTY.ptr}) (i32.const ${DIRTY.len})))))`))
      yield* wasm.runLoop(module, activationInput(), hostWith({}))
      const before = { ...instanceStats }
      for (let i = 0; i < 3; i++) expect(yield* wasm.runLoop(module, activationInput(), hostWith({})), `activation ${i}`).toBe("pristine")
      expect(instanceStats.reused - before.reused).toBe(3)
      expect(instanceStats.copied - before.copied).toBe(0)
    }))

  it.scopedLive("an instance of the official loop put back has only what its activation wrote zeroed: far less than its memory", () =>
    Effect.gen(function*() {
      const bytes = new Uint8Array(fs.readFileSync(new URL("../../../dist/loops/official.wasm", import.meta.url)))
      const wasm = yield* inlineHost(1_000)
      const module = yield* Effect.orDie(wasm.admit(bytes))
      const before = { ...instanceStats }
      for (let i = 0; i < 5; i++) {
        const { host } = recordingToolHost([{ id: "c1", input: { n: i } }])
        yield* wasm.runLoop(module, activationInput("again"), host)
      }
      const putBack = instanceStats.putBack - before.putBack
      expect(putBack).toBe(5)
      expect((instanceStats.zeroed - before.zeroed) / putBack).toBeLessThan(64 * 1024)
    }))

  it.scopedLive("a text turn of the official loop writes (and its put-back zeroes) under 13.5 KiB above its image, and nothing below its end (none of its image is copied back): its request writer starts at 512 bytes, not 4 KiB its turn never writes, its JSON values hold lists only as long as they need, and a transcript with nothing to repair is not copied again", () =>
    Effect.gen(function*() {
      const bytes = new Uint8Array(fs.readFileSync(new URL("../../../dist/loops/official.wasm", import.meta.url)))
      const wasm = yield* inlineHost(1_000)
      const module = yield* Effect.orDie(wasm.admit(bytes))
      const host = hostWith({
        model: () => Effect.succeed({ text: "done", tool_calls: [], stop_reason: "end" as const }),
        setTranscriptAtEnd: () => Effect.void
      })
      // The first activation's instance is new (its image taken then); those after it are put back.
      yield* wasm.runLoop(module, activationInput("again"), host)
      const before = { ...instanceStats }
      for (let i = 0; i < 3; i++) expect(yield* wasm.runLoop(module, activationInput("again"), host)).toEqual({ text: "done" })
      const putBack = instanceStats.putBack - before.putBack
      expect(putBack).toBe(3)
      // Its guest writes nothing below its image's end (19.7 KB of static data), nor does the host: none of it is copied back.
      expect(instanceStats.copied - before.copied).toBe(0)
      // The suspension buffer (8 KiB) among it: what Brain takes for the guest's stack at its model call.
      // 16,311 bytes with AssemblyScript Arrays in every JSON array and object (docs/benchmarks.md, "Wasm text turn, stop 59").
      expect((instanceStats.zeroed - before.zeroed) / putBack).toBeLessThan(13.5 * 1024)
    }))

  it.scopedLive("an instance is never reused when its code can change a table, when its activation grew its memory, or when its activation failed: each activation gets a new one", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const tables = yield* Effect.orDie(wasm.admit(yield* Effect.promise(() =>
        wat(stateful("(table.set $t (i32.const 0) (ref.func $init))", "(table $t 1 1 funcref) (elem declare func $init)"), { reference_types: true })
      )))
      const grows = yield* admit(wasm, stateful("(drop (memory.grow (i32.const 1)))"))
      const fails = yield* admit(wasm, stateful("(global.set $g (i32.const 6)) (unreachable)"))
      for (const [name, module] of [["tables", tables], ["grows", grows]] as const) {
        const before = { ...instanceStats }
        for (let i = 0; i < 3; i++) expect(yield* wasm.runLoop(module, activationInput(), hostWith({})), `${name} ${i}`).toBe("pristine")
        expect(instanceStats.reused - before.reused, name).toBe(0)
        expect(instanceStats.made - before.made, name).toBeGreaterThanOrEqual(2)
      }
      const before = { ...instanceStats }
      for (let i = 0; i < 3; i++) {
        const result = yield* Effect.either(wasm.runLoop(fails, activationInput(), hostWith({})))
        expect(Either.isLeft(result) && result.left.failure.message, `fails ${i}`).toMatch(/trapped/)
      }
      expect(instanceStats.reused - before.reused).toBe(0)
    }))

  it.scopedLive("a text turn of the official loop crosses between JavaScript and its twin seven times: the input's, the suspension buffer's and the answer's allocations, two steps (its entry, then the rewind with the answer), its host call, and the reset; the twin starts and stops Asyncify's unwind and rewind itself, and its reset answers the written marks (no global of the twin's is read from JavaScript)", () =>
    Effect.gen(function*() {
      // The official loop with a custom section of its own (which changes nothing it computes):
      // a module of its own, so that every instance of it is made while the crossings are counted.
      const official = fs.readFileSync(new URL("../../../dist/loops/official.wasm", import.meta.url))
      const bytes = new Uint8Array(Buffer.concat([official, Buffer.from([0, 9, 7, ...Buffer.from("crossed"), 1])]))
      const crossings = new Map<string, number>()
      const count = (name: string) => crossings.set(name, (crossings.get(name) ?? 0) + 1)
      const Instance = WebAssembly.Instance
      const counting = function(module: WebAssembly.Module, imports: Record<string, Record<string, unknown>>) {
        const wrapped: Record<string, Record<string, unknown>> = {}
        for (const [space, fields] of Object.entries(imports)) {
          wrapped[space] = {}
          for (const [name, value] of Object.entries(fields)) {
            wrapped[space]![name] = typeof value === "function" ? (...args: Array<unknown>) => (count(`${space}.${name}`), value(...args)) : value
          }
        }
        const exports: Record<string, unknown> = {}
        for (const [name, value] of Object.entries(new Instance(module, wrapped).exports)) {
          if (typeof value === "object" && value !== null && "value" in value) {
            const global = value as { value: unknown }
            // Its value read or set from JavaScript: a call into V8's API each time.
            exports[name] = {
              get value() {
                count(`${name}.value`)
                return global.value
              },
              set value(v: unknown) {
                count(`${name}.value =`)
                global.value = v
              }
            }
          } else exports[name] = typeof value === "function" ? (...args: Array<unknown>) => (count(name), (value as (...a: Array<unknown>) => unknown)(...args)) : value
        }
        return { exports }
      }
      ;(WebAssembly as { Instance: unknown }).Instance = counting
      yield* Effect.addFinalizer(() => Effect.sync(() => void ((WebAssembly as { Instance: unknown }).Instance = Instance)))
      const wasm = yield* inlineHost(1_000)
      const module = yield* Effect.orDie(wasm.admit(bytes))
      const host = hostWith({
        model: () => Effect.succeed({ text: "done", tool_calls: [], stop_reason: "end" as const }),
        setTranscriptAtEnd: () => Effect.void
      })
      // The first activation's instance is new; those after it are put back.
      yield* wasm.runLoop(module, activationInput("again"), host)
      crossings.clear()
      for (let i = 0; i < 3; i++) expect(yield* wasm.runLoop(module, activationInput("again"), host)).toEqual({ text: "done" })
      expect(Object.fromEntries([...crossings].map(([name, n]) => [name, n / 3]))).toEqual({
        brain_alloc: 3,
        "brain$run": 2,
        "brain.call": 1,
        "brain$restore": 1
      })
    }))

  it.scopedLive("the official loop on instances put back makes the same host calls with the same requests, and gives the same result, activation after activation", () =>
    Effect.gen(function*() {
      const bytes = new Uint8Array(fs.readFileSync(new URL("../../../dist/loops/official.wasm", import.meta.url)))
      const wasm = yield* inlineHost(1_000)
      const module = yield* Effect.orDie(wasm.admit(bytes))
      const activation = () =>
        Effect.gen(function*() {
          const { host, calls } = recordingToolHost([{ id: "c1", input: { n: 1 } }])
          const result = yield* wasm.runLoop(module, { ...activationInput("again"), transcript: [{ role: "user", content: "earlier" }, { role: "assistant", content: "yes" }] }, host)
          return JSON.parse(JSON.stringify({ result, calls })) as unknown
        })
      const first = yield* activation()
      const before = { ...instanceStats }
      for (let i = 0; i < 3; i++) expect(yield* activation(), `activation ${i + 2}`).toEqual(first)
      expect(instanceStats.reused - before.reused).toBe(3)
      expect(wasm.stats).toEqual({ inline: 4, moved: 0, pool: 0 })
    }))

  it.scopedLive("an activation on an instance that rested longer than the allowance is metered from its own start: the input's allocation, which runs out of fuel, counts only its own compute, and nothing moves", () =>
    Effect.gen(function*() {
      // Its allocator counts down past one allowance of fuel (a tick in every allocation), in far less than the allowance's time.
      const ticking = guest(`${data(100, '{"ok":"fine"}').segment}
        (global $next (mut i32) (i32.const 4096))
        (func (export "brain_alloc") (param $n i32) (result i32) (local $i i32) (local $p i32)
          (local.set $i (i32.const 50000))
          (loop $l (br_if $l (i32.ne (local.tee $i (i32.sub (local.get $i) (i32.const 1))) (i32.const 0))))
          (local.set $p (global.get $next)) (global.set $next (i32.add (global.get $next) (local.get $n))) (local.get $p))
        (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const 100) (i32.const 13)))`, { alloc: false })
      const wasm = yield* inlineHost(300)
      const module = yield* admit(wasm, ticking)
      for (let i = 0; i < 3; i++) {
        expect(yield* wasm.runLoop(module, activationInput(), hostWith({})), `activation ${i}`).toBe("fine")
        // Its instance put back rests past the allowance before the next activation takes it.
        yield* Effect.sleep("600 millis")
      }
      expect(wasm.stats).toEqual({ inline: 3, moved: 0, pool: 0 })
    }))

  it.scopedLive("a guest that computes past its main-thread allowance moves to a worker and completes there; the host call it made before the move is performed once", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(5)
      const module = yield* admit(wasm, putSpinRead(100_000_000))
      const { host, calls } = countingHost()
      expect(yield* wasm.runLoop(module, activationInput(), host)).toEqual({ found: true, value: 1 })
      expect(calls).toEqual(["put k", "read k"])
      expect(wasm.stats).toEqual({ inline: 1, moved: 1, pool: 0 })
    }))

  it.scopedLive("a moved activation's long request (recorded by its digest) is recognized on the worker and performed once", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(5)
      const module = yield* admit(wasm, putSpinRead(100_000_000, true))
      const { host, calls } = countingHost()
      expect(yield* wasm.runLoop(module, activationInput(), host)).toEqual({ found: true, value: 1 })
      expect(calls).toEqual(["put k", "read k"])
      expect(wasm.stats).toEqual({ inline: 1, moved: 1, pool: 0 })
    }))

  it.scopedLive("a guest whose stack at a host call does not fit the suspension buffer moves to a worker, and its call is performed once there", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const module = yield* admit(wasm, deepRead(2_000))
      const { host, calls } = countingHost()
      expect(yield* wasm.runLoop(module, activationInput(), host)).toEqual({ found: true, value: 1 })
      expect(calls).toEqual(["read k"])
      expect(wasm.stats).toEqual({ inline: 1, moved: 1, pool: 0 })
    }))

  it.scopedLive("after a session's activation moves, that session's next activations of the module run on the pool (2, then 4 after a second move in a row), while another session's activations of the same module stay on the main thread", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const module = yield* admit(wasm, deepWhenAsked)
      /** Runs one activation of `session`; where it ran (the stats that grew). */
      const where = (session: string, message = "flat") =>
        Effect.gen(function*() {
          const before = { ...wasm.stats }
          const { host, calls } = countingHost()
          expect(yield* wasm.runLoop(module, sessionInput(session, message), host)).toEqual({ found: true, value: 1 })
          expect(calls).toEqual(["read k"])
          return wasm.stats.moved > before.moved ? "moved" : wasm.stats.pool > before.pool ? "pool" : "main"
        })
      expect(yield* where("ses_heavy", "deep")).toBe("moved")
      expect([yield* where("ses_quiet"), yield* where("ses_heavy"), yield* where("ses_quiet"), yield* where("ses_heavy"), yield* where("ses_quiet")])
        .toEqual(["main", "pool", "main", "pool", "main"])
      // Back on the main thread, and moved again: the move before counts in a row, as none completed here between.
      expect(yield* where("ses_heavy", "deep")).toBe("moved")
      const heavy: Array<string> = []
      for (let i = 0; i < 5; i++) {
        heavy.push(yield* where("ses_heavy"))
        expect(yield* where("ses_quiet")).toBe("main")
      }
      expect(heavy).toEqual(["pool", "pool", "pool", "pool", "main"])
      // Completed on the main thread: the next move cools down for 2 again.
      expect(yield* where("ses_heavy", "deep")).toBe("moved")
      expect([yield* where("ses_heavy"), yield* where("ses_heavy"), yield* where("ses_heavy")]).toEqual(["pool", "pool", "main"])
    }))

  it.scopedLive("after a session's Wasm tool call moves, the session's calls of the tool run on the pool (the moved call, run again from its start, and the next), not tried, while another session's calls are tried on the main thread", () =>
    Effect.gen(function*() {
      const host = yield* inlineHost(1_000)
      const tool = yield* admit(host, deepToolWhenAsked)
      const services = { emit: () => Effect.succeed(1), telemetry: () => Effect.void }
      const call = (session: string, input: string) => ({ input, call: { session_id: session, sequence: 1, name: "t", deadline_at_ms: 0 } })
      /** Tries one call of `session`, then runs it if the try did not end it: where it ran. */
      const where = (session: string, input = "flat") =>
        Effect.gen(function*() {
          const before = { ...host.stats }
          const tried = host.tryTool!(tool, call(session, input), services)
          if (tried !== undefined) {
            expect(tried).toEqual(Exit.succeed({ _tag: "ok", output: 1 }))
            return "tried"
          }
          expect(yield* host.runTool(tool, call(session, input), services)).toEqual({ _tag: "ok", output: 1 })
          return host.stats.moved > before.moved ? "moved" : host.stats.pool > before.pool ? "pool" : "main"
        })
      expect(yield* where("ses_heavy", "deep")).toBe("moved")
      expect([yield* where("ses_quiet"), yield* where("ses_heavy"), yield* where("ses_quiet"), yield* where("ses_heavy"), yield* where("ses_quiet"), yield* where("ses_heavy")])
        .toEqual(["tried", "pool", "tried", "tried", "tried", "tried"])
    }))

  it.scopedLive("a tool whose try gave up at a host call is not tried for its next calls (2 after one give-up, 4 after two in a row), then tried again; nothing it asked is performed by a try", () =>
    Effect.gen(function*() {
      const host = yield* inlineHost(1_000)
      const module = yield* admit(host, calling("emit", '{"kind":"progress","payload":{}}', "brain_tool"))
      const emitted: Array<string> = []
      const services = { emit: (kind: string) => Effect.sync(() => (emitted.push(kind), 1)), telemetry: () => Effect.void }
      const activation = { input: null, call: { session_id: "s", sequence: 1, name: "t", deadline_at_ms: 0 } }
      /** Tries one call: whether its guest ran (an instance taken or made for it). */
      const tried = () => {
        const before = instanceStats.made + instanceStats.reused
        expect(host.tryTool!(module, activation, services)).toBeUndefined()
        return instanceStats.made + instanceStats.reused > before
      }
      expect([tried(), tried(), tried(), tried()]).toEqual([true, false, false, true])
      expect([tried(), tried(), tried(), tried(), tried(), tried()]).toEqual([false, false, false, false, true, false])
      expect(emitted).toEqual([])
      expect(yield* host.runTool(module, activation, services)).toEqual({ _tag: "ok", output: { sequence: 1 } })
      expect(emitted).toEqual(["progress"])
    }))

  it.scopedLive("a guest that makes host calls and returns within its allowance runs on the main thread only", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const module = yield* admit(wasm, putSpinRead(1_000))
      for (let i = 0; i < 3; i++) {
        const { host, calls } = countingHost()
        expect(yield* wasm.runLoop(module, activationInput(), host)).toEqual({ found: true, value: 1 })
        expect(calls).toEqual(["put k", "read k"])
      }
      expect(wasm.stats).toEqual({ inline: 3, moved: 0, pool: 0 })
    }))

  it.scopedLive("a host answer on the main thread reaches the guest as its UTF-8 bytes, whole: two-, three- and four-byte characters, and an empty string", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const module = yield* admit(wasm, calling("kv_read", '{"key":"k"}'))
      for (const value of ["é", "naïve café — 中文 😀🎉", "", "x".repeat(5000) + "😀"]) {
        const host = hostWith({ kvRead: () => Effect.succeed(Option.some(value)) })
        expect(yield* wasm.runLoop(module, activationInput(), host)).toEqual({ found: true, value })
      }
      expect(wasm.stats).toEqual({ inline: 4, moved: 0, pool: 0 })
    }))

  it.scopedLive("a loop's input on the main thread reaches the guest as its UTF-8 bytes, whole: two-, three- and four-byte characters in the message and the transcript", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000)
      const module = yield* admit(wasm, echoing())
      for (const message of ["é", "naïve café — 中文 😀🎉", "", "x".repeat(5000) + "😀"]) {
        const input = { ...activationInput(), input: { message }, transcript: [{ role: "user" as const, content: `${message}✓` }] }
        const echoed = (yield* wasm.runLoop(module, input, hostWith({}))) as Record<string, unknown>
        expect(echoed.input).toEqual({ message })
        expect(echoed.transcript).toEqual([{ role: "user", content: `${message}✓` }])
      }
      expect(wasm.stats).toEqual({ inline: 4, moved: 0, pool: 0 })
    }))

  it.scopedLive("with a compute budget below the allowance, a spinning guest fails at its budget on the main thread, and the next activation completes", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(10_000, { computeMs: 100 })
      const result = yield* Effect.either(wasm.runLoop(yield* admit(wasm, spinning), activationInput(), hostWith({})))
      if (Either.isRight(result)) return expect.fail("the spinning guest completed")
      expect(result.left.failure.code).toBe("agentloop_failed")
      expect(result.left.failure.message).toMatch(/compute budget of 100 ms/)
      expect(yield* wasm.runLoop(yield* admit(wasm, fine), activationInput(), hostWith({}))).toBe("fine")
      expect(wasm.stats).toEqual({ inline: 2, moved: 0, pool: 0 })
    }))

  it.scopedLive("a moved activation whose guest asks other host calls than the record holds fails agentloop_failed, and nothing from the divergence on is performed", () =>
    Effect.gen(function*() {
      const pool = new Pool(1)
      yield* Effect.addFinalizer(() => pool.close)
      const module = yield* admitModule(yield* Effect.promise(() => wat(putSpinRead(10))), { maxModuleBytes: LIMITS.moduleBytes, maxMemoryBytes: LIMITS.memoryBytes })
      const performed: Array<string> = []
      const activation = {
        moduleId: module.hash,
        module: module.module,
        memory: module.memory,
        entry: "brain_run" as const,
        input: jsonBytes(activationInput()),
        perform: (op: string, request: string) => Effect.sync(() => (performed.push(`${op} ${request}`), '{"ok":null}'))
      }
      const record = [{ op: "kv_put", request: '{"key":"other","value":1}', answer: '{"ok":null}' }]
      const diverged = yield* Effect.either(WasmHostWorkers.replayed(pool, LIMITS, activation, record))
      if (Either.isRight(diverged)) return expect.fail("the diverging activation completed")
      expect(diverged.left.message).toMatch(/did not repeat its host calls/)
      expect(performed).toEqual([])
      // A record longer than what the guest asks is a divergence too.
      const longer = [...record.map(() => ({ op: "kv_put", request: '{"key":"k","value":1}', answer: '{"ok":null}' })), {
        op: "kv_read",
        request: '{"key":"k"}',
        answer: '{"ok":1}'
      }, { op: "kv_read", request: '{"key":"k"}', answer: '{"ok":1}' }]
      expect(Either.isLeft(yield* Effect.either(WasmHostWorkers.replayed(pool, LIMITS, activation, longer)))).toBe(true)
      expect(performed).toEqual([])
      // The record as the guest makes it: replayed, nothing performed, the guest's own output.
      const same = longer.slice(0, 2)
      expect(yield* WasmHostWorkers.replayed(pool, LIMITS, activation, same)).toBe('{"ok":1}')
      expect(performed).toEqual([])
    }))

  it.scopedLive("making a module's twin leaves the caller's bytes whole, a Node Buffer's included (its copy is handed to the instrumenting thread, not its memory)", () =>
    Effect.gen(function*() {
      const file = fs.readFileSync(new URL("../../../dist/loops/examples/echo-with-memory.wasm", import.meta.url))
      const before = Buffer.from(file)
      const twin = yield* Effect.promise(() => twinOf("a-buffer-the-caller-keeps", file))
      expect("module" in twin).toBe(true)
      expect(file.length).toBe(before.length)
      expect(file.equals(before)).toBe(true)
    }))

  it.scopedLive("a module above MAX_TWIN_MODULE_BYTES gets no instrumented twin (it runs on worker threads), and Binaryen never sees it", () =>
    Effect.gen(function*() {
      const twin = yield* Effect.promise(() => twinOf("a-module-too-large-to-instrument", new Uint8Array(MAX_TWIN_MODULE_BYTES + 1)))
      expect("failure" in twin && twin.failure).toMatch(/above 4194304 bytes/)
    }))

  /**
   * A loop whose memory starts at `pages` pages (no maximum of its own: Brain's) and answers
   * "pristine" when the byte at 70000 is zero, then sets it: with `storeBy` "fill", by a
   * `memory.fill` (a bulk store: its twin does not count what it writes), else by a plain store.
   */
  const bigMemory = (pages: number, storeBy: "store" | "fill") => guest(`${PRISTINE.segment} ${DIRTY.segment}
    (func (export "brain_run") (param i32 i32) (result i64) (local $ok i32)
      (local.set $ok (i32.eqz (i32.load8_u (i32.const 70000))))
      ${storeBy === "fill" ? "(memory.fill (i32.const 70000) (i32.const 1) (i32.const 1))" : "(i32.store8 (i32.const 70000) (i32.const 1))"}
      (if (result i64) (local.get $ok)
        (then (call $out (i32.const ${PRISTINE.ptr}) (i32.const ${PRISTINE.len})))
        (else (call $out (i32.const ${DIRTY.ptr}) (i32.const ${DIRTY.len})))))`, { memory: `${pages}` })

  it.scopedLive("an instance whose memory is far above 4 MiB (128 MiB) is put back and reused when its put-back writes little (its twin counts its writes): the main thread makes no new instance or memory per activation", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(10_000, { memoryBytes: 128 << 20 })
      const module = yield* admit(wasm, bigMemory(2048, "store"))
      // Until one instance is put back: the module's first activation, unless a loaded machine moved it
      // (its instantiation reads the new memory for the module's image). Each in a session of its own,
      // so that no session cools down on the pool after a move.
      let session = 0
      const turn = () => wasm.runLoop(module, sessionInput(`ses_big_${session++}`, "go"), hostWith({}))
      let putBackOnce = false
      for (let i = 0; i < 5 && !putBackOnce; i++) {
        const putBack = instanceStats.putBack
        expect(yield* turn(), `warming ${i}`).toBe("pristine")
        putBackOnce = instanceStats.putBack > putBack
      }
      expect(putBackOnce).toBe(true)
      const before = { ...instanceStats }
      const moved = wasm.stats.moved
      for (let i = 0; i < 6; i++) expect(yield* turn(), `activation ${i}`).toBe("pristine")
      const counts = { reused: instanceStats.reused - before.reused, made: instanceStats.made - before.made, memories: instanceStats.memories - before.memories, moved: wasm.stats.moved - moved }
      expect(counts).toEqual({ reused: 6, made: 0, memories: 0, moved: 0 })
    }))

  it.scopedLive("a module whose memory is above 4 MiB and whose instance cannot be put back cheaply (a bulk store: the put-back would zero all of it) makes a new memory on the main thread once: its later activations move to worker threads before they start, and each still finds a fresh memory", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(10_000, { memoryBytes: 128 << 20 })
      const module = yield* admit(wasm, bigMemory(65, "fill"))
      const before = { ...instanceStats }
      for (let i = 0; i < 6; i++) expect(yield* wasm.runLoop(module, activationInput(), hostWith({})), `activation ${i}`).toBe("pristine")
      expect(instanceStats.made - before.made).toBe(1)
      expect(instanceStats.memories - before.memories).toBe(1)
      expect(instanceStats.reused - before.reused).toBe(0)
      // The first on the main thread; each later one that reached it moved before its guest ran, the rest went to the pool (its session cooling down).
      expect(wasm.stats.moved).toBeGreaterThanOrEqual(1)
      expect(wasm.stats.inline - wasm.stats.moved).toBe(1)
      expect(wasm.stats.inline + wasm.stats.pool).toBe(6)
    }))

  it.scopedLive("the instrumented official loop makes the same host calls with the same requests, and gives the same result, as the plain one on a worker", () =>
    Effect.gen(function*() {
      const bytes = new Uint8Array(fs.readFileSync(new URL("../../../dist/loops/official.wasm", import.meta.url)))
      const run = (inlineMs: number) =>
        Effect.gen(function*() {
          const wasm = yield* inlineHost(inlineMs)
          const module = yield* Effect.orDie(wasm.admit(bytes))
          const { host, calls } = recordingToolHost([{ id: "c1", input: { n: 1 } }, { id: "c2", input: { n: 2 } }])
          const input: ActivationInput = { ...activationInput("two rounds, please"), transcript: [{ role: "user", content: "earlier" }, { role: "assistant", content: "yes" }] }
          const result = yield* wasm.runLoop(module, input, host)
          return { result, calls: JSON.parse(JSON.stringify(calls)) as unknown, stats: { ...wasm.stats } }
        })
      const plain = yield* run(0)
      const inline = yield* run(1_000)
      expect(plain.stats).toEqual({ inline: 0, moved: 0, pool: 1 })
      expect(inline.stats).toEqual({ inline: 1, moved: 0, pool: 0 })
      expect(inline.calls).toEqual(plain.calls)
      expect(inline.result).toEqual(plain.result)
      expect((plain.calls as Array<unknown>).length).toBeGreaterThanOrEqual(3)
    }))
})
