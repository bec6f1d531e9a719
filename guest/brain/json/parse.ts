/**
 * The JSON parser: UTF-8 bytes (or a string) to a `Json` value, strictly by RFC 8259.
 *
 * Rules:
 * - Malformed input is an error value (`ParseResult.error`, with the byte offset), never a trap:
 *   bad UTF-8, a raw control character or a bad escape in a string, a number outside the grammar
 *   (`01`, `1.`, `.5`, `+1`, `NaN`), a trailing comma, anything after the value, a byte-order mark.
 * - `\uXXXX` escapes become UTF-16 code units as written: a pair joins into one character, a lone
 *   surrogate stays (as `JSON.parse` keeps it).
 * - A repeated key keeps its first position and its last value (as `JSON.parse` does).
 * - Nesting deeper than `MAX_DEPTH` is an error, so a hostile document cannot exhaust the stack.
 * - Numbers are checked against the grammar and kept as text (json/value.ts says why).
 */
import { Json } from "./value"

/** Arrays and objects nested deeper than this are refused. */
export const MAX_DEPTH: i32 = 512

export class ParseResult {
  constructor(public value: Json | null, public error: string, public offset: i32) {}
  get ok(): bool { return this.value !== null }
}

/**
 * Parses the UTF-8 JSON text of `len` bytes at `ptr`. With `textKey`, the value of every object
 * member of that name is checked as any value is but kept as its text (`Json.text`, pointing into
 * these bytes, which must then stay as they are): a value only passed on, such as a tool's output
 * (`dispatch` answers them as `output`), costs no parsed copy.
 */
export function parseBytes(ptr: usize, len: usize, textKey: string | null = null): ParseResult {
  const p = new Parser(ptr, ptr + len)
  p.textKey = textKey
  p.ws()
  let value = p.value(0)
  if (value !== null) {
    p.ws()
    if (p.pos < p.end) value = p.fail("unexpected text after the JSON value")
  }
  if (value === null) return new ParseResult(null, p.error, <i32>(p.errorAt - ptr))
  return new ParseResult(value, "", 0)
}

export function parse(text: string): ParseResult {
  const bytes = String.UTF8.encode(text)
  return parseBytes(changetype<usize>(bytes), <usize>bytes.byteLength)
}

/**
 * The members of the JSON object in `len` bytes at `ptr`, each value left unparsed: its key and
 * where its text starts and ends. The whole text is checked as `parseBytes` checks it (the same
 * errors), so reading a member later (`parseBytes(start, end - start)`) cannot fail. A repeated
 * key keeps its first position and its last value. Null (with `error`) for text that is not an
 * object.
 */
export class Members {
  keys: Array<string> = new Array<string>()
  starts: Array<usize> = new Array<usize>()
  ends: Array<usize> = new Array<usize>()
  error: string = ""
  offset: i32 = 0

  /** The index of `key`'s member, or -1. */
  find(key: string): i32 {
    for (let i = 0; i < this.keys.length; i++) if (this.keys[i] == key) return i
    return -1
  }
}

export function parseMembers(ptr: usize, len: usize): Members {
  const out = new Members()
  const p = new Parser(ptr, ptr + len)
  p.ws()
  if (p.peek() != 0x7b) {
    // Not an object: the error the full parse gives, or that it is not one.
    if (p.skip(0)) {
      p.ws()
      if (p.pos < p.end) p.fail("unexpected text after the JSON value")
      else p.fail("not a JSON object")
    }
  } else {
    p.pos++
    p.ws()
    if (p.peek() == 0x7d) p.pos++
    else {
      while (true) {
        if (p.peek() != 0x22) {
          p.fail("expected a string key")
          break
        }
        const key = p.string()
        if (key === null) break
        p.ws()
        if (p.peek() != 0x3a) {
          p.fail("expected ':'")
          break
        }
        p.pos++
        p.ws()
        const start = p.pos
        if (!p.skip(1)) break
        const at = out.find(key)
        if (at < 0) {
          out.keys.push(key)
          out.starts.push(start)
          out.ends.push(p.pos)
        } else {
          out.starts[at] = start
          out.ends[at] = p.pos
        }
        p.ws()
        const b = p.peek()
        p.pos++
        if (b == 0x7d) break
        if (b != 0x2c) {
          p.pos--
          p.fail("expected ',' or '}'")
          break
        }
        p.ws()
      }
    }
    if (p.error.length == 0) {
      p.ws()
      if (p.pos < p.end) p.fail("unexpected text after the JSON value")
    }
  }
  if (p.error.length > 0) {
    out.error = p.error
    out.offset = <i32>(p.errorAt - ptr)
  }
  return out
}

