/**
 * Where a model binding sends its calls (docs/models.md, "Bindings"): the provider at its base URL,
 * the provider's public endpoint when none is given. A session keeps what it recorded; its key is
 * the binding's current one only while the binding still sends to that same place.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import { SessionConfiguration } from "../../src/domain/Configuration.js"
import { MIN_REDACTED_KEY_CHARS } from "../../src/domain/Limits.js"
import { endpointChange, endpointUrl, keyRedacted, ModelBinding, RecordedBinding } from "../../src/domain/ModelBinding.js"

const bound = (provider: ModelBinding["provider"], base_url?: string): ModelBinding => ({ provider, model: "m", ...(base_url !== undefined ? { base_url } : {}) })
const chat = (base_url?: string) => bound("openai-chat", base_url)

describe("model binding endpoints", () => {
  it("the same provider at the same base URL is the same place: the default endpoint written out, a trailing slash, a host's case and a default port change nothing", () => {
    const same: Array<[ModelBinding, ModelBinding]> = [
      [chat(), chat()],
      [chat(), chat("https://api.openai.com/v1")],
      [chat("https://api.openai.com/v1/"), chat()],
      [chat("http://127.0.0.1:11434/v1"), chat("http://127.0.0.1:11434/v1/")],
      [chat("https://Gateway.Example.com:443/v1"), chat("https://gateway.example.com/v1")],
      [{ provider: "anthropic", model: "a" }, { provider: "anthropic", model: "b", base_url: "https://api.anthropic.com/" }],
      // What else a binding says (its model, its options, its key's variable) is the session's recorded choice, not where it sends.
      [chat("http://h/v1"), { ...chat("http://h/v1"), model: "other", api_key_env: "OTHER_KEY", options: { temperature: 1 } }]
    ]
    for (const [recorded, now] of same) expect(endpointChange(recorded, now), JSON.stringify([recorded, now])).toBeUndefined()
  })

  it("another provider or another base URL is elsewhere, and the change is said in words that name both sides without a credential or a query", () => {
    expect(endpointChange(chat("http://old.example/v1"), chat("http://new.example/v1"))).toBe(
      "its base_url changed from http://old.example/v1 to http://new.example/v1"
    )
    expect(endpointChange(chat(), chat("http://127.0.0.1:11434/v1"))).toBe(
      "its base_url changed from https://api.openai.com/v1 (the provider's default) to http://127.0.0.1:11434/v1"
    )
    expect(endpointChange(chat("http://h/v1"), chat("http://h/v2"))).toContain("base_url changed")
    expect(endpointChange(chat("http://h:8080/v1"), chat("http://h:8081/v1"))).toContain("base_url changed")
    expect(endpointChange(chat("http://h/v1"), chat("https://h/v1"))).toContain("base_url changed")
    // The same URL under another provider: another wire format, another header for the key.
    expect(endpointChange(chat("http://h/v1"), bound("anthropic", "http://h/v1"))).toBe(
      "its provider changed from openai-chat to anthropic"
    )
    expect(endpointChange(chat("http://h/v1"), bound("openai-responses", "http://h/v1"))).toBe(
      "its provider changed from openai-chat to openai-responses"
    )
    expect(endpointChange(chat(), bound("anthropic"))).toBe(
      "its provider changed from openai-chat to anthropic and its base_url from https://api.openai.com/v1 (the provider's default) to https://api.anthropic.com (the provider's default)"
    )
    // A base URL recorded before such URLs were refused at start: shown without its credential or query.
    const said = endpointChange(chat("http://user:hunter2@h/v1?token=hunter3#x"), chat("http://h/v1"))!
    expect(said).toBe("its base_url changed from http://h/v1 (with credentials, a query or a fragment) to http://h/v1")
    expect(said).not.toMatch(/hunter|user/)
    expect(endpointChange(chat("http://[unreadable"), chat("http://h/v1"))).toBe("its base_url changed from an unreadable URL to http://h/v1")
  })

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

describe("which model keys are redacted", () => {
  it("a key of MIN_REDACTED_KEY_CHARS characters or more is redacted (every real provider key is), a shorter placeholder is not", () => {
    expect(MIN_REDACTED_KEY_CHARS).toBeLessThanOrEqual(20)
    for (const key of ["sk-proj-0123456789abcdefghij", "sk-ant-api03-abcdefghij", "x".repeat(MIN_REDACTED_KEY_CHARS), "sk-no-key-required"]) expect(keyRedacted(key), key).toBe(true)
    for (const key of ["", "k", "x", "none", "EMPTY", "ollama", "not-needed", "x".repeat(MIN_REDACTED_KEY_CHARS - 1)]) expect(keyRedacted(key), key).toBe(false)
  })
})
