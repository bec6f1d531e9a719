/**
 * The thread protocol (wasm/WorkerProtocol.ts) and what the worker keeps between activations
 * (wasm/GuestWorker.ts): payloads cross inline in the shared buffer when short and on a port when
 * long, an activation like the thread's last one is started without a message, a memory is handed
 * to a later instance only as a new one would be, and compute slots are handed on in order.
 *
 * No assertion is timed.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber, Option } from "effect"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { activate, jsonBytes } from "../../../src/layers/wasm/Activation.js"
import { ComputeSlots, Pool } from "../../../src/layers/wasm/Pool.js"
import { INLINE_BYTES } from "../../../src/layers/wasm/WorkerProtocol.js"
import { activationInput, admit, hostWith } from "../../support/wasmHost.js"
import { data, guest } from "../../support/wat.js"

const LIMITS = { workers: 1, memoryBytes: 8 * 1024 * 1024, computeMs: 10_000, ioBytes: 1024 * 1024, moduleBytes: 256 * 1024 }

const input = activationInput

/**
 * Puts its whole input under kv key "k" (`kv_put {"key":"k","value":<input>}`), reads it back
 * (`kv_read`) and returns that answer as its output: the input, a request, an answer and the
 * output all as long as the input.
 */
const echoThroughKv = (() => {
  const put = data(200, "kv_put")
  const prefix = data(220, '{"key":"k","value":')
  const read = data(260, "kv_read")
  const key = data(280, '{"key":"k"}')
  const close = data(300, "}")
  return guest(`${put.segment} ${prefix.segment} ${read.segment} ${key.segment} ${close.segment}
    (func (export "brain_run") (param $ptr i32) (param $len i32) (result i64)
      (local $req i32)
      (local.set $req (call $alloc (i32.add (local.get $len) (i32.const ${prefix.len + 1}))))
      (memory.copy (local.get $req) (i32.const ${prefix.ptr}) (i32.const ${prefix.len}))
      (memory.copy (i32.add (local.get $req) (i32.const ${prefix.len})) (local.get $ptr) (local.get $len))
      (i32.store8 (i32.add (local.get $req) (i32.add (local.get $len) (i32.const ${prefix.len}))) (i32.const 125))
      (drop (call $call (i32.const ${put.ptr}) (i32.const ${put.len}) (local.get $req) (i32.add (local.get $len) (i32.const ${prefix.len + 1}))))
      (call $call (i32.const ${read.ptr}) (i32.const ${read.len}) (i32.const ${key.ptr}) (i32.const ${key.len})))`)
})()

/**
 * Declares 2 pages. Returns 1 when its memory is as new — 2 pages, the second all zero, byte
 * 60000 of the first zero — else "dirty"; either way it then writes the whole second page and byte
 * 60000, and with `grow` grows a page and writes that too.
 */
const dirtying = (grow: boolean) => {
  const clean = data(100, '{"ok":1}')
  const dirty = data(120, '{"ok":"dirty"}')
  return guest(`${clean.segment} ${dirty.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (local $i i32)
      (local $seen i32)
      (local.set $seen (i32.load8_u (i32.const 60000)))
      (local.set $i (i32.const 65536))
      (loop $scan
        (local.set $seen (i32.or (local.get $seen) (i32.load (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 4)))
        (br_if $scan (i32.lt_u (local.get $i) (i32.const 131072))))
      (if (i32.ne (memory.size) (i32.const 2)) (then (local.set $seen (i32.const 1))))
      (memory.fill (i32.const 65536) (i32.const 255) (i32.const 65536))
      (i32.store8 (i32.const 60000) (i32.const 7))
      ${grow ? "(drop (memory.grow (i32.const 1))) (memory.fill (i32.const 131072) (i32.const 255) (i32.const 65536))" : ""}
      (if (result i64) (local.get $seen)
        (then (call $out (i32.const ${dirty.ptr}) (i32.const ${dirty.len})))
        (else (call $out (i32.const ${clean.ptr}) (i32.const ${clean.len})))))`, { memory: "2 16" })
}

/** Makes `n` kv_read calls of key "k", then returns the last answer as its output. */
const readingKv = (n: number) => {
  const read = data(200, "kv_read")
  const key = data(220, '{"key":"k"}')
  return guest(`${read.segment} ${key.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (local $n i32)
      (local $answer i64)
      (local.set $n (i32.const ${n}))
      (loop $more
        (local.set $answer (call $call (i32.const ${read.ptr}) (i32.const ${read.len}) (i32.const ${key.ptr}) (i32.const ${key.len})))
        ;; the answers are read: reuse their memory
        (global.set $heap (i32.const 4096))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br_if $more (local.get $n)))
      (local.get $answer))`)
}

