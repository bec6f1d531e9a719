/**
 * What a host call costs its guest. A guest hands a request over as a pointer and a length; the
 * main thread then checks and parses it before the call's refusal, answer or journaling. That
 * work is done for the guest, not waited for: it is charged to the activation's compute budget as
 * the clock measures it, and never less than the request's length at READ_CHARS_PER_MS
 * (HostCallCost.ts; docs/abi.md, "Limits"), so that a guest repeating a large request that costs
 * it nothing (a `telemetry` call, a write refused past BRAIN_MAX_TURN_WRITE_BYTES) is stopped at
 * its budget instead of holding the main thread until the turn's wall-time bound, or for many
 * times its budget when the request is one that costs more than its length says (numbers).
 *
 * No assertion is timed: the activation fails with the budget's error, after at most as many
 * calls as the budget has room for at the least charge of a 4 MiB request (16 ms); and the calls
 * it was served before its last cost the main thread, as measured inside the charged work (from
 * the Host's `refusal()`, the call's first step, to its `telemetry`), no more than its budget.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { readingMs } from "../../../src/layers/wasm/HostCallCost.js"
import { activationInput, admit, hostWith } from "../../support/wasmHost.js"
import { data, guest } from "../../support/wat.js"

const MiB = 1 << 20
const LIMITS = { memoryBytes: 16 * MiB, ioBytes: 8 * MiB, moduleBytes: MiB }

/**
 * A loop that writes one JSON string of `bytes` bytes (`"xxx…x"`) at 1 MiB and then calls
 * `telemetry` with it for ever: each call costs it a pointer, the host a parse of `bytes`.
 */
const repeating = (bytes: number) => {
  const op = data(100, "telemetry")
  const at = MiB
  return guest(`${op.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (drop (memory.grow (i32.const ${Math.ceil((at + bytes) / 65536) + 1})))
      (memory.fill (i32.const ${at}) (i32.const 120) (i32.const ${bytes}))
      (i32.store8 (i32.const ${at}) (i32.const 34))
      (i32.store8 (i32.const ${at + bytes - 1}) (i32.const 34))
      (global.set $heap (i32.const ${at + bytes}))
      (loop $again
        (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${at}) (i32.const ${bytes})))
        (br $again))
      (i64.const 0))`)
}

describe("a host call's cost to its guest", () => {
  for (const [where, inlineMs] of [["on the main thread", 10_000], ["on a worker thread", 0]] as const) {
    it.scopedLive(`${where}, reading a guest's host requests is charged to its compute budget at least by their length: a loop repeating a 4 MiB telemetry request is stopped at a 300 ms budget within the calls the charge leaves room for`, () =>
      Effect.gen(function*() {
        const wasm = yield* WasmHostWorkers.make({ workers: 1, inlineMs, inlineAtAdmission: true, computeMs: 300, ...LIMITS })
        const module = yield* admit(wasm, repeating(4 * MiB))
        let calls = 0
        const result = yield* Effect.either(wasm.runLoop(module, activationInput(), hostWith({ telemetry: () => Effect.sync(() => void calls++) })))
        if (Either.isRight(result)) return expect.fail("the loop completed")
        expect(result.left.failure.message).toMatch(/compute budget of 300 ms/)
        expect(calls).toBeGreaterThan(0)
        expect(calls).toBeLessThanOrEqual(Math.ceil(300 / readingMs(4 * MiB)))
        expect(inlineMs === 0 ? wasm.stats.pool : wasm.stats.inline).toBe(1)
      }), 120_000)
  }
})

/**
 * A loop (or a tool) that writes one JSON array of `numbers` ones (`[1,1,…,1]`) at 1 MiB and then
 * calls `telemetry` with it for ever: a pointer a call for the guest, a parse of a million numbers
 * for the main thread, which costs it many times the length's rate. `numbers` is a multiple of 4.
 */
