/**
 * The ABI's (ptr, len) pairs, packed in one i64 as `(ptr << 32) | len` (docs/abi.md), split and
 * made without BigInt arithmetic.
 */

/**
 * One i64 seen as its two u32 halves, to split a guest's (ptr, len) pair and make one without
 * BigInt arithmetic: each shift, mask and `BigInt()` made a BigInt of its own (seven a text turn's
 * input, output and answer took, against the one a call's answer must be).
 */
const PAIR = new BigUint64Array(1)
const HALVES = new Uint32Array(PAIR.buffer)
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1
const LOW_HALF = LITTLE_ENDIAN ? 0 : 1
const HIGH_HALF = 1 - LOW_HALF

/** The i64 `(ptr << 32) | len`, as the ABI packs a (ptr, len) pair. */
export const packPair = (ptr: number, len: number): bigint => {
  HALVES[HIGH_HALF] = ptr
  HALVES[LOW_HALF] = len
  return PAIR[0]!
}

/** The halves `unpackPair` read last (one object, written in place: no pair made per call). */
export const unpacked = { ptr: 0, len: 0 }

/** The (ptr, len) an i64 packs, read as unsigned halves (`BigInt.asUintN(64, …) >> 32n`, `& 0xffffffffn`): into `unpacked`. */
export const unpackPair = (packed: bigint): void => {
  PAIR[0] = packed
  unpacked.ptr = HALVES[HIGH_HALF]!
  unpacked.len = HALVES[LOW_HALF]!
}

/** The (ptr, len) an i64 packs, as a pair (unpackPair's halves; for tests). */
export const pairOf = (packed: bigint): readonly [number, number] => {
  unpackPair(packed)
  return [unpacked.ptr, unpacked.len]
}
