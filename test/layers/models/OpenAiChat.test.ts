/**
 * The `openai-chat` provider (src/layers/models/OpenAiChat.ts) against a fake Chat Completions
 * server on loopback that streams chunks exactly as OpenAI and Ollama send them
 * (test/fixtures/providers/openaiChat.ts): the request checked against the documented shape, the
 * stream folded into the result with its deltas in order, and every failure typed by what is
 * known afterwards.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Either, Exit, Fiber, Redacted } from "effect"
import * as util from "node:util"
import type { ModelDelta, ModelRequest } from "../../../src/domain/Model.js"
import { MIN_REDACTED_KEY_CHARS } from "../../../src/domain/Limits.js"
import type { RecordedBinding } from "../../../src/domain/ModelBinding.js"
import { openAiChat } from "../../../src/layers/models/OpenAiChat.js"
import { chatCompletionsUrl } from "../../../src/layers/models/openaiChat/ChatRequest.js"
import type { StreamLimits } from "../../../src/layers/models/Http.js"
import { FakeProvider, type Handler, type Script, sse } from "../../support/fakeProvider.js"
import { DONE, ollamaToolCalls, openAi, openAiFinishing, openAiParallelToolCalls, openAiText } from "../../fixtures/providers/openaiChat.js"

const KEY = "sk-test-5f2d0c1b9a8e7d6c"
const LIMITS: StreamLimits = { stallMs: 2_000, maxOutputBytes: 0 }
const ASK: ModelRequest = { system: "Answer briefly.", messages: [{ role: "user", content: "What is the capital of France?" }] }

interface Run {
  readonly request?: ModelRequest
  readonly binding?: Partial<RecordedBinding>
  readonly key?: string | undefined
  readonly limits?: StreamLimits
}

/** A fake server for the test's scope: closed when the test ends, however it ends. */
const fakeServer = (handler: Handler | Script) =>
  Effect.acquireRelease(
    Effect.promise(() => FakeProvider.start(typeof handler === "function" ? handler : () => handler)),
    (fake) => Effect.promise(() => fake.close())
  )

const bindingFor = (fake: FakeProvider, over: Partial<RecordedBinding> = {}): RecordedBinding => ({
  name: "gpt",
  provider: "openai-chat",
  model: "gpt-4.1",
  base_url: `${fake.url}/v1`,
  ...over
})

/** One call against the fake: its deltas and its result or failure. */
const call = (fake: FakeProvider, run: Run = {}) =>
  Effect.gen(function*() {
    const deltas: Array<ModelDelta> = []
    const key = "key" in run ? run.key : KEY
    const result = yield* Effect.either(openAiChat({
      binding: bindingFor(fake, run.binding),
      apiKey: key !== undefined ? Redacted.make(key) : undefined,
      request: run.request ?? ASK,
      onDelta: (d) => void deltas.push(d),
      limits: run.limits ?? LIMITS
    }))
    return { deltas, result }
  }).pipe(Effect.provide(NodeHttpClient.dispatcherLayer))

const scripted = (steps: Script["steps"], run: Run = {}) =>
  Effect.gen(function*() {
    const fake = yield* fakeServer({ steps })
    return { fake, ...(yield* call(fake, run)) }
  })

const ok = <A, E>(r: Either.Either<A, E>): A => {
  if (Either.isLeft(r)) throw new Error(`expected a result, got ${util.inspect(r.left)}`)
  return r.right
}
const failure = <A, E>(r: Either.Either<A, E>): E => {
  if (Either.isRight(r)) throw new Error(`expected a failure, got ${util.inspect(r.right)}`)
  return r.left
}

const textOf = (deltas: ReadonlyArray<ModelDelta>) => deltas.flatMap((d) => (d.type === "text" ? [d.text] : [])).join("")
const argumentsOf = (deltas: ReadonlyArray<ModelDelta>, index: number) =>
  deltas.flatMap((d) => (d.type === "tool_call" && d.index === index ? [d.input_delta] : [])).join("")