/**
 * The elements of the JSON array in `len` bytes at `ptr` (text `parseMembers` or `parseBytes` has
 * already checked) whose member `key` is the string `value`, parsed; the others are only skipped.
 * Elements that are not objects, or lack the member, are left out. Answers null when the text is
 * not an array.
 */
export function parseElementsWhere(ptr: usize, len: usize, key: string, value: string): Json | null {
  const p = new Parser(ptr, ptr + len)
  p.ws()
  if (p.peek() != 0x5b) return null
  const out = Json.array()
  p.pos++
  p.ws()
  if (p.peek() == 0x5d) return out
  while (true) {
    const start = p.pos
    if (p.peek() != 0x7b) {
      if (!p.skip(0)) return null
    } else if (p.objectHas(key, value)) {
      p.pos = start
      const element = p.value(0)
      if (element === null) return null
      out.push(element)
    }
    p.ws()
    const b = p.peek()
    p.pos++
    if (b == 0x5d) return out
    if (b != 0x2c) return null
    p.ws()
  }
}

/**
 * UTF-16 code units of the string being decoded; reused, so decoding allocates only the result.
 * Allocated on first use (a library module must not allocate at the top level: abi.ts says why).
 */
let units: usize = 0
let unitsCap: usize = 0

// @ts-ignore: decorator
@inline function isDigit(b: u32): bool { return b - 48 < 10 }

function hexValue(b: u32): i32 {
  if (b - 48 < 10) return <i32>(b - 48)
  const lower = b | 0x20
  if (lower - 97 < 6) return <i32>(lower - 87)
  return -1
}

class Parser {
  error: string = ""
  errorAt: usize = 0
  /** The members of this name are kept as their text (`parseBytes`). */
  textKey: string | null = null
  constructor(public pos: usize, public end: usize) {}

  fail(message: string): Json | null {
    if (this.error.length == 0) {
      this.error = message
      this.errorAt = this.pos
    }
    return null
  }

  /** `fail` for the checks that answer whether they passed. */
  failed(message: string): bool {
    this.fail(message)
    return false
  }

  @inline peek(): u32 { return this.pos < this.end ? <u32>load<u8>(this.pos) : 0xffffffff }

  ws(): void {
    let at = this.pos
    const end = this.end
    while (at < end) {
      const b = load<u8>(at)
      if (b != 0x20 && b != 0x0a && b != 0x0d && b != 0x09) break
      at++
    }
    this.pos = at
  }

  value(depth: i32): Json | null {
    const b = this.peek()
    if (b == 0x7b) return this.object(depth + 1) // {
    if (b == 0x5b) return this.array(depth + 1) // [
    if (b == 0x22) { // "
      const s = this.string()
      return s === null ? null : Json.string(s)
    }
    if (b == 0x2d || isDigit(b)) return this.number()
    if (this.word("true")) return Json.bool(true)
    if (this.word("false")) return Json.bool(false)
    if (this.word("null")) return Json.null()
    return this.fail(this.pos < this.end ? "unexpected character" : "unexpected end of input")
  }

  word(w: string): bool {
    const n = <usize>w.length
    if (this.end - this.pos < n) return false
    for (let i: usize = 0; i < n; i++) {
      if (<u32>load<u8>(this.pos + i) != <u32>w.charCodeAt(<i32>i)) return false
    }
    this.pos += n
    return true
  }

