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

export enum JsonKind { Null, Bool, Number, String, Array, Object }

/** Past this many keys an object keeps a key index, so building and reading it stays linear. */
const INDEX_FROM: i32 = 16

export class Json {
  kind: JsonKind = JsonKind.Null
  private flag: bool = false
  /** The string's value, or the number's text. */
  private text: string = ""
  /** An array's items, or an object's values. */
  private items: Array<Json> | null = null
  /** An object's keys, in order. */
  private names: Array<string> | null = null
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

  static array(): Json {
    const j = new Json()
    j.kind = JsonKind.Array
    j.items = new Array<Json>()
    return j
  }

  static object(): Json {
    const j = new Json()
    j.kind = JsonKind.Object
    j.items = new Array<Json>()
    j.names = new Array<string>()
    return j
  }

  isNull(): bool { return this.kind == JsonKind.Null }
  isBool(): bool { return this.kind == JsonKind.Bool }
  isNumber(): bool { return this.kind == JsonKind.Number }
  isString(): bool { return this.kind == JsonKind.String }
  isArray(): bool { return this.kind == JsonKind.Array }
  isObject(): bool { return this.kind == JsonKind.Object }

  asBool(): bool {
    this.expect(JsonKind.Bool, "a boolean")
    return this.flag
  }

  asString(): string {
    this.expect(JsonKind.String, "a string")
    return this.text
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
    return this.items!.length
  }

  /** An array's item, or an object's value, at `i`. */
  at(i: i32): Json {
    const n = this.length
    if (i < 0 || i >= n) throw new Error("JSON index " + i.toString() + " is out of range (length " + n.toString() + ")")
    return unchecked(this.items![i])
  }

  keyAt(i: i32): string {
    this.expect(JsonKind.Object, "an object")
    const n = this.names!.length
    if (i < 0 || i >= n) throw new Error("JSON index " + i.toString() + " is out of range (length " + n.toString() + ")")
    return unchecked(this.names![i])
  }

  push(value: Json): Json {
    this.expect(JsonKind.Array, "an array")
    this.items!.push(value)
    return this
  }

  /** Sets `key` (replacing its value in place when it exists); returns this object. */
  set(key: string, value: Json): Json {
    const i = this.find(key)
    if (i >= 0) {
      unchecked((this.items!)[i] = value)
      return this
    }
    const names = this.names!
    names.push(key)
    this.items!.push(value)
    const index = this.index
    if (index !== null) index.set(key, names.length - 1)
    else if (names.length > INDEX_FROM) this.buildIndex()
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
    return v !== null && v.kind == JsonKind.String ? v.text : fallback
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
      out.items = this.items!.slice(0)
      return out
    }
    if (this.kind == JsonKind.Object) {
      const out = Json.object()
      const n = this.names!.length
      for (let i = 0; i < n; i++) out.set(unchecked(this.names![i]), unchecked(this.items![i]))
      return out
    }
    return this
  }

  private find(key: string): i32 {
    this.expect(JsonKind.Object, "an object")
    const index = this.index
    if (index !== null) return index.has(key) ? index.get(key) : -1
    const names = this.names!
    const n = names.length
    for (let i = 0; i < n; i++) if (unchecked(names[i]) == key) return i
    return -1
  }

  private buildIndex(): void {
    const index = new Map<string, i32>()
    const names = this.names!
    for (let i = 0; i < names.length; i++) index.set(unchecked(names[i]), i)
    this.index = index
  }

  private expect(kind: JsonKind, what: string): void {
    if (this.kind != kind) throw new Error("expected " + what + " but the JSON value is " + kindName(this.kind))
  }
}

export function kindName(kind: JsonKind): string {
  switch (kind) {
    case JsonKind.Null: return "null"
    case JsonKind.Bool: return "a boolean"
    case JsonKind.Number: return "a number"
    case JsonKind.String: return "a string"
    case JsonKind.Array: return "an array"
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
