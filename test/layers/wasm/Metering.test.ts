/**
 * Metering on the main thread (Instrument.ts, "Metering"): what a guest's code costs it in fuel
 * must follow how long that code holds the thread, or the budget, read only when fuel runs out, is
 * read too late. A guest whose functions or loops are long straight-line bodies is the case: each
 * function entry and loop header is charged by the code behind it, so it is stopped near its
 * budget, as a guest of short ones is.
 *
 * The main thread's freedom is measured as the longest gap between the beats of a timer running
 * beside the activation: the bound is the budget plus a generous margin (a loaded machine's
 * scheduling), far below what an unmetered body held the thread for (seconds).
 */
import * as fs from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { instrument } from "../../../src/layers/wasm/Instrument.js"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import type { Host } from "../../../src/services/Agentloop.js"
import { activationInput, admit, hostWith } from "../../support/wasmHost.js"
import { guest } from "../../support/wat.js"

const LIMITS = { memoryBytes: 4 * 1024 * 1024, computeMs: 30_000, ioBytes: 64 * 1024, moduleBytes: 4 * 1024 * 1024 }

const inlineHost = (inlineMs: number, limits: Partial<typeof LIMITS> = {}) =>
  WasmHostWorkers.make({ workers: 1, inlineMs, inlineAtAdmission: true, ...LIMITS, ...limits })

/** `n` statements of straight-line code over the locals `$x` and `$y`: a rotation and an exclusive or each (six instructions, ten bytes; nothing V8 folds away). */
const straight = (n: number) => "(local.set $x (i32.xor (i32.rotl (local.get $x) (local.get $y)) (local.get $y)))\n".repeat(n)

/** Answers `{"ok":<n>}` from `brain_run`'s local `$x`: `n` a number of nine decimal digits it determines. */
const answerX = `
  (local.set $x (i32.add (i32.rem_u (local.get $x) (i32.const 800000000)) (i32.const 100000000)))
  (local.set $o (call $alloc (i32.const 32)))
  (i64.store (local.get $o) (i64.const 0x3a226b6f227b))
  (local.set $p (i32.add (local.get $o) (i32.const 15)))
  (i32.store8 (local.get $p) (i32.const 125))
  (loop $digits
    (local.set $p (i32.sub (local.get $p) (i32.const 1)))
    (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $x) (i32.const 10))))
    (local.set $x (i32.div_u (local.get $x) (i32.const 10)))
    (br_if $digits (i32.gt_u (local.get $p) (i32.add (local.get $o) (i32.const 6)))))
  (call $out (local.get $o) (i32.const 16))`

/**
 * A loop whose `brain_run` calls `$long` (`statements` of straight-line code) `calls` times, then
 * answers what they computed.
 */
const longFunction = (statements: number, calls: number) =>
  guest(`
    (func $long (param $x i32) (result i32) (local $y i32) (local.set $y (i32.const 0x2545f491)) ${straight(statements)} (local.get $x))
    (func (export "brain_run") (param i32 i32) (result i64) (local $i i32) (local $x i32) (local $o i32) (local $p i32)
      (local.set $x (i32.const 7))
      (block $end (loop $l
        (br_if $end (i32.ge_u (local.get $i) (i32.const ${calls})))
        (local.set $x (call $long (local.get $x)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
      ${answerX})`)

/** A loop whose `brain_run` runs a loop of `iterations`, each `statements` of straight-line code, then answers what they computed. */
const longLoop = (statements: number, iterations: number) =>
  guest(`
    (func (export "brain_run") (param i32 i32) (result i64) (local $i i32) (local $x i32) (local $o i32) (local $p i32) (local $y i32)
      (local.set $x (i32.const 7))
      (local.set $y (i32.const 0x2545f491))
      (block $end (loop $l
        (br_if $end (i32.ge_u (local.get $i) (i32.const ${iterations})))
        ${straight(statements)}
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
      ${answerX})`)

/** Runs `body` with a timer beating every 5 ms beside it: its result, and the longest gap between two beats (the main thread held). */
const held = <A, E, R>(body: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    let last = performance.now()
    let longest = 0
    const beat = setInterval(() => {
      const now = performance.now()
      longest = Math.max(longest, now - last)
      last = now
    }, 5)
    const result = yield* Effect.ensuring(body, Effect.sync(() => clearInterval(beat)))
    // The gap the last beat has not closed yet counts too.
    longest = Math.max(longest, performance.now() - last)
    return { result, heldMs: longest }
  })

