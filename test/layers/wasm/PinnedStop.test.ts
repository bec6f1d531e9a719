/**
 * A pinned guest (its module's twin, wasm/Pinned.ts) whose activation is given up while it
 * computes — interrupted, as a cancel ignored past its grace, a tool's deadline or a server stop
 * do, or failed at its budget when its metering did not stop it in time — is stopped by its twin's
 * metering, which reads the thread's STOP word where it reads the clock: its thread is not terminated, so the guests pinned beside it, suspended in their host
 * calls, are not run again from the record. A guest that does not heed the word (no metering), or
 * has no twin, still has its thread terminated.
 *
 * Real worker threads. No assertion is timed: what is counted is how many times each activation
 * began (a guest whose thread died begins again elsewhere), and whether the thread died; every
 * wait is on a Deferred, bounded by a generous timeout that turns a hang into a failure.
 */
import { describe, expect, it, vi } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber } from "effect"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { type Activation, overBudget } from "../../../src/layers/wasm/Activation.js"
import { instrument } from "../../../src/layers/wasm/Instrument.js"
import { BACKSTOP_MS, onPool } from "../../../src/layers/wasm/Pinned.js"
import { type GuestThread, Pool } from "../../../src/layers/wasm/Pool.js"
import { admit } from "../../support/wasmHost.js"
import { calling, data, guest, wat } from "../../support/wat.js"

const LIMITS = { computeMs: 0, ioBytes: 64 * 1024, memoryBytes: 4 * 1024 * 1024 }
const STUCK = Duration.seconds(30)

/**
 * Spins until stopped. A loop's module also exports its entry's step (TwinExports.ts,
 * STEP_EXPORTS), spinning too, so that the plain module run as a twin is a twin without metering
 * (its twin, made by Instrument.ts, drops the export and adds its own).
 */
const spinning = (entry: "brain_run" | "brain_tool" = "brain_run") =>
  guest(`(func (export "${entry}") (param i32 i32) (result i64) (loop $l (br $l)) (unreachable))${
    entry === "brain_run" ? `(func (export "brain$run") (param i32 i32 i32 i32 i32) (result i64) (loop $l (br $l)) (unreachable))` : ""
  }`)

/** Compiles `text` and its twin. */
const modulesOf = (text: string) =>
  Effect.promise(async () => {
    const bytes = await wat(text)
    return { plain: new WebAssembly.Module(bytes), twin: new WebAssembly.Module(instrument(bytes)) }
  })

/** An activation of `module` that counts its beginnings in `began` and answers each host call with `perform`. */
const activationOf = (
  id: string,
  module: WebAssembly.Module,
  began: { count: number; readonly started?: Deferred.Deferred<void> },
  perform: Activation["perform"] = () => Effect.die("no host call expected")
): Activation => ({
  moduleId: id,
  module,
  memory: { initial: 1, maximum: undefined },
  entry: "brain_run",
  input: '{"go":true}',
  perform,
  began: () => {
    began.count++
    if (began.started !== undefined) Deferred.unsafeDone(began.started, Exit.void)
  }
})

/** The thread the next activation of `kind` takes on an unused pool (started here, handed back free). */
const nextThread = (pool: Pool, kind: "pinned" | "tool"): GuestThread => {
  const thread = pool.tryAcquire(kind)!
  pool.releaseNow(thread, true)
  return thread
}

/**
 * On a pool of one compute slot (so one shared thread): A waits pinned in a `kv_read` until
 * `release`; then B (`spinner` as its twin) starts on the same thread and is given up by `giveUp`
 * once it began. What each began, and the thread A and B shared.
 */
const besideAWaiter = <E>(
  spinner: "twin" | "plain",
  giveUp: (b: Effect.Effect<string, unknown>, started: Deferred.Deferred<void>) => Effect.Effect<Exit.Exit<string, unknown>, E>,
  limits: typeof LIMITS = LIMITS
) =>
  Effect.gen(function*() {
    const pool = new Pool({ compute: 1, threads: 2 })
    yield* Effect.addFinalizer(() => pool.close)
    const shared = nextThread(pool, "pinned")
    const waiter = yield* modulesOf(calling("kv_read", '{"key":"k"}'))
    const spinner_ = yield* modulesOf(spinning())
    const inCall = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const a = { count: 0 }
    let performed = 0
    const aRun = yield* Effect.fork(onPool(pool, LIMITS, activationOf("waiter", waiter.plain, a, () => {
      performed++
      return Effect.zipRight(Deferred.succeed(inCall, undefined), Effect.as(Deferred.await(release), '{"ok":"answered"}'))
    }), waiter.twin))
    yield* Deferred.await(inCall).pipe(Effect.timeout(STUCK))
    const b = { count: 0, started: yield* Deferred.make<void>() }
    const bRun = onPool(pool, limits, activationOf("spinner", spinner_.plain, b), spinner === "plain" ? spinner_.plain : spinner_.twin)
    const bExit = yield* giveUp(bRun, b.started)
    const sharedDied = shared.dead
    yield* Deferred.succeed(release, undefined)
    const aOutput = yield* Fiber.join(aRun).pipe(Effect.timeout(STUCK))
    return { a: a.count, b: b.count, bExit, aOutput, performed, sharedDied, pool, shared }
  })

