/**
 * Real model bindings end to end (DESIGN §3, §9; seed "Effects happen after commit"): a real
 * server process with BRAIN_MODELS naming an OpenAI-compatible fake provider on loopback.
 *
 * - A turn with a tool call: the provider is sent each request once, the deltas reach a live
 *   subscriber, the journal holds the complete results.
 * - Secrets: after the run, the key appears nowhere in the data directory, the server's output,
 *   the error bodies or the OpenAPI document.
 * - Start: the loaded binding names are printed (never keys); a malformed file, a base_url with
 *   credentials, a query or a fragment, or a key that is empty or holds a line break refuses the
 *   start naming the file, the field and the reason; an unknown name is refused at create.
 * - A placeholder key (shorter than MIN_REDACTED_KEY_CHARS): said once at start, never redacted
 *   (its characters would mangle ordinary text).
 * - Crash: `kill -9` in the middle of a streamed answer; after the restart the call is recorded
 *   failed and ambiguous, and the provider counted exactly one request.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { FakeProvider, type Script } from "../support/fakeProvider.js"
import { ensureBuilt, eventually, request, ServerProcess, startServer } from "../support/server.js"
import { openSse } from "../support/sse.js"
import { openAi, openAiFinishing } from "../fixtures/providers/openaiChat.js"
import * as Anthropic from "../fixtures/providers/anthropic.js"

const KEY = "sk-e2e-DO-NOT-LEAK-7d1f0c2a9b"

/** Every file under `dir`, recursively. */
const filesUnder = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(path.join(dir, e.name)) : [path.join(dir, e.name)]
  )

/** A tool call asking for `slow` (the fixture server's tool), its arguments split across chunks. */
const toolCallAnswer: Script = {
  steps: [
    openAi.delta({ role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "slow", arguments: "" } }] }),
    { pauseMs: 50 },
    openAi.delta({ tool_calls: [{ index: 0, function: { arguments: "{\"ms\":" } }] }),
    openAi.delta({ tool_calls: [{ index: 0, function: { arguments: " 10}" } }] }),
    openAi.delta({}, "tool_calls"),
    openAi.usage(30, 12),
    "data: [DONE]\n\n"
  ]
}

