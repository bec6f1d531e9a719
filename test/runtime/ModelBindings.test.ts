/**
 * Named model bindings in sessions (DESIGN §9): a create body names a binding; an unknown name is
 * refused at create listing the known ones; the binding's non-secret fields are recorded at
 * creation, so editing the bindings later never changes what an existing session talks to; a
 * binding that has since disappeared fails the turn with model_binding_missing, sending nothing;
 * a binding that now sends elsewhere (another provider, another base URL) fails it with
 * model_binding_moved, sending nothing: its current key never reaches the recorded server.
 */
import { describe, expect, it } from "@effect/vitest"
import { NodeHttpClient } from "@effect/platform-node"
import { Effect, Either, Layer, Redacted } from "effect"
import type { ModelBinding } from "../../src/domain/ModelBinding.js"
import { load } from "../../src/layers/ModelBindingsConfig.js"
import * as ModelsBound from "../../src/layers/ModelsBound.js"
import type { ProviderCall } from "../../src/layers/models/Provider.js"
import { type BoundModel, ModelBindings, type ModelBindingsShape } from "../../src/services/ModelBindings.js"
import { Journal } from "../../src/services/Journal.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"
import { FakeProvider, sse } from "../support/fakeProvider.js"
import { openAiText } from "../fixtures/providers/openaiChat.js"
import * as AnthropicFixture from "../fixtures/providers/anthropic.js"
import { anthropic } from "../../src/layers/models/Anthropic.js"
import { openAiChat } from "../../src/layers/models/OpenAiChat.js"

const KEY = "sk-bound-secret-key"

