/**
 * A 503 `overloaded` that a retry can cure carries `Retry-After` in whole seconds (RFC 9110
 * §10.2.3): the refusal's own wait (`details.retry_after_ms`, rounded up) where it names one, else
 * RETRY_AFTER_SECS. A refusal that says a retry will not help, and every other refusal, carries none.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import {
  IdempotencyUnavailable,
  Internal,
  Overloaded,
  SessionBusy,
  SessionEnded
} from "../../src/domain/Errors.js"
import { RETRY_AFTER_SECS, toResponse } from "../../src/http/Errors.js"
import { idempotentTurn, jsonAnswer } from "../../src/http/Idempotent.js"
import * as IdempotencyMemory from "../../src/layers/IdempotencyMemory.js"

describe("Retry-After on 503 overloaded", () => {
  it("a retryable overloaded refusal with no wait of its own asks for RETRY_AFTER_SECS, and still closes the connection", () => {
    const res = toResponse(new Overloaded({ message: "the server is stopping and admits no new work" }))
    expect(res.status).toBe(503)
    expect(res.headers["retry-after"]).toBe(String(RETRY_AFTER_SECS))
    expect(res.headers["connection"]).toBe("close")
  })

  it("a refusal naming its wait (details.retry_after_ms) asks for that wait, rounded up to whole seconds", () => {
    for (const [ms, secs] of [[4_500, "5"], [1_000, "1"], [1, "1"], [90_000, "90"]] as const) {
      const res = toResponse(new Overloaded({ message: "max hosts", details: { reason: "max_hosts", retry_after_ms: ms } }))
      expect(res.headers["retry-after"], `${ms} ms`).toBe(secs)
    }
  })

  it("an overloaded refusal that says a retry will not help (retryable: false), and every other refusal, carries no Retry-After", () => {
    const none = [
      new Overloaded({ message: "no registration will expire", retryable: false, details: { reason: "max_hosts" } }),
      new IdempotencyUnavailable({ message: "damaged" }),
      new SessionBusy({ message: "busy" }),
      new Internal({ message: "failed" })
    ]
    for (const e of none) expect(toResponse(e).headers["retry-after"], e.code).toBeUndefined()
  })

  it.effect("a keyed turn refused before it started, at the idempotency store's bound, is a 503 that asks for a retry after RETRY_AFTER_SECS", () =>
    Effect.gen(function*() {
      const store = yield* IdempotencyMemory.make({ retentionMs: 60_000, maxKeys: 1 })
      yield* store.claim("other", "filler", "h")
      const refused = yield* idempotentTurn(
        store,
        "send:ses_x",
        "k",
        { input: "x" },
        () => Effect.fail(new SessionEnded({ message: "the session has ended" })),
        (v) => jsonAnswer(200, v)
      )
      expect(refused.status).toBe(503)
      expect(refused.headers["retry-after"]).toBe(String(RETRY_AFTER_SECS))
    }))
})
