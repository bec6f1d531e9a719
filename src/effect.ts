/**
 * Brain for Effect applications, exported from the package as `brain/effect`: the services the
 * server runs, as one layer an application provides to its own program (docs/embedding.md).
 *
 * `layer(overrides, extensions)` is the embedded default `brain serve` runs — the journal under
 * `dataDir`, the official loop in WebAssembly, the scripted model unless a binding names another —
 * without the HTTP server: the application calls `Sessions` itself. Its scope owns the data
 * directory (a lock file) and the journals; closing it answers every turn still running (recorded
 * `interrupted`, "the server is stopping") and ends every open stream before the journals close
 * (docs/runtime.md, "a closing runtime"). `serve` is the whole server, for an application that
 * wants it in its own process.
 *
 * This module is the package's contract for Effect users: what it exports is kept working, and
 * what it does not export (the layers' internals, the journal's formats) may change.
 */
import type { Layer } from "effect"
import type { Event as EventShape } from "./domain/Events.js"
import { EventSchema, type Extensions, servicesLayer } from "./main.js"
import { defaults, type ServerConfigShape } from "./services/ServerConfig.js"

export { type Extensions, serve, servicesLayer, StartupRefused } from "./main.js"
// What building the layer can fail with besides StartupRefused (`StartupError` below is the whole union): classes, so `instanceof` works as `catchTag` does.
export { DataDirError } from "./layers/journal/DataDir.js"
export { AgentloopRejected } from "./services/Agentloop.js"
export { EnvironmentBindingsInvalid } from "./domain/Environment.js"
export { IdempotencyStoreFailed } from "./services/Idempotency.js"
export { RegistrationsUnreadable } from "./layers/hosts/Registrations.js"
export { ModelBindingsInvalid } from "./services/ModelBindings.js"
export { TelemetrySinkFailed } from "./services/Telemetry.js"
export { sharedScheduler } from "./SharedScheduler.js"
export { defaults as configDefaults, ServerConfig, type ServerConfigShape } from "./services/ServerConfig.js"
export { fromConfig as configFromEnv } from "./services/ServerConfigEnv.js"

// The services, by their tags, with what each method takes, answers and fails with.
export type { AgentloopShape, AgentloopsShape, Host, ActivationInput, RuntimeEnvelope, ToolResult } from "./services/Agentloop.js"
// What a loop's `activate` fails with (the turn's failure); the Sessions' error of the same name is domain/Errors.ts's.
export { AgentloopFailed as LoopFailed, Agentloops, HostCallFailed } from "./services/Agentloop.js"
export { EffectFence, type EffectFenceShape } from "./services/EffectFence.js"
export { EnvironmentBindings, Environments, type EnvironmentsShape } from "./services/Environments.js"
export { Hosts, type HostsShape } from "./services/Hosts.js"
export { Idempotency, type IdempotencyShape } from "./services/Idempotency.js"
export { Journal, type JournalShape } from "./services/Journal.js"
export { ModelBindings } from "./services/ModelBindings.js"
export { type ModelCall, ModelFailed, type ModelFailureCode, Models, type ModelsShape } from "./services/Models.js"
// What a model provider (`Extensions.models`) is asked and answers: each a type and, at run time, its schema.
export { type ModelDelta, ModelRequest, ModelResult } from "./domain/Model.js"
export { CheckpointStore, Projection, type ProjectionShape } from "./services/Projection.js"
export {
  type CreateError,
  type CreateSession,
  type DeleteError,
  type EndError,
  type EventPage,
  type FollowError,
  type Following,
  type KeptRequest,
  type Keyed,
  type KeyedTurnError,
  type Receipt,
  Sessions,
  type SessionsShape,
  type SessionSummary,
  type TranscriptView,
  type TurnError,
  type TurnOutcome,
  type TurnRequest
} from "./services/Sessions.js"
export { Telemetry, type TelemetryShape } from "./services/Telemetry.js"
export { type ToolInvocation, ToolLost, type ToolReply, Tools, type ToolsShape } from "./services/Tools.js"
export { WasmHost, type WasmHostShape } from "./services/WasmHost.js"

// The values they exchange, and their errors (each a tagged error with its `code`).
export * from "./domain/Errors.js"
export { Failure, failure, FailureCode, FailureCodes } from "./domain/Failure.js"
export { isSessionId, SessionId } from "./domain/Ids.js"
export { Message, TurnInput } from "./domain/Messages.js"
export type { SessionStatus } from "./domain/Projection.js"
export type { SessionConfiguration } from "./domain/Configuration.js"
// An in-process tool's handler (`Extensions.tools`), two ready-made ones, and `aborted` (waits for the call's AbortSignal).
export { aborted, failWith, succeedAfter, type ToolHandler } from "./layers/ToolsInProcess.js"

/**
 * Sessions and every service they run on, as `brain serve` composes them, over `defaults` with
 * `overrides` (`dataDir` above all), plus an application's own loops, tools or model provider.
 * Configuration from the environment (`BRAIN_*`) instead: `configFromEnv`, then `servicesLayer`.
 */
export const layer = (overrides: Partial<ServerConfigShape> = {}, extensions: Extensions = {}) =>
  // Checked (by `servicesLayer`, once) by the rules the environment's settings are
  // (`configFromEnv`): a refusal is the same typed ConfigError, naming the setting, before
  // anything is opened.
  servicesLayer({ ...defaults, ...overrides }, extensions)

/** What `layer` provides (every service above). */
export type Services = Layer.Layer.Success<ReturnType<typeof layer>>

/**
 * What building `layer` (or `servicesLayer`) fails with, each a tagged error: `DataDirError` (the
 * data directory is locked by another runtime or process, is not Brain's, or cannot be used), a
 * `ConfigError` (a setting given to `layer`, or in `servicesLayer`'s configuration, that its variable's rule refuses), or a configuration
 * or store the runtime cannot start with.
 */
export type StartupError = Layer.Layer.Error<ReturnType<typeof layer>>

/**
 * A public Event (`session_id`, `sequence`, `recorded_at_ms`, `kind`, `data`, `origin`), as the
 * services answer it, and its schema: the API's own, so `Schema.decodeUnknown(Event)` checks an
 * Event read back from elsewhere (a file, another process) as the HTTP contract does.
 */
export const Event = EventSchema
export type Event = EventShape
