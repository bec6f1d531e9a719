/**
 * Redaction of secrets from what a server sent back (src/domain/Redaction.ts), shared by the model
 * clients and the http Environment driver.
 */
import { describe, expect, it } from "@effect/vitest"
import { REDACTED, redact, redactCutText, redactText } from "../../src/domain/Redaction.js"

describe("redaction", () => {
  it("every occurrence of a secret is replaced, in strings, member names and numbers, the longer secret first", () => {
    const secrets = ["Bearer sk-123", "sk-123", "4242"]
    expect(redactText("Bearer sk-123 then sk-123", secrets)).toBe(`${REDACTED} then ${REDACTED}`)
    expect(redact({ "sk-123": ["x sk-123 y", 142420, 7], n: null }, secrets)).toEqual({ [REDACTED]: [`x ${REDACTED} y`, REDACTED, 7], n: null })
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
})