const repeatingNumbers = (numbers: number, entry: "brain_run" | "brain_tool" = "brain_run") => {
  const op = data(100, "telemetry")
  const at = MiB
  const bytes = 2 * numbers + 1
  return guest(`${op.segment}
    (func (export "${entry}") (param i32 i32) (result i64)
      (local $p i32)
      (drop (memory.grow (i32.const ${Math.ceil((at + bytes) / 65536) + 1})))
      (i32.store8 (i32.const ${at}) (i32.const 91))
      (local.set $p (i32.const ${at + 1}))
      ;; "1,1,1,1," eight bytes a store: the fill is a small part of the budget even on a loaded machine
      (loop $fill
        (i64.store (local.get $p) (i64.const 0x2c312c312c312c31))
        (local.set $p (i32.add (local.get $p) (i32.const 8)))
        (br_if $fill (i32.lt_u (local.get $p) (i32.const ${at + bytes - 1}))))
      (i32.store8 (i32.const ${at + bytes - 1}) (i32.const 93))
      (global.set $heap (i32.const ${at + bytes}))
      (loop $again
        (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${at}) (i32.const ${bytes})))
        (br $again))
      (i64.const 0))`)
}

/**
 * What the main thread spent on each of a guest's calls before its Host was reached: a call's
 * checking begins with the Host's `refusal()` and its parsed request reaches `telemetry` — both
 * inside what the charge measures. `served` is every call's cost, in order.
 */
const measuringCalls = () => {
  const served: Array<number> = []
  let began = 0
  return {
    served,
    refusal: () => {
      began = performance.now()
      return undefined
    },
    telemetry: () => {
      served.push(performance.now() - began)
      return Effect.void
    }
  }
}

/** The calls served before the last, which the budget had to have room for: their cost, summed. */
const beforeTheLast = (served: ReadonlyArray<number>) => served.slice(0, -1).reduce((a, b) => a + b, 0)

describe("a host call is charged what the main thread spent on it", () => {
  const BUDGET = 200
  const NUMBERS = 1 << 20
  for (
    const [where, options] of [
      ["on the main thread", { inlineMs: 10_000 }],
      ["pinned on a worker thread", { inlineMs: 0 }],
      ["blocking a worker thread", { inlineMs: 0, pinning: false }]
    ] as const
  ) {
    it.scopedLive(`${where}, a loop repeating a JSON array of a million numbers to telemetry is stopped at its budget, the main thread's measured work on the calls before its last within it`, () =>
      Effect.gen(function*() {
        const wasm = yield* WasmHostWorkers.make({ workers: 1, inlineAtAdmission: true, computeMs: BUDGET, ...LIMITS, ...options })
        const module = yield* admit(wasm, repeatingNumbers(NUMBERS))
        const measured = measuringCalls()
        const result = yield* Effect.either(wasm.runLoop(module, activationInput(), hostWith({ refusal: measured.refusal, telemetry: measured.telemetry })))
        if (Either.isRight(result)) return expect.fail("the loop completed")
        expect(result.left.failure.message).toMatch(new RegExp(`compute budget of ${BUDGET} ms`))
        expect(measured.served.length).toBeGreaterThan(0)
        expect(beforeTheLast(measured.served)).toBeLessThanOrEqual(BUDGET)
      }), 120_000)
  }

  it.scopedLive("a Wasm tool repeating a JSON array of a million numbers to telemetry ends at its budget, the main thread's measured work on the calls before its last within it", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, inlineAtAdmission: true, computeMs: BUDGET, ...LIMITS, inlineMs: 10_000 })
      const module = yield* admit(wasm, repeatingNumbers(NUMBERS, "brain_tool"))
      const measured = measuringCalls()
      const run = yield* wasm.runTool(
        module,
        { input: {}, call: { session_id: "ses_1", sequence: 1, name: "t", deadline_at_ms: Date.now() + 120_000 } },
        { emit: () => Effect.die("not used"), telemetry: measured.telemetry, refusal: measured.refusal }
      )
      expect(run._tag).toBe("error")
      expect(JSON.stringify(run)).toMatch(new RegExp(`compute budget of ${BUDGET} ms`))
      expect(measured.served.length).toBeGreaterThan(0)
      expect(beforeTheLast(measured.served)).toBeLessThanOrEqual(BUDGET)
    }), 120_000)
})
