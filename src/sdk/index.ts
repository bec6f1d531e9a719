/**
 * `brain/sdk`: the Promise client (`Brain`), the Effect client (`BrainClient`), their errors and
 * the wire types. Web APIs only: no Node-only import, here or below (test/architecture).
 */
export {
  Agentloops,
  Brain,
  type BrainOptions,
  type CreateSessionBody,
  HOST_ENVIRONMENT,
  type ListOptions,
  type MutationOptions,
  type SendOptions,
  Session,
  Sessions,
  type StructuredOptions,
  type ToolDefinition,
  type UploadedModule
} from "./Brain.js"
export { HOST_READY_DEADLINE_MS } from "./Host.js"
export {
  BrainOutputInvalid,
  BrainTurnFailed,
  DEFAULT_MAX_CORRECTIONS,
  MAX_CORRECTIONS,
  type StructuredOutcome
} from "./Output.js"
export { type HostTool, isHostTool, tool, ToolAborted, type ToolContext, type ToolOptions, ToolResultUnrecorded } from "./Tool.js"
export { type Issue, type StandardSchemaV1, type Validator } from "./Validate.js"
export {
  BrainClient,
  type BrainApiClient,
  type BrainClientOptions,
  type BrainClientShape,
  IN_PROGRESS_WAIT_MS,
  MAX_ATTEMPTS,
  RETRY_BASE_MS,
  type WithKey
} from "./BrainClient.js"
export { BrainClosed, BrainError, type BrainErrorCode, isOutcomeUnrecorded } from "./Errors.js"
/** The Effect client's refusals, one tagged error per code (`catchTag("SessionBusy", …)`). */
export {
  AgentloopFailed,
  Ambiguous,
  type ApiError,
  type ApiErrorCode,
  Conflict,
  CreationFailed,
  IdempotencyUnavailable,
  Internal,
  InvalidRequest,
  JournalCorrupt,
  JournalWriteFailed,
  NotFound,
  Overloaded,
  PayloadTooLarge,
  SessionBusy,
  SessionEnded,
  TeardownFailed,
  Unauthorized,
  UnsupportedMediaType
} from "../domain/Errors.js"
export { type EventsOptions, PAGE_LIMIT, RECONNECT_DEADLINE_MS } from "./Events.js"
export { type Fetch } from "./Transport.js"
export type * from "./Types.js"
