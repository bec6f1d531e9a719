/**
 * ServerConfig: the deployment's limits and places, read once through `Config` (environment
 * variables by default). Zero means "no bound" for every turn limit.
 */
import { Config, ConfigError, Context, Either, Layer, Option, Redacted } from "effect"
import {
  COMMIT_LOG_BYTES,
  IDEMPOTENCY_MAX_ANSWER_BYTES,
  IDEMPOTENCY_MAX_ANSWER_CEILING_BYTES,
  KEEP_ALIVE_TIMEOUT_MIN_MS,
  KEEP_ALIVE_TIMEOUT_MS,
  PAGE_READS,
  RESPONSE_STALL_MS,
  SSE_BACKLOG_BYTES,
  SSE_CLOSE_GRACE_MS,
  SSE_HEARTBEAT_MIN_MS,
  SSE_STALL_MS,
  HOST_STREAM_SHARE,
  SSE_SESSION_SHARE,
  SSE_SUBSCRIBERS,
  OUTCOME_SETTING_CEILING_BYTES,
  SESSION_IDEMPOTENCY_KEYS,
  TELEMETRY_QUEUE_BYTES,
  TIMER_SETTING_MAX_MS
} from "../domain/Limits.js"

import { noSink, parseTelemetrySink, type TelemetrySink } from "./Telemetry.js"

