/**
 * The `openai-responses` provider (src/layers/models/OpenAiResponses.ts) against a fake OpenAI on
 * loopback that speaks the Responses API's streaming wire format
 * (test/fixtures/providers/openaiResponses.ts): the request it sends, how the stream folds into
 * the result, and every way the call can fail.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { MockAgent } from "undici"
import * as http from "node:http"
import * as net from "node:net"
import { inspect } from "node:util"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, Layer, Redacted } from "effect"
import type { ModelDelta, ModelRequest, ModelResult } from "../../../src/domain/Model.js"
import type { RecordedBinding } from "../../../src/domain/ModelBinding.js"
import { openAiResponses } from "../../../src/layers/models/OpenAiResponses.js"
import type { StreamLimits } from "../../../src/layers/models/Http.js"
import type { ModelFailed } from "../../../src/services/Models.js"
import { FakeProvider, type Script, sse } from "../../support/fakeProvider.js"
import * as Fixture from "../../fixtures/providers/openaiResponses.js"

const KEY = "sk-proj-test-4c1f0a7e9b-never-shown"
const LIMITS: StreamLimits = { stallMs: 3_000, maxOutputBytes: 0 }
const HELLO: ModelRequest = { messages: [{ role: "user", content: "Say hello." }] }

interface Run {
  readonly deltas: Array<ModelDelta>
  readonly result: Either.Either<ModelResult, ModelFailed>
}

interface RunOptions {
  readonly options?: Record<string, unknown>
  readonly limits?: StreamLimits
  readonly apiKey?: string | null
  readonly baseUrl?: string | null
}

const binding = (baseUrl: string | undefined, options?: Record<string, unknown>): RecordedBinding => ({
  name: "gpt",
  provider: "openai-responses",
  model: "gpt-4.1",
  ...(baseUrl !== undefined ? { base_url: baseUrl } : {}),
  api_key_env: "OPENAI_API_KEY",
  ...(options !== undefined ? { options } : {})
})

const callProvider = (url: string | undefined, request: ModelRequest, opts: RunOptions = {}) =>
  Effect.gen(function*() {
    const deltas: Array<ModelDelta> = []
    const result = yield* Effect.either(openAiResponses({
      binding: binding(opts.baseUrl === null ? undefined : opts.baseUrl ?? `${url}/v1`, opts.options),
      apiKey: opts.apiKey === null ? undefined : Redacted.make(opts.apiKey ?? KEY),
      request,
      onDelta: (delta) => void deltas.push(delta),
      limits: opts.limits ?? LIMITS
    }))
    return { deltas, result } satisfies Run
  })

const run = (url: string | undefined, request: ModelRequest, opts: RunOptions = {}) =>
  callProvider(url, request, opts).pipe(Effect.provide(NodeHttpClient.dispatcherLayer))

/** Runs `use` against a fake answering every request with `script`. */
const withFake = <A>(
  script: Script | ((index: number) => Script),
  use: (fake: FakeProvider) => Effect.Effect<A>
) =>
  Effect.acquireUseRelease(
    Effect.promise(() => FakeProvider.start((_, index) => (typeof script === "function" ? script(index) : script))),
    use,
    (fake) => Effect.promise(() => fake.close())
  )

const ok = (r: Run) => {
  if (Either.isLeft(r.result)) throw new Error(`expected an answer, got ${r.result.left.code}: ${r.result.left.message}`)
  return r.result.right
}
const failure = (r: Run) => {
  if (Either.isRight(r.result)) throw new Error("expected a failure, got an answer")
  return r.result.left
}
const textOf = (deltas: ReadonlyArray<ModelDelta>) => deltas.flatMap((d) => (d.type === "text" ? [d.text] : [])).join("")
const argPieces = (deltas: ReadonlyArray<ModelDelta>, index: number) =>
  deltas.flatMap((d) => (d.type === "tool_call" && d.index === index && d.input_delta !== "" ? [d.input_delta] : []))
const argsOf = (deltas: ReadonlyArray<ModelDelta>, index: number) => argPieces(deltas, index).join("")

/** Answers HELLO from a fake running `script`. */
const answer = (script: Script) => withFake(script, (fake) => run(fake.url, HELLO))

/** The text answer's first `at` events, `inserted`, then the rest (or `tail` instead of the rest). */
const spliced = (at: number, inserted: ReadonlyArray<Script["steps"][number]>, tail = Fixture.textAnswer().slice(at)) => ({
  steps: [...Fixture.textAnswer().slice(0, at), ...inserted, ...tail]
})

