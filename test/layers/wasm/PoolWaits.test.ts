/**
 * No activation is left waiting on the pool (wasm/Pool.ts, wasm/Pinned.ts) for something that
 * will not come: a thread that dies while it is free, or while its activation waits for a compute
 * slot, gives up its place; an activation given up while it waits for a thread, a compute slot or
 * its own thread back takes nothing with it.
 *
 * Real worker threads; a thread "crashes" by having its worker stopped from outside the pool, as a
 * worker whose heap runs out is. No assertion is timed: every wait is on a Deferred, a fiber or a
 * polled state, bounded by a generous timeout that turns a hang into a failure.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber, Scope } from "effect"
import type { Worker } from "node:worker_threads"
import type { Activation } from "../../../src/layers/wasm/Activation.js"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { instrument } from "../../../src/layers/wasm/Instrument.js"
import { onPool } from "../../../src/layers/wasm/Pinned.js"
import { type GuestThread, Pool, POOL_CLOSED } from "../../../src/layers/wasm/Pool.js"
import { activationInput, admit, hostWith } from "../../support/wasmHost.js"
import { calling, returning, wat } from "../../support/wat.js"

const LIMITS = { computeMs: 0, ioBytes: 64 * 1024, memoryBytes: 4 * 1024 * 1024 }
const STUCK = Duration.seconds(30)

/** `effect`, or a failure naming `what` never happened when it hangs. */
const within = (what: string) => <A, E>(effect: Effect.Effect<A, E>) => Effect.timeoutFail(effect, { duration: STUCK, onTimeout: () => new Error(`stuck: ${what}`) })

/** Waits until `holds`. */
const until = (what: string, holds: () => boolean) =>
  Effect.gen(function*() {
    while (!holds()) yield* Effect.sleep("5 millis")
  }).pipe(within(what))

/** Workers keep modules by id: each compiled here gets its own. */
const ids = new WeakMap<WebAssembly.Module, string>()
let compiled = 0

/** Compiles `text` and its twin. */
const modulesOf = (text: string) =>
  Effect.promise(async () => {
    const bytes = await wat(text)
    const plain = new WebAssembly.Module(bytes)
    ids.set(plain, `guest-${compiled++}`)
    return { plain, twin: new WebAssembly.Module(instrument(bytes)) }
  })

/** Stops `thread`'s worker from outside the pool (as its heap running out does), and waits until the thread knows. */
const crash = (thread: GuestThread) =>
  Effect.zipRight(
    Effect.sync(() => void (thread as unknown as { readonly worker: Worker }).worker.terminate()),
    until("the thread's death", () => thread.dead)
  )

/** An activation of `module` that counts its beginnings in `began` and answers each host call with `perform`. */
const activationOf = (module: WebAssembly.Module, began: { count: number }, perform: Activation["perform"] = () => Effect.die("no host call expected")): Activation => ({
  moduleId: ids.get(module)!,
  module,
  memory: { initial: 1, maximum: undefined },
  entry: "brain_run",
  input: '{"go":true}',
  perform,
  began: () => void began.count++
})

/** A pool of `size`, closed with the test's scope. */
const poolOf = (size: { readonly compute: number; readonly threads: number }) =>
  Effect.tap(Effect.sync(() => new Pool(size)), (pool) => Effect.addFinalizer(() => pool.close))

/**
 * Runs `run` with the pool's one compute slot held here, and crashes `thread` once `run` took it
 * (it then waits for the slot); then gives the slot back. `run`'s fiber.
 */
const diesWaitingForSlot = <A, E>(pool: Pool, thread: GuestThread, run: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    expect(pool.compute.tryTake()).toBe(true)
    const fiber = yield* Effect.fork(run)
    yield* until("the activation on its thread", () => thread.busy)
    yield* crash(thread)
    pool.compute.give()
    return fiber
  })

/** A started, loaded thread of `pool` that the next activation of `kind` takes (handed back free). */
const loadedThread = (pool: Pool, kind: "pinned" | "tool") =>
  Effect.gen(function*() {
    const thread = pool.tryAcquire(kind)!
    yield* Effect.promise(() => thread.ready)
    pool.releaseNow(thread, true)
    return thread
  })

/** A pinned reader suspended in its host call on `pool`, answered once `release` is done; its fiber and how often it began and called. */
const suspendedReader = (pool: Pool, release: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const reader = yield* modulesOf(calling("kv_read", '{"key":"k"}'))
    const inCall = yield* Deferred.make<void>()
    const counts = { count: 0, performed: 0 }
    const fiber = yield* Effect.fork(onPool(pool, LIMITS, activationOf(reader.plain, counts, () => {
      counts.performed++
      return Effect.zipRight(Deferred.succeed(inCall, undefined), Effect.as(Deferred.await(release), '{"ok":"answered"}'))
    }), reader.twin))
    yield* Deferred.await(inCall).pipe(within("the reader in its call"))
    return { fiber, counts }
  })

