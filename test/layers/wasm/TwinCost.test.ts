/**
 * What keeps a module from an instrumented twin for its cost (src/layers/wasm/TwinCost.ts,
 * Limits.ts): the functions it defines and how deeply each nests blocks, read from its code section
 * before Binaryen reads it. A module past a limit gets no twin (it runs on worker threads); the
 * shipped modules are within every limit, and keep theirs.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import { describe, expect, it } from "vitest"
import { MAX_TWIN_FUNCTIONS, MAX_TWIN_NESTING, MAX_TWIN_NESTING_WORK } from "../../../src/domain/Limits.js"
import { twinOf } from "../../../src/layers/wasm/InlineModules.js"
import { twinCost } from "../../../src/layers/wasm/TwinCost.js"
import { returning, wat } from "../../support/wat.js"

const sha256 = (bytes: Uint8Array) => crypto.createHash("sha256").update(bytes).digest("hex")

const leb = (n: number): Array<number> => {
  const out: Array<number> = []
  do {
    const b = n & 0x7f
    n >>>= 7
    out.push(n === 0 ? b : b | 0x80)
  } while (n !== 0)
  return out
}
const readLeb = (bytes: Uint8Array, at: number): [number, number] => {
  let n = 0
  let shift = 0
  for (;;) {
    const b = bytes[at++]!
    n += (b & 0x7f) * 2 ** shift
    shift += 7
    if ((b & 0x80) === 0) return [n, at]
  }
}

/**
 * A loop that answers ok, with one function beside it for each of `depths`, nesting that many empty
 * blocks: written as functions answering 0 in WAT, whose bodies are then replaced in the binary
 * (wabt's text parser takes minutes past a thousand levels).
 */
const loopNesting = async (depths: ReadonlyArray<number>): Promise<Uint8Array> => {
  const text = returning('{"ok":"fine"}')
  const module = await wat(text.slice(0, text.lastIndexOf(")")) + depths.map(() => "(func (result i32) (i32.const 0))").join("\n") + ")")
  const parts: Array<Uint8Array> = [module.subarray(0, 8)]
  let at = 8
  while (at < module.length) {
    const id = module[at]!
    const [size, content] = readLeb(module, at + 1)
    const end = content + size
    if (id !== 10) {
      parts.push(module.subarray(at, end))
      at = end
      continue
    }
    const [count, first] = readLeb(module, content)
    const bodies: Array<Uint8Array> = []
    let b = first
    for (let i = 0; i < count; i++) {
      const [length, start] = readLeb(module, b)
      bodies.push(module.subarray(b, start + length))
      b = start + length
    }
    depths.forEach((depth, i) => {
      const body = [0x00, ...Array.from({ length: depth }, () => [0x02, 0x40]).flat(), ...Array<number>(depth).fill(0x0b), 0x41, 0x00, 0x0b]
      bodies[count - depths.length + i] = new Uint8Array([...leb(body.length), ...body])
    })
    const section = Buffer.concat([Buffer.from(leb(count)), ...bodies])
    parts.push(new Uint8Array([10, ...leb(section.length)]), section)
    at = end
  }
  return new Uint8Array(Buffer.concat(parts))
}

/** A loop that answers ok, with `extra` functions beside it. */
const loopWith = (extra: string) => {
  const text = returning('{"ok":"fine"}')
  return wat(text.slice(0, text.lastIndexOf(")")) + extra + ")")
}

const SHIPPED = ["loops/official.wasm", "loops/examples/echo-tool.wasm", "loops/examples/echo-with-memory.wasm"]

describe("a twin's cost", () => {
  it("the scan reads how many functions a module defines, and each one's deepest nesting of blocks, loops, ifs and trys", async () => {
    const module = await wat(`(module
      (memory 1)
      (func)
      (func (param i32) (result i32)
        (block (result i32) (loop (result i32) (if (result i32) (local.get 0) (then (i32.const 1)) (else (block (result i32) (i32.load offset=8 (i32.const 0))))))))
      (func (result f64) (f64.const 1.5) (f32.const 2) (drop) (i64.const -1) (drop) (block (br_table 0 0 0 (i32.const 1))))
      (func (param i32) (memory.fill (i32.const 0) (i32.const 0) (local.get 0)) (block (block)) (block (loop)))
    )`)
    expect(twinCost(module)).toEqual({ functions: 4, deepest: 4, nestingWork: 0 + 16 + 1 + 4 })
    const deep = await loopNesting([5000, 3])
    const plumbing = twinCost(await loopNesting([]))
    expect("unreadable" in plumbing).toBe(false)
    if ("unreadable" in plumbing) return
    expect(twinCost(deep)).toEqual({ functions: plumbing.functions + 2, deepest: 5000, nestingWork: plumbing.nestingWork + 5000 * 5000 + 9 })
  })

  it("every instruction of the shipped modules is read, and each is within every twin limit", () => {
    for (const name of SHIPPED) {
      const cost = twinCost(fs.readFileSync(new URL(`../../../dist/${name}`, import.meta.url)))
      expect("unreadable" in cost, `${name}: ${JSON.stringify(cost)}`).toBe(false)
      if ("unreadable" in cost) continue
      expect(cost.functions, name).toBeLessThanOrEqual(MAX_TWIN_FUNCTIONS)
      expect(cost.deepest, name).toBeLessThanOrEqual(MAX_TWIN_NESTING)
      expect(cost.nestingWork, name).toBeLessThanOrEqual(MAX_TWIN_NESTING_WORK)
    }
  })

  it("a module with a function nesting blocks past MAX_TWIN_NESTING gets no twin, and Binaryen never reads it", async () => {
    const module = await loopNesting([MAX_TWIN_NESTING + 1])
    const twin = await twinOf(sha256(module), module)
    expect("failure" in twin && twin.failure).toMatch(/MAX_TWIN_NESTING \(4096\)/)
  })

  it("a module at MAX_TWIN_NESTING keeps its twin", async () => {
    const module = await loopNesting([MAX_TWIN_NESTING])
    const twin = await twinOf(sha256(module), module)
    expect("module" in twin, JSON.stringify(twin)).toBe(true)
  })

  it("a module whose functions' nestings squared sum past MAX_TWIN_NESTING_WORK gets no twin", async () => {
    const module = await loopNesting([MAX_TWIN_NESTING, MAX_TWIN_NESTING, MAX_TWIN_NESTING, MAX_TWIN_NESTING, 1])
    const twin = await twinOf(sha256(module), module)
    expect("failure" in twin && twin.failure).toMatch(/MAX_TWIN_NESTING_WORK/)
  })

  it("a module defining more than MAX_TWIN_FUNCTIONS functions gets no twin", async () => {
    const module = await loopWith(Array.from({ length: MAX_TWIN_FUNCTIONS }, (_, i) => `(func (result i32) (i32.const ${i}))`).join("\n"))
    const twin = await twinOf(sha256(module), module)
    expect("failure" in twin && twin.failure).toMatch(/MAX_TWIN_FUNCTIONS \(10000\)/)
  })

  it("a module with an instruction the scan does not know gets no twin (its cost cannot be told)", () => {
    // A function body holding the GC prefix 0xfb: not read by the scan.
    const module = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 0x60, 0, 0, 3, 2, 1, 0, 10, 6, 1, 4, 0, 0xfb, 0x00, 0x0b])
    expect(twinCost(module)).toEqual({ unreadable: "an instruction it does not know (0xfb)" })
  })
})