describe("the openai-chat provider", () => {
  it.scopedLive("a text answer: the documented request is sent once, deltas arrive in order and join to the text, usage/id/model/finish come from the chunks", () =>
    Effect.gen(function*() {
      const { deltas, fake, result } = yield* scripted(openAiText.steps)
      expect(fake.requests).toHaveLength(1)
      const sent = fake.requests[0]!
      expect(sent.method).toBe("POST")
      expect(sent.path).toBe("/v1/chat/completions")
      expect(sent.headers["content-type"]).toBe("application/json")
      expect(sent.headers.authorization).toBe(`Bearer ${KEY}`)
      expect(sent.body).toEqual({
        model: "gpt-4.1",
        messages: [
          { role: "system", content: "Answer briefly." },
          { role: "user", content: "What is the capital of France?" }
        ],
        stream: true,
        stream_options: { include_usage: true }
      })
      expect(deltas.map((d) => d.type === "text" && d.text)).toEqual(["Paris", " is the", " capital", " of", " France."])
      expect(ok(result)).toEqual({
        text: openAiText.text,
        tool_calls: [],
        stop_reason: "end",
        usage: openAiText.usage,
        response_id: openAiText.response_id,
        model: openAiText.model,
        provider_stop_reason: "stop"
      })
      expect(textOf(deltas)).toBe(ok(result).text)
    }))

  it.scopedLive("a 103 Early Hints before the 200 is skipped: the answer after it is the call's result, and the request is sent once", () =>
    Effect.gen(function*() {
      const fake = yield* fakeServer({ informational: [103], steps: openAiText.steps })
      const { result } = yield* call(fake)
      expect(ok(result).text).toBe(openAiText.text)
      expect(fake.requests).toHaveLength(1)
    }))

  it.scopedLive("parallel tool calls split across chunks join by index into parsed inputs; each call's first delta names it", () =>
    Effect.gen(function*() {
      const { deltas, result } = yield* scripted(openAiParallelToolCalls.steps)
      const answer = ok(result)
      expect(answer.tool_calls).toEqual(openAiParallelToolCalls.tool_calls.map(({ id, input, name }) => ({ id, name, input })))
      expect(answer.stop_reason).toBe("tool_calls")
      expect(answer.provider_stop_reason).toBe("tool_calls")
      expect(answer.usage).toEqual(openAiParallelToolCalls.usage)
      expect(answer.text).toBe("")
      expect(argumentsOf(deltas, 0)).toBe(openAiParallelToolCalls.tool_calls[0]!.arguments)
      expect(argumentsOf(deltas, 1)).toBe(openAiParallelToolCalls.tool_calls[1]!.arguments)
      const first = (index: number) => deltas.find((d) => d.type === "tool_call" && d.index === index)
      expect(first(0)).toMatchObject({ id: "call_DdmO9pD3xa9XTPNJ32zg2hcA", name: "get_weather" })
      expect(first(1)).toMatchObject({ id: "call_ABzw2GmgXTPJ8vT4JZcYs1qL", name: "get_time" })
      // In arrival order: every piece of call 0 before call 1 opens, as the server sent them.
      expect(deltas.map((d) => d.type === "tool_call" && d.index)).toEqual([0, 0, 0, 0, 1, 1, 1])
    }))

  it.scopedLive("a tool-result round trip is sent in the documented shape: JSON-text arguments, results by tool_call_id, a system note in place, images as image_url, tools as functions", () =>
    Effect.gen(function*() {
      const request: ModelRequest = {
        system: "You are terse.",
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "Weather where this photo was taken?" },
              { type: "image", url: "https://example.com/photo.jpg" },
              { type: "image", data: "iVBORw0KGgo=", mime_type: "image/png" }
            ]
          },
          {
            role: "assistant",
            content: "",
            tool_calls: [
              { id: "call_1", name: "get_weather", input: { city: "Paris" } },
              { id: "call_2", name: "get_time", input: { tz: "Europe/Paris" } }
            ]
          },
          { role: "tool", tool_call_id: "call_1", content: "{\"celsius\":18}" },
          { role: "tool", tool_call_id: "call_2", content: "{\"time\":\"14:05\"}" },
          { role: "system", content: "The previous turn was interrupted." },
          { role: "user", content: "And tomorrow?" }
        ],
        tools: [
          { name: "get_weather", description: "Weather by city", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
          { name: "get_time" }
        ]
      }
      const { fake, result } = yield* scripted(openAiText.steps, { request })
      ok(result)
      const body = fake.requests[0]!.body
      expect(body.messages).toEqual([
        { role: "system", content: "You are terse." },
        {
          role: "user",
          content: [
            { type: "text", text: "Weather where this photo was taken?" },
            { type: "image_url", image_url: { url: "https://example.com/photo.jpg" } },
            { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }
          ]
        },
        {
          role: "assistant",
          content: "",
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } },
            { id: "call_2", type: "function", function: { name: "get_time", arguments: "{\"tz\":\"Europe/Paris\"}" } }
          ]
        },
        { role: "tool", tool_call_id: "call_1", content: "{\"celsius\":18}" },
        { role: "tool", tool_call_id: "call_2", content: "{\"time\":\"14:05\"}" },
        { role: "system", content: "The previous turn was interrupted." },
        { role: "user", content: "And tomorrow?" }
      ])
      expect(body.tools).toEqual([
        {
          type: "function",
          function: {
            name: "get_weather",
            description: "Weather by city",
            parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
          }
        },
        { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } }
      ])
    }))

  it.scopedLive("Ollama's shape: whole tool calls in one chunk finished with \"stop\" are tool_calls; no usage sent is no usage; no key is no authorization header", () =>
    Effect.gen(function*() {
      const { deltas, fake, result } = yield* scripted(ollamaToolCalls.steps, {
        key: undefined,
        binding: { name: "local", model: "llama3.1" }
      })
      expect(fake.requests[0]!.headers.authorization).toBeUndefined()
      expect(fake.requests[0]!.body.model).toBe("llama3.1")
      const answer = ok(result)
      expect(answer).toEqual({
        text: ollamaToolCalls.text,
        tool_calls: ollamaToolCalls.tool_calls,
        stop_reason: "tool_calls",
        response_id: ollamaToolCalls.response_id,
        model: ollamaToolCalls.model,
        provider_stop_reason: "stop"
      })
      expect("usage" in answer).toBe(false)
      expect(deltas).toEqual([
        { type: "text", text: "Let me check." },
        { type: "tool_call", index: 0, id: "call_p5t8y2kq", name: "get_weather", input_delta: "{\"city\":\"Paris\"}" },
        { type: "tool_call", index: 1, id: "call_w1m3x0ze", name: "get_time", input_delta: "{\"tz\":\"Europe/Paris\"}" }
      ])
    }))

  it.scopedLive("options from the binding reach the request, the call's own override them, and Brain's fields win over both", () =>
    Effect.gen(function*() {
      const { fake, result } = yield* scripted(openAiText.steps, {
        binding: { options: { temperature: 0.2, max_tokens: 512, model: "not-this", stream_options: { extra: 1 } } },
        request: { ...ASK, options: { temperature: 0.9, seed: 7, stream: false, tools: [{ type: "function" }] } }
      })
      ok(result)
      const body = fake.requests[0]!.body
      expect(body).toMatchObject({ temperature: 0.9, max_tokens: 512, seed: 7, model: "gpt-4.1", stream: true })
      expect(body.stream_options).toEqual({ extra: 1, include_usage: true })
      expect("tools" in body).toBe(false)
    }))

  it.scopedLive("a part the API cannot carry is refused before sending: model_rejected, not ambiguous, naming the part", () =>
    Effect.gen(function*() {
      const fake = yield* fakeServer({ steps: openAiText.steps })
      const refused = (messages: ModelRequest["messages"]) => call(fake, { request: { messages } }).pipe(Effect.map(({ result }) => failure(result)))
      const audio = yield* refused([{ role: "user", content: [{ type: "text", text: "hi" }, { type: "audio", data: "AAAA" }] }])
      expect(audio).toMatchObject({
        code: "model_rejected",
        ambiguous: false,
        retryable: false,
        details: { message_index: 0, part_index: 1, part_type: "audio" }
      })
      expect(audio.message).toContain("\"audio\"")
      const assistantImage = yield* refused([{ role: "assistant", content: [{ type: "image", url: "https://example.com/a.png" }] }])
      expect(assistantImage).toMatchObject({ code: "model_rejected", details: { message_index: 0, part_index: 0, role: "assistant" } })
      const bareImage = yield* refused([{ role: "user", content: [{ type: "image", data: "AAAA" }] }])
      expect(bareImage).toMatchObject({ code: "model_rejected", ambiguous: false })
      const orphan = yield* refused([{ role: "user", content: "hi" }, { role: "tool", content: "{}" }])
      expect(orphan).toMatchObject({ code: "model_rejected", details: { message_index: 1, role: "tool" } })
      expect(fake.requests).toHaveLength(0)
    }))

  it.scopedLive("another provider's reasoning kept in an assistant message (thinking blocks) is left out of the request, not refused", () =>
    Effect.gen(function*() {
      const fake = yield* fakeServer({ steps: openAiText.steps })
      const thought = { type: "thinking", thinking: "t", signature: "s" }
      const messages: ModelRequest["messages"] = [
        { role: "user", content: "hi" },
        { role: "assistant", content: [thought, { type: "redacted_thinking", data: "d" }, { type: "text", text: "Checking." }] },
        { role: "user", content: "and?" },
        { role: "assistant", content: [thought], tool_calls: [{ id: "c1", name: "now", input: {} }] },
        { role: "tool", tool_call_id: "c1", content: "{}" }
      ]
      ok((yield* call(fake, { request: { messages } })).result)
      const sent = (fake.requests[0]!.body as { messages: Array<{ role: string; content: unknown }> }).messages
      expect(sent[1]).toEqual({ role: "assistant", content: [{ type: "text", text: "Checking." }] })
      expect(sent[3]).toMatchObject({ role: "assistant", content: "" })
    }))

  it.scopedLive("an error status keeps the provider's body: 400 model_rejected, 429 model_rate_limited with retry-after as advice", () =>
    Effect.gen(function*() {
      const errorBody = { error: { message: "Invalid value for 'temperature'", type: "invalid_request_error", param: "temperature", code: null } }
      const bad = yield* fakeServer({ status: 400, headers: { "content-type": "application/json" }, steps: [JSON.stringify(errorBody)] })
      expect(failure((yield* call(bad)).result)).toMatchObject({
        code: "model_rejected",
        ambiguous: false,
        retryable: false,
        details: { status: 400, body: errorBody }
      })
      const limitedBody = { error: { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" } }
      const limited = yield* fakeServer({
        status: 429,
        headers: { "content-type": "application/json", "retry-after": "3" },
        steps: [JSON.stringify(limitedBody)]
      })
      expect(failure((yield* call(limited)).result)).toMatchObject({
        code: "model_rate_limited",
        ambiguous: false,
        retryable: true,
        details: { status: 429, retry_after_ms: 3000, body: limitedBody }
      })
    }))

  it.scopedLive("a connection cut mid-stream is model_stream_broken and ambiguous, after the deltas that came before it", () =>
    Effect.gen(function*() {
      const { deltas, result } = yield* scripted([...openAiText.steps.slice(0, 3), { pauseMs: 20 }, "data: {\"id\":\"chatcmpl-", { cut: true }])
      expect(textOf(deltas)).toBe("Paris is the")
      expect(failure(result)).toMatchObject({ code: "model_stream_broken", ambiguous: true, retryable: true })
    }))

  it.scopedLive("a stream that ends cleanly without data: [DONE], or without a finish_reason, is model_stream_broken and ambiguous", () =>
    Effect.gen(function*() {
      const noDone = yield* scripted(openAiText.steps.filter((s) => s !== DONE))
      expect(failure(noDone.result)).toMatchObject({
        code: "model_stream_broken",
        ambiguous: true,
        details: { received_done: false, finish_reason: "stop" }
      })
      const noFinish = yield* scripted([...openAiText.steps.slice(0, 6), DONE])
      expect(failure(noFinish.result)).toMatchObject({
        code: "model_stream_broken",
        ambiguous: true,
        details: { received_done: true, finish_reason: null }
      })
    }))

  it.scopedLive("a stall past the deadline is model_timeout and ambiguous", () =>
    Effect.gen(function*() {
      const { deltas, result } = yield* scripted([...openAiText.steps.slice(0, 2), { stall: true }], {
        limits: { stallMs: 300, maxOutputBytes: 0 }
      })
      expect(textOf(deltas)).toBe("Paris")
      expect(failure(result)).toMatchObject({ code: "model_timeout", ambiguous: true })
    }))

  it.scopedLive("output past the byte limit is model_output_limit", () =>
    Effect.gen(function*() {
      const steps = [openAi.delta({ role: "assistant", content: "" }), ...Array.from({ length: 40 }, () => openAi.delta({ content: "x".repeat(80) }))]
      const { result } = yield* scripted([...steps, openAi.delta({}, "stop"), DONE], { limits: { stallMs: 2_000, maxOutputBytes: 2_000 } })
      expect(failure(result)).toMatchObject({ code: "model_output_limit", ambiguous: true, retryable: false })
    }))

  it.scopedLive("a garbage chunk is model_bad_response and ambiguous; a heartbeat comment or an unknown named event is ignored", () =>
    Effect.gen(function*() {
      const notJson = yield* scripted([...openAiText.steps.slice(0, 2), "data: {\"id\": oops\n\n", ...openAiText.steps.slice(2)])
      expect(failure(notJson.result)).toMatchObject({ code: "model_bad_response", ambiguous: true, details: { data: "{\"id\": oops" } })
      expect(textOf(notJson.deltas)).toBe("Paris")

      const wrongShape = yield* scripted([...openAiText.steps.slice(0, 2), openAi.delta({ content: 42 }), ...openAiText.steps.slice(2)])
      expect(failure(wrongShape.result)).toMatchObject({ code: "model_bad_response", ambiguous: true })

      const notAnObject = yield* scripted([openAiText.steps[0]!, sse("[1,2]"), ...openAiText.steps.slice(1)])
      expect(failure(notAnObject.result)).toMatchObject({ code: "model_bad_response", ambiguous: true })

      const withNoise = yield* scripted([
        ": OPENROUTER PROCESSING\n\n",
        ...openAiText.steps.slice(0, 3),
        sse({ type: "keepalive" }, "ping"),
        ...openAiText.steps.slice(3)
      ])
      expect(ok(withNoise.result).text).toBe(openAiText.text)
    }))

  it.scopedLive("an event whose data is empty (data: with nothing, or a space) is a heartbeat, ignored; an unfinished JSON chunk is still model_bad_response", () =>
    Effect.gen(function*() {
      const beats = yield* scripted([...openAiText.steps.slice(0, 2), "data:\n\n", "data: \n\n", ...openAiText.steps.slice(2)])
      expect(ok(beats.result).text).toBe(openAiText.text)
      const cut = yield* scripted([...openAiText.steps.slice(0, 2), "data: {\n\n", ...openAiText.steps.slice(2)])
      expect(failure(cut.result)).toMatchObject({ code: "model_bad_response", ambiguous: true, details: { data: "{" } })
    }))

  it.scopedLive("tool-call arguments that are not JSON are model_bad_response, ambiguous, with the arguments in details", () =>
    Effect.gen(function*() {
      const { result } = yield* scripted([
        openAi.delta({ role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_x", type: "function", function: { name: "f", arguments: "" } }] }),
        openAi.delta({ tool_calls: [{ index: 0, function: { arguments: "{\"a\": 1" } }] }),
        openAi.delta({}, "tool_calls"),
        DONE
      ])
      expect(failure(result)).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        details: { index: 0, name: "f", arguments: "{\"a\": 1" }
      })
    }))

  it.scopedLive("tool-call arguments sent as an object instead of JSON text (an Ollama drift) are taken as the input", () =>
    Effect.gen(function*() {
      const { deltas, result } = yield* scripted([
        openAi.delta({ role: "assistant", content: "", tool_calls: [{ id: "call_o", type: "function", function: { name: "f", arguments: { a: 1 } } }] }),
        openAi.delta({}, "stop"),
        DONE
      ])
      expect(ok(result)).toMatchObject({ tool_calls: [{ id: "call_o", name: "f", input: { a: 1 } }], stop_reason: "tool_calls" })
      expect(deltas).toEqual([{ type: "tool_call", index: 0, id: "call_o", name: "f", input_delta: "{\"a\":1}" }])
    }))

  it.scopedLive("an error object inside a 200 stream is a typed failure carrying the provider's error", () =>
    Effect.gen(function*() {
      const serverError = { message: "The server had an error while processing your request.", type: "server_error", param: null, code: null }
      const midway = yield* scripted([...openAiText.steps.slice(0, 3), sse({ error: serverError })])
      expect(failure(midway.result)).toMatchObject({ code: "model_unavailable", ambiguous: true, retryable: true, details: { error: serverError } })
      expect(failure(midway.result).message).toContain("The server had an error")

      const gatewayLimit = { code: 429, message: "Rate limit exceeded: upstream" }
      const first = yield* scripted([sse({ error: gatewayLimit })])
      expect(failure(first.result)).toMatchObject({ code: "model_rate_limited", ambiguous: false, retryable: true, details: { error: gatewayLimit } })

      const tooLong = { message: "This model's maximum context length is 128000 tokens.", type: "invalid_request_error", code: "context_length_exceeded" }
      const refusedFirst = yield* scripted([sse({ error: tooLong })])
      expect(failure(refusedFirst.result)).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false, details: { error: tooLong } })

      const named = yield* scripted([...openAiText.steps.slice(0, 2), sse({ message: "overloaded", type: "overloaded_error" }, "error")])
      expect(failure(named.result)).toMatchObject({ code: "model_unavailable", ambiguous: true, details: { error: { type: "overloaded_error" } } })
    }))

  it.scopedLive("an error inside the stream of a type it does not know (or with none) is model_failed, ambiguous and not retryable, as for every provider; a server error, an overload or a 5xx code is model_unavailable, retryable", () =>
    Effect.gen(function*() {
      const role = openAi.delta({ role: "assistant", content: "" })
      for (const error of [{ message: "boom", type: "xyz_unknown", code: "abc" }, { message: "boom" }, "plain string error"]) {
        const unknown = yield* scripted([role, sse({ error })])
        expect(failure(unknown.result), JSON.stringify(error)).toMatchObject({ code: "model_failed", ambiguous: true, retryable: false, details: { error } })
      }
      const servers = [
        { message: "The server had an error while processing your request.", type: "server_error", param: null, code: null },
        { object: "error", message: "engine died", type: "InternalServerError", param: null, code: 500 },
        { message: "model runner crashed", type: "api_error", param: null, code: null },
        { message: "upstream", type: null, param: null, code: "503" },
        { message: "Service Unavailable", type: "service_unavailable_error" },
        { message: "too slow", type: "timeout_error" }
      ]
      for (const error of servers) {
        const down = yield* scripted([role, sse({ error })])
        expect(failure(down.result), JSON.stringify(error)).toMatchObject({ code: "model_unavailable", ambiguous: true, retryable: true })
      }
    }))

  it.scopedLive("an error after the first chunk (the role chunk) is ambiguous, even a rate limit or a refusal with no text streamed yet: the server had taken the prompt in", () =>
    Effect.gen(function*() {
      const role = openAi.delta({ role: "assistant", content: "", refusal: null })
      const limited = yield* scripted([role, sse({ error: { code: 429, message: "Rate limit exceeded: upstream" } })])
      expect(failure(limited.result)).toMatchObject({ code: "model_rate_limited", ambiguous: true, retryable: true })
      expect(limited.deltas).toEqual([])
      const tooLong = { message: "This model's maximum context length is 128000 tokens.", type: "invalid_request_error", code: "context_length_exceeded" }
      const refused = yield* scripted([role, sse({ error: tooLong })])
      expect(failure(refused.result)).toMatchObject({ code: "model_rejected", ambiguous: true, retryable: false })
      const named = yield* scripted([role, sse({ message: "slow down", type: "rate_limit_error" }, "error")])
      expect(failure(named.result)).toMatchObject({ code: "model_rate_limited", ambiguous: true })
    }))

  it.scopedLive("a quota or spend-limit error inside the stream is model_rate_limited and not retryable (waiting does not fix it); before the first chunk it is not ambiguous", () =>
    Effect.gen(function*() {
      const quota = { message: "You exceeded your current quota, please check your plan and billing details.", type: "insufficient_quota", param: null, code: "insufficient_quota" }
      const first = yield* scripted([sse({ error: quota })])
      expect(failure(first.result)).toMatchObject({ code: "model_rate_limited", ambiguous: false, retryable: false, details: { error: quota } })
      const spend = { message: "Project spend limit reached.", type: "insufficient_quota", code: "project_spend_limit_exceeded" }
      const late = yield* scripted([openAi.delta({ role: "assistant", content: "" }), sse({ error: spend })])
      expect(failure(late.result)).toMatchObject({ code: "model_rate_limited", ambiguous: true, retryable: false })
    }))

  it.scopedLive("tool-call arguments cut off by finish_reason length are model_bad_response, not retryable (the same request is cut the same way), naming stop_reason max_tokens and the provider's length", () =>
    Effect.gen(function*() {
      const cut = [
        openAi.delta({ role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_c", type: "function", function: { name: "write", arguments: "" } }] }),
        openAi.delta({ tool_calls: [{ index: 0, function: { arguments: "{\"text\": \"Once upon a ti" } }] }),
        openAi.delta({}, "length"),
        DONE
      ]
      const truncated = yield* scripted(cut)
      expect(failure(truncated.result)).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        retryable: false,
        details: { index: 0, name: "write", stop_reason: "max_tokens", provider_stop_reason: "length" }
      })
      // The same broken arguments in an answer that finished on its own: a new try may parse.
      const broken = yield* scripted([...cut.slice(0, 2), openAi.delta({}, "tool_calls"), DONE])
      expect(failure(broken.result)).toMatchObject({
        code: "model_bad_response",
        retryable: true,
        details: { stop_reason: "tool_calls", provider_stop_reason: "tool_calls" }
      })
    }))

  it.scopedLive("finish_reason maps to Brain's stop reason and the raw word is kept", () =>
    Effect.gen(function*() {
      const cases = [["stop", "end"], ["length", "max_tokens"], ["content_filter", "refusal"], ["eos_token", "other"]] as const
      for (const [finish, stop] of cases) {
        const { result } = yield* scripted(openAiFinishing(finish))
        expect(ok(result)).toMatchObject({ text: "partial", stop_reason: stop, provider_stop_reason: finish })
      }
      const refusal = yield* scripted([
        openAi.delta({ role: "assistant", content: null, refusal: "" }),
        openAi.delta({ refusal: "I can't help with that." }),
        openAi.delta({}, "stop"),
        DONE
      ])
      expect(ok(refusal.result)).toMatchObject({ text: "I can't help with that.", stop_reason: "refusal", provider_stop_reason: "stop" })
    }))

  it.scopedLive("the API key travels only in the Authorization header: no result, delta or failure shows it", () =>
    Effect.gen(function*() {
      const outcomes: Array<unknown> = []
      for (const steps of [openAiText.steps, openAiText.steps.slice(0, 3), ["data: nope\n\n"]]) {
        const { deltas, fake, result } = yield* scripted(steps)
        expect(fake.requests[0]!.headers.authorization).toBe(`Bearer ${KEY}`)
        expect(fake.requests[0]!.text).not.toContain(KEY)
        outcomes.push(deltas, Either.isLeft(result) ? result.left : result.right)
      }
      const rejected = yield* fakeServer({ status: 401, steps: ["{\"error\":{\"message\":\"Incorrect API key provided\"}}"] })
      outcomes.push(failure((yield* call(rejected)).result))
      for (const outcome of outcomes) {
        expect(JSON.stringify(outcome)).not.toContain(KEY)
        expect(util.inspect(outcome, { depth: 10 })).not.toContain(KEY)
        expect(String(outcome)).not.toContain(KEY)
      }
    }))

  it.scopedLive("a key the server echoes back (in a 401 body, with or without its Bearer, or in an error inside the stream) is redacted from the failure's message and details", () =>
    Effect.gen(function*() {
      const echoed = [
        { status: 401, headers: { "content-type": "application/json" }, steps: [JSON.stringify({ error: { message: `Incorrect API key provided: ${KEY}` } })] },
        { status: 401, steps: [`Authorization: Bearer ${KEY} is not valid`] },
        { steps: [openAi.delta({ role: "assistant", content: "" }), sse({ error: { message: `key ${KEY} revoked`, type: "invalid_request_error" } })] },
        { steps: [sse({ message: `no such key ${KEY}` }, "error")] }
      ]
      for (const script of echoed) {
        const rejected = yield* fakeServer(script)
        const failed = failure((yield* call(rejected)).result)
        expect(`${failed.message} ${JSON.stringify(failed.details)}`).toContain("<redacted>")
        expect(`${failed.message} ${JSON.stringify(failed.details)} ${util.inspect(failed, { depth: 10 })}`).not.toContain(KEY)
      }
    }))

  it.scopedLive("a key a server echoes back in a successful answer (its text, a tool call's arguments) is redacted from the result, which is what gets recorded", () =>
    Effect.gen(function*() {
      const echoing = yield* fakeServer((req) => ({
        steps: [
          openAi.delta({ role: "assistant", content: `your header was ${req.headers.authorization}` }),
          openAi.delta({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "echo", arguments: JSON.stringify({ key: KEY }) } }] }),
          openAi.chunk([{ index: 0, delta: {}, finish_reason: "tool_calls" }]),
          DONE
        ]
      }))
      const answer = ok((yield* call(echoing)).result)
      expect(answer.text).toBe("your header was <redacted>")
      expect(answer.tool_calls).toEqual([{ id: "call_1", name: "echo", input: { key: "<redacted>" } }])
      expect(JSON.stringify(answer)).not.toContain(KEY)
    }))

  it.scopedLive("a key shorter than MIN_REDACTED_KEY_CHARS is not redacted: with a one-character key the answer's words, tool input and usage names, and a failure's message naming the binding, come back as the provider sent them", () =>
    Effect.gen(function*() {
      const words = "keep talking, kind folk: k"
      const answering = yield* fakeServer({
        steps: [
          openAi.delta({ role: "assistant", content: words }),
          openAi.delta({ tool_calls: [{ index: 0, id: "call_k", type: "function", function: { name: "kick", arguments: JSON.stringify({ kind: "k" }) } }] }),
          openAi.delta({}, "tool_calls"),
          openAi.usage(30, 12),
          DONE
        ]
      })
      const run = { key: "k", binding: { name: "fake" } }
      const answer = ok((yield* call(answering, run)).result)
      expect(answer).toMatchObject({ text: words, tool_calls: [{ id: "call_k", name: "kick", input: { kind: "k" } }], usage: { input_tokens: 30, output_tokens: 12 } })
      expect(JSON.stringify(answer)).not.toContain("<redacted>")
      const refusing = yield* fakeServer({ status: 500, steps: ["the gateway for fake took key k"] })
      const failed = failure((yield* call(refusing, run)).result)
      expect(failed.message).toBe('openai-chat "fake" answered 500')
      expect(failed.details).toMatchObject({ body: "the gateway for fake took key k" })
      // The boundary: one character short of the minimum passes as sent.
      const almost = "p".repeat(MIN_REDACTED_KEY_CHARS - 1)
      const echoing = yield* fakeServer({ status: 401, steps: [`bad key ${almost}`] })
      expect(failure((yield* call(echoing, { key: almost })).result).details).toMatchObject({ body: `bad key ${almost}` })
    }))

  it.scopedLive("a key of MIN_REDACTED_KEY_CHARS or more is redacted wherever it occurs, inside a longer string too: a URL's query, an echoed header, a run of other key-like characters", () =>
    Effect.gen(function*() {
      const embedded = (key: string) =>
        `see https://gw.example/v1?api_key=${key}&x=1, Authorization: Bearer%20${key}, blob abc${key}def, ${JSON.stringify({ [key]: 1 })}`
      const shown = `see https://gw.example/v1?api_key=<redacted>&x=1, Authorization: Bearer%20<redacted>, blob abc<redacted>def, {"<redacted>":1}`
      for (const key of [KEY, "q".repeat(MIN_REDACTED_KEY_CHARS)]) {
        const echoing = yield* fakeServer({
          steps: [openAi.delta({ role: "assistant", content: embedded(key) }), openAi.delta({}, "stop"), openAi.usage(5, 3), DONE]
        })
        const answer = ok((yield* call(echoing, { key })).result)
        expect(answer.text).toBe(shown)
        expect(answer.usage).toEqual({ input_tokens: 5, output_tokens: 3 })
        const refusing = yield* fakeServer({ status: 401, steps: [embedded(key)] })
        const failed = failure((yield* call(refusing, { key })).result)
        expect(failed.details).toMatchObject({ body: shown })
        expect(JSON.stringify(failed)).not.toContain(key)
      }
    }))

  it.scopedLive("a usage counter that is not a non-negative integer (a fraction, a negative, a string) is left out; the answer is kept", () =>
    Effect.gen(function*() {
      const answered = (usage: unknown) => scripted([...openAiText.steps.slice(0, -2), openAi.chunk([], usage), DONE])
      const odd = yield* answered({ prompt_tokens: 1.5, completion_tokens: -1 })
      expect(ok(odd.result).text).toBe(openAiText.text)
      expect("usage" in ok(odd.result)).toBe(false)
      const half = yield* answered({ prompt_tokens: "12", completion_tokens: 7 })
      expect(ok(half.result).usage).toEqual({ output_tokens: 7 })
    }))

  it.scopedLive("a cancel aborts the request: the connection to the server is closed", () =>
    Effect.gen(function*() {
      const fake = yield* fakeServer({ steps: [...openAiText.steps.slice(0, 2), { stall: true }] })
      // Private, read for the test only: the server's open sockets.
      const openSockets = () => fake.openConnections
      const firstDelta = yield* Deferred.make<void>()
      // The HTTP client is provided around the whole test, so its connection pool outlives the
      // call: only the call's own abort can close the connection.
      const fiber = yield* openAiChat({
        binding: bindingFor(fake),
        apiKey: Redacted.make(KEY),
        request: ASK,
        onDelta: () => void Deferred.unsafeDone(firstDelta, Exit.void),
        limits: { stallMs: 0, maxOutputBytes: 0 }
      }).pipe(Effect.fork)
      yield* Deferred.await(firstDelta)
      expect(openSockets()).toBe(1)
      yield* Fiber.interrupt(fiber)
      for (let waited = 0; openSockets() > 0 && waited < 2_000; waited += 20) yield* Effect.sleep(Duration.millis(20))
      expect(openSockets()).toBe(0)
      expect(fake.requests).toHaveLength(1)
    }).pipe(Effect.provide(NodeHttpClient.dispatcherLayer)))

  it("the URL is {base_url}/chat/completions, OpenAI's public endpoint by default; the path is joined to the base URL's path, before any query", () => {
    expect(chatCompletionsUrl(undefined)).toBe("https://api.openai.com/v1/chat/completions")
    expect(chatCompletionsUrl("http://localhost:11434/v1")).toBe("http://localhost:11434/v1/chat/completions")
    expect(chatCompletionsUrl("http://localhost:11434/v1/")).toBe("http://localhost:11434/v1/chat/completions")
    // A query is refused at start; one recorded before that stays a query.
    expect(chatCompletionsUrl("http://h/openai/deployments/gpt4?api-version=2024-10-21")).toBe("http://h/openai/deployments/gpt4/chat/completions?api-version=2024-10-21")
  })
})
