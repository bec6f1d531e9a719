/**
 * Opt-in live tests against the real providers: each runs only when its API key is in the
 * environment (OPENAI_API_KEY, ANTHROPIC_API_KEY) and is skipped otherwise — CI has no keys. Each
 * runs one real turn with a tool call through a real server process: the model asks for the
 * fixture's `slow` tool, gets its result, and answers; the journal shows it all, once.
 * BRAIN_LIVE_OPENAI_MODEL / BRAIN_LIVE_ANTHROPIC_MODEL choose the model.
 */
import { afterEach, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

const SYSTEM = "You are a test. First call the tool `slow` with input {\"ms\": 10}. After its result arrives, answer with the single word: done."
const TOOLS = [{
  name: "slow",
  description: "Sleeps for ms milliseconds and reports it.",
  input_schema: { type: "object", properties: { ms: { type: "integer" } }, required: ["ms"] }
}]

const liveTurn = async (server: ServerProcess, binding: string) => {
  const created = await request(server.baseUrl, "/v1/sessions", { json: { model: binding, system: SYSTEM, tools: TOOLS } })
  expect(created.status, created.text).toBe(201)
  const id = created.body.session_id
  const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "Go." } } })
  expect(sent.status, sent.text).toBe(200)
  expect(sent.body.turn.status, JSON.stringify(sent.body.turn)).toBe("ended")
  const events = (await request(server.baseUrl, `/v1/sessions/${id}/events?after=0`)).body.events
  const kinds = events.map((e: any) => e.kind)
  expect(kinds.filter((k: string) => k === "tool_call_started")).toHaveLength(1)
  expect(kinds.filter((k: string) => k === "model_call_ended").length).toBeGreaterThanOrEqual(2)
  const first = events.find((e: any) => e.kind === "model_call_ended").data.result
  expect(first.tool_calls[0]).toMatchObject({ name: "slow", input: { ms: 10 } })
  expect(first.response_id).toBeTruthy()
}

describe("live providers (opt-in)", () => {
  let server: ServerProcess | undefined
  afterEach(async () => {
    await server?.dispose()
    server = undefined
  })

  it.skipIf(!process.env.OPENAI_API_KEY)("live, runs only with OPENAI_API_KEY set: one real turn with a tool call through openai-responses and openai-chat", async () => {
    ensureBuilt()
    const model = process.env.BRAIN_LIVE_OPENAI_MODEL ?? "gpt-4.1-mini"
    server = await startServer({
      env: {
        BRAIN_MODELS: JSON.stringify({
          responses: { provider: "openai-responses", model, api_key_env: "OPENAI_API_KEY" },
          chat: { provider: "openai-chat", model, api_key_env: "OPENAI_API_KEY" }
        })
      }
    })
    await liveTurn(server, "responses")
    await liveTurn(server, "chat")
  }, 120_000)

  it.skipIf(!process.env.ANTHROPIC_API_KEY)("live, runs only with ANTHROPIC_API_KEY set: one real turn with a tool call through anthropic", async () => {
    ensureBuilt()
    const model = process.env.BRAIN_LIVE_ANTHROPIC_MODEL ?? "claude-sonnet-4-5"
    server = await startServer({
      env: { BRAIN_MODELS: JSON.stringify({ claude: { provider: "anthropic", model, api_key_env: "ANTHROPIC_API_KEY" } }) }
    })
    await liveTurn(server, "claude")
  }, 120_000)
})
