/**
 * A failure built from text Brain did not write is bounded before it is recorded
 * (`boundedFailure`): its message to MAX_FAILURE_MESSAGE_BYTES of UTF-8, cut at a character's
 * start with a marker; its details replaced by a note past MAX_FAILURE_DETAILS_BYTES. A failure
 * within the bounds is the same object.
 */
import { describe, expect, it } from "vitest"
import { guestFailureMessage, guestMessage } from "../../src/domain/CutText.js"
import { boundedFailure, boundedMessage, failure } from "../../src/domain/Failure.js"
import { MAX_FAILURE_MESSAGE_BYTES } from "../../src/domain/Limits.js"

const decoder = new TextDecoder("utf-8", { fatal: true })

describe("a failure's text is bounded", () => {
  it("a message within the bound is kept as it is; a longer one is its start, cut at a character's start, then the marker", () => {
    expect(boundedMessage("short")).toBe("short")
    const exact = "a".repeat(MAX_FAILURE_MESSAGE_BYTES)
    expect(boundedMessage(exact)).toBe(exact)
    // 3-byte characters: the bound falls inside one, which is left out whole.
    const wide = "€".repeat(MAX_FAILURE_MESSAGE_BYTES)
    const cut = boundedMessage(wide)
    const kept = cut.slice(0, cut.indexOf(" … [cut:"))
    expect(kept).toBe("€".repeat(Math.floor(MAX_FAILURE_MESSAGE_BYTES / 3)))
    expect(cut).toMatch(new RegExp(`… \\[cut: ${3 * MAX_FAILURE_MESSAGE_BYTES - Buffer.byteLength(kept)} more bytes; Brain keeps at most ${MAX_FAILURE_MESSAGE_BYTES} bytes of a failure's message\\]$`))
  })

  it("a guest's message is read no further than the bound, cut the same way, and bytes past the cut are never decoded", () => {
    const bytes = new Uint8Array(MAX_FAILURE_MESSAGE_BYTES + 10).fill(0x61)
    bytes[MAX_FAILURE_MESSAGE_BYTES + 5] = 0xff // not UTF-8, past the cut: never read
    const message = guestMessage(bytes, (b) => decoder.decode(b))
    expect(message.startsWith("a".repeat(MAX_FAILURE_MESSAGE_BYTES) + " … [cut: 10 more bytes")).toBe(true)
    expect(guestMessage(new Uint8Array([0x68, 0x69]), (b) => decoder.decode(b))).toBe("hi")
    expect(() => guestMessage(new Uint8Array([0xff]), (b) => decoder.decode(b))).toThrow()
  })

  it("a guest's brain.fail message reads the same on either thread: cut at the bound, and bytes that are not UTF-8 say so instead", () => {
    const bytes = new Uint8Array(MAX_FAILURE_MESSAGE_BYTES + 10).fill(0x61)
    bytes[MAX_FAILURE_MESSAGE_BYTES + 5] = 0xff // past the cut: never read
    expect(guestFailureMessage(bytes, decoder)).toBe(guestMessage(bytes, (b) => decoder.decode(b)))
    expect(guestFailureMessage(new Uint8Array([0x68, 0x69]), decoder)).toBe("hi")
    expect(guestFailureMessage(new Uint8Array([0x68, 0xff]), decoder)).toBe("the guest's failure message is not UTF-8")
  })

  it("a message cut once is not cut again: bounding it keeps it and its count; text put before it is cut with the count of all that was left out", () => {
    const bytes = new Uint8Array(100_000).fill(0x61)
    const once = guestMessage(bytes, (b) => decoder.decode(b))
    expect(once).toMatch(/ … \[cut: 34464 more bytes; /)
    expect(boundedMessage(once)).toBe(once)
    const prefixed = boundedMessage(`the tool failed: ${once}`)
    expect(prefixed.startsWith("the tool failed: aaa")).toBe(true)
    expect(prefixed).toMatch(new RegExp(`^[^\\[]{${MAX_FAILURE_MESSAGE_BYTES}} … \\[cut: ${34464 + "the tool failed: ".length} more bytes; Brain keeps at most ${MAX_FAILURE_MESSAGE_BYTES} bytes of a failure's message\\]$`))
  })

  it("details past the bound are replaced by a note of their size; a failure within the bounds is the same object", () => {
    const small = failure("model_unavailable", "busy", { retryable: true, details: { status: 503 } })
    expect(boundedFailure(small)).toBe(small)
    const big = boundedFailure(failure("model_unavailable", "busy", { retryable: true, ambiguous: true, details: { body: "x".repeat(200_000) } }))
    expect(big).toMatchObject({ code: "model_unavailable", message: "busy", retryable: true, ambiguous: true })
    expect(big.details).toEqual({ cut: expect.stringMatching(/^the details were \d+ bytes of JSON, above the 65536 Brain keeps$/) })
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    expect(boundedFailure(failure("internal", "m", { details: cyclic })).details).toEqual({ cut: "the details could not be written as JSON" })
  })
})
