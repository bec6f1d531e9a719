/**
 * The pool's two bounds (wasm/Pool.ts): guests *computing* at once (BRAIN_WASM_WORKERS) and
 * threads (BRAIN_WASM_THREADS), counted apart because a guest blocked in a host call keeps its
 * thread but uses no CPU. Driven through WasmHostWorkers.make with a Host built here, so each
 * test decides when a host call answers.
 *
 * No assertion is timed: every wait is on a Deferred, bounded by a generous timeout that turns a
 * deadlock into a failure instead of a hang.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Option } from "effect"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { activationInput, admit, hostWith } from "../../support/wasmHost.js"
import { calling, data, guest, returning } from "../../support/wat.js"

const LIMITS = { memoryBytes: 4 * 1024 * 1024, computeMs: 0, ioBytes: 64 * 1024, moduleBytes: 256 * 1024 }
const STUCK = Duration.seconds(30)

const INPUT = activationInput()

/** Reports telemetry (so the test knows it runs), then spins for ever. */
const announcedSpin = (() => {
  const op = data(200, "telemetry")
  const req = data(300, "{}")
  return guest(`${op.segment} ${req.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${req.ptr}) (i32.const ${req.len})))
      (loop $l (br $l)) (unreachable))`)
})()

/** A start function that makes a host call: it runs at instantiation, before any activation. */
const callingAtStart = (() => {
  const op = data(200, "telemetry")
  const req = data(300, "{}")
  const ok = data(400, '{"ok":"ran"}')
  return guest(`${op.segment} ${req.segment} ${ok.segment}
    (func $init (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${req.ptr}) (i32.const ${req.len}))))
    (start $init)
    (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const ${ok.ptr}) (i32.const ${ok.len})))`)
})()

describe("the guest pool", () => {
  it.scopedLive("a host call from a module's start function is ABI misuse: every activation of it fails agentloop_failed, none reaches the Host, and the pool serves the next guest", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, threads: 2, ...LIMITS })
      const bad = yield* admit(wasm, callingAtStart)
      const quick = yield* admit(wasm, returning('{"ok":"quick"}'))
      let reported = 0
      const host = hostWith({ telemetry: () => Effect.sync(() => void reported++) })
      for (let i = 0; i < 3; i++) {
        const failed = yield* Effect.flip(wasm.runLoop(bad, INPUT, host))
        expect(failed.failure.code).toBe("agentloop_failed")
        expect(failed.failure.message).toMatch(/start function/)
        expect(yield* wasm.runLoop(quick, INPUT, host)).toBe("quick")
      }
      expect(reported).toBe(0)
    }))

  it.scopedLive("a guest blocked in a host call holds no compute: with one compute slot, another guest runs to its end while the first waits", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, threads: 4, ...LIMITS })
      const waiter = yield* admit(wasm, calling("kv_read", '{"key":"k"}'))
      const quick = yield* admit(wasm, returning('{"ok":"quick"}'))
      const inCall = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const blocked = hostWith({
        kvRead: () => Effect.zipRight(Deferred.succeed(inCall, undefined), Effect.as(Deferred.await(release), Option.none()))
      })
      const first = yield* Effect.fork(wasm.runLoop(waiter, INPUT, blocked))
      yield* Deferred.await(inCall)
      // The first guest waits in kv_read; the only compute slot must be free for the second.
      expect(yield* wasm.runLoop(quick, INPUT, hostWith({})).pipe(Effect.timeout(STUCK))).toBe("quick")
      yield* Deferred.succeed(release, undefined)
      expect(yield* Fiber.join(first).pipe(Effect.timeout(STUCK))).toEqual({ found: false })
    }))

  it.scopedLive("at most BRAIN_WASM_WORKERS guests compute at once: with one slot taken by a spinning guest, the next guest starts only once it is stopped", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, threads: 4, ...LIMITS })
      const spin = yield* admit(wasm, announcedSpin)
      const reporter = yield* admit(wasm, calling("telemetry", '{"second":true}'))
      const spinning = yield* Deferred.make<void>()
      const spinner = yield* Effect.fork(wasm.runLoop(spin, INPUT, hostWith({ telemetry: () => Deferred.succeed(spinning, undefined) })))
      yield* Deferred.await(spinning)
      const reported = yield* Deferred.make<void>()
      const second = yield* Effect.fork(wasm.runLoop(reporter, INPUT, hostWith({ telemetry: () => Deferred.succeed(reported, undefined) })))
      // The spinner holds the slot (no compute budget): the second guest has a thread but may not run.
      yield* Effect.sleep(Duration.millis(300))
      expect(yield* Deferred.isDone(reported)).toBe(false)
      yield* Fiber.interrupt(spinner)
      yield* Deferred.await(reported).pipe(Effect.timeout(STUCK))
      expect(yield* Fiber.join(second).pipe(Effect.timeout(STUCK))).toBeNull()
    }))

  it.scopedLive("loops waiting on their Wasm tools never hold every thread: with 2 threads and one slot, two loops that each run a Wasm tool in their dispatch both finish", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, threads: 2, ...LIMITS })
      const tool = yield* admit(wasm, returning('{"ok":"tool ran"}', "brain_tool"))
      const loop = yield* admit(wasm, calling("dispatch", '{"calls":[{"id":"c1","name":"t","input":{}}]}'))
      const host = hostWith({
        dispatch: (calls) =>
          Effect.map(
            wasm.runTool(tool, { input: {}, call: { session_id: INPUT.runtime.session_id, sequence: 5, name: "t", deadline_at_ms: 0 } }, {
              emit: () => Effect.succeed(0),
              telemetry: () => Effect.void
            }),
            (run) => [{ call_id: calls[0]!.id, name: "t", outcome: run._tag === "ok" ? "ok" : "error", output: "output" in run ? run.output : run.message, is_error: run._tag !== "ok" }]
          )
      })
      const results = yield* Effect.all([wasm.runLoop(loop, INPUT, host), wasm.runLoop(loop, INPUT, host)], { concurrency: 2 }).pipe(
        Effect.timeout(STUCK)
      )
      for (const r of results) expect(r).toEqual([{ call_id: "c1", name: "t", outcome: "ok", output: "tool ran", is_error: false }])
    }))
})
