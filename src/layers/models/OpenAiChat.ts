/**
 * The `openai-chat` provider: any server that speaks OpenAI's Chat Completions API with
 * streaming — OpenAI itself, Ollama (`http://localhost:11434/v1`), vLLM, LM Studio, gateways.
 *
 * One `POST {base_url}/chat/completions` (base_url defaults to `https://api.openai.com/v1`),
 * sent once through models/Http.ts, which names every transport failure. The key, when the
 * binding has one, travels only as `Authorization: Bearer …` in a secret header; a server that
 * needs none (a local Ollama) gets no authorization header at all. The body is built in
 * openaiChat/ChatRequest.ts (refusing parts it cannot carry before anything is sent) and the
 * stream is folded in openaiChat/ChatStream.ts.
 *
 * Written on models/Http.ts (one POST through undici): the Effect AI packages speak only OpenAI's Responses
 * API, and @effect/ai-openai's generated schemas have no chunk of a streamed chat completion.
 */
import { Effect, Redacted } from "effect"
import { streamedPost } from "./Http.js"
import { chatCompletionsUrl, chatRequestBody } from "./openaiChat/ChatRequest.js"
import { makeChatStream } from "./openaiChat/ChatStream.js"
import { type Provider, withCheckedCalls } from "./Provider.js"

export const openAiChat: Provider = Effect.fn("OpenAiChat.call")(function*(call) {
  const body = yield* chatRequestBody(call)
  const provider = `openai-chat "${call.binding.name}"`
  const stream = makeChatStream(provider, call.onDelta)
  const key = call.apiKey
  return yield* streamedPost({
    url: chatCompletionsUrl(call.binding.base_url),
    headers: { "content-type": "application/json" },
    ...(key !== undefined ? { secretHeaders: { authorization: Redacted.make(`Bearer ${Redacted.value(key)}`) } } : {}),
    body,
    limits: call.limits,
    provider,
    onEvent: stream.onEvent,
    finish: withCheckedCalls(provider, stream.finish)
  })
})
