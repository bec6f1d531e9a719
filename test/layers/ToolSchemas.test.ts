/**
 * A host tool's schema checks (src/layers/sessions/ToolSchemas.ts, LinearPatterns.ts): patterns
 * match in linear time, one schema never affects another's check, a schema that cannot check
 * refuses rather than passes, and what checking keeps is bounded and let go.
 */
import * as v8 from "node:v8"
import * as vm from "node:vm"
import * as AjvModule from "ajv"
import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { COMPILED_SCHEMA_BYTES, COMPILED_SCHEMAS, SCHEMA_CHECK_ERRORS, SCHEMA_ISSUE_TEXT_CHARS, SCHEMA_ISSUES_SHOWN, SCHEMA_PATTERN_PROGRAM_MAX } from "../../src/domain/Limits.js"
import { counted } from "../../src/layers/sessions/CheckSteps.js"
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

  it("uniqueItems means JSON Schema's equality: objects whatever their key order, arrays in order, numbers by value (1 and 1.0), each scalar type apart", () => {
    const unique = { type: "array", uniqueItems: true }
    const duplicate = (value: unknown, i: number, j: number, path: ReadonlyArray<string | number> = []) =>
      expect(checkAgainst(unique, value)).toEqual({ _tag: "breaks", issues: [{ path, message: `must NOT have duplicate items (items ## ${i} and ${j} are identical)` }] })
    // Nested objects with their keys in another order are one value.
    duplicate([{ a: 1, b: { c: [1, { x: null, y: true }], d: "x" } }, { b: { d: "x", c: [1, { y: true, x: null }] }, a: 1 }], 0, 1)
    // Numbers by value, however the JSON wrote them.
    duplicate(JSON.parse("[1, 1.0]"), 0, 1)
    duplicate(JSON.parse('[{"n": 100}, 7, {"n": 1e2}]'), 0, 2)
    duplicate(JSON.parse("[0, -0]"), 0, 1)
    // Arrays in order: reordered is another value, the same order is not.
    expect(checkAgainst(unique, [[1, 2], [2, 1]])._tag).toBe("conforms")
    duplicate([[1, 2], [2, 1], [1, 2]], 0, 2)
    // Distinct values of every type pass, however alike their texts.
    const distinct = [1, "1", true, "true", false, null, "null", 0, "", [], {}, [1], ["1"], [[1]], { "1": 1 }, { a: [1] }, { a: [[1]] }, { a: "1" }, { a: null }, { b: null }, { a: 1, b: 2 }, { a: 1 }, "__proto__", JSON.parse('{"__proto__": 1}')]
    expect(checkAgainst(unique, distinct)).toEqual({ _tag: "conforms" })
    // Strings are compared whole, "__proto__" among them (Ajv's own check for scalar items missed its duplicate).
    expect(checkAgainst({ ...unique, items: { type: "string" } }, ["__proto__", "a", "__proto__"])._tag).toBe("breaks")
    duplicate(["a", "b", "c", "b", "a"], 0, 4)
    // The pair reported is Ajv's: the last item that repeats an earlier one, and the nearest earlier one it repeats.
    duplicate([{ k: 1 }, { k: 2 }, { k: 1 }, { k: 2 }, { k: 1 }], 2, 4)
    // uniqueItems: false, or none, lets duplicates be.
    expect(checkAgainst({ type: "array", uniqueItems: false }, [{ a: 1 }, { a: 1 }])._tag).toBe("conforms")
    expect(checkAgainst({ type: "array" }, [{ a: 1 }, { a: 1 }])._tag).toBe("conforms")
  })

  it("uniqueItems anywhere in a schema is checked: under properties, items, $defs through $ref, allOf; the path is the array's; a property named uniqueItems is just a property", () => {
    const nested = {
      type: "object",
      properties: {
        rows: { type: "array", items: { type: "array", uniqueItems: true } },
        tags: { $ref: "#/$defs/tags" },
        both: { allOf: [{ type: "array" }, { uniqueItems: true }] },
        uniqueItems: { type: "boolean" }
      },
      $defs: { tags: { type: "array", uniqueItems: true, items: { type: "object" } } }
    }
    expect(schemaRefusal(nested, MAX_BYTES)).toBeUndefined()
    // The outer rows may repeat; each row's items may not.
    expect(checkAgainst(nested, { rows: [[1, 2], [1, 2], [3]], tags: [{ a: 1 }, { a: 2 }], both: [1, 2], uniqueItems: true })).toEqual({ _tag: "conforms" })
    const check = checkAgainst(nested, { rows: [[1, 2], [{ a: [1], b: 2 }, { b: 2, a: [1] }]], tags: [{ a: 1 }, { a: 1 }], both: ["x", "x"], uniqueItems: false })
    expect(check._tag === "breaks" && check.issues.map((i) => i.path)).toEqual([["rows", 1], ["tags"], ["both"]])
    expect(check._tag === "breaks" && check.issues.every((i) => /must NOT have duplicate items/.test(i.message))).toBe(true)
    // A uniqueItems that is not a boolean cannot be compiled, as before.
    expect(schemaRefusal({ type: "array", uniqueItems: "yes" }, MAX_BYTES)).toMatch(/cannot be compiled/)
  })

  it("uniqueItems costs work in proportion to the value: 20 000 distinct objects read each item a few times (not every pair), and a value nested under uniqueItems at every depth is read once, not once per depth", () => {
    // Every read of an item is counted; past the budget the check stops (throws): a pairwise check would read about 20 000² / 2 items.
    const budget = { reads: 0, most: 0 }
    const watched = <T extends object>(target: T): T =>
      new Proxy(target, {
        get: (t, key, receiver) => {
          if (++budget.reads > budget.most) throw new Error(`more than ${budget.most} reads`)
          return Reflect.get(t, key, receiver)
        },
        ownKeys: (t) => {
          if (++budget.reads > budget.most) throw new Error(`more than ${budget.most} reads`)
          return Reflect.ownKeys(t)
        }
      })
    const n = 20_000
    const items = Array.from({ length: n }, (_, i) => watched({ id: i, name: `item ${i}`, tags: ["a", "b"] }))
    const schema = { type: "array", uniqueItems: true, items: { type: "object" } }
    budget.most = 40 * n
    expect(checkAgainst(schema, items)).toEqual({ _tag: "conforms" })
    // One more, repeating the first with its keys in another order, is found.
    budget.reads = 0
    const repeated = [...items, watched({ tags: ["a", "b"], name: "item 0", id: 0 })]
    expect(checkAgainst(schema, repeated)).toEqual({ _tag: "breaks", issues: [{ path: [], message: `must NOT have duplicate items (items ## 0 and ${n} are identical)` }] })

    // Arrays nested 60 deep, each of 200 numbers and the next, under uniqueItems at every depth
    // (a recursive $ref): each is read a few times, not once for every array above it.
    const depth = 60
    const width = 200
    let value: unknown = watched(Array.from({ length: width }, (_, i) => i))
    for (let d = 1; d < depth; d++) value = watched([...Array.from({ length: width }, (_, i) => i + d * width), value])
    const deep = { $defs: { level: { type: "array", uniqueItems: true, items: { anyOf: [{ type: "number" }, { $ref: "#/$defs/level" }] } } }, $ref: "#/$defs/level" }
    budget.reads = 0
    budget.most = 10 * depth * width
    expect(checkAgainst(deep, value)).toEqual({ _tag: "conforms" })
  })

  it("enum and const mean JSON Schema's equality, and cost a lookup: 100 000 items against an enum of 1 000 objects read each item a few times, not once per allowed value", () => {
    const allowed = Array.from({ length: 1000 }, (_, i) => ({ id: i, tags: ["x", i] }))
    const schema = { type: "array", items: { enum: allowed } }
    expect(checkAgainst(schema, [{ tags: ["x", 5], id: 5.0 }, JSON.parse('{"id": 7, "tags": ["x", 7.0]}')])).toEqual({ _tag: "conforms" })
    expect(checkAgainst(schema, [{ id: 5, tags: [5, "x"] }])).toEqual({ _tag: "breaks", issues: [{ path: [0], message: "must be equal to one of the allowed values" }] })
    expect(checkAgainst({ const: { a: [1, { b: null }] } }, { a: [1.0, { b: null }] })._tag).toBe("conforms")
    expect(checkAgainst({ const: { a: [1, { b: null }] } }, { a: [{ b: null }, 1] })).toEqual({ _tag: "breaks", issues: [{ path: [], message: "must be equal to constant" }] })
    expect(checkAgainst({ const: null }, null)._tag).toBe("conforms")
    expect(checkAgainst({ const: null }, 0)._tag).toBe("breaks")
    expect(checkAgainst({ enum: [1, "1", null] }, "1")._tag).toBe("conforms")
    expect(checkAgainst({ enum: [1, "1", null] }, true)._tag).toBe("breaks")
    expect(schemaRefusal({ enum: [] }, MAX_BYTES)).toMatch(/cannot be compiled.*non-empty/)
    // Each item read a few times, not once per allowed value (Ajv's own: up to 1 000 deep comparisons an item).
    let reads = 0
    const most = 20 * 100_000
    const counting = { get: (t: object, key: string | symbol, r: unknown) => { if (++reads > most) throw new Error(`more than ${most} reads`); return Reflect.get(t, key, r) } }
    const items = Array.from({ length: 100_000 }, (_, i) => new Proxy({ id: i % 1000, tags: ["x", i % 1000] }, counting))
    expect(checkAgainst(schema, items)).toEqual({ _tag: "conforms" })
  })

  it("one check's work is bounded by SCHEMA_CHECK_STEPS: a schema applying another 2^26 times (allOf of two $refs, 26 deep) breaks, saying so, instead of holding the thread", () => {
    const fanOut = (depth: number) => {
      const defs: Record<string, unknown> = { [`d${depth}`]: { type: "number" } }
      for (let i = 0; i < depth; i++) defs[`d${i}`] = { allOf: [{ $ref: `#/$defs/d${i + 1}` }, { $ref: `#/$defs/d${i + 1}` }] }
      return { $defs: defs, $ref: "#/$defs/d0" }
    }
    expect(schemaRefusal(fanOut(26), MAX_BYTES)).toBeUndefined()
    const check = checkAgainst(fanOut(26), 1)
    expect(check._tag).toBe("breaks")
    expect(check._tag === "breaks" && check.issues[0]).toMatchObject({ path: [], message: expect.stringMatching(/SCHEMA_CHECK_STEPS/) })
    // The same shape 6 deep (64 applications) checks as usual.
    expect(checkAgainst(fanOut(6), 1)._tag).toBe("conforms")
    expect(checkAgainst(fanOut(6), "x")._tag).toBe("breaks")
    // A value's depth multiplying it the same way: arrays 26 deep, each level applying the next twice.
    let deep: unknown = 1
    for (let i = 0; i < 26; i++) deep = [deep]
    const twice = { $defs: { a: { anyOf: [{ type: "number" }, { allOf: [{ items: { $ref: "#/$defs/a" } }, { items: { $ref: "#/$defs/a" } }] }] } }, $ref: "#/$defs/a" }
    const multiplied = checkAgainst(twice, deep)
    expect(multiplied._tag === "breaks" && multiplied.issues[0]!.message).toMatch(/SCHEMA_CHECK_STEPS/)
    // An ordinary value of 200 000 objects (about 5 MB) is well within it.
    const rows = Array.from({ length: 200_000 }, (_, i) => ({ id: i, name: `row ${i}` }))
    const table = { type: "array", items: { type: "object", properties: { id: { type: "integer" }, name: { type: "string" } }, required: ["id", "name"] } }
    expect(checkAgainst(table, rows)).toEqual({ _tag: "conforms" })
  })

  it("the errors one check keeps are bounded by SCHEMA_CHECK_ERRORS: 100 000 wrong items, or oneOf of 200 branches over 1 000 items, stop there, showing the first SCHEMA_ISSUES_SHOWN", () => {
    const check = checkAgainst({ type: "array", items: { type: "string" } }, Array.from({ length: 100_000 }, (_, i) => i))
    expect(check._tag).toBe("breaks")
    if (check._tag !== "breaks") return
    expect(check.issues[0]).toEqual({ path: [], message: expect.stringMatching(new RegExp(`more than ${SCHEMA_CHECK_ERRORS} places \\(SCHEMA_CHECK_ERRORS\\)`)) })
    expect(check.issues.slice(1)).toEqual(Array.from({ length: SCHEMA_ISSUES_SHOWN }, (_, i) => ({ path: [i], message: "must be string" })))
    const branches = Array.from({ length: 200 }, (_, i) => ({ type: "object", required: [`x${i}`] }))
    const many = checkAgainst({ type: "array", items: { oneOf: branches } }, Array.from({ length: 1000 }, (_, i) => ({ id: i })))
    expect(many._tag === "breaks" && many.issues.length).toBe(SCHEMA_ISSUES_SHOWN + 1)
    // A few wrong items are all shown as before, up to SCHEMA_ISSUES_SHOWN.
    const few = checkAgainst({ type: "array", items: { type: "string" } }, [1, "a", 2])
    expect(few).toEqual({ _tag: "breaks", issues: [{ path: [0], message: "must be string" }, { path: [2], message: "must be string" }] })
  })

  it("the issues shown are bounded: a message quoting a 20 000-character pattern, or a path through a 100 000-character key, is cut to SCHEMA_ISSUE_TEXT_CHARS, saying how much was cut", () => {
    const letters = Array.from({ length: 20_000 }, (_, i) => String.fromCodePoint(0x4e00 + i)).join("")
    const patterned = checkAgainst({ type: "array", items: { type: "string", pattern: `^[${letters}]+$` } }, Array.from({ length: 30 }, () => "a"))
    expect(patterned._tag === "breaks" && patterned.issues.length).toBe(SCHEMA_ISSUES_SHOWN)
    for (const issue of patterned._tag === "breaks" ? patterned.issues : []) {
      expect(issue.message.length).toBeLessThanOrEqual(SCHEMA_ISSUE_TEXT_CHARS + 40)
      expect(issue.message).toMatch(/^must match pattern .*… \(\d+ more characters\)$/)
    }
    const key = "k".repeat(100_000)
    const keyed = checkAgainst({ type: "object", additionalProperties: { type: "array", items: { type: "string" } } }, { [key]: [1, "a", 2] })
    expect(keyed).toEqual({
      _tag: "breaks",
      issues: [0, 2].map((i) => ({ path: [`${"k".repeat(SCHEMA_ISSUE_TEXT_CHARS)}… (${100_000 - SCHEMA_ISSUE_TEXT_CHARS} more characters)`, i], message: "must be string" }))
    })
  })

  it("a schema whose $ref comes back to itself without going into the value is refused at create, naming the loop; a check against one an older create admitted is unusable, never a pass", () => {
    const loops: ReadonlyArray<readonly [unknown, RegExp]> = [
      [{ $ref: "#" }, /"#" applies "#",/],
      [{ $defs: { a: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, /"#\/\$defs\/a" applies "#\/\$defs\/a",/],
      [{ $defs: { a: { $ref: "#/$defs/b" }, b: { allOf: [{ $ref: "#/$defs/a" }] } }, $ref: "#/$defs/a" }, /"#\/\$defs\/a" applies "#\/\$defs\/b", which applies "#\/\$defs\/b\/allOf\/0", which applies "#\/\$defs\/a",/],
      // Through every keyword that applies a schema to the value itself.
      [{ anyOf: [{ type: "string" }, { $ref: "#" }] }, /loop/],
      [{ oneOf: [{ $ref: "#" }] }, /loop/],
      [{ not: { $ref: "#" } }, /loop/],
      [{ if: { $ref: "#" }, then: { type: "number" } }, /loop/],
      [{ if: true, then: { $ref: "#" } }, /loop/],
      [{ if: false, else: { $ref: "#" } }, /loop/],
      [{ dependencies: { a: { $ref: "#" } } }, /loop/],
      [{ dependentSchemas: { a: { $ref: "#" } } }, /loop/],
      // By $id and $anchor, a relative $id resolved against its parent's, a percent-encoded pointer.
      [{ $id: "https://example.com/root.json", $defs: { a: { $ref: "https://example.com/root.json" } }, allOf: [{ $ref: "#/$defs/a" }] }, /loop/],
      [{ $defs: { a: { $id: "https://example.com/a.json", $ref: "b.json" }, b: { $id: "https://example.com/b.json", allOf: [{ $ref: "a.json#" }] } }, $ref: "https://example.com/a.json" }, /loop/],
      [{ $defs: { a: { $anchor: "here", not: { $ref: "#here" } } }, $ref: "#/$defs/a" }, /loop/],
      [{ $defs: { "a b": { $ref: "#/$defs/a%20b" } }, $ref: "#/$defs/a%20b" }, /loop/],
      [{ $defs: { "x/y": { $ref: "#/$defs/x~1y" } }, $ref: "#/$defs/x~1y" }, /loop/],
      // A long loop is named in part.
      [{ $defs: Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`d${i}`, { $ref: `#/$defs/d${(i + 1) % 10}` }])), $ref: "#/$defs/d0" }, /"#\/\$defs\/d0" applies "#\/\$defs\/d1", .*"#\/\$defs\/d5", which applies 4 more in turn, the last of which applies "#\/\$defs\/d0",/],
      [{ $recursiveRef: "#" }, /loop/],
      [{ $dynamicRef: "#" }, /loop/]
    ]
    for (const [loop, named] of loops) {
      const why = schemaRefusal(loop, MAX_BYTES)
      expect({ loop, why }).toEqual({ loop, why: expect.stringMatching(/cannot be compiled to check the tool's calls: .*loop/) })
      expect({ loop, why }).toEqual({ loop, why: expect.stringMatching(named) })
      expect(checkAgainst(loop, 1)).toMatchObject({ _tag: "unusable", reason: expect.stringMatching(/loop/) })
    }
  })

  it("a value nested deeper than the engine's stack allows, against a recursive schema, breaks it, saying so, and never throws", () => {
    let deep: unknown = 1
    for (let i = 0; i < 20_000; i++) deep = [deep]
    expect(checkAgainst({ items: { $ref: "#" } }, deep)).toMatchObject({ _tag: "breaks", issues: [{ path: [], message: expect.stringMatching(/stack/) }] })
  })

  it("a recursive schema that goes into the value at each turn is admitted and checks: a tree, a linked list through $defs, allOf diamonds, a $ref through items, properties, additionalProperties, contains or propertyNames", () => {
    const tree = { type: "object", properties: { children: { type: "array", items: { $ref: "#" } } } }
    expect(schemaRefusal(tree, MAX_BYTES)).toBeUndefined()
    expect(checkAgainst(tree, { children: [{ children: [] }, { children: [{}] }] })._tag).toBe("conforms")
    expect(checkAgainst(tree, { children: [{ children: [1] }] })._tag).toBe("breaks")
    const list = { $defs: { node: { type: "object", properties: { value: { type: "number" }, next: { anyOf: [{ type: "null" }, { $ref: "#/$defs/node" }] } }, required: ["value", "next"] } }, $ref: "#/$defs/node" }
    expect(schemaRefusal(list, MAX_BYTES)).toBeUndefined()
    expect(checkAgainst(list, { value: 1, next: { value: 2, next: null } })._tag).toBe("conforms")
    expect(checkAgainst(list, { value: 1, next: { value: "2", next: null } })._tag).toBe("breaks")
    // Diamonds: many ways to one schema, none back.
    const diamond = { $defs: { top: { allOf: [{ $ref: "#/$defs/l" }, { $ref: "#/$defs/r" }] }, l: { allOf: [{ $ref: "#/$defs/bottom" }] }, r: { anyOf: [{ $ref: "#/$defs/bottom" }] }, bottom: { type: "number" } }, $ref: "#/$defs/top" }
    expect(schemaRefusal(diamond, MAX_BYTES)).toBeUndefined()
    expect(checkAgainst(diamond, 1)._tag).toBe("conforms")
    expect(checkAgainst(diamond, "x")._tag).toBe("breaks")
    for (const descending of [
      { items: { $ref: "#" } },
      { items: [{ $ref: "#" }] },
      { additionalItems: { $ref: "#" } },
      { properties: { a: { allOf: [{ $ref: "#" }] } } },
      { patternProperties: { "^a": { $ref: "#" } } },
      { additionalProperties: { $ref: "#" } },
      { contains: { $ref: "#" } },
      { propertyNames: { $ref: "#" } },
      { $defs: { a: { not: { $ref: "#/$defs/b" } }, b: { additionalProperties: { $ref: "#/$defs/a" } } }, $ref: "#/$defs/a" },
      // A $ref into a keyword that goes into the value is no loop either.
      { properties: { a: { $ref: "#/properties/b" }, b: { items: { $ref: "#/properties/a" } } } },
      // Keywords the check never applies: then and else without if, if without then or else, anyOf with a branch true (valid whatever the rest say).
      { then: { $ref: "#" }, else: { $ref: "#" } },
      { if: { $ref: "#" }, then: true },
      { anyOf: [true, { $ref: "#" }] },
      // An $anchor, $id or keyword named like a property is only a property name here.
      { type: "object", properties: { $ref: { type: "string" }, allOf: { type: "array" }, not: { $ref: "#/properties/allOf" } } }
    ]) {
      expect({ descending, why: schemaRefusal(descending, MAX_BYTES) }).toEqual({ descending, why: undefined })
    }
  })

  it("the loop refusal agrees with the engine: a random schema of $refs and applicators is refused as a loop exactly when Ajv's own check of a deep array overflows the stack", () => {
    // (anyOf and not are left out: Ajv stops at anyOf's first branch that passes, and inside a not at the first failure, so whether a loop behind them is reached depends on the value.)
    const keys = ["a", "b", "c", "d"]
    const ref = fc.constantFrom(...keys).map((k) => ({ $ref: `#/$defs/${k}` }))
    const node: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
      node: fc.oneof(
        { depthSize: "small", withCrossShrink: true },
        // No schema that is always valid or never ({}, true, false): Ajv's code leaves out what it need not apply.
        fc.constantFrom<unknown>({ type: "number" }, { type: "string" }),
        ref,
        fc.array(tie("node"), { minLength: 1, maxLength: 3 }).map((allOf) => ({ allOf })),
        fc.array(tie("node"), { minLength: 1, maxLength: 3 }).map((oneOf) => ({ oneOf })),
        tie("node").map((items) => ({ items }))
      )
    })).node
    const schema = fc.record({ a: node, b: node, c: node, d: node }).map(($defs) => ({ $defs, $ref: "#/$defs/a" }))
    fc.assert(
      fc.property(schema, (s) => {
        const why = schemaRefusal(s, MAX_BYTES)
        // Ajv's own compile of it, its check of a small value: a loop overflows (or fails to compile).
        const ajv = new AjvModule.default.default({ allErrors: true, strict: false, validateSchema: false, addUsedSchema: false, logger: false })
        let overflows = false
        try {
          const own = ajv.compile(s)
          let deep: unknown = 1
          for (let i = 0; i < 30; i++) deep = [deep]
          own(deep)
        } catch (e) {
          overflows = e instanceof RangeError
        }
        expect({ s, loop: why !== undefined && /loop/.test(why) }).toEqual({ s, loop: overflows })
      }),
      { numRuns: 300, seed: 65 }
    )
  })

  it("a schema using the step-counting keyword, or a $ref into an enum or const (values, whose schemas would go uncounted), cannot be compiled", () => {
    expect(schemaRefusal({ type: "object", $brainCheckSteps: 1 }, MAX_BYTES)).toMatch(/cannot be compiled.*\$brainCheckSteps/)
    expect(schemaRefusal({ properties: { a: { $brainCheckSteps: 1 } } }, MAX_BYTES)).toMatch(/cannot be compiled/)
    const intoEnum = { enum: [{ allOf: [{ $ref: "#/enum/1" }, { $ref: "#/enum/1" }] }, { type: "number" }], $ref: "#/enum/0" }
    expect(schemaRefusal(intoEnum, MAX_BYTES)).toMatch(/cannot be compiled.*enum or const/)
    expect(schemaRefusal({ $defs: { c: { const: { type: "number" } } }, $ref: "#/$defs/c/const" }, MAX_BYTES)).toMatch(/enum or const/)
    // A property named enum, its name used as data in an enum, or as a key in a const, is no such reference.
    const named = { type: "object", properties: { enum: { type: "string" }, x: { $ref: "#/properties/enum" }, y: { enum: [{ $brainCheckSteps: 1 }] }, z: { const: { enum: 1 } } } }
    expect(schemaRefusal(named, MAX_BYTES)).toBeUndefined()
    expect(checkAgainst(named, { enum: "a", x: "b", y: { $brainCheckSteps: 1 }, z: { enum: 1 } })).toEqual({ _tag: "conforms" })
    expect(checkAgainst(named, { x: 1 })._tag).toBe("breaks")
    // The copy Ajv compiles keeps a key "__proto__" a key (not the copy's prototype), as JSON.parse did.
    const copy = counted(JSON.parse('{"__proto__": {"type": "string"}, "properties": {"__proto__": {"type": "string"}}}'))
    expect("schema" in copy && Object.getPrototypeOf(copy.schema)).toBe(Object.prototype)
    expect("schema" in copy && Object.keys(copy.schema as object)).toEqual(["__proto__", "properties", "$brainCheckSteps"])
    expect("schema" in copy && Object.keys((copy.schema as { properties: object }).properties)).toEqual(["__proto__"])
  })

  it("counting and the linear equality change no verdict: 500 random schemas, 10 values each, conform or break exactly as Ajv's own check says, with as many issues", () => {
    let seed = 12345
    const random = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff
    const pick = <T>(a: ReadonlyArray<T>): T => a[Math.floor(random() * a.length)]!
    const valueOf = (d: number): unknown => {
      const r = random()
      if (d > 3 || r < 0.3) return pick([0, 1, 1.5, -1, "a", "b", "", true, false, null])
      if (r < 0.65) return Array.from({ length: Math.floor(random() * 4) }, () => valueOf(d + 1))
      return Object.fromEntries(Array.from({ length: Math.floor(random() * 4) }, () => [pick(["a", "b", "c", "d"]), valueOf(d + 1)]))
    }
    const schemaOf = (d: number): unknown => {
      if (d > 3) return pick([{ type: "number" }, { type: "string" }, {}, true, false, { const: valueOf(3) }])
      return pick<() => unknown>([
        () => ({ type: pick(["array", "object", "number", "string", "integer", "boolean", "null"]) }),
        () => ({ type: "array", uniqueItems: random() < 0.8, items: schemaOf(d + 1) }),
        () => ({ uniqueItems: true }),
        () => ({ enum: Array.from({ length: 1 + Math.floor(random() * 3) }, () => valueOf(2)) }),
        () => ({ const: valueOf(2) }),
        () => ({ properties: { a: schemaOf(d + 1), b: schemaOf(d + 1) }, required: random() < 0.5 ? ["a"] : [], additionalProperties: random() < 0.5 ? schemaOf(d + 1) : true }),
        () => ({ allOf: [schemaOf(d + 1), schemaOf(d + 1)] }),
        () => ({ anyOf: [schemaOf(d + 1), schemaOf(d + 1)] }),
        () => ({ oneOf: [schemaOf(d + 1), schemaOf(d + 1)] }),
        () => ({ not: schemaOf(d + 1) }),
        () => ({ if: schemaOf(d + 1), then: schemaOf(d + 1), else: schemaOf(d + 1) }),
        () => ({ contains: schemaOf(d + 1), minItems: 1 }),
        () => ({ $ref: "#/$defs/x" }),
        () => ({ $ref: "#/$defs/x", type: "array" }),
        () => ({ allOf: [{ properties: { a: {} } }], unevaluatedProperties: false }),
        () => ({ dependentSchemas: { a: schemaOf(d + 1) } }),
        () => ({ propertyNames: { enum: ["a", "b"] } })
      ])()
    }
    let compared = 0
    for (let i = 0; i < 500; i++) {
      const root = schemaOf(0)
      const schema = typeof root === "object" ? { ...(root as object), $defs: { x: schemaOf(2) } } : root
      // A loop of $refs is refused at create (a check never runs against it).
      if (/loop/.test(schemaRefusal(schema, MAX_BYTES) ?? "")) continue
      const ajv = new AjvModule.default.default({ allErrors: true, strict: false, validateSchema: false, addUsedSchema: false, logger: false })
      let own: ReturnType<typeof ajv.compile>
      try {
        own = ajv.compile(schema as object)
      } catch {
        continue
      }
      for (let j = 0; j < 10; j++) {
        const value = valueOf(0)
        let valid: boolean
        try {
          valid = own(value)
        } catch {
          continue
        }
        const check = checkAgainst(schema, value)
        expect({ schema, value, tag: check._tag }).toEqual({ schema, value, tag: valid ? "conforms" : "breaks" })
        if (check._tag === "breaks") expect(check.issues.length).toBe(Math.min(own.errors!.length, SCHEMA_ISSUES_SHOWN))
        compared++
      }
    }
    expect(compared).toBeGreaterThan(3000)
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
