/**
 * Admission of uploaded modules (wasm/Module.ts, wasm/Compiler.ts): compiled off the main thread,
 * and each verdict remembered by the module's content hash, so that repeating an upload costs a
 * hash, not a compile. No assertion is timed: where the main thread's freedom is the point, the
 * test asserts an order (a timer set after an admission began fires before it ends).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Fiber, Option } from "effect"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { compilerStats } from "../../../src/layers/wasm/Compiler.js"
import { MIN_WASM_MODULE_BYTES, notAModule } from "../../../src/layers/wasm/Module.js"
import { guest, returning, wat } from "../../support/wat.js"

const LIMITS = { memoryBytes: 4 * 1024 * 1024, computeMs: 30_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }

/**
 * A valid module of the ABI whose one extra function nests `depth` blocks: V8 takes hundreds of
 * milliseconds to validate it (written in binary: wabt's text parser recurses too deep for it).
 * With `broken`, that function's body lacks its final `end`: invalid, found at the end.
 */
const nestedModule = (depth: number, broken = false): Uint8Array => {
  const u = (n: number) => {
    const out: Array<number> = []
    do {
      let b = n & 0x7f
      n = Math.floor(n / 128)
      if (n) b |= 0x80
      out.push(b)
    } while (n)
    return out
  }
  const str = (t: string) => [...u(t.length), ...Buffer.from(t)]
  const section = (id: number, body: Buffer) => Buffer.concat([Buffer.from([id, ...u(body.length)]), body])
  const vec = (items: ReadonlyArray<ReadonlyArray<number>>) => Buffer.from([...u(items.length), ...items.flat()])
  const body = (code: Buffer) => {
    const b = Buffer.concat([Buffer.from([0]), code])
    return Buffer.concat([Buffer.from(u(b.length)), b])
  }
  // types: 0 () -> (), 1 (i32) -> i32, 2 (i32, i32) -> i64
  const types = section(1, vec([[0x60, 0, 0], [0x60, 1, 0x7f, 1, 0x7f], [0x60, 2, 0x7f, 0x7f, 1, 0x7e]]))
  const imports = section(2, vec([[...str("env"), ...str("memory"), 2, 0, 1]]))
  const functions = section(3, vec([[1], [2], [0]]))
  const globals = section(6, vec([[0x7f, 0, 0x41, 1, 0x0b]]))
  const exports = section(7, vec([[...str("brain_abi_v1"), 3, 0], [...str("brain_alloc"), 0, 0], [...str("brain_run"), 0, 1]]))
  const nested = Buffer.concat([Buffer.alloc(depth * 2, 0), Buffer.alloc(depth, 0x0b), Buffer.from(broken ? [] : [0x0b])])
  // `block` with no result (0x02 0x40), `depth` times; then as many `end`s.
  for (let i = 0; i < depth; i++) {
    nested[2 * i] = 0x02
    nested[2 * i + 1] = 0x40
  }
  const code = section(10, Buffer.concat([Buffer.from(u(3)), body(Buffer.from([0x41, 0, 0x0b])), body(Buffer.from([0x42, 0, 0x0b])), body(nested)]))
  return new Uint8Array(Buffer.concat([Buffer.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]), types, imports, functions, globals, exports, code]))
}

describe("admission", () => {
  it.scopedLive("an upload is compiled off the main thread: a timer set after a module's admission began (one V8 takes hundreds of milliseconds to validate) fires before the admission ends", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, ...LIMITS, moduleBytes: 8 << 20 })
      for (const broken of [false, true]) {
        const bytes = nestedModule(1_500_000, broken)
        const admission = yield* Effect.fork(Effect.either(wasm.admit(bytes)))
        yield* Effect.sleep("20 millis")
        expect(Option.isNone(yield* Fiber.poll(admission)), broken ? "invalid" : "valid").toBe(true)
        const verdict = yield* Fiber.join(admission)
        expect(Either.isLeft(verdict), broken ? "invalid" : "valid").toBe(broken)
      }
    }))

  it.scopedLive("the same bytes refused again are refused with the same reason and not compiled again; admitted again while their module is held, they are that module, not compiled again", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, ...LIMITS })
      const invalid = nestedModule(10, true)
      const unfit = yield* Effect.promise(() => wat(guest(`(global (export "brain$written") i32 (i32.const 0)) (func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`)))
      for (const [name, bytes, reason] of [["invalid", invalid, /not a valid WebAssembly module/], ["unfit", unfit, /brain\$written/]] as const) {
        const compiles = compilerStats.requests
        const first = yield* Effect.flip(wasm.admit(bytes))
        expect(first.reason, name).toMatch(reason)
        for (let i = 0; i < 3; i++) expect((yield* Effect.flip(wasm.admit(new Uint8Array(bytes)))).reason, name).toBe(first.reason)
        expect(compilerStats.requests - compiles, name).toBe(1)
      }
      const bytes = yield* Effect.promise(() => wat(returning('{"ok":1}')))
      const compiles = compilerStats.requests
      const admitted = yield* wasm.admit(bytes)
      expect(yield* wasm.admit(new Uint8Array(bytes))).toBe(admitted)
      expect(compilerStats.requests - compiles).toBe(1)
    }))

  it.scopedLive("MIN_WASM_MODULE_BYTES refuses no module the ABI admits: the smallest such module (one function serving as marker and brain_alloc, one brain_run) is admitted and is at least that long", () =>
    Effect.gen(function*() {
      const wasm = yield* WasmHostWorkers.make({ workers: 1, ...LIMITS })
      const smallest = yield* Effect.promise(() =>
        wat(`(module (import "env" "memory" (memory 0))
          (func $alloc (export "brain_abi_v1") (export "brain_alloc") (param i32) (result i32) unreachable)
          (func (export "brain_run") (param i32 i32) (result i64) unreachable))`)
      )
      const admitted = yield* wasm.admit(smallest)
      expect(admitted.loop).toBe(true)
      expect(smallest.length).toBeGreaterThanOrEqual(MIN_WASM_MODULE_BYTES)
    }))

  it("a body refused by its first bytes alone: no magic, a header cut short, another version, fewer bytes than any admitted module; a header of version 1 with enough bytes passes to the compile", () => {
    const header = [0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]
    const enough = (bytes: ReadonlyArray<number>) => new Uint8Array([...bytes, ...new Array<number>(MIN_WASM_MODULE_BYTES).fill(0)])
    expect(notAModule(new Uint8Array())).toContain("shorter than the 8-byte WebAssembly header")
    expect(notAModule(new TextEncoder().encode('{"not": "wasm"}'))).toContain("magic bytes")
    expect(notAModule(enough([0x7f, 0x45, 0x4c, 0x46]))).toContain("magic bytes")
    expect(notAModule(new Uint8Array([0, 0x61, 0x73]))).toContain("shorter than the 8-byte WebAssembly header")
    expect(notAModule(enough([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0]))).toContain("version is 0d 00 01 00, not 01 00 00 00")
    expect(notAModule(new Uint8Array([...header, ...new Array<number>(MIN_WASM_MODULE_BYTES - 9).fill(0)]))).toContain(`the module is ${MIN_WASM_MODULE_BYTES - 1} bytes`)
    expect(notAModule(new Uint8Array([...header, ...new Array<number>(MIN_WASM_MODULE_BYTES - 8).fill(0)]))).toBeUndefined()
  })
})