  object(depth: i32): Json | null {
    if (depth > MAX_DEPTH) return this.fail("nested deeper than " + MAX_DEPTH.toString())
    this.pos++
    const out = Json.object()
    this.ws()
    if (this.peek() == 0x7d) { // }
      this.pos++
      return out
    }
    while (true) {
      if (this.peek() != 0x22) return this.fail("expected a string key")
      const key = this.string()
      if (key === null) return null
      this.ws()
      if (this.peek() != 0x3a) return this.fail("expected ':'")
      this.pos++
      this.ws()
      let v: Json | null
      const textKey = this.textKey
      if (textKey !== null && key == textKey) {
        const start = this.pos
        v = this.skip(depth) ? Json.text(start, this.pos - start) : null
      } else {
        v = this.value(depth)
      }
      if (v === null) return null
      out.set(key, v)
      this.ws()
      const b = this.peek()
      this.pos++
      if (b == 0x7d) return out
      if (b != 0x2c) {
        this.pos--
        return this.fail("expected ',' or '}'")
      }
      this.ws()
    }
  }

  array(depth: i32): Json | null {
    if (depth > MAX_DEPTH) return this.fail("nested deeper than " + MAX_DEPTH.toString())
    this.pos++
    const out = Json.array()
    this.ws()
    if (this.peek() == 0x5d) { // ]
      this.pos++
      return out
    }
    while (true) {
      const v = this.value(depth)
      if (v === null) return null
      out.push(v)
      this.ws()
      const b = this.peek()
      this.pos++
      if (b == 0x5d) return out
      if (b != 0x2c) {
        this.pos--
        return this.fail("expected ',' or ']'")
      }
      this.ws()
    }
  }

  /**
   * Moves past one value, checking it exactly as `value` would, without building it: nothing is
   * allocated. False (with the error set) where `value` would give an error.
   */
  skip(depth: i32): bool {
    const b = this.peek()
    if (b == 0x7b || b == 0x5b) { // { [
      if (depth + 1 > MAX_DEPTH) return this.failed("nested deeper than " + MAX_DEPTH.toString())
      const close: u32 = b == 0x7b ? 0x7d : 0x5d
      this.pos++
      this.ws()
      if (this.peek() == close) {
        this.pos++
        return true
      }
      while (true) {
        if (close == 0x7d) {
          if (this.peek() != 0x22) return this.failed("expected a string key")
          if (!this.skipString()) return false
          this.ws()
          if (this.peek() != 0x3a) return this.failed("expected ':'")
          this.pos++
          this.ws()
        }
        if (!this.skip(depth + 1)) return false
        this.ws()
        const c = this.peek()
        this.pos++
        if (c == close) return true
        if (c != 0x2c) {
          this.pos--
          return this.failed(close == 0x7d ? "expected ',' or '}'" : "expected ',' or ']'")
        }
        this.ws()
      }
    }
    if (b == 0x22) return this.skipString()
    if (b == 0x2d || isDigit(b)) return this.scanNumber()
    if (this.word("true") || this.word("false") || this.word("null")) return true
    return this.failed(this.pos < this.end ? "unexpected character" : "unexpected end of input")
  }

  /**
   * Whether the object at `pos` (text already checked) has the member `key` with the string value
   * `value` (its last one, when the key repeats). Moves `pos` past the object.
   */
  objectHas(key: string, value: string): bool {
    let found = false
    this.pos++
    this.ws()
    if (this.peek() == 0x7d) {
      this.pos++
      return false
    }
    while (true) {
      const isKey = this.stringEquals(key)
      if (isKey < 0) return false // not reached: the text was checked
      this.ws()
      this.pos++ // :
      this.ws()
      if (isKey == 1) {
        if (this.peek() == 0x22) {
          const same = this.stringEquals(value)
          if (same < 0) return false
          found = same == 1
        } else {
          found = false
          if (!this.skip(0)) return false
        }
      } else if (!this.skip(0)) return false
      this.ws()
      const b = this.peek()
      this.pos++
      if (b != 0x2c) return found
      this.ws()
    }
  }

  /**
   * Whether the string at `pos` (its opening quote) is `want`, moving past it: 1 or 0, or -1 (with
   * the error set) when it is malformed. Printable ASCII without escapes, the usual case, is
   * compared byte by byte without building the string.
   */
  stringEquals(want: string): i32 {
    const start = this.pos
    const n = want.length
    let at = start + 1
    let i = 0
    while (at < this.end) {
      const b = <u32>load<u8>(at)
      if (b == 0x22) {
        this.pos = at + 1
        return i == n ? 1 : 0
      }
      if (b == 0x5c || b - 0x20 >= 0x60) break
      if (i >= n || <u32>want.charCodeAt(i) != b) {
        this.pos = start
        return this.skipString() ? 0 : -1
      }
      i++
      at++
    }
    this.pos = start
    const s = this.string()
    if (s === null) return -1
    return s == want ? 1 : 0
  }

