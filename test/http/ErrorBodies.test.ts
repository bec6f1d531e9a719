/**
 * The error body on the wire is exactly `{code, message, retryable, details?}` (DESIGN §7), and
 * the contract's error schemas (src/http/ApiErrors.ts) describe exactly that body: no `_tag`, a
 * literal `code` per schema, the status that code is answered with. Checked both ways: each
 * schema's encoding equals what the server's error middleware writes for the same refusal, and
 * every refusal a real server answers (the framework's own included) decodes into its class and
 * encodes back to the very body it sent.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Either, Option, ParseResult, Schema, SchemaAST } from "effect"
import * as Refusal from "../../src/domain/Errors.js"
import { wireSchemas } from "../../src/http/ApiErrors.js"
import { bodyOf, decodeRefused, statusOf } from "../../src/http/Errors.js"
import { ensureBuilt, type Reply, request, type ServerProcess, startServer } from "../support/server.js"

const TOKEN = "error-bodies-token"
const MAX_REQUEST_BYTES = 4096
const UNKNOWN_ID = `ses_${"0".repeat(26)}`

type WireSchema = Schema.Schema<Refusal.ApiError, Record<string, unknown>>

const identifierOf = (schema: Schema.Schema.Any) => Option.getOrUndefined(SchemaAST.getIdentifierAnnotation(schema.ast))

/** The wire schema of each code, found by its identifier: the class's tag. */
const schemaOf = new Map(
  Refusal.ApiErrorClasses.map((c) => [new c({ message: "" }).code as string, wireSchemas.find((s) => identifierOf(s) === c._tag) as unknown as WireSchema])
)

const expectBody = (reply: Reply) => {
  expect(reply.headers.get("content-type") ?? "", reply.text).toMatch(/^application\/json/)
  const keys = Object.keys(reply.body).sort()
  expect(keys.filter((k) => k !== "details"), reply.text).toEqual(["code", "message", "retryable"])
  expect(keys.every((k) => ["code", "details", "message", "retryable"].includes(k)), reply.text).toBe(true)
  expect(typeof reply.body.code === "string" && typeof reply.body.message === "string" && typeof reply.body.retryable === "boolean").toBe(true)
}

