/**
 * The guest JSON library (guest/brain/json), through a compiled probe (guest/test/probe.ts): what it
 * accepts it writes back as `JSON.stringify` would, keys in order and integers exact; what is
 * malformed is an error with a byte offset, never a trap; misuse of a value reaches Brain as
 * `brain.fail`.
 */
import { beforeAll, describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { compileProbe, type Guest, type Instance, instantiate } from "./harness.js"

let probe: Guest
let instance: Instance
beforeAll(async () => {
  probe = await compileProbe("guest/test/probe.ts")
}, 120_000)

/** A fresh instance every few hundred calls: the probe's heap only grows. */
let uses = 0
const live = () => {
  if (uses++ % 200 === 0) instance = instantiate(probe, () => ({ ok: null }))
  return instance
}

/** Parses `text` (a string, or raw bytes) in the guest: the value written back, or the error. */
const roundTrip = (text: string | Uint8Array): { ok?: string; error?: string } => {
  const i = live()
  const [ptr, len] = i.place(text)
  const { output, failed } = i.result(() => i.exports.brain_run(ptr, len))
  if (failed !== undefined) throw new Error(`brain.fail: ${failed}`)
  if (output!.startsWith(`{"ok":`)) return { ok: output!.slice(6, -1) }
  return { error: JSON.parse(output!).error.message }
}

const okOf = (text: string) => {
  const r = roundTrip(text)
  expect(r.error).toBeUndefined()
  return r.ok!
}

const viaStringApi = (text: string) => {
  const i = live()
  const [ptr, len] = i.place(text)
  return JSON.parse(i.result(() => i.exports.probe_string_api(ptr, len)).output!).ok as string
}

const build = () => {
  const i = live()
  return JSON.parse(i.result(() => i.exports.probe_build()).output!).ok
}

const bytes = (...b: Array<number>) => Uint8Array.from(b)

describe("guest JSON", () => {
  it("values held as bytes: a member kept as its text is written back as it came, a string held as UTF-8 bytes is written as JSON.stringify writes it, and jsonLength counts exactly the bytes written (random values, all of Unicode)", () => {
    const escapes = fc.constantFrom('"', "\\", "\n", "\u0000", "\u001f", "\u007f", "é", "€", "😀", "/", "a")
    const text = fc.oneof(fc.fullUnicodeString(), fc.array(escapes, { maxLength: 40 }).map((a) => a.join("")))
    fc.assert(
      fc.property(fc.unicodeJsonValue(), text, fc.integer({ min: 1, max: 64 }), (v, t, initial) => {
        const input = JSON.stringify({ v, w: [v, { v: t }], t })
        const i = live()
        const [ptr, len] = i.place(input)
        const { output, failed } = i.result(() => i.exports.probe_bytes(ptr, len, initial))
        expect(failed).toBeUndefined()
        const out = JSON.parse(output!).ok
        expect(output!.startsWith(`{"ok":{"value":${input},"length":`)).toBe(true)
        expect(out.length).toBe(Buffer.byteLength(input, "utf8"))
        expect(out.string).toBe(input)
        expect(out.stringLength).toBe(Buffer.byteLength(JSON.stringify(input), "utf8"))
        expect(out.asString).toBe(true)
        expect(out.fits).toBe(true)
        // The text written for the string is JSON.stringify's, byte for byte.
        expect(output!).toContain(`"string":${JSON.stringify(input)},`)
      }),
      { numRuns: 400 }
    )
  })

  it("round trips what JSON.stringify writes, byte for byte (random values, all of Unicode)", () => {
    fc.assert(
      fc.property(fc.unicodeJsonValue(), (v) => {
        const text = JSON.stringify(v)
        expect(okOf(text)).toBe(text)
      }),
      { numRuns: 500 }
    )
  })

  it("strings of any UTF-16 code units, lone surrogates included, come back as JSON.stringify writes them", () => {
    const units = fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 40 }).map((a) => String.fromCharCode(...a))
    fc.assert(
      fc.property(units, (s) => {
        const text = JSON.stringify(s)
        expect(okOf(text)).toBe(text)
        expect(okOf(JSON.stringify({ [s]: s }))).toBe(JSON.stringify({ [s]: s }))
      }),
      { numRuns: 500 }
    )
  })

  it("a string is written within the writer's room whatever its characters, the room growing as they need it (from any starting size)", () => {
    const units = fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 200 }).map((a) => String.fromCharCode(...a))
    fc.assert(
      fc.property(units, fc.integer({ min: 1, max: 300 }), (s, initial) => {
        const i = live()
        const text = JSON.stringify(s)
        const [ptr, len] = i.place(text)
        const written = JSON.parse(i.result(() => i.exports.probe_write_string(ptr, len, initial)).output!).ok
        expect(written).toEqual({ fits: true, text })
      }),
      { numRuns: 500 }
    )
  })

  it("a string's plain code units, written four at a time, give JSON.stringify's bytes: one quote, backslash, control, DEL, Latin-1, wider or surrogate unit at every place in strings of 0 to 40 units, from any starting room", () => {
    const plain = Array.from({ length: 40 }, (_, i) => String.fromCharCode(0x20 + ((i * 7) % 0x5f))).join("").replace(/["\\]/g, "y")
    const odd = ["\"", "\\", "\n", "\u0001", "\u001f", "\u007f", "é", "\u0100", "€", "😀", "\ud800", "\udc00"]
    for (let n = 0; n <= 40; n++) {
      const s = plain.slice(0, n)
      for (let i = 0; i <= n; i++) {
        for (const c of odd) {
          const value = s.slice(0, i) + c + s.slice(i)
          for (const initial of [1, 5, 9, 64]) {
            const live_ = live()
            const [ptr, len] = live_.place(JSON.stringify(value))
            const written = JSON.parse(live_.result(() => live_.exports.probe_write_string(ptr, len, initial)).output!).ok
            expect(written, `${JSON.stringify(value)} from ${initial}`).toEqual({ fits: true, text: JSON.stringify(value) })
          }
        }
      }
    }
  })

  it("printable ASCII strings (the one-scan path) read the same with any one escape, control or non-ASCII character anywhere in them", () => {
    const ascii = fc.array(fc.integer({ min: 0x20, max: 0x7f }), { maxLength: 60 }).map((a) => String.fromCharCode(...a))
    const odd = fc.constantFrom("\"", "\\", "\n", "\u0001", "é", "€", "😀", "\ud800")
    fc.assert(
      fc.property(ascii, fc.option(odd, { nil: undefined }), fc.nat(), (s, c, at) => {
        const i = s.length === 0 ? 0 : at % (s.length + 1)
        const value = c === undefined ? s : s.slice(0, i) + c + s.slice(i)
        const text = JSON.stringify(value)
        expect(okOf(text)).toBe(text)
        expect(okOf(JSON.stringify({ [value]: [value] }))).toBe(JSON.stringify({ [value]: [value] }))
      }),
      { numRuns: 500 }
    )
    expect(roundTrip(`"abc\u0001"`)).toEqual({ error: "raw control character in a string at byte 4" })
    expect(roundTrip(`"printable, then cut`)).toEqual({ error: "unterminated string at byte 20" })
  })

  it("escapes: every short form and \\u form is read, and written back in JSON.stringify's form", () => {
    expect(okOf(String.raw`"\"\\\/\b\f\n\r\t"`)).toBe(String.raw`"\"\\/\b\f\n\r\t"`)
    expect(okOf(String.raw`"\u00e9\u00E9\u20ac\uD83D\uDE00\ud83d\ude00"`)).toBe(`"éé€😀😀"`)
    expect(okOf(String.raw`"\u0000\u001f\u007f\u0020\u2028"`)).toBe(`"\\u0000\\u001f\u007f \u2028"`)
    expect(okOf(String.raw`"\ud800 \udc00\ud800 \uDBFF"`)).toBe(String.raw`"\ud800 \udc00\ud800 \udbff"`)
    expect(okOf(`"😀 raw 4-byte and é 2-byte and € 3-byte"`)).toBe(`"😀 raw 4-byte and é 2-byte and € 3-byte"`)
    expect(viaStringApi(String.raw`{"a":"\ud83d\ude00\n"}`)).toBe(`{"a":"😀\\n"}`)
  })

  it("numbers keep their text: big integers stay exact, a float is not reformatted", () => {
    expect(okOf(`[12345678901234567890123,-9223372036854775809,0.1,1.50,1E+2,-0,5e-324,1e400]`)).toBe(
      `[12345678901234567890123,-9223372036854775809,0.1,1.50,1E+2,-0,5e-324,1e400]`
    )
  })

  it("objects keep key order; a repeated key keeps its first place and its last value (as JSON.parse does)", () => {
    expect(okOf(`{"b":1,"a":[true,false,null],"":{},"c":{"z":1,"y":2}}`)).toBe(`{"b":1,"a":[true,false,null],"":{},"c":{"z":1,"y":2}}`)
    const text = `{"a":1,"b":2,"a":3}`
    expect(okOf(text)).toBe(JSON.stringify(JSON.parse(text)))
    const many = `{${Array.from({ length: 100 }, (_, i) => `"k${i}":${i}`).join(",")},"k7":"again","k99":null}`
    expect(okOf(many)).toBe(JSON.stringify(JSON.parse(many)))
  })

  it("whitespace is the four JSON characters around any token", () => {
    expect(okOf(` \t\n\r[ 1 ,\n{ "a" : null } ]\r\n `)).toBe(`[1,{"a":null}]`)
  })

  const malformed: Array<[string, string | Uint8Array, string]> = [
    ["empty input", ``, "unexpected end of input at byte 0"],
    ["only whitespace", `  `, "unexpected end of input at byte 2"],
    ["an unclosed object", `{`, "expected a string key at byte 1"],
    ["a trailing comma in an array", `[1,]`, "unexpected character at byte 3"],
    ["a trailing comma in an object", `{"a":1,}`, "expected a string key at byte 7"],
    ["a missing colon", `{"a" 1}`, "expected ':' at byte 5"],
    ["a bare key", `{a:1}`, "expected a string key at byte 1"],
    ["a leading zero", `01`, "unexpected text after the JSON value at byte 1"],
    ["a bare dot", `1.`, "expected a digit after '.' at byte 2"],
    ["a leading dot", `.5`, "unexpected character at byte 0"],
    ["a plus sign", `+1`, "unexpected character at byte 0"],
    ["a lone minus", `-`, "expected a digit at byte 1"],
    ["an empty exponent", `1e`, "expected a digit in the exponent at byte 2"],
    ["a signed empty exponent", `1e+`, "expected a digit in the exponent at byte 3"],
    ["NaN", `NaN`, "unexpected character at byte 0"],
    ["Infinity", `-Infinity`, "expected a digit at byte 1"],
    ["a cut keyword", `tru`, "unexpected character at byte 0"],
    ["an unterminated string", `"abc`, "unterminated string at byte 4"],
    ["a bad escape", String.raw`"a\x"`, "bad escape at byte 2"],
    ["a short \\u escape", String.raw`"\u12"`, "bad \\u escape at byte 1"],
    ["a non-hex \\u escape", String.raw`"\u12G4"`, "bad \\u escape at byte 1"],
    ["a raw tab in a string", `"a\tb"`, "raw control character in a string at byte 2"],
    ["single quotes", `'a'`, "unexpected character at byte 0"],
    ["two values", `[1] 2`, "unexpected text after the JSON value at byte 4"],
    ["an extra brace", `{"a":1}}`, "unexpected text after the JSON value at byte 7"],
    ["a byte-order mark", `\ufeff[1]`, "unexpected character at byte 0"],
    ["a missing comma", `[1 2]`, "expected ',' or ']' at byte 3"],
    ["an invalid UTF-8 byte", bytes(0x22, 0xff, 0x22), "invalid UTF-8 at byte 1"],
    ["a lone continuation byte", bytes(0x22, 0x80, 0x22), "invalid UTF-8 at byte 1"],
    ["an overlong encoding", bytes(0x22, 0xc0, 0x80, 0x22), "invalid UTF-8 at byte 1"],
    ["an overlong 3-byte encoding", bytes(0x22, 0xe0, 0x80, 0x80, 0x22), "invalid UTF-8 at byte 1"],
    ["a surrogate encoded in UTF-8", bytes(0x22, 0xed, 0xa0, 0x80, 0x22), "invalid UTF-8 at byte 1"],
    ["a code point past U+10FFFF", bytes(0x22, 0xf4, 0x90, 0x80, 0x80, 0x22), "invalid UTF-8 at byte 1"],
    ["a cut sequence", bytes(0x22, 0xe2, 0x82, 0x22), "invalid UTF-8 at byte 1"],
    ["a sequence cut by the end", bytes(0x22, 0xe2, 0x82), "invalid UTF-8 at byte 1"],
    ["non-ASCII outside a string", `[é]`, "unexpected character at byte 1"]
  ]
  for (const [what, text, error] of malformed) {
    it(`refuses ${what} with an error and its offset`, () => {
      expect(roundTrip(text)).toEqual({ error })
    })
  }

  it("nesting: 512 levels parse, 513 are refused, and a hostile 100,000 are refused without a trap", () => {
    const nest = (n: number) => "[".repeat(n) + "]".repeat(n)
    expect(okOf(nest(512))).toBe(nest(512))
    expect(roundTrip(nest(513))).toEqual({ error: "nested deeper than 512 at byte 512" })
    expect(roundTrip(`{"a":`.repeat(600) + "1" + "}".repeat(600)).error).toMatch(/^nested deeper than 512/)
    expect(roundTrip("[".repeat(100_000)).error).toMatch(/^nested deeper than 512/)
  })

  it("random bytes are parsed or refused, never a trap, and what parses is what JSON.parse accepts", () => {
    const alphabet = fc.constantFrom(...`{}[],:"\\ 0123456789.eE+-truefalsn\u00e9\ud83d\ude00`.split(""))
    fc.assert(
      fc.property(fc.array(alphabet, { maxLength: 24 }).map((a) => a.join("")), (text) => {
        let valid = true
        try {
          JSON.parse(text)
        } catch {
          valid = false
        }
        expect(roundTrip(text).ok !== undefined).toBe(valid)
      }),
      { numRuns: 2000 }
    )
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 24 }), (b) => {
        roundTrip(b)
      }),
      { numRuns: 1000 }
    )
  })

  /** The input through `probe_members`: its members, each parsed from its own range, or the error as `brain_run` gives it. */
  const members = (text: string | Uint8Array): { ok?: string; error?: string } => {
    const i = live()
    const [ptr, len] = i.place(text)
    const output = i.result(() => i.exports.probe_members(ptr, len)).output!
    if (output.startsWith(`{"ok":`)) return { ok: output.slice(6, -1) }
    return { error: JSON.parse(output).error.message }
  }

  it("an object read as members, each left unparsed until asked for, is checked as the whole parse checks it: the same values, and the same error at the same byte", () => {
    // Every malformed case, top level and as a member's value (its offset moved by the key's bytes).
    for (const [what, text, error] of malformed) {
      expect(members(text), what).toEqual(roundTrip(text).error === undefined ? { error: expect.stringMatching(/^not a JSON object/) } : { error })
      const inside = typeof text === "string" ? `{"k":${text}}` : Uint8Array.from([...Buffer.from(`{"k":`), ...text, 0x7d])
      expect(members(inside), `${what}, as a member`).toEqual(roundTrip(inside))
    }
    expect(members(`{"a":1,"b":{"c":[2]},"a":3}`)).toEqual({ ok: `{"a":3,"b":{"c":[2]}}` })
    expect(members(`[1]`).error).toBe("not a JSON object at byte 3")
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.unicodeJsonValue()), (v) => {
        const text = JSON.stringify(v)
        expect(members(text)).toEqual({ ok: text })
      }),
      { numRuns: 300 }
    )
    const alphabet = fc.constantFrom(...`{}[],:"\\ 0123456789.eE+-truefalsn\u00e9`.split(""))
    fc.assert(
      fc.property(fc.array(alphabet, { maxLength: 24 }).map((a) => `{"x":${a.join("")}}`), (text) => {
        const whole = roundTrip(text)
        expect(members(text)).toEqual(whole.error !== undefined ? whole : { ok: whole.ok })
      }),
      { numRuns: 2000 }
    )
  })

  it("a string's plain bytes, tested eight at a time, end exactly where a byte-by-byte scan ends them: one quote, escape, control, DEL or non-ASCII character, an invalid byte or the input's end at every place in strings of 0 to 40 bytes, read and skipped", () => {
    const plain = Array.from({ length: 40 }, (_, i) => String.fromCharCode(0x20 + ((i * 7) % 0x60))).join("").replace(/["\\]/g, "x")
    const odd = ["\"", "\\", "\n", "\u0001", "\u001f", "\u007f", "é", "€", "😀", "\ud800"]
    const asMember = (text: string | Uint8Array) => typeof text === "string" ? `{"k":${text}}` : Uint8Array.from([...Buffer.from(`{"k":`), ...text, 0x7d])
    for (let n = 0; n <= 40; n++) {
      const s = plain.slice(0, n)
      for (let i = 0; i <= n; i++) {
        for (const c of odd) {
          const text = JSON.stringify(s.slice(0, i) + c + s.slice(i))
          expect(okOf(text)).toBe(text)
          expect(members(asMember(text))).toEqual({ ok: asMember(text) })
        }
        const raw = `"${s.slice(0, i)}\u0001${s.slice(i)}"`
        expect(roundTrip(raw)).toEqual({ error: `raw control character in a string at byte ${i + 1}` })
        expect(members(asMember(raw))).toEqual({ error: `raw control character in a string at byte ${i + 6}` })
        const invalid = Uint8Array.from([0x22, ...Buffer.from(s.slice(0, i)), 0xff, ...Buffer.from(s.slice(i)), 0x22])
        expect(roundTrip(invalid)).toEqual({ error: `invalid UTF-8 at byte ${i + 1}` })
        expect(members(asMember(invalid))).toEqual({ error: `invalid UTF-8 at byte ${i + 6}` })
      }
      expect(roundTrip(`"${s}`)).toEqual({ error: `unterminated string at byte ${n + 1}` })
      expect(members(`{"k":"${s}`)).toEqual({ error: `unterminated string at byte ${n + 6}` })
    }
  })

  it("the elements of an array whose member has a given string value are those JSON.parse finds, parsed the same; the others are only skipped", () => {
    const where = (array: string, key: string, value: string): unknown => {
      const i = live()
      const [ptr, len] = i.place(`{"array":${array},"key":${JSON.stringify(key)},"value":${JSON.stringify(value)}}`)
      return JSON.parse(i.result(() => i.exports.probe_where(ptr, len)).output!).ok
    }
    const kinds = fc.constantFrom("turn_failed", "turn_ended", "t\u00fcrn", "turn_failed\n", "")
    const element = fc.oneof(
      fc.record({ kind: kinds, data: fc.unicodeJsonValue() }, { requiredKeys: [] }),
      fc.record({ data: fc.unicodeJsonValue(), kind: fc.oneof(kinds, fc.integer()) }, { requiredKeys: ["kind"] }),
      fc.unicodeJsonValue()
    )
    fc.assert(
      fc.property(fc.array(element, { maxLength: 8 }), kinds, (array, kind) => {
        const text = JSON.stringify(array)
        // What the text holds (JSON has no -0: a generated -0 is written 0), not the generated values.
        const expected = (JSON.parse(text) as Array<unknown>).filter((e) => e !== null && typeof e === "object" && !Array.isArray(e) && (e as Record<string, unknown>).kind === kind)
        expect(where(text, "kind", kind)).toEqual(expected)
      }),
      { numRuns: 500 }
    )
    // A key or value written with escapes is read the slow way, and a repeated key counts by its last value.
    expect(where(String.raw`[{"kind":"ab"},{"kind":"ab","kind":"x"},{"kind":"x","kind":"ab"}]`, "kind", "ab")).toEqual([{ kind: "ab" }, { kind: "ab" }])
    expect(where(`{"kind":"ab"}`, "kind", "ab")).toBeNull()
    expect(where(`[ ]`, "kind", "ab")).toEqual([])
  })

  it("an activation read through readActivation gives every field as the whole parse would, and eventsOfKind the Events of that kind, before or after the Events are read", () => {
    const activation = (input: unknown): { json: unknown; events: unknown; all: unknown } => {
      const i = live()
      const [ptr, len] = i.place(JSON.stringify(input))
      const { output, failed } = i.result(() => i.exports.probe_activation(ptr, len))
      if (failed !== undefined) throw new Error(failed)
      return JSON.parse(output!).ok
    }
    const event = fc.record({ sequence: fc.nat(), kind: fc.constantFrom("turn_failed", "turn_ended", "activation_started"), data: fc.jsonValue() })
    fc.assert(
      fc.property(fc.array(event, { maxLength: 6 }), fc.jsonValue(), fc.boolean(), (events, configuration, first) => {
        const input = { input: { message: "hi" }, transcript: [], configuration, events, runtime: { turn: 1 }, probe_kind: "turn_failed", probe_events_first: first }
        const read = activation(input)
        expect(read.json).toEqual(JSON.parse(JSON.stringify(input)))
        expect(read.events).toEqual(JSON.parse(JSON.stringify(events.filter((e) => e.kind === "turn_failed"))))
        expect(read.all).toEqual(JSON.parse(JSON.stringify(events)))
      }),
      { numRuns: 200 }
    )
  })

  it("Json.int writes JavaScript's digits for every i64", () => {
    const text = (x: bigint) => {
      const i = live()
      return i.result(() => i.exports.probe_int(x)).output
    }
    for (const x of [0n, 1n, -1n, 9223372036854775807n, -9223372036854775808n]) expect(text(x)).toBe(`{"ok":${x}}`)
    fc.assert(
      fc.property(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (x) => {
        expect(text(x)).toBe(`{"ok":${x}}`)
      }),
      { numRuns: 300 }
    )
  })

  it("Json.float reads back to the same double, writes JavaScript's format (1, not 1.0; -0 is 0; NaN is null)", () => {
    const text = (x: number) => {
      const i = live()
      return i.result(() => i.exports.probe_float(x)).output!.slice(6, -1)
    }
    for (const x of [0, -0, 1, -1, 0.1, 0.5, 1.5, 100, 1e20, 1e21, 1.5e300, 1e-7, 1.5e-7, 0.000001, 5e-324, 2 ** 53, 123.456]) {
      expect(text(x)).toBe(JSON.stringify(x))
    }
    for (const x of [Number.NaN, Infinity, -Infinity]) expect(text(x)).toBe("null")
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (x) => {
        const t = text(x)
        expect(JSON.parse(t)).toBe(Object.is(x, -0) ? 0 : x)
        expect(t.includes("e")).toBe(JSON.stringify(x).includes("e"))
      }),
      { numRuns: 2000 }
    )
  })

  it("reading a number: isInteger and asI64 are exact inside i64, asF64 is the double JavaScript reads (random and hard cases)", () => {
    const read = (text: string) => {
      const i = live()
      const [ptr, len] = i.place(text)
      return JSON.parse(i.result(() => i.exports.probe_number(ptr, len)).output!).ok as { integer: boolean; i64: string; f64: number }
    }
    expect(read("9223372036854775807")).toEqual({ integer: true, i64: "9223372036854775807", f64: 9223372036854775807 })
    expect(read("-9223372036854775808")).toEqual({ integer: true, i64: "-9223372036854775808", f64: -9223372036854775808 })
    expect(read("9223372036854775808")).toEqual({ integer: false, i64: "9223372036854775807", f64: 9223372036854775808 })
    expect(read("-1e300")).toEqual({ integer: false, i64: "-9223372036854775808", f64: -1e300 })
    expect(read("2.9")).toEqual({ integer: false, i64: "2", f64: 2.9 })
    expect(read("-2.9e0")).toEqual({ integer: false, i64: "-2", f64: -2.9 })
    expect(read("1e3")).toEqual({ integer: false, i64: "1000", f64: 1000 })
    fc.assert(
      fc.property(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (x) => {
        expect(read(String(x))).toMatchObject({ integer: true, i64: String(x) })
      }),
      { numRuns: 300 }
    )
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (x) => {
        expect(read(JSON.stringify(x)).f64).toBe(Object.is(x, -0) ? 0 : x)
      }),
      { numRuns: 3000 }
    )
    // Decimal strings that are not JavaScript's shortest form: long, padded, on or near midpoints.
    const hard = [
      "4.973430841096338e+38", "2.2250738585072011e-308", "2.2250738585072012e-308", "4.9406564584124654e-324",
      "2.4703282292062327e-324", "2.4703282292062328e-324", "1.7976931348623157e308", "1.7976931348623158e308",
      "1.7976931348623159e308", "9007199254740993", "9007199254740995", "0.1000000000000000055511151231257827",
      "123456789012345678901234567890e-20", "1e-400", "1e400", "0.000" + "0".repeat(300) + "1e300",
      "1" + "0".repeat(900) + "e-900", "7.2057594037927933e+16", "1.00000000000000011102230246251565404236316680908203125",
      "1.00000000000000011102230246251565404236316680908203124", "1.00000000000000011102230246251565404236316680908203126"
    ]
    // What JSON can carry: Infinity is written as null, -0 as 0.
    const carried = (x: number) => JSON.parse(JSON.stringify(x))
    for (const text of hard) expect(read(text).f64, text).toBe(carried(Number(text)))
    const digits = fc.stringMatching(/^-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?(e[+-]?[0-9]{1,3})?$/)
    fc.assert(
      fc.property(digits, (text) => {
        expect(read(text).f64).toBe(carried(Number(text)))
      }),
      { numRuns: 3000 }
    )
  })

  it("the builder keeps insertion order, replaces in place (past the key index too), and copies one level", () => {
    const built = build()
    const keys = Array.from({ length: 40 }, (_, i) => `k${i}`)
    expect(Object.keys(built.big)).toEqual([...keys, "new"])
    expect(built.big.k3).toBe("replaced")
    expect(built.big.k39).toBe(null)
    expect(built.small).toEqual({ b: 3, a: 2 })
    expect(JSON.stringify(built.small)).toBe(`{"b":3,"a":2}`)
    expect(built.list).toEqual([{ b: 3, a: 2 }, 0.5])
    expect(built.copy).toEqual([{ b: 3, a: 2 }, 0.5, "only in the copy"])
    expect(built.read).toEqual({
      k3: "replaced",
      k20: 20,
      "has k39": true,
      "k39 is null": true,
      missing: true,
      fallbacks: ["fb", -1, true],
      lengths: [41, 2, 3],
      keyAt: "new"
    })
  })

  it("misusing a value aborts, and the abort reaches Brain as brain.fail with the message and where", () => {
    const fresh = (which: number) => {
      const i = instantiate(probe, () => ({ ok: null }))
      return i.result(() => i.exports.probe_misuse(which)).failed
    }
    expect(fresh(0)).toMatch(/^expected a string but the JSON value is a number \(guest\/brain\/json\/value\.ts:\d+:\d+\)$/)
    expect(fresh(1)).toMatch(/^JSON index 0 is out of range \(length 0\)/)
    expect(fresh(2)).toMatch(/^expected an object but the JSON value is an array/)
    expect(fresh(3)).toMatch(/^expected a boolean but the JSON value is a string/)
    expect(fresh(4)).toMatch(/^a thrown error \(guest\/test\/probe\.ts:\d+:\d+\)$/)
    // The harness decodes brain.fail's text strictly: a lone surrogate arrives as U+FFFD, and a
    // long message is cut at 4 KiB on a character boundary.
    const long = fresh(5)!
    expect(long.startsWith("\ufffd 😀")).toBe(true)
    expect(Buffer.byteLength(long)).toBe(4 + 1023 * 4)
  })
})
