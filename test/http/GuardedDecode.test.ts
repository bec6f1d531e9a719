/**
 * The socket routes' bodies decoded with their guards first (src/domain/SchemaGuard.ts
 * `guardedDecode`): for a send's payload and a host's results, the guard compiles (so the routes
 * spare the decoder's copy), and for every value, valid, mutated or arbitrary, the answer is the
 * decoder's own: the same value when it accepts, a refusal when it refuses.
 */
import { isDeepStrictEqual } from "node:util"
import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Either, Schema } from "effect"
import fc from "fast-check"
import { guard, guardedDecode } from "../../src/domain/SchemaGuard.js"
import { HostResultBody, SendMessageRequest } from "../../src/http/Schemas.js"

const SESSION = "ses_01JDZ0000000000000000000AB"

/** A copy of `value` with one change somewhere: a key dropped, added or set, or another value whole. */
const mutated = (value: unknown) =>
  fc.tuple(fc.nat(), fc.constantFrom("drop", "add", "set", "whole"), fc.string({ maxLength: 6 }), fc.anything({ maxDepth: 2 })).map(([at, change, key, replacement]) => {
    if (change === "whole" || typeof value !== "object" || value === null) return replacement
    const copy = structuredClone(value) as Record<string, unknown>
    const keys = Object.keys(copy)
    const name = change === "add" || keys.length === 0 ? key : keys[at % keys.length]!
    if (change === "drop") delete copy[name]
    else copy[name] = replacement
    return copy
  })

const schemas = [
  ["a send's payload", SendMessageRequest, [{ input: { message: "hello" } }, { input: { message: "hi", extra: 1 } }, { input: {} }, {}]],
  [
    "a host's results",
    HostResultBody,
    [
      { session_id: SESSION, sequence: 3, ok: { n: 1 } },
      { session_id: SESSION, sequence: 3, error: "no" },
      { session_id: SESSION, sequence: 3, stopped: true },
      { session_id: SESSION, sequence: 3, ok: 1, error: 2 },
      { session_id: SESSION, sequence: 0, ok: 1 },
      { session_id: SESSION, sequence: 3 },
      { session_id: SESSION, sequence: 3, ok: null, more: 1 },
      { results: [{ session_id: SESSION, sequence: 3, ok: 1 }, { session_id: SESSION, sequence: 4, error: { e: 1 } }] },
      { results: [] },
      { results: [{ session_id: SESSION, sequence: 3, ok: 1 }], extra: true }
    ]
  ]
] as const

describe("a socket route's body decoded with its guard first", () => {
  for (const [name, schema, samples] of schemas) {
    const decode = Schema.decodeUnknownEither(schema as Schema.Schema<unknown, unknown, never>)
    const guarded = guardedDecode(schema as Schema.Schema<unknown, unknown, never>)
    const same = (u: unknown) => {
      const a = guarded(u)
      const b = decode(u)
      if (Either.isRight(b)) return Either.isRight(a) && isDeepStrictEqual(a.right, b.right)
      return Either.isLeft(a) && String(a.left) === String(b.left)
    }

    it(`${name}: the guard compiles, so the route spares the decoder's copy`, () => {
      expect(guard(schema as Schema.Schema<unknown, unknown, never>)).toBeTypeOf("function")
    })

    it(`${name}: answers what the decoder answers, for valid, mutated and arbitrary values`, () => {
      for (const u of samples) expect(same(u)).toBe(true)
      const values = Arbitrary.make(schema as Schema.Schema<unknown, unknown, never>)
      fc.assert(fc.property(values, same), { numRuns: 200 })
      fc.assert(fc.property(values.chain(mutated), same), { numRuns: 400 })
      fc.assert(fc.property(fc.anything(), same), { numRuns: 100 })
    })
  }
})
