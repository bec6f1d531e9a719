/**
 * A model answer asking for more tool calls than BRAIN_MAX_TOOL_CALLS_PER_DISPATCH, on a real
 * server with the official loop: the round is refused whole (`tool_call_limit`), none of its calls
 * journaled or run, and the model is told so — each call answered as not run, with Brain's reason —
 * not, on the next turn, that the calls were interrupted and may or may not have run.
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer } from "../support/server.js"

const LIMIT = 3

describe("a round past BRAIN_MAX_TOOL_CALLS_PER_DISPATCH", () => {
  const server = sharedServer({ env: { BRAIN_MAX_TOOL_CALLS_PER_DISPATCH: String(LIMIT) } })

  it("refused whole, none run: the next turn's model sees each call as not run with the refusal's reason, none as may or may not have run", async () => {
    const calls = Array.from({ length: LIMIT + 1 }, (_, i) => ({ name: "t", input: { i } }))
    const created = await request(server().baseUrl, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: [{ tool_calls: calls }, { text: "done" }] },
        tools: [{ name: "t", description: "a tool", input_schema: { type: "object" } }]
      }
    })
    expect(created.status, created.text).toBe(201)
    const session = created.body.session_id
    const first = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "go" } } })
    expect(first.body.turn.status, first.text).toBe("failed")
    expect(first.body.turn.failure).toMatchObject({ code: "tool_call_limit", ambiguous: false })
    const reason = first.body.turn.failure.message as string
    expect(reason).toContain("none of them was journaled or sent")

    const second = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "again" } } })
    expect(second.body.turn.status, second.text).toBe("ended")
    const events = (await request(server().baseUrl, `/v1/sessions/${session}/events`)).body.events as ReadonlyArray<{ kind: string; data: any }>
    expect(events.filter((e) => e.kind === "tool_call_started")).toEqual([])
    // What the second turn's model was asked with: its call's context is the saved transcript.
    const transcript = (await request(server().baseUrl, `/v1/sessions/${session}/transcript`)).body.messages as ReadonlyArray<any>
    const asked = transcript.find((m) => m.role === "assistant" && m.tool_calls?.length)
    expect(asked.tool_calls).toHaveLength(LIMIT + 1)
    const results = transcript.filter((m) => m.role === "tool")
    expect(results.map((m) => m.tool_call_id)).toEqual(asked.tool_calls.map((c: { id: string }) => c.id))
    for (const m of results) expect(JSON.parse(m.content)).toEqual({ outcome: "error", error: `the call was not run: tool_call_limit: ${reason}` })
    expect(JSON.stringify(results)).not.toContain("may or may not have run")
    expect(transcript[transcript.length - 1]).toMatchObject({ role: "assistant", content: "done" })
  })
})
