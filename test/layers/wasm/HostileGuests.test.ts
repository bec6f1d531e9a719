/**
 * Hostile guests (the sandbox audit): what a module's own names can reach of the instrumentation,
 * what a bulk operation costs it on the main thread, what a worker's heap bounds, and what an
 * instance made ahead may run (admission: Admission.test.ts). WAT fixtures compiled in the test;
 * modules that admission refuses are given straight to the layer below it where the test is of
 * that layer's own defence.
 *
 * No assertion is timed: where the main thread's freedom is the point, the test asserts what ran
 * (an activation that cannot complete within its budget fails with the budget's error); where a
 * worker's, what it began (each instantiation is counted as it begins).
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Exit } from "effect"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { activate, jsonBytes } from "../../../src/layers/wasm/Activation.js"
import { type InlineEnds, runInline } from "../../../src/layers/wasm/Inline.js"
import { instrument } from "../../../src/layers/wasm/Instrument.js"
import { Pool } from "../../../src/layers/wasm/Pool.js"
import { instanceStats } from "../../../src/layers/wasm/Spares.js"
import { activationInput, admit, hostWith } from "../../support/wasmHost.js"
import { data, guest, returning, wat } from "../../support/wat.js"

const LIMITS = { memoryBytes: 8 * 1024 * 1024, computeMs: 30_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }

const inlineHost = (inlineMs: number, limits: Partial<typeof LIMITS> = {}) =>
  WasmHostWorkers.make({ workers: 1, inlineMs, inlineAtAdmission: true, ...LIMITS, ...limits })

/** The twin the instrumenter itself makes of `bytes` (admission bypassed), and the plain module. */
const twinOf = (bytes: Uint8Array) => ({ twin: new WebAssembly.Module(instrument(bytes)), plain: new WebAssembly.Module(bytes) })

/** Runs one activation on the main thread with `modules.twin`: its output, or why it did not give one. */
const runTwin = (modules: ReturnType<typeof twinOf>, input: string, entry: "brain_run" | "brain_tool" = "brain_run") =>
  Effect.suspend(() => {
    const ends: InlineEnds<string, string> = {
      done: (output) => Effect.succeed(output),
      moved: (reason) => Effect.fail(`moved: ${reason}`),
      failed: (f) => Effect.fail(f.message)
    }
    return runInline(modules.twin, {
      moduleId: "admission-bypassed",
      module: modules.plain,
      memory: { initial: 4, maximum: undefined },
      entry,
      input,
      perform: () => Effect.die("no host call expected")
    }, { ...LIMITS, inlineMs: 1_000 }, ends)
  })

/**
 * The audit's leak: exports a global named `brain$written` (the twin's count of the bytes its
 * guest wrote, which says how much of the memory to zero) and writes with `memory.copy` (so the
 * twin adds no count of its own). Returns what the previous activation left at 70000 (`null` when
 * nothing), then keeps its own input there.
 */
const leaking = (entry: "brain_run" | "brain_tool") => {
  const pre = data(100, '{"ok":')
  const none = data(120, "null")
  const close = data(130, "}")
  return guest(`${pre.segment} ${none.segment} ${close.segment}
    (global (export "brain$written") i32 (i32.const 0))
    (func (export "${entry}") (param $ip i32) (param $il i32) (result i64)
      (local $o i32) (local $n i32)
      (local.set $n (i32.load (i32.const 70000)))
      (local.set $o (call $alloc (i32.add (local.get $n) (i32.const 16))))
      (memory.copy (local.get $o) (i32.const ${pre.ptr}) (i32.const ${pre.len}))
      (if (i32.eqz (local.get $n))
        (then (memory.copy (i32.add (local.get $o) (i32.const 6)) (i32.const ${none.ptr}) (i32.const 4)) (local.set $n (i32.const 4)))
        (else (memory.copy (i32.add (local.get $o) (i32.const 6)) (i32.const 70004) (local.get $n))))
      (memory.copy (i32.add (local.get $o) (i32.add (local.get $n) (i32.const 6))) (i32.const ${close.ptr}) (i32.const 1))
      (i32.store (i32.const 70000) (local.get $il))
      (memory.copy (i32.const 70004) (local.get $ip) (local.get $il))
      (call $out (local.get $o) (i32.add (local.get $n) (i32.const 7))))`, { memory: "4" })
}

