/**
 * A JSON value as a guest holds it: one class for every kind, built with the static factories
 * (`Json.object().set("role", Json.string("user"))`) and read with the `is*`, `as*` and `get*`
 * methods.
 *
 * Rules:
 * - Objects keep their keys in insertion order. Setting a key that exists replaces its value in
 *   place, as JavaScript does, so `parse` then `stringify` rewrites what `JSON.stringify` wrote
 *   byte for byte.
 * - A number keeps its text. A parsed number is written back exactly as it came (an integer of any
 *   size stays exact, `1.50` stays `1.50`); `Json.int` writes JavaScript's digits, and `Json.float`
 *   digits that read back to the same double (see there).
 * - Strings are AssemblyScript strings (UTF-16), so a lone surrogate survives a round trip.
 * - Values are shared, not copied: pushing a value into two arrays puts the same value in both.
 * - Reading a value as a kind it is not aborts (a bug in the loop, reported through `brain.fail`);
 *   test first with `is*`, or use the `get*` readers that take a fallback.
 */

import { decimalToF64 } from "./decimal"

/**
 * `Text` is JSON text kept as it came, unparsed (`Json.text`): written back byte for byte, and
 * read only as its bytes (`textPointer`, `textLength`). A parse makes one only when asked to
 * (`parseBytes`'s `textKey`): a value that is only passed on need not cost its UTF-16 copy.
 */
export enum JsonKind { Null, Bool, Number, String, Array, Object, Text }

/** Past this many keys an object keeps a key index, so building and reading it stays linear. */
const INDEX_FROM: i32 = 16

/**
 * Room for this many items (an array's, an object's entries) is taken at the first; it doubles
 * as more are added. An AssemblyScript `Array` takes two blocks (the array and its buffer, room
 * for 8 items) at construction, and an object held two of them: 272 bytes for an empty object,
 * 160 for an empty array. Now an empty one is its `Json` alone, and up to FIRST_ROOM items one
 * block more per list (docs/benchmarks.md, "Wasm text turn, stop 59").
 */
const FIRST_ROOM: i32 = 4

export class Json {
  kind: JsonKind = JsonKind.Null
  private flag: bool = false
  /** The string's value, or the number's text. */
  private text: string = ""
  /** An array's items, or an object's values: the first `count` of them (null until the first is added). */
  private items: StaticArray<Json> | null = null
  /** An object's keys, in order, beside its values (null until the first is set). */
  private names: StaticArray<string> | null = null
  private count: i32 = 0
  private index: Map<string, i32> | null = null

  static null(): Json {
    return new Json()
  }

  static bool(value: bool): Json {
    const j = new Json()
    j.kind = JsonKind.Bool
    j.flag = value
    return j
  }

  static int(value: i64): Json {
    return Json.numberText(value.toString())
  }

  /**
   * A number from a float: NaN and the infinities become `null` and -0 is `0`, as in
   * `JSON.stringify`. The digits read back to exactly `value`, in JavaScript's format; they are
   * AssemblyScript's shortest-digit search (Grisu2), which for about one 17-digit double in five
   * ends in a different last digit than JavaScript's (the same double either way).
   */
  static float(value: f64): Json {
    if (!isFinite(value)) return Json.null()
    if (value == 0) return Json.numberText("0")
    let text = value.toString()
    // AssemblyScript writes integral floats as `1.0`; JavaScript writes `1`.
    if (text.endsWith(".0")) text = text.substring(0, text.length - 2)
    return Json.numberText(text)
  }

  /** A number from text the parser has checked (JSON number grammar). */
  static numberText(text: string): Json {
    const j = new Json()
    j.kind = JsonKind.Number
    j.text = text
    return j
  }

  static string(value: string): Json {
    const j = new Json()
    j.kind = JsonKind.String
    j.text = value
    return j
  }

  /**
   * A string whose value is the `length` bytes of UTF-8 at `ptr` (valid UTF-8, as a parsed
   * answer's is), held as those bytes, not as UTF-16: the writer escapes them as it writes them,
   * and `asString` decodes them each time it is asked. For a large string that is only passed on
   * (a tool's output carried to the model): half the memory, no copy.
   */
  static stringBytes(ptr: usize, length: usize): Json {
    return JsonBytes.make(JsonKind.String, ptr, length)
  }

  /** JSON text (`length` bytes at `ptr`, already checked) kept as it is: written back byte for byte. */
  static text(ptr: usize, length: usize): Json {
    return JsonBytes.make(JsonKind.Text, ptr, length)
  }

  static array(): Json {
    const j = new Json()
    j.kind = JsonKind.Array
    return j
  }

  static object(): Json {
    const j = new Json()
    j.kind = JsonKind.Object
    return j
  }