/**
 * The shared thread was kept: the waiter beside the stopped guest began once and completed with
 * its answer, and the stopped guest gave back what it held (its compute slot and its pin).
 */
const keptBeside = (r: Effect.Effect.Success<ReturnType<typeof besideAWaiter>>) => {
  expect(r.aOutput).toBe('{"ok":"answered"}')
  expect(r.a).toBe(1)
  expect(r.performed).toBe(1)
  expect(r.shared.dead).toBe(false)
  expect(r.pool.compute.available).toBe(1)
  expect(r.shared.pins).toBe(0)
}

/** Interrupts `run` once its guest began. */
const interrupted = (run: Effect.Effect<string, unknown>, started: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(run)
    yield* Deferred.await(started).pipe(Effect.timeout(STUCK))
    yield* Fiber.interrupt(fiber)
    return yield* Fiber.await(fiber)
  })

describe("a pinned guest given up while it computes", () => {
  it.scopedLive("interrupted, it is stopped by its metering and its thread kept: the guest waiting in a host call on the same thread is not run again and completes with its answer", () =>
    Effect.gen(function*() {
      const r = yield* besideAWaiter("twin", interrupted)
      expect(Exit.isInterrupted(r.bExit)).toBe(true)
      expect(r.sharedDied).toBe(false)
      keptBeside(r)
      // The thread serves on: the next pinned activation runs there and completes.
      const next = { count: 0 }
      const quick = yield* modulesOf(calling("kv_read", '{"key":"q"}'))
      const out = yield* onPool(r.pool, LIMITS, activationOf("quick", quick.plain, next, () => Effect.succeed('{"ok":"quick"}')), quick.twin).pipe(Effect.timeout(STUCK))
      expect(out).toBe('{"ok":"quick"}')
      expect(r.shared.dead).toBe(false)
    }))

  it.scopedLive("past its deadline (a timeout around its run, as a tool's timeout_ms), it is stopped the same way: the waiter beside it is not run again", () =>
    Effect.gen(function*() {
      const r = yield* besideAWaiter("twin", (run, started) =>
        Effect.gen(function*() {
          // Its deadline counts from its start (not from its wait for the thread).
          const deadline = Effect.zipRight(Deferred.await(started), Effect.zipRight(Effect.sleep("50 millis"), Effect.fail("timeout")))
          return yield* Effect.exit(Effect.raceFirst(run, deadline)).pipe(Effect.timeout(STUCK))
        }))
      expect(r.bExit).toEqual(Exit.fail("timeout"))
      expect(r.sharedDied).toBe(false)
      expect(r.aOutput).toBe('{"ok":"answered"}')
      expect(r.a).toBe(1)
    }))

  it.scopedLive("a guest that does not heed the stop (its twin has no metering) has its thread terminated after all: the waiter beside it runs again, its host call answered from the record, and completes", () =>
    Effect.gen(function*() {
      const r = yield* besideAWaiter("plain", interrupted)
      expect(Exit.isInterrupted(r.bExit)).toBe(true)
      expect(r.aOutput).toBe('{"ok":"answered"}')
      expect(r.shared.dead).toBe(true)
      expect(r.a).toBe(2)
      expect(r.performed).toBe(1)
    }))

  it.scopedLive("past its compute budget and the backstop, its metering late (its worker waiting for a core), it fails at its budget and is stopped by the STOP word: its thread is kept and the waiter beside it is not run again", () =>
    Effect.gen(function*() {
      // A budget no other timer of this test uses, so long that the guest's own metering never
      // stops it here: its backstop's timer is caught, and fired by the test, as it fires when the
      // worker has not had a core for the budget and BACKSTOP_MS.
      const limits = { ...LIMITS, computeMs: 54_321 }
      const real = globalThis.setTimeout
      let backstop: (() => void) | undefined
      const set = vi.spyOn(globalThis, "setTimeout").mockImplementation(((f: () => void, ms?: number) => {
        if (ms !== limits.computeMs + BACKSTOP_MS) return real(f, ms)
        backstop = f
        return real(() => {}, 2 ** 31 - 1)
      }) as typeof setTimeout)
      yield* Effect.addFinalizer(() => Effect.sync(() => set.mockRestore()))
      const r = yield* besideAWaiter("twin", (run, started) =>
        Effect.gen(function*() {
          const fiber = yield* Effect.fork(run)
          yield* Deferred.await(started).pipe(Effect.timeout(STUCK))
          while (backstop === undefined) yield* Effect.sleep("5 millis")
          backstop()
          return yield* Fiber.await(fiber).pipe(Effect.timeout(STUCK))
        }), limits)
      expect(r.bExit).toEqual(Exit.fail(overBudget(limits)))
      keptBeside(r)
    }))

  it.scopedLive("past its compute budget, heeding neither its budget nor the STOP word (its twin has no metering), it fails at its budget and has its thread terminated: the waiter beside it runs again and completes", () =>
    Effect.gen(function*() {
      const r = yield* besideAWaiter("plain", (run) => Effect.exit(run).pipe(Effect.timeout(STUCK)), { ...LIMITS, computeMs: 1 })
      expect(r.bExit).toEqual(Exit.fail(overBudget({ ...LIMITS, computeMs: 1 })))
      expect(r.aOutput).toBe('{"ok":"answered"}')
      expect(r.shared.dead).toBe(true)
      expect(r.a).toBe(2)
      expect(r.performed).toBe(1)
      expect(r.pool.compute.available).toBe(1)
    }))

  it.scopedLive("a guest without a twin, interrupted while it computes, has its thread terminated as before, and the pool serves the next activation", () =>
    Effect.gen(function*() {
      const pool = new Pool({ compute: 1, threads: 2 })
      yield* Effect.addFinalizer(() => pool.close)
      const thread = nextThread(pool, "tool")
      const spinner = yield* modulesOf(spinning())
      const b = { count: 0, started: yield* Deferred.make<void>() }
      const exit = yield* interrupted(onPool(pool, LIMITS, activationOf("spinner", spinner.plain, b), undefined), b.started)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(thread.dead).toBe(true)
      const quick = yield* modulesOf(calling("kv_read", '{"key":"q"}'))
      const out = yield* onPool(pool, LIMITS, activationOf("quick", quick.plain, { count: 0 }, () => Effect.succeed('{"ok":"quick"}')), undefined).pipe(Effect.timeout(STUCK))
      expect(out).toBe('{"ok":"quick"}')
    }))
})