describe("model bindings against a fake OpenAI-compatible server", () => {
  let fake: FakeProvider
  let server: ServerProcess
  let models: string
  beforeAll(async () => {
    ensureBuilt()
    fake = await FakeProvider.start((req) => {
      const last = req.body?.messages?.at(-1)
      // After the tool's result, a text answer; before it, the tool call.
      return last?.role === "tool" ? { steps: openAiFinishing("stop", "The tool slept.") } : toolCallAnswer
    })
    models = JSON.stringify({ fast: { provider: "openai-chat", model: "gpt-test", base_url: `${fake.url}/v1`, api_key_env: "E2E_MODEL_KEY" } })
    server = await startServer({ env: { BRAIN_MODELS: models, E2E_MODEL_KEY: KEY } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
    await fake?.close()
  })

  it("a tool turn talks to the bound model once per call, streams deltas live, records the complete results, and leaks the key nowhere", async () => {
    expect(server.output).toContain("model bindings: fast (openai-chat gpt-test)")
    const unknown = await request(server.baseUrl, "/v1/sessions", { json: { model: "slow" } })
    expect(unknown.status).toBe(400)
    expect(unknown.body.message).toContain('"fast"')

    const created = await request(server.baseUrl, "/v1/sessions", { json: { model: "fast", tools: [{ name: "slow" }] } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id
    const live = await openSse(server.url(`/v1/sessions/${id}/events?after=0`))
    await live.until("the catch-up", () => live.frames.some((f) => f.event === "session_creation_ended"))
    const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "sleep a little" } } })
    expect(sent.status, sent.text).toBe(200)
    expect(sent.body.turn).toMatchObject({ status: "ended", result: { text: "The tool slept." } })
    await live.until("the turn's end", () => live.frames.some((f) => f.event === "turn_ended"))
    live.close()

    // Two model calls, each sent once: the tool call, then the answer after the tool's result.
    expect(fake.requests).toHaveLength(2)
    expect(fake.requests[0]!.path).toBe("/v1/chat/completions")
    expect(fake.requests[0]!.headers.authorization).toBe(`Bearer ${KEY}`)
    expect(fake.requests[0]!.body).toMatchObject({ model: "gpt-test", stream: true, tools: [{ type: "function", function: { name: "slow" } }] })
    expect(fake.requests[1]!.body.messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: "call_1" })

    const deltas = live.frames.filter((f) => f.event === "model_delta").map((f) => f.json)
    expect(deltas.filter((d) => d.type === "tool_call").map((d) => d.input_delta).join("")).toBe("{\"ms\": 10}")
    expect(deltas.filter((d) => d.type === "text").map((d) => d.text).join("")).toBe("The tool slept.")
    const ended = live.frames.filter((f) => f.event === "model_call_ended").map((f) => f.json.data.result)
    expect(ended[0]).toMatchObject({ tool_calls: [{ id: "call_1", name: "slow", input: { ms: 10 } }], stop_reason: "tool_calls", usage: { input_tokens: 30, output_tokens: 12 } })
    expect(ended[1]).toMatchObject({ text: "The tool slept.", stop_reason: "end" })

    // The key is nowhere Brain writes or answers: data directory, output, error bodies, OpenAPI.
    const openapi = await request(server.baseUrl, "/openapi.json")
    const leaks = [
      ...filesUnder(server.dataDir).filter((f) => fs.readFileSync(f).includes(KEY)),
      ...(server.output.includes(KEY) ? ["the server's output"] : []),
      ...(openapi.text.includes(KEY) ? ["/openapi.json"] : []),
      ...(unknown.text.includes(KEY) ? ["an error body"] : [])
    ]
    expect(leaks).toEqual([])
  }, 60_000)

  it("a malformed BRAIN_MODELS refuses the start naming the setting once, the file, the field and the reason", async () => {
    const file = path.join(server.dataDir, "..", `models-${process.pid}.json`)
    fs.writeFileSync(file, JSON.stringify({ bad: { provider: "openai-chat", model: "m", api_key: KEY } }))
    const refused = new ServerProcess({ entry: "product", env: { BRAIN_MODELS: file } })
    try {
      const r = await refused.spawn()
      expect(r.listening).toBe(false)
      const said = refused.output.split("\n").filter((l) => l.includes("bad.api_key"))
      expect(said, refused.output).toHaveLength(1)
      expect(said[0], refused.output).toContain(`BRAIN_MODELS: ${file}: bad.api_key: unexpected field`)
      expect(said[0]!.match(/BRAIN_MODELS/g), refused.output).toHaveLength(1)
      expect(refused.output).not.toContain(KEY)
    } finally {
      await refused.dispose()
      fs.rmSync(file, { force: true })
    }
  }, 60_000)

  it("brain serve refuses unusable BRAIN_MODELS or BRAIN_ENVIRONMENTS before it creates the data directory", async () => {
    const parent = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bindings-refused-"))
    try {
      for (const setting of ["BRAIN_MODELS", "BRAIN_ENVIRONMENTS"]) {
        const dataDir = path.join(parent, setting, "new")
        const refused = new ServerProcess({ entry: "product", dataDir, env: { [setting]: "{not json" } })
        try {
          const r = await refused.spawn()
          expect(r.listening, refused.output).toBe(false)
          if (!r.listening) expect(r.exited.code, refused.output).toBe(1)
          expect(refused.output).toContain(setting)
          expect(fs.existsSync(dataDir), `${setting}: the data directory was created\n${refused.output}`).toBe(false)
        } finally {
          await refused.dispose()
        }
      }
    } finally {
      fs.rmSync(parent, { recursive: true, force: true })
    }
  }, 60_000)

  it("brain serve refuses to start on a base_url holding credentials, a query or a fragment, and on a key that is empty or holds a line break: one line naming the binding and the setting (once), never the value", async () => {
    const cases: Array<{ readonly binding: Record<string, unknown>; readonly key?: string; readonly says: string }> = [
      { binding: { base_url: `http://user:${KEY}@127.0.0.1:1/v1` }, says: "gw.base_url: must not hold credentials" },
      { binding: { base_url: `http://127.0.0.1:1/openai/deployments/gpt4?api-version=${KEY}` }, says: "gw.base_url: must have no query or fragment" },
      { binding: { base_url: `http://127.0.0.1:1/v1#${KEY}` }, says: "gw.base_url: must have no query or fragment" },
      { binding: { api_key_env: "E2E_BAD_KEY" }, key: "", says: "gw.api_key_env: the environment variable E2E_BAD_KEY is empty" },
      { binding: { api_key_env: "E2E_BAD_KEY" }, key: `${KEY}\r\nX-Injected: 1`, says: "gw.api_key_env: the environment variable E2E_BAD_KEY holds a line break" }
    ]
    await Promise.all(cases.map(async ({ binding, key, says }) => {
      const models = JSON.stringify({ gw: { provider: "openai-chat", model: "m", ...binding } })
      const refused = new ServerProcess({ entry: "product", env: { BRAIN_MODELS: models, ...(key !== undefined ? { E2E_BAD_KEY: key } : {}) } })
      try {
        const r = await refused.spawn()
        expect(r.listening, refused.output).toBe(false)
        if (!r.listening) expect(r.exited.code, refused.output).toBe(1)
        const said = refused.output.split("\n").filter((l) => l.includes("gw."))
        expect(said, refused.output).toHaveLength(1)
        expect(said[0], refused.output).toContain(`BRAIN_MODELS (inline JSON): ${says}`)
        expect(said[0]!.match(/BRAIN_MODELS/g), said[0]).toHaveLength(1)
        expect(refused.output).not.toContain(KEY)
        expect(refused.output).not.toMatch(/FiberFailure|\n\s+at /)
      } finally {
        await refused.dispose()
      }
    }))
  }, 60_000)
})

