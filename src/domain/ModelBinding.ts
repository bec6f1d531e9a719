/**
 * Named model bindings (BRAIN_MODELS): a name a create body gives as `model`, and what it stands
 * for. Only these non-secret fields are ever recorded (in `session_creation_started`); the API key
 * lives in the environment variable `api_key_env` names and is read by the server, never stored.
 */
import { Schema } from "effect"
import { Json } from "./Messages.js"

export const ModelProvider = Schema.Literal("openai-responses", "openai-chat", "anthropic")
export type ModelProvider = typeof ModelProvider.Type

/** A binding name: what a create body says as `model`. */
export const BindingName = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/))

export const ModelBinding = Schema.Struct({
  provider: ModelProvider,
  /** The provider's model id (`gpt-4.1`, `claude-sonnet-4-5`, `llama3.1`, …). */
  model: Schema.String.pipe(Schema.minLength(1)),
  /** The API's base URL; the provider's public endpoint when absent. */
  base_url: Schema.optional(Schema.String.pipe(Schema.pattern(/^https?:\/\/[^\s]+$/))),
  /** The environment variable holding the API key (never the key itself). */
  api_key_env: Schema.optional(Schema.String.pipe(Schema.pattern(/^[A-Za-z_][A-Za-z0-9_]*$/))),
  /** Request options sent with every call (temperature, max tokens, …), merged under a call's own. */
  options: Schema.optional(Schema.Record({ key: Schema.String, value: Json }))
}).annotations({ parseOptions: { onExcessProperty: "error" } })
export type ModelBinding = typeof ModelBinding.Type

/** What a session records of its binding at creation: the name and the fields it stood for. */
export const RecordedBinding = Schema.Struct({
  name: Schema.String,
  ...ModelBinding.fields
})
export type RecordedBinding = typeof RecordedBinding.Type

/** The public endpoints' hosts: a binding with no `base_url`, or one of these, talks to the provider itself. */
const PUBLIC_HOSTS: Readonly<Record<ModelProvider, string>> = {
  "openai-responses": "api.openai.com",
  "openai-chat": "api.openai.com",
  anthropic: "api.anthropic.com"
}

/**
 * The tool names the provider's own API takes, when the binding talks to it (no `base_url`, or its
 * public host): Anthropic's `^[a-zA-Z0-9_-]{1,128}$` (its Messages API's tool schema), OpenAI's
 * letters, digits, `_` and `-`, at most 64 (its function tools). Another server behind a
 * `base_url` (Ollama, vLLM, a gateway) has rules of its own: undefined, nothing is checked.
 */
export const toolNameRule = (binding: ModelBinding): { readonly pattern: RegExp; readonly says: string } | undefined => {
  if (binding.base_url !== undefined) {
    let host: string
    try {
      host = new URL(binding.base_url).hostname
    } catch {
      return undefined
    }
    if (host !== PUBLIC_HOSTS[binding.provider]) return undefined
  }
  return binding.provider === "anthropic"
    ? { pattern: /^[a-zA-Z0-9_-]{1,128}$/, says: "1 to 128 letters, digits, _ or -" }
    : { pattern: /^[a-zA-Z0-9_-]{1,64}$/, says: "1 to 64 letters, digits, _ or -" }
}
