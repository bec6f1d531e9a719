/**
 * The `anthropic` provider against a fake Anthropic on loopback that speaks the Messages API's
 * streaming wire format (test/fixtures/providers/anthropic.ts says which documentation each
 * stream follows): the request as documented, the answer folded from Anthropic's event types,
 * and each way a call fails named by what is known afterwards.
 */
import { NodeHttpClient } from "@effect/platform-node"
import * as http from "node:http"
import type * as net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, Redacted } from "effect"
import type { ModelDelta, ModelRequest, ModelResult } from "../../../src/domain/Model.js"
import type { RecordedBinding } from "../../../src/domain/ModelBinding.js"
import { anthropic } from "../../../src/layers/models/Anthropic.js"
import { stopReason, streamError } from "../../../src/layers/models/anthropic/Events.js"
import { DEFAULT_MAX_TOKENS, messagesUrl, requestBody } from "../../../src/layers/models/anthropic/Request.js"
import type { StreamLimits } from "../../../src/layers/models/Http.js"
import type { ProviderCall } from "../../../src/layers/models/Provider.js"
import { ModelFailed } from "../../../src/services/Models.js"
import * as F from "../../fixtures/providers/anthropic.js"
import { FakeProvider, type Script, type Step } from "../../support/fakeProvider.js"

const KEY = "sk-ant-test-0123456789-SECRET"

const binding = (base_url: string, extra: Partial<RecordedBinding> = {}): RecordedBinding => ({
  name: "claude",
  provider: "anthropic",
  model: F.MODEL,
  base_url,
  api_key_env: "ANTHROPIC_API_KEY",
  ...extra
})

const ask: ModelRequest = { system: "You are terse.", messages: [{ role: "user", content: "Say hello." }] }

interface Outcome {
  readonly result: Either.Either<ModelResult, ModelFailed>
  readonly deltas: ReadonlyArray<ModelDelta>
  readonly fake: FakeProvider
}

/** Runs one call (or several, in order) against a fake answering each request with its script. */
const against = (
  scripts: ReadonlyArray<Script>,
  requests: ReadonlyArray<ModelRequest>,
  options: { readonly binding?: Partial<RecordedBinding>; readonly limits?: StreamLimits; readonly apiKey?: boolean } = {}
) =>
  Effect.acquireUseRelease(
    Effect.promise(() => FakeProvider.start((_, i) => scripts[Math.min(i, scripts.length - 1)]!)),
    (fake) =>
      Effect.forEach(requests, (request) =>
        Effect.gen(function*() {
          const deltas: Array<ModelDelta> = []
          const result = yield* Effect.either(anthropic({
            binding: binding(fake.url, options.binding),
            apiKey: options.apiKey === false ? undefined : Redacted.make(KEY),
            request,
            onDelta: (d) => void deltas.push(d),
            limits: options.limits ?? { stallMs: 5_000, maxOutputBytes: 0 }
          }))
          return { result, deltas, fake } satisfies Outcome
        })),
    (fake) => Effect.promise(() => fake.close())
  ).pipe(Effect.provide(NodeHttpClient.dispatcherLayer))

const once = (script: Script, request: ModelRequest = ask, options?: Parameters<typeof against>[2]) =>
  against([script], [request], options).pipe(Effect.map((all) => all[0]!))

const ok = (r: Either.Either<ModelResult, ModelFailed>): ModelResult => {
  if (Either.isLeft(r)) throw new Error(`expected an answer, got ${r.left.code}: ${r.left.message}`)
  return r.right
}
const failure = (r: Either.Either<ModelResult, ModelFailed>): ModelFailed => {
  if (Either.isRight(r)) throw new Error(`expected a failure, got ${JSON.stringify(r.right)}`)
  return r.left
}

/** The stream's text cut every `n` characters: events arrive in pieces, across chunks. */
const inPieces = (steps: ReadonlyArray<Step>, n: number): Array<Step> => {
  const text = steps.join("")
  const out: Array<Step> = []
  for (let i = 0; i < text.length; i += n) out.push(text.slice(i, i + n), { pauseMs: 1 })
  return out
}

const joinedText = (deltas: ReadonlyArray<ModelDelta>) => deltas.map((d) => (d.type === "text" ? d.text : "")).join("")
const joinedArguments = (deltas: ReadonlyArray<ModelDelta>, index: number) =>
  deltas.map((d) => (d.type === "tool_call" && d.index === index ? d.input_delta : "")).join("")

const pureCall = (request: ModelRequest, extra: Partial<ProviderCall> = {}): ProviderCall => ({
  binding: binding("http://unused.invalid"),
  apiKey: undefined,
  request,
  onDelta: () => undefined,
  limits: { stallMs: 0, maxOutputBytes: 0 },
  ...extra
})