describe("a binding whose key is a placeholder shorter than MIN_REDACTED_KEY_CHARS (a local server that takes any key)", () => {
  it("the server says once at start that the binding's key is not redacted, naming the binding, and the live deltas, the answer and the journaled usage come back as the provider sent them", async () => {
    const words = "kind folk keep talking"
    const fake = await FakeProvider.start(() => ({ steps: openAiFinishing("stop", words) }))
    const models = JSON.stringify({ fake: { provider: "openai-chat", model: "m", base_url: `${fake.url}/v1`, api_key_env: "E2E_SHORT_KEY" } })
    const server = await startServer({ env: { BRAIN_MODELS: models, E2E_SHORT_KEY: "k" } })
    try {
      const said = server.output.split("\n").filter((l) => l.includes("not redacted"))
      expect(said, server.output).toHaveLength(1)
      expect(said[0]).toContain("model binding fake: its key is shorter than 16 characters")
      const created = await request(server.baseUrl, "/v1/sessions", { json: { model: "fake" } })
      expect(created.status, created.text).toBe(201)
      const id = created.body.session_id
      const live = await openSse(server.url(`/v1/sessions/${id}/events?after=0`))
      await live.until("the catch-up", () => live.frames.some((f) => f.event === "session_creation_ended"))
      const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "talk" } } })
      expect(sent.status, sent.text).toBe(200)
      expect(sent.body.turn).toMatchObject({ status: "ended", result: { text: words } })
      await live.until("the turn's end", () => live.frames.some((f) => f.event === "turn_ended"))
      live.close()
      const deltas = live.frames.filter((f) => f.event === "model_delta").map((f) => f.json)
      expect(deltas.filter((d) => d.type === "text").map((d) => d.text).join("")).toBe(words)
      const ended = live.frames.filter((f) => f.event === "model_call_ended").map((f) => f.json.data.result)
      expect(ended).toMatchObject([{ text: words, usage: { input_tokens: 5, output_tokens: 3 } }])
      const mangled = filesUnder(server.dataDir).filter((f) => fs.readFileSync(f).includes("<redacted>"))
      expect(mangled).toEqual([])
      expect(server.output).not.toContain("<redacted>")
    } finally {
      await server.dispose()
      await fake.close()
    }
  }, 60_000)
})

/** Anthropic's extended thinking with tools: a thinking and a redacted_thinking block, then a call of `slow`. */
const thinkingToolCall: Script = {
  steps: [
    Anthropic.messageStart("msg_01Think"),
    Anthropic.event("content_block_start", { index: 0, content_block: { type: "thinking", thinking: "", signature: "" } }),
    Anthropic.event("content_block_delta", { index: 0, delta: { type: "thinking_delta", thinking: "A short sleep " } }),
    Anthropic.event("content_block_delta", { index: 0, delta: { type: "thinking_delta", thinking: "will do." } }),
    Anthropic.event("content_block_delta", { index: 0, delta: { type: "signature_delta", signature: "EqQBCgIYAhIMsig" } }),
    Anthropic.blockStop(0),
    Anthropic.event("content_block_start", { index: 1, content_block: { type: "redacted_thinking", data: "EmwKAhgBEgyRedacted" } }),
    Anthropic.blockStop(1),
    Anthropic.toolStart(2, "toolu_01Slow", "slow"),
    Anthropic.jsonDelta(2, "{\"ms\": 10}"),
    Anthropic.blockStop(2),
    Anthropic.messageDelta("tool_use"),
    Anthropic.messageStop
  ]
}

