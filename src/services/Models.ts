/**
 * Models: sends one model request to the provider the session's configuration names.
 * Called only inside the EffectFence; it never retries and never fails over.
 */
import { Context, Data, type Effect } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { ModelChoice } from "../domain/Configuration.js"
import type { FailureCode } from "../domain/Failure.js"
import type { ModelDelta, ModelRequest, ModelResult } from "../domain/Model.js"
import type { RecordedBinding } from "../domain/ModelBinding.js"

/** The codes a model call fails with (recorded in `model_call_failed`). */
export type ModelFailureCode = Extract<FailureCode, `model_${string}`>

export class ModelFailed extends Data.TaggedError("ModelFailed")<{
  readonly code: ModelFailureCode
  readonly message: string
  /** True when the request may have been processed (lost connection after sending). */
  readonly ambiguous: boolean
  /** Advice to the loop: the same request might succeed later. Brain itself never retries. */
  readonly retryable: boolean
  /** The provider's status and error body, its retry-after advice, … */
  readonly details?: unknown
}> {}

export interface ModelCall {
  readonly session: SessionId
  /** The `model_call_started` sequence: the call's name. */
  readonly sequence: number
  /** How many model calls this session made before this one (drives the scripted provider). */
  readonly index: number
  readonly model: typeof ModelChoice.Type
  /** For a named binding: what it stood for when the session was created (recorded then). */
  readonly binding?: RecordedBinding
  readonly request: ModelRequest
  /** Receives each piece of the answer as it streams in: live only, never journaled. */
  readonly onDelta?: (delta: ModelDelta) => void
}

export interface ModelsShape {
  readonly call: (call: ModelCall) => Effect.Effect<ModelResult, ModelFailed>
}

export class Models extends Context.Tag("brain/Models")<Models, ModelsShape>() {}