/** A Host for the official loop: the model asks for one echo tool call, then ends; calls are answered as asked. */
const officialHost = (): Host => {
  let round = 0
  return hostWith({
    model: () =>
      Effect.sync(() =>
        round++ === 0
          ? { text: "", tool_calls: [{ id: "c1", name: "echo", input: { n: 1 } }], stop_reason: "tool_calls" as const }
          : { text: "done", tool_calls: [], stop_reason: "end" as const }
      ),
    dispatch: (request) => Effect.sync(() => request.map((c) => ({ call_id: c.id, name: c.name, outcome: "ok" as const, output: c.input, is_error: false }))),
    setTranscript: () => Effect.void,
    setTranscriptAtEnd: () => Effect.void
  })
}

const BUDGET_MS = 100
/*
 * The one wall-clock bound kept among the tests, on purpose: what metering promises is time, how
 * long a guest may hold the main thread, and no count or log line stands for that (the fuel
 * charged is the very thing under test). So the bound is generous, thirty times the budget, and
 * still far below what an unmetered body holds the thread for.
 */
/** Milliseconds past the budget the main thread may be held: scheduling on a loaded machine (one running several test suites held it 824 ms), never an unmetered body's run (these take minutes at least). */
const MARGIN_MS = 2_900

describe("metering on the main thread", () => {
  it.scopedLive("a guest calling a function of 600,000 straight-line instructions in a loop is stopped at its compute budget on the main thread, which it never holds much past the budget", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000, { computeMs: BUDGET_MS })
      const module = yield* admit(wasm, longFunction(100_000, 1_000_000))
      const { result, heldMs } = yield* held(Effect.either(wasm.runLoop(module, activationInput(), hostWith({}))))
      if (Either.isRight(result)) return expect.fail("the loop completed")
      expect(result.left.failure.message).toMatch(/compute budget of 100 ms/)
      expect(wasm.stats).toEqual({ inline: 1, moved: 0, pool: 0 })
      expect(heldMs).toBeLessThan(BUDGET_MS + MARGIN_MS)
    }))

  it.scopedLive("a guest whose loop body is 60,000 straight-line instructions is stopped at its compute budget on the main thread, which it never holds much past the budget", () =>
    Effect.gen(function*() {
      const wasm = yield* inlineHost(1_000, { computeMs: BUDGET_MS })
      const module = yield* admit(wasm, longLoop(10_000, 1_000_000))
      const { result, heldMs } = yield* held(Effect.either(wasm.runLoop(module, activationInput(), hostWith({}))))
      if (Either.isRight(result)) return expect.fail("the loop completed")
      expect(result.left.failure.message).toMatch(/compute budget of 100 ms/)
      expect(wasm.stats).toEqual({ inline: 1, moved: 0, pool: 0 })
      expect(heldMs).toBeLessThan(BUDGET_MS + MARGIN_MS)
    }))

  it.scopedLive("a guest of long straight-line bodies computes the same on the main thread, metered, as on a worker thread", () =>
    Effect.gen(function*() {
      for (const [name, text] of [["function", longFunction(20_000, 20)], ["loop", longLoop(5_000, 20)]] as const) {
        const run = (inlineMs: number) =>
          Effect.gen(function*() {
            const wasm = yield* inlineHost(inlineMs)
            const module = yield* admit(wasm, text)
            return { output: yield* wasm.runLoop(module, activationInput(), hostWith({})), stats: { ...wasm.stats } }
          })
        const plain = yield* run(0)
        const metered = yield* run(10_000)
        expect(plain.stats, name).toEqual({ inline: 0, moved: 0, pool: 1 })
        expect(metered.stats, name).toEqual({ inline: 1, moved: 0, pool: 0 })
        expect(metered.output, name).toEqual(plain.output)
        expect(typeof plain.output, name).toBe("number")
      }
    }))

  it.scopedLive("the official loop still gets a twin and runs its turns on the main thread, metered, never moved to a worker", () =>
    Effect.gen(function*() {
      const bytes = new Uint8Array(fs.readFileSync(new URL("../../../dist/loops/official.wasm", import.meta.url)))
      // Its twin, as the instrumenting thread makes it (a server's first start would use the build's, made by the same code).
      expect(() => new WebAssembly.Module(instrument(bytes))).not.toThrow()
      // The budget is the default's (the wall time a turn takes is not what this checks: a loaded
      // machine running whole suites held one of these turns past 100 ms).
      const wasm = yield* inlineHost(1_000, { computeMs: 10_000 })
      const module = yield* Effect.orDie(wasm.admit(bytes))
      for (let i = 0; i < 3; i++) {
        const result = yield* wasm.runLoop(module, activationInput(`turn ${i}`), officialHost())
        expect(result, `turn ${i}`).toBeDefined()
      }
      expect(wasm.stats).toEqual({ inline: 3, moved: 0, pool: 0 })
    }))
})
