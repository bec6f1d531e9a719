/**
 * BRAIN_MAX_MODEL_SECS and BRAIN_MAX_MODEL_OUTPUT_BYTES bound every model call, the scripted
 * provider's included (docs/operations.md, docs/models.md): on a real server process a scripted
 * reply delayed past the stall bound fails its call `model_timeout` once the bound has passed, and
 * an answer over the output bound fails it `model_output_limit`.
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer } from "../support/server.js"

describe("the scripted provider under the model bounds, over HTTP", () => {
  const server = sharedServer({ env: { BRAIN_MAX_MODEL_SECS: "1", BRAIN_MAX_MODEL_OUTPUT_BYTES: "100" } })
  const failureOf = async (reply: Record<string, unknown>) => {
    const created = await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies: [reply] } } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const sent = await request(server().baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "hi" } } })
    const events = await request(server().baseUrl, `/v1/sessions/${id}/events?after=0`)
    const failed = (events.body.events as Array<{ kind: string; data: any }>).find((e) => e.kind === "model_call_failed")
    return { sent, failure: failed?.data.failure, events: events.text }
  }

  it("a scripted reply delayed past BRAIN_MAX_MODEL_SECS fails its call model_timeout after the bound, not the delay", async () => {
    // A delay of ten minutes, far past the test's timeout: a call that waited for it, not for the
    // bound, would not be answered here (the test's timeout is the hang guard, not a timing claim).
    const { failure, events } = await failureOf({ text: "slow", delay_ms: 600_000 })
    expect(failure, events).toMatchObject({ code: "model_timeout", ambiguous: true })
  })

  it("a scripted answer over BRAIN_MAX_MODEL_OUTPUT_BYTES fails its call model_output_limit", async () => {
    const { failure, events } = await failureOf({ text: "y".repeat(500) })
    expect(failure, events).toMatchObject({ code: "model_output_limit", ambiguous: true })
  })
})