describe("the anthropic provider: requests", () => {
  it.live("a text answer: POST /v1/messages with the documented headers and body, streamed in pieces, folded into text, usage, ids and stop reason; deltas arrive in order and join to the text", () =>
    Effect.gen(function*() {
      const { result, deltas, fake } = yield* once({ steps: inPieces(F.textAnswer, 7) })
      const sent = fake.requests[0]!
      expect(fake.requests).toHaveLength(1)
      expect(sent.method).toBe("POST")
      expect(sent.path).toBe("/v1/messages")
      expect(sent.headers["x-api-key"]).toBe(KEY)
      expect(sent.headers["anthropic-version"]).toBe("2023-06-01")
      expect(sent.headers["content-type"]).toContain("application/json")
      expect(sent.headers.authorization).toBeUndefined()
      expect(sent.body).toEqual({
        model: F.MODEL,
        max_tokens: DEFAULT_MAX_TOKENS,
        system: "You are terse.",
        messages: [{ role: "user", content: [{ type: "text", text: "Say hello." }] }],
        stream: true
      })
      expect(ok(result)).toEqual({
        text: "Hello, world!",
        tool_calls: [],
        stop_reason: "end",
        usage: { input_tokens: 25, output_tokens: 15 },
        response_id: "msg_01TextAnswer",
        model: F.MODEL,
        provider_stop_reason: "end_turn"
      })
      expect(deltas).toEqual([{ type: "text", text: "Hello" }, { type: "text", text: ", world" }, { type: "text", text: "!" }])
      expect(joinedText(deltas)).toBe(ok(result).text)
    }))

  it.live("a 103 Early Hints before the 200 is skipped: the answer after it is the call's result, and the request is sent once", () =>
    Effect.gen(function*() {
      const { result, fake } = yield* once({ informational: [103], steps: F.textAnswer })
      expect(ok(result).stop_reason).toBe("end")
      expect(ok(result).text).not.toBe("")
      expect(fake.requests).toHaveLength(1)
    }))

  it.live("parallel tool calls: each tool_use block is a call in order with its id, name and joined arguments parsed; no arguments is {}; the deltas carry id and name first and join to the arguments", () =>
    Effect.gen(function*() {
      const { result, deltas } = yield* once({ steps: inPieces(F.parallelToolCalls, 13) })
      const answer = ok(result)
      expect(answer).toMatchObject({
        text: "I'll check both.",
        stop_reason: "tool_calls",
        provider_stop_reason: "tool_use",
        usage: { input_tokens: 472, output_tokens: 89 },
        tool_calls: [
          { id: "toolu_01Weather", name: "get_weather", input: { city: "Paris" } },
          { id: "toolu_01Time", name: "get_time", input: { tz: "Europe/Paris" } },
          { id: "toolu_01Files", name: "list_files", input: {} }
        ]
      })
      const firsts = deltas.filter((d) => d.type === "tool_call" && d.id !== undefined)
      expect(firsts).toEqual([
        { type: "tool_call", index: 0, id: "toolu_01Weather", name: "get_weather", input_delta: "" },
        { type: "tool_call", index: 1, id: "toolu_01Time", name: "get_time", input_delta: "" },
        { type: "tool_call", index: 2, id: "toolu_01Files", name: "list_files", input_delta: "" }
      ])
      expect(joinedArguments(deltas, 0)).toBe("{\"city\": \"Paris\"}")
      expect(joinedArguments(deltas, 1)).toBe("{\"tz\":\"Europe/Paris\"}")
      expect(joinedArguments(deltas, 2)).toBe("")
      expect(joinedText(deltas)).toBe("I'll check both.")
      // Text first, then the calls in order, each call's first piece before its others.
      expect(deltas.map((d) => (d.type === "text" ? "t" : d.index)).join("")).toBe("tt00001112")
    }))

  it.live("tool results round trip: the calls go back as tool_use blocks, the results as tool_result blocks in ONE user message that the next user message joins, the mid-conversation system note stays in its place as text of that user message (and out of `system`), tools keep their JSON Schema", () =>
    Effect.gen(function*() {
      const tools = [
        { name: "get_weather", description: "Weather for a city", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
        { name: "get_time", input_schema: { type: "object", properties: { tz: { type: "string" } } } },
        { name: "list_files" }
      ]
      const first: ModelRequest = { system: "You are terse.", tools, messages: [{ role: "user", content: "Weather and time in Paris?" }] }
      const [call1] = yield* against([{ steps: F.parallelToolCalls }], [first])
      const reply = ok(call1!.result)
      const second: ModelRequest = {
        ...first,
        messages: [
          ...first.messages,
          { role: "assistant", content: reply.text, tool_calls: reply.tool_calls },
          { role: "tool", tool_call_id: "toolu_01Weather", content: "{\"temp_c\":21,\"sky\":\"sunny\"}" },
          { role: "tool", tool_call_id: "toolu_01Time", content: "\"14:05\"" },
          { role: "tool", tool_call_id: "toolu_01Files", content: "{\"outcome\":\"error\",\"error\":\"denied\"}" },
          { role: "system", content: "Note from Brain: the previous turn did not finish." },
          { role: "user", content: "And tomorrow?" }
        ]
      }
      const [call2] = yield* against([{ steps: F.afterToolResults }], [second])
      expect(ok(call2!.result)).toMatchObject({ text: "Sunny and 21 °C; it is 14:05 in Paris.", stop_reason: "end" })
      const body = call2!.fake.requests[0]!.body
      expect(body.system).toBe("You are terse.")
      expect(body.tools).toEqual([
        tools[0],
        tools[1],
        { name: "list_files", input_schema: { type: "object", properties: {} } }
      ])
      expect(body.messages).toEqual([
        { role: "user", content: [{ type: "text", text: "Weather and time in Paris?" }] },
        {
          role: "assistant",
          content: [
            { type: "text", text: "I'll check both." },
            { type: "tool_use", id: "toolu_01Weather", name: "get_weather", input: { city: "Paris" } },
            { type: "tool_use", id: "toolu_01Time", name: "get_time", input: { tz: "Europe/Paris" } },
            { type: "tool_use", id: "toolu_01Files", name: "list_files", input: {} }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_01Weather", content: "{\"temp_c\":21,\"sky\":\"sunny\"}" },
            { type: "tool_result", tool_use_id: "toolu_01Time", content: "\"14:05\"" },
            { type: "tool_result", tool_use_id: "toolu_01Files", content: "{\"outcome\":\"error\",\"error\":\"denied\"}" },
            { type: "text", text: "Note from Brain: the previous turn did not finish." },
            { type: "text", text: "And tomorrow?" }
          ]
        }
      ])
    }))

  it.live("options from the binding and the call reach the body, the call's winning; Brain's model, messages and stream win over both", () =>
    Effect.gen(function*() {
      const { result, fake } = yield* once(
        { steps: F.textAnswer },
        { ...ask, options: { temperature: 0.7, metadata: { user_id: "u-1" }, stop_sequences: ["END"] } },
        { binding: { options: { temperature: 0.2, max_tokens: 1024, top_k: 5, model: "claude-other", stream: false, messages: [] } } }
      )
      ok(result)
      const body = fake.requests[0]!.body
      expect(body).toMatchObject({
        model: F.MODEL,
        max_tokens: 1024,
        temperature: 0.7,
        top_k: 5,
        metadata: { user_id: "u-1" },
        stop_sequences: ["END"],
        stream: true
      })
      expect(body.messages).toHaveLength(1)
    }))

  it("the URL is {base_url}/v1/messages, Anthropic's public endpoint by default; a trailing slash is not doubled and a query stays after the path", () => {
    expect(messagesUrl(undefined)).toBe("https://api.anthropic.com/v1/messages")
    expect(messagesUrl("http://127.0.0.1:8080/")).toBe("http://127.0.0.1:8080/v1/messages")
    expect(messagesUrl("http://127.0.0.1:8080/?token=x")).toBe("http://127.0.0.1:8080/v1/messages?token=x")
  })

  it("user parts become text and image blocks (base64 or URL); empty text is left out and an assistant message left empty disappears, its neighbours merging, so the roles still alternate", () => {
    const body = requestBody(pureCall({
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "What is in these?" },
            { type: "image", data: "iVBORw0KGgo=", mime_type: "image/png" },
            { type: "image", url: "https://example.com/cat.jpg" },
            { type: "text", text: "" }
          ]
        },
        { role: "assistant", content: "" },
        { role: "user", content: "Well?" },
        { role: "assistant", content: "", tool_calls: [{ id: "toolu_1", name: "look", input: {} }] }
      ]
    }))
    expect(body).not.toBeInstanceOf(ModelFailed)
    expect((body as any).messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "What is in these?" },
          { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
          { type: "image", source: { type: "url", url: "https://example.com/cat.jpg" } },
          { type: "text", text: "Well?" }
        ]
      },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "look", input: {} }] }
    ])
    expect((body as any).system).toBeUndefined()
    expect((body as any).tools).toBeUndefined()
  })

  it("system messages before the conversation's first user or assistant message are the body's system text; one after it keeps its place as user text, so a note about one turn does not read as standing instruction on every later call", () => {
    const body = requestBody(pureCall({
      system: "You are terse.",
      messages: [
        { role: "system", content: "Answer in French." },
        { role: "user", content: "Hello" },
        { role: "assistant", content: "Bonjour" },
        { role: "system", content: [{ type: "text", text: "Note from Brain:" }, { type: "text", text: " the previous turn did not finish." }] },
        { role: "user", content: "Again" },
        { role: "assistant", content: "Encore" },
        { role: "system", content: "A later note." },
        { role: "system", content: " " }
      ]
    }))
    expect(body).not.toBeInstanceOf(ModelFailed)
    expect((body as any).system).toBe("You are terse.\n\nAnswer in French.")
    expect((body as any).messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Hello" }] },
      { role: "assistant", content: [{ type: "text", text: "Bonjour" }] },
      { role: "user", content: [{ type: "text", text: "Note from Brain: the previous turn did not finish." }, { type: "text", text: "Again" }] },
      { role: "assistant", content: [{ type: "text", text: "Encore" }] },
      { role: "user", content: [{ type: "text", text: "A later note." }] }
    ])
  })

  it("a user turn with nothing to carry (an empty user message on its own, or no message at all) is refused before sending: model_rejected, not ambiguous, naming the message (Anthropic refuses empty content)", () => {
    const cases: Array<[ModelRequest["messages"], string]> = [
      [[{ role: "user", content: "" }], "messages[0]"],
      [[{ role: "user", content: [{ type: "text", text: "" }] }], "messages[0]"],
      [[{ role: "user", content: [] }], "messages[0]"],
      [[{ role: "system", content: "note" }, { role: "user", content: "" }], "messages[1]"],
      // Left out, it would make the assistant's text a prefill to continue, or the first turn the assistant's.
      [[{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: "" }], "messages[2]"],
      [[{ role: "user", content: "" }, { role: "assistant", content: "b" }, { role: "user", content: "c" }], "messages[0]"],
      [[{ role: "user", content: "" }, { role: "assistant", content: "" }, { role: "user", content: "" }], "messages[0]"],
      [[], "no user or assistant message"],
      [[{ role: "system", content: "note" }], "no user or assistant message"]
    ]
    for (const [messages, named] of cases) {
      const body = requestBody(pureCall({ messages }))
      expect(body, JSON.stringify(messages)).toBeInstanceOf(ModelFailed)
      expect(body).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false })
      expect((body as ModelFailed).message).toContain(named)
    }
  })

  it("an empty user message in a turn that has other content (tool results, or another user message) is left out, so a session is not stuck on it", () => {
    const body = requestBody(pureCall({
      messages: [
        { role: "user", content: "" },
        { role: "user", content: "Look it up." },
        { role: "assistant", content: "", tool_calls: [{ id: "tu_1", name: "look", input: {} }] },
        { role: "tool", tool_call_id: "tu_1", content: "found" },
        { role: "user", content: "" }
      ]
    }))
    expect(body).not.toBeInstanceOf(ModelFailed)
    expect((body as any).messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Look it up." }] },
      { role: "assistant", content: [{ type: "tool_use", id: "tu_1", name: "look", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "tu_1", content: "found" }] }
    ])
  })

  it("an empty tool result is a tool_result block without content (optional in the API; empty text is refused), its pairing kept", () => {
    const body = requestBody(pureCall({
      messages: [
        { role: "user", content: "Touch both." },
        { role: "assistant", content: "", tool_calls: [{ id: "tu_1", name: "touch", input: {} }, { id: "tu_2", name: "touch", input: {} }] },
        { role: "tool", tool_call_id: "tu_1", content: "" },
        { role: "tool", tool_call_id: "tu_2", content: [{ type: "text", text: "" }] }
      ]
    }))
    expect(body).not.toBeInstanceOf(ModelFailed)
    expect((body as any).messages[2]).toEqual({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "tu_1" }, { type: "tool_result", tool_use_id: "tu_2" }]
    })
  })

  it("whitespace-only text is empty text (Anthropic refuses both): a whitespace-only part beside others is left out, a whitespace-only assistant message is left out, its neighbours merging, a whitespace-only tool result has no content, a whitespace-only system text is left out (whitespace within one is kept)", () => {
    const body = requestBody(pureCall({
      system: " \n",
      messages: [
        { role: "system", content: "\t" },
        { role: "system", content: [{ type: "text", text: "Be" }, { type: "text", text: " " }, { type: "text", text: "brief." }] },
        { role: "user", content: [{ type: "text", text: "Look." }, { type: "text", text: " \n\t" }, { type: "image", url: "https://example.com/cat.jpg" }] },
        { role: "assistant", content: "  " },
        { role: "user", content: "\n\n" },
        { role: "user", content: "Well?" },
        { role: "assistant", content: [{ type: "text", text: " " }], tool_calls: [{ id: "tu_1", name: "look", input: {} }, { id: "tu_2", name: "look", input: {} }] },
        { role: "tool", tool_call_id: "tu_1", content: " " },
        { role: "tool", tool_call_id: "tu_2", content: [{ type: "text", text: "\n" }] }
      ]
    }))
    expect(body).not.toBeInstanceOf(ModelFailed)
    // A system text's own whitespace stays in it; one that is only whitespace is left out.
    expect((body as any).system).toBe("Be brief.")
    expect((body as any).messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "Look." },
          { type: "image", source: { type: "url", url: "https://example.com/cat.jpg" } },
          { type: "text", text: "Well?" }
        ]
      },
      { role: "assistant", content: [{ type: "tool_use", id: "tu_1", name: "look", input: {} }, { type: "tool_use", id: "tu_2", name: "look", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "tu_1" }, { type: "tool_result", tool_use_id: "tu_2" }] }
    ])
  })

  it("a user turn with only whitespace-only text is refused before sending as an empty one is: model_rejected, not ambiguous, naming the message", () => {
    const cases: Array<[ModelRequest["messages"], string]> = [
      [[{ role: "user", content: " " }], "messages[0]"],
      [[{ role: "user", content: [{ type: "text", text: "\n\t " }] }], "messages[0]"],
      [[{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: "  " }], "messages[2]"],
      [[{ role: "user", content: " " }, { role: "assistant", content: " " }, { role: "user", content: "\n" }], "messages[0]"]
    ]
    for (const [messages, named] of cases) {
      const body = requestBody(pureCall({ messages }))
      expect(body, JSON.stringify(messages)).toBeInstanceOf(ModelFailed)
      expect(body).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false })
      expect((body as ModelFailed).message).toContain(named)
      expect((body as ModelFailed).message).toContain("an empty user message")
    }
  })

  it("a failed tool's result goes as its content alone, without is_error: a Brain tool message has no such flag, and content that looks like a failure may be an ok output", () => {
    const failed = JSON.stringify({ outcome: "error", error: { error: "no tool named \"x\"" } })
    const body = requestBody(pureCall({
      messages: [
        { role: "user", content: "Go." },
        { role: "assistant", content: "", tool_calls: [{ id: "tu_1", name: "x", input: {} }] },
        { role: "tool", tool_call_id: "tu_1", content: failed }
      ]
    }))
    expect((body as any).messages[2]).toEqual({ role: "user", content: [{ type: "tool_result", tool_use_id: "tu_1", content: failed }] })
  })

  it("a merged user message puts all its tool_result blocks first, in their order, then its other blocks in theirs (the API's rule)", () => {
    const body = requestBody(pureCall({
      messages: [
        { role: "user", content: "Weather and time in Paris?" },
        {
          role: "assistant",
          content: "",
          tool_calls: [
            { id: "tu_1", name: "get_weather", input: { city: "Paris" } },
            { id: "tu_2", name: "get_time", input: { tz: "Europe/Paris" } }
          ]
        },
        { role: "tool", tool_call_id: "tu_1", content: "18 °C" },
        { role: "user", content: "hurry" },
        { role: "tool", tool_call_id: "tu_2", content: "14:05" },
        { role: "user", content: [{ type: "text", text: "and be brief" }] }
      ]
    }))
    expect(body).not.toBeInstanceOf(ModelFailed)
    expect((body as any).messages[2]).toEqual({
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: "tu_1", content: "18 °C" },
        { type: "tool_result", tool_use_id: "tu_2", content: "14:05" },
        { type: "text", text: "hurry" },
        { type: "text", text: "and be brief" }
      ]
    })
    expect((body as any).messages).toHaveLength(3)
  })

  it("an image given as a base64 data: URL is sent as a base64 source with its media type, not as a URL source", () => {
    const body = requestBody(pureCall({
      messages: [{ role: "user", content: [{ type: "image", url: "data:image/png;base64,iVBORw0KGgo=" }, { type: "image", url: "DATA:Image/JPEG;base64,/9j/4AAQ" }] }]
    }))
    expect((body as any).messages[0].content).toEqual([
      { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
      { type: "image", source: { type: "base64", media_type: "image/jpeg", data: "/9j/4AAQ" } }
    ])
  })

  it("a data: URL image that is not base64, has no media type or is not an image type Anthropic takes is refused before sending: model_rejected, not ambiguous, naming the part", () => {
    const cases: Array<[string, string]> = [
      ["data:image/png,%89PNG", "not base64"],
      ["data:;base64,iVBORw0KGgo=", "without a media type"],
      ["data:base64,iVBORw0KGgo=", "not base64"],
      ["data:image/png;base64", "not base64"],
      ["data:image/bmp;base64,Qk0=", "image/bmp"]
    ]
    for (const [url, said] of cases) {
      const body = requestBody(pureCall({ messages: [{ role: "user", content: [{ type: "text", text: "what?" }, { type: "image", url }] }] }))
      expect(body).toBeInstanceOf(ModelFailed)
      expect(body).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false })
      expect((body as ModelFailed).message).toContain("messages[0].content[1]")
      expect((body as ModelFailed).message).toContain(said)
    }
  })

  it("an assistant message's reasoning parts go back as the blocks they came as, where they stand (first), before its text and tool_use blocks", () => {
    const thought = { type: "thinking", thinking: "The user wants the weather.", signature: "EqQBCgIYAhIM" }
    const hidden = { type: "redacted_thinking", data: "EmwKAhgBEgy3" }
    const body = requestBody(pureCall({
      messages: [
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: [thought, hidden, { type: "text", text: "Checking." }], tool_calls: [{ id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
        { role: "tool", tool_call_id: "toolu_1", content: "{\"temp\":21}" }
      ]
    }))
    expect(body).not.toBeInstanceOf(ModelFailed)
    expect((body as Record<string, unknown>).messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Weather in Paris?" }] },
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "The user wants the weather.", signature: "EqQBCgIYAhIM" },
          { type: "redacted_thinking", data: "EmwKAhgBEgy3" },
          { type: "text", text: "Checking." },
          { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }
        ]
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "{\"temp\":21}" }] }
    ])
  })

  it("a part Anthropic cannot carry fails before sending: model_rejected, not ambiguous, naming the message and the part", () => {
    const cases: Array<[ModelRequest, string]> = [
      [{ messages: [{ role: "user", content: [{ type: "text", text: "hi" }, { type: "audio", data: "AAAA" }] }] }, "messages[0].content[1]"],
      [{ messages: [{ role: "user", content: [{ type: "image", data: "Qk0=", mime_type: "image/bmp" }] }] }, "image/bmp"],
      [{ messages: [{ role: "user", content: [{ type: "image" }] }] }, "messages[0].content[0]"],
      [{ messages: [{ role: "user", content: "a" }, { role: "assistant", content: [{ type: "image", url: "https://x/y.png" }] }] }, "messages[1].content[0]"],
      [{ messages: [{ role: "system", content: [{ type: "image", url: "https://x/y.png" }] }] }, "system message"],
      [{ messages: [{ role: "assistant", content: "", tool_calls: [{ id: "t", name: "n", input: [1] }] }] }, "messages[0].tool_calls[0]"],
      [{ messages: [{ role: "tool", content: "{}" }] }, "tool_call_id"],
      [{ messages: [{ role: "user", content: "a" }], tools: [{ name: "bad", input_schema: true }] }, "tools[0]"],
      [{ messages: [{ role: "user", content: [{ type: "thinking", thinking: "t", signature: "s" }] }] }, "messages[0].content[0]"],
      [{ messages: [{ role: "user", content: "a" }, { role: "assistant", content: [{ type: "thinking", thinking: "t" }] }] }, "messages[1].content[0]"],
      [{ messages: [{ role: "user", content: "a" }, { role: "assistant", content: [{ type: "redacted_thinking" }] }] }, "messages[1].content[0]"]
    ]
    for (const [request, named] of cases) {
      const body = requestBody(pureCall(request))
      expect(body).toBeInstanceOf(ModelFailed)
      expect(body).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false })
      expect((body as ModelFailed).message).toContain(named)
    }
  })

  it.live("a request Anthropic cannot carry is never sent, an empty or whitespace-only user message included", () =>
    Effect.gen(function*() {
      for (const content of [[{ type: "video", url: "x" }], "", " \n"]) {
        const { result, fake } = yield* once({ steps: F.textAnswer }, { messages: [{ role: "user", content }] })
        expect(failure(result)).toMatchObject({ code: "model_rejected", ambiguous: false })
        expect(fake.requests).toHaveLength(0)
      }
    }))
})

