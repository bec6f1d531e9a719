/**
 * Models: sends one model request to the provider the session's configuration names.
 * Called only inside the EffectFence; it never retries and never fails over.
 */
import { Context, Data, type Effect } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { ModelChoice } from "../domain/Configuration.js"
import type { ModelRequest, ModelResult } from "../domain/Model.js"

export class ModelFailed extends Data.TaggedError("ModelFailed")<{
  readonly message: string
  /** True when the request may have been processed (lost connection after sending). */
  readonly ambiguous: boolean
  readonly retryable: boolean
}> {}

export interface ModelCall {
  readonly session: SessionId
  /** The `model_call_started` sequence: the call's name. */
  readonly sequence: number
  /** How many model calls this session made before this one (drives the scripted provider). */
  readonly index: number
  readonly model: typeof ModelChoice.Type
  readonly request: ModelRequest
}

export interface ModelsShape {
  readonly call: (call: ModelCall) => Effect.Effect<ModelResult, ModelFailed>
}

export class Models extends Context.Tag("brain/Models")<Models, ModelsShape>() {}
