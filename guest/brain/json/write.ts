/**
 * The JSON writer: a `Json` value to UTF-8 bytes, exactly as JavaScript's `JSON.stringify` writes
 * the same value (no spaces, keys in order).
 *
 * Rules:
 * - Strings escape `"` and `\`, write `\b \f \n \r \t` short and other control characters as
 *   `\u00xx`, write a lone surrogate as `\udxxx` (so the output is always UTF-8) and everything else
 *   as UTF-8, `/` and U+007F included.
 * - Numbers are written as their text (json/value.ts).
 * - A `Utf8Writer` grows by doubling and can be reset and reused: the ABI layer writes every host
 *   request into one, so a turn that sends its whole transcript many times does not pile up copies.
 */
import { ensureRoom, heapEnd } from "../report"
import { Json, JsonKind } from "./value"

/** From this many bytes on a buffer's growth checks that the memory can hold it (`ensureRoom`). */
const LARGE: usize = 1 << 20

export class Utf8Writer {
  ptr: usize
  len: usize = 0
  cap: usize

  constructor(initial: usize = 256) {
    this.cap = initial
    this.ptr = heap.alloc(initial)
  }

  reset(): void {
    this.len = 0
  }

  @inline reserve(n: usize): void {
    if (this.len + n > this.cap) this.grow(this.len + n)
  }

  grow(needed: usize): void {
    let cap = this.cap << 1
    while (cap < needed) cap <<= 1
    if (cap >= LARGE) {
      // The allocator grows its last block in place, and moves any other to a new one.
      const last = heapEnd() <= this.ptr + this.cap + 32
      ensureRoom(cap, "a request to Brain (or the output) being written needs a buffer of ", " bytes, which does not fit the guest's memory", last ? this.ptr : 0)
    }
    this.ptr = heap.realloc(this.ptr, cap)
    this.cap = cap
  }

  byte(b: u32): void {
    this.reserve(1)
    store<u8>(this.ptr + this.len, <u8>b)
    this.len++
  }

  /** Appends a string known to be ASCII (keywords, number text). */
  ascii(s: string): void {
    const n = <usize>s.length
    this.reserve(n)
    const at = this.ptr + this.len
    for (let i: usize = 0; i < n; i++) store<u8>(at + i, <u8>s.charCodeAt(<i32>i))
    this.len += n
  }

  /** Appends `n` bytes from `from` as they are. */
  copy(from: usize, n: usize): void {
    this.reserve(n)
    const at = this.ptr + this.len
    let i: usize = 0
    for (; i + 8 <= n; i += 8) store<u64>(at + i, load<u64>(from + i))
    for (; i < n; i++) store<u8>(at + i, load<u8>(from + i))
    this.len += n
  }

  /** The bytes written so far, as a string. */
  toString(): string {
    return String.UTF8.decodeUnsafe(this.ptr, this.len)
  }
}

const HEX = "0123456789abcdef"

/** Writes `\uXXXX` at `at` (6 bytes); returns the next position. */
function hexUnit(at: usize, unit: u32): usize {
  store<u8>(at, 0x5c)
  store<u8>(at + 1, 0x75)
  store<u8>(at + 2, <u8>HEX.charCodeAt((unit >>> 12) & 15))
  store<u8>(at + 3, <u8>HEX.charCodeAt((unit >>> 8) & 15))
  store<u8>(at + 4, <u8>HEX.charCodeAt((unit >>> 4) & 15))
  store<u8>(at + 5, <u8>HEX.charCodeAt(unit & 15))
  return at + 6
}

/** The most bytes one code unit (or surrogate pair) of a string takes written: `\u00xx`. */
const MOST_PER_UNIT: usize = 6

const LANES: u64 = 0x0001000100010001
const LANE_HIGHS: u64 = 0x8000800080008000

/**
 * Whether four UTF-16 code units (one per 16-bit lane of `x`) each write as themselves, one byte:
 * none is 0x80 or above, below 0x20, `"` or `\` (the exact word tests for a zero lane and a lane
 * below n, on lanes below 0x80).
 */
@inline function plainUnits(x: u64): bool {
  const quote = x ^ (LANES * 0x22)
  const backslash = x ^ (LANES * 0x5c)
  return (x & (LANES * 0xff80)) == 0 &&
    ((((quote - LANES) & ~quote) | ((backslash - LANES) & ~backslash) | ((x - LANES * 0x20) & ~x)) & LANE_HIGHS) == 0
}

/** Four code units below 0x100 (one per 16-bit lane) as four bytes. */
@inline function narrowUnits(x: u64): u32 {
  return <u32>((x & 0xff) | ((x >> 8) & 0xff00) | ((x >> 16) & 0xff0000) | ((x >> 24) & 0xff000000))
}

