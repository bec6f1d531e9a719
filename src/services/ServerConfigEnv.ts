/**
 * ServerConfig read from the environment (or any `ConfigProvider`): one rule per setting, each
 * refusing a value out of its range with a message naming the setting and the value as given,
 * each unset setting taking its default (ServerConfig.ts `defaults`).
 */
import { Config, ConfigError, Either, Layer, Option, Redacted } from "effect"
import {
  IDEMPOTENCY_MAX_ANSWER_CEILING_BYTES,
  KEEP_ALIVE_TIMEOUT_MIN_MS,
  OUTCOME_SETTING_CEILING_BYTES,
  SSE_HEARTBEAT_MIN_MS,
  TIMER_SETTING_MAX_MS,
  TOOL_SCHEMA_SETTING_CEILING_BYTES
} from "../domain/Limits.js"
import { defaults, ServerConfig, type ServerConfigShape } from "./ServerConfig.js"
import { parseTelemetrySink } from "./Telemetry.js"

/**
 * Why BRAIN_WASM_THREADS (`threads`) cannot stand beside BRAIN_WASM_WORKERS (`workers`; `workersSet`
 * false: unset, the number of cores, as the Wasm host takes it), or undefined when it can: it must
 * be above it. The pool keeps the last BRAIN_WASM_WORKERS threads for Wasm tools, so a loop without
 * an instrumented twin (which holds its thread while it waits) needs at least one more; at or below
 * it the pool would run BRAIN_WASM_WORKERS + 1 threads, past the bound the setting names
 * (docs/operations.md). Checked here when both are set; `brain serve` checks it against the cores
 * when only BRAIN_WASM_THREADS is (a contract imports nothing of Node).
 */
export const wasmThreadsRefusal = (workers: number, workersSet: boolean, threads: number): string | undefined =>
  threads > workers
    ? undefined
    : `BRAIN_WASM_THREADS (${threads}) must be above BRAIN_WASM_WORKERS (${workersSet ? workers : `unset: the number of cores, ${workers}`}): ` +
      "the last BRAIN_WASM_WORKERS threads are kept for Wasm tools, and loops without an instrumented twin need at least one more; raise BRAIN_WASM_THREADS or lower BRAIN_WASM_WORKERS"

const wasmThreadsAboveWorkers = (workers: Option.Option<number>, threads: Option.Option<number>): Either.Either<void, ConfigError.ConfigError> => {
  const refusal = Option.isSome(workers) && Option.isSome(threads) ? wasmThreadsRefusal(workers.value, true, threads.value) : undefined
  return refusal === undefined ? Either.void : Either.left(ConfigError.InvalidData([], refusal))
}

/** 65,536 pages of 64 KiB: the most a 32-bit WebAssembly memory can hold. */
const WASM_MEMORY_CEILING_BYTES = 65536 * 65536

/**
 * A whole number from `min` to `max`, as `range` says it. An empty or blank value is refused like
 * any other invalid one (Number("") is 0, which would often mean "no bound"); the refusal names
 * the setting and the value as given.
 */
const wholeNumber = (name: string, min: number, max: number, range: string, orZero = false) =>
  Config.string(name).pipe(
    Config.mapOrFail((text) => {
      // Decimal digits only: Number() also reads hex, binary, octal and exponents ("0x10", "1e21").
      const digits = text.trim()
      const n = /^[0-9]+$/.test(digits) ? Number(digits) : Number.NaN
      return Number.isSafeInteger(n) && ((n >= min && n <= max) || (orZero && n === 0))
        ? Either.right(n)
        : Either.left(ConfigError.InvalidData([], `${name} must be ${range}, not ${JSON.stringify(text)}`))
    })
  )

const atLeast = (name: string, min: number, fallback: number, description: string) =>
  wholeNumber(name, min, Number.POSITIVE_INFINITY, `a whole number ≥ ${min}`).pipe(
    Config.withDefault(fallback),
    Config.withDescription(description)
  )