/**
 * The audit's counter: exports its own no-op `brain$save` and `brain$restore` (the twin's reset of
 * its globals) and has a `data.drop` in dead code (so the twin adds no reset of its own). Counts
 * its activations in a global and answers the count.
 */
const counting = guest(`(data $d "x")
  (global $count (mut i32) (i32.const 0))
  (func $never (data.drop $d))
  (func (export "brain$save"))
  (func (export "brain$restore"))
  (func (export "brain_run") (param $ip i32) (param $il i32) (result i64)
    (local $o i32)
    (global.set $count (i32.add (global.get $count) (i32.const 1)))
    (local.set $o (call $alloc (i32.const 8)))
    (i64.store (local.get $o) (i64.const 0x7d303a226b6f227b))
    (i32.store8 offset=6 (local.get $o) (i32.add (i32.const 48) (i32.rem_u (global.get $count) (i32.const 10))))
    (call $out (local.get $o) (i32.const 8)))`, { memory: "4" })

const PRISTINE = data(100, '{"ok":"pristine"}')
const DIRTY = data(130, '{"ok":"dirty"}')

/**
 * Names its own functions and globals (in its `name` section) as the instrumentation names what it
 * adds, and answers "pristine" when its globals and memory are as instantiation left them, then
 * changes them. Its stores are plain ones and its code changes no table: its twin counts what it
 * writes and is put back.
 */
const namedLikeTheHost = guest(`${PRISTINE.segment} ${DIRTY.segment}
  (global $brain$fuel (mut i32) (i32.const 5))
  (global $brain$written (mut i32) (i32.const 6))
  (global $__asyncify_state (mut i32) (i32.const 7))
  (global $g (mut i32) (i32.const 8))
  (global $g$brain_saved (mut i32) (i32.const 9))
  (func $brain$save (global.set $brain$fuel (i32.const 0)))
  (func $brain$tick (result i32) (i32.const 0))
  (func $__memory_fill)
  (func $log_execution (param i32))
  (func (export "brain_run") (param i32 i32) (result i64) (local $ok i32)
    (local.set $ok (i32.and
      (i32.and (i32.eq (global.get $brain$fuel) (i32.const 5)) (i32.eq (global.get $brain$written) (i32.const 6)))
      (i32.and (i32.and (i32.eq (global.get $__asyncify_state) (i32.const 7)) (i32.eq (global.get $g) (i32.const 8)))
        (i32.and (i32.eq (global.get $g$brain_saved) (i32.const 9)) (i32.eqz (i32.load8_u (i32.const 60000)))))))
    (call $brain$save)
    (global.set $brain$written (i32.const 0))
    (global.set $__asyncify_state (i32.const 0))
    (global.set $g (i32.const 0))
    (global.set $g$brain_saved (i32.const 0))
    (i32.store8 (i32.const 60000) (i32.const 1))
    (if (result i64) (local.get $ok)
      (then (call $out (i32.const ${PRISTINE.ptr}) (i32.const ${PRISTINE.len})))
      (else (call $out (i32.const ${DIRTY.ptr}) (i32.const ${DIRTY.len})))))`, { memory: "2" })

/** A loop whose `brain_run` (or start function) runs `times` bulk operations of `bytes` each (`op`: a WAT instruction over `$i`), then answers "done". */
const bulkLoop = (op: (bytes: number) => string, times: number, bytes: number, options: { readonly entry?: "brain_run" | "brain_tool"; readonly atStart?: boolean } = {}) => {
  const done = data(100, '{"ok":"done"}')
  const loop = `(local $i i32)
    (block $end (loop $l
      (br_if $end (i32.ge_u (local.get $i) (i32.const ${times})))
      ${op(bytes)}
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))`
  return guest(`${done.segment}
    ${options.atStart === true ? `(func $init ${loop}) (start $init)` : ""}
    (func (export "${options.entry ?? "brain_run"}") (param i32 i32) (result i64) ${options.atStart === true ? "" : loop}
      (call $out (i32.const ${done.ptr}) (i32.const ${done.len})))`, { memory: `${(bytes >> 16) + 2}` })
}

