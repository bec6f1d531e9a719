/**
 * Models over the scripted provider and the named bindings: a session created with a binding name
 * talks to what that binding stood for at its creation (recorded in its configuration), with the
 * key the binding names now. A binding that has since disappeared fails the call before anything
 * is sent (`model_binding_missing`); nothing falls over to another provider.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Effect, Layer } from "effect"
import type { ModelProvider } from "../domain/ModelBinding.js"
import { ModelBindings } from "../services/ModelBindings.js"
import { ModelFailed, Models, type ModelsShape } from "../services/Models.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { scripted } from "./ModelsScripted.js"
import type { Provider } from "./models/Provider.js"

export type Providers = Partial<Record<ModelProvider, Provider>>

const missing = (message: string) => new ModelFailed({ code: "model_binding_missing", message, ambiguous: false, retryable: false })

export const make = (providers: Providers) =>
  Effect.gen(function*() {
    const bindings = yield* ModelBindings
    const config = yield* ServerConfig
    const dispatcher = yield* NodeHttpClient.Dispatcher
    const limits = { stallMs: config.maxModelMs, maxOutputBytes: config.maxModelOutputBytes }
    const service: ModelsShape = {
      call: (call) =>
        Effect.suspend(() => {
          if (typeof call.model !== "string") return scripted.call(call)
          const name = call.model
          const bound = bindings.get(name)
          if (!bound) {
            return Effect.fail(missing(`the model binding ${JSON.stringify(name)} this session was created with is no longer configured`))
          }
          const binding = call.binding ?? { name, ...bound.binding }
          const provider = providers[binding.provider]
          if (!provider) return Effect.fail(missing(`the provider ${binding.provider} is not available in this build`))
          return provider({
            binding,
            apiKey: bound.apiKey,
            request: call.request,
            onDelta: call.onDelta ?? (() => undefined),
            limits
          }).pipe(Effect.provideService(NodeHttpClient.Dispatcher, dispatcher))
        })
    }
    return service
  })

/** Models with these providers; needs ModelBindings, ServerConfig and undici's Dispatcher (`NodeHttpClient.dispatcherLayer`). */
export const layer = (providers: Providers) => Layer.effect(Models, make(providers))
