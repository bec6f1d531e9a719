/**
 * Settings given in code (`brain/effect`'s `layer(overrides)`, the configuration `servicesLayer`
 * and `serve` are given), checked by the same rule per setting as the environment's (`fromConfig`
 * in ServerConfigEnv.ts).
 */
import { ConfigError, ConfigProvider, Effect } from "effect"
import { defaults, type ServerConfigShape } from "./ServerConfig.js"
import { fromConfig } from "./ServerConfigEnv.js"

/**
 * Each setting given in code, by the variable whose rule in `fromConfig` checks it; `secs`: the
 * variable is in seconds, the setting in milliseconds. `telemetry` is a parsed sink, checked by its type.
 */
const settingNames: { readonly [K in keyof ServerConfigShape]: K extends "telemetry" ? undefined : readonly [string, "secs"?] } = {
  maxModelCalls: ["BRAIN_MAX_MODEL_CALLS"],
  maxToolCallsPerDispatch: ["BRAIN_MAX_TOOL_CALLS_PER_DISPATCH"],
  maxModelMs: ["BRAIN_MAX_MODEL_SECS", "secs"],
  maxModelOutputBytes: ["BRAIN_MAX_MODEL_OUTPUT_BYTES"],
  models: ["BRAIN_MODELS"],
  environments: ["BRAIN_ENVIRONMENTS"],
  maxEnvironmentResponseBytes: ["BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES"],
  maxToolSchemaBytes: ["BRAIN_MAX_TOOL_SCHEMA_BYTES"],
  wasmWorkers: ["BRAIN_WASM_WORKERS"],
  wasmThreads: ["BRAIN_WASM_THREADS"],
  wasmInlineMs: ["BRAIN_WASM_INLINE_MS"],
  maxWasmMemoryBytes: ["BRAIN_MAX_WASM_MEMORY_BYTES"],
  maxWasmComputeMs: ["BRAIN_MAX_WASM_COMPUTE_MS"],
  maxWasmIoBytes: ["BRAIN_MAX_WASM_IO_BYTES"],
  maxWasmModuleBytes: ["BRAIN_MAX_WASM_MODULE_BYTES"],
  maxWasmStoreBytes: ["BRAIN_MAX_WASM_STORE_BYTES"],
  wasmCompileQueue: ["BRAIN_WASM_COMPILE_QUEUE"],
  maxTurnMs: ["BRAIN_MAX_TURN_SECS", "secs"],
  maxToolMs: ["BRAIN_MAX_TOOL_SECS", "secs"],
  maxEmittedBytes: ["BRAIN_MAX_EMITTED_BYTES"],
  maxTurnWriteBytes: ["BRAIN_MAX_TURN_WRITE_BYTES"],
  maxSessionKvBytes: ["BRAIN_MAX_SESSION_KV_BYTES"],
  maxSessionJournalBytes: ["BRAIN_MAX_SESSION_JOURNAL_BYTES"],
  minFreeDiskBytes: ["BRAIN_MIN_FREE_DISK_BYTES"],
  maxInputBytes: ["BRAIN_MAX_INPUT_BYTES"],
  cancelGraceMs: ["BRAIN_CANCEL_GRACE_MS"],
  stagedOpeningMs: ["BRAIN_STAGED_OPENING_MS"],
  hostIdleExpiryMs: ["BRAIN_HOST_IDLE_EXPIRY_SECS", "secs"],
  sessionIdleTtlMs: ["BRAIN_SESSION_IDLE_TTL_MS"],
  checkpointAfterBytes: ["BRAIN_CHECKPOINT_AFTER_BYTES"],
  journalLogBytes: ["BRAIN_JOURNAL_LOG_BYTES"],
  cleanupDeadlineMs: ["BRAIN_CLEANUP_DEADLINE_MS"],
  listen: ["BRAIN_LISTEN"],
  dataDir: ["BRAIN_DATA_DIR"],
  apiToken: ["BRAIN_API_TOKEN"],
  healthListen: ["BRAIN_HEALTH_LISTEN"],
  requestRetentionMs: ["BRAIN_REQUEST_RETENTION_SECS", "secs"],
  maxRequestBytes: ["BRAIN_MAX_REQUEST_BYTES"],
  drainDeadlineMs: ["BRAIN_DRAIN_DEADLINE_MS"],
  sseHeartbeatMs: ["BRAIN_SSE_HEARTBEAT_MS"],
  cacheBytes: ["BRAIN_CACHE_BYTES"],
  inflightBodyBytes: ["BRAIN_INFLIGHT_BODY_BYTES"],
  workingMemoryBytes: ["BRAIN_WORKING_MEMORY_BYTES"],
  answerBytes: ["BRAIN_ANSWER_BYTES"],
  moduleCacheBytes: ["BRAIN_MODULE_CACHE_BYTES"],
  maxConnections: ["BRAIN_MAX_CONNECTIONS"],
  headersTimeoutMs: ["BRAIN_HEADERS_TIMEOUT_MS"],
  requestTimeoutMs: ["BRAIN_REQUEST_TIMEOUT_MS"],
  keepAliveTimeoutMs: ["BRAIN_KEEP_ALIVE_TIMEOUT_MS"],
  responseStallMs: ["BRAIN_RESPONSE_STALL_MS"],
  reservedConnections: ["BRAIN_RESERVED_CONNECTIONS"],
  pageReads: ["BRAIN_PAGE_READS"],
  idempotencyMaxAnswerBytes: ["BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES"],
  maxIdempotencyKeys: ["BRAIN_MAX_IDEMPOTENCY_KEYS"],
  maxSessionLogKeys: ["BRAIN_MAX_SESSION_LOG_KEYS"],
  deleteReserveKeys: ["BRAIN_DELETE_RESERVE_KEYS"],
  maxSessionIdempotencyKeys: ["BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS"],
  sseMaxSubscribersPerSession: ["BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION"],
  sseMaxSubscribers: ["BRAIN_SSE_MAX_SUBSCRIBERS"],
  sseBacklogBytes: ["BRAIN_SSE_BACKLOG_BYTES"],
  sseStallMs: ["BRAIN_SSE_STALL_MS"],
  sseCloseGraceMs: ["BRAIN_SSE_CLOSE_GRACE_MS"],
  telemetry: undefined,
  telemetryQueueBytes: ["BRAIN_TELEMETRY_QUEUE_BYTES"]
}

