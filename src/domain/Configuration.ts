/**
 * The admitted session configuration, journaled whole in `session_creation_started`.
 * A create body contains only names: credentials live in server configuration, never here.
 */
import { Schema } from "effect"
import { AdmittedEnvironment } from "./Environment.js"
import { TOOL_TIMEOUT_MAX_MS } from "./Limits.js"
import { Json, Message } from "./Messages.js"
import { RecordedBinding } from "./ModelBinding.js"

export const ScriptedToolCall = Schema.Struct({ name: Schema.String, input: Json })

export const ScriptedReply = Schema.Struct({
  text: Schema.optional(Schema.String),
  tool_calls: Schema.optional(Schema.Array(ScriptedToolCall)),
  delay_ms: Schema.optional(Schema.Int.pipe(Schema.greaterThanOrEqualTo(0))),
  fail: Schema.optional(Schema.Struct({ code: Schema.String, message: Schema.String }))
})

export const ScriptedModel = Schema.Struct({
  provider: Schema.Literal("scripted"),
  replies: Schema.optional(Schema.Array(ScriptedReply))
})

/** `model`: the name of a server-configured binding, or the built-in scripted provider. */
export const ModelChoice = Schema.Union(Schema.String.pipe(Schema.minLength(1)), ScriptedModel)

export const ToolDefinition = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1)),
  description: Schema.optional(Schema.String),
  input_schema: Schema.optional(Json),
  /** A host tool's output (JSON Schema): an `ok` result that breaks it is recorded as the error `invalid_output`. */
  output_schema: Schema.optional(Json),
  /** The name of the session's Environment that runs this tool. */
  environment: Schema.optional(Schema.String),
  /** A Wasm tool: the id (SHA-256) of an admitted module exporting `brain_tool`, run in the built-in environment. */
  module: Schema.optional(Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/))),
  /** Read from journals as written: one written before the create body's bound may hold more (ToolCalls.ts caps it). */
  timeout_ms: Schema.optional(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)))
})

/** A tool as a create body declares it: its `timeout_ms` within TOOL_TIMEOUT_MAX_MS. */
export const ToolDeclaration = Schema.Struct({
  ...ToolDefinition.fields,
  timeout_ms: Schema.optional(Schema.Int.pipe(Schema.between(1, TOOL_TIMEOUT_MAX_MS)))
})

export const SessionConfiguration = Schema.Struct({
  agentloop: Schema.String,
  model: ModelChoice,
  /** For a binding name: its non-secret fields as they were at creation (the server records them). */
  model_binding: Schema.optional(RecordedBinding),
  system: Schema.optional(Schema.String),
  tools: Schema.optional(Schema.Array(ToolDefinition)),
  /** The admitted Environments (docs/environments.md): an `http` one with what its binding stood for at creation. */
  environments: Schema.optional(Schema.Array(AdmittedEnvironment)),
  transcript: Schema.optional(Schema.Array(Message)),
  idle_ttl_ms: Schema.optional(Schema.Int.pipe(Schema.greaterThanOrEqualTo(0)))
})
export type SessionConfiguration = typeof SessionConfiguration.Type
