/**
 * What making a module's instrumented twin (Instrument.ts) would cost Binaryen, read from the
 * module's code section before Binaryen sees it: how many functions it defines, and how deeply each
 * nests blocks, loops, ifs and trys. Binaryen's time grows with the functions (measured: 10,000 small
 * ones took 6 s, 30,000 took 16 s, 100,000 took 33 to 190 s on a loaded machine) and its memory
 * and time with the square of a function's nesting (one function nesting 10,000 empty blocks took
 * 470 MiB above its baseline, 20,000 took 1.9 GiB, 1,000,000 took 3.4 GB and minutes before it
 * failed; docs/benchmarks.md, "Twins of costly modules"). A module past a limit
 * (Limits.ts: MAX_TWIN_FUNCTIONS, MAX_TWIN_NESTING, MAX_TWIN_NESTING_WORK) gets no twin: it runs on
 * worker threads, as a module Binaryen cannot instrument does.
 *
 * The scan decodes each instruction's immediates (the module was validated at admission), one pass
 * over the bytes, no allocation per instruction. An instruction it does not know (a proposal's it
 * does not decode: GC's, say) makes the cost unknown, and the module gets no twin: a wrong answer
 * here could only ever cost a module its twin, never change what it computes.
 */
import { MAX_TWIN_FUNCTIONS, MAX_TWIN_NESTING, MAX_TWIN_NESTING_WORK } from "../../domain/Limits.js"

/** What the scan found: the functions the module defines, its deepest nesting, and the sum over its functions of their deepest nesting squared. */
export interface TwinCost {
  readonly functions: number
  readonly deepest: number
  readonly nestingWork: number
}

/** Thrown by the reader at a byte it cannot read (an unknown instruction, a length past the end). */
class Unreadable {
  constructor(readonly reason: string) {}
}

/** The cost of `bytes`' twin, or why it cannot be told. */
export const twinCost = (bytes: Uint8Array): TwinCost | { readonly unreadable: string } => {
  try {
    return scan(bytes)
  } catch (e) {
    if (e instanceof Unreadable) return { unreadable: e.reason }
    return { unreadable: e instanceof Error ? e.message : String(e) }
  }
}

/** Why `bytes` gets no twin for its cost, or undefined when it is within every limit. */
export const twinTooCostly = (bytes: Uint8Array): string | undefined => {
  const cost = twinCost(bytes)
  if ("unreadable" in cost) return `its code could not be read for its cost (${cost.unreadable}): it runs on worker threads`
  if (cost.functions > MAX_TWIN_FUNCTIONS) return `it defines ${cost.functions} functions, above MAX_TWIN_FUNCTIONS (${MAX_TWIN_FUNCTIONS}): it runs on worker threads`
  if (cost.deepest > MAX_TWIN_NESTING) return `a function of it nests blocks ${cost.deepest} deep, above MAX_TWIN_NESTING (${MAX_TWIN_NESTING}): it runs on worker threads`
  if (cost.nestingWork > MAX_TWIN_NESTING_WORK) {
    return `its functions' nesting depths squared sum to ${cost.nestingWork}, above MAX_TWIN_NESTING_WORK (${MAX_TWIN_NESTING_WORK}): it runs on worker threads`
  }
  return undefined
}

const CODE_SECTION = 10

