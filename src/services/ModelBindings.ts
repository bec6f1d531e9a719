/**
 * ModelBindings: the named model bindings this server was started with (BRAIN_MODELS). A create
 * body names one as `model`; the session records its non-secret fields then, so editing the file
 * later never changes what an existing session talks to. Keys stay Redacted until a request
 * header is written.
 */
import { Context, Data, type Redacted } from "effect"
import type { ModelBinding } from "../domain/ModelBinding.js"

export interface BoundModel {
  readonly binding: ModelBinding
  /** The value of the binding's `api_key_env`, when it names one. */
  readonly apiKey: Redacted.Redacted | undefined
}

export interface ModelBindingsShape {
  /** Every binding's name, sorted. */
  readonly names: ReadonlyArray<string>
  readonly get: (name: string) => BoundModel | undefined
}

export class ModelBindings extends Context.Tag("brain/ModelBindings")<ModelBindings, ModelBindingsShape>() {}

/** BRAIN_MODELS cannot be used: where (`source`), which field, and why. Never quotes a value. */
export class ModelBindingsInvalid extends Data.TaggedError("ModelBindingsInvalid")<{
  readonly source: string
  readonly field: string
  readonly reason: string
}> {
  override get message() {
    return this.field === "" ? `${this.source}: ${this.reason}` : `${this.source}: ${this.field}: ${this.reason}`
  }
}

export const noBindings: ModelBindingsShape = { names: [], get: () => undefined }