const fill = (bytes: number) => `(memory.fill (i32.const 65536) (local.get $i) (i32.const ${bytes}))`
const copy = (bytes: number) => `(memory.copy (i32.const 65536) (i32.const 65537) (i32.const ${bytes}))`

describe("hostile guests", () => {
  describe("the host's names", () => {
    it.scopedLive("a twin's exports in the host's namespace are only the instrumentation's: a module exporting its own brain$written, given to the instrumenter past admission, has its memory zeroed whole, and the next activation never reads the last one's input (a loop's, a tool's)", () =>
      Effect.gen(function*() {
        for (const entry of ["brain_run", "brain_tool"] as const) {
          const modules = twinOf(yield* Effect.promise(() => wat(leaking(entry))))
          expect(WebAssembly.Module.exports(modules.twin).map((e) => e.name), entry).not.toContain("brain$written")
          const before = { ...instanceStats }
          expect(yield* runTwin(modules, '{"secret":"the launch code is 0000"}', entry), entry).toBe('{"ok":null}')
          expect(yield* runTwin(modules, '{"from":"another session"}', entry), entry).toBe('{"ok":null}')
          expect(instanceStats.putBack - before.putBack, `${entry}: its instances were put back`).toBeGreaterThan(0)
        }
      }))

    it.scopedLive("a module exporting its own no-op brain$save and brain$restore, given to the instrumenter past admission, is never put back: a counter in a global reads 1 on every activation", () =>
      Effect.gen(function*() {
        const modules = twinOf(yield* Effect.promise(() => wat(counting)))
        const exported = WebAssembly.Module.exports(modules.twin).map((e) => e.name)
        expect(exported).not.toContain("brain$save")
        expect(exported).not.toContain("brain$restore")
        const seen: Array<string> = []
        for (let i = 0; i < 3; i++) seen.push(yield* runTwin(modules, JSON.stringify({ session: `ses_${i}` })))
        expect(seen).toEqual(['{"ok":1}', '{"ok":1}', '{"ok":1}'])
      }))

    it.scopedLive("a counter guest on the main thread reads 1 on every activation, of every session, whether its twin is reset or made new", () =>
      Effect.gen(function*() {
        const wasm = yield* inlineHost(1_000)
        const count = (extra: string) =>
          guest(`(global $count (mut i32) (i32.const 0)) ${extra}
            (func (export "brain_run") (param $ip i32) (param $il i32) (result i64)
              (local $o i32)
              (global.set $count (i32.add (global.get $count) (i32.const 1)))
              (local.set $o (call $alloc (i32.const 8)))
              (i64.store (local.get $o) (i64.const 0x7d303a226b6f227b))
              (i32.store8 offset=6 (local.get $o) (i32.add (i32.const 48) (i32.rem_u (global.get $count) (i32.const 10))))
              (call $out (local.get $o) (i32.const 8)))`)
        for (const [name, extra] of [["reset", ""], ["made new", `(data $d "x") (func $never (data.drop $d))`]] as const) {
          const module = yield* admit(wasm, count(extra))
          for (let i = 0; i < 3; i++) {
            const input = { ...activationInput(), runtime: { ...activationInput().runtime, session_id: `ses_000000000000000000000000${i}` } }
            expect(yield* wasm.runLoop(module, input, hostWith({})), `${name} ${i}`).toBe(1)
          }
        }
        expect(wasm.stats).toEqual({ inline: 6, moved: 0, pool: 0 })
      }))

    it.scopedLive("a guest whose name section names its functions and globals as the instrumentation names its own still gets a twin, put back as new every activation", () =>
      Effect.gen(function*() {
        const wasm = yield* inlineHost(1_000)
        const module = yield* Effect.orDie(wasm.admit(yield* Effect.promise(() => wat(namedLikeTheHost, { names: true }))))
        const before = { ...instanceStats }
        for (let i = 0; i < 4; i++) expect(yield* wasm.runLoop(module, activationInput(), hostWith({})), `activation ${i}`).toBe("pristine")
        expect(wasm.stats).toEqual({ inline: 4, moved: 0, pool: 0 })
        expect(instanceStats.reused - before.reused).toBeGreaterThanOrEqual(3)
      }))
  })

  describe("bulk operations on the main thread", () => {
    it.scopedLive("memory.fill and memory.copy are charged by their length before they run: a loop of 5,000 fills or copies of 4 MiB, in brain_run, in a start function or in a tool, is stopped at its compute budget on the main thread (it would not be before one allowance of fuel, 20,000 units, ran out)", () =>
      Effect.gen(function*() {
        const wasm = yield* inlineHost(10_000, { computeMs: 100 })
        const MiB4 = 4 << 20
        for (const [name, text] of [
          ["fill", bulkLoop(fill, 5_000, MiB4)],
          ["copy", bulkLoop(copy, 5_000, MiB4)],
          ["start", bulkLoop(fill, 5_000, MiB4, { atStart: true })]
        ] as const) {
          const module = yield* admit(wasm, text)
          const result = yield* Effect.either(wasm.runLoop(module, activationInput(), hostWith({})))
          if (Either.isRight(result)) return expect.fail(`${name}: the loop completed`)
          expect(result.left.failure.message, name).toMatch(/compute budget of 100 ms/)
        }
        // On the main thread, each of them: its twin was made, and nothing was moved.
        expect(wasm.stats).toEqual({ inline: 3, moved: 0, pool: 0 })
        const tool = yield* admit(wasm, bulkLoop(fill, 5_000, MiB4, { entry: "brain_tool" }))
        const call = { input: null, call: { session_id: "s", sequence: 1, name: "t", deadline_at_ms: 0 } }
        const services = { emit: () => Effect.die("no emit"), telemetry: () => Effect.void }
        const tried = wasm.tryTool!(tool, call, services)
        expect(tried !== undefined && Exit.isSuccess(tried) && tried.value).toEqual({ _tag: "error", output: { message: expect.stringMatching(/compute budget of 100 ms/) } })
        expect(wasm.stats.pool).toBe(0)
      }))

    it.scopedLive("a module whose code has a bulk operation metering does not charge (memory.init, table.fill, table.copy, table.init) gets no twin: it runs on worker threads, and computes the same there", () =>
      Effect.gen(function*() {
        const wasm = yield* inlineHost(1_000)
        const ok = data(100, '{"ok":"ran"}')
        const entry = `(func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const ${ok.ptr}) (i32.const ${ok.len})))`
        for (const [name, fields] of [
          ["memory.init", `(data $d "x") (func $f (memory.init $d (i32.const 0) (i32.const 0) (i32.const 1)))`],
          ["table.fill", `(table $t 1 1 funcref) (func $f (table.fill $t (i32.const 0) (ref.null func) (i32.const 1)))`],
          ["table.copy", `(table $t 1 1 funcref) (func $f (table.copy $t $t (i32.const 0) (i32.const 0) (i32.const 1)))`],
          ["table.init", `(table $t 1 1 funcref) (elem $e func $f) (func $f (table.init $t $e (i32.const 0) (i32.const 0) (i32.const 1)))`]
        ] as const) {
          const module = yield* Effect.orDie(wasm.admit(yield* Effect.promise(() => wat(guest(`${ok.segment} ${fields} ${entry}`), { reference_types: true }))))
          const pool = wasm.stats.pool
          expect(yield* wasm.runLoop(module, activationInput(), hostWith({})), name).toBe("ran")
          expect(wasm.stats.pool - pool, name).toBe(1)
        }
      }))
  })

  describe("a worker's heap", () => {
    it.scopedLive("a worker whose heap runs out (twenty tables of 1,000,000 entries, a module admission would refuse) fails only its activation: the thread is replaced, and the next activation completes", () =>
      Effect.gen(function*() {
        const pool = new Pool({ compute: 1, threads: 2 })
        yield* Effect.addFinalizer(() => pool.close)
        const run = (text: string, features = {}) =>
          Effect.gen(function*() {
            const bytes = yield* Effect.promise(() => wat(text, features))
            const module = new WebAssembly.Module(bytes)
            return yield* Effect.either(activate(pool, {
              moduleId: `m${bytes.length}`,
              module,
              memory: { initial: 1, maximum: undefined },
              entry: "brain_run",
              input: jsonBytes(activationInput()),
              perform: () => Effect.die("no host call expected")
            }, LIMITS))
          })
        const tables = Array.from({ length: 20 }, (_, i) => `(table $t${i} 1000000 1000000 funcref)`).join(" ")
        const heavy = yield* run(guest(`${tables} (func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`), { reference_types: true })
        if (Either.isRight(heavy)) return expect.fail("the activation completed")
        expect(heavy.left.message).toMatch(/memory limit|out of memory/i)
        expect(yield* run(returning('{"ok":"fine"}'))).toEqual(Either.right('{"ok":"fine"}'))
      }))
  })

  describe("instances made ahead on a worker", () => {
    it.scopedLive("a worker makes the next instance ahead only of a module whose instantiation is quick: one whose start function computes for long is instantiated only by activations, inside their compute slot and budget", () =>
      Effect.gen(function*() {
        const pool = new Pool({ compute: 1, threads: 2 })
        yield* Effect.addFinalizer(() => pool.close)
        const ok = data(100, '{"ok":"ran"}')
        const entry = `(func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const ${ok.ptr}) (i32.const ${ok.len})))`
        // Counts down from 100,000,000 at start: far above a millisecond on any machine.
        const slowStart = guest(`${ok.segment} (global $n (mut i32) (i32.const 0))
          (func $init (local $i i32) (local.set $i (i32.const 100000000))
            (loop $l (br_if $l (i32.ne (local.tee $i (i32.sub (local.get $i) (i32.const 1))) (i32.const 0)))) (global.set $n (local.get $i)))
          (start $init) ${entry}`)
        const quick = guest(`${ok.segment} ${entry}`)
        /** Runs `text` `times` on the pool's thread; the instances that thread has begun to make, once it has settled (`settle`: until made ahead, or a while after). */
        const instancesAfter = (text: string, times: number, settle: (thread: { readonly instancesBegun: number }, start: number) => Effect.Effect<void>) =>
          Effect.gen(function*() {
            const bytes = yield* Effect.promise(() => wat(text))
            const module = new WebAssembly.Module(bytes)
            const thread = pool.tryAcquire(true)!
            const start = thread.instancesBegun
            pool.releaseNow(thread, true)
            for (let i = 0; i < times; i++) {
              const result = yield* activate(pool, {
                moduleId: `m${bytes.length}`,
                module,
                memory: { initial: 1, maximum: undefined },
                entry: "brain_run",
                input: jsonBytes(activationInput()),
                perform: () => Effect.die("no host call expected")
              }, LIMITS)
              expect(result).toBe('{"ok":"ran"}')
            }
            yield* settle(thread, start)
            return thread.instancesBegun - start
          })
        // The quick module's next instance is made ahead once an activation ends whose instance was
        // quick to make: after the second at the latest (a thread's first instantiation of a module
        // compiles its start, and may be slow). Two activations, then: three instances.
        const madeAhead = (thread: { readonly instancesBegun: number }, start: number) =>
          Effect.repeat(Effect.sleep("10 millis"), { until: () => thread.instancesBegun - start >= 3 }).pipe(Effect.timeout(Duration.seconds(10)), Effect.orDie, Effect.asVoid)
        expect(yield* instancesAfter(quick, 2, madeAhead)).toBe(3)
        // The slow one's would begin right after its activations ended: a while later, none has.
        expect(yield* instancesAfter(slowStart, 2, () => Effect.sleep("500 millis"))).toBe(2)
      }))
  })
})
