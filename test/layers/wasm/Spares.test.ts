/**
 * What the main thread keeps between activations (Spares.ts), driven directly: instances put back
 * are taken again most recent first, by module and memory limits, and past the spares' bound the
 * least recently used module's go first.
 */
import { describe, expect, it } from "@effect/vitest"
import { imageKept, putBack, type Resting, spareRun } from "../../../src/layers/wasm/Spares.js"

/** A module of its own (an empty one: only its identity is used, as the spares' key). */
const aModule = () => new WebAssembly.Module(new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]))

const LIMITS = { initial: 1, maximum: 2 }

/** An instance at rest that wrote nothing, named for the test. */
const resting = (name: string, key = "1:2"): Resting & { readonly name: string } => {
  const memory = new WebAssembly.Memory(LIMITS)
  return {
    name,
    memory,
    view: () => Buffer.from(memory.buffer),
    exports: {},
    resettable: true,
    key,
    restore: () => {},
    written: () => 0,
    low: () => memory.buffer.byteLength,
    quietFrom: 0,
    quietTo: 0,
    rest: () => {}
  }
}

const taken = (module: WebAssembly.Module, key = "1:2") => spareRun<ReturnType<typeof resting>>(module, key)?.name

describe("Spares", () => {
  it("an instance put back is taken again most recent first, only for its module and its memory limits", () => {
    const a = aModule()
    const b = aModule()
    for (const m of [a, b]) imageKept(m, new WebAssembly.Memory(LIMITS))
    expect(putBack(resting("a1"), a, LIMITS)).toBe(true)
    expect(putBack(resting("a2", "1:3"), a, LIMITS)).toBe(true)
    expect(putBack(resting("b1"), b, LIMITS)).toBe(true)
    expect(taken(a)).toBe("a1")
    expect(taken(a)).toBeUndefined()
    expect(taken(a, "1:3")).toBe("a2")
    expect(taken(b)).toBe("b1")
    expect(taken(b)).toBeUndefined()
  })

  it("past the spares' bound, the instances of the module least recently put back go first, its oldest first, however many of another module were put back before", () => {
    const a = aModule()
    const b = aModule()
    for (const m of [a, b]) imageKept(m, new WebAssembly.Memory(LIMITS))
    // No activation runs here: the bound is its least, four spares.
    putBack(resting("a1"), a, LIMITS)
    putBack(resting("a2"), a, LIMITS)
    putBack(resting("b1"), b, LIMITS)
    putBack(resting("b2"), b, LIMITS)
    // a is now the most recently used: the fifth spare drops b's oldest.
    putBack(resting("a3"), a, LIMITS)
    expect([taken(b), taken(b)]).toEqual(["b2", undefined])
    expect([taken(a), taken(a), taken(a), taken(a)]).toEqual(["a3", "a2", "a1", undefined])
    // And again with b last: a's go first.
    putBack(resting("a4"), a, LIMITS)
    putBack(resting("a5"), a, LIMITS)
    putBack(resting("b3"), b, LIMITS)
    putBack(resting("b4"), b, LIMITS)
    putBack(resting("b5"), b, LIMITS)
    expect([taken(a), taken(a)]).toEqual(["a5", undefined])
    expect([taken(b), taken(b), taken(b), taken(b)]).toEqual(["b5", "b4", "b3", undefined])
  })
})