describe("a thread that dies leaves no activation waiting", () => {
  it.scopedLive("a free shared thread that dies gives up its place: a loop waiting for a thread gets a new one, and the guest pinned there runs again and completes", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 2, threads: 3 })
      const release = yield* Deferred.make<void>()
      const reader = yield* suspendedReader(pool, release)
      const shared = pool.tryAcquire("pinned")!
      pool.releaseNow(shared, true)
      expect(shared.pins).toBe(1)
      // The other two threads held (tools), the loop finds no thread it may take (one with pins is not for a loop).
      const held = [pool.tryAcquire("tool")!, pool.tryAcquire("tool")!]
      expect(held).not.toContain(shared)
      const loop = yield* Effect.fork(pool.acquire("loop"))
      yield* until("the loop waiting", () => pool.waiters === 1)
      yield* crash(shared)
      const got = yield* Fiber.join(loop).pipe(within("the loop's thread"))
      expect(got.dead).toBe(false)
      expect(held).not.toContain(got)
      pool.releaseNow(got, true)
      for (const t of held) pool.releaseNow(t, true)
      yield* Deferred.succeed(release, undefined)
      expect(yield* Fiber.join(reader.fiber).pipe(within("the reader's end"))).toBe('{"ok":"answered"}')
      expect(reader.counts.count).toBe(2)
      expect(reader.counts.performed).toBe(1)
    }))

  it.scopedLive("an idle thread that dies is not handed out: the next activation runs on a new thread", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const idle = yield* loadedThread(pool, "tool")
      yield* crash(idle)
      const quick = yield* modulesOf(returning('{"ok":"quick"}'))
      const began = { count: 0 }
      expect(yield* onPool(pool, LIMITS, activationOf(quick.plain, began), undefined).pipe(within("the activation's end"))).toBe('{"ok":"quick"}')
      expect(began.count).toBe(1)
    }))

  it.scopedLive("a pinned activation whose thread dies while it waits for a compute slot to start runs on another thread and completes", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const thread = yield* loadedThread(pool, "pinned")
      const quick = yield* modulesOf(returning('{"ok":"quick"}'))
      const began = { count: 0 }
      const run = yield* diesWaitingForSlot(pool, thread, onPool(pool, LIMITS, activationOf(quick.plain, began), quick.twin))
      expect(yield* Fiber.join(run).pipe(within("the activation's end"))).toBe('{"ok":"quick"}')
      expect(began.count).toBe(1)
      expect(pool.compute.available).toBe(1)
    }))

  it.scopedLive("a pinned activation whose thread dies after it took it back for its answer, while it waits for a compute slot, runs again from the record and completes", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const release = yield* Deferred.make<void>()
      const reader = yield* suspendedReader(pool, release)
      const thread = pool.tryAcquire("pinned")!
      pool.releaseNow(thread, true)
      expect(thread.pins).toBe(1)
      expect(pool.compute.tryTake()).toBe(true)
      yield* Deferred.succeed(release, undefined)
      // Answered, it takes its thread back, and waits for the slot held here.
      yield* until("the reader back on its thread", () => thread.busy)
      yield* crash(thread)
      pool.compute.give()
      expect(yield* Fiber.join(reader.fiber).pipe(within("the reader's end"))).toBe('{"ok":"answered"}')
      expect(reader.counts.count).toBe(2)
      expect(reader.counts.performed).toBe(1)
      expect(pool.compute.available).toBe(1)
    }))

  it.scopedLive("a blocking activation whose thread dies while it waits for a compute slot fails with the worker's death, and gives back what it held", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const thread = yield* loadedThread(pool, "tool")
      const quick = yield* modulesOf(returning('{"ok":"quick"}'))
      const run = yield* diesWaitingForSlot(pool, thread, onPool(pool, LIMITS, activationOf(quick.plain, { count: 0 }), undefined))
      const exit = yield* Fiber.await(run).pipe(within("the activation's end"))
      expect(exit).toEqual(Exit.fail({ _tag: "guest", message: expect.stringMatching(/the worker exited/) }))
      expect(pool.compute.available).toBe(1)
      // The pool serves on.
      expect(yield* onPool(pool, LIMITS, activationOf(quick.plain, { count: 0 }), undefined).pipe(within("the next activation's end"))).toBe('{"ok":"quick"}')
    }))
})

