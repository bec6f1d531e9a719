import { describe, expect, it } from "@effect/vitest"
import { JSONSchema, Schema } from "effect"
import { EnvironmentOptions } from "../../src/domain/Environment.js"
import { ContentPart, Message } from "../../src/domain/Messages.js"

describe("user JSON with free keys decodes to itself, `__proto__` key kept", () => {
  it("a content part and an Environment's options keep a `__proto__` key as an own property, and their prototype is Object's", () => {
    const part = JSON.parse('{"type":"text","text":"a","__proto__":{"y":1},"constructor":2}')
    const decodedPart = Schema.decodeUnknownSync(ContentPart, { onExcessProperty: "error" })(part)
    expect(Object.keys(decodedPart)).toEqual(["type", "text", "__proto__", "constructor"])
    expect(Object.getPrototypeOf(decodedPart)).toBe(Object.prototype)
    expect(JSON.stringify(decodedPart)).toBe('{"type":"text","text":"a","__proto__":{"y":1},"constructor":2}')
    const options = JSON.parse('{"__proto__":{"admin":true},"region":"eu"}')
    const decodedOptions = Schema.decodeUnknownSync(EnvironmentOptions)(options)
    expect(JSON.stringify(decodedOptions)).toBe('{"__proto__":{"admin":true},"region":"eu"}')
    expect(Object.getPrototypeOf(decodedOptions)).toBe(Object.prototype)
  })

  it("a part is checked as before: `type` a string, its issues where they are, its JSON Schema an object with a required type", () => {
    const decode = Schema.decodeUnknownEither(Message, { onExcessProperty: "error", errors: "all" })
    expect(decode({ role: "user", content: [{ text: "x" }] })._tag).toBe("Left")
    expect(decode({ role: "user", content: [{ type: 1 }] })._tag).toBe("Left")
    expect(decode({ role: "user", content: [5] })._tag).toBe("Left")
    const schema = JSONSchema.make(ContentPart) as { type?: string; required?: Array<string> }
    expect(schema.type).toBe("object")
    expect(schema.required).toEqual(["type"])
  })
})