  /** Moves past a string from its opening quote, checked as `string` checks it. */
  skipString(): bool {
    // Printable ASCII in a local, the rest (escapes, UTF-8, what is refused) through `pos`.
    let at = this.pos + 1
    const end = this.end
    while (at < end) {
      at = plainEnd(at, end)
      if (at >= end) break
      const b = <u32>load<u8>(at)
      if (b == 0x22) {
        this.pos = at + 1
        return true
      }
      this.pos = at
      if (b == 0x5c) {
        if (this.escape() < 0) return false
      } else if (b < 0x20) {
        return this.failed("raw control character in a string")
      } else if (this.utf8(b) < 0) {
        return false
      }
      at = this.pos
    }
    this.pos = at
    return this.failed("unterminated string")
  }

  number(): Json | null {
    const start = this.pos
    if (!this.scanNumber()) return null
    return Json.numberText(String.UTF8.decodeUnsafe(start, this.pos - start))
  }

  /** Moves past a number, checked against the grammar; false (with the error set) when it breaks it. */
  scanNumber(): bool {
    if (this.peek() == 0x2d) this.pos++
    const first = this.peek()
    if (first == 0x30) this.pos++
    else if (isDigit(first)) this.digits()
    else return this.failed("expected a digit")
    if (this.peek() == 0x2e) { // .
      this.pos++
      if (!isDigit(this.peek())) return this.failed("expected a digit after '.'")
      this.digits()
    }
    const e = this.peek()
    if (e == 0x65 || e == 0x45) { // e E
      this.pos++
      const sign = this.peek()
      if (sign == 0x2b || sign == 0x2d) this.pos++
      if (!isDigit(this.peek())) return this.failed("expected a digit in the exponent")
      this.digits()
    }
    return true
  }

  digits(): void {
    while (this.pos < this.end && isDigit(<u32>load<u8>(this.pos))) this.pos++
  }

  /** Reads a string from its opening quote; null (with the error set) when it is malformed. */
  string(): string | null {
    this.pos++
    // Most strings are printable ASCII without escapes: found in one scan, widened in one pass.
    const start = this.pos
    const end = this.end
    const at = plainEnd(start, end)
    if (at < end && load<u8>(at) == 0x22) {
      const len = at - start
      const out = changetype<usize>(__new(len << 1, idof<String>()))
      widen(start, len, out)
      this.pos = at + 1
      return changetype<string>(out)
    }
    let n: usize = 0 // code units written
    while (true) {
      // The plain bytes up to the next escape, quote or other byte, widened at once.
      const plain = plainEnd(this.pos, this.end) - this.pos
      if (plain > 0) {
        if (n + plain + 2 > unitsCap) growUnits(n + plain + 2)
        widen(this.pos, plain, units + (n << 1))
        n += plain
        this.pos += plain
      }
      if (this.pos >= this.end) {
        this.fail("unterminated string")
        return null
      }
      if (n + 2 > unitsCap) growUnits(n + 2)
      const b = <u32>load<u8>(this.pos)
      if (b == 0x22) {
        this.pos++
        return String.UTF16.decodeUnsafe(units, n << 1)
      }
      if (b == 0x5c) {
        const unit = this.escape()
        if (unit < 0) return null
        store<u16>(units + (n << 1), <u16>unit)
        n++
        continue
      }
      if (b < 0x20) {
        this.fail("raw control character in a string")
        return null
      }
      if (b < 0x80) {
        store<u16>(units + (n << 1), <u16>b)
        n++
        this.pos++
        continue
      }
      const cp = this.utf8(b)
      if (cp < 0) return null
      if (cp < 0x10000) {
        store<u16>(units + (n << 1), <u16>cp)
        n++
      } else {
        const c = <u32>cp - 0x10000
        store<u16>(units + (n << 1), <u16>(0xd800 | (c >>> 10)))
        store<u16>(units + (n << 1) + 2, <u16>(0xdc00 | (c & 0x3ff)))
        n += 2
      }
    }
  }

