/**
 * Redaction of secrets from what a server sent back (src/domain/Redaction.ts), shared by the model
 * clients and the http Environment driver.
 */
import { describe, expect, it } from "@effect/vitest"
import { REDACTED, redact, redactCutText, redactText, redactTexts } from "../../src/domain/Redaction.js"

describe("redaction", () => {
  it("every occurrence of a secret is replaced, in strings, member names and numbers, the longer secret first", () => {
    const secrets = ["Bearer sk-123", "sk-123", "4242"]
    expect(redactText("Bearer sk-123 then sk-123", secrets)).toBe(`${REDACTED} then ${REDACTED}`)
    expect(redact({ "sk-123": ["x sk-123 y", 142420, 7], n: null }, secrets)).toEqual({ [REDACTED]: [`x ${REDACTED} y`, REDACTED, 7], n: null })
  })

  it("redactTexts replaces a secret in strings and member names but keeps every number (a result keeps its shape), and answers the value itself when it holds no secret", () => {
    const secrets = ["Bearer sk-123", "sk-123", "4242"]
    const result = { text: "your header was Bearer sk-123", tool_calls: [{ id: "c", name: "f", input: { "sk-123": "x sk-123", n: 4242 } }], usage: { input_tokens: 14242 } }
    expect(redactTexts(result, secrets)).toEqual({
      text: `your header was ${REDACTED}`,
      tool_calls: [{ id: "c", name: "f", input: { [REDACTED]: `x ${REDACTED}`, n: 4242 } }],
      usage: { input_tokens: 14242 }
    })
    const clean = { text: "nothing", tool_calls: [{ input: { a: ["b"] } }], usage: { input_tokens: 4242 } }
    expect(redactTexts(clean, secrets)).toBe(clean)
    expect(redactTexts(clean, [])).toBe(clean)
  })

  it("an empty secret redacts nothing (an empty key is not a secret found everywhere)", () => {
    expect(redactText("abc", [""])).toBe("abc")
    expect(redact({ a: "abc", n: 1 }, [""])).toEqual({ a: "abc", n: 1 })
    expect(redactCutText("abc", [""])).toBe("abc")
  })

  it("a cut text also loses a tail that begins a secret; a whole text keeps it", () => {
    expect(redactCutText("body ends in sk-1", ["sk-123"])).toBe(`body ends in ${REDACTED}`)
    expect(redactCutText("sk-123 and s", ["sk-123"])).toBe(`${REDACTED} and ${REDACTED}`)
    expect(redactText("body ends in sk-1", ["sk-123"])).toBe("body ends in sk-1")
    expect(redactCutText("nothing here", ["sk-123"])).toBe("nothing here")
  })

  it("redaction walks a value of any depth without the stack: 100,000 nested arrays and objects keep their shape, the secret at the bottom redacted", () => {
    const depth = 100_000
    let value: unknown = "x sk-123 y"
    for (let i = 0; i < depth; i++) value = i % 2 === 0 ? [value] : { ["k sk-123"]: value }
    let out = redact(value, ["sk-123"])
    let shaped = 0
    for (let i = depth - 1; i >= 0; i--) {
      const level = i % 2 === 0
        ? Array.isArray(out) && out.length === 1 ? out[0] : undefined
        : out !== null && typeof out === "object" && Object.keys(out).join() === `k ${REDACTED}` ? (out as Record<string, unknown>)[`k ${REDACTED}`] : undefined
      if (level === undefined) break
      shaped++
      out = level
    }
    expect(shaped).toBe(depth)
    expect(out).toBe(`x ${REDACTED} y`)
  })

  it("members named __proto__, constructor and prototype survive redaction as the value's own members, byte for byte as JSON", () => {
    const text = '{"__proto__":{"x":1,"__proto__":[2]},"constructor":{"prototype":3},"prototype":"sk-123","y":[{"__proto__":null}]}'
    const out = redact(JSON.parse(text), ["sk-123"])
    expect(JSON.stringify(out)).toBe(text.replace("sk-123", REDACTED))
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype)
    expect(Object.keys(out as object)).toEqual(["__proto__", "constructor", "prototype", "y"])
    // Not a prototype: an own member, which nothing inherits.
    expect((out as { x?: unknown }).x).toBeUndefined()
  })
})
