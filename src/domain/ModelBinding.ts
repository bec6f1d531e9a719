/**
 * Named model bindings (BRAIN_MODELS): a name a create body gives as `model`, and what it stands
 * for. Only these non-secret fields are ever recorded (in `session_creation_started`); the API key
 * lives in the environment variable `api_key_env` names and is read by the server, never stored.
 *
 * Where a binding sends is its provider at its base URL (the provider's public endpoint when it
 * names none). A session keeps sending where it recorded; the key is the binding's current one,
 * and only while the binding still sends to that same place (`endpointChange`), so a key never
 * reaches a server, or a provider, it was not configured for.
 */
import { Either, ParseResult, Schema } from "effect"
import { Json } from "./Messages.js"
import { BaseUrl, comparableBaseUrl } from "./BaseUrl.js"
import { MIN_REDACTED_KEY_CHARS } from "./Limits.js"

export const ModelProvider = Schema.Literal("openai-responses", "openai-chat", "anthropic")
export type ModelProvider = typeof ModelProvider.Type

/** A binding name: what a create body says as `model`. */
export const BindingName = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/))

/**
 * A model binding's base URL (BaseUrl.ts): no credentials (undici drops them, and they would be
 * recorded with the session), held as the URL parser writes it, so that a binding that starts is one
 * a session can be created with (`RecordedBinding`); `endpointChange` compares URLs as parsed.
 */
const ModelBaseUrl = BaseUrl("the key in api_key_env")

export const ModelBinding = Schema.Struct({
  provider: ModelProvider,
  /** The provider's model id (`gpt-4.1`, `claude-sonnet-4-5`, `llama3.1`, …). */
  model: Schema.String.pipe(Schema.minLength(1)),
  /** The API's base URL; the provider's public endpoint when absent. */
  base_url: Schema.optional(ModelBaseUrl),
  /** The environment variable holding the API key (never the key itself). */
  api_key_env: Schema.optional(Schema.String.pipe(Schema.pattern(/^[A-Za-z_][A-Za-z0-9_]*$/))),
  /** Request options sent with every call (temperature, max tokens, …), merged under a call's own. */
  options: Schema.optional(Schema.Record({ key: Schema.String, value: Json }))
}).annotations({ parseOptions: { onExcessProperty: "error" } })
export type ModelBinding = typeof ModelBinding.Type

/**
 * What a session records of its binding at creation: the name and the fields it stood for. Its
 * `base_url` is read as any earlier server accepted it (http or https, no whitespace), so that a
 * session recorded before credentials, queries and fragments were refused still opens; where such
 * a session may send is judged at each call (`endpointChange`).
 */
export const RecordedBinding = Schema.Struct({
  name: Schema.String,
  ...ModelBinding.fields,
  base_url: Schema.optional(Schema.String.pipe(Schema.pattern(/^https?:\/\/[^\s]+$/)))
})
export type RecordedBinding = typeof RecordedBinding.Type

const decodeRecorded = Schema.decodeUnknownEither(RecordedBinding, { onExcessProperty: "error" })

/**
 * The field of a binding, as a session would record it, that a session's record cannot hold
 * (`base_url`, say), or undefined. A binding loaded at start always can be recorded; this keeps a
 * create from answering with the record's schema if one ever cannot.
 */
export const unrecordableField = (binding: RecordedBinding): string | undefined => {
  const decoded = decodeRecorded(binding)
  if (Either.isRight(decoded)) return undefined
  const [first] = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
  return first !== undefined && first.path.length > 0 ? first.path.map(String).join(".") : "binding"
}

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

/** Where a binding that names no `base_url` sends: the provider's public endpoint. */
export const DEFAULT_BASE_URLS: Readonly<Record<ModelProvider, string>> = {
  "openai-responses": "https://api.openai.com/v1",
  "openai-chat": "https://api.openai.com/v1",
  anthropic: "https://api.anthropic.com"
}

/**
 * `path` under `base`: the base URL's path without its trailing slashes, then `path`. A query a
 * base URL recorded before they were refused stays a query, after the path.
 */
export const endpointUrl = (base: string, path: string): string => {
  if (!URL.canParse(base)) return `${base.replace(/\/+$/, "")}${path}`
  const url = new URL(base)
  url.pathname = `${url.pathname.replace(/\/+$/, "")}${path}`
  return url.href
}

/** A base URL as said in a message: origin and path only, never credentials, a query or a fragment. */
const shown = (binding: Pick<ModelBinding, "provider" | "base_url">): string => {
  if (binding.base_url === undefined) return `${DEFAULT_BASE_URLS[binding.provider]} (the provider's default)`
  if (!URL.canParse(binding.base_url)) return "an unreadable URL"
  const url = new URL(binding.base_url)
  const where = `${url.origin}${url.pathname.replace(/\/+$/, "")}`
  return url.username !== "" || url.password !== "" || url.search !== "" || url.hash !== "" || /[?#]/.test(binding.base_url)
    ? `${where} (with credentials, a query or a fragment)`
    : where
}

/**
 * How `now` sends elsewhere than `recorded`, in words (never a credential): another provider
 * (another wire format, the key in another header), another base URL (the provider's default
 * counting as written out). Undefined when both send to the same place; the model, the options
 * and the key's variable are not where a binding sends.
 */
export const endpointChange = (
  recorded: Pick<ModelBinding, "provider" | "base_url">,
  now: Pick<ModelBinding, "provider" | "base_url">
): string | undefined => {
  const baseOf = (b: Pick<ModelBinding, "provider" | "base_url">) => comparableBaseUrl(b.base_url ?? DEFAULT_BASE_URLS[b.provider])
  const provider = recorded.provider !== now.provider
  const base = baseOf(recorded) !== baseOf(now)
  if (provider && base) {
    return `its provider changed from ${recorded.provider} to ${now.provider} and its base_url from ${shown(recorded)} to ${shown(now)}`
  }
  if (provider) return `its provider changed from ${recorded.provider} to ${now.provider}`
  if (base) return `its base_url changed from ${shown(recorded)} to ${shown(now)}`
  return undefined
}

/**
 * Why the value of `variable` cannot be a key, or undefined: an empty key sends an empty
 * credential, and a line break (or another control character) cannot be carried in a header, so
 * every call would fail as if the network had.
 */
export const keyRefusal = (variable: string, value: string): string | undefined => {
  if (value.length === 0) return `the environment variable ${variable} is empty`
  if (!/^[\t\x20-\x7e\x80-\xff]*$/.test(value)) {
    return `the environment variable ${variable} holds a line break or another character a header cannot carry`
  }
  return undefined
}

/**
 * Whether a model key is redacted from what Brain records and shows: one of MIN_REDACTED_KEY_CHARS
 * characters or more, wherever it occurs; a shorter one (a placeholder for a server that takes any
 * key) is not, since replacing it would mangle ordinary text (docs/models.md).
 */
export const keyRedacted = (key: string): boolean => key.length >= MIN_REDACTED_KEY_CHARS