describe("extended thinking with tools against a fake Anthropic server", () => {
  it("the thinking blocks of a tool-calling answer go back unchanged, first in the assistant's turn, on the next call (Anthropic refuses the call without them)", async () => {
    ensureBuilt()
    const fake = await FakeProvider.start((req) => {
      const messages: Array<{ role: string; content: Array<Record<string, unknown>> }> = req.body?.messages ?? []
      const last = messages.at(-1)
      if (!last?.content.some((b) => b.type === "tool_result")) return { steps: thinkingToolCall.steps }
      // As Anthropic does with thinking enabled: the assistant turn before the results must start
      // with its thinking blocks, unchanged.
      const assistant = messages.at(-2)
      const kept = JSON.stringify(assistant?.content.slice(0, 2)) === JSON.stringify([
        { type: "thinking", thinking: "A short sleep will do.", signature: "EqQBCgIYAhIMsig" },
        { type: "redacted_thinking", data: "EmwKAhgBEgyRedacted" }
      ])
      return kept
        ? { steps: Anthropic.afterToolResults }
        : { status: 400, steps: [Anthropic.errorBody("invalid_request_error", "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`.")] }
    })
    const models = JSON.stringify({
      claude: {
        provider: "anthropic",
        model: Anthropic.MODEL,
        base_url: fake.url,
        api_key_env: "E2E_MODEL_KEY",
        options: { max_tokens: 2048, thinking: { type: "enabled", budget_tokens: 1024 } }
      }
    })
    const server = await startServer({ env: { BRAIN_MODELS: models, E2E_MODEL_KEY: KEY } })
    try {
      const created = await request(server.baseUrl, "/v1/sessions", { json: { model: "claude", tools: [{ name: "slow" }] } })
      expect(created.status, created.text).toBe(201)
      const id = created.body.session_id
      const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "sleep a little" } } })
      expect(sent.status, sent.text).toBe(200)
      expect(sent.body.turn, JSON.stringify(sent.body.turn)).toMatchObject({ status: "ended", result: { text: "Sunny and 21 °C; it is 14:05 in Paris." } })
      expect(fake.requests).toHaveLength(2)
      expect(fake.requests[0]!.body).toMatchObject({ thinking: { type: "enabled", budget_tokens: 1024 } })
      // The transcript keeps them too: the assistant's content starts with its reasoning.
      const transcript = (await request(server.baseUrl, `/v1/sessions/${id}/transcript`)).body.messages
      expect(transcript[1]).toMatchObject({
        role: "assistant",
        content: [{ type: "thinking", signature: "EqQBCgIYAhIMsig" }, { type: "redacted_thinking" }],
        tool_calls: [{ id: "toolu_01Slow", name: "slow" }]
      })
    } finally {
      await server.dispose()
      await fake.close()
    }
  }, 60_000)
})

describe("kill -9 in the middle of a streamed answer", () => {
  it("after the restart the call is recorded failed and ambiguous, and the provider counted exactly one request", async () => {
    ensureBuilt()
    let reached: () => void = () => {}
    const midway = new Promise<void>((resolve) => (reached = resolve))
    const fake = await FakeProvider.start(() => {
      setTimeout(reached, 100)
      return { steps: [openAi.delta({ role: "assistant", content: "" }), openAi.delta({ content: "half an ans" }), { stall: true }] }
    })
    const models = JSON.stringify({ fast: { provider: "openai-chat", model: "gpt-test", base_url: `${fake.url}/v1` } })
    const server = await startServer({ env: { BRAIN_MODELS: models } })
    try {
      const id = (await request(server.baseUrl, "/v1/sessions", { json: { model: "fast" } })).body.session_id
      const submitted = await request(server.baseUrl, `/v1/sessions/${id}/messages`, {
        json: { input: { message: "hello" } },
        headers: { prefer: "respond-async" }
      })
      expect(submitted.status).toBe(202)
      await midway
      await server.kill()
      await server.start()
      const events = await eventually("the recovered turn", async () => {
        const page = await request(server.baseUrl, `/v1/sessions/${id}/events?after=0`)
        return page.body.events.some((e: any) => e.kind === "turn_failed") ? page.body.events : undefined
      })
      const failed = events.find((e: any) => e.kind === "model_call_failed")
      expect(failed.data.failure).toMatchObject({ code: "interrupted", ambiguous: true })
      expect(events.filter((e: any) => e.kind === "model_call_ended")).toHaveLength(0)
      expect(fake.requests).toHaveLength(1)
    } finally {
      await server.dispose()
      await fake.close()
    }
  }, 60_000)
})