/** Makes the next thread `pool` starts die while it loads: its worker is stopped as it is made, before it can load. The threads so made. */
const nextThreadDiesLoading = (pool: Pool) => {
  const patched = pool as unknown as { spawn: () => GuestThread }
  const born: Array<GuestThread> = []
  patched.spawn = () => {
    delete (patched as { spawn?: unknown }).spawn
    const thread = patched.spawn()
    void (thread as unknown as { readonly worker: Worker }).worker.terminate()
    born.push(thread)
    return thread
  }
  return born
}

describe("a pinned activation whose thread dies while it loads", () => {
  it.scopedLive("runs on another thread and completes: nothing of its guest had run", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const quick = yield* modulesOf(returning('{"ok":"quick"}'))
      const began = { count: 0 }
      const born = nextThreadDiesLoading(pool)
      expect(yield* onPool(pool, LIMITS, activationOf(quick.plain, began), quick.twin).pipe(within("the activation's end"))).toBe('{"ok":"quick"}')
      expect(born.length).toBe(1)
      expect(born[0]!.dead).toBe(true)
      expect(born[0]!.loaded).toBe(true)
      expect(began.count).toBe(1)
      expect(pool.compute.available).toBe(1)
    }))

  it.scopedLive("running again after a thread died with its instance, it keeps the record: its host call answered before is not performed again", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const release = yield* Deferred.make<void>()
      const reader = yield* suspendedReader(pool, release)
      const first = pool.tryAcquire("pinned")!
      pool.releaseNow(first, true)
      expect(first.pins).toBe(1)
      // Its thread dies while its call is performed; the thread it runs again on dies while it loads.
      const born = nextThreadDiesLoading(pool)
      yield* crash(first)
      yield* Deferred.succeed(release, undefined)
      expect(yield* Fiber.join(reader.fiber).pipe(within("the reader's end"))).toBe('{"ok":"answered"}')
      expect(born.length).toBe(1)
      expect(born[0]!.dead).toBe(true)
      expect(reader.counts.performed).toBe(1)
      expect(reader.counts.count).toBe(2)
    }))
})

describe("a thread whose worker died", () => {
  it.scopedLive("told to run a job, reports its death to the job's listener instead of nothing", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const thread = yield* loadedThread(pool, "tool")
      expect(pool.tryAcquire("tool")).toBe(thread)
      yield* crash(thread)
      const quick = yield* modulesOf(returning('{"ok":"quick"}'))
      const told = yield* Deferred.make<string>()
      thread.listener = (event) => Deferred.unsafeDone(told, Exit.succeed(event.type))
      thread.start({ moduleId: ids.get(quick.plain)!, entry: "brain_run", input: new Uint8Array(2), memory: { initial: 1, maximum: 1 }, maxRequestBytes: 1024 }, quick.plain)
      expect(yield* Deferred.await(told).pipe(within("the job's event"))).toBe("died")
      pool.releaseNow(thread, false)
    }))
})

describe("an activation given up while it waits takes nothing with it", () => {
  it.scopedLive("interrupted while it waits for a thread: the thread released next goes to the waiter behind it", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const held = [pool.tryAcquire("tool")!, pool.tryAcquire("tool")!]
      const first = yield* Effect.fork(pool.acquire("tool"))
      yield* until("the first waiting", () => pool.waiters === 1)
      const second = yield* Effect.fork(pool.acquire("tool"))
      yield* until("the second waiting", () => pool.waiters === 2)
      yield* Fiber.interrupt(first)
      expect(pool.waiters).toBe(1)
      pool.releaseNow(held[0]!, true)
      expect(yield* Fiber.join(second).pipe(within("the second's thread"))).toBe(held[0])
    }))

  it.scopedLive("interrupted while it waits for a compute slot: the slot given back next goes to the waiter behind it", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      expect(pool.compute.tryTake()).toBe(true)
      const first = yield* Effect.fork(pool.compute.take)
      const second = yield* Effect.fork(pool.compute.take)
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(first)
      pool.compute.give()
      yield* Fiber.join(second).pipe(within("the second's slot"))
      pool.compute.give()
      expect(pool.compute.available).toBe(1)
    }))

  it.scopedLive("a pinned activation interrupted while its answer waits for its busy thread drops its pin: the thread, given back, serves the next activation", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const release = yield* Deferred.make<void>()
      const reader = yield* suspendedReader(pool, release)
      // Its thread held here: the answer waits for it.
      const thread = pool.tryAcquire("pinned")!
      expect(thread.pins).toBe(1)
      yield* Deferred.succeed(release, undefined)
      yield* until("the reader waiting for its thread", () => thread.resumers.length === 1)
      yield* Fiber.interrupt(reader.fiber)
      expect(thread.resumers.length).toBe(0)
      expect(thread.pins).toBe(0)
      pool.releaseNow(thread, true)
      const quick = yield* modulesOf(returning('{"ok":"quick"}'))
      expect(yield* onPool(pool, LIMITS, activationOf(quick.plain, { count: 0 }), quick.twin).pipe(within("the next activation's end"))).toBe('{"ok":"quick"}')
      expect(thread.dead).toBe(false)
      expect(pool.compute.available).toBe(1)
    }))
})