export interface ServerConfigShape {
  /** Model calls per turn; the next one is refused with `model_call_limit`. 0 = no bound. */
  readonly maxModelCalls: number
  /** Tool calls in one `dispatch` (a model reply's round); more are refused whole with `tool_call_limit`. 0 = no bound. */
  readonly maxToolCallsPerDispatch: number
  /** How long a model call may send nothing (before its headers or between chunks), in milliseconds. 0 = no bound. */
  readonly maxModelMs: number
  /** Bytes of one model response before the call fails with `model_output_limit` (1 B to 32 MiB). */
  readonly maxModelOutputBytes: number
  /** BRAIN_MODELS as given: a JSON file's path, or inline JSON (read by the ModelBindings layer). */
  readonly models: string | undefined
  /** BRAIN_ENVIRONMENTS as given: a JSON file's path, or inline JSON (parsed at start by the EnvironmentBindings layer). */
  readonly environments: string | undefined
  /**
   * Bytes of an Environment's answer read at most: beyond it the read stops and the operation is
   * uncertain. At most 32 MiB, since an outcome must fit in one journal frame.
   */
  readonly maxEnvironmentResponseBytes: number
  /** Guests computing at once; undefined = the number of cores. */
  readonly wasmWorkers: number | undefined
  /** Guest threads at most, those waiting in host calls included; undefined = WASM_THREADS_PER_WORKER × wasmWorkers. */
  readonly wasmThreads: number | undefined
  /** Milliseconds of compute the main thread lends an activation before moving it to a worker thread; 0 = always a worker thread. */
  readonly wasmInlineMs: number
  /** Bytes of a guest's linear memory at most. */
  readonly maxWasmMemoryBytes: number
  /** Milliseconds a guest may compute per activation, host calls excluded. 0 = no bound. */
  readonly maxWasmComputeMs: number
  /** Bytes of a guest's input, output and each host request. */
  readonly maxWasmIoBytes: number
  /** Bytes of an admitted module. */
  readonly maxWasmModuleBytes: number
  /** Bytes of all stored modules together. */
  readonly maxWasmStoreBytes: number
  /** Uploaded modules compiling or waiting for the compiling thread; an upload past it is refused 503 `overloaded`. */
  readonly wasmCompileQueue: number
  /** Wall time of a turn in milliseconds; reaching it starts cancellation. 0 = no bound. */
  readonly maxTurnMs: number
  /** The deadline handed to every tool call, in milliseconds. 0 = no bound. */
  readonly maxToolMs: number
  /**
   * Bytes of extension Events one turn may emit, each weighed by its journal record (its kind,
   * payload and origin as JSON, its record kind and its frame). 0 = no bound.
   */
  readonly maxEmittedBytes: number
  /**
   * Journal bytes one turn's host calls may write (kv, transcript saves, Events, model and tool
   * calls: sessions/TurnWrites.ts); a write past it is refused with `turn_write_limit`. 0 = no bound.
   */
  readonly maxTurnWriteBytes: number
  /**
   * Bytes one session's kv may hold across its turns, each entry measured as its state counts it
   * (Projection.ts `kvEntryBytes`); a `kv_put` that would grow it past this is refused with
   * `kv_limit`, nothing written. 0 = no bound.
   */
  readonly maxSessionKvBytes: number
  /**
   * Bytes one session's journal may take on disk across its turns (Journal `size`, read from its
   * segments when it is opened, so a restart measures the same): once it has reached this a send or
   * submit is refused 409 `conflict` (`details.reason: "session_journal_limit"`), nothing written,
   * and a turn's host-call writes that would take it past this are refused as past
   * `maxTurnWriteBytes`. An end, a cancel and a turn's closing records are always written. 0 = no bound.
   */
  readonly maxSessionJournalBytes: number
  /**
   * Bytes the data directory's file system must keep free (statfs, what an unprivileged writer may
   * use, read at most once a DISK_STAT_INTERVAL_MS, domain/Limits.ts): below it, creates, sends and submits are
   * refused 503 `overloaded` (retryable), nothing written. Turns already running go on, bounded by
   * their own limits. 0 = no watermark.
   */
  readonly minFreeDiskBytes: number
  /**
   * Bytes of a turn's input (its JSON: the message and any media) at most; a larger send or
   * submit is refused (413) before anything is journaled. 0 = no bound.
   */
  readonly maxInputBytes: number
  /** How long cancellation waits for executors and the loop to stop, in milliseconds. */
  readonly cancelGraceMs: number
  /**
   * How long a sync send's turn opening may stay staged, waiting for the turn's first write to
   * carry it, before it is written on its own, in milliseconds (docs/runtime.md).
   */
  readonly stagedOpeningMs: number
  /**
   * How long a host registration may stand with no command stream and no session naming it before
   * it is removed, in milliseconds (docs/environments.md, "Registering"). 0 = never.
   */
  readonly hostIdleExpiryMs: number
  /** How long an idle session actor stays warm; undefined = released at once, 0 = forever. */
  readonly sessionIdleTtlMs: number | undefined
  /**
   * Bytes each of the journal's two commit-log files takes before rounds switch to the other
   * (docs/journal.md, "The commit log"); 0 = no commit log, every touched segment synced per round.
   */
  readonly journalLogBytes: number
  /**
   * The bound on waits inside cleanup (recording an outcome while interrupted), and on how long an
   * effect's outcome may take to become durable before the loop is told `journal_write_failed`
   * instead of the result, in milliseconds. 0 = wait for the journal however long it takes.
   */
  readonly cleanupDeadlineMs: number
  /** `host:port` to listen on. */
  readonly listen: string
  /** The data directory. */
  readonly dataDir: string
  /** Bearer token required on every route but /health/*; undefined = no auth (loopback only). */
  readonly apiToken: string | undefined
  /**
   * How long idempotent answers are kept, from each answer, in milliseconds; 0 = for ever. A claim
   * never answered and an ambiguous verdict are kept whatever it is.
   */
  readonly requestRetentionMs: number
  /** The largest request body, in bytes. */
  readonly maxRequestBytes: number
  /**
   * How long a graceful stop waits for admitted turns and creates in flight, in milliseconds; 0 =
   * no wait: they are interrupted at once (unlike the cleanup deadline's 0, which is no bound).
   */
  readonly drainDeadlineMs: number
  /** Time between SSE heartbeat comments, in milliseconds: 0 (none) or SSE_HEARTBEAT_MIN_MS or more. */
  readonly sseHeartbeatMs: number
  /**
   * Bytes of memory for what sessions not in use keep: warm idle actors, the folded states of
   * released sessions and the journals' recent records. Undefined = an eighth of the V8 heap
   * limit, at most DEFAULT_CACHE_BYTES_CAP.
   */
  readonly cacheBytes: number | undefined
  /**
   * Bytes of request bodies held in memory at once (from first byte to answer); past it a new
   * body is refused with 503, unless nothing else is held. Undefined = a quarter of the heap limit.
   */
  readonly inflightBodyBytes: number | undefined
  /**
   * Bytes of V8 heap session creates, opens and turns may take at once, each weighted by what it will take
   * (layers/WorkingMemory.ts); past it they wait in order, then are refused with 503. Undefined =
   * a quarter of the heap limit.
   */
  readonly workingMemoryBytes: number | undefined
  /**
   * Bytes of compiled uploaded modules kept in memory (least recently used dropped past it; the
   * one in use is always kept). Undefined = a sixteenth of the heap limit.
   */
  readonly moduleCacheBytes: number | undefined
  /** Open HTTP connections; past this a new connection is refused with 503 (health still answers). */
  readonly maxConnections: number
  /** How long a connection may take to send a request's headers, in milliseconds (then 408). */
  readonly headersTimeoutMs: number
  /**
   * How long a whole request (headers and body) may take to arrive from its first byte, in
   * milliseconds (then 408); at least `headersTimeoutMs` (`brain serve` refuses to start otherwise).
   */
  readonly requestTimeoutMs: number
  /**
   * How long an idle keep-alive connection is kept for its next request, in milliseconds, at least
   * KEEP_ALIVE_TIMEOUT_MIN_MS; clients are told a whole second less.
   */
  readonly keepAliveTimeoutMs: number
  /**
   * Milliseconds a connection may hold bytes of an answer (not an SSE stream) its client takes
   * none of before it is closed and those bytes let go; 0: no bound.
   */
  readonly responseStallMs: number
  /**
   * Connections SSE streams never take, kept for every other request: a stream beyond
   * `maxConnections` minus these is refused 503. Undefined = a quarter of `maxConnections`
   * (`reservedConnections`).
   */
  readonly reservedConnections: number | undefined
  /** Events pages and transcripts built at once in the process; more wait their turn. */
  readonly pageReads: number
  /**
   * Bytes: the largest answer (its JSON: status, headers, body) the idempotency log keeps for
   * replay; a larger one is recorded as "completed with status N, answer not kept".
   */
  readonly idempotencyMaxAnswerBytes: number
  /**
   * Live keys the idempotency log holds at most; at the bound a new key is refused with 503
   * `overloaded`. Undefined = as many as a sixteenth of the heap limit holds (layers/idempotency/KeyBound.ts).
   */
  readonly maxIdempotencyKeys: number | undefined
  /**
   * Idempotency keys one session holds at most (its keyed sends' and submits', live or expired and
   * not yet pruned); at the bound a keyed send or submit with a new key is refused with 503
   * `overloaded` before anything is journaled.
   */
  readonly maxSessionIdempotencyKeys: number
  /**
   * SSE streams one session may have; a new one beyond it is refused with 503 overloaded. Unset:
   * an eighth of the streams sessions' readers may hold (`sessionStreams`); set above those, it is
   * lowered to them (with a warning at start).
   */
  readonly sseMaxSubscribersPerSession: number | undefined
  /** Sessions' SSE streams the process may have; a new one beyond it is refused with 503 overloaded. */
  readonly sseMaxSubscribers: number
  /** Bytes of frames a live SSE subscriber may fall behind before it is cut off (it resumes by cursor). */
  readonly sseBacklogBytes: number
  /** Milliseconds an SSE reader still catching up may leave its socket undrained before it is cut off; 0: no bound. */
  readonly sseStallMs: number
  /** Milliseconds a cut-off SSE stream's socket has to take what it was handed before it is closed; 0: no bound. */
  readonly sseCloseGraceMs: number
  /** Where the loops' telemetry goes (BRAIN_TELEMETRY); `None` drops it. */
  readonly telemetry: TelemetrySink
  /** Bytes of telemetry (serialized) waiting for its sink before new records are dropped. */
  readonly telemetryQueueBytes: number
}

