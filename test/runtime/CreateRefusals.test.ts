/**
 * What a create refuses after its body decodes (DESIGN §7: `details` lists the issues, each with
 * the `path` of the field at fault): a loop or a Wasm tool that cannot run, a model binding that
 * is not configured, a tool name the bound provider refuses, and one tool name declared twice —
 * a model's call names a tool by its name alone, so two definitions of one name leave a call
 * without one meaning. Each is a 400 that writes nothing, and its issue names the field.
 */
import { describe, expect, it } from "@effect/vitest"
import { NodeHttpClient } from "@effect/platform-node"
import { Effect, Either, Layer } from "effect"
import * as ModelsBound from "../../src/layers/ModelsBound.js"
import { type BoundModel, ModelBindings, type ModelBindingsShape } from "../../src/services/ModelBindings.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

const table = new Map<string, BoundModel>([["claude", { binding: { provider: "anthropic", model: "claude-sonnet-4-5" }, apiKey: undefined }]])
const bindings: ModelBindingsShape = { get names() { return [...table.keys()] }, get: (n) => table.get(n) }

describe("a create refused after its body decodes", () => {
  it.scoped("one tool name declared twice is refused (400, nothing written), its issue at the second declaration's name; distinct names are taken", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const refused = yield* Effect.flip(sessions.create({ model: { provider: "scripted" }, tools: [{ name: "read" }, { name: "write" }, { name: "read", description: "again" }] }))
      expect(refused).toMatchObject({ code: "invalid_request", details: [{ path: ["tools", 2, "name"] }] })
      expect(refused.message).toContain("\"read\"")
      expect((yield* sessions.list({ limit: 10 })).sessions).toHaveLength(0)
      yield* sessions.create({ model: { provider: "scripted" }, tools: [{ name: "read" }, { name: "Read" }] })
      expect((yield* sessions.list({ limit: 10 })).sessions).toHaveLength(1)
    }).pipe(Effect.provide(runtimeLayer({}))))

  it.scoped("a loop, a Wasm tool's module, a binding name and a tool name the provider refuses are each refused with the field's path, nothing written", () =>
    Effect.gen(function*() {
      const models = yield* ModelsBound.make({ anthropic: () => Effect.succeed({ text: "hi", tool_calls: [], stop_reason: "end" as const }) }).pipe(
        Effect.provide(Layer.mergeAll(Layer.succeed(ModelBindings, bindings), ServerConfig.layerWith({}), NodeHttpClient.dispatcherLayer))
      )
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const pathOf = (request: Parameters<typeof sessions.create>[0]) =>
          Effect.map(Effect.either(sessions.create(request)), (r) => Either.isLeft(r) ? (r.left.details as Array<{ path: unknown }> | undefined)?.[0]?.path : "created")
        expect(yield* pathOf({ agentloop: "no-such-loop", model: { provider: "scripted" } })).toEqual(["agentloop"])
        expect(yield* pathOf({ model: { provider: "scripted" }, tools: [{ name: "t" }, { name: "w", module: "0".repeat(64) }] })).toEqual(["tools", 1, "module"])
        expect(yield* pathOf({ model: "no-such-binding" })).toEqual(["model"])
        expect(yield* pathOf({ model: "claude", tools: [{ name: "fine" }, { name: "read file" }] })).toEqual(["tools", 1, "name"])
        expect((yield* sessions.list({ limit: 10 })).sessions).toHaveLength(0)
      }).pipe(Effect.provide(runtimeLayer({ models, bindings })))
    }))
})
