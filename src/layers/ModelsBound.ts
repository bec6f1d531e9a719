/**
 * Models over the scripted provider and the named bindings: a session created with a binding name
 * talks to what that binding stood for at its creation (recorded in its configuration), with the
 * key the binding names now, and only while the binding still sends to the recorded place (its
 * provider at its base URL, docs/models.md): a key is never sent to a server, or as a provider,
 * it was not configured for. Otherwise the call fails before anything is sent, not ambiguous: a
 * binding that has since disappeared `model_binding_missing`, one that now sends elsewhere
 * `model_binding_moved`. Nothing falls over to another provider. A live delta holding the key
 * whole is handed on with it redacted (the recorded answer is redacted in models/Http.ts).
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Effect, Layer, Redacted } from "effect"
import type { ModelDelta } from "../domain/Model.js"
import { endpointChange, keyRedacted, type ModelProvider } from "../domain/ModelBinding.js"
import { redactText } from "../domain/Redaction.js"
import { ModelBindings } from "../services/ModelBindings.js"
import { ModelFailed, Models, type ModelsShape } from "../services/Models.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { scriptedWithin } from "./ModelsScripted.js"
import type { Provider } from "./models/Provider.js"

export type Providers = Partial<Record<ModelProvider, Provider>>

const missing = (message: string) => new ModelFailed({ code: "model_binding_missing", message, ambiguous: false, retryable: false })
const moved = (message: string) => new ModelFailed({ code: "model_binding_moved", message, ambiguous: false, retryable: false })

/**
 * `onDelta` with the key redacted from each delta that holds it whole (a gateway echoing the
 * request as its answer): live deltas are never journaled, but they are shown. A key split across
 * two deltas passes; the answer recorded is redacted whole (models/Http.ts). A key shorter than
 * MIN_REDACTED_KEY_CHARS (a placeholder: `keyRedacted`) is not redacted, here as there.
 */
const deltasWithout = (onDelta: (delta: ModelDelta) => void, apiKey: Redacted.Redacted | undefined): (delta: ModelDelta) => void => {
  if (apiKey === undefined) return onDelta
  const secrets = [Redacted.value(apiKey)].filter(keyRedacted)
  if (secrets.length === 0) return onDelta
  const key = secrets[0]!
  return (delta) => {
    if (delta.type === "text") return onDelta(delta.text.includes(key) ? { type: "text", text: redactText(delta.text, secrets) } : delta)
    const { id, input_delta, name } = delta
    if (!input_delta.includes(key) && !(id?.includes(key) ?? false) && !(name?.includes(key) ?? false)) return onDelta(delta)
    onDelta({
      ...delta,
      input_delta: redactText(input_delta, secrets),
      ...(id !== undefined ? { id: redactText(id, secrets) } : {}),
      ...(name !== undefined ? { name: redactText(name, secrets) } : {})
    })
  }
}

export const make = (providers: Providers) =>
  Effect.gen(function*() {
    const bindings = yield* ModelBindings
    const config = yield* ServerConfig
    const dispatcher = yield* NodeHttpClient.Dispatcher
    const limits = { stallMs: config.maxModelMs, maxOutputBytes: config.maxModelOutputBytes }
    // The scripted provider is held to the same bounds as an HTTP one (docs/operations.md).
    const scripted = scriptedWithin(limits)
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
          const change = endpointChange(binding, bound.binding)
          if (change !== undefined) {
            return Effect.fail(moved(`the model binding ${JSON.stringify(name)} this session was created with now sends elsewhere: ${change}; nothing was sent`))
          }
          const provider = providers[binding.provider]
          if (!provider) return Effect.fail(missing(`the provider ${binding.provider} is not available in this build`))
          return provider({
            binding,
            apiKey: bound.apiKey,
            request: call.request,
            onDelta: deltasWithout(call.onDelta ?? (() => undefined), bound.apiKey),
            limits
          }).pipe(Effect.provideService(NodeHttpClient.Dispatcher, dispatcher))
        })
    }
    return service
  })

/** Models with these providers; needs ModelBindings, ServerConfig and undici's Dispatcher (`NodeHttpClient.dispatcherLayer`). */
export const layer = (providers: Providers) => Layer.effect(Models, make(providers))
