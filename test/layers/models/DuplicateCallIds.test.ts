/**
 * A provider's answer whose tool calls share an id (a provider's defect): every provider fails
 * the call `model_bad_response`, ambiguous (the model ran) and retryable, naming the id, so that no
 * loop is handed a round whose results could not be told apart (Brain's `dispatch` would refuse it
 * `invalid_request`, a code for a client's bad input). The failure keeps what came: the answer,
 * in `details.answer`. Answers with distinct ids are unaffected. Against a fake server on loopback
 * speaking each provider's stream (test/fixtures/providers/).
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Redacted } from "effect"
import type { ModelResult } from "../../../src/domain/Model.js"
import type { RecordedBinding } from "../../../src/domain/ModelBinding.js"
import { anthropic } from "../../../src/layers/models/Anthropic.js"
import { openAiChat } from "../../../src/layers/models/OpenAiChat.js"
import { openAiResponses } from "../../../src/layers/models/OpenAiResponses.js"
import type { Provider } from "../../../src/layers/models/Provider.js"
import type { ModelFailed } from "../../../src/services/Models.js"
import { FakeProvider, type Step } from "../../support/fakeProvider.js"
import * as Claude from "../../fixtures/providers/anthropic.js"
import { DONE, openAi } from "../../fixtures/providers/openaiChat.js"
import * as Responses from "../../fixtures/providers/openaiResponses.js"

/** One call of `provider` against a fake answering `steps`. */
const callWith = (provider: Provider, kind: RecordedBinding["provider"], base: (url: string) => string, steps: ReadonlyArray<Step>) =>
  Effect.acquireUseRelease(
    Effect.promise(() => FakeProvider.start(() => ({ steps }))),
    (fake) =>
      Effect.either(provider({
        binding: { name: "m", provider: kind, model: "some-model", base_url: base(fake.url) },
        apiKey: Redacted.make("sk-test-dupids"),
        request: { messages: [{ role: "user", content: "go" }] },
        onDelta: () => undefined,
        limits: { stallMs: 5_000, maxOutputBytes: 0 }
      })).pipe(Effect.map((result) => ({ result, sent: fake.requests.length }))),
    (fake) => Effect.promise(() => fake.close())
  ).pipe(Effect.provide(NodeHttpClient.dispatcherLayer))

/** Each provider's stream of two tool calls with the ids given. */
const providers: ReadonlyArray<readonly [string, (a: string, b: string) => Effect.Effect<{ result: Either.Either<ModelResult, ModelFailed>; sent: number }>]> = [
  ["anthropic", (a, b) =>
    callWith(anthropic, "anthropic", (url) => url, [
      Claude.messageStart("msg_dup"),
      Claude.toolStart(0, a, "read"),
      Claude.jsonDelta(0, "{\"n\": 1}"),
      Claude.blockStop(0),
      Claude.toolStart(1, b, "read"),
      Claude.jsonDelta(1, "{\"n\": 2}"),
      Claude.blockStop(1),
      Claude.messageDelta("tool_use"),
      Claude.messageStop
    ])],
  ["openai-chat", (a, b) =>
    callWith(openAiChat, "openai-chat", (url) => `${url}/v1`, [
      openAi.delta({ role: "assistant", content: null, tool_calls: [{ index: 0, id: a, type: "function", function: { name: "read", arguments: "{\"n\": 1}" } }] }),
      openAi.delta({ tool_calls: [{ index: 1, id: b, type: "function", function: { name: "read", arguments: "{\"n\": 2}" } }] }),
      openAi.delta({}, "tool_calls"),
      DONE
    ])],
  ["openai-responses", (a, b) => {
    const items = [
      Responses.functionCall(0, "fc_1", a, "read", ["{\"n\": 1}"]),
      Responses.functionCall(1, "fc_2", b, "read", ["{\"n\": 2}"])
    ]
    return callWith(openAiResponses, "openai-responses", (url) => `${url}/v1`, Responses.respond(items, Responses.completed(items)))
  }]
]

describe("an answer with two tool calls under the same id", () => {
  for (const [name, twoCalls] of providers) {
    it.live(`${name}: fails model_bad_response, ambiguous and retryable, naming the id, the answer kept in details; distinct ids answer as ever`, () =>
      Effect.gen(function*() {
        const { result, sent } = yield* twoCalls("call_same", "call_same")
        expect(sent, "sent once").toBe(1)
        expect(Either.isLeft(result), JSON.stringify(result)).toBe(true)
        const failure = (result as Either.Left<ModelFailed, ModelResult>).left
        expect(failure).toMatchObject({ code: "model_bad_response", ambiguous: true, retryable: true })
        expect(failure.message).toContain(`"call_same"`)
        const details = failure.details as { call_id: string; indexes: Array<number>; answer: ModelResult }
        expect(details.call_id).toBe("call_same")
        expect(details.indexes).toEqual([0, 1])
        expect(details.answer.tool_calls).toEqual([
          { id: "call_same", name: "read", input: { n: 1 } },
          { id: "call_same", name: "read", input: { n: 2 } }
        ])
        expect(details.answer.stop_reason).toBe("tool_calls")

        const distinct = yield* twoCalls("call_a", "call_b")
        expect(Either.isRight(distinct.result), JSON.stringify(distinct.result)).toBe(true)
        expect((distinct.result as Either.Right<ModelFailed, ModelResult>).right.tool_calls.map((c) => c.id)).toEqual(["call_a", "call_b"])
      }))
  }
})