  /** One escape, from its backslash: the code unit it names, or -1 (with the error set). */
  escape(): i32 {
    this.pos++
    const e = this.peek()
    this.pos++
    switch (e) {
      case 0x22: return 0x22
      case 0x5c: return 0x5c
      case 0x2f: return 0x2f
      case 0x62: return 0x08
      case 0x66: return 0x0c
      case 0x6e: return 0x0a
      case 0x72: return 0x0d
      case 0x74: return 0x09
      case 0x75: {
        let unit = 0
        for (let i = 0; i < 4; i++) {
          const h = <usize>i < this.end - this.pos ? hexValue(<u32>load<u8>(this.pos + <usize>i)) : -1
          if (h < 0) {
            this.pos -= 2
            this.fail("bad \\u escape")
            return -1
          }
          unit = (unit << 4) | h
        }
        this.pos += 4
        return unit
      }
    }
    this.pos -= 2
    this.fail("bad escape")
    return -1
  }

  /** A multi-byte UTF-8 sequence led by `b`: its code point, or -1 (with the error set). */
  utf8(b: u32): i32 {
    let need: usize
    let cp: u32
    let min: u32
    if (b >= 0xc2 && b <= 0xdf) { need = 1; cp = b & 0x1f; min = 0x80 }
    else if (b >= 0xe0 && b <= 0xef) { need = 2; cp = b & 0x0f; min = 0x800 }
    else if (b >= 0xf0 && b <= 0xf4) { need = 3; cp = b & 0x07; min = 0x10000 }
    else {
      this.fail("invalid UTF-8")
      return -1
    }
    if (this.end - this.pos <= need) {
      this.fail("invalid UTF-8")
      return -1
    }
    for (let i: usize = 1; i <= need; i++) {
      const c = <u32>load<u8>(this.pos + i)
      if ((c & 0xc0) != 0x80) {
        this.fail("invalid UTF-8")
        return -1
      }
      cp = (cp << 6) | (c & 0x3f)
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
      this.fail("invalid UTF-8")
      return -1
    }
    this.pos += need + 1
    return <i32>cp
  }
}

const ONES: u64 = 0x0101010101010101
const HIGHS: u64 = 0x8080808080808080

/**
 * Where the run of plain string bytes from `at` ends (at most `end`): printable ASCII (0x20–0x7f)
 * other than `"` and `\`, the bytes a string scan takes one by one without a second look. Eight
 * bytes are tested at once while they can be: a word is plain when none of its bytes is zero
 * after an XOR with `"` or with `\`, none is below 0x20 and none has its high bit (the exact "a
 * byte is zero" and "a byte is below n" word tests). The first word that is not is finished byte
 * by byte, so the run ends at its first byte that is not plain, exactly where a byte-by-byte scan
 * would end it.
 */
function plainEnd(at: usize, end: usize): usize {
  while (end - at >= 8) {
    const x = load<u64>(at)
    const quote = x ^ (ONES * 0x22)
    const backslash = x ^ (ONES * 0x5c)
    const marked = ((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash) | ((x - ONES * 0x20) & ~x) | x
    if ((marked & HIGHS) != 0) break
    at += 8
  }
  while (at < end) {
    const b = <u32>load<u8>(at)
    if (b == 0x22 || b == 0x5c || b - 0x20 >= 0x60) break
    at++
  }
  return at
}

/** Writes `count` bytes from `from` as as many UTF-16 code units at `to`, four at a time while it can. */
function widen(from: usize, count: usize, to: usize): void {
  let i: usize = 0
  while (i + 4 <= count) {
    const x = <u64>load<u32>(from + i)
    store<u64>(to + (i << 1), (x & 0xff) | ((x & 0xff00) << 8) | ((x & 0xff0000) << 16) | ((x & 0xff000000) << 24))
    i += 4
  }
  for (; i < count; i++) store<u16>(to + (i << 1), <u16>load<u8>(from + i))
}

function growUnits(needed: usize): void {
  let cap = unitsCap == 0 ? <usize>256 : unitsCap << 1
  while (cap < needed) cap <<= 1
  units = units == 0 ? heap.alloc(cap << 1) : heap.realloc(units, cap << 1)
  unitsCap = cap
}