describe("the anthropic provider: answers", () => {
  it.live("a ping, an unknown event type and a citations delta are ignored, not errors; a thinking block is kept as reasoning, never streamed", () =>
    Effect.gen(function*() {
      const { result, deltas } = yield* once({ steps: F.withIgnoredEvents })
      expect(ok(result)).toMatchObject({
        text: "Forty-two.",
        tool_calls: [],
        stop_reason: "end",
        reasoning: [{ type: "thinking", thinking: "Let me think.", signature: "EqQBCgIYAhIM" }]
      })
      expect(deltas).toEqual([{ type: "text", text: "Forty-two." }])
    }))

  it.live("a ping whose data is empty (or anything else), and an event with empty data and no type it knows, are heartbeats, ignored; a known event with empty data is model_bad_response", () =>
    Effect.gen(function*() {
      const [start, ...rest] = F.textAnswer
      const beats = ["event: ping\ndata:\n\n", "event: ping\ndata: \n\n", "event: ping\ndata: keep-alive\n\n", "data:\n\n", "event: heartbeat\ndata:\n\n"]
      const { result, deltas } = yield* once({ steps: [start!, ...beats, ...rest] })
      expect(ok(result)).toMatchObject({ text: "Hello, world!", stop_reason: "end" })
      expect(joinedText(deltas)).toBe("Hello, world!")
      const empty = yield* once({ steps: [start!, "event: content_block_delta\ndata:\n\n", ...rest] })
      expect(failure(empty.result)).toMatchObject({ code: "model_bad_response", ambiguous: true, details: { event: "content_block_delta", data: "" } })
    }))

  it.live("thinking blocks (their pieces joined) and redacted_thinking blocks are kept whole, in block order, as the result's reasoning; an answer without them has none", () =>
    Effect.gen(function*() {
      const { result, deltas } = yield* once({ steps: F.thinkingThenTool })
      const answer = ok(result)
      expect(answer.reasoning).toEqual([
        { type: "thinking", thinking: "The user wants the weather in Paris.", signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h" },
        { type: "redacted_thinking", data: "EmwKAhgBEgy3va3pzix/LafPsn4a" }
      ])
      expect(answer.tool_calls).toEqual([{ id: "toolu_01Weather", name: "get_weather", input: { city: "Paris" } }])
      expect(deltas.every((d) => d.type === "tool_call")).toBe(true)
      expect("reasoning" in ok((yield* once({ steps: F.textAnswer })).result)).toBe(false)
    }))

  it.live("a thinking piece on a block that is not thinking, or a redacted_thinking block without its data, is model_bad_response", () =>
    Effect.gen(function*() {
      const misplaced = [F.messageStart("msg_x"), F.textStart(0), F.event("content_block_delta", { index: 0, delta: { type: "signature_delta", signature: "x" } }), F.blockStop(0), F.messageDelta("end_turn"), F.messageStop]
      expect(failure((yield* once({ steps: misplaced })).result)).toMatchObject({ code: "model_bad_response", ambiguous: true })
      const noData = [F.messageStart("msg_y"), F.event("content_block_start", { index: 0, content_block: { type: "redacted_thinking" } }), F.blockStop(0), F.messageDelta("end_turn"), F.messageStop]
      expect(failure((yield* once({ steps: noData })).result)).toMatchObject({ code: "model_bad_response", ambiguous: true })
    }))

  it.live("usage the provider did not send is absent, never 0", () =>
    Effect.gen(function*() {
      const { result } = yield* once({ steps: F.withoutUsage })
      const answer = ok(result)
      expect(answer.text).toBe("ok")
      expect("usage" in answer).toBe(false)
    }))

  it("Anthropic's stop reasons map to Brain's; model_context_window_exceeded is a cut like max_tokens; pause_turn and ones not yet known are other", () => {
    expect(
      ["end_turn", "stop_sequence", "tool_use", "max_tokens", "refusal", "pause_turn", "model_context_window_exceeded", null].map(stopReason)
    ).toEqual(["end", "end", "tool_calls", "max_tokens", "refusal", "other", "max_tokens", "other"])
  })

  it.live("an answer cut off by the context window (model_context_window_exceeded) is stop_reason max_tokens, the provider's word kept", () =>
    Effect.gen(function*() {
      const { result } = yield* once({ steps: [...F.textAnswer.slice(0, -2), F.messageDelta("model_context_window_exceeded"), F.messageStop] })
      expect(ok(result)).toMatchObject({ text: "Hello, world!", stop_reason: "max_tokens", provider_stop_reason: "model_context_window_exceeded" })
    }))

  it.live("usage carries cache_read_input_tokens and cache_creation_input_tokens beside input_tokens, which excludes them; counts not sent stay absent", () =>
    Effect.gen(function*() {
      const cached = [
        F.messageStart("msg_01Cached", { input_tokens: 12, cache_creation_input_tokens: 2_048, cache_read_input_tokens: 30_000, output_tokens: 1 }),
        ...F.textAnswer.slice(1)
      ]
      expect(ok((yield* once({ steps: cached })).result).usage).toEqual({
        input_tokens: 12,
        output_tokens: 15,
        cache_read_input_tokens: 30_000,
        cache_creation_input_tokens: 2_048
      })
      // A message_start without them (a proxy): taken from message_delta's cumulative usage.
      const late = [...F.textAnswer.slice(0, -2), F.messageDelta("end_turn", { output_tokens: 15, cache_read_input_tokens: 7 }), F.messageStop]
      expect(ok((yield* once({ steps: late })).result).usage).toEqual({ input_tokens: 25, output_tokens: 15, cache_read_input_tokens: 7 })
    }))

  it.live("message_delta's usage is cumulative: each count it carries replaces message_start's (input and cache counts too), a count it leaves out keeps message_start's, the last message_delta wins", () =>
    Effect.gen(function*() {
      const grown = [
        F.messageStart("msg_01Grown", { input_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 }),
        ...F.textAnswer.slice(1, -2),
        F.messageDelta("end_turn", { input_tokens: 7, cache_creation_input_tokens: 100, cache_read_input_tokens: 200, output_tokens: 42 }),
        F.messageStop
      ]
      expect(ok((yield* once({ steps: grown })).result).usage).toEqual({
        input_tokens: 7,
        output_tokens: 42,
        cache_read_input_tokens: 200,
        cache_creation_input_tokens: 100
      })
      const partial = [
        F.messageStart("msg_01Partial", { input_tokens: 12, cache_creation_input_tokens: 2_048, cache_read_input_tokens: 30_000, output_tokens: 1 }),
        ...F.textAnswer.slice(1, -2),
        F.messageDelta("end_turn", { output_tokens: 9, cache_read_input_tokens: 31_000 }),
        F.messageDelta("end_turn", { output_tokens: 20, input_tokens: 13 }),
        F.messageStop
      ]
      expect(ok((yield* once({ steps: partial })).result).usage).toEqual({
        input_tokens: 13,
        output_tokens: 20,
        cache_read_input_tokens: 31_000,
        cache_creation_input_tokens: 2_048
      })
      // A message_delta without usage: message_start's counts stand, its output count included.
      const silent = [...F.textAnswer.slice(0, -2), F.messageDelta("end_turn", null), F.messageStop]
      expect(ok((yield* once({ steps: silent })).result).usage).toEqual({ input_tokens: 25, output_tokens: 1 })
    }))
})

describe("the anthropic provider: failures", () => {
  it.live("an error status carries Anthropic's error body: 400 is model_rejected, not ambiguous; 529 overloaded and 500 are model_unavailable, ambiguous", () =>
    Effect.gen(function*() {
      const json = { "content-type": "application/json" }
      const rejected = yield* once({ status: 400, headers: json, steps: [F.invalidRequest] })
      expect(failure(rejected.result)).toMatchObject({
        code: "model_rejected",
        ambiguous: false,
        retryable: false,
        details: { status: 400, body: JSON.parse(F.invalidRequest) }
      })
      const overloaded = yield* once({ status: 529, headers: json, steps: [F.overloaded] })
      expect(failure(overloaded.result)).toMatchObject({
        code: "model_unavailable",
        ambiguous: true,
        retryable: true,
        details: { status: 529, body: { error: { type: "overloaded_error" } } }
      })
      const internal = yield* once({ status: 500, headers: json, steps: [F.errorBody("api_error", "Internal server error")] })
      expect(failure(internal.result)).toMatchObject({ code: "model_unavailable", ambiguous: true })
    }))

  it.live("429 is model_rate_limited with its retry-after as advice, not ambiguous", () =>
    Effect.gen(function*() {
      const { result, fake } = yield* once({ status: 429, headers: { "content-type": "application/json", "retry-after": "12" }, steps: [F.rateLimited] })
      expect(failure(result)).toMatchObject({
        code: "model_rate_limited",
        ambiguous: false,
        retryable: true,
        details: { status: 429, retry_after_ms: 12_000, body: { error: { type: "rate_limit_error" } } }
      })
      expect(fake.requests).toHaveLength(1)
    }))

  it.live("a 429 whose details.error_code is enforced_spend_limit_reached is model_rate_limited but not retryable (the monthly cap: waiting seconds does not fix it), not ambiguous", () =>
    Effect.gen(function*() {
      const body = {
        type: "error",
        error: { type: "rate_limit_error", message: "You have reached your spend limit.", details: { error_code: "enforced_spend_limit_reached" } },
        request_id: "req_011CSHoEeqs5C35K2UUqR7Fy"
      }
      const { result } = yield* once({ status: 429, headers: { "content-type": "application/json" }, steps: [JSON.stringify(body)] })
      expect(failure(result)).toMatchObject({ code: "model_rate_limited", ambiguous: false, retryable: false, details: { status: 429, body } })
    }))

  it.live("an error event after message_start is ambiguous even before any text (the prompt may have been processed and billed); before message_start a refusal is not", () =>
    Effect.gen(function*() {
      const limited = F.event("error", { error: { type: "rate_limit_error", message: "Slow down" } })
      const afterStart = yield* once({ steps: [F.messageStart("msg_01Late"), limited] })
      expect(afterStart.deltas).toEqual([])
      expect(failure(afterStart.result)).toMatchObject({ code: "model_rate_limited", ambiguous: true, retryable: true })
      const invalid = F.event("error", { error: { type: "invalid_request_error", message: "Bad" } })
      expect(failure((yield* once({ steps: [F.messageStart("msg_01Late"), invalid] })).result)).toMatchObject({ code: "model_rejected", ambiguous: true })
      const beforeStart = yield* once({ steps: [limited] })
      expect(failure(beforeStart.result)).toMatchObject({ code: "model_rate_limited", ambiguous: false, retryable: true })
    }))

  it.live("an error event inside a 200 stream is a typed failure with Anthropic's error in details: overloaded_error is model_unavailable, ambiguous; what streamed before it was delivered", () =>
    Effect.gen(function*() {
      const { result, deltas } = yield* once({ steps: F.overloadedMidStream })
      expect(failure(result)).toMatchObject({
        code: "model_unavailable",
        ambiguous: true,
        retryable: true,
        details: { error: { type: "overloaded_error", message: "Overloaded" } }
      })
      expect(deltas).toEqual([{ type: "text", text: "Hel" }])
    }))

  it("each documented error type has its code; all are ambiguous once the answer began, refusals before it are not; an unknown one is model_failed; a spend-limit rate limit is not retryable", () => {
    const codes = ["rate_limit_error", "overloaded_error", "api_error", "timeout_error", "invalid_request_error", "billing_error", "something_new"]
      .map((type) => streamError({ type, message: "m" }))
    expect(codes.map((f) => [f.code, f.retryable])).toEqual([
      ["model_rate_limited", true],
      ["model_unavailable", true],
      ["model_unavailable", true],
      ["model_unavailable", true],
      ["model_rejected", false],
      ["model_rejected", false],
      ["model_failed", false]
    ])
    expect(codes.every((f) => f.ambiguous)).toBe(true)
    expect(streamError(undefined)).toMatchObject({ code: "model_failed", ambiguous: true })
    // Before message_start, a refusal changed nothing: not ambiguous; anything else may have run.
    const early = ["rate_limit_error", "invalid_request_error", "overloaded_error", "something_new"]
      .map((type) => streamError({ type, message: "m" }, false))
    expect(early.map((f) => [f.code, f.ambiguous])).toEqual([
      ["model_rate_limited", false],
      ["model_rejected", false],
      ["model_unavailable", true],
      ["model_failed", true]
    ])
    const spent = streamError({ type: "rate_limit_error", message: "m", details: { error_code: "enforced_spend_limit_reached" } }, false)
    expect(spent).toMatchObject({ code: "model_rate_limited", ambiguous: false, retryable: false })
  })

  it.live("a connection cut mid-stream is model_stream_broken, ambiguous; the deltas before the cut were delivered", () =>
    Effect.gen(function*() {
      const { result, deltas } = yield* once({ steps: [...F.textAnswer.slice(0, 5), { pauseMs: 20 }, "event: content_block_delta\ndata: {\"ty", { cut: true }] })
      expect(failure(result)).toMatchObject({ code: "model_stream_broken", ambiguous: true })
      expect(joinedText(deltas)).toBe("Hello, world")
    }))

  it.live("a stream that closes without message_stop is model_stream_broken, ambiguous", () =>
    Effect.gen(function*() {
      const { result } = yield* once({ steps: F.withoutMessageStop })
      expect(failure(result)).toMatchObject({ code: "model_stream_broken", ambiguous: true, retryable: true })
    }))

  it.live("a stall past the deadline is model_timeout, ambiguous", () =>
    Effect.gen(function*() {
      const { result } = yield* once({ steps: [...F.textAnswer.slice(0, 3), { stall: true }] }, ask, { limits: { stallMs: 300, maxOutputBytes: 0 } })
      expect(failure(result)).toMatchObject({ code: "model_timeout", ambiguous: true })
    }))

  it.live("output past the byte limit is model_output_limit, ambiguous", () =>
    Effect.gen(function*() {
      const long = [F.messageStart("msg_01Long"), F.textStart(0), ...Array.from({ length: 100 }, () => F.textDelta(0, "x".repeat(100))), F.blockStop(0), F.messageDelta("end_turn"), F.messageStop]
      const { result } = yield* once({ steps: long }, ask, { limits: { stallMs: 5_000, maxOutputBytes: 4_000 } })
      expect(failure(result)).toMatchObject({ code: "model_output_limit", ambiguous: true })
    }))

  it.live("a garbage chunk (a data line that is not JSON, or a known event of the wrong shape) is model_bad_response, ambiguous", () =>
    Effect.gen(function*() {
      const garbage = yield* once({ steps: F.garbageChunk })
      expect(failure(garbage.result)).toMatchObject({ code: "model_bad_response", ambiguous: true })
      const shape = yield* once({ steps: F.wrongShape })
      expect(failure(shape.result)).toMatchObject({ code: "model_bad_response", ambiguous: true, details: { event: "content_block_delta" } })
    }))

  it.live("tool-call arguments that are not JSON are model_bad_response, ambiguous, naming the call and the stop reason; retryable when the answer was not cut", () =>
    Effect.gen(function*() {
      const { result } = yield* once({ steps: F.badToolArguments })
      expect(failure(result)).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        retryable: true,
        details: { tool_call_id: "toolu_01Bad", name: "get_weather", stop_reason: "tool_calls", provider_stop_reason: "tool_use" }
      })
    }))

  it.live("a tool_use input cut off by max_tokens is judged once the stop reason comes after its block: model_bad_response, not retryable (the same request is cut the same way), naming max_tokens", () =>
    Effect.gen(function*() {
      const cut = (stop: string) => [
        F.messageStart("msg_01Cut"),
        F.toolStart(0, "toolu_01Cut", "write"),
        F.jsonDelta(0, "{\"text\": \"Once upon a ti"),
        F.blockStop(0),
        F.messageDelta(stop, { output_tokens: 4096 }),
        F.messageStop
      ]
      const { result } = yield* once({ steps: cut("max_tokens") })
      expect(failure(result)).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        retryable: false,
        details: { tool_call_id: "toolu_01Cut", name: "write", stop_reason: "max_tokens", provider_stop_reason: "max_tokens" }
      })
      const window = yield* once({ steps: cut("model_context_window_exceeded") })
      expect(failure(window.result)).toMatchObject({
        code: "model_bad_response",
        retryable: false,
        details: { stop_reason: "max_tokens", provider_stop_reason: "model_context_window_exceeded" }
      })
    }))

  it.live("connection refused is model_unreachable, not ambiguous", () =>
    Effect.gen(function*() {
      const fake = yield* Effect.promise(() => FakeProvider.start(() => ({ steps: [] })))
      const url = fake.url
      yield* Effect.promise(() => fake.close())
      const result = yield* Effect.either(anthropic({
        binding: binding(url),
        apiKey: Redacted.make(KEY),
        request: ask,
        onDelta: () => undefined,
        limits: { stallMs: 2_000, maxOutputBytes: 0 }
      })).pipe(Effect.provide(NodeHttpClient.dispatcherLayer))
      expect(failure(result)).toMatchObject({ code: "model_unreachable", ambiguous: false })
    }))

  it.live("the API key is sent only in x-api-key, and appears in no result or failure", () =>
    Effect.gen(function*() {
      const answered = yield* once({ steps: F.textAnswer })
      expect(answered.fake.requests[0]!.headers["x-api-key"]).toBe(KEY)
      expect(answered.fake.requests[0]!.text).not.toContain(KEY)
      expect(JSON.stringify(ok(answered.result))).not.toContain(KEY)
      const outcomes = [
        yield* once({ status: 401, headers: { "content-type": "application/json" }, steps: [F.errorBody("authentication_error", "invalid x-api-key")] }),
        yield* once({ steps: F.overloadedMidStream }),
        yield* once({ steps: F.garbageChunk }),
        yield* once({ steps: F.withoutMessageStop })
      ]
      for (const outcome of outcomes) {
        const f = failure(outcome.result)
        expect(JSON.stringify(f)).not.toContain(KEY)
        expect(f.message).not.toContain(KEY)
        expect(JSON.stringify(f.details ?? null)).not.toContain(KEY)
      }
      const keyless = yield* once({ steps: F.textAnswer }, ask, { apiKey: false })
      expect(keyless.fake.requests[0]!.headers["x-api-key"]).toBeUndefined()
    }))

  it.live("a key Anthropic or a gateway echoes back (in a 401 body, or in an error event's message) is redacted from the failure's message and details", () =>
    Effect.gen(function*() {
      const outcomes = [
        yield* once({ status: 401, headers: { "content-type": "application/json" }, steps: [F.errorBody("authentication_error", `invalid x-api-key ${KEY}`)] }),
        yield* once({ steps: [...F.overloadedMidStream.slice(0, -1), F.event("error", { error: { type: "authentication_error", message: `invalid x-api-key ${KEY}` } })] })
      ]
      for (const outcome of outcomes) {
        const f = failure(outcome.result)
        expect(f.code).toBe("model_rejected")
        expect(JSON.stringify(f.details)).toContain("invalid x-api-key <redacted>")
        expect(`${f.message} ${JSON.stringify(f.details)}`).not.toContain(KEY)
      }
      expect(failure(outcomes[1]!.result).message).toContain("invalid x-api-key <redacted>")
    }))

  it.live("a usage count that is not a non-negative integer (a fraction, a negative, a string) is treated as not sent: the answer is kept, and a later count still counts", () =>
    Effect.gen(function*() {
      const { result } = yield* once({
        steps: [
          F.messageStart("msg_odd", { input_tokens: 2.5, output_tokens: -1, cache_read_input_tokens: "3" }),
          ...F.textAnswer.slice(1, -2),
          F.messageDelta("end_turn", { output_tokens: 15, input_tokens: -4 }),
          F.messageStop
        ]
      })
      expect(ok(result).text).toBe("Hello, world!")
      expect(ok(result).usage).toEqual({ output_tokens: 15 })
    }))

  it.live("a cancel aborts the request: the provider's connection is closed (by the cancel, the dispatcher still open)", () =>
    Effect.gen(function*() {
      // A server that streams the start of an answer and then holds the connection open.
      const closed = yield* Deferred.make<void>()
      const server = http.createServer((req, res) => {
        req.resume()
        res.on("close", () => Effect.runFork(Deferred.succeed(closed, undefined)))
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.write([F.messageStart("msg_01Cancel"), F.textStart(0), F.textDelta(0, "Thinking")].join(""))
      })
      const port = yield* Effect.promise(() =>
        new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as net.AddressInfo).port)))
      )
      const firstDelta = yield* Deferred.make<void>()
      const fiber = yield* anthropic({
        binding: binding(`http://127.0.0.1:${port}`),
        apiKey: Redacted.make(KEY),
        request: ask,
        onDelta: () => void Effect.runFork(Deferred.succeed(firstDelta, undefined)),
        limits: { stallMs: 0, maxOutputBytes: 0 }
      }).pipe(Effect.fork)
      yield* Deferred.await(firstDelta)
      yield* Fiber.interrupt(fiber)
      const seen = yield* Deferred.await(closed).pipe(Effect.timeoutOption("5 seconds"))
      server.closeAllConnections()
      yield* Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
      expect(seen._tag).toBe("Some")
    }).pipe(Effect.provide(NodeHttpClient.dispatcherLayer)))
})
