/**
 * A host tool's schema checks (src/layers/sessions/ToolSchemas.ts, LinearPatterns.ts): patterns
 * match in linear time, one schema never affects another's check, a schema that cannot check
 * refuses rather than passes, and what checking keeps is bounded and let go.
 */
import * as v8 from "node:v8"
import * as vm from "node:vm"
import { describe, expect, it } from "vitest"
import { COMPILED_SCHEMA_BYTES, COMPILED_SCHEMAS, SCHEMA_PATTERN_PROGRAM_MAX } from "../../src/domain/Limits.js"
import { rewritten } from "../../src/layers/sessions/LinearPatterns.js"
import { checkAgainst, keptCheck, keptSchemas, schemaRefusal } from "../../src/layers/sessions/ToolSchemas.js"
import { checked } from "../../src/layers/sessions/ToolVerdicts.js"

const MAX_BYTES = 64 * 1024

describe("a host tool's schema checks", () => {
  it("a backtracking-prone pattern is matched in linear time: ^(a+)+$ against 50 000 a's and a '!' answers at once, not in exponential time", () => {
    const schema = { type: "object", properties: { s: { type: "string", pattern: "^(a+)+$" } } }
    expect(schemaRefusal(schema, MAX_BYTES)).toBeUndefined()
    // JavaScript's engine would take about 2^50000 steps on this; RE2 takes about 50 000.
    const check = checkAgainst(schema, { s: `${"a".repeat(50_000)}!` })
    expect(check).toMatchObject({ _tag: "breaks", issues: [{ path: ["s"], message: 'must match pattern "^(a+)+$"' }] })
    expect(checkAgainst(schema, { s: "aaaa" })).toEqual({ _tag: "conforms" })
    // patternProperties too.
    const keys = { type: "object", patternProperties: { "^(a|aa)+$": { type: "number" } } }
    expect(checkAgainst(keys, { [`${"a".repeat(40)}`]: "x" })).toMatchObject({ _tag: "breaks" })
  })

  it("a pattern RE2 cannot run (lookaround, a backreference) or JavaScript cannot read is refused, naming why", () => {
    for (const pattern of ["^(?=a)a$", "(a)\\1", "(?i)abc"]) {
      expect(schemaRefusal({ type: "string", pattern }, MAX_BYTES)).toMatch(/cannot be compiled/)
    }
    expect(schemaRefusal({ type: "string", pattern: "(a)\\1" }, MAX_BYTES)).toMatch(/linear time/)
  })

  it("patterns mean what JavaScript's do where RE2's differ: \\s takes Unicode spaces and \\v, . takes no \\r, U+2028 or U+2029", () => {
    const space = { type: "string", pattern: "^\\s$" }
    for (const s of ["\v", "\u00a0", "\u3000", "\ufeff", " "]) expect(checkAgainst(space, s)._tag).toBe("conforms")
    expect(checkAgainst(space, "x")._tag).toBe("breaks")
    const notSpace = { type: "string", pattern: "^[\\S]+$" }
    expect(checkAgainst(notSpace, "ab😀")._tag).toBe("conforms")
    expect(checkAgainst(notSpace, "a\u00a0")._tag).toBe("breaks")
    const dot = { type: "string", pattern: "^.$" }
    for (const s of ["\r", "\n", "\u2028", "\u2029"]) expect(checkAgainst(dot, s)._tag).toBe("breaks")
    expect(checkAgainst(dot, "😀")._tag).toBe("conforms")
    for (const [pattern, s] of [["^\\u0041$", "A"], ["^\\u{1F600}$", "😀"], ["^(?<y>\\d{4})$", "2026"], ["^[^]$", "\n"], ["^\\p{Lu}+$", "ÀB"]] as const) {
      expect(checkAgainst({ type: "string", pattern }, s)._tag).toBe("conforms")
    }
  })

  it("a schema's patterns past SCHEMA_PATTERN_PROGRAM_MAX are refused before RE2 compiles them, nested repetitions counted multiplied", () => {
    expect(rewritten("(a{100}){100}").program).toBeGreaterThan(SCHEMA_PATTERN_PROGRAM_MAX)
    expect(schemaRefusal({ type: "string", pattern: "(a{100}){100}" }, MAX_BYTES)).toMatch(/SCHEMA_PATTERN_PROGRAM_MAX/)
    const many = { type: "object", properties: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`p${i}`, { type: "string", pattern: "^[a-z]{1,999}$" }])) }
    expect(schemaRefusal(many, MAX_BYTES)).toMatch(/SCHEMA_PATTERN_PROGRAM_MAX/)
    expect(schemaRefusal({ type: "string", pattern: "^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,63}$" }, MAX_BYTES)).toBeUndefined()
  })

  it("one check's matching is bounded: a value whose strings would take more than PATTERN_CHECK_STEPS breaks the schema, saying so", () => {
    const schema = { type: "array", items: { type: "string", pattern: "^[a-z]{1,500}$" } }
    const check = checkAgainst(schema, Array.from({ length: 200 }, () => "a".repeat(1000)))
    expect(check._tag).toBe("breaks")
    expect(check._tag === "breaks" && check.issues[0]!.message).toMatch(/PATTERN_CHECK_STEPS/)
    // A small one is matched as usual.
    expect(checkAgainst(schema, ["abc", "def"])._tag).toBe("conforms")
  })

  it("a schema larger than BRAIN_MAX_TOOL_SCHEMA_BYTES, or not a schema, is refused naming why; undefined and null are no schema", () => {
    const big = { type: "object", description: "x".repeat(2000) }
    expect(schemaRefusal(big, 1024)).toMatch(/more than 1024 \(BRAIN_MAX_TOOL_SCHEMA_BYTES\)/)
    expect(schemaRefusal([1], MAX_BYTES)).toMatch(/not a JSON Schema/)
    expect(schemaRefusal("string", MAX_BYTES)).toMatch(/not a JSON Schema/)
    expect(schemaRefusal(undefined, MAX_BYTES)).toBeUndefined()
    expect(schemaRefusal(null, MAX_BYTES)).toBeUndefined()
    expect(schemaRefusal(true, MAX_BYTES)).toBeUndefined()
    expect(checkAgainst(false, 1)._tag).toBe("breaks")
  })

  it("a schema that cannot be compiled never checks nothing: it is refused, and a check against it is unusable, not a pass", () => {
    const broken = { type: "object", properties: { q: { $ref: "#/definitions/missing" } } }
    expect(schemaRefusal(broken, MAX_BYTES)).toMatch(/cannot be compiled/)
    expect(checkAgainst(broken, { q: 1 })).toMatchObject({ _tag: "unusable" })
    // An output checked against it (a schema an older create admitted) is not taken: invalid_schema.
    expect(checked({ _tag: "reply", reply: { outcome: "ok", output: { q: 1 } } }, broken)).toMatchObject({
      _tag: "reply",
      reply: { outcome: "error", output: { code: "invalid_schema" } }
    })
  })

  it("two schemas with one $id are each checked as written, whichever was compiled first", () => {
    const numbers = { $id: "urn:probe:lookup", type: "object", properties: { q: { type: "number" } } }
    const strings = { $id: "urn:probe:lookup", type: "object", properties: { q: { type: "string" } } }
    expect(schemaRefusal(numbers, MAX_BYTES)).toBeUndefined()
    expect(schemaRefusal(strings, MAX_BYTES)).toBeUndefined()
    expect(checkAgainst(numbers, { q: "s" })._tag).toBe("breaks")
    expect(checkAgainst(strings, { q: 5 })._tag).toBe("breaks")
    expect(checkAgainst(strings, { q: "s" })._tag).toBe("conforms")
    // A nested $id, and a $ref to another schema's id, mean nothing outside their own schema.
    const nested = { type: "object", properties: { a: { $id: "https://example.com/inner.json", type: "number" } } }
    const referring = { $ref: "https://example.com/inner.json" }
    expect(schemaRefusal(nested, MAX_BYTES)).toBeUndefined()
    expect(schemaRefusal(referring, MAX_BYTES)).toMatch(/cannot be compiled/)
  })

  it(`what checking keeps stays within COMPILED_SCHEMAS and COMPILED_SCHEMA_BYTES however many distinct schemas pass, and a compiled schema let go is freed (no Ajv cache keeps it)`, async () => {
    const schemaOf = (i: number) => ({ type: "object", properties: { [`field_${i}`]: { type: "string", pattern: "^[a-z]+$" } }, required: [`field_${i}`] })
    const first = schemaOf(-1)
    expect(schemaRefusal(first, MAX_BYTES)).toBeUndefined()
    let watched: WeakRef<object> | undefined = new WeakRef(keptCheck(first)!)
    for (let i = 0; i < COMPILED_SCHEMAS * 3; i++) {
      expect(checkAgainst(schemaOf(i), { [`field_${i}`]: "ok" })._tag).toBe("conforms")
      const kept = keptSchemas()
      expect(kept.count).toBeLessThanOrEqual(COMPILED_SCHEMAS)
      expect(kept.bytes).toBeLessThanOrEqual(COMPILED_SCHEMA_BYTES)
    }
    expect(keptCheck(first)).toBeUndefined()
    // Let go by the cache, nothing else holds it: a full collection frees it.
    v8.setFlagsFromString("--expose-gc")
    const gc = vm.runInNewContext("gc") as () => void
    await new Promise((resolve) => setImmediate(resolve))
    gc()
    await new Promise((resolve) => setImmediate(resolve))
    gc()
    expect(watched.deref()).toBeUndefined()
    watched = undefined
  })
})
