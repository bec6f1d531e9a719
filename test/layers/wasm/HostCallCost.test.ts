/**
 * What a host call costs its guest. A guest hands a request over as a pointer and a length; the
 * main thread then checks and parses it before the call's refusal, answer or journaling. That
 * reading is done for the guest, not waited for: it is charged to the activation's compute budget
 * by the request's length (HostCallCost.ts, READ_CHARS_PER_MS; docs/abi.md, "Limits"), so that a
 * guest repeating a large request that costs it nothing (a `telemetry` call, a write refused past
 * BRAIN_MAX_TURN_WRITE_BYTES) is stopped at its budget instead of holding the main thread until the
 * turn's wall-time bound.
 *
 * No assertion is timed: the activation fails with the budget's error, after at most as many
 * calls as the budget has room for at the charge of a 4 MiB request (16 ms), where its guest-side
 * time alone (a pointer a call) allowed thousands on the main thread.
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
    it.scopedLive(`${where}, reading a guest's host requests is charged to its compute budget by their length: a loop repeating a 4 MiB telemetry request is stopped at a 300 ms budget within the calls the charge leaves room for`, () =>
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
