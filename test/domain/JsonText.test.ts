/**
 * A payload read with its text (JsonText.ts) writes out as that text, and an Event's JSON
 * (`eventJson`) is byte for byte what `JSON.stringify` gives the Event, with its data kept or not.
 */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { isJsonData, jsonStringBytes, nestingDepth, nestsDeeperThan, nonFiniteAt, parseKept, pathPastDepth, scanJsonText, stringifyKept, stringifyOnce } from "../../src/domain/JsonText.js"
import { eventJson, eventsOf, toEvent } from "../../src/domain/Events.js"
import { EXTENSION_KIND, type JournalRecord } from "../../src/domain/Records.js"
import { journalArb } from "../support/records.js"

/** Any JSON value as JSON.stringify writes it, -0, large and tiny numbers, lone surrogates and integer-like keys among them. */
const jsonText = fc
  .oneof(fc.jsonValue(), fc.unicodeJsonValue(), fc.dictionary(fc.constantFrom("1", "b", "0", "__proto__", "a\ud800"), fc.jsonValue()), fc.constantFrom(-0, 1e21, 5e-324, 2 ** 53))
  .map((v) => JSON.stringify(v))

describe("JSON text kept with the value parsed from it", () => {
  it("a value read with parseKept writes out as the text it was read from, and as JSON.stringify writes it", () => {
    fc.assert(
      fc.property(jsonText, (text) => {
        const value = parseKept(text)
        expect(stringifyKept(value)).toBe(text)
        expect(JSON.stringify(value)).toBe(text)
      }),
      { numRuns: 1000 }
    )
  })

  it("a value not read with parseKept is written by JSON.stringify", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(stringifyKept(value)).toBe(JSON.stringify(value))
      })
    )
  })

  it("stringifyOnce gives JSON.stringify's text the first time and every time after, and a value read with parseKept its own text", () => {
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue(), fc.unicodeJsonValue()), fc.boolean(), (value, read) => {
        const v = read ? parseKept(JSON.stringify(value)) : value
        const text = JSON.stringify(value)
        expect(stringifyOnce(v)).toBe(text)
        expect(stringifyOnce(v)).toBe(text)
        expect(stringifyKept(v)).toBe(text)
      }),
      { numRuns: 500 }
    )
  })

  it("stringifyOnce writes an object once: a later call gives the kept text, without reading the value again", () => {
    const configuration = { model: { provider: "scripted" }, tools: [{ name: "t" }] }
    const text = stringifyOnce(configuration)
    // Changed behind its back (which no caller may do): the kept text shows it was not written again.
    configuration.tools.push({ name: "u" })
    expect(stringifyOnce(configuration)).toBe(text)
    expect(JSON.stringify(configuration)).not.toBe(text)
  })

  it("an Event's JSON is JSON.stringify's, byte for byte, for every record of a journal, its payload read with its text or not", () => {
    fc.assert(
      fc.property(journalArb, fc.boolean(), (records, kept) => {
        const read = records.map((r): JournalRecord => ({ ...r, payload: kept ? parseKept(JSON.stringify(r.payload)) : r.payload }))
        for (const e of eventsOf("ses_1", read, 0)) expect(eventJson(e)).toBe(JSON.stringify(e))
      }),
      { numRuns: 300 }
    )
  })

  it("an extension Event's JSON is JSON.stringify's, with its origin or without, its data any JSON value", () => {
    const origin = fc.option(fc.record({ kind: fc.constantFrom("agentloop", "tool"), name: fc.string() }), { nil: undefined })
    fc.assert(
      fc.property(fc.string(), fc.option(fc.jsonValue(), { nil: undefined }), origin, fc.boolean(), (kind, data, from, kept) => {
        const payload = { kind, ...(data === undefined ? {} : { payload: data }), ...(from === undefined ? {} : { origin: from }) }
        const record = { sequence: 7, recorded_at_ms: 1767225600000, kind: EXTENSION_KIND, payload: kept ? parseKept(JSON.stringify(payload)) : payload } as JournalRecord
        const e = toEvent("ses_1", record, 0)!
        expect(eventJson(e)).toBe(JSON.stringify(e))
      }),
      { numRuns: 500 }
    )
  })
})

describe("jsonStringBytes", () => {
  it("is the UTF-8 length of JSON.stringify of any string: escapes, multi-byte characters, surrogate pairs and lone surrogates", () => {
    for (const s of ["", "a", "\"\\", "\n\t\b\f\r", "\u0000\u001f", "é€😀", "\ud800", "x\udc00y", "\ud83d\ude00\ud83d"]) {
      expect(jsonStringBytes(s), JSON.stringify(s)).toBe(Buffer.byteLength(JSON.stringify(s)))
    }
    fc.assert(
      fc.property(fc.oneof(fc.fullUnicodeString(), fc.stringOf(fc.char16bits())), (s) => {
        expect(jsonStringBytes(s)).toBe(Buffer.byteLength(JSON.stringify(s)))
      }),
      { numRuns: 2000 }
    )
  })
})

describe("isJsonData", () => {
  it("holds for every value JSON.parse makes", () => {
    fc.assert(fc.property(fc.jsonValue(), (v) => isJsonData(JSON.parse(JSON.stringify(v)))))
  })

  it("fails for a value with anything JSON would write other than as it is, at any depth", () => {
    const odd = [-0, new Date(0), () => 1, undefined, NaN, Infinity, Symbol("s"), 1n, new Map(), { toJSON: () => 1 }, { [Symbol("k")]: 1 }, Object.create({ inherited: 1 })]
    fc.assert(
      fc.property(fc.jsonValue(), fc.constantFrom(...odd), fc.boolean(), (v, bad, inArray) => {
        const holder = inArray ? [v, bad] : { v, bad }
        return !isJsonData(holder) && !isJsonData({ deeper: [holder] })
      })
    )
  })
})