export class ServerConfig extends Context.Tag("brain/ServerConfig")<ServerConfig, ServerConfigShape>() {}

/**
 * How long a stop waits for the turns it cancels (`Sessions.interruptAll`) to close: a grace for
 * executors to confirm they stopped, one for the loop to return, one for a loop interrupted after
 * those to end before it is abandoned, and the closing append's deadline.
 */
export const interruptWaitMs = (c: Pick<ServerConfigShape, "cancelGraceMs" | "cleanupDeadlineMs">): number =>
  3 * c.cancelGraceMs + c.cleanupDeadlineMs

/** The connections SSE streams never take (BRAIN_RESERVED_CONNECTIONS; unset: a quarter of the connections). */
export const reservedConnections = (c: Pick<ServerConfigShape, "maxConnections" | "reservedConnections">): number =>
  c.reservedConnections ?? Math.floor(c.maxConnections / 4)

/** Connections SSE streams (sessions' and hosts' command streams alike) may hold, of `connections` served: all but the reserve. */
export const streamConnections = (
  c: Pick<ServerConfigShape, "maxConnections" | "reservedConnections">,
  connections: number = c.maxConnections
): number => Math.max(0, connections - reservedConnections(c))

/** Of `streams` stream connections, those kept for hosts' command streams: sessions' readers never take them. */
export const hostStreamReserve = (streams: number): number => Math.floor(streams / HOST_STREAM_SHARE)