/** Writes `s` as a JSON string literal, quotes included. */
export function writeString(w: Utf8Writer, s: string): void {
  const n = s.length
  const units = changetype<usize>(s)
  // Room for one byte per code unit (the common case) and the quotes; a character that needs
  // more asks for it when it finds the room short, so a long ASCII string never holds three times
  // its size (a memory the guest may not be able to grow).
  w.reserve(<usize>n + 2)
  let at = w.ptr + w.len
  let end = w.ptr + w.cap
  store<u8>(at++, 0x22)
  for (let i = 0; i < n; i++) {
    // Four code units at a time while they write as themselves and the room holds them (and the
    // closing quote); the first four that do not are written one by one below.
    while (i + 4 <= n && at + 5 <= end) {
      const x = load<u64>(units + (<usize>i << 1))
      if (!plainUnits(x)) break
      store<u32>(at, narrowUnits(x))
      at += 4
      i += 4
    }
    if (i >= n) break
    if (at + MOST_PER_UNIT + 1 > end) {
      at = roomFor(w, at, <usize>(n - i) + MOST_PER_UNIT + 1)
      end = w.ptr + w.cap
    }
    const c = <u32>s.charCodeAt(i)
    if (c >= 0x20 && c < 0x80) {
      if (c == 0x22 || c == 0x5c) {
        store<u8>(at++, 0x5c)
      }
      store<u8>(at++, <u8>c)
      continue
    }
    if (c < 0x20) {
      const short = c == 0x08 ? 0x62 : c == 0x0c ? 0x66 : c == 0x0a ? 0x6e : c == 0x0d ? 0x72 : c == 0x09 ? 0x74 : 0
      if (short != 0) {
        store<u8>(at++, 0x5c)
        store<u8>(at++, <u8>short)
      } else {
        at = hexUnit(at, c)
      }
      continue
    }
    if (c < 0x800) {
      store<u8>(at++, <u8>(0xc0 | (c >>> 6)))
      store<u8>(at++, <u8>(0x80 | (c & 0x3f)))
      continue
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = i + 1 < n ? <u32>s.charCodeAt(i + 1) : 0
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        const cp = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00)
        store<u8>(at++, <u8>(0xf0 | (cp >>> 18)))
        store<u8>(at++, <u8>(0x80 | ((cp >>> 12) & 0x3f)))
        store<u8>(at++, <u8>(0x80 | ((cp >>> 6) & 0x3f)))
        store<u8>(at++, <u8>(0x80 | (cp & 0x3f)))
        i++
      } else {
        at = hexUnit(at, c)
      }
      continue
    }
    store<u8>(at++, <u8>(0xe0 | (c >>> 12)))
    store<u8>(at++, <u8>(0x80 | ((c >>> 6) & 0x3f)))
    store<u8>(at++, <u8>(0x80 | (c & 0x3f)))
  }
  store<u8>(at++, 0x22)
  w.len = at - w.ptr
}

const ONES: u64 = 0x0101010101010101
const HIGHS: u64 = 0x8080808080808080

/**
 * Whether eight bytes (one word) each write as themselves in a JSON string: none is `"`, `\` or
 * below 0x20 (bytes of 0x80 and above are UTF-8, written as they are). The exact "a byte is zero"
 * and "a byte is below n" word tests, as json/parse.ts `plainEnd` makes them.
 */
@inline function plainBytes(x: u64): bool {
  const quote = x ^ (ONES * 0x22)
  const backslash = x ^ (ONES * 0x5c)
  return ((((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash) | ((x - ONES * 0x20) & ~x)) & HIGHS) == 0
}

/** The short escape's letter for control character `c` (`\n` for 0x0a), or 0 when it has none. */
@inline function shortEscape(c: u32): u32 {
  return c == 0x08 ? 0x62 : c == 0x0c ? 0x66 : c == 0x0a ? 0x6e : c == 0x0d ? 0x72 : c == 0x09 ? 0x74 : 0
}

/**
 * Writes the string whose value is the `n` bytes of UTF-8 at `from` as a JSON string literal,
 * quotes included: the same bytes `writeString` writes for the same string (valid UTF-8 holds no
 * lone surrogate, so only `"`, `\` and control characters are escaped).
 */
export function writeStringBytes(w: Utf8Writer, from: usize, n: usize): void {
  w.reserve(n + 2)
  let at = w.ptr + w.len
  let end = w.ptr + w.cap
  store<u8>(at++, 0x22)
  let i: usize = 0
  while (i < n) {
    while (i + 8 <= n && at + 9 <= end) {
      const x = load<u64>(from + i)
      if (!plainBytes(x)) break
      store<u64>(at, x)
      at += 8
      i += 8
    }
    if (i >= n) break
    if (at + MOST_PER_UNIT + 1 > end) {
      at = roomFor(w, at, (n - i) + MOST_PER_UNIT + 1)
      end = w.ptr + w.cap
    }
    const c = <u32>load<u8>(from + i++)
    if (c == 0x22 || c == 0x5c) {
      store<u8>(at++, 0x5c)
      store<u8>(at++, <u8>c)
    } else if (c < 0x20) {
      const short = shortEscape(c)
      if (short != 0) {
        store<u8>(at++, 0x5c)
        store<u8>(at++, <u8>short)
      } else {
        at = hexUnit(at, c)
      }
    } else {
      store<u8>(at++, <u8>c)
    }
  }
  store<u8>(at++, 0x22)
  w.len = at - w.ptr
}

/** The bytes `writeStringBytes` writes for the `n` bytes at `from`. */
function stringBytesLength(from: usize, n: usize): usize {
  let bytes = n + 2
  let i: usize = 0
  while (i < n) {
    while (i + 8 <= n && plainBytes(load<u64>(from + i))) i += 8
    if (i >= n) break
    const c = <u32>load<u8>(from + i++)
    if (c == 0x22 || c == 0x5c) bytes += 1
    else if (c < 0x20) bytes += shortEscape(c) != 0 ? 1 : 5
  }
  return bytes
}

/** The bytes `writeString` writes for `s`. */
function stringLength(s: string): usize {
  const n = s.length
  let bytes: usize = 2
  for (let i = 0; i < n; i++) {
    const c = <u32>s.charCodeAt(i)
    if (c >= 0x20 && c < 0x80) bytes += c == 0x22 || c == 0x5c ? 2 : 1
    else if (c < 0x20) bytes += shortEscape(c) != 0 ? 2 : 6
    else if (c < 0x800) bytes += 2
    else if (c >= 0xd800 && c <= 0xdfff) {
      const next = i + 1 < n ? <u32>s.charCodeAt(i + 1) : 0
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4
        i++
      } else bytes += 6
    } else bytes += 3
  }
  return bytes
}

