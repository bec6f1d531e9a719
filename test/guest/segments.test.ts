/**
 * Built guests carry one data segment (scripts/build-guests.js, mergeDataSegments): the merge
 * writes the same bytes into a fresh memory as the segments it replaces, traps where they trap,
 * and leaves alone a module it cannot merge.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { mergeDataSegments, ROOT } from "../../scripts/build-guests.js"
import { wat } from "../support/wat.js"

/** The number of segments in a module's data section (0 without one). */
const segmentCount = (bytes: Uint8Array): number => {
  let at = 8
  const uleb = (p: number): [number, number] => {
    let value = 0
    let shift = 0
    let b: number
    do {
      b = bytes[p++]!
      value += (b & 0x7f) * 2 ** shift
      shift += 7
    } while (b & 0x80)
    return [value, p]
  }
  while (at < bytes.length) {
    const id = bytes[at]!
    const [size, start] = uleb(at + 1)
    if (id === 11) return uleb(start)[0]
    at = start + size
  }
  return 0
}

/** The first `pages` pages of a fresh memory after instantiating `bytes` (undefined when instantiation traps). */
const memoryAfter = (bytes: Uint8Array, pages: number): Uint8Array | undefined => {
  const memory = new WebAssembly.Memory({ initial: pages })
  try {
    new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } })
  } catch (err) {
    if (err instanceof WebAssembly.RuntimeError) return undefined
    throw err
  }
  return new Uint8Array(memory.buffer).slice()
}

describe("data segments of built guests", () => {
  it("merged segments write the same memory as the originals: in order (a later one over an earlier), with gaps left zero", async () => {
    const original = await wat(`(module (import "env" "memory" (memory 2))
      (data (i32.const 100) "abc")
      (data (i32.const 8) "\\01\\02\\03")
      (data (i32.const 101) "XY")
      (data (i32.const 70000) "far")
      (data (i32.const 4000) ""))`)
    const merged = mergeDataSegments(original)
    expect(segmentCount(original)).toBe(5)
    expect(segmentCount(merged)).toBe(1)
    expect(memoryAfter(merged, 2)).toEqual(memoryAfter(original, 2))
  })

  it("a merged segment traps where the originals trap: one of them past the memory's end", async () => {
    const original = await wat(`(module (import "env" "memory" (memory 1))
      (data (i32.const 0) "in")
      (data (i32.const 65535) "out"))`)
    const merged = mergeDataSegments(original)
    expect(segmentCount(merged)).toBe(1)
    expect(memoryAfter(original, 1)).toBeUndefined()
    expect(memoryAfter(merged, 1)).toBeUndefined()
  })

  it("a module with a passive segment, or a single segment, is left as it is", async () => {
    const passive = await wat(`(module (import "env" "memory" (memory 1)) (data (i32.const 0) "a") (data "b"))`)
    const single = await wat(`(module (import "env" "memory" (memory 1)) (data (i32.const 0) "a"))`)
    expect(mergeDataSegments(passive)).toBe(passive)
    expect(mergeDataSegments(single)).toBe(single)
  })

  it("the shipped loops are built with one data segment each", () => {
    for (const file of ["dist/loops/official.wasm", "dist/loops/examples/echo-with-memory.wasm"]) {
      expect(segmentCount(new Uint8Array(fs.readFileSync(path.join(ROOT, file)))), file).toBe(1)
    }
  })
})
