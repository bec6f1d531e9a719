/**
 * Where a model binding sends its calls (docs/models.md, "Bindings"): the API's path under the
 * base URL, the provider's public endpoint when none is given.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import { SessionConfiguration } from "../../src/domain/Configuration.js"
import { endpointUrl, ModelBinding, RecordedBinding } from "../../src/domain/ModelBinding.js"

describe("model binding endpoints", () => {
  it("a request URL is the base URL's path joined with the API's path, whatever the trailing slashes; a query stays after the path", () => {
    expect(endpointUrl("https://api.openai.com/v1", "/chat/completions")).toBe("https://api.openai.com/v1/chat/completions")
    expect(endpointUrl("http://127.0.0.1:11434/v1//", "/chat/completions")).toBe("http://127.0.0.1:11434/v1/chat/completions")
    expect(endpointUrl("https://api.anthropic.com", "/v1/messages")).toBe("https://api.anthropic.com/v1/messages")
    expect(endpointUrl("https://api.anthropic.com/", "/v1/messages")).toBe("https://api.anthropic.com/v1/messages")
    expect(endpointUrl("http://h/openai/deployments/gpt4?api-version=2024-10-21", "/chat/completions")).toBe(
      "http://h/openai/deployments/gpt4/chat/completions?api-version=2024-10-21"
    )
    expect(endpointUrl("http://h/?token=x", "/v1/messages")).toBe("http://h/v1/messages?token=x")
  })

  it("a binding recorded before credentials, queries and fragments were refused at start still decodes from its session's journal; a new binding cannot hold them", () => {
    for (const base_url of ["http://user:hunter2@h/v1", "http://h/openai/deployments/gpt4?api-version=2024-10-21", "http://h/v1#x"]) {
      const recorded = { name: "chat", provider: "openai-chat", model: "m", base_url }
      expect(Either.isRight(Schema.decodeUnknownEither(RecordedBinding)(recorded)), base_url).toBe(true)
      const configuration = Schema.decodeUnknownEither(SessionConfiguration)({ agentloop: "official", model: "chat", model_binding: recorded })
      expect(Either.isRight(configuration), base_url).toBe(true)
      expect(Either.isRight(Schema.decodeUnknownEither(ModelBinding)({ provider: "openai-chat", model: "m", base_url })), base_url).toBe(false)
    }
    expect(Either.isRight(Schema.decodeUnknownEither(RecordedBinding)({ name: "chat", provider: "openai-chat", model: "m", base_url: "not a url" }))).toBe(false)
  })
})