describe("error bodies", () => {
  it("every refusal class has one wire schema, whose encoding is the body the error middleware writes, without _tag", () => {
    expect([...schemaOf.values()].filter((s) => s !== undefined)).toHaveLength(Refusal.ApiErrorClasses.length)
    expect(new Set(schemaOf.values()).size).toBe(wireSchemas.length)
    for (const errorClass of Refusal.ApiErrorClasses) {
      for (const error of [new errorClass({ message: "plain" }), new errorClass({ message: "with details", retryable: true, details: { a: [1] } })]) {
        const schema = schemaOf.get(error.code)!
        const encoded = Schema.encodeSync(schema)(error)
        expect(encoded, error._tag).toEqual(JSON.parse(bodyOf(error)))
        expect(Object.keys(encoded)).not.toContain("_tag")
        expect(Schema.decodeUnknownSync(schema)(encoded)).toBeInstanceOf(errorClass)
      }
    }
  })

  it("a decode refusal's message is one line naming each issue where it is; an optional field's \"Expected undefined\" beside a mistake in its value is no issue of its own", () => {
    const Body = Schema.Struct({
      limit: Schema.optional(Schema.NumberFromString.pipe(Schema.between(1, 10))),
      options: Schema.optional(Schema.Struct({ depth: Schema.Number }).annotations({ parseOptions: { onExcessProperty: "error" } }))
    })
    const refusal = (input: unknown) => {
      const decoded = Schema.decodeUnknownEither(Body, { errors: "all" })(input)
      if (Either.isRight(decoded)) throw new Error("expected a refusal")
      return decodeRefused(ParseResult.ArrayFormatter.formatErrorSync(decoded.left))
    }
    const limit = refusal({ limit: "0" })
    expect(limit.message).toBe("limit: Expected a number between 1 and 10, actual 0")
    expect(limit.details).toEqual([{ _tag: "Refinement", path: ["limit"], message: "Expected a number between 1 and 10, actual 0" }])
    const nested = refusal({ limit: "0", options: { depth: 1, colour: "red" } })
    expect((nested.details as Array<{ path: unknown }>).map((i) => i.path)).toEqual([["limit"], ["options", "colour"]])
    expect(nested.message).toBe(`limit: Expected a number between 1 and 10, actual 0; options.colour: is unexpected, expected: "depth"`)
    expect(decodeRefused([{ _tag: "Type", path: [], message: "Expected Body,\n actual null" }]).message).toBe("Expected Body, actual null")
  })

  it("the schemas sharing a status are told apart by code: a body decodes only with its own code's schema", () => {
    const busy = { code: "session_busy", message: "m", retryable: true }
    const decodes = [...schemaOf.values()].filter((schema) => Schema.is(Schema.encodedSchema(schema))(busy))
    expect(decodes.map(identifierOf)).toEqual(["SessionBusy"])
  })

  describe("on the wire, from a real server", () => {
    let server: ServerProcess
    beforeAll(async () => {
      ensureBuilt()
      server = await startServer({ env: { BRAIN_API_TOKEN: TOKEN, BRAIN_MAX_REQUEST_BYTES: String(MAX_REQUEST_BYTES) } })
    }, 120_000)
    afterAll(async () => {
      await server?.dispose()
    })

    const auth = { authorization: `Bearer ${TOKEN}` }
    const call = (path: string, options: Parameters<typeof request>[2] = {}) =>
      request(server.baseUrl, path, { ...options, headers: { ...auth, ...options.headers } })

    it("every refusal has exactly the keys code, message, retryable and optionally details, its code's status, and is its schema's encoding", async () => {
      const created = await call("/v1/sessions", { json: { model: { provider: "scripted" } } })
      const id = created.body.session_id as string
      await call(`/v1/sessions/${id}/messages`, { json: { input: { message: "one" } } })
      const ended = await call(`/v1/sessions/${id}/end`, { method: "POST" })
      expect(ended.status, ended.text).toBe(200)
      const key = { "idempotency-key": "error-bodies" }
      expect((await call("/v1/sessions", { json: { model: { provider: "scripted" } }, headers: key })).status).toBe(201)
      const replies: Array<[string, Reply]> = [
        ["malformed JSON", await call("/v1/sessions", { raw: "{", headers: { "content-type": "application/json" } })],
        ["an unknown field", await call("/v1/sessions", { json: { model: { provider: "scripted" }, colour: "red" } })],
        ["a malformed id", await call("/v1/sessions/nope")],
        ["a cursor past the end", await call(`/v1/sessions/${id}/events?after=100000`)],
        ["no token", await request(server.baseUrl, "/v1/sessions")],
        ["an unknown route", await call("/v1/nowhere")],
        ["a method the path does not take", await call(`/v1/sessions/${id}`, { method: "PUT" })],
        ["an unknown session", await call(`/v1/sessions/${UNKNOWN_ID}`)],
        ["a reused Idempotency-Key", await call("/v1/sessions", { json: { model: { provider: "scripted" }, system: "other" }, headers: key })],
        ["a message after the end", await call(`/v1/sessions/${id}/messages`, { json: { input: { message: "late" } } })],
        ["a body too large", await call("/v1/sessions", { json: { model: { provider: "scripted" }, system: "x".repeat(MAX_REQUEST_BYTES) } })],
        ["a body not JSON", await call("/v1/sessions", { raw: "hello", headers: { "content-type": "text/plain" } })],
        ["a host route without the host's token", await call(`/v1/hosts/host_${"0".repeat(26)}/commands`)]
      ]
      const seen = new Set<string>()
      for (const [what, reply] of replies) {
        expect(reply.status, `${what}: ${reply.text}`).toBeGreaterThanOrEqual(400)
        expectBody(reply)
        expect(reply.status, what).toBe(statusOf(reply.body.code))
        const schema = schemaOf.get(reply.body.code)
        expect(schema, `${what}: ${reply.body.code} has a wire schema`).toBeDefined()
        const decoded = Schema.decodeUnknownSync(schema!)(reply.body)
        expect(Refusal.isApiError(decoded), what).toBe(true)
        expect(Schema.encodeSync(schema!)(decoded), what).toEqual(reply.body)
        seen.add(reply.body.code)
      }
      expect([...seen].sort()).toEqual([
        "conflict",
        "invalid_request",
        "method_not_allowed",
        "not_found",
        "payload_too_large",
        "session_ended",
        "unauthorized",
        "unsupported_media_type"
      ])
    })
  })
})
