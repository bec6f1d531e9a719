import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Either, Schema } from "effect"
import fc from "fast-check"
import { Catalogue, checkPayload, RecordKinds } from "../../src/domain/Records.js"
import { guard } from "../../src/domain/SchemaGuard.js"

const decoderOf = (schema: Schema.Schema<any, any, never>) => {
  const decode = Schema.decodeUnknownEither(schema, { onExcessProperty: "error", errors: "first" })
  return (u: unknown) => Either.isRight(decode(u))
}

/** Every object and array inside `u`, with a way to change it in place. */
const containers = (u: unknown, out: Array<Record<string, unknown> | Array<unknown>> = []) => {
  if (typeof u === "object" && u !== null) {
    out.push(u as Record<string, unknown>)
    for (const v of Object.values(u)) containers(v, out)
  }
  return out
}

/** A change somewhere in a copy of `value`: a key dropped, added or given another value, an element dropped or changed. */
const mutated = (value: unknown) =>
  fc.tuple(fc.nat(), fc.nat(), fc.constantFrom("drop", "add", "set", "whole"), fc.string({ maxLength: 6 }), fc.anything({ maxDepth: 2 })).map(
    ([which, at, change, key, replacement]) => {
      const copy = structuredClone(value)
      if (change === "whole") return replacement
      const all = containers(copy)
      if (all.length === 0) return replacement
      const target = all[which % all.length]!
      const keys = Object.keys(target)
      const name = keys.length === 0 ? key : keys[at % keys.length]!
      if (Array.isArray(target)) {
        if (change === "drop") target.splice(at % (target.length + 1), 1)
        else if (change === "add") target.push(replacement)
        else target[at % (target.length + 1)] = replacement
      } else if (change === "drop") delete target[name]
      else if (change === "add") target[key] = replacement
      else target[name] = replacement
      return copy
    }
  )

describe("SchemaGuard: a schema's check without a decoded copy", () => {
  it("compiles every record kind's payload schema but those holding a Failure (a class: a transformation), which keep the decoder", () => {
    const missing = RecordKinds.filter((k) => guard(Catalogue[k].payload) === undefined)
    expect(missing).toEqual(RecordKinds.filter((k) => k.endsWith("_failed")))
  })

  for (const kind of RecordKinds.filter((k) => !k.endsWith("_failed"))) {
    const schema = Catalogue[kind].payload as Schema.Schema<any, any, never>
    const decodes = decoderOf(schema)
    const check = guard(schema)!

    it(`${kind}: accepts and refuses exactly what the schema's decoder does, on its own payloads and any change to them`, () => {
      const payloads = Arbitrary.make(schema)
      fc.assert(fc.property(payloads, (p) => check(p) === decodes(p) && decodes(p)), { numRuns: 100 })
      fc.assert(fc.property(payloads.chain(mutated), (p) => check(p) === decodes(p)), { numRuns: 300 })
      fc.assert(fc.property(fc.anything(), (p) => check(p) === decodes(p)), { numRuns: 100 })
    })
  }

  it("answers as the decoder on the edges: a missing Json key, a symbol key, an array for a struct, a float for an Int", () => {
    const Ended = Catalogue.turn_ended.payload as Schema.Schema<any, any, never>
    const cases: Array<unknown> = [
      { sequence: 1 },
      { sequence: 1, result: undefined },
      { sequence: 1, [Symbol("x")]: 1 },
      Object.assign([], { sequence: 1 }),
      { sequence: 1.5 },
      { sequence: 0 },
      { sequence: Number.NaN },
      null,
      undefined
    ]
    const check = guard(Ended)!
    const decodes = decoderOf(Ended)
    for (const c of cases) expect([c, check(c)]).toEqual([c, decodes(c)])
  })

  it("checkPayload refuses with the decoder's own explanation", () => {
    expect(checkPayload("turn_ended", { sequence: 0 })).toMatch(/^invalid turn_ended payload: .*greater than or equal to 1/s)
    expect(checkPayload("turn_ended", { sequence: 1, extra: true })).toMatch(/extra.*is unexpected/s)
    expect(checkPayload("turn_ended", { sequence: 1, result: { any: ["json"] } })).toBeUndefined()
    expect(checkPayload("no_such_kind", {})).toMatch(/unknown record kind/)
  })
})
