/**
 * A model's answer whose tool-call arguments nest deeper than MAX_JSON_DEPTH, through a real
 * server and each real provider's stream (a fake provider on loopback). The arguments come from
 * outside and are parsed without bound; what is then done with them (the answer's record, the
 * schema check, the loop's copy) walks them by recursion. So the answer is refused where it is
 * read, before anything walks it: the call is closed `model_call_failed` with `model_bad_response`
 * (ambiguous: the provider ran it), never left without its outcome, nothing deep is journaled, no
 * tool is called, and the server keeps serving. Arguments at the bound are taken as they are.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_JSON_DEPTH } from "../../src/domain/Limits.js"
import { nestingDepth } from "../../src/domain/JsonText.js"
import { FakeProvider, type Script } from "../support/fakeProvider.js"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"
import { DONE, openAi, openAiFinishing } from "../fixtures/providers/openaiChat.js"
import * as Anthropic from "../fixtures/providers/anthropic.js"
import * as Responses from "../fixtures/providers/openaiResponses.js"

/** Tool-call arguments nesting `levels` deep in all: an object whose `v` holds arrays, or objects in objects. */
const deepArguments = (levels: number, objects: boolean) =>
  objects ? `${'{"a":'.repeat(levels)}1${"}".repeat(levels)}` : `{"ms":1,"v":${"[".repeat(levels - 1)}1${"]".repeat(levels - 1)}}`

/** What the test asks of the fake in its message: `deep <levels> <arrays|objects>`. */
const asked = (text: string) => {
  const m = /deep (\d+) (arrays|objects)/.exec(text)
  return m === null ? undefined : deepArguments(Number(m[1]), m[2] === "objects")
}

const chatAnswer = (args: string): Script => ({
  steps: [
    openAi.delta({ role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_deep", type: "function", function: { name: "slow", arguments: "" } }] }),
    openAi.delta({ tool_calls: [{ index: 0, function: { arguments: args } }] }),
    openAi.delta({}, "tool_calls"),
    openAi.usage(30, 12),
    DONE
  ]
})

const anthropicAnswer = (args: string): Script => ({
  steps: [
    Anthropic.messageStart("msg_deep"),
    Anthropic.toolStart(0, "toolu_deep", "slow"),
    Anthropic.jsonDelta(0, args),
    Anthropic.blockStop(0),
    Anthropic.messageDelta("tool_use"),
    Anthropic.messageStop
  ]
})

const responsesAnswer = (args: string): Script => {
  const call = Responses.functionCall(0, "fc_deep", "call_deep", "slow", [args])
  return { steps: Responses.respond([call], Responses.completed([call])) }
}

const TEXT: Record<string, Script> = {
  chat: { steps: openAiFinishing("stop", "done") },
  claude: { steps: Anthropic.textAnswer },
  responses: { steps: Responses.textAnswer() }
}

describe(`a model's tool-call arguments nested deeper than MAX_JSON_DEPTH (${MAX_JSON_DEPTH})`, () => {
  let fake: FakeProvider
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    fake = await FakeProvider.start((req) => {
      const provider = req.path.endsWith("/chat/completions") ? "chat" : req.path.endsWith("/responses") ? "responses" : "claude"
      // After the tool's result, a text answer.
      const answered = /"role":"tool"|"tool_result"|"function_call_output"/.test(req.text)
      const args = answered ? undefined : asked(req.text)
      if (args === undefined) return TEXT[provider]!
      return provider === "chat" ? chatAnswer(args) : provider === "claude" ? anthropicAnswer(args) : responsesAnswer(args)
    })
    const models = JSON.stringify({
      chat: { provider: "openai-chat", model: "gpt-test", base_url: `${fake.url}/v1` },
      responses: { provider: "openai-responses", model: Responses.MODEL, base_url: `${fake.url}/v1` },
      claude: { provider: "anthropic", model: Anthropic.MODEL, base_url: fake.url, api_key_env: "E2E_MODEL_KEY" }
    })
    server = await startServer({ env: { BRAIN_MODELS: models, E2E_MODEL_KEY: "k" } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
    await fake?.close()
  })

  const turn = async (model: string, message: string) => {
    const created = await request(server.baseUrl, "/v1/sessions", { json: { model, tools: [{ name: "slow" }] } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message } } })
    expect(sent.status, sent.text).toBe(200)
    const page = await request(server.baseUrl, `/v1/sessions/${id}/events`)
    expect(page.status).toBe(200)
    return { turn: sent.body.turn, events: page.body.events as Array<{ kind: string; data: any }>, pageText: page.text }
  }

  for (const model of ["chat", "claude", "responses"]) {
    for (const [levels, shape] of [[10_000, "arrays"], [100_000, "arrays"], [10_000, "objects"]] as const) {
      it(`${model}: arguments ${levels} levels deep (${shape}) close the call model_bad_response (ambiguous), call no tool, journal nothing deep, and the server keeps serving`, async () => {
        const { events, pageText, turn: done } = await turn(model, `deep ${levels} ${shape}`)
        const kinds = events.map((e) => e.kind)
        // The call has its outcome: every start is closed before the activation ends.
        expect(kinds.filter((k) => k === "model_call_started")).toHaveLength(1)
        const failed = events.find((e) => e.kind === "model_call_failed")
        expect(failed?.data.failure, kinds.join(" ")).toMatchObject({ code: "model_bad_response", ambiguous: true })
        expect(failed!.data.failure.message).toContain(`deeper than ${MAX_JSON_DEPTH} levels`)
        expect(kinds).not.toContain("tool_call_started")
        expect(done.failure?.code).not.toBe("agentloop_failed")
        expect(nestingDepth(pageText)).toBeLessThan(MAX_JSON_DEPTH)
        expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
      })
    }
    it(`${model}: arguments exactly ${MAX_JSON_DEPTH} levels deep are recorded as the answer, and ${MAX_JSON_DEPTH - 6} (what the official loop's dispatch request, saving its transcript, carries within the bound) reach the tool`, async () => {
      const atBound = await turn(model, `deep ${MAX_JSON_DEPTH} arrays`)
      const ended = atBound.events.find((e) => e.kind === "model_call_ended")
      expect(ended, atBound.events.map((e) => e.kind).join(" ")).toBeDefined()
      expect(nestingDepth(JSON.stringify(ended!.data.result.tool_calls[0].input))).toBe(MAX_JSON_DEPTH)
      const carried = await turn(model, `deep ${MAX_JSON_DEPTH - 6} arrays`)
      const started = carried.events.find((e) => e.kind === "tool_call_started")
      expect(started, carried.events.map((e) => e.kind).join(" ")).toBeDefined()
      expect(carried.turn.status).toBe("ended")
    })
  }
})