/** One SSE event named by its data's type. */
const event = (data: { readonly type: string } & Record<string, unknown>) => sse(data, data.type)

/** A port nobody listens on: taken, then released. */
const freePort = () =>
  new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = (s.address() as net.AddressInfo).port
      s.close(() => resolve(p))
    })
  })

describe("the openai-responses provider", () => {
  it.live("a text answer: deltas reach onDelta in order and join to the text; id, model, usage and stop reason come from response.completed", () =>
    withFake({ steps: Fixture.textAnswer() }, (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO)
        expect(r.deltas).toEqual(Fixture.TEXT_PIECES.map((text) => ({ type: "text", text })))
        expect(ok(r)).toEqual({
          text: "Hello, world!",
          tool_calls: [],
          stop_reason: "end",
          usage: { input_tokens: 37, output_tokens: 11 },
          response_id: Fixture.RESPONSE_ID,
          model: Fixture.MODEL,
          provider_stop_reason: "completed"
        })
        expect(textOf(r.deltas)).toBe(ok(r).text)
        expect(fake.requests).toHaveLength(1)
      })))

  it.live("a 103 Early Hints before the 200 is skipped: the answer after it is the call's result, and the request is sent once", () =>
    withFake({ informational: [103], steps: Fixture.textAnswer() }, (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO)
        expect(ok(r).text).toBe("Hello, world!")
        expect(fake.requests).toHaveLength(1)
      })))

  it.live("the request is the documented shape: one POST to {base_url}/responses with instructions, input items, function tools carrying the raw JSON Schema, stream true and store false", () =>
    withFake({ steps: Fixture.textAnswer() }, (fake) =>
      Effect.gen(function*() {
        const schema = {
          type: "object",
          properties: { location: { type: "string" }, unit: { enum: ["c", "f"] } },
          required: ["location"]
        }
        const request: ModelRequest = {
          system: "You are terse.",
          messages: [
            {
              role: "user",
              content: [
                { type: "text", text: "What is in these pictures?" },
                { type: "image", url: "https://example.com/a.png" },
                { type: "image", data: "iVBORw0KGgo=", mime_type: "image/png" }
              ]
            },
            { role: "assistant", content: "A cat and a dog." },
            { role: "system", content: "The turn was interrupted; the user is back." },
            { role: "user", content: "And the weather?" }
          ],
          tools: [
            { name: "get_weather", description: "Weather at a place", input_schema: schema },
            { name: "now" }
          ]
        }
        const r = yield* run(`${fake.url}`, request, { baseUrl: `${fake.url}/v1/` })
        ok(r)
        expect(fake.requests).toHaveLength(1)
        const sent = fake.requests[0]!
        expect(sent.method).toBe("POST")
        expect(sent.path).toBe("/v1/responses")
        expect(sent.headers["content-type"]).toBe("application/json")
        expect(sent.headers.accept).toBe("text/event-stream")
        expect(sent.body).toEqual({
          model: "gpt-4.1",
          instructions: "You are terse.",
          input: [
            {
              role: "user",
              content: [
                { type: "input_text", text: "What is in these pictures?" },
                { type: "input_image", image_url: "https://example.com/a.png", detail: "auto" },
                { type: "input_image", image_url: "data:image/png;base64,iVBORw0KGgo=", detail: "auto" }
              ]
            },
            { role: "assistant", content: "A cat and a dog." },
            { role: "system", content: "The turn was interrupted; the user is back." },
            { role: "user", content: "And the weather?" }
          ],
          tools: [
            { type: "function", name: "get_weather", description: "Weather at a place", parameters: schema, strict: false },
            { type: "function", name: "now", parameters: { type: "object", properties: {} }, strict: false }
          ],
          stream: true,
          store: false
        })
      })))

  it.live("parallel tool calls: each function_call item is a tool call with its call_id and parsed arguments, streamed under its own index; a reasoning item is ignored", () =>
    withFake({ steps: Fixture.parallelCalls() }, (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO)
        const result = ok(r)
        expect(result.tool_calls).toEqual([
          { id: "call_12345xyz", name: "get_weather", input: { location: "Paris, France" } },
          { id: "call_67890abc", name: "get_weather", input: { location: "Bogotá, Colombia" } }
        ])
        expect(result.stop_reason).toBe("tool_calls")
        expect(result.text).toBe("")
        expect(result.usage).toEqual({ input_tokens: 62, output_tokens: 48 })
        // The first piece of each call names it; the pieces join to its arguments, in order.
        expect(r.deltas.filter((d) => d.type === "tool_call" && d.id !== undefined)).toEqual([
          { type: "tool_call", index: 0, id: "call_12345xyz", name: "get_weather", input_delta: "" },
          { type: "tool_call", index: 1, id: "call_67890abc", name: "get_weather", input_delta: "" }
        ])
        expect(argPieces(r.deltas, 0)).toEqual(['{"loc', 'ation":"Pa', 'ris, France"}'])
        expect(JSON.parse(argsOf(r.deltas, 0))).toEqual(result.tool_calls[0]!.input)
        expect(JSON.parse(argsOf(r.deltas, 1))).toEqual(result.tool_calls[1]!.input)
        expect(r.deltas.some((d) => d.type === "text")).toBe(false)
      })))

  it.live("tool results round trip: the assistant's calls go back as function_call items and each result as a function_call_output with the same call_id", () =>
    withFake((index) => ({ steps: index === 0 ? Fixture.parallelCalls() : Fixture.afterToolResults() }), (fake) =>
      Effect.gen(function*() {
        const ask: ModelRequest = { system: "Use tools.", messages: [{ role: "user", content: "Weather in Paris and Bogotá?" }] }
        const first = ok(yield* run(fake.url, ask))
        const next: ModelRequest = {
          ...ask,
          messages: [
            ...ask.messages,
            { role: "assistant", content: first.text, tool_calls: first.tool_calls },
            ...first.tool_calls.map((call, i) => ({
              role: "tool" as const,
              tool_call_id: call.id,
              content: JSON.stringify({ temperature_c: i === 0 ? 14 : 18 })
            }))
          ]
        }
        const second = yield* run(fake.url, next)
        expect(ok(second).text).toBe("It is 14°C in Paris and 18°C in Bogotá.")
        expect(ok(second).stop_reason).toBe("end")
        expect(fake.requests[1]!.body.input).toEqual([
          { role: "user", content: "Weather in Paris and Bogotá?" },
          { type: "function_call", call_id: "call_12345xyz", name: "get_weather", arguments: '{"location":"Paris, France"}' },
          { type: "function_call", call_id: "call_67890abc", name: "get_weather", arguments: '{"location":"Bogotá, Colombia"}' },
          { type: "function_call_output", call_id: "call_12345xyz", output: '{"temperature_c":14}' },
          { type: "function_call_output", call_id: "call_67890abc", output: '{"temperature_c":18}' }
        ])
      })))

  it.live("usage is absent when the final event carries none, and a counter it leaves out stays absent, never 0", () =>
    Effect.gen(function*() {
      for (const given of [undefined, null, {}]) {
        const r = yield* answer({ steps: Fixture.answerWithUsage(given) })
        expect(ok(r).text).toBe("ok")
        expect("usage" in ok(r)).toBe(false)
      }
      const partial = yield* answer({ steps: Fixture.answerWithUsage({ input_tokens: 5, total_tokens: 5 }) })
      expect(ok(partial).usage).toEqual({ input_tokens: 5 })
      expect(ok(partial).model).toBe("llama3.1")
    }))

  it.live("response.incomplete: max_output_tokens is stop_reason max_tokens, content_filter is refusal, and the text so far is kept", () =>
    Effect.gen(function*() {
      const long = yield* answer({ steps: Fixture.incomplete("max_output_tokens") })
      expect(ok(long)).toMatchObject({ text: "Once upon a time", stop_reason: "max_tokens", provider_stop_reason: "max_output_tokens" })
      const filtered = yield* answer({ steps: Fixture.incomplete("content_filter") })
      expect(ok(filtered)).toMatchObject({ stop_reason: "refusal", provider_stop_reason: "content_filter" })
    }))

  it.live("a refusal streams as text and stops with stop_reason refusal", () =>
    withFake({ steps: Fixture.refused() }, (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO)
        expect(ok(r)).toMatchObject({ text: "I'm sorry, I can't help with that.", stop_reason: "refusal", provider_stop_reason: "completed" })
        expect(textOf(r.deltas)).toBe(ok(r).text)
      })))

  it.live("what a server sends only whole (a done item, the final output) is passed to onDelta once and kept; nothing streamed is repeated", () =>
    withFake({ steps: Fixture.wholeItems() }, (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO)
        expect(ok(r)).toMatchObject({
          text: "All at once. And later.",
          tool_calls: [{ id: "call_w", name: "now", input: {} }],
          stop_reason: "tool_calls"
        })
        expect(r.deltas).toEqual([
          { type: "text", text: "All at once." },
          { type: "tool_call", index: 0, id: "call_w", name: "now", input_delta: "" },
          { type: "tool_call", index: 0, input_delta: "{}" },
          { type: "text", text: " And later." }
        ])
      })))

  it.live("an item the final response lists at another position than its stream's output_index is recorded once, by its id (text) or call_id (a call); an item only in the final response is still filled in, even at a streamed item's position", () =>
    Effect.gen(function*() {
      const text = yield* answer({ steps: Fixture.shiftedText() })
      expect(ok(text)).toMatchObject({ text: "Shifted. Late.", tool_calls: [], stop_reason: "end" })
      expect(text.deltas).toEqual([{ type: "text", text: "Shif" }, { type: "text", text: "ted." }, { type: "text", text: " Late." }])
      const call = yield* answer({ steps: Fixture.shiftedCall() })
      expect(ok(call)).toMatchObject({
        text: "",
        tool_calls: [{ id: "call_shifted", name: "lookup", input: { q: "r" } }, { id: "call_only_final", name: "now", input: {} }],
        stop_reason: "tool_calls"
      })
      expect(call.deltas).toEqual([
        { type: "tool_call", index: 0, id: "call_shifted", name: "lookup", input_delta: "" },
        { type: "tool_call", index: 0, input_delta: '{"q":' },
        { type: "tool_call", index: 0, input_delta: '"r"}' },
        { type: "tool_call", index: 1, id: "call_only_final", name: "now", input_delta: "" },
        { type: "tool_call", index: 1, input_delta: "{}" }
      ])
    }))

  it.live("an error status fails with the provider's error body: 400 model_rejected (not ambiguous), 429 model_rate_limited with retry-after as advice, 500 model_unavailable (ambiguous)", () =>
    Effect.gen(function*() {
      const invalid = {
        error: { message: "Invalid 'input[0].content': empty array.", type: "invalid_request_error", param: "input[0].content", code: "empty_array" }
      }
      const rejected = yield* withFake(
        { status: 400, headers: { "content-type": "application/json" }, steps: [JSON.stringify(invalid)] },
        (fake) => run(fake.url, HELLO)
      )
      expect(failure(rejected)).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false, details: { status: 400, body: invalid } })
      const slow = { error: { message: "Rate limit reached for gpt-4.1", type: "requests", param: null, code: "rate_limit_exceeded" } }
      const limited = yield* withFake(
        { status: 429, headers: { "content-type": "application/json", "retry-after": "2" }, steps: [JSON.stringify(slow)] },
        (fake) => run(fake.url, HELLO)
      )
      expect(failure(limited)).toMatchObject({
        code: "model_rate_limited",
        ambiguous: false,
        retryable: true,
        details: { status: 429, retry_after_ms: 2000, body: slow }
      })
      const down = yield* answer({ status: 500, steps: ['{"error":{"message":"The server had an error"}}'] })
      expect(failure(down)).toMatchObject({ code: "model_unavailable", ambiguous: true })
    }))

  it.live("connection refused is model_unreachable and not ambiguous: nothing was sent", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const r = yield* run(`http://127.0.0.1:${port}`, HELLO)
      expect(failure(r)).toMatchObject({ code: "model_unreachable", ambiguous: false, retryable: true })
    }))

  it.live("a connection cut mid-stream is model_stream_broken and ambiguous; the deltas before it were delivered", () =>
    answer(spliced(5, [{ pauseMs: 20 }, "event: response.output_text.delta\ndata: {\"ty", { cut: true }], [])).pipe(
      Effect.map((r) => {
        expect(failure(r)).toMatchObject({ code: "model_stream_broken", ambiguous: true, retryable: true })
        expect(r.deltas).toEqual([{ type: "text", text: "Hel" }])
      })))

  it.live("a stall past the deadline is model_timeout and ambiguous", () =>
    withFake(spliced(5, [{ stall: true }], []), (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO, { limits: { stallMs: 300, maxOutputBytes: 0 } })
        expect(failure(r)).toMatchObject({ code: "model_timeout", ambiguous: true })
        expect(textOf(r.deltas)).toBe("Hel")
      })))

  it.live("output past the byte limit is model_output_limit and ambiguous", () =>
    withFake({ steps: Fixture.textAnswer() }, (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO, { limits: { stallMs: 3_000, maxOutputBytes: 1_500 } })
        expect(failure(r)).toMatchObject({ code: "model_output_limit", ambiguous: true, retryable: false })
      })))

  it.live("a garbage chunk (a data line that is not JSON) is model_bad_response, ambiguous, and ends the call", () =>
    answer(spliced(5, ["data: {not json at all\n\n"])).pipe(
      Effect.map((r) => {
        expect(failure(r)).toMatchObject({ code: "model_bad_response", ambiguous: true, details: { data: "{not json at all" } })
        expect(textOf(r.deltas)).toBe("Hel")
      })))

  it.live("a known event of the wrong shape is model_bad_response, ambiguous, saying which event", () =>
    Effect.gen(function*() {
      const delta = event({ type: "response.output_text.delta", sequence_number: 5, item_id: "m", output_index: 0, content_index: 0, delta: 42 })
      const r = yield* answer(spliced(4, [delta]))
      expect(failure(r)).toMatchObject({ code: "model_bad_response", ambiguous: true, details: { event: "response.output_text.delta" } })
      const call = event({
        type: "response.output_item.added",
        sequence_number: 2,
        output_index: 0,
        item: { id: "fc_1", type: "function_call", arguments: "", name: "get_weather" }
      })
      const noCallId = yield* answer(spliced(2, [call], []))
      expect(failure(noCallId)).toMatchObject({ code: "model_bad_response", details: { event: "response.output_item.added" } })
      const stray = event({ type: "response.function_call_arguments.delta", sequence_number: 2, item_id: "fc_9", output_index: 9, delta: "{" })
      const unannounced = yield* answer(spliced(2, [stray], []))
      expect(failure(unannounced)).toMatchObject({ code: "model_bad_response", ambiguous: true, details: { output_index: 9 } })
    }))

  it.live("an event type it does not know (a keepalive, a new feature) and an SSE comment are ignored", () =>
    Effect.gen(function*() {
      const r = yield* answer(spliced(5, [
        ": ping\n\n",
        event({ type: "keepalive", sequence_number: 4 }),
        event({
          type: "response.output_text.annotation.added",
          sequence_number: 4,
          item_id: "m",
          output_index: 0,
          content_index: 0,
          annotation_index: 0,
          annotation: { type: "url_citation" }
        }),
        event({ type: "response.some_future_feature.delta", sequence_number: 4, shape: ["anything"] })
      ]))
      expect(ok(r).text).toBe("Hello, world!")
      expect(ok(r).stop_reason).toBe("end")
    }))

  it.live("an event whose data is empty, with no event name or one it does not know, is a heartbeat, ignored; a known event with empty data is model_bad_response", () =>
    Effect.gen(function*() {
      const r = yield* answer(spliced(5, ["data:\n\n", "data: \n\n", "event: keepalive\ndata:\n\n"]))
      expect(ok(r).text).toBe("Hello, world!")
      const empty = yield* answer(spliced(5, ["event: response.output_text.delta\ndata:\n\n"]))
      expect(failure(empty)).toMatchObject({ code: "model_bad_response", ambiguous: true, details: { data: "" } })
    }))

  it.live("tool-call arguments that are not JSON are model_bad_response, ambiguous, with the call named", () =>
    withFake({ steps: Fixture.brokenArguments() }, (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO)
        expect(failure(r)).toMatchObject({
          code: "model_bad_response",
          ambiguous: true,
          details: { tool_call_id: "call_bad", name: "get_weather", arguments: '{"location": Paris}' }
        })
      })))

  it.live("a stream that closes without response.completed is model_stream_broken and ambiguous", () =>
    withFake({ steps: Fixture.noFinalEvent() }, (fake) =>
      Effect.gen(function*() {
        const r = yield* run(fake.url, HELLO)
        expect(failure(r)).toMatchObject({ code: "model_stream_broken", ambiguous: true, retryable: true })
        expect(textOf(r.deltas)).toBe("Hello, world!")
      })))

  it.live("an error inside a 200 stream (error, response.failed) is a typed failure with the provider's error in details; after response.created even a refusal is ambiguous", () =>
    Effect.gen(function*() {
      const server = yield* answer({ steps: Fixture.errorEvent("server_error", "The server had an error while processing your request.") })
      expect(failure(server)).toMatchObject({
        code: "model_unavailable",
        ambiguous: true,
        retryable: true,
        details: { event: "error", error: { code: "server_error", message: "The server had an error while processing your request." } }
      })
      expect(failure(server).message).toContain("The server had an error")
      const limited = yield* answer({ steps: Fixture.failed("rate_limit_exceeded", "Request too large for gpt-4.1 on tokens per min.") })
      expect(failure(limited)).toMatchObject({
        code: "model_rate_limited",
        ambiguous: true,
        retryable: true,
        details: { event: "response.failed", error: { code: "rate_limit_exceeded" }, response_id: Fixture.RESPONSE_ID }
      })
      const nested = event({ type: "error", sequence_number: 2, error: { code: "invalid_prompt", message: "Flagged.", param: null } })
      const refused = yield* answer(spliced(2, [nested], []))
      expect(failure(refused)).toMatchObject({ code: "model_rejected", ambiguous: true, details: { error: { code: "invalid_prompt" } } })
      // Before response.created nothing had begun: a refusal there is not ambiguous.
      const early = yield* answer({ steps: [nested] })
      expect(failure(early)).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false })
      const other = yield* answer({ steps: Fixture.errorEvent("ERR_SOMETHING", "Something went wrong") })
      expect(failure(other)).toMatchObject({ code: "model_failed", ambiguous: true, details: { error: { code: "ERR_SOMETHING" } } })
      // Once output has streamed, even a rate limit may follow real work: ambiguous.
      const late = event({ type: "error", sequence_number: 90, code: "rate_limit_exceeded", message: "Slow down.", param: null })
      const midway = Fixture.textAnswer().findIndex((step) => typeof step === "string" && step.includes("response.output_text.delta"))
      const limitedLate = yield* answer(spliced(midway + 1, [late], []))
      expect(failure(limitedLate)).toMatchObject({ code: "model_rate_limited", ambiguous: true, retryable: true })
    }))

  it.live("an error after response.created is ambiguous even before any output: the prompt may have been processed and billed; before response.created a rate limit is not", () =>
    Effect.gen(function*() {
      const limit = event({ type: "error", sequence_number: 2, code: "rate_limit_exceeded", message: "Slow down.", param: null })
      const afterCreated = yield* answer(spliced(1, [limit], []))
      expect(afterCreated.deltas).toEqual([])
      expect(failure(afterCreated)).toMatchObject({ code: "model_rate_limited", ambiguous: true, retryable: true })
      const beforeCreated = yield* answer({ steps: [limit] })
      expect(failure(beforeCreated)).toMatchObject({ code: "model_rate_limited", ambiguous: false, retryable: true })
    }))

  it.live("a quota or spend-limit error in the stream (insufficient_quota) is model_rate_limited and not retryable: waiting does not fix it", () =>
    Effect.gen(function*() {
      const quota = event({ type: "error", sequence_number: 0, code: "insufficient_quota", message: "You exceeded your current quota.", param: null })
      const first = yield* answer({ steps: [quota] })
      expect(failure(first)).toMatchObject({ code: "model_rate_limited", ambiguous: false, retryable: false, details: { error: { code: "insufficient_quota" } } })
      const failed = yield* answer({ steps: Fixture.failed("credit_balance_exhausted", "Your credit balance is too low.") })
      expect(failure(failed)).toMatchObject({ code: "model_rate_limited", ambiguous: true, retryable: false })
    }))

  it.live("tool-call arguments cut off at max_output_tokens are model_bad_response, not retryable (the same request is cut the same way), naming stop_reason max_tokens and the provider's reason", () =>
    Effect.gen(function*() {
      const call = Fixture.functionCall(0, "fc_cut", "call_cut", "write", ['{"text": "Once upon', " a ti"])
      const incomplete = (reason: string) => ({
        type: "response.incomplete",
        response: Fixture.responseObject("incomplete", [call.item], { incomplete_details: { reason } })
      })
      const cut = yield* answer({ steps: Fixture.respond([call], incomplete("max_output_tokens")) })
      expect(failure(cut)).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        retryable: false,
        details: { tool_call_id: "call_cut", name: "write", stop_reason: "max_tokens", provider_stop_reason: "max_output_tokens" }
      })
      // The same broken arguments in a completed answer: a new try may parse.
      const broken = yield* answer({ steps: Fixture.brokenArguments() })
      expect(failure(broken)).toMatchObject({
        code: "model_bad_response",
        retryable: true,
        details: { stop_reason: "tool_calls", provider_stop_reason: "completed" }
      })
    }))

  it.live("a part the API cannot carry refuses the call before sending: model_rejected, not ambiguous, naming the message and the part", () =>
    withFake({ steps: Fixture.textAnswer() }, (fake) =>
      Effect.gen(function*() {
        const audio = yield* run(fake.url, {
          messages: [{ role: "user", content: [{ type: "text", text: "hi" }, { type: "audio", data: "UklGR", format: "wav" }] }]
        })
        expect(failure(audio)).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false })
        expect(failure(audio).message).toContain("message 0 (user), part 1")
        expect(failure(audio).message).toContain('"audio"')
        const assistantImage = yield* run(fake.url, {
          messages: [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "image", url: "https://example.com/a.png" }] }]
        })
        expect(failure(assistantImage).message).toContain("message 1 (assistant), part 0")
        const orphan = yield* run(fake.url, { messages: [{ role: "tool", content: "{}" }] })
        expect(failure(orphan)).toMatchObject({ code: "model_rejected", ambiguous: false })
        expect(failure(orphan).message).toContain("tool_call_id")
        const noSource = yield* run(fake.url, { messages: [{ role: "user", content: [{ type: "image" }] }] })
        expect(failure(noSource).message).toContain("url")
        expect(fake.requests).toHaveLength(0)
      })))

  it.live("another provider's reasoning kept in an assistant message (thinking blocks) is left out of the request, not refused", () =>
    withFake({ steps: Fixture.textAnswer() }, (fake) =>
      Effect.gen(function*() {
        ok(yield* run(fake.url, {
          messages: [
            { role: "user", content: "hi" },
            { role: "assistant", content: [{ type: "thinking", thinking: "t", signature: "s" }, { type: "redacted_thinking", data: "d" }, { type: "text", text: "Checking." }] },
            { role: "user", content: "and?" }
          ]
        }))
        expect((fake.requests[0]!.body as { input: Array<unknown> }).input[1]).toEqual({ role: "assistant", content: "Checking." })
      })))

  it.live("the API key travels only in the Authorization header and appears in no delta, result or failure", () =>
    Effect.gen(function*() {
      const shown = (value: unknown) => `${JSON.stringify(value)} ${inspect(value, { depth: 10 })} ${String(value)}`
      const answered = yield* withFake({ steps: Fixture.textAnswer() }, (fake) =>
        Effect.map(run(fake.url, HELLO), (r) => ({ r, headers: fake.requests[0]!.headers, body: fake.requests[0]!.text })))
      expect(answered.headers.authorization).toBe(`Bearer ${KEY}`)
      expect(answered.body).not.toContain(KEY)
      expect(shown(ok(answered.r))).not.toContain(KEY)
      expect(shown(answered.r.deltas)).not.toContain(KEY)
      const scripts: Array<Script> = [
        {
          status: 401,
          headers: { "content-type": "application/json" },
          steps: ['{"error":{"message":"Incorrect API key provided: sk-proj-****hown.","code":"invalid_api_key"}}']
        },
        { steps: [...Fixture.textAnswer().slice(0, 4), { cut: true }] },
        { steps: ["data: garbage\n\n"] },
        { steps: Fixture.errorEvent("server_error", "boom") },
        { steps: Fixture.noFinalEvent() }
      ]
      for (const script of scripts) {
        expect(shown(failure(yield* answer(script)))).not.toContain(KEY)
      }
      const port = yield* Effect.promise(freePort)
      expect(shown(failure(yield* run(`http://127.0.0.1:${port}`, HELLO)))).not.toContain(KEY)
      const keyless = yield* withFake({ steps: Fixture.textAnswer() }, (fake) =>
        Effect.map(run(fake.url, HELLO, { apiKey: null }), () => fake.requests[0]!.headers))
      expect(keyless.authorization).toBeUndefined()
    }))

  it.live("a key a compatible server echoes back (in a 401 body, an error event or response.failed) is redacted from the failure's message and details", () =>
    Effect.gen(function*() {
      const scripts: Array<Script> = [
        { status: 401, headers: { "content-type": "application/json" }, steps: [JSON.stringify({ error: { message: `Incorrect API key provided: ${KEY}` } })] },
        { steps: Fixture.errorEvent("invalid_api_key", `Incorrect API key provided: ${KEY}`) },
        { steps: Fixture.failed("invalid_api_key", `Incorrect API key provided: Bearer ${KEY}`) }
      ]
      for (const script of scripts) {
        const f = failure(yield* answer(script))
        expect(`${f.message} ${JSON.stringify(f.details)}`).toContain("Incorrect API key provided: <redacted>")
        expect(`${f.message} ${JSON.stringify(f.details)} ${inspect(f, { depth: 10 })}`).not.toContain(KEY)
      }
    }))

  it.live("a usage counter that is not a non-negative integer (a fraction, a negative, a string) is left out; the answer is kept", () =>
    Effect.gen(function*() {
      const odd = yield* answer({ steps: Fixture.answerWithUsage({ input_tokens: 1.5, output_tokens: -1 }) })
      expect(ok(odd).text).toBe("ok")
      expect("usage" in ok(odd)).toBe(false)
      const half = yield* answer({ steps: Fixture.answerWithUsage({ input_tokens: "9", output_tokens: 4 }) })
      expect(ok(half).usage).toEqual({ output_tokens: 4 })
    }))

  it.live("a cancel aborts the request: the provider's connection is closed (by the cancel, the dispatcher still open)", () =>
    Effect.gen(function*() {
      // A bare server: the fake does not say when a connection closes.
      const closed = yield* Deferred.make<void>()
      const server = http.createServer((req, res) => {
        req.resume()
        res.writeHead(200, { "content-type": "text/event-stream" })
        for (const chunk of Fixture.textAnswer().slice(0, 5)) res.write(chunk)
        res.on("close", () => Deferred.unsafeDone(closed, Effect.void))
      })
      const port = yield* Effect.promise(() =>
        new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as net.AddressInfo).port)))
      )
      const firstDelta = yield* Deferred.make<void>()
      const fiber = yield* openAiResponses({
        binding: binding(`http://127.0.0.1:${port}/v1`),
        apiKey: Redacted.make(KEY),
        request: HELLO,
        onDelta: () => Deferred.unsafeDone(firstDelta, Effect.void),
        limits: { stallMs: 0, maxOutputBytes: 0 }
      }).pipe(Effect.fork)
      yield* Deferred.await(firstDelta)
      yield* Fiber.interrupt(fiber)
      const wasClosed = yield* Deferred.await(closed).pipe(
        Effect.timeoutTo({ duration: "3 seconds", onSuccess: () => true, onTimeout: () => false })
      )
      yield* Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
      expect(wasClosed).toBe(true)
    }).pipe(Effect.provide(NodeHttpClient.dispatcherLayer)))

  it.live("options from the binding and the call reach the request, the call's winning; model, input and stream stay Brain's; store is false unless an option sets it", () =>
    withFake({ steps: Fixture.textAnswer() }, (fake) =>
      Effect.gen(function*() {
        const options = { temperature: 0.2, max_output_tokens: 500, model: "gpt-3.5", stream: false, input: "nope" }
        yield* run(fake.url, { ...HELLO, options: { temperature: 0.7, reasoning: { effort: "low" } } }, { options })
        expect(fake.requests[0]!.body).toEqual({
          model: "gpt-4.1",
          input: [{ role: "user", content: "Say hello." }],
          temperature: 0.7,
          max_output_tokens: 500,
          reasoning: { effort: "low" },
          stream: true,
          store: false
        })
        yield* run(fake.url, { ...HELLO, options: { store: true } }, { options })
        expect(fake.requests[1]!.body).toMatchObject({ store: true, temperature: 0.2, model: "gpt-4.1" })
      })))

  it.effect("with no base_url the call goes to https://api.openai.com/v1/responses", () =>
    Effect.gen(function*() {
      // undici's own mock dispatcher: nothing leaves the machine, and the request's target is recorded.
      const mock = new MockAgent()
      mock.disableNetConnect()
      const urls: Array<string> = []
      mock.get("https://api.openai.com").intercept({ path: "/v1/responses", method: "POST" }).reply(401, (request) => {
        urls.push(`https://api.openai.com${request.path}`)
        return '{"error":{"message":"offline test"}}'
      })
      const r = yield* callProvider(undefined, HELLO, { baseUrl: null }).pipe(
        Effect.provide(Layer.succeed(NodeHttpClient.Dispatcher, mock))
      )
      yield* Effect.promise(() => mock.close())
      expect(urls).toEqual(["https://api.openai.com/v1/responses"])
      expect(failure(r)).toMatchObject({ code: "model_rejected", details: { status: 401 } })
      expect(failure(r).message).toContain("OpenAI")
    }))
})
