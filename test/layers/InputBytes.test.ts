/** A turn input's size against BRAIN_MAX_INPUT_BYTES (src/layers/sessions/InputBytes.ts). */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { inputTooLarge, jsonWeight } from "../../src/layers/sessions/InputBytes.js"

describe("a turn input's size", () => {
  it("is refused exactly when the UTF-8 bytes of its JSON pass the bound, message and media alike; 0 is no bound", () => {
    const media = fc.array(fc.record({ type: fc.constant("image"), data: fc.fullUnicodeString({ maxLength: 40 }) }), { maxLength: 3 })
    fc.assert(
      fc.property(fc.oneof(fc.fullUnicodeString({ maxLength: 200 }), fc.stringOf(fc.char16bits(), { maxLength: 200 })), fc.option(media, { nil: undefined }), fc.integer({ min: 1, max: 2000 }), (message, m, max) => {
        const input = m === undefined ? { message } : { message, media: m as any }
        const bytes = Buffer.byteLength(JSON.stringify(input))
        expect(inputTooLarge(input, max) !== undefined, `${bytes} bytes against ${max}`).toBe(bytes > max)
        expect(inputTooLarge(input, bytes)).toBeUndefined()
        expect(inputTooLarge(input, 0)).toBeUndefined()
      }),
      { numRuns: 2000 }
    )
  })

  it("a request's weight counts every character of its strings and keys, and is never more than its JSON's characters", () => {
    const strings = (v: unknown): number =>
      typeof v === "string" ? v.length : Array.isArray(v) ? v.reduce((n: number, x) => n + strings(x), 0) : typeof v === "object" && v !== null ? Object.entries(v).reduce((n, [k, x]) => n + k.length + strings(x), 0) : 0
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const weight = jsonWeight(value)
        expect(weight).toBeGreaterThanOrEqual(strings(value))
        expect(weight).toBeLessThanOrEqual(JSON.stringify(value).length)
      }),
      { numRuns: 1000 }
    )
  })
})
