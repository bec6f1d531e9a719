/**
 * The scripted provider's `replies[].fail: {code, message}` (DESIGN §9, public configuration): a
 * model failure code is kept as the call's failure code with its message, so a test or a client
 * can script the exact failure a real provider gives; any other code (one of Brain's own, or
 * unknown) is `model_failed` naming it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { SessionId } from "../../../src/domain/Ids.js"
import { scripted } from "../../../src/layers/ModelsScripted.js"

const callFailing = (fail: { code: string; message: string }) =>
  Effect.flip(scripted.call({
    session: "ses_01m8xye3qb8kn08yv6gx15teh2" as SessionId,
    sequence: 5,
    index: 0,
    model: { provider: "scripted", replies: [{ fail }] },
    request: { messages: [{ role: "user", content: "hi" }] }
  } as any))

describe("the scripted provider's scripted failures", () => {
  it.effect("a provider failure code is the failure's code, with its message as given, ambiguous and retryable as docs/models.md gives that code for a real provider", () =>
    Effect.gen(function*() {
      const unavailable = yield* callFailing({ code: "model_unavailable", message: "the provider is down" })
      expect(unavailable).toMatchObject({ code: "model_unavailable", message: "the provider is down", retryable: true, ambiguous: true })
      const rejected = yield* callFailing({ code: "model_rejected", message: "bad request" })
      expect(rejected).toMatchObject({ code: "model_rejected", message: "bad request", retryable: false, ambiguous: false })
      const limited = yield* callFailing({ code: "model_rate_limited", message: "slow down" })
      expect(limited).toMatchObject({ code: "model_rate_limited", retryable: true, ambiguous: false })
    }))

  it.effect("any other code is model_failed, its message naming the scripted code", () =>
    Effect.gen(function*() {
      const other = yield* callFailing({ code: "boom", message: "the model fell over" })
      expect(other).toMatchObject({ code: "model_failed", message: "boom: the model fell over", retryable: false, ambiguous: false })
      const notModel = yield* callFailing({ code: "model_call_limit", message: "no" })
      expect(notModel).toMatchObject({ code: "model_failed", message: "model_call_limit: no" })
    }))
})
