/**
 * The `openai-responses` provider: one streamed `POST {base_url}/responses` (OpenAI API
 * reference, "Responses → Create a model response", `stream: true`), also spoken by compatible
 * servers (Ollama, vLLM, gateways) at their own base URL. Rules:
 *
 * - The body is built from the request and the binding alone (openaiResponses/Request.ts); a part
 *   it cannot carry refuses the call before anything is sent.
 * - Sent once through models/Http.ts (never retried; status, cut, stall and size failures are
 *   named there); the key travels only as a Redacted `Authorization: Bearer` header, and no
 *   header at all is sent without one (a local server).
 * - The events are decoded with Brain's own narrow Schemas and folded into the result, deltas
 *   passed on as they arrive (openaiResponses/Events.ts, openaiResponses/Fold.ts).
 *
 * Why not @effect/ai-openai's OpenAiClient.createResponseStream: it skips any event it cannot
 * decode, so a garbage chunk vanishes, and a `response.completed` its strict generated Response
 * schema refuses (usage without `*_tokens_details`, no `tools` or `metadata`, an error code not
 * in its list: all things a compatible server may send) silently drops the finished answer; it
 * ends without a word when the final event never comes; it reads an error body without a bound;
 * a `retry:` line ends its stream with an error it does not map; and loading it costs ~300 ms and
 * ~60 MB (measured on Node 20). Its generated types still check the request's wire shapes at
 * compile time.
 */
import { Effect, Redacted } from "effect"
import { DEFAULT_BASE_URLS, endpointUrl } from "../../domain/ModelBinding.js"
import { streamedPost } from "./Http.js"
import { makeFold } from "./openaiResponses/Fold.js"
import { requestBody } from "./openaiResponses/Request.js"
import { type Provider, withCheckedCalls } from "./Provider.js"

export const DEFAULT_BASE_URL = DEFAULT_BASE_URLS["openai-responses"]

/** `{base_url}/responses`, whether or not the base URL ends with a slash. */
export const responsesUrl = (baseUrl: string | undefined): string => endpointUrl(baseUrl ?? DEFAULT_BASE_URL, "/responses")

/** How failures name the provider: OpenAI itself, or the host of a compatible server. */
const providerLabel = (baseUrl: string | undefined) => {
  if (baseUrl === undefined) return "OpenAI"
  const host = URL.canParse(baseUrl) ? new URL(baseUrl).host : undefined
  return `the Responses API at ${host ?? "its base URL"}`
}

export const openAiResponses: Provider = (call) =>
  Effect.gen(function*() {
    const body = yield* requestBody(call)
    const provider = providerLabel(call.binding.base_url)
    const fold = makeFold(provider, call.onDelta)
    return yield* streamedPost({
      url: responsesUrl(call.binding.base_url),
      headers: { "content-type": "application/json" },
      ...(call.apiKey !== undefined
        ? { secretHeaders: { authorization: Redacted.make(`Bearer ${Redacted.value(call.apiKey)}`) } }
        : {}),
      body,
      limits: call.limits,
      provider,
      onEvent: fold.onEvent,
      finish: withCheckedCalls(provider, fold.result)
    })
  })