const nonNegative = (name: string, fallback: number, description: string) => atLeast(name, 0, fallback, description)

const positive = (name: string, fallback: number, description: string) => atLeast(name, 1, fallback, description)

/** Milliseconds that end up in a timer: `min` to TIMER_SETTING_MAX_MS, past which Node's timer fires at once. */
const timerMs = (name: string, min: number, fallback: number, description: string) =>
  wholeNumber(name, min, TIMER_SETTING_MAX_MS, `a whole number from ${min} to ${TIMER_SETTING_MAX_MS} (Node's timer maximum, about 24.8 days)`).pipe(
    Config.withDefault(fallback),
    Config.withDescription(description)
  )

/** Milliseconds that end up in a timer, 0 turning it off: 0, or `min` to TIMER_SETTING_MAX_MS. */
const offOrTimerMs = (name: string, off: string, min: number, fallback: number, description: string) =>
  wholeNumber(name, min, TIMER_SETTING_MAX_MS, `a whole number from ${min} to ${TIMER_SETTING_MAX_MS} (Node's timer maximum, about 24.8 days), or 0 (${off})`, true).pipe(
    Config.withDefault(fallback),
    Config.withDescription(description)
  )

/** Seconds that end up in a timer (in milliseconds): 0 to TIMER_SETTING_MAX_MS / 1000. */
const timerSecs = (name: string, fallback: number, description: string) => {
  const max = Math.floor(TIMER_SETTING_MAX_MS / 1000)
  return wholeNumber(name, 0, max, `a whole number from 0 to ${max} (Node's timer maximum, in seconds)`).pipe(
    Config.withDefault(fallback),
    Config.withDescription(description)
  )
}

/**
 * Bytes, 1 to OUTCOME_SETTING_CEILING_BYTES: a setting that bounds what one outcome record
 * carries (a model's response, a guest's output, an Environment's answer), so that the record
 * always fits one journal frame and is never refused after its effect has happened.
 */
const outcomeBytes = (name: string, fallback: number, description: string) =>
  wholeNumber(name, 1, OUTCOME_SETTING_CEILING_BYTES, `a whole number from 1 to ${OUTCOME_SETTING_CEILING_BYTES} (32 MiB)`).pipe(
    Config.withDefault(fallback),
    Config.withDescription(description)
  )

/** A whole number ≥ `min` (and ≤ `max`) that may be unset: its default is computed elsewhere, so unset stays distinguishable. */
const optionalAtLeast = (name: string, min: number, description: string, max = Number.POSITIVE_INFINITY) =>
  Config.option(
    wholeNumber(name, min, max, max === Number.POSITIVE_INFINITY ? `a whole number ≥ ${min}` : `a whole number from ${min} to ${max}`).pipe(
      Config.withDescription(description)
    )
  )

/**
 * BRAIN_API_TOKEN: a bearer token every request must carry. Set but empty or blank it is refused,
 * not taken as no token: `BRAIN_API_TOKEN=$TOKEN` with TOKEN unset would turn authentication off
 * unseen. A token no `Authorization: Bearer` header can carry (a space, a line break, anything
 * but visible ASCII: the header's token is read up to its first space, and a byte beyond ASCII
 * arrives as another character) would answer every request 401: refused too. Neither refusal
 * names the value.
 */
const apiToken = Config.option(
  Config.redacted("BRAIN_API_TOKEN").pipe(
    Config.mapOrFail((token) => {
      const text = Redacted.value(token)
      if (text.trim() === "") {
        return Either.left(ConfigError.InvalidData([], "BRAIN_API_TOKEN is set but blank: unset it to serve loopback without a token, or give the token (a blank one would turn authentication off)"))
      }
      if (!/^[\x21-\x7e]+$/.test(text)) {
        return Either.left(ConfigError.InvalidData([], "BRAIN_API_TOKEN holds a space, a line break or another character a bearer header cannot carry (visible ASCII only): no request could send it"))
      }
      return Either.right(token)
    })
  )
)