/** scanJsonText's meaning, one character at a time: what it computed before it crossed strings by indexOf. */
const scanByCharacter = (text: string) => {
  let depth = 0
  let max = 0
  let inString = false
  let digits = 0
  let exponent = -1
  let mayOverflow = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++
      else if (c === 34) inString = false
    } else if (c >= 48 && c <= 57) {
      if (++digits >= 210 || (exponent >= 0 && ++exponent >= 3)) mayOverflow = true
    } else {
      if (c === 101 || c === 69) exponent = 0
      else if (c !== 43 && c !== 45) exponent = -1
      digits = 0
      if (c === 34) inString = true
      else if (c === 123 || c === 91) max = Math.max(max, ++depth)
      else if (c === 125 || c === 93) depth--
    }
  }
  return { depth: max, mayOverflow }
}

describe("scanJsonText", () => {
  it("gives the nesting depth and the overflow flag a character-by-character scan gives, for any JSON text and any text at all (unterminated strings, stray backslashes, brackets and digits inside strings)", () => {
    const jsonLike = fc.stringOf(fc.constantFrom("\"", "\\", "[", "]", "{", "}", "1", "9", "e", "E", "+", "-", "x", ",", ":", " ", "é"), { maxLength: 300 })
    const deepAndLong = fc.tuple(fc.nat(80), fc.nat(300), fc.constantFrom("1e", "0.", "")).map(([depth, n, head]) =>
      `${"[".repeat(depth)}"${"\\\"]".repeat(n % 7)}"${head}${"9".repeat(n)}${"]".repeat(depth)}`
    )
    fc.assert(
      fc.property(fc.oneof(jsonText, fc.string(), fc.unicodeString(), jsonLike, deepAndLong), (text) => {
        expect(scanJsonText(text)).toEqual(scanByCharacter(text))
      }),
      { numRuns: 3000 }
    )
  })

  it("does not count brackets or digits inside strings, escaped quotes included", () => {
    expect(scanJsonText(JSON.stringify({ a: "[[[{{{ \" 1e999 " + "9".repeat(300), b: [[1]] }))).toEqual({ depth: 3, mayOverflow: false })
    expect(scanJsonText("[1e400]")).toEqual({ depth: 1, mayOverflow: true })
    expect(scanJsonText('"unterminated [[[ \\')).toEqual({ depth: 0, mayOverflow: false })
  })
})

describe("nonFiniteAt", () => {
  it("names the keys and indexes leading to the first number JSON.parse read as Infinity, and nothing when every number is finite", () => {
    expect(nonFiniteAt(JSON.parse('{"a":[1,{"b":-1e400}],"c":1e999}'))).toEqual(["a", 1, "b"])
    expect(nonFiniteAt(JSON.parse("1e400"))).toEqual([])
    expect(nonFiniteAt(JSON.parse('{"__proto__":{"x":[1e400]}}'))).toEqual(["__proto__", "x", 0])
    expect(nonFiniteAt(JSON.parse('{"a":[1e308,-5e-324,12345678901234567890123,"1e400",null,true]}'))).toBeUndefined()
  })
})

describe("nestsDeeperThan", () => {
  it("agrees with the depth of the value's JSON text for any JSON value and bound", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer({ min: 0, max: 12 }), (value, max) => {
        expect(nestsDeeperThan(value, max)).toBe(nestingDepth(JSON.stringify(value)) > max)
      })
    )
  })

  it("measures a value 100,000 levels deep, arrays or objects, without overflowing the stack", () => {
    let arrays: unknown = 1
    let objects: unknown = 1
    for (let i = 0; i < 100_000; i++) {
      arrays = [arrays]
      objects = { a: objects }
    }
    expect(nestsDeeperThan(arrays, 64)).toBe(true)
    expect(nestsDeeperThan(objects, 64)).toBe(true)
    expect(nestsDeeperThan(arrays, 100_000)).toBe(false)
  })
})

describe("pathPastDepth", () => {
  /** The value at `path` in `value`. */
  const at = (value: unknown, path: ReadonlyArray<string | number>) => path.reduce<unknown>((v, k) => (v as Record<string | number, unknown>)[k], value)

  it("names the first object or array past the bound in any JSON text, and nothing within it", () => {
    fc.assert(
      fc.property(fc.unicodeJsonValue(), fc.integer({ min: 0, max: 6 }), (value, max) => {
        const text = JSON.stringify(value, null, value === null ? 0 : 1)
        const found = pathPastDepth(text, max)
        if (nestingDepth(text) <= max) {
          expect(found).toBeUndefined()
        } else {
          expect(found).toHaveLength(max)
          const there = at(value, found!)
          expect(there !== null && typeof there === "object").toBe(true)
        }
      })
    )
  })

  it("reads keys with escapes and quotes, past strings holding brackets, 100,000 levels deep, without recursion", () => {
    const text = `{"a\\"[{":[0,"]}[",{"k\\u00e9":${"[".repeat(100_000)}1${"]".repeat(100_000)}}]}`
    expect(pathPastDepth(text, 5)).toEqual(['a"[{', 2, "ké", 0, 0])
  })
})
