/**
 * Which sends the gate's route takes (src/http/FastSend.ts): only those that decode with the
 * route's own schemas at a path it matches exactly; the rest it leaves to HttpApi.
 */
import { describe, expect, it } from "@effect/vitest"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Either, Schema } from "effect"
import fc from "fast-check"
import { decodeSendHeaders, decodeSendPath, fastSend } from "../../src/http/FastSend.js"
import { MessageHeaders, SessionPath } from "../../src/http/Schemas.js"
import type { IdempotencyShape } from "../../src/services/Idempotency.js"
import type { SessionsShape } from "../../src/services/Sessions.js"

const ID = "ses_01jdq0000000000000000000ab"

/** Services nothing may reach: the route is only built here, never run. */
const untouched = new Proxy({}, { get: () => () => Effect.die("not called") })
const route = fastSend(untouched as SessionsShape, untouched as IdempotencyShape)

const req = (method: string, headers: Record<string, string> = {}) => ({ method, headers }) as unknown as HttpServerRequest.HttpServerRequest
const body = { input: { message: "hi" } }

describe("the gate's route for sends", () => {
  it("takes a POST to /v1/sessions/<id>/messages whose path, headers and payload decode", () => {
    expect(route(req("POST"), `/v1/sessions/${ID}/messages`, body)).toBeDefined()
    expect(route(req("POST", { "idempotency-key": "k", prefer: "respond-async" }), `/v1/sessions/${ID}/messages`, body)).toBeDefined()
  })

  it("leaves to HttpApi every other method, path, header and payload", () => {
    const left = [
      route(req("GET"), `/v1/sessions/${ID}/messages`, body),
      route(req("POST"), `/v1/sessions/${ID}/messages/`, body),
      route(req("POST"), `/v1/sessions/%73${ID.slice(1)}/messages`, body),
      route(req("POST"), "/v1/sessions/not-an-id/messages", body),
      route(req("POST"), `/v1/sessions/${ID}/events`, body),
      route(req("POST"), `/v1/sessions/${ID}/messages`, { input: { message: "hi" }, extra: 1 }),
      route(req("POST"), `/v1/sessions/${ID}/messages`, { input: {} }),
      route(req("POST"), `/v1/sessions/${ID}/messages`, null),
      route(req("POST", { "idempotency-key": "k".repeat(300) }), `/v1/sessions/${ID}/messages`, body),
      route(req("POST", { "idempotency-key": "" }), `/v1/sessions/${ID}/messages`, body)
    ]
    expect(left).toEqual(left.map(() => undefined))
  })
})

describe("the route's decoding of a send's path and headers", () => {
  const decodeHeaders = Schema.decodeUnknownEither(MessageHeaders)
  const decodePath = Schema.decodeUnknownEither(SessionPath)
  const agree = (fast: Either.Either<unknown, unknown>, slow: Either.Either<unknown, unknown>) => {
    expect(Either.isRight(fast)).toBe(Either.isRight(slow))
    if (Either.isRight(fast) && Either.isRight(slow)) expect(fast.right).toStrictEqual(slow.right)
  }
  const headerValue = fc.oneof(
    fc.string({ maxLength: 8 }),
    fc.constantFrom("k", "", "k".repeat(255), "k".repeat(256), "é", "a\nb", " ", "~", "respond-async", "respond-async, wait=1"),
    fc.array(fc.string({ maxLength: 3 }), { maxLength: 2 }),
    fc.integer(),
    fc.constant(undefined),
    fc.constant(null)
  )
  const headers = fc.dictionary(
    fc.oneof(fc.constantFrom("idempotency-key", "prefer", "host", "content-type", "Idempotency-Key", "__proto__"), fc.string({ maxLength: 6 })),
    headerValue,
    { maxKeys: 5 }
  )

  it("accepts exactly the headers MessageHeaders decodes, as the same value (every other header ignored)", () => {
    fc.assert(fc.property(headers, (h) => agree(decodeSendHeaders(h), decodeHeaders(h))), { numRuns: 2000 })
    for (const h of [null, undefined, "k", 1, [], ["k"], Object.create({ prefer: "respond-async" })]) agree(decodeSendHeaders(h), decodeHeaders(h))
  })

  it("accepts exactly the ids SessionPath decodes, as the same value", () => {
    const ids = fc.oneof(
      fc.string({ maxLength: 32 }),
      fc.stringMatching(/^ses_[0-9a-z]{24,28}$/),
      fc.constantFrom(ID, ID.toUpperCase(), `${ID}x`, ID.slice(0, -1), "ses_", "")
    )
    fc.assert(fc.property(ids, (id) => agree(decodeSendPath(id), decodePath({ id }))), { numRuns: 2000 })
  })
})