type StreamSettings = Pick<ServerConfigShape, "maxConnections" | "reservedConnections" | "sseMaxSubscribers" | "sseMaxSubscribersPerSession">

/** Streams sessions' readers may hold at once, with `connections` served: the stream connections less the hosts' reserve, at most BRAIN_SSE_MAX_SUBSCRIBERS. */
export const readerStreams = (c: StreamSettings, connections: number = c.maxConnections): number => {
  const streams = streamConnections(c, connections)
  return Math.min(c.sseMaxSubscribers, streams - hostStreamReserve(streams))
}

/**
 * Streams one session may hold, with `connections` served: BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION,
 * at most the readers' streams (above them it would never apply, and one session could take every
 * stream); unset, an eighth of the readers' streams (SSE_SESSION_SHARE), at least 1.
 */
export const sessionStreams = (c: StreamSettings, connections: number = c.maxConnections): number => {
  const readers = Math.max(1, readerStreams(c, connections))
  return c.sseMaxSubscribersPerSession === undefined
    ? Math.max(1, Math.floor(readers / SSE_SESSION_SHARE))
    : Math.min(c.sseMaxSubscribersPerSession, readers)
}

export const defaults: ServerConfigShape = {
  maxModelCalls: 128,
  maxToolCallsPerDispatch: 128,
  maxModelMs: 300 * 1000,
  maxModelOutputBytes: 16 * 1024 * 1024,
  models: undefined,
  environments: undefined,
  maxEnvironmentResponseBytes: 4 * 1024 * 1024,
  wasmWorkers: undefined,
  wasmThreads: undefined,
  wasmInlineMs: 10,
  maxWasmMemoryBytes: 128 * 1024 * 1024,
  maxWasmComputeMs: 10_000,
  maxWasmIoBytes: 16 * 1024 * 1024,
  maxWasmModuleBytes: 32 * 1024 * 1024,
  maxWasmStoreBytes: 1024 * 1024 * 1024,
  wasmCompileQueue: 8,
  maxTurnMs: 1800 * 1000,
  maxToolMs: 120 * 1000,
  maxEmittedBytes: 1024 * 1024,
  // Sixteen times BRAIN_MAX_WASM_IO_BYTES: far above what an honest turn writes (its transcript's
  // growth, bounded by the room its next input leaves it, its model and tool calls, 1 MiB of
  // Events), far below the gigabytes a loop repeating its largest request could write.
  maxTurnWriteBytes: 256 * 1024 * 1024,
  // A session's kv is held in memory whole, across turns: a quarter of what one turn may write.
  maxSessionKvBytes: 64 * 1024 * 1024,
  // Sixteen turns at BRAIN_MAX_TURN_WRITE_BYTES: far above what an honest session writes in its
  // life (its transcript and calls, kilobytes a turn), far below a disk one session should fill.
  maxSessionJournalBytes: 4 * 1024 * 1024 * 1024,
  // Room for the turns running when the watermark is reached to close, for ends and deletes, and
  // for the checkpoints and logs written beside the journals.
  minFreeDiskBytes: 1024 * 1024 * 1024,
  // A quarter of maxWasmIoBytes: a loop's output carries the message again, with the model's answer.
  maxInputBytes: 4 * 1024 * 1024,
  cancelGraceMs: 5000,
  stagedOpeningMs: 100,
  journalLogBytes: COMMIT_LOG_BYTES,
  hostIdleExpiryMs: 24 * 3600 * 1000,
  sessionIdleTtlMs: undefined,
  cleanupDeadlineMs: 30_000,
  listen: "127.0.0.1:3210",
  dataDir: "./brain-data",
  apiToken: undefined,
  requestRetentionMs: 24 * 3600 * 1000,
  maxRequestBytes: 32 * 1024 * 1024,
  drainDeadlineMs: 60_000,
  sseHeartbeatMs: 15_000,
  cacheBytes: undefined,
  inflightBodyBytes: undefined,
  workingMemoryBytes: undefined,
  moduleCacheBytes: undefined,
  maxConnections: 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
  responseStallMs: RESPONSE_STALL_MS,
  reservedConnections: undefined,
  pageReads: PAGE_READS,
  idempotencyMaxAnswerBytes: IDEMPOTENCY_MAX_ANSWER_BYTES,
  maxIdempotencyKeys: undefined,
  maxSessionIdempotencyKeys: SESSION_IDEMPOTENCY_KEYS,
  sseMaxSubscribersPerSession: undefined,
  sseMaxSubscribers: SSE_SUBSCRIBERS,
  sseBacklogBytes: SSE_BACKLOG_BYTES,
  sseStallMs: SSE_STALL_MS,
  sseCloseGraceMs: SSE_CLOSE_GRACE_MS,
  telemetry: noSink,
  telemetryQueueBytes: TELEMETRY_QUEUE_BYTES
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
    "keep idle session actors warm this long (0 = forever; unset = release at once)",
    TIMER_SETTING_MAX_MS
  ),
  cleanupDeadlineMs: timerMs("BRAIN_CLEANUP_DEADLINE_MS", 0, defaults.cleanupDeadlineMs, "bound on waits inside cleanup and on an outcome's commit (0 = no bound)"),
  listen: Config.string("BRAIN_LISTEN").pipe(Config.withDefault(defaults.listen), Config.withDescription("host:port to listen on")),
  // A blank path would silently be the current directory.
  dataDir: Config.string("BRAIN_DATA_DIR").pipe(
    Config.validate({ message: "an empty value names no directory", validation: (dir) => dir.trim().length > 0 }),
    Config.withDefault(defaults.dataDir),
    Config.withDescription("the data directory")
  ),
  apiToken: Config.option(Config.redacted("BRAIN_API_TOKEN")),
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
  inflightBodyBytes: optionalAtLeast("BRAIN_INFLIGHT_BODY_BYTES", 1, "request body bytes held at once (unset: 1/4 of the heap limit)"),
  workingMemoryBytes: optionalAtLeast(
    "BRAIN_WORKING_MEMORY_BYTES",
    1,
    "heap bytes session creates, opens and turns may take at once, each weighted by what it reads or brings (unset: 1/4 of the heap limit)"
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
  Config.map((c): ServerConfigShape => ({
    maxModelCalls: c.maxModelCalls,
    maxToolCallsPerDispatch: c.maxToolCallsPerDispatch,
    maxModelMs: c.maxModelSecs * 1000,
    maxModelOutputBytes: c.maxModelOutputBytes,
    models: Option.getOrUndefined(Option.filter(c.models, (m) => m.trim().length > 0)),
    environments: Option.getOrUndefined(Option.filter(c.environments, (m) => m.trim().length > 0)),
    maxEnvironmentResponseBytes: c.maxEnvironmentResponseBytes,
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
    cleanupDeadlineMs: c.cleanupDeadlineMs,
    listen: c.listen,
    dataDir: c.dataDir,
    // A blank token is no token: it would let anyone in, so it is refused beyond loopback like none.
    apiToken: Option.getOrUndefined(Option.filter(Option.map(c.apiToken, Redacted.value), (t) => t.trim().length > 0)),
    requestRetentionMs: c.requestRetentionSecs * 1000,
    maxRequestBytes: c.maxRequestBytes,
    drainDeadlineMs: c.drainDeadlineMs,
    sseHeartbeatMs: c.sseHeartbeatMs,
    cacheBytes: Option.getOrUndefined(c.cacheBytes),
    inflightBodyBytes: Option.getOrUndefined(c.inflightBodyBytes),
    workingMemoryBytes: Option.getOrUndefined(c.workingMemoryBytes),
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
export const layerWith = (overrides: Partial<ServerConfigShape>) => Layer.succeed(ServerConfig, { ...defaults, ...overrides })
