/**
 * What a provider cannot carry is refused before anything is sent (`model_rejected`, neither
 * ambiguous nor retryable), and every provider says where in the same words of `details`: the
 * message (`message_index`, `role`), the part (`part_index`, `part_type`), the tool call
 * (`tool_call_index`) or the tool (`tool_index`, `tool`). The bodies are built by the pure request
 * functions, so nothing here talks to a server.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import type { ModelRequest } from "../../../src/domain/Model.js"
import type { RecordedBinding } from "../../../src/domain/ModelBinding.js"
import { requestBody as anthropicBody } from "../../../src/layers/models/anthropic/Request.js"
import { chatRequestBody } from "../../../src/layers/models/openaiChat/ChatRequest.js"
import { requestBody as responsesBody } from "../../../src/layers/models/openaiResponses/Request.js"
import type { ProviderCall } from "../../../src/layers/models/Provider.js"
import { ModelFailed } from "../../../src/services/Models.js"

const call = (provider: RecordedBinding["provider"], request: ModelRequest): ProviderCall => ({
  binding: { name: "m", provider, model: "some-model", base_url: "http://unused.invalid" },
  apiKey: undefined,
  request,
  onDelta: () => undefined,
  limits: { stallMs: 0, maxOutputBytes: 0 }
})

/** The refusal each provider makes of `request`, or undefined when it would send it. */
const refusals = (request: ModelRequest): Record<string, ModelFailed | undefined> => {
  const anthropic = anthropicBody(call("anthropic", request))
  const chat = chatRequestBody(call("openai-chat", request))
  const responses = responsesBody(call("openai-responses", request))
  return {
    anthropic: anthropic instanceof ModelFailed ? anthropic : undefined,
    "openai-chat": Either.isLeft(chat) ? chat.left : undefined,
    "openai-responses": Either.isLeft(responses) ? responses.left : undefined
  }
}

const refusedBefore = { code: "model_rejected", ambiguous: false, retryable: false }

describe("refusals before sending, across providers", () => {
  it("an audio or file part in a user message is refused by every provider with the same details naming the message and the part", () => {
    for (const part of [{ type: "audio", data: "AAAA", mime_type: "audio/wav" }, { type: "file", url: "https://example.com/a.pdf" }]) {
      const request: ModelRequest = {
        messages: [
          { role: "user", content: "earlier" },
          { role: "assistant", content: "ok" },
          { role: "user", content: [{ type: "text", text: "listen" }, part] }
        ]
      }
      for (const [provider, refused] of Object.entries(refusals(request))) {
        expect(refused, `${provider} ${part.type}`).toBeInstanceOf(ModelFailed)
        expect(refused, `${provider} ${part.type}`).toMatchObject(refusedBefore)
        expect(refused!.details, `${provider} ${part.type}`).toEqual({ message_index: 2, role: "user", part_index: 1, part_type: part.type })
        expect(refused!.message, provider).toContain(`"${part.type}"`)
      }
    }
  })

  it("an image in an assistant message and an image with neither url nor data are refused naming the part, by every provider", () => {
    const cases: Array<[ModelRequest, object]> = [
      [
        { messages: [{ role: "user", content: "a" }, { role: "assistant", content: [{ type: "image", url: "https://example.com/a.png" }] }] },
        { message_index: 1, role: "assistant", part_index: 0, part_type: "image" }
      ],
      [
        { messages: [{ role: "user", content: [{ type: "text", text: "see" }, { type: "image", mime_type: "image/png" }] }] },
        { message_index: 0, role: "user", part_index: 1, part_type: "image" }
      ]
    ]
    for (const [request, details] of cases) {
      for (const [provider, refused] of Object.entries(refusals(request))) {
        expect(refused, provider).toMatchObject(refusedBefore)
        expect(refused!.details, provider).toEqual(details)
      }
    }
  })

  it("a tool result without its tool_call_id is refused naming the message, by every provider", () => {
    const request: ModelRequest = { messages: [{ role: "user", content: "hi" }, { role: "tool", content: "{}" }] }
    for (const [provider, refused] of Object.entries(refusals(request))) {
      expect(refused, provider).toMatchObject(refusedBefore)
      expect(refused!.details, provider).toEqual({ message_index: 1, role: "tool" })
    }
  })

  it("Anthropic's own refusals name their place in details too: a tool call's input, a tool's schema, an empty user turn, a request with no conversation", () => {
    const cases: Array<[ModelRequest, object]> = [
      [{ messages: [{ role: "assistant", content: "", tool_calls: [{ id: "t", name: "n", input: [1] }] }] }, { message_index: 0, role: "assistant", tool_call_index: 0 }],
      [{ messages: [{ role: "user", content: "a" }], tools: [{ name: "bad", input_schema: true }] }, { tool_index: 0, tool: "bad" }],
      [{ messages: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: " " }] }, { message_index: 2, role: "user" }],
      [{ messages: [{ role: "user", content: [{ type: "image", url: "data:image/bmp;base64,Qk0=" }] }] }, { message_index: 0, role: "user", part_index: 0, part_type: "image" }],
      [{ messages: [{ role: "system", content: "note" }] }, { message_count: 1 }]
    ]
    for (const [request, details] of cases) {
      const refused = refusals(request).anthropic
      expect(refused, JSON.stringify(request)).toMatchObject(refusedBefore)
      expect(refused!.details, JSON.stringify(request)).toEqual(details)
    }
  })

  it("the OpenAI Responses API's refusal of a tool whose schema is not an object names the tool", () => {
    const refused = refusals({ messages: [{ role: "user", content: "a" }], tools: [{ name: "bad", input_schema: true }] })["openai-responses"]
    expect(refused).toMatchObject(refusedBefore)
    expect(refused!.details).toEqual({ tool_index: 0, tool: "bad" })
  })
})