describe("a Wasm tool given up while it computes, beside a pinned tool waiting in a host call", () => {
  /** Emits `waiting` and returns what the emit answered. */
  const emitting = (() => {
    const op = data(200, "emit")
    const req = data(300, '{"kind":"waiting"}')
    return guest(`${op.segment} ${req.segment}
      (func (export "brain_tool") (param i32 i32) (result i64)
        (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${req.ptr}) (i32.const ${req.len})))`)
  })()

  it.scopedLive("the spinning tool's abort (a cancel, its deadline) stops it without terminating the shared thread: the waiting tool begins once and completes with its emit's answer", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, threads: 2, inlineMs: 0, inlineAtAdmission: true, moduleBytes: 256 * 1024, ...LIMITS })
      const waiter = yield* admit(wasm, emitting)
      const spinner = yield* admit(wasm, spinning("brain_tool"))
      const inEmit = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      let waiterBegan = 0
      const call = { session_id: "ses_0000000000test0000000000", sequence: 5, name: "t", deadline_at_ms: 0 }
      const waiting = yield* Effect.fork(wasm.runTool(waiter, { input: {}, call }, {
        emit: () => Effect.zipRight(Deferred.succeed(inEmit, undefined), Effect.as(Deferred.await(release), 7)),
        telemetry: () => Effect.void,
        began: () => void waiterBegan++
      }))
      yield* Deferred.await(inEmit).pipe(Effect.timeout(STUCK))
      const started = yield* Deferred.make<void>()
      const spin = yield* Effect.fork(wasm.runTool(spinner, { input: {}, call: { ...call, sequence: 6 } }, {
        emit: () => Effect.die("no emit expected"),
        telemetry: () => Effect.void,
        began: () => Deferred.unsafeDone(started, Exit.void)
      }))
      yield* Deferred.await(started).pipe(Effect.timeout(STUCK))
      yield* Fiber.interrupt(spin)
      yield* Deferred.succeed(release, undefined)
      const run = yield* Fiber.join(waiting).pipe(Effect.timeout(STUCK))
      expect(run).toEqual({ _tag: "ok", output: { sequence: 7 } })
      expect(waiterBegan).toBe(1)
    }))
})
