/**
 * The admitted session configuration, journaled whole in `session_creation_started`.
 * A create body contains only names: credentials live in server configuration, never here.
 */
import { Schema } from "effect"
import { AdmittedEnvironment } from "./Environment.js"
import { TIMER_SETTING_MAX_MS, TOOL_TIMEOUT_MAX_MS } from "./Limits.js"
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

/** A tool's `timeout_ms` as a create gives it: whole milliseconds within TOOL_TIMEOUT_MAX_MS (a timer waits for it). */
export const ToolTimeoutMs = Schema.Int.pipe(Schema.between(1, TOOL_TIMEOUT_MAX_MS))

/** A session's `idle_ttl_ms` as a create gives it: whole milliseconds within TIMER_SETTING_MAX_MS (a timer waits for it). */
export const IdleTtlMs = Schema.Int.pipe(Schema.between(0, TIMER_SETTING_MAX_MS))

/** A tool as a create body declares it: its `timeout_ms` within TOOL_TIMEOUT_MAX_MS. */
export const ToolDeclaration = Schema.Struct({
  ...ToolDefinition.fields,
  timeout_ms: Schema.optional(ToolTimeoutMs)
})

const isToolTimeout = Schema.is(ToolTimeoutMs)
const isIdleTtl = Schema.is(IdleTtlMs)

/**
 * The first field of a create's request past the bound a timer sets (ToolTimeoutMs, IdleTtlMs):
 * its path and why, or undefined. `Sessions.create` checks it, so that an application calling the
 * service directly is held where an HTTP body's schema holds its client (the same schemas).
 */
export const timerBoundsRefusal = (request: {
  readonly tools?: ReadonlyArray<{ readonly timeout_ms?: number | undefined }> | undefined
  readonly idle_ttl_ms?: number | undefined
}): { readonly path: ReadonlyArray<string | number>; readonly message: string } | undefined => {
  const tools = request.tools ?? []
  for (let i = 0; i < tools.length; i++) {
    const timeout = tools[i]!.timeout_ms
    if (timeout !== undefined && !isToolTimeout(timeout)) {
      return {
        path: ["tools", i, "timeout_ms"],
        message: `tools[${i}].timeout_ms is ${timeout}: a tool's timeout_ms is a whole number of milliseconds from 1 to ${TOOL_TIMEOUT_MAX_MS} (Node's timer maximum, about 24.8 days)`
      }
    }
  }
  const ttl = request.idle_ttl_ms
  if (ttl !== undefined && !isIdleTtl(ttl)) {
    return {
      path: ["idle_ttl_ms"],
      message: `idle_ttl_ms is ${ttl}: it is a whole number of milliseconds from 0 to ${TIMER_SETTING_MAX_MS} (Node's timer maximum, about 24.8 days)`
    }
  }
  return undefined
}

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