/**
 * Settings given in code (`brain/effect`'s `layer(overrides)`), checked by the rules the
 * environment's are (`fromConfig`, one rule per setting): each given setting is read through its
 * variable's rule, and a refusal is the same typed `ConfigError`, naming the setting and its
 * variable. A number must be a whole one (milliseconds for a setting in seconds: its range is
 * checked rounded up to seconds); `undefined` is allowed where unset is. Nothing is opened before.
 */
export const validated = (overrides: Partial<ServerConfigShape>): Effect.Effect<ServerConfigShape, ConfigError.ConfigError> =>
  Effect.suspend(() => {
    const given = new Map<string, string>()
    for (const [key, value] of Object.entries(overrides)) {
      if (!Object.prototype.hasOwnProperty.call(settingNames, key)) {
        return Effect.fail(ConfigError.InvalidData([key], `${key} is not a setting`))
      }
      const names = settingNames[key as keyof ServerConfigShape]
      if (names === undefined) continue
      const [name, unit] = names
      const refuse = (why: string) => Effect.fail(ConfigError.InvalidData([key], `${key} (${name}) ${why}, not ${shown(value)}`))
      if (value === undefined) {
        if (defaults[key as keyof ServerConfigShape] !== undefined) return refuse("must be given")
        continue
      }
      const expected = typeof (defaults[key as keyof ServerConfigShape] ?? (key === "models" || key === "environments" || key === "apiToken" || key === "healthListen" ? "" : 0))
      if (typeof value !== expected) return refuse(`must be a ${expected}`)
      if (typeof value === "number") {
        if (!Number.isSafeInteger(value) || value < 0) return refuse("must be a whole number ≥ 0")
        given.set(name, String(unit === "secs" ? Math.ceil(value / 1000) : value))
      } else given.set(name, value as string)
    }
    return Effect.withConfigProvider(fromConfig, ConfigProvider.fromMap(given)).pipe(
      Effect.mapError((e) =>
        // The rule names the variable; the refusal names the setting as it was given too. Whole
        // names only: one variable's name can begin another's (BRAIN_SSE_MAX_SUBSCRIBERS).
        ConfigError.InvalidData([], configErrorText(e).replace(/BRAIN_[A-Z0-9_]+/g, (name) => (given.has(name) ? `${settingOf.get(name)} (${name})` : name)))
      ),
      Effect.as({ ...defaults, ...overrides })
    )
  })

/** Each variable's setting, by the variable's name. */
const settingOf = new Map(
  Object.entries(settingNames).flatMap(([key, names]) => (names === undefined ? [] : [[names[0], key] as const]))
)

const shown = (value: unknown): string => {
  try {
    return typeof value === "number" ? String(value) : JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** A ConfigError's messages, joined. */
const configErrorText = (e: ConfigError.ConfigError): string => {
  switch (e._op) {
    case "And":
    case "Or":
      return `${configErrorText(e.left)}; ${configErrorText(e.right)}`
    case "InvalidData":
    case "MissingData":
    case "SourceUnavailable":
    case "Unsupported": {
      const where = e.path.join(".")
      return where === "" || e.message.includes(where) ? e.message : `${where}: ${e.message}`
    }
  }
}