describe("a closed pool leaves no activation waiting", () => {
  it.scopedLive("closed while activations of every kind wait for a thread, it fails each of them with the stop at once, and refuses every later activation without running its guest", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const held = [pool.tryAcquire("tool")!, pool.tryAcquire("tool")!]
      const waiters = [
        yield* Effect.fork(pool.acquire("tool")),
        yield* Effect.fork(pool.acquire("loop")),
        yield* Effect.fork(pool.acquirePinned)
      ]
      yield* until("three waiting", () => pool.waiters === 3)
      yield* pool.close
      for (const w of waiters) expect(yield* Fiber.await(w).pipe(within("a waiter's end"))).toEqual(Exit.fail(POOL_CLOSED))
      expect(pool.waiters).toBe(0)
      const quick = yield* modulesOf(returning('{"ok":"quick"}'))
      const began = { count: 0 }
      for (const twin of [undefined, quick.twin]) {
        const exit = yield* Effect.exit(onPool(pool, LIMITS, activationOf(quick.plain, began), twin)).pipe(within("a later activation's end"))
        expect(exit).toEqual(Exit.fail(POOL_CLOSED))
      }
      expect(began.count).toBe(0)
      expect(pool.tryAcquire("tool")).toBeUndefined()
      for (const t of held) pool.releaseNow(t, true)
      expect(held.every((t) => t.dead)).toBe(true)
    }))

  it.scopedLive("a loop's activation on a WasmHost whose pool closed fails interrupted, \"the server is stopping\", without running its guest", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const wasm = yield* Scope.extend(WasmHostWorkers.make({ workers: 1, threads: 2, inlineMs: 0, inlineAtAdmission: true, ...LIMITS, moduleBytes: 256 * 1024 }), scope)
      const quick = yield* admit(wasm, returning('{"ok":"quick"}'))
      yield* Scope.close(scope, Exit.void)
      const failed = yield* Effect.flip(wasm.runLoop(quick, activationInput(), hostWith({}))).pipe(within("the activation's end"))
      expect(failed.failure.code).toBe("interrupted")
      expect(failed.failure.message).toBe(POOL_CLOSED.message)
    }))

  it.scopedLive("a tool's activation on a WasmHost whose pool closed ends stopped, \"the server is stopping\", not as the tool's error, without running its guest", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const wasm = yield* Scope.extend(WasmHostWorkers.make({ workers: 1, threads: 2, inlineMs: 0, inlineAtAdmission: true, ...LIMITS, moduleBytes: 256 * 1024 }), scope)
      const quick = yield* admit(wasm, returning('{"ok":"quick"}', "brain_tool"))
      yield* Scope.close(scope, Exit.void)
      let began = 0
      const run = yield* wasm.runTool(quick, { input: {}, call: { session_id: "ses_1", sequence: 1, name: "t", deadline_at_ms: 0 } }, {
        emit: () => Effect.die("no emit expected"),
        telemetry: () => Effect.void,
        began: () => void began++
      }).pipe(within("the activation's end"))
      expect(run).toEqual({ _tag: "stopped", message: POOL_CLOSED.message })
      expect(began).toBe(0)
    }))

  it.scopedLive("a pinned activation whose host call is answered after the pool closed ends with the stop, not waiting for a thread", () =>
    Effect.gen(function*() {
      const pool = yield* poolOf({ compute: 1, threads: 2 })
      const release = yield* Deferred.make<void>()
      const reader = yield* suspendedReader(pool, release)
      // Its thread held here, and given back after the close: terminated, so its answer runs again, on no thread.
      const thread = pool.tryAcquire("pinned")!
      yield* pool.close
      yield* Deferred.succeed(release, undefined)
      yield* until("the reader waiting for its thread", () => thread.resumers.length === 1)
      pool.releaseNow(thread, true)
      expect(yield* Fiber.await(reader.fiber).pipe(within("the reader's end"))).toEqual(Exit.fail(POOL_CLOSED))
      expect(reader.counts.performed).toBe(1)
      expect(pool.compute.available).toBe(1)
    }))
})
