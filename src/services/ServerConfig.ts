/**
 * ServerConfig: the deployment's limits and places, read once through `Config` (environment
 * variables by default). Zero means "no bound" for every turn limit.
 */
import { Context, Layer } from "effect"
import {
  COMMIT_LOG_BYTES,
  DEFAULT_CHECKPOINT_AFTER_BYTES,
  IDEMPOTENCY_MAX_ANSWER_BYTES,
  KEEP_ALIVE_TIMEOUT_MS,
  PAGE_READS,
  RESPONSE_STALL_MS,
  SSE_BACKLOG_BYTES,
  SSE_CLOSE_GRACE_MS,
  SSE_STALL_MS,
  HOST_STREAM_SHARE,
  SSE_SESSION_SHARE,
  SSE_SUBSCRIBERS,
  SESSION_IDEMPOTENCY_KEYS,
  TELEMETRY_QUEUE_BYTES
} from "../domain/Limits.js"

import { noSink, type TelemetrySink } from "./Telemetry.js"

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
  /**
   * Bytes (as JSON) of a host tool's `input_schema` or `output_schema` at most, checked at create:
   * Brain compiles each on the main thread, in time that grows with its size.
   */
  readonly maxToolSchemaBytes: number
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
  /** How long an idle session actor stays warm; undefined = released once unused for a grace of 1-2 s (SESSION_RELEASE_GRACE_MS), 0 = forever. */
  readonly sessionIdleTtlMs: number | undefined
  /**
   * Journal bytes a session kept warm appends after its last checkpoint before one is written in
   * the background, after a turn (at least the bytes that checkpoint holds); 0 = none while it is warm
   * (its release and a graceful stop still write one).
   */
  readonly checkpointAfterBytes: number
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
  /**
   * `host:port` of a listener of its own for `/health/live` and `/health/ready` (docs/operations.md,
   * "Probes"), beside the API's; undefined = probes are answered on the API's listener only.
   */
  readonly healthListen: string | undefined
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
   * body is refused with 503, unless nothing else is held. Undefined = a 32nd of the heap limit.
   */
  readonly inflightBodyBytes: number | undefined
  /**
   * Bytes of V8 heap session creates, opens and turns may take at once, each weighted by what it will take
   * (layers/WorkingMemory.ts); past it they wait in order, then are refused with 503. Undefined =
   * a quarter of the heap limit.
   */
  readonly workingMemoryBytes: number | undefined
  /**
   * Bytes large answers (transcripts, Events pages) may hold from when they are built until their
   * clients have taken them (http/AnswerMemory.ts); past it a new one is refused with 503.
   * Undefined = an eighth of the heap limit.
   */
  readonly answerBytes: number | undefined
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
   * Keys: the idempotency log's keys of requests about one session (its keyed cancels, ends,
   * deletes and kept refusals of sends and submits) held at most, so that one session's requests
   * cannot fill the log for every other; past it that session's requests with a new key are
   * refused with 503 `overloaded`. Undefined = a sixty-fourth of `maxIdempotencyKeys`, at least 1
   * (SESSION_LOG_KEYS_SHARE).
   */
  readonly maxSessionLogKeys: number | undefined
  /**
   * Keys: how far deletes (a keyed delete's own key, the keys of sends and submits its session
   * hands over) may take the idempotency log past `maxIdempotencyKeys`, so that a log other
   * sessions filled never leaves a session undeletable. Undefined = a quarter of
   * `maxIdempotencyKeys` (DELETE_RESERVE_KEYS_SHARE).
   */
  readonly deleteReserveKeys: number | undefined
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

/**
 * The connections SSE streams never take, of `connections` served (BRAIN_MAX_CONNECTIONS, or fewer
 * when the open-file limit is low): BRAIN_RESERVED_CONNECTIONS, or unset a quarter of those served
 * (a quarter of the setting would keep every connection of a low open-file limit from streams).
 */
export const reservedConnections = (
  c: Pick<ServerConfigShape, "maxConnections" | "reservedConnections">,
  connections: number = c.maxConnections
): number => c.reservedConnections ?? Math.floor(connections / 4)

/** Connections SSE streams (sessions' and hosts' command streams alike) may hold, of `connections` served: all but the reserve. */
export const streamConnections = (
  c: Pick<ServerConfigShape, "maxConnections" | "reservedConnections">,
  connections: number = c.maxConnections
): number => Math.max(0, connections - reservedConnections(c, connections))

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
  maxToolSchemaBytes: 64 * 1024,
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
  checkpointAfterBytes: DEFAULT_CHECKPOINT_AFTER_BYTES,
  cleanupDeadlineMs: 30_000,
  listen: "127.0.0.1:3210",
  healthListen: undefined,
  dataDir: "./brain-data",
  apiToken: undefined,
  requestRetentionMs: 24 * 3600 * 1000,
  maxRequestBytes: 32 * 1024 * 1024,
  drainDeadlineMs: 60_000,
  sseHeartbeatMs: 15_000,
  cacheBytes: undefined,
  inflightBodyBytes: undefined,
  workingMemoryBytes: undefined,
  answerBytes: undefined,
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
  maxSessionLogKeys: undefined,
  deleteReserveKeys: undefined,
  maxSessionIdempotencyKeys: SESSION_IDEMPOTENCY_KEYS,
  sseMaxSubscribersPerSession: undefined,
  sseMaxSubscribers: SSE_SUBSCRIBERS,
  sseBacklogBytes: SSE_BACKLOG_BYTES,
  sseStallMs: SSE_STALL_MS,
  sseCloseGraceMs: SSE_CLOSE_GRACE_MS,
  telemetry: noSink,
  telemetryQueueBytes: TELEMETRY_QUEUE_BYTES
}

export const layerWith = (overrides: Partial<ServerConfigShape>) => Layer.succeed(ServerConfig, { ...defaults, ...overrides })