/**
 * The bytes `writeJson` writes for `v`, counted without writing them: how a loop sizes what it
 * sends against a bound (BRAIN_MAX_WASM_IO_BYTES) before it allocates the room.
 */
export function jsonLength(v: Json): usize {
  switch (v.kind) {
    case JsonKind.Null: return 4
    case JsonKind.Bool: return v.asBool() ? 4 : 5
    case JsonKind.Number: return <usize>v.numberText().length
    case JsonKind.String: return v.isStringBytes() ? stringBytesLength(v.textPointer, v.textLength) : stringLength(v.asString())
    case JsonKind.Text: return v.textLength
    case JsonKind.Array: {
      const n = v.length
      let bytes: usize = 2 + (n > 0 ? <usize>(n - 1) : 0)
      for (let i = 0; i < n; i++) bytes += jsonLength(v.at(i))
      return bytes
    }
    default: {
      const n = v.length
      let bytes: usize = 2 + (n > 0 ? <usize>(n - 1) : 0)
      for (let i = 0; i < n; i++) bytes += stringLength(v.keyAt(i)) + 1 + jsonLength(v.at(i))
      return bytes
    }
  }
}

/** Makes room for `more` bytes at `at` (which may move when the buffer grows); returns the new `at`. */
function roomFor(w: Utf8Writer, at: usize, more: usize): usize {
  w.len = at - w.ptr
  w.reserve(more)
  return w.ptr + w.len
}

export function writeJson(w: Utf8Writer, v: Json): void {
  switch (v.kind) {
    case JsonKind.Null: w.ascii("null"); break
    case JsonKind.Bool: w.ascii(v.asBool() ? "true" : "false"); break
    case JsonKind.Number: w.ascii(v.numberText()); break
    case JsonKind.String: {
      if (v.isStringBytes()) writeStringBytes(w, v.textPointer, v.textLength)
      else writeString(w, v.asString())
      break
    }
    case JsonKind.Text: w.copy(v.textPointer, v.textLength); break
    case JsonKind.Array: {
      w.byte(0x5b)
      const n = v.length
      for (let i = 0; i < n; i++) {
        if (i > 0) w.byte(0x2c)
        writeJson(w, v.at(i))
      }
      w.byte(0x5d)
      break
    }
    default: {
      w.byte(0x7b)
      const n = v.length
      for (let i = 0; i < n; i++) {
        if (i > 0) w.byte(0x2c)
        writeString(w, v.keyAt(i))
        w.byte(0x3a)
        writeJson(w, v.at(i))
      }
      w.byte(0x7d)
    }
  }
}

/**
 * The JSON text of `v` as a string held as its UTF-8 bytes (`Json.stringBytes`): what
 * `Json.string(stringify(v))` holds, in half the memory and without the UTF-16 copy.
 */
export function stringifyBytes(v: Json): Json {
  const w = new Utf8Writer(64)
  writeJson(w, v)
  // The room past its end is given back (the allocator takes back the last block's end).
  return Json.stringBytes(heap.realloc(w.ptr, w.len), w.len)
}

/** The JSON text of `v`, as `JSON.stringify(v)` would write it. */
export function stringify(v: Json): string {
  const w = new Utf8Writer(64)
  writeJson(w, v)
  return w.toString()
}