const scan = (bytes: Uint8Array): TwinCost => {
  let at = 8
  let functions = 0
  let deepest = 0
  let nestingWork = 0
  const end = bytes.length
  const byte = () => {
    if (at >= end) throw new Unreadable("it ends inside an instruction")
    return bytes[at++]!
  }
  /** An unsigned or signed LEB128 skipped or read (as a number; at most 2^53 is exact, enough for lengths and counts). */
  const leb = (): number => {
    let result = 0
    let scale = 1
    for (let i = 0; i < 10; i++) {
      const b = byte()
      result += (b & 0x7f) * scale
      if ((b & 0x80) === 0) return result
      scale *= 128
    }
    throw new Unreadable("a LEB128 number longer than 10 bytes")
  }
  const skip = (n: number) => {
    if (at + n > end) throw new Unreadable("it ends inside an instruction")
    at += n
  }
  /** A value type: one byte, or a reference type's prefix and its heap type (an s33). */
  const valueType = () => {
    const b = byte()
    if (b === 0x63 || b === 0x64) leb()
  }
  /** A block type: the empty type, a value type, or a type's index (an s33). */
  const blockType = () => {
    const b = bytes[at]
    if (b === 0x63 || b === 0x64) {
      at++
      leb()
    } else leb()
  }
  const memarg = () => {
    const align = leb()
    if ((align & 0x40) !== 0) leb()
    leb()
  }
  while (at < end) {
    const id = byte()
    const size = leb()
    const sectionEnd = at + size
    if (sectionEnd > end) throw new Unreadable("a section runs past its end")
    if (id !== CODE_SECTION) {
      at = sectionEnd
      continue
    }
    const count = leb()
    for (let f = 0; f < count; f++) {
      const bodySize = leb()
      const bodyEnd = at + bodySize
      if (bodyEnd > sectionEnd) throw new Unreadable("a function's body runs past its section")
      for (let groups = leb(), g = 0; g < groups; g++) {
        leb()
        valueType()
      }
      let depth = 0
      let deepestHere = 0
      while (at < bodyEnd) {
        const op = byte()
        switch (op) {
          case 0x02: case 0x03: case 0x04: case 0x06: // block, loop, if, try
            blockType()
            if (++depth > deepestHere) deepestHere = depth
            break
          case 0x1f: { // try_table
            blockType()
            for (let n = leb(), i = 0; i < n; i++) {
              const kind = byte()
              if (kind <= 0x01) leb()
              leb()
            }
            if (++depth > deepestHere) deepestHere = depth
            break
          }
          case 0x0b: // end (of a block, or of the function's body)
          case 0x18: // delegate (ends a try)
            if (op === 0x18) leb()
            depth--
            break
          case 0x00: case 0x01: case 0x05: case 0x0a: case 0x0f: case 0x19: case 0x1a: case 0x1b: case 0xd1: case 0xd3: case 0xd4:
            break
          case 0x07: case 0x08: case 0x09: case 0x0c: case 0x0d: case 0x10: case 0x12: case 0x14: case 0x15: case 0xd2: case 0xd5: case 0xd6:
          case 0x20: case 0x21: case 0x22: case 0x23: case 0x24: case 0x25: case 0x26: case 0x3f: case 0x40: case 0x41: case 0x42: case 0xd0:
            leb()
            break
          case 0x0e: // br_table
            for (let n = leb(), i = 0; i <= n; i++) leb()
            break
          case 0x11: case 0x13: // call_indirect, return_call_indirect
            leb()
            leb()
            break
          case 0x1c: // select with types
            for (let n = leb(), i = 0; i < n; i++) valueType()
            break
          case 0x43:
            skip(4)
            break
          case 0x44:
            skip(8)
            break
          case 0xfc:
            miscellaneous(leb(), leb)
            break
          case 0xfd:
            simd(leb(), leb, memarg, skip)
            break
          case 0xfe: {
            const sub = leb()
            if (sub === 0x03) byte()
            else memarg()
            break
          }
          default:
            if (op >= 0x28 && op <= 0x3e) memarg()
            else if (!(op >= 0x45 && op <= 0xc4)) throw new Unreadable(`an instruction it does not know (0x${op.toString(16)})`)
        }
      }
      if (at !== bodyEnd) throw new Unreadable("a function's code runs past its body")
      functions++
      if (deepestHere > deepest) deepest = deepestHere
      nestingWork += deepestHere * deepestHere
    }
    at = sectionEnd
  }
  return { functions, deepest, nestingWork }
}

/** The 0xFC instructions' immediates: saturating truncations, bulk memory and tables. */
const miscellaneous = (sub: number, leb: () => number) => {
  if (sub <= 7) return
  switch (sub) {
    case 8: case 10: case 12: case 14:
      leb()
      leb()
      return
    case 9: case 11: case 13: case 15: case 16: case 17:
      leb()
      return
    default:
      throw new Unreadable(`an instruction it does not know (0xfc ${sub})`)
  }
}

/** The SIMD (0xFD) instructions' immediates. */
const simd = (sub: number, leb: () => number, memarg: () => void, skip: (n: number) => void) => {
  if (sub <= 11 || sub === 92 || sub === 93) memarg()
  else if (sub === 12 || sub === 13) skip(16)
  else if (sub >= 21 && sub <= 34) skip(1)
  else if (sub >= 84 && sub <= 91) {
    memarg()
    skip(1)
  } else if (sub > 0x113) throw new Unreadable(`an instruction it does not know (0xfd ${sub})`)
  void leb
}