describe("the thread protocol", () => {
  it.scopedLive("a guest whose 20,000 host calls are each answered at once gets every answer: no wake-up is lost, even one the worker's notify reaches after the main thread took its event", () =>
    Effect.gen(function*() {
      // The pool and an activation bare, with an answer made at once: the main thread is then as
      // quick as it gets to take an event and answer it, which is what opens the race.
      const pool = new Pool(1)
      yield* Effect.addFinalizer(() => pool.close)
      const wasm = yield* WasmHostWorkers.make(LIMITS)
      const module = yield* admit(wasm, readingKv(20_000))
      let calls = 0
      const output = yield* activate(pool, {
        moduleId: module.hash,
        module: module.module,
        memory: module.memory,
        entry: "brain_run",
        input: jsonBytes(input("go")),
        perform: () => Effect.sync(() => `{"ok":${++calls}}`)
      }, { computeMs: 10_000, ioBytes: LIMITS.ioBytes, memoryBytes: LIMITS.memoryBytes })
      expect(output).toBe('{"ok":20000}')
    }))

  it.scopedLive("inputs, requests, answers and outputs longer than the shared buffer's inline region cross intact, alternating with short ones on the same thread", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make(LIMITS)
      const module = yield* admit(wasm, echoThroughKv)
      for (const size of [10, 3 * INLINE_BYTES, 20, INLINE_BYTES - 100, 2 * INLINE_BYTES, 5]) {
        // Non-ASCII text too: lengths are in bytes, not characters.
        const message = "é→".repeat(Math.ceil(size / 5)).slice(0, Math.ceil(size / 2.5))
        let stored: unknown = undefined
        const host = hostWith({
          kvPut: (key, value) => Effect.sync(() => void (stored = key === "k" ? value : undefined)),
          kvRead: () => Effect.sync(() => Option.some(stored))
        })
        const result = yield* wasm.runLoop(module, input(message), host)
        expect(result, `an input of about ${size} bytes`).toEqual({ found: true, value: input(message) })
      }
    }))

  it.scopedLive("a memory handed to a later activation is as a new one: at the module's initial size and zero where an earlier activation wrote, whether or not that one grew it", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make(LIMITS)
      const plain = yield* admit(wasm, dirtying(false))
      const growing = yield* admit(wasm, dirtying(true))
      const host = hostWith({})
      // One compute slot: every activation runs on the same thread, after one that wrote its memory.
      for (const module of [plain, plain, growing, plain, growing, growing, plain, plain]) {
        expect(yield* wasm.runLoop(module, input("go"), host)).toBe(1)
      }
    }))
})

describe("compute slots", () => {
  it.effect("a slot given back goes to the longest waiter, and a waiter interrupted while it waits takes none", () =>
    Effect.gen(function*() {
      const slots = new ComputeSlots(1)
      expect(slots.tryTake()).toBe(true)
      expect(slots.tryTake()).toBe(false)
      const order: Array<string> = []
      const first = yield* Effect.fork(Effect.zipRight(slots.take, Effect.sync(() => order.push("first"))))
      const gone = yield* Effect.fork(Effect.zipRight(slots.take, Effect.sync(() => order.push("gone"))))
      const second = yield* Effect.fork(Effect.zipRight(slots.take, Effect.sync(() => order.push("second"))))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(gone)
      // Waiters come first: a free slot is not taken past them.
      slots.give()
      yield* Fiber.join(first)
      expect(slots.tryTake()).toBe(false)
      slots.give()
      yield* Fiber.join(second)
      expect(order).toEqual(["first", "second"])
      slots.give()
      expect(slots.available).toBe(1)
    }))

  it.effect("a waiter interrupted after a slot was handed to it passes the slot on: none is lost", () =>
    Effect.gen(function*() {
      const slots = new ComputeSlots(1)
      expect(slots.tryTake()).toBe(true)
      const waiting = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(Effect.uninterruptibleMask((restore) => Effect.zipRight(Deferred.succeed(waiting, undefined), restore(slots.take))))
      yield* Deferred.await(waiting)
      yield* Effect.yieldNow()
      // Handed over and interrupted in the same step: the fiber may see either; the slot must survive both.
      slots.give()
      const exit = yield* Fiber.interrupt(fiber)
      if (Exit.isSuccess(exit)) slots.give()
      expect(slots.available).toBe(1)
      expect(slots.tryTake()).toBe(true)
    }).pipe(Effect.timeout(Duration.seconds(10))))
})