  isNull(): bool { return this.kind == JsonKind.Null }
  isBool(): bool { return this.kind == JsonKind.Bool }
  isNumber(): bool { return this.kind == JsonKind.Number }
  isString(): bool { return this.kind == JsonKind.String }
  isArray(): bool { return this.kind == JsonKind.Array }
  isObject(): bool { return this.kind == JsonKind.Object }
  isText(): bool { return this.kind == JsonKind.Text }
  /** Whether it is a string held as UTF-8 bytes (`stringBytes`). */
  isStringBytes(): bool { return this.kind == JsonKind.String && this.flag }

  /** Where the bytes of a `Json.text` or a `Json.stringBytes` string are. */
  get textPointer(): usize {
    return this.held().bytes
  }

  /** How many bytes a `Json.text` or a `Json.stringBytes` string has. */
  get textLength(): usize {
    return this.held().byteLength
  }

  /** This value as one held as bytes (a `Text`, or a string whose `flag` says so); aborts for any other. */
  private held(): JsonBytes {
    if (!((this.kind == JsonKind.String || this.kind == JsonKind.Text) && this.flag)) this.expect(JsonKind.Text, "JSON text")
    return changetype<JsonBytes>(this)
  }

  asBool(): bool {
    this.expect(JsonKind.Bool, "a boolean")
    return this.flag
  }

  asString(): string {
    this.expect(JsonKind.String, "a string")
    return this.stringValue()
  }

  private stringValue(): string {
    if (!this.flag) return this.text
    const held = changetype<JsonBytes>(this)
    return String.UTF8.decodeUnsafe(held.bytes, held.byteLength)
  }

  /** The number as it was written (`12`, `-0.5`, `1e+21`). */
  numberText(): string {
    this.expect(JsonKind.Number, "a number")
    return this.text
  }

  /** Whether the number is written as an integer (no fraction, no exponent) that fits an i64. */
  isInteger(): bool {
    return this.kind == JsonKind.Number && parseExactI64(this.text) !== null
  }

  /** The number as an i64: exact for an integer that fits, else its float value truncated and clamped. */
  asI64(): i64 {
    this.expect(JsonKind.Number, "a number")
    const exact = parseExactI64(this.text)
    if (exact !== null) return exact.value
    const f = decimalToF64(this.text)
    if (f >= 9223372036854775807.0) return i64.MAX_VALUE
    if (f <= -9223372036854775808.0) return i64.MIN_VALUE
    return <i64>f
  }

  /** The nearest double, as JavaScript reads the same text. */
  asF64(): f64 {
    this.expect(JsonKind.Number, "a number")
    return decimalToF64(this.text)
  }

  /** An array's items or an object's entries. */
  get length(): i32 {
    if (this.kind != JsonKind.Array && this.kind != JsonKind.Object) this.expect(JsonKind.Array, "an array or an object")
    return this.count
  }

  /** An array's item, or an object's value, at `i`. */
  at(i: i32): Json {
    const n = this.length
    if (i < 0 || i >= n) throw new Error("JSON index " + i.toString() + " is out of range (length " + n.toString() + ")")
    return unchecked(this.items![i])
  }

  keyAt(i: i32): string {
    this.expect(JsonKind.Object, "an object")
    const n = this.count
    if (i < 0 || i >= n) throw new Error("JSON index " + i.toString() + " is out of range (length " + n.toString() + ")")
    return unchecked(this.names![i])
  }

  push(value: Json): Json {
    this.expect(JsonKind.Array, "an array")
    const n = this.count
    let items = this.items
    if (items === null || n == items.length) items = this.items = grown<Json>(items, n)
    unchecked((items[n] = value))
    this.count = n + 1
    return this
  }

  /** Sets `key` (replacing its value in place when it exists); returns this object. */
  set(key: string, value: Json): Json {
    const i = this.find(key)
    if (i >= 0) {
      unchecked((this.items!)[i] = value)
      return this
    }
    const n = this.count
    let items = this.items
    let names = this.names
    if (items === null || n == items.length) {
      items = this.items = grown<Json>(items, n)
      names = this.names = grown<string>(names, n)
    }
    unchecked((items[n] = value))
    unchecked((names![n] = key))
    this.count = n + 1
    const index = this.index
    if (index !== null) index.set(key, n)
    else if (n + 1 > INDEX_FROM) this.buildIndex()
    return this
  }

  /** The value of `key`, or null when the object has no such key (a JSON null is `Json.null()`). */
  get(key: string): Json | null {
    const i = this.find(key)
    return i < 0 ? null : unchecked(this.items![i])
  }

  has(key: string): bool {
    return this.find(key) >= 0
  }

  /** The string at `key`, or `fallback` when it is absent or not a string. */
  getString(key: string, fallback: string = ""): string {
    const v = this.get(key)
    return v !== null && v.kind == JsonKind.String ? v.stringValue() : fallback
  }

