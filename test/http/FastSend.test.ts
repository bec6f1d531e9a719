/**
 * Which sends the gate's route takes (src/http/FastSend.ts): only those that decode with the
 * route's own schemas at a path it matches exactly; the rest it leaves to HttpApi.
 */
import { describe, expect, it } from "@effect/vitest"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect } from "effect"
import { fastSend } from "../../src/http/FastSend.js"
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
