/**
 * A guest on a worker thread whose module has an instrumented twin waits in a host call without
 * holding its thread (wasm/Pinned.ts): the twin unwinds at the call, the thread runs other
 * activations, and the waiting one is rewound on the same thread once its answer is there. So
 * loops waiting on a tool that never answers cannot hold every thread the loops may use
 * (BRAIN_WASM_THREADS − BRAIN_WASM_WORKERS), whatever their number.
 *
 * No assertion is timed: every wait is on a Deferred, bounded by a generous timeout that turns a
 * deadlock (a turn that waits for a thread no one gives back) into a failure instead of a hang.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Option } from "effect"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { activationInput, admit, hostWith } from "../../support/wasmHost.js"
import { calling, data, guest, returning } from "../../support/wat.js"

const LIMITS = { memoryBytes: 4 * 1024 * 1024, computeMs: 0, ioBytes: 64 * 1024, moduleBytes: 256 * 1024 }
const STUCK = Duration.seconds(30)

/** More waiting loops than the loop threads of a pool of 1 compute slot and 2 threads (1). */
const WAITERS = 4

/** Computes (a counted loop of `n` iterations), then makes one `kv_read` and returns its answer: on the main thread it computes past a 1 ms allowance and moves. */
const computingThenCalling = (n: number) => {
  const o = data(200, "kv_read")
  const r = data(300, '{"key":"k"}')
  return guest(`${o.segment} ${r.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (local $i i32)
      (loop $l (local.set $i (i32.add (local.get $i) (i32.const 1))) (br_if $l (i32.lt_u (local.get $i) (i32.const ${n}))))
      (call $call (i32.const ${o.ptr}) (i32.const ${o.len}) (i32.const ${r.ptr}) (i32.const ${r.len})))`)
}

/**
 * Starts WAITERS loops of `module` whose `kv_read` waits until `release` (then answers each its
 * own value), and waits until all of them are in that call.
 */
const waiting = (wasm: Effect.Effect.Success<ReturnType<typeof WasmHostWorkers.make>>, module: Parameters<typeof wasm.runLoop>[0], release: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
    for (let i = 0; i < WAITERS; i++) {
      const inCall = yield* Deferred.make<void>()
      const host = hostWith({
        kvRead: () => Effect.zipRight(Deferred.succeed(inCall, undefined), Effect.as(Deferred.await(release), Option.some(`answer ${i}`)))
      })
      // Each its own session: a session's move sends its next activations straight to the pool.
      const input = activationInput(`waiter ${i}`)
      fibers.push(yield* Effect.fork(wasm.runLoop(module, { ...input, runtime: { ...input.runtime, session_id: `ses_waiter${i}` } }, host)))
      yield* Deferred.await(inCall).pipe(Effect.timeout(STUCK))
    }
    return fibers
  })

describe("a guest waiting in a host call on a worker thread", () => {
  it.scopedLive("with BRAIN_WASM_INLINE_MS=0, more loops than loop threads wait in a host call that does not answer, and another loop's turn still completes on a worker while they all wait; then each waiter gets its own answer", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, threads: 2, inlineMs: 0, inlineAtAdmission: true, ...LIMITS })
      const waiter = yield* admit(wasm, calling("kv_read", '{"key":"k"}'))
      const quick = yield* admit(wasm, returning('{"ok":"quick"}'))
      const release = yield* Deferred.make<void>()
      const fibers = yield* waiting(wasm, waiter, release)
      expect(yield* wasm.runLoop(quick, activationInput(), hostWith({})).pipe(Effect.timeout(STUCK))).toBe("quick")
      for (const f of fibers) expect(Option.isNone(yield* Fiber.poll(f))).toBe(true)
      yield* Deferred.succeed(release, undefined)
      for (let i = 0; i < WAITERS; i++) {
        expect(yield* Fiber.join(fibers[i]!).pipe(Effect.timeout(STUCK))).toEqual({ found: true, value: `answer ${i}` })
      }
    }))

  it.scopedLive("loops moved off the main thread (computing past BRAIN_WASM_INLINE_MS) wait in a host call without holding their workers: another loop's turn on a worker completes while more of them than loop threads wait", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, threads: 2, inlineMs: 1, inlineAtAdmission: true, ...LIMITS })
      const waiter = yield* admit(wasm, computingThenCalling(50_000_000))
      const quick = yield* admit(wasm, computingThenCalling(50_000_000))
      const release = yield* Deferred.make<void>()
      const fibers = yield* waiting(wasm, waiter, release)
      expect(wasm.stats.moved).toBeGreaterThanOrEqual(WAITERS)
      const answered = hostWith({ kvRead: () => Effect.succeed(Option.some("quick")) })
      expect(yield* wasm.runLoop(quick, activationInput(), answered).pipe(Effect.timeout(STUCK))).toEqual({ found: true, value: "quick" })
      for (const f of fibers) expect(Option.isNone(yield* Fiber.poll(f))).toBe(true)
      yield* Deferred.succeed(release, undefined)
      for (let i = 0; i < WAITERS; i++) {
        expect(yield* Fiber.join(fibers[i]!).pipe(Effect.timeout(STUCK))).toEqual({ found: true, value: `answer ${i}` })
      }
    }))

  it.scopedLive("a waiting loop given up (its turn interrupted) leaves its thread serving: the other waiters still get their answers and the next loop completes", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, threads: 2, inlineMs: 0, inlineAtAdmission: true, ...LIMITS })
      const waiter = yield* admit(wasm, calling("kv_read", '{"key":"k"}'))
      const quick = yield* admit(wasm, returning('{"ok":"quick"}'))
      const release = yield* Deferred.make<void>()
      const fibers = yield* waiting(wasm, waiter, release)
      yield* Fiber.interrupt(fibers[0]!)
      yield* Deferred.succeed(release, undefined)
      for (let i = 1; i < WAITERS; i++) {
        expect(yield* Fiber.join(fibers[i]!).pipe(Effect.timeout(STUCK))).toEqual({ found: true, value: `answer ${i}` })
      }
      expect(yield* wasm.runLoop(quick, activationInput(), hostWith({})).pipe(Effect.timeout(STUCK))).toBe("quick")
    }))
})
