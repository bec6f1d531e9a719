/**
 * The scripted provider's `replies[].fail: {code, message}` (DESIGN §9, public configuration): a
 * model failure code is kept as the call's failure code with its message, so a test or a client
 * can script the exact failure a real provider gives; any other code (one of Brain's own, or
 * unknown) is `model_failed` naming it.
 */
import { describe, expect, it } from "@effect/vitest"
import { NodeHttpClient } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import type { SessionId } from "../../../src/domain/Ids.js"
import * as ModelsBound from "../../../src/layers/ModelsBound.js"
import { scripted } from "../../../src/layers/ModelsScripted.js"
import { ModelBindings } from "../../../src/services/ModelBindings.js"
import * as ServerConfig from "../../../src/services/ServerConfig.js"

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

/** Milliseconds of a scripted delay no test waits out: ten minutes, against a test timeout of one. */
const SCRIPTED_FOREVER_MS = 600_000

describe("the scripted provider is held to the model bounds, as served", () => {
  const served = (overrides: { maxModelMs: number; maxModelOutputBytes: number }) =>
    ModelsBound.make({}).pipe(
      Effect.provide(Layer.mergeAll(
        Layer.succeed(ModelBindings, { names: [], get: () => undefined }),
        ServerConfig.layerWith(overrides),
        NodeHttpClient.dispatcherLayer
      ))
    )
  const call = (reply: Record<string, unknown>, onDelta?: (d: unknown) => void) => ({
    session: "ses_01m8xye3qb8kn08yv6gx15teh2" as SessionId,
    sequence: 5,
    index: 0,
    model: { provider: "scripted", replies: [reply] },
    request: { messages: [{ role: "user", content: "hi" }] },
    onDelta
  } as any)

  it.live("a wait longer than BRAIN_MAX_MODEL_SECS fails the call model_timeout, ambiguous, once the bound has passed (not after the scripted delay)", () =>
    Effect.gen(function*() {
      const models = yield* served({ maxModelMs: 100, maxModelOutputBytes: 0 })
      // A scripted delay far beyond the test's own timeout: a call that waited for it, not for the
      // bound, would never fail here (the test's timeout is the hang guard, not a timing claim).
      const failed = yield* Effect.flip(models.call(call({ text: "slow", delay_ms: SCRIPTED_FOREVER_MS })))
      expect(failed).toMatchObject({ code: "model_timeout", ambiguous: true, retryable: true })
      expect(failed.message).toContain("BRAIN_MAX_MODEL_SECS")
      const deltas: Array<unknown> = []
      const streamed = yield* Effect.flip(models.call(call({ text: "a b c d", delay_ms: 2000 }, (d) => deltas.push(d))))
      expect(streamed.code).toBe("model_timeout")
      expect(deltas).toEqual([])
      // Deltas closer together than the bound pass, however long the whole answer takes.
      const within = yield* models.call(call({ text: "a b c d", delay_ms: 200 }, (d) => deltas.push(d)))
      expect(within.text).toBe("a b c d")
      expect(deltas).toHaveLength(4)
    }))

  it.live("an answer over BRAIN_MAX_MODEL_OUTPUT_BYTES fails the call model_output_limit, ambiguous, and one within it is whole", () =>
    Effect.gen(function*() {
      const models = yield* served({ maxModelMs: 0, maxModelOutputBytes: 100 })
      const failed = yield* Effect.flip(models.call(call({ text: "y".repeat(500) })))
      expect(failed).toMatchObject({ code: "model_output_limit", ambiguous: true, retryable: false })
      expect(failed.message).toContain("BRAIN_MAX_MODEL_OUTPUT_BYTES")
      const deltas: Array<string> = []
      const streamed = yield* Effect.flip(models.call(call({ text: "word ".repeat(40) }, (d: any) => deltas.push(d.text))))
      expect(streamed.code).toBe("model_output_limit")
      expect(deltas.join("").length).toBeLessThanOrEqual(100)
      const tools = yield* Effect.flip(models.call(call({ text: "x", tool_calls: [{ name: "t", input: { pad: "z".repeat(200) } }] })))
      expect(tools.code).toBe("model_output_limit")
      const whole = yield* models.call(call({ text: "y".repeat(100) }))
      expect(whole.text).toBe("y".repeat(100))
    }))
})
