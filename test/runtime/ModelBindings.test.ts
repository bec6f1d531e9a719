/**
 * Named model bindings in sessions (DESIGN §9): a create body names a binding; an unknown name is
 * refused at create listing the known ones; the binding's non-secret fields are recorded at
 * creation, so editing the bindings later never changes what an existing session talks to; a
 * binding that has since disappeared fails the turn with model_binding_missing, sending nothing.
 */
import { describe, expect, it } from "@effect/vitest"
import { NodeHttpClient } from "@effect/platform-node"
import { Effect, Either, Layer, Redacted } from "effect"
import type { ModelBinding } from "../../src/domain/ModelBinding.js"
import * as ModelsBound from "../../src/layers/ModelsBound.js"
import type { ProviderCall } from "../../src/layers/models/Provider.js"
import { type BoundModel, ModelBindings, type ModelBindingsShape } from "../../src/services/ModelBindings.js"
import { Journal } from "../../src/services/Journal.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

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
        expect(first.turn.status).toBe("ended")
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
})