export const fromConfig = Config.all({
  maxModelCalls: nonNegative("BRAIN_MAX_MODEL_CALLS", defaults.maxModelCalls, "model calls per turn (0 = no bound)"),
  maxToolCallsPerDispatch: nonNegative(
    "BRAIN_MAX_TOOL_CALLS_PER_DISPATCH",
    defaults.maxToolCallsPerDispatch,
    "tool calls in one dispatch, a model reply's round (0 = no bound)"
  ),
  maxModelSecs: timerSecs("BRAIN_MAX_MODEL_SECS", defaults.maxModelMs / 1000, "seconds a model call may send nothing (0 = no bound)"),
  maxModelOutputBytes: outcomeBytes("BRAIN_MAX_MODEL_OUTPUT_BYTES", defaults.maxModelOutputBytes, "bytes of one model response"),
  models: Config.option(Config.string("BRAIN_MODELS").pipe(Config.withDescription("model bindings: a JSON file's path or inline JSON"))),
  environments: Config.option(
    Config.string("BRAIN_ENVIRONMENTS").pipe(Config.withDescription("Environment bindings: a JSON file's path or inline JSON"))
  ),
  maxEnvironmentResponseBytes: outcomeBytes(
    "BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES",
    defaults.maxEnvironmentResponseBytes,
    "bytes of an Environment's answer read at most"
  ),
  maxToolSchemaBytes: wholeNumber("BRAIN_MAX_TOOL_SCHEMA_BYTES", 1, TOOL_SCHEMA_SETTING_CEILING_BYTES, `a whole number from 1 to ${TOOL_SCHEMA_SETTING_CEILING_BYTES} (1 MiB)`).pipe(
    Config.withDefault(defaults.maxToolSchemaBytes),
    Config.withDescription("bytes (as JSON) of a host tool's input_schema or output_schema at most, checked at create")
  ),
  wasmWorkers: optionalAtLeast("BRAIN_WASM_WORKERS", 1, "guests computing at once (unset: the number of cores)"),
  wasmThreads: optionalAtLeast("BRAIN_WASM_THREADS", 2, "guest threads at most, those waiting in host calls included (unset: 8 per BRAIN_WASM_WORKERS)"),
  wasmInlineMs: nonNegative(
    "BRAIN_WASM_INLINE_MS",
    defaults.wasmInlineMs,
    "a guest's compute on the main thread per activation before it moves to a worker thread (0 = always a worker thread)"
  ),
  // WebAssembly's 32-bit memories hold at most 65,536 pages of 64 KiB: a larger maximum fails every instantiation.
  maxWasmMemoryBytes: wholeNumber("BRAIN_MAX_WASM_MEMORY_BYTES", 1, WASM_MEMORY_CEILING_BYTES, `a whole number from 1 to ${WASM_MEMORY_CEILING_BYTES} (4 GiB, WebAssembly's 32-bit memory maximum)`).pipe(
    Config.withDefault(defaults.maxWasmMemoryBytes),
    Config.withDescription("bytes of a guest's memory at most")
  ),
  maxWasmComputeMs: timerMs("BRAIN_MAX_WASM_COMPUTE_MS", 0, defaults.maxWasmComputeMs, "a guest's compute per activation, host calls excluded (0 = no bound)"),
  maxWasmIoBytes: outcomeBytes("BRAIN_MAX_WASM_IO_BYTES", defaults.maxWasmIoBytes, "bytes of a guest's input, output and each host request"),
  maxWasmModuleBytes: positive("BRAIN_MAX_WASM_MODULE_BYTES", defaults.maxWasmModuleBytes, "bytes of an admitted module"),
  maxWasmStoreBytes: positive("BRAIN_MAX_WASM_STORE_BYTES", defaults.maxWasmStoreBytes, "bytes of all stored modules together"),
  wasmCompileQueue: positive("BRAIN_WASM_COMPILE_QUEUE", defaults.wasmCompileQueue, "uploaded modules compiling or waiting to compile; more are refused 503"),
  maxTurnSecs: timerSecs("BRAIN_MAX_TURN_SECS", defaults.maxTurnMs / 1000, "turn wall time in seconds (0 = no bound)"),
  maxToolSecs: timerSecs("BRAIN_MAX_TOOL_SECS", defaults.maxToolMs / 1000, "tool call deadline in seconds (0 = no bound)"),
  maxEmittedBytes: nonNegative("BRAIN_MAX_EMITTED_BYTES", defaults.maxEmittedBytes, "extension Event bytes per turn, each Event weighed by its journal record (0 = no bound)"),
  maxTurnWriteBytes: nonNegative("BRAIN_MAX_TURN_WRITE_BYTES", defaults.maxTurnWriteBytes, "journal bytes a turn's host calls may write (0 = no bound)"),
  maxSessionKvBytes: nonNegative("BRAIN_MAX_SESSION_KV_BYTES", defaults.maxSessionKvBytes, "bytes one session's kv may hold across its turns, each entry as its state counts it (0 = no bound)"),
  maxSessionJournalBytes: nonNegative(
    "BRAIN_MAX_SESSION_JOURNAL_BYTES",
    defaults.maxSessionJournalBytes,
    "bytes one session's journal may take on disk across its turns; once reached its sends and submits are refused 409 (0 = no bound)"
  ),
  minFreeDiskBytes: nonNegative(
    "BRAIN_MIN_FREE_DISK_BYTES",
    defaults.minFreeDiskBytes,
    "free bytes the data directory's file system must keep; below it creates, sends and submits are refused 503 (0 = no watermark)"
  ),
  maxInputBytes: nonNegative("BRAIN_MAX_INPUT_BYTES", defaults.maxInputBytes, "bytes of a turn's input (its message and media, as JSON) at most (0 = no bound)"),
  cancelGraceMs: timerMs("BRAIN_CANCEL_GRACE_MS", 0, defaults.cancelGraceMs, "grace for executors to confirm cancellation"),
  stagedOpeningMs: timerMs("BRAIN_STAGED_OPENING_MS", 1, defaults.stagedOpeningMs, "how long a sync send's turn opening waits for the turn's first write before it is written alone"),
  journalLogBytes: nonNegative(
    "BRAIN_JOURNAL_LOG_BYTES",
    defaults.journalLogBytes,
    "bytes of each journal commit-log file before rounds switch to the other (0 = no commit log: every touched segment synced per round)"
  ),
  hostIdleExpirySecs: nonNegative(
    "BRAIN_HOST_IDLE_EXPIRY_SECS",
    defaults.hostIdleExpiryMs / 1000,
    "a host registration with no command stream and no session naming it is removed after this long (0 = never)"
  ),
  // No default inside the option: unset must stay distinguishable from 0 ("keep forever").
  sessionIdleTtlMs: optionalAtLeast(
    "BRAIN_SESSION_IDLE_TTL_MS",
    0,
    "keep idle session actors warm this long (0 = forever; unset = release once unused for a grace of 1-2 s)",
    TIMER_SETTING_MAX_MS
  ),
  checkpointAfterBytes: nonNegative(
    "BRAIN_CHECKPOINT_AFTER_BYTES",
    defaults.checkpointAfterBytes,
    "journal bytes a warm session appends after its last checkpoint (and at least that checkpoint's bytes) before one is written in the background after a turn (0 = none while warm)"
  ),
  cleanupDeadlineMs: timerMs("BRAIN_CLEANUP_DEADLINE_MS", 0, defaults.cleanupDeadlineMs, "bound on waits inside cleanup and on an outcome's commit (0 = no bound)"),
  listen: Config.string("BRAIN_LISTEN").pipe(Config.withDefault(defaults.listen), Config.withDescription("host:port to listen on")),
  healthListen: Config.option(
    Config.string("BRAIN_HEALTH_LISTEN").pipe(Config.withDescription("host:port of a listener of its own for /health/live and /health/ready"))
  ),
  // A blank path would silently be the current directory.
  dataDir: Config.string("BRAIN_DATA_DIR").pipe(
    Config.validate({ message: "an empty value names no directory", validation: (dir) => dir.trim().length > 0 }),
    Config.withDefault(defaults.dataDir),
    Config.withDescription("the data directory")
  ),
  apiToken,
  requestRetentionSecs: nonNegative("BRAIN_REQUEST_RETENTION_SECS", defaults.requestRetentionMs / 1000, "idempotent answers are kept this long"),
  maxRequestBytes: positive("BRAIN_MAX_REQUEST_BYTES", defaults.maxRequestBytes, "the largest request body (at least 1: 0 would refuse every body)"),
  drainDeadlineMs: timerMs(
    "BRAIN_DRAIN_DEADLINE_MS",
    0,
    defaults.drainDeadlineMs,
    "how long a graceful stop waits for admitted turns and creates in flight (0 = no wait: they are interrupted at once)"
  ),
  sseHeartbeatMs: offOrTimerMs("BRAIN_SSE_HEARTBEAT_MS", "no heartbeats", SSE_HEARTBEAT_MIN_MS, defaults.sseHeartbeatMs, "SSE heartbeat interval"),
  cacheBytes: optionalAtLeast("BRAIN_CACHE_BYTES", 0, "memory for idle sessions' states and recent journal records (unset: 1/8 of the heap limit)"),
  inflightBodyBytes: optionalAtLeast("BRAIN_INFLIGHT_BODY_BYTES", 1, "request body bytes held at once (unset: 1/32 of the heap limit)"),
  workingMemoryBytes: optionalAtLeast(
    "BRAIN_WORKING_MEMORY_BYTES",
    1,
    "heap bytes session creates, opens and turns may take at once, each weighted by what it reads or brings (unset: 1/4 of the heap limit)"
  ),
  answerBytes: optionalAtLeast(
    "BRAIN_ANSWER_BYTES",
    1,
    "bytes large answers (transcripts, Events pages) may hold until their clients take them (unset: 1/8 of the heap limit)"
  ),
  moduleCacheBytes: optionalAtLeast("BRAIN_MODULE_CACHE_BYTES", 0, "bytes of compiled uploaded modules kept in memory (unset: 1/16 of the heap limit)"),
  maxConnections: positive("BRAIN_MAX_CONNECTIONS", defaults.maxConnections, "open HTTP connections before new ones are refused"),
  headersTimeoutMs: timerMs("BRAIN_HEADERS_TIMEOUT_MS", 1, defaults.headersTimeoutMs, "time allowed to send a request's headers"),
  requestTimeoutMs: timerMs("BRAIN_REQUEST_TIMEOUT_MS", 1, defaults.requestTimeoutMs, "time allowed to send a whole request, its body included, from its first byte"),
  keepAliveTimeoutMs: timerMs(
    "BRAIN_KEEP_ALIVE_TIMEOUT_MS",
    KEEP_ALIVE_TIMEOUT_MIN_MS,
    defaults.keepAliveTimeoutMs,
    "how long an idle keep-alive connection is kept for its next request (longer than a load balancer's idle timeout)"
  ),
  responseStallMs: timerMs(
    "BRAIN_RESPONSE_STALL_MS",
    0,
    defaults.responseStallMs,
    "how long a connection may hold bytes of an answer its client takes none of before it is closed (0 = no bound)"
  ),
  reservedConnections: optionalAtLeast(
    "BRAIN_RESERVED_CONNECTIONS",
    0,
    "connections SSE streams never take, kept for other requests (unset: a quarter of BRAIN_MAX_CONNECTIONS)"
  ),
  pageReads: positive("BRAIN_PAGE_READS", defaults.pageReads, "Events pages and transcripts built at once; more wait their turn"),
  idempotencyMaxAnswerBytes: wholeNumber(
    "BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES",
    1,
    IDEMPOTENCY_MAX_ANSWER_CEILING_BYTES,
    `a whole number from 1 to ${IDEMPOTENCY_MAX_ANSWER_CEILING_BYTES}`
  ).pipe(
    Config.withDefault(defaults.idempotencyMaxAnswerBytes),
    Config.withDescription("bytes: the largest idempotent answer kept for replay; a larger one is recorded as not kept")
  ),
  maxIdempotencyKeys: optionalAtLeast(
    "BRAIN_MAX_IDEMPOTENCY_KEYS",
    1,
    "live idempotency keys held at most; past it a new key is refused 503 overloaded (unset: a sixteenth of the heap limit at 512 B a key)"
  ),
  maxSessionLogKeys: optionalAtLeast(
    "BRAIN_MAX_SESSION_LOG_KEYS",
    1,
    "idempotency log keys of requests about one session (cancels, ends, deletes, kept refusals) held at most; past it that session's new keys are refused 503 overloaded (unset: a sixty-fourth of BRAIN_MAX_IDEMPOTENCY_KEYS)"
  ),
  deleteReserveKeys: optionalAtLeast(
    "BRAIN_DELETE_RESERVE_KEYS",
    0,
    "idempotency keys deletes may add past BRAIN_MAX_IDEMPOTENCY_KEYS (a keyed delete's own, the keys its session hands over) (unset: a quarter of BRAIN_MAX_IDEMPOTENCY_KEYS)"
  ),
  maxSessionIdempotencyKeys: positive(
    "BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS",
    defaults.maxSessionIdempotencyKeys,
    "idempotency keys one session holds at most; past it a keyed send or submit with a new key is refused 503 overloaded"
  ),
  sseMaxSubscribersPerSession: optionalAtLeast(
    "BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION",
    1,
    "SSE streams one session may have, at most the streams sessions' readers may hold (unset: an eighth of those)"
  ),
  sseMaxSubscribers: positive("BRAIN_SSE_MAX_SUBSCRIBERS", defaults.sseMaxSubscribers, "sessions' SSE streams the process may have"),
  sseBacklogBytes: positive("BRAIN_SSE_BACKLOG_BYTES", defaults.sseBacklogBytes, "bytes a live SSE subscriber may fall behind"),
  sseStallMs: timerMs("BRAIN_SSE_STALL_MS", 0, defaults.sseStallMs, "how long an SSE reader still catching up may leave its socket undrained (0 = no bound)"),
  sseCloseGraceMs: timerMs("BRAIN_SSE_CLOSE_GRACE_MS", 0, defaults.sseCloseGraceMs, "how long a cut-off SSE stream's socket has to drain before it is closed (0 = no bound)"),
  telemetry: Config.string("BRAIN_TELEMETRY").pipe(
    Config.withDefault(""),
    Config.mapOrFail((value) =>
      Either.mapLeft(parseTelemetrySink(value), (why) => ConfigError.InvalidData(["BRAIN_TELEMETRY"], why))
    ),
    Config.withDescription("where loops' telemetry goes: file:PATH or a plain path (JSON lines), otlp:URL (OTLP/HTTP logs); unset drops it")
  ),
  telemetryQueueBytes: positive(
    "BRAIN_TELEMETRY_QUEUE_BYTES",
    defaults.telemetryQueueBytes,
    "bytes of telemetry waiting for its sink before new records are dropped"
  )
}).pipe(
  Config.mapOrFail((c) => Either.map(wasmThreadsAboveWorkers(c.wasmWorkers, c.wasmThreads), () => c)),
  Config.map((c): ServerConfigShape => ({
    maxModelCalls: c.maxModelCalls,
    maxToolCallsPerDispatch: c.maxToolCallsPerDispatch,
    maxModelMs: c.maxModelSecs * 1000,
    maxModelOutputBytes: c.maxModelOutputBytes,
    models: Option.getOrUndefined(Option.filter(c.models, (m) => m.trim().length > 0)),
    environments: Option.getOrUndefined(Option.filter(c.environments, (m) => m.trim().length > 0)),
    maxEnvironmentResponseBytes: c.maxEnvironmentResponseBytes,
    maxToolSchemaBytes: c.maxToolSchemaBytes,
    wasmWorkers: Option.getOrUndefined(c.wasmWorkers),
    wasmThreads: Option.getOrUndefined(c.wasmThreads),
    wasmInlineMs: c.wasmInlineMs,
    maxWasmMemoryBytes: c.maxWasmMemoryBytes,
    maxWasmComputeMs: c.maxWasmComputeMs,
    maxWasmIoBytes: c.maxWasmIoBytes,
    maxWasmModuleBytes: c.maxWasmModuleBytes,
    maxWasmStoreBytes: c.maxWasmStoreBytes,
    wasmCompileQueue: c.wasmCompileQueue,
    maxTurnMs: c.maxTurnSecs * 1000,
    maxToolMs: c.maxToolSecs * 1000,
    maxEmittedBytes: c.maxEmittedBytes,
    maxTurnWriteBytes: c.maxTurnWriteBytes,
    maxSessionKvBytes: c.maxSessionKvBytes,
    maxSessionJournalBytes: c.maxSessionJournalBytes,
    minFreeDiskBytes: c.minFreeDiskBytes,
    maxInputBytes: c.maxInputBytes,
    cancelGraceMs: c.cancelGraceMs,
    stagedOpeningMs: c.stagedOpeningMs,
    journalLogBytes: c.journalLogBytes,
    hostIdleExpiryMs: c.hostIdleExpirySecs * 1000,
    sessionIdleTtlMs: Option.getOrUndefined(c.sessionIdleTtlMs),
    checkpointAfterBytes: c.checkpointAfterBytes,
    cleanupDeadlineMs: c.cleanupDeadlineMs,
    listen: c.listen,
    healthListen: Option.getOrUndefined(c.healthListen),
    dataDir: c.dataDir,
    apiToken: Option.getOrUndefined(Option.map(c.apiToken, Redacted.value)),
    requestRetentionMs: c.requestRetentionSecs * 1000,
    maxRequestBytes: c.maxRequestBytes,
    drainDeadlineMs: c.drainDeadlineMs,
    sseHeartbeatMs: c.sseHeartbeatMs,
    cacheBytes: Option.getOrUndefined(c.cacheBytes),
    inflightBodyBytes: Option.getOrUndefined(c.inflightBodyBytes),
    workingMemoryBytes: Option.getOrUndefined(c.workingMemoryBytes),
    answerBytes: Option.getOrUndefined(c.answerBytes),
    moduleCacheBytes: Option.getOrUndefined(c.moduleCacheBytes),
    maxConnections: c.maxConnections,
    headersTimeoutMs: c.headersTimeoutMs,
    requestTimeoutMs: c.requestTimeoutMs,
    keepAliveTimeoutMs: c.keepAliveTimeoutMs,
    responseStallMs: c.responseStallMs,
    reservedConnections: Option.getOrUndefined(c.reservedConnections),
    pageReads: c.pageReads,
    idempotencyMaxAnswerBytes: c.idempotencyMaxAnswerBytes,
    maxIdempotencyKeys: Option.getOrUndefined(c.maxIdempotencyKeys),
    maxSessionLogKeys: Option.getOrUndefined(c.maxSessionLogKeys),
    deleteReserveKeys: Option.getOrUndefined(c.deleteReserveKeys),
    maxSessionIdempotencyKeys: c.maxSessionIdempotencyKeys,
    sseMaxSubscribersPerSession: Option.getOrUndefined(c.sseMaxSubscribersPerSession),
    sseMaxSubscribers: c.sseMaxSubscribers,
    sseBacklogBytes: c.sseBacklogBytes,
    sseStallMs: c.sseStallMs,
    sseCloseGraceMs: c.sseCloseGraceMs,
    telemetry: c.telemetry,
    telemetryQueueBytes: c.telemetryQueueBytes
  }))
)

export const layer = Layer.effect(ServerConfig, fromConfig)
