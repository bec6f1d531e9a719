import { describe, expect, it } from "@effect/vitest"
import { Either, ParseResult, Schema } from "effect"
import { HostEvent, IdempotencyKey } from "../../src/http/Schemas.js"

const messageOf = <A, I>(schema: Schema.Schema<A, I, never>, value: unknown) => {
  const r = Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })(value)
  if (Either.isRight(r)) throw new Error("expected a refusal")
  return ParseResult.TreeFormatter.formatErrorSync(r.left)
}

describe("refusals say what is wrong", () => {
  it("an Idempotency-Key of non-ASCII characters is refused as not printable ASCII, whatever its length in bytes", () => {
    // `é` sent as UTF-8, read by Node as Latin-1: two characters each.
    const asNodeReadsIt = Buffer.from("é".repeat(100), "utf8").toString("latin1")
    expect(messageOf(IdempotencyKey, asNodeReadsIt)).toMatch(/printable ASCII/)
    expect(messageOf(IdempotencyKey, "caf\u00e9")).toMatch(/printable ASCII/)
    expect(messageOf(IdempotencyKey, "k".repeat(257))).toMatch(/1 to 256 bytes/)
    expect(messageOf(IdempotencyKey, "")).toMatch(/1 to 256 bytes/)
  })

  it("a host Event's kind over 255 characters is refused for its length, without the kind echoed back", () => {
    const call = { session_id: "ses_00000000000000000000000000", sequence: 1, payload: {} }
    const long = messageOf(HostEvent, { ...call, kind: "k".repeat(300) })
    expect(long).toMatch(/255 characters/)
    expect(long).not.toContain("k".repeat(300))
    expect(long).not.toMatch(/line break/)
    expect(messageOf(HostEvent, { ...call, kind: "" })).toMatch(/1 to 255 characters/)
  })
})
