/**
 * A turn input's media end to end (DESIGN §5, docs/models.md "How Brain's messages map"): a real
 * server process with the official loop (the WebAssembly guest) and BRAIN_MODELS naming fake
 * OpenAI Chat and Anthropic servers on loopback.
 *
 * - Images reach the provider as its image parts, after the message's text, and the transcript
 *   keeps them.
 * - A part the provider cannot carry (audio) fails the call before anything is sent
 *   (`model_rejected`), and the refused message is not kept: the next turn goes through.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as Anthropic from "../fixtures/providers/anthropic.js"
import { openAiText } from "../fixtures/providers/openaiChat.js"
import { FakeProvider } from "../support/fakeProvider.js"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="
const BY_URL = { type: "image", url: "https://example.com/a.png" }
const INLINE = { type: "image", data: PNG, mime_type: "image/png" }
const AUDIO = { type: "audio", data: "UklGRg==", mime_type: "audio/wav" }

describe("a turn input's media through the official loop to a provider", () => {
  let openai: FakeProvider
  let anthropic: FakeProvider
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    openai = await FakeProvider.start(() => ({ steps: openAiText.steps }))
    anthropic = await FakeProvider.start(() => ({ steps: Anthropic.textAnswer }))
    const models = JSON.stringify({
      chat: { provider: "openai-chat", model: "gpt-test", base_url: `${openai.url}/v1`, api_key_env: "E2E_MODEL_KEY" },
      claude: { provider: "anthropic", model: Anthropic.MODEL, base_url: anthropic.url, api_key_env: "E2E_MODEL_KEY" }
    })
    server = await startServer({ env: { BRAIN_MODELS: models, E2E_MODEL_KEY: "sk-e2e-media" } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
    await openai?.close()
    await anthropic?.close()
  })

  const created = async (model: string) => {
    const r = await request(server.baseUrl, "/v1/sessions", { json: { model } })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }
  const send = async (id: string, input: unknown) => {
    const r = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input } })
    expect(r.status, r.text).toBe(200)
    return r.body.turn
  }
  const transcript = async (id: string) => (await request(server.baseUrl, `/v1/sessions/${id}/transcript`)).body.messages

  it("images reach OpenAI Chat as image_url parts after the message's text (a data URL for base64), and the transcript keeps them", async () => {
    const id = await created("chat")
    const from = openai.requests.length
    const turn = await send(id, { message: "what are these?", media: [BY_URL, INLINE] })
    expect(turn).toMatchObject({ status: "ended", result: { text: openAiText.text } })
    expect(openai.requests.slice(from).map((r) => r.body.messages)).toEqual([[
      {
        role: "user",
        content: [
          { type: "text", text: "what are these?" },
          { type: "image_url", image_url: { url: BY_URL.url } },
          { type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } }
        ]
      }
    ]])
    expect(await transcript(id)).toEqual([
      { role: "user", content: [{ type: "text", text: "what are these?" }, BY_URL, INLINE] },
      { role: "assistant", content: openAiText.text }
    ])
  }, 60_000)

  it("images reach Anthropic as image blocks after the message's text (a url source, a base64 source)", async () => {
    const id = await created("claude")
    const from = anthropic.requests.length
    const turn = await send(id, { message: "what are these?", media: [BY_URL, INLINE] })
    expect(turn).toMatchObject({ status: "ended", result: { text: "Hello, world!" } })
    expect(anthropic.requests.slice(from).map((r) => r.body.messages)).toEqual([[
      {
        role: "user",
        content: [
          { type: "text", text: "what are these?" },
          { type: "image", source: { type: "url", url: BY_URL.url } },
          { type: "image", source: { type: "base64", media_type: "image/png", data: PNG } }
        ]
      }
    ]])
  }, 60_000)

  for (const model of ["chat", "claude"]) {
    it(`an audio part fails the call before sending (model_rejected, naming the part), the refused message is not kept, and the next turn goes through: ${model}`, async () => {
      const fake = model === "chat" ? openai : anthropic
      const id = await created(model)
      const from = fake.requests.length
      const refused = await send(id, { message: "listen", media: [INLINE, AUDIO] })
      expect(refused).toMatchObject({ status: "failed", failure: { code: "model_rejected", ambiguous: false, retryable: false } })
      expect(refused.failure.message).toContain("audio")
      expect(fake.requests.length, "nothing was sent").toBe(from)
      const events = (await request(server.baseUrl, `/v1/sessions/${id}/events?after=0`)).body.events
      expect(events.find((e: any) => e.kind === "model_call_failed")?.data.failure).toMatchObject({ code: "model_rejected" })
      expect(await transcript(id)).toEqual([])

      const next = await send(id, { message: "hello" })
      expect(next.status).toBe("ended")
      // One request, the next turn's: the refused message is not in it (only Brain's note about the failed turn is).
      const sent = fake.requests.slice(from)
      expect(sent).toHaveLength(1)
      expect(sent[0]!.text).not.toContain(AUDIO.data)
      expect(sent[0]!.text).not.toContain("listen")
      expect(sent[0]!.body.messages.filter((m: any) => m.role === "user")).toHaveLength(1)
      expect(JSON.stringify(sent[0]!.body.messages.at(-1))).toContain("hello")
    }, 60_000)
  }
})