describe("named model bindings", () => {
  it.scoped("a session records its binding at creation and keeps talking to it after the file changes; a removed binding fails the turn before anything is sent", () =>
    Effect.gen(function*() {
      const table = new Map<string, BoundModel>([
        ["fast", { binding: { provider: "openai-chat", model: "model-one", options: { temperature: 0 } } as ModelBinding, apiKey: Redacted.make(KEY) }]
      ])
      const bindings: ModelBindingsShape = { get names() { return [...table.keys()].sort() }, get: (n) => table.get(n) }
      const calls: Array<ProviderCall> = []
      const provider = (call: ProviderCall) =>
        Effect.sync(() => {
          calls.push(call)
          call.onDelta({ type: "text", text: "hi" })
          return { text: "hi", tool_calls: [], stop_reason: "end" as const }
        })
      const models = yield* ModelsBound.make({ "openai-chat": provider }).pipe(
        Effect.provide(Layer.mergeAll(Layer.succeed(ModelBindings, bindings), ServerConfig.layerWith({}), NodeHttpClient.dispatcherLayer))
      )
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const journal = yield* Journal
        const refused = yield* Effect.either(sessions.create({ model: "slow" }))
        expect(Either.isLeft(refused) && refused.left.code).toBe("invalid_request")
        expect(Either.isLeft(refused) && refused.left.message).toContain('"fast"')

        const { session_id } = yield* sessions.create({ model: "fast" })
        const [created] = yield* journal.read(session_id, { after: 0, limit: 1 })
        expect(created!.payload.configuration.model_binding).toEqual({
          name: "fast",
          provider: "openai-chat",
          model: "model-one",
          options: { temperature: 0 }
        })
        expect(JSON.stringify(created!.payload)).not.toContain(KEY)

        // The file changes: the same name now means another model. The session keeps the one it recorded.
        table.set("fast", { binding: { provider: "openai-chat", model: "model-two" }, apiKey: Redacted.make(KEY) })
        const first = yield* sessions.send(session_id, { message: "hello" })
        expect(first.turn.status, JSON.stringify(first.turn.failure)).toBe("ended")
        expect(calls[0]!.binding.model).toBe("model-one")
        expect(Redacted.value(calls[0]!.apiKey!)).toBe(KEY)
        // A new session gets what the name means now.
        const later = yield* sessions.create({ model: "fast" })
        yield* sessions.send(later.session_id, { message: "hello" })
        expect(calls[1]!.binding.model).toBe("model-two")

        // The binding disappears: the next turn's model call fails typed, and nothing was sent.
        table.delete("fast")
        const orphan = yield* sessions.send(session_id, { message: "again" })
        expect(orphan.turn.status).toBe("failed")
        expect(orphan.turn.failure).toMatchObject({ code: "model_binding_missing", ambiguous: false })
        expect(calls).toHaveLength(2)
        const failed = (yield* journal.read(session_id, { after: 0, limit: 100 })).find((r) => r.kind === "model_call_failed")
        expect(failed!.payload.failure.code).toBe("model_binding_missing")
      }).pipe(Effect.provide(runtimeLayer({ models, bindings })))
    }))

  it.scoped("a binding whose base_url was written in another case or without its // (HTTP://, Https://, http:host, backslashes) creates sessions, recording the URL as parsed; a binding a session could not record is refused naming the binding at [\"model\"], never with a schema, and nothing is written", () =>
    Effect.gen(function*() {
      const loaded = yield* load(JSON.stringify({
        upper: { provider: "openai-chat", model: "m", base_url: "HTTP://127.0.0.1:4700/v1" },
        mixed: { provider: "anthropic", model: "m", base_url: "Https://Gateway.Example.com" },
        slashless: { provider: "openai-responses", model: "m", base_url: "http:127.0.0.1:4700/v1" },
        backslashed: { provider: "openai-chat", model: "m", base_url: "http:\\\\127.0.0.1:4700\\v1" }
      }), new Set(["openai-chat", "openai-responses", "anthropic"] as const))
      // Held as no loaded binding can be: as written, in a form no session record takes.
      const unrecordable: BoundModel = { binding: { provider: "openai-chat", model: "m", base_url: "HTTP://127.0.0.1:4700/v1" }, apiKey: undefined }
      const bindings: ModelBindingsShape = {
        names: [...loaded.names, "raw"].sort(),
        get: (n) => (n === "raw" ? unrecordable : loaded.get(n))
      }
      const provider = () => Effect.succeed({ text: "hi", tool_calls: [], stop_reason: "end" as const })
      const models = yield* ModelsBound.make({ anthropic: provider, "openai-responses": provider, "openai-chat": provider }).pipe(
        Effect.provide(Layer.mergeAll(Layer.succeed(ModelBindings, bindings), ServerConfig.layerWith({}), NodeHttpClient.dispatcherLayer))
      )
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const journal = yield* Journal
        const recorded: Record<string, string> = {}
        for (const name of ["upper", "mixed", "slashless", "backslashed"]) {
          const { session_id } = yield* sessions.create({ model: name })
          const [created] = yield* journal.read(session_id, { after: 0, limit: 1 })
          recorded[name] = created!.payload.configuration.model_binding.base_url
        }
        expect(recorded).toEqual({
          upper: "http://127.0.0.1:4700/v1",
          mixed: "https://gateway.example.com/",
          slashless: "http://127.0.0.1:4700/v1",
          backslashed: "http://127.0.0.1:4700/v1"
        })
        const refused = yield* Effect.flip(sessions.create({ model: "raw" }))
        expect(refused.code).toBe("invalid_request")
        expect(refused.message).toContain('"raw"')
        expect(refused.message).toContain("base_url")
        expect(refused.message).not.toMatch(/readonly|payload/)
        expect(refused.details).toEqual([{ path: ["model"], message: refused.message }])
        expect((yield* sessions.list({ limit: 100 })).sessions).toHaveLength(4)
      }).pipe(Effect.provide(runtimeLayer({ models, bindings })))
    }))

  it.scoped("a key a gateway echoes back in a successful answer never enters the journal: the recorded result holds <redacted> in its place, no record holds the key, and a live delta holding it whole has it redacted", () =>
    Effect.gen(function*() {
      const ECHOED = "sk-echoed-secret-5555"
      const gateway = yield* Effect.acquireRelease(
        Effect.promise(() => FakeProvider.start((req) => ({ steps: [sse({ choices: [{ index: 0, delta: { content: `your header was ${req.headers.authorization}` }, finish_reason: "stop" }] }), "data: [DONE]\n\n"] }))),
        (f) => Effect.promise(() => f.close())
      )
      const table = new Map<string, BoundModel>([
        ["gw", { binding: { provider: "openai-chat", model: "m", base_url: `${gateway.url}/v1`, api_key_env: "GW_KEY" }, apiKey: Redacted.make(ECHOED) }]
      ])
      const bindings: ModelBindingsShape = { names: ["gw"], get: (n) => table.get(n) }
      const context = yield* Layer.build(Layer.mergeAll(Layer.succeed(ModelBindings, bindings), ServerConfig.layerWith({}), NodeHttpClient.dispatcherLayer))
      const models = yield* ModelsBound.make({ "openai-chat": openAiChat }).pipe(Effect.provide(context))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const journal = yield* Journal
        const { session_id } = yield* sessions.create({ model: "gw" })
        const sent = yield* sessions.send(session_id, { message: "echo my header" })
        expect(sent.turn.status, JSON.stringify(sent.turn.failure)).toBe("ended")
        expect(gateway.requests[0]!.headers.authorization).toBe(`Bearer ${ECHOED}`)
        const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
        const ended = records.find((r) => r.kind === "model_call_ended")
        expect(ended!.payload.result.text).toBe("your header was <redacted>")
        expect(JSON.stringify(records)).not.toContain(ECHOED)
        // Live deltas: a key whole in one of them is redacted there too.
        const deltas: Array<unknown> = []
        yield* models.call({
          session: session_id,
          sequence: 1,
          index: 0,
          model: "gw",
          request: { messages: [{ role: "user", content: "again" }] },
          onDelta: (d) => void deltas.push(d)
        })
        expect(deltas).toEqual([{ type: "text", text: "your header was Bearer <redacted>" }])
      }).pipe(Effect.provide(runtimeLayer({ models, bindings })))
    }))

  it.scoped("a tool name the bound provider's own API refuses fails the create (400, nothing written); a binding to another server (a base_url) is not checked", () =>
    Effect.gen(function*() {
      const table = new Map<string, BoundModel>([
        ["claude", { binding: { provider: "anthropic", model: "claude-sonnet-4-5" }, apiKey: undefined }],
        ["gpt", { binding: { provider: "openai-responses", model: "gpt-4.1", base_url: "https://api.openai.com/v1" }, apiKey: undefined }],
        ["local", { binding: { provider: "openai-chat", model: "llama3.1", base_url: "http://127.0.0.1:11434/v1" }, apiKey: undefined }]
      ])
      const bindings: ModelBindingsShape = { get names() { return [...table.keys()].sort() }, get: (n) => table.get(n) }
      const provider = () => Effect.succeed({ text: "hi", tool_calls: [], stop_reason: "end" as const })
      const models = yield* ModelsBound.make({ anthropic: provider, "openai-responses": provider, "openai-chat": provider }).pipe(
        Effect.provide(Layer.mergeAll(Layer.succeed(ModelBindings, bindings), ServerConfig.layerWith({}), NodeHttpClient.dispatcherLayer))
      )
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const refused = (model: string, name: string) =>
          Effect.map(Effect.either(sessions.create({ model, tools: [{ name: "fine_name-1" }, { name }] })), (r) => Either.isLeft(r) ? r.left : undefined)
        const spaced = yield* refused("claude", "read file")
        expect(spaced).toMatchObject({ code: "invalid_request" })
        expect(spaced!.message).toContain("\"read file\"")
        expect(spaced!.message).toContain("anthropic")
        expect((yield* refused("gpt", "x".repeat(65)))?.code).toBe("invalid_request")
        expect(yield* refused("claude", "x".repeat(128))).toBeUndefined()
        expect(yield* refused("gpt", "x".repeat(64))).toBeUndefined()
        // Another server behind a base_url has its own rules.
        expect(yield* refused("local", "read file")).toBeUndefined()
        const listed = yield* sessions.list({ limit: 100 })
        expect(listed.sessions).toHaveLength(3)
      }).pipe(Effect.provide(runtimeLayer({ models, bindings })))
    }))

  it.scoped("a binding re-pointed to another server or provider fails an existing session's model call before anything is sent: its current key never reaches the recorded server", () =>
    Effect.gen(function*() {
      const OLD_KEY = "sk-old-gateway-111"
      const ROTATED_KEY = "sk-rotated-222"
      const NEW_KEY = "sk-REAL-OPENAI-333"
      const ANT_KEY = "sk-ant-444"
      const answer = (req: { path: string }) => ({ steps: req.path.endsWith("/v1/messages") ? AnthropicFixture.textAnswer : openAiText.steps })
      const oldGateway = yield* Effect.acquireRelease(Effect.promise(() => FakeProvider.start(answer)), (f) => Effect.promise(() => f.close()))
      const newServer = yield* Effect.acquireRelease(Effect.promise(() => FakeProvider.start(answer)), (f) => Effect.promise(() => f.close()))
      const table = new Map<string, BoundModel>()
      const bind = (binding: ModelBinding, key: string) => table.set("chat", { binding, apiKey: Redacted.make(key) })
      bind({ provider: "openai-chat", model: "m", base_url: `${oldGateway.url}/v1`, api_key_env: "GATEWAY_KEY" }, OLD_KEY)
      const bindings: ModelBindingsShape = { get names() { return [...table.keys()].sort() }, get: (n) => table.get(n) }
      // Built in the test's scope: the real providers use undici's dispatcher until the test ends.
      const context = yield* Layer.build(Layer.mergeAll(Layer.succeed(ModelBindings, bindings), ServerConfig.layerWith({}), NodeHttpClient.dispatcherLayer))
      const models = yield* ModelsBound.make({ "openai-chat": openAiChat, anthropic }).pipe(Effect.provide(context))
      const keysSeen = (fake: FakeProvider) => fake.requests.map((r) => r.headers.authorization ?? r.headers["x-api-key"])
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const journal = yield* Journal
        const { session_id } = yield* sessions.create({ model: "chat" })
        const first = yield* sessions.send(session_id, { message: "first" })
        expect(first.turn.status, JSON.stringify(first.turn.failure)).toBe("ended")
        expect(keysSeen(oldGateway)).toEqual([`Bearer ${OLD_KEY}`])

        // A rotated key (another variable, the same place, written with a trailing slash) applies at once.
        bind({ provider: "openai-chat", model: "m", base_url: `${oldGateway.url}/v1/`, api_key_env: "ROTATED" }, ROTATED_KEY)
        const rotated = yield* sessions.send(session_id, { message: "rotated" })
        expect(rotated.turn.status).toBe("ended")
        expect(keysSeen(oldGateway)).toEqual([`Bearer ${OLD_KEY}`, `Bearer ${ROTATED_KEY}`])

        // The name now points at another server: the old session's call fails, sent to neither.
        bind({ provider: "openai-chat", model: "m", base_url: `${newServer.url}/v1`, api_key_env: "OPENAI_KEY" }, NEW_KEY)
        const moved = yield* sessions.send(session_id, { message: "moved" })
        expect(moved.turn.status).toBe("failed")
        expect(moved.turn.failure).toMatchObject({ code: "model_binding_moved", ambiguous: false, retryable: false })
        expect(moved.turn.failure!.message).toBe(
          `the model binding "chat" this session was created with now sends elsewhere: its base_url changed from ${oldGateway.url}/v1 to ${newServer.url}/v1; nothing was sent`
        )
        expect(oldGateway.requests).toHaveLength(2)
        expect(newServer.requests).toHaveLength(0)

        // A new session gets what the name means now, with its key.
        const later = yield* sessions.create({ model: "chat" })
        const fresh = yield* sessions.send(later.session_id, { message: "hello" })
        expect(fresh.turn.status).toBe("ended")
        expect(keysSeen(newServer)).toEqual([`Bearer ${NEW_KEY}`])
        expect(oldGateway.requests).toHaveLength(2)

        // The same base URL under another provider: Anthropic's key would go to the recorded server as a bearer.
        bind({ provider: "anthropic", model: "claude", base_url: `${oldGateway.url}/v1`, api_key_env: "ANT" }, ANT_KEY)
        const otherProvider = yield* sessions.send(session_id, { message: "other provider" })
        expect(otherProvider.turn.failure).toMatchObject({ code: "model_binding_moved", ambiguous: false })
        expect(otherProvider.turn.failure!.message).toContain("its provider changed from openai-chat to anthropic")
        expect(oldGateway.requests).toHaveLength(2)
        expect(newServer.requests).toHaveLength(1)

        // Each refused call is journaled as started, then failed not ambiguous: a call that was never sent.
        const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
        const calls = records.filter((r) => r.kind === "model_call_started" || r.kind === "model_call_failed" || r.kind === "model_call_ended")
        expect(calls.map((r) => r.kind)).toEqual([
          "model_call_started", "model_call_ended",
          "model_call_started", "model_call_ended",
          "model_call_started", "model_call_failed",
          "model_call_started", "model_call_failed"
        ])
        for (const failed of calls.filter((r) => r.kind === "model_call_failed")) {
          expect(failed.payload.failure).toMatchObject({ code: "model_binding_moved", ambiguous: false, retryable: false })
        }
        const written = JSON.stringify(records)
        for (const key of [OLD_KEY, ROTATED_KEY, NEW_KEY, ANT_KEY]) expect(written).not.toContain(key)

        // Pointed back where the session recorded, the old session talks again.
        bind({ provider: "openai-chat", model: "m", base_url: `${oldGateway.url}/v1`, api_key_env: "GATEWAY_KEY" }, OLD_KEY)
        const back = yield* sessions.send(session_id, { message: "back" })
        expect(back.turn.status).toBe("ended")
        expect(keysSeen(oldGateway)).toEqual([`Bearer ${OLD_KEY}`, `Bearer ${ROTATED_KEY}`, `Bearer ${OLD_KEY}`])
        expect(newServer.requests).toHaveLength(1)
      }).pipe(Effect.provide(runtimeLayer({ models, bindings })))
    }))
})
