/**
 * Pinned activations waiting for room on the shared threads (wasm/Pool.ts, wasm/Pinned.ts): each
 * shared thread keeps PINS_PER_THREAD suspended guests at most, and those may wait on host calls
 * that never answer. An activation that found room but waited for a busy thread must not then wait
 * for a pin to end once the room is gone: it runs blocking a thread instead. And room a pin frees
 * on a free thread goes to an activation waiting for it at once.
 *
 * Real worker threads. No assertion is timed: every wait is on a Deferred or on the pool's count of
 * waiters, bounded by a generous timeout that turns a hang into a failure.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber } from "effect"
import type { Activation } from "../../../src/layers/wasm/Activation.js"
import { instrument } from "../../../src/layers/wasm/Instrument.js"
import { onPool } from "../../../src/layers/wasm/Pinned.js"
import { type GuestThread, PINS_PER_THREAD, Pool } from "../../../src/layers/wasm/Pool.js"
import { calling, wat } from "../../support/wat.js"

const LIMITS = { computeMs: 0, ioBytes: 64 * 1024, memoryBytes: 4 * 1024 * 1024 }
const STUCK = Duration.seconds(30)

/** `effect`, or a failure naming `what` never happened when it hangs. */
const within = (what: string) => <A, E>(effect: Effect.Effect<A, E>) => Effect.timeoutFail(effect, { duration: STUCK, onTimeout: () => new Error(`stuck: ${what}`) })

const reader = Effect.promise(async () => {
  const bytes = await wat(calling("kv_read", '{"key":"k"}'))
  return { plain: new WebAssembly.Module(bytes), twin: new WebAssembly.Module(instrument(bytes)) }
})

type Modules = Effect.Effect.Success<typeof reader>

/** An activation of the reader whose host call `perform` answers. */
const activationOf = (modules: Modules, perform: Activation["perform"]): Activation => ({
  moduleId: "reader",
  module: modules.plain,
  memory: { initial: 1, maximum: undefined },
  entry: "brain_run",
  input: '{"go":true}',
  perform
})

/** The thread the next pinned activation takes on an unused pool (started here, handed back free). */
const nextThread = (pool: Pool): GuestThread => {
  const thread = pool.tryAcquire("pinned")!
  pool.releaseNow(thread, true)
  return thread
}

/** Starts `n` pinned readers, one after another, each waiting in its host call until `release`. */
const waiters = (pool: Pool, modules: Modules, n: number, release: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const fibers: Array<Fiber.RuntimeFiber<string, unknown>> = []
    for (let i = 0; i < n; i++) {
      const inCall = yield* Deferred.make<void>()
      fibers.push(yield* Effect.fork(onPool(pool, LIMITS, activationOf(modules, () => Effect.zipRight(Deferred.succeed(inCall, undefined), Effect.as(Deferred.await(release), '{"ok":"late"}'))), modules.twin)))
      yield* Deferred.await(inCall).pipe(within(`waiter ${i} in its call`))
    }
    return fibers
  })

/** Waits until `n` activations wait for a thread of the pool. */
const waitingFor = (pool: Pool, n: number) =>
  Effect.gen(function*() {
    while (pool.waiters < n) yield* Effect.sleep("5 millis")
  }).pipe(within(`${n} waiting`))

const answered = (modules: Modules) => activationOf(modules, () => Effect.succeed('{"ok":"now"}'))

describe("pinned activations waiting for room on the shared threads", () => {
  it.scopedLive("one that waited for the busy shared thread while it still had room, and finds it full when it is free, runs blocking instead of waiting for a pin to end", () =>
    Effect.gen(function*() {
      const pool = new Pool({ compute: 1, threads: 2 })
      yield* Effect.addFinalizer(() => pool.close)
      const modules = yield* reader
      const shared = nextThread(pool)
      const release = yield* Deferred.make<void>()
      const pinned = yield* waiters(pool, modules, PINS_PER_THREAD - 1, release)
      expect(shared.pins).toBe(PINS_PER_THREAD - 1)
      // Held busy: the next two find room (one pin) but wait for the thread.
      expect(pool.tryAcquire("pinned")).toBe(shared)
      const last = yield* Effect.fork(onPool(pool, LIMITS, activationOf(modules, () => Effect.as(Deferred.await(release), '{"ok":"late"}')), modules.twin))
      yield* waitingFor(pool, 1)
      const late = yield* Effect.fork(onPool(pool, LIMITS, answered(modules), modules.twin))
      yield* waitingFor(pool, 2)
      pool.releaseNow(shared, true)
      // The first takes the last pin; the second runs on a thread of its own, while every pin still waits.
      expect(yield* Fiber.join(late).pipe(within("the late activation's end"))).toBe('{"ok":"now"}')
      expect(shared.pins).toBe(PINS_PER_THREAD)
      yield* Deferred.succeed(release, undefined)
      for (const f of [...pinned, last]) expect(yield* Fiber.join(f).pipe(within("a waiter's end"))).toBe('{"ok":"late"}')
    }))

  it.scopedLive("a pin that ends on a free full thread makes room for an activation waiting for a shared thread: it runs there at once, though the other shared thread stays busy", () =>
    Effect.gen(function*() {
      const pool = new Pool({ compute: 2, threads: 3 })
      yield* Effect.addFinalizer(() => pool.close)
      const modules = yield* reader
      const full = nextThread(pool)
      const release = yield* Deferred.make<void>()
      const pinned = yield* waiters(pool, modules, PINS_PER_THREAD, release)
      expect(full.pins).toBe(PINS_PER_THREAD)
      // The other shared thread, held busy: the next activation has room there, and waits for it.
      const other = pool.tryAcquire("pinned")!
      expect(other).not.toBe(full)
      const begun = full.instancesBegun
      const next = yield* Effect.fork(onPool(pool, LIMITS, answered(modules), modules.twin))
      yield* waitingFor(pool, 1)
      // One of the full thread's guests is given up in its host call: its pin ends there.
      yield* Fiber.interrupt(pinned[0]!)
      expect(yield* Fiber.join(next).pipe(within("the next activation's end"))).toBe('{"ok":"now"}')
      expect(full.instancesBegun).toBe(begun + 1)
      pool.releaseNow(other, true)
      yield* Deferred.succeed(release, undefined)
      for (const f of pinned.slice(1)) expect(yield* Fiber.join(f).pipe(within("a waiter's end"))).toBe('{"ok":"late"}')
    }))
})