  /** The boolean at `key`, or `fallback` when it is absent or not a boolean. */
  getBool(key: string, fallback: bool = false): bool {
    const v = this.get(key)
    return v !== null && v.kind == JsonKind.Bool ? v.flag : fallback
  }

  /** The number at `key` as an i64 (see `asI64`), or `fallback` when it is absent or not a number. */
  getI64(key: string, fallback: i64 = 0): i64 {
    const v = this.get(key)
    return v !== null && v.kind == JsonKind.Number ? v.asI64() : fallback
  }

  /** A new array or object holding the same values (one level deep); other kinds are returned as they are. */
  shallowCopy(): Json {
    if (this.kind == JsonKind.Array) {
      const out = Json.array()
      const n = this.count
      if (n > 0) {
        out.items = withRoom<Json>(this.items!, n, n < FIRST_ROOM ? FIRST_ROOM : n)
        out.count = n
      }
      return out
    }
    if (this.kind == JsonKind.Object) {
      const out = Json.object()
      const n = this.count
      for (let i = 0; i < n; i++) out.set(unchecked(this.names![i]), unchecked(this.items![i]))
      return out
    }
    return this
  }

  private find(key: string): i32 {
    this.expect(JsonKind.Object, "an object")
    const index = this.index
    if (index !== null) return index.has(key) ? index.get(key) : -1
    const n = this.count
    if (n == 0) return -1
    const names = this.names!
    for (let i = 0; i < n; i++) if (unchecked(names[i]) == key) return i
    return -1
  }

  private buildIndex(): void {
    const index = new Map<string, i32>()
    const names = this.names!
    for (let i = 0; i < this.count; i++) index.set(unchecked(names[i]), i)
    this.index = index
  }

  /** Marks this value as held as bytes (JsonBytes.make; `flag` is a boolean's value, unused by a string or text). */
  protected markHeld(): void {
    this.flag = true
  }

  private expect(kind: JsonKind, what: string): void {
    if (this.kind != kind) throw new Error("expected " + what + " but the JSON value is " + kindName(this.kind))
  }
}

/**
 * A value held as UTF-8 bytes (`Json.stringBytes`, `Json.text`): where they are and how many. They
 * are not copied: they stay where they are (an answer's bytes do: the allocator never frees). Its
 * own class, so that every other value stays as small as it was; `flag` marks a string held so.
 */
class JsonBytes extends Json {
  bytes: usize = 0
  byteLength: usize = 0

  static make(kind: JsonKind, ptr: usize, length: usize): Json {
    const j = new JsonBytes()
    j.kind = kind
    j.markHeld()
    j.bytes = ptr
    j.byteLength = length
    return j
  }
}

/** A list with room for more than its `n` items (FIRST_ROOM for the first, then twice as many), the first `n` copied from `old`. */
function grown<T>(old: StaticArray<T> | null, n: i32): StaticArray<T> {
  return withRoom<T>(old, n, n < FIRST_ROOM ? FIRST_ROOM : n << 1)
}

/**
 * A list with room for `room` items, the first `n` copied from `old` (one by one, so a runtime
 * with a collector sees each reference stored). The old one is left to the allocator.
 */
function withRoom<T>(old: StaticArray<T> | null, n: i32, room: i32): StaticArray<T> {
  const out = new StaticArray<T>(room)
  if (old !== null) for (let i = 0; i < n; i++) unchecked((out[i] = old[i]))
  return out
}

export function kindName(kind: JsonKind): string {
  switch (kind) {
    case JsonKind.Null: return "null"
    case JsonKind.Bool: return "a boolean"
    case JsonKind.Number: return "a number"
    case JsonKind.String: return "a string"
    case JsonKind.Array: return "an array"
    case JsonKind.Text: return "JSON text"
    default: return "an object"
  }
}

class ExactI64 {
  constructor(public value: i64) {}
}

/** The integer `text` names when it is written without fraction or exponent and fits an i64; else null. */
function parseExactI64(text: string): ExactI64 | null {
  const n = text.length
  let i = 0
  const negative = n > 0 && text.charCodeAt(0) == 45 // '-'
  if (negative) i = 1
  if (i == n) return null
  // Accumulate negatively: i64.MIN_VALUE has no positive counterpart.
  let acc: i64 = 0
  for (; i < n; i++) {
    const d = text.charCodeAt(i) - 48
    if (d < 0 || d > 9) return null
    if (acc < (i64.MIN_VALUE + <i64>d) / 10) return null
    acc = acc * 10 - <i64>d
  }
  if (!negative) {
    if (acc == i64.MIN_VALUE) return null
    acc = -acc
  }
  return new ExactI64(acc)
}
