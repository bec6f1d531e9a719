/**
 * Named limits, each with its unit and why. Deployment-tunable ones are read through
 * ServerConfig (`Config`); these are their defaults and the fixed limits of the formats.
 */

/** Bytes. The largest journal frame body; a larger length field is corruption, not a torn write. */
export const MAX_FRAME_BYTES = 64 * 1024 * 1024 - 64

/**
 * Bytes. The most a record's payload JSON may take when Brain checks it before building the record
 * (a tool's outcome): the frame maximum less room for the frame's header and kind, so a payload
 * within it always fits.
 */
export const MAX_PAYLOAD_BYTES = MAX_FRAME_BYTES - 1024

/**
 * Bytes. The largest value of a setting that bounds one outcome's payload (BRAIN_MAX_MODEL_OUTPUT_BYTES,
 * BRAIN_MAX_WASM_IO_BYTES, BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES): half a frame, so the outcome
 * record with its JSON escaping and envelope always fits MAX_FRAME_BYTES.
 */
export const OUTCOME_SETTING_CEILING_BYTES = 32 * 1024 * 1024

/**
 * Bytes. What a WebAssembly loop's input is kept free for besides the transcript, the
 * configuration and a turn's input: the runtime envelope, field names and a small turn's Events.
 * A save leaves the transcript no more than BRAIN_MAX_WASM_IO_BYTES less these (layers/sessions/TranscriptRoom.ts).
 */
export const INPUT_ENVELOPE_BYTES = 16 * 1024

/**
 * Milliseconds. The largest value of a setting that ends up in a timer (2^31 − 1, about 24.8 days):
 * Node's `setTimeout` takes no longer delay and fires a longer one after 1 ms instead.
 */
export const TIMER_SETTING_MAX_MS = 2 ** 31 - 1

/**
 * Milliseconds. A tool's `timeout_ms` at most, as a create body gives it: Node's timer maximum, as
 * for a session's `idle_ttl_ms`, so that a call's `deadline_at_ms` (now + it) is a whole time a
 * timer can wait for. A stored configuration with a larger one (written before the bound) counts
 * as this.
 */
export const TOOL_TIMEOUT_MAX_MS = TIMER_SETTING_MAX_MS

/**
 * Milliseconds. The longest a model provider's error response (an error status, or a 2xx that is
 * not an event stream) has its body read, counted from its headers. The status already says how
 * the call fails; the body is only its detail (the first 16 KiB kept), so a body that drips (a
 * byte now and then, never stalling for BRAIN_MAX_MODEL_SECS) must not hold the call and its
 * session until the turn's deadline. An error body of any size Brain keeps comes well within it
 * on a working connection.
 */
export const MODEL_ERROR_BODY_MS = 5_000

/**
 * Milliseconds. The most wait advice a model provider's error response (`retry-after-ms`,
 * `retry-after`) is recorded as in a failure's `details.retry_after_ms`: Node's timer maximum, so
 * that a loop or client may hand it to a timer as it is (a longer one fires after 1 ms instead),
 * and a number a server makes up (`retry-after: 99999999999999999999`) is recorded as a whole
 * number, not `1e+23`.
 */
export const MODEL_RETRY_ADVICE_MAX_MS = TIMER_SETTING_MAX_MS

/**
 * Characters. The shortest model key Brain redacts from what it records and shows (a failure's
 * message and details, a model's answer, a live delta). A key this long or longer is replaced
 * wherever it occurs, inside a longer string too (a URL's query, an echoed header, a run of other
 * characters): a real provider key is 32 or more characters (OpenAI, Anthropic, Google, Azure,
 * Mistral, Groq), so it never occurs by chance in ordinary text. A shorter key is a placeholder for
 * a server that takes any key ("k", "none", "EMPTY", "ollama", "not-needed"): replacing it
 * wherever its characters occur would mangle ordinary text (a usage count's name, the binding's
 * name, the model's words) while protecting nothing, so it is not redacted, and the server says
 * so once at start for its binding (never quoting the key).
 */
export const MIN_REDACTED_KEY_CHARS = 16

/** Bytes. A segment rotates once it would pass this size, so no file grows without bound. */
export const SEGMENT_ROTATE_BYTES = 64 * 1024 * 1024

/** Appends. Pending appends per lane before appenders wait: bounds the writer's memory. */
export const JOURNAL_QUEUE_APPENDS = 16_384

/** Bytes. Pending payload bytes across both lanes before appenders wait. */
export const JOURNAL_QUEUE_BYTES = 256 * 1024 * 1024

/** Appends. The most appends one group-commit round takes, so one round's latency stays bounded. */
export const JOURNAL_BATCH_APPENDS = 4_096

/** Records. A subscriber this far behind the committed feed is cut off and resumes by cursor. */
export const SUBSCRIBER_BACKLOG_RECORDS = 4_096

/** Records. How often the file journal remembers a frame position, to seek without a full scan. */
export const READ_INDEX_STRIDE = 64

/**
 * Bytes. The file journal also remembers a frame position this far past the last one remembered:
 * a read from any sequence skips less than this (not up to READ_INDEX_STRIDE large records).
 */
export const READ_INDEX_BYTES = 256 * 1024

/** Files. Open segment descriptors kept before the least recently used ones are closed. */
export const OPEN_JOURNAL_FILES = 1_024

/**
 * Milliseconds. At most one warning per interval that the file journal could not open a file for
 * want of descriptors (EMFILE, ENFILE), with the count of accesses refused since the last one.
 */
export const JOURNAL_EXHAUSTED_WARN_MS = 60_000

/** Bytes a commit-log file takes before rounds switch to the other one (the journal's recovery reads at most twice this). */
export const COMMIT_LOG_BYTES = 16 * 1024 * 1024

/** Milliseconds. How long a starting process waits for a data-directory lock held by a live process. */
export const DATA_DIR_LOCK_WAIT_MS = 5_000

/** Events. The most Events one page returns. */
export const PAGE_EVENTS = 1_000

/** Sessions in one page of `GET /v1/sessions` when the request names no `limit`. */
export const LIST_PAGE_SESSIONS = 100

/** Bytes. About the most journal frame bytes one page returns (a single larger Event comes alone). */
export const PAGE_BYTES = 8 * 1024 * 1024

/**
 * Bytes. What a page's first read of the journal asks for per Event it still wants (about a
 * typical Event's frame; each further read of the page asks for twice as much): a page of one
 * Event reads about its frame from disk, not PAGE_BYTES.
 */
export const PAGE_READ_BYTES_PER_EVENT = 16 * 1024

/** Records. What that read asks for per Event it still wants: private records (transcript, kv) lie between Events. */
export const PAGE_READ_RECORDS_PER_EVENT = 4

/**
 * Levels. JSON nested deeper is refused wherever it comes in — an HTTP body, every text a Wasm
 * guest hands the host (a host call's request, a loop's or a tool's output), an http
 * Environment's answer to a lifecycle step and an error body it sends — checked by a scan of the
 * text before it is parsed: no request needs it, and deep values overflow the recursive code they
 * reach (JSON.stringify, the journal's encoder). A tool's output is checked where its outcome is
 * recorded, and a model's tool-call arguments once its answer is whole, before anything walks
 * them (models/Provider.ts `withCheckedCalls`).
 */
export const MAX_JSON_DEPTH = 64

/**
 * Milliseconds. The silence that ends the linger of a connection closing after an answer given
 * before its request's body was read (a 413 for a declared length over BRAIN_MAX_REQUEST_BYTES, a
 * 401, a 405, a chunked body cut at the bound). Once the answer is sent, what the client still
 * sends is read and discarded rather than left unread: a socket closed with bytes unread is reset,
 * and the reset can destroy the answer before a client that uploads before it reads has read it.
 * Each chunk that arrives gives the client this long again, so a slow upload keeps its connection
 * for as long as it makes progress (up to LINGER_MAX_MS and LINGER_BYTES), and a silent client is
 * let go after this long, as an idle keep-alive connection is by default
 * (BRAIN_KEEP_ALIVE_TIMEOUT_MS). The client's own close ends the linger sooner.
 */
export const LINGER_IDLE_MS = 5_000

/**
 * Milliseconds. The longest such a connection lingers, however steadily its client sends: a
 * client dribbling bytes for ever cannot hold a socket for ever. 8 MiB sent at 0.3 MB/s fits.
 */
export const LINGER_MAX_MS = 30_000

/**
 * Milliseconds. With BRAIN_SESSION_IDLE_TTL_MS unset, how long a session's cell stays in memory
 * once unused before it is released (between this and twice this: one sweep of the registry per
 * period releases those idle since the sweep before). A client driving a session sends its next
 * request within about this of the previous answer (a program's turns, a status read after an
 * answer); without it every such request reopened the cell from the projection's cache and
 * released it again (about 25 of Effect's instructions and 60 µs of main-thread CPU per keyed text
 * turn at one session, docs/benchmarks.md "One session's keyed turn, stop 63"). Kept within the
 * warm share of BRAIN_CACHE_BYTES (none kept when that is 0), released first when it is full.
 */
export const SESSION_RELEASE_GRACE_MS = 1_000

/**
 * Bytes. BRAIN_CHECKPOINT_AFTER_BYTES's default: journal bytes a session kept warm (never released
 * while the server runs: `idle_ttl_ms: 0`, or turns coming faster than its TTL) appends after its
 * last checkpoint before one is written in the background, after a turn (and at least as many
 * bytes as that checkpoint holds: sessions/Checkpoints.ts, `warmCheckpointDue`). Without it such a
 * session had no checkpoint newer than its last release, and its first open after a `kill -9`
 * folded its whole journal (0.4-0.9 s for 3,000 small turns, seconds for tens of thousands). 1 MiB
 * of journal folds in about a tenth of a second on a loaded 2-core VM (docs/benchmarks.md,
 * "Checkpoints of warm sessions, stop 65"), and a small state's checkpoint per MiB appended (a few
 * KiB and two fsyncs) is nothing beside the journal's own fsync per turn.
 */
export const DEFAULT_CHECKPOINT_AFTER_BYTES = 1024 * 1024

/** Bytes. What such a connection discards at most before it is closed anyway (twice BRAIN_MAX_REQUEST_BYTES's default). */
export const LINGER_BYTES = 64 * 1024 * 1024

/** Bytes. The largest kind name; the kind length field also carries the atomic-group flag. */
export const MAX_KIND_BYTES = 255

/** Characters (UTF-16 units). The longest Event kind an Agentloop, a tool or a host may emit: the extension record's schema bound. */
export const MAX_EVENT_KIND_CHARS = 255

/**
 * Bytes. With BRAIN_CACHE_BYTES unset, what sessions not in use keep in memory (warm idle actors,
 * folded states of released sessions, recent journal records) is an eighth of the V8 heap limit,
 * and at most this: enough to keep thousands of ordinary sessions warm, while a small heap keeps
 * most of itself for the requests in flight.
 */
export const DEFAULT_CACHE_BYTES_CAP = 192 * 1024 * 1024

/** The share of the V8 heap limit given to those caches when BRAIN_CACHE_BYTES is unset. */
export const CACHE_HEAP_FRACTION = 1 / 8

/** Bytes (UTF-8). The longest `Idempotency-Key`; at least 1. */
export const IDEMPOTENCY_KEY_MAX_BYTES = 256

/** Records. Pending idempotency claims and answers before callers wait: bounds the store's writer memory. */
export const IDEMPOTENCY_QUEUE_RECORDS = 16_384

/** Bytes. Pending idempotency record bytes (answers can be large) before callers wait. */
export const IDEMPOTENCY_QUEUE_BYTES = 64 * 1024 * 1024

/** Records. The most idempotency records one group-commit round takes, so a round's latency stays bounded. */
export const IDEMPOTENCY_BATCH_RECORDS = 4_096

/**
 * Bytes. Compaction rewrites the idempotency log once this much of it belongs to dropped entries
 * (and at least half of it does), so rewrites stay rare and their cost is amortized.
 */
export const IDEMPOTENCY_REWRITE_DEAD_BYTES = 4 * 1024 * 1024

/** Milliseconds. The shortest interval between background idempotency compactions (retention / 4 otherwise). */
export const IDEMPOTENCY_COMPACT_MIN_INTERVAL_MS = 1_000

/**
 * Bytes. The default largest answer the idempotency log keeps (BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES),
 * measured as the answer's JSON (status, headers, body). Ordinary answers are a few KiB; a larger
 * one is recorded as "completed with status N, answer not kept", so the log stays within
 * retention × request rate × this, and a replay reads at most this much back.
 */
export const IDEMPOTENCY_MAX_ANSWER_BYTES = 1024 * 1024

/**
 * Bytes. The most BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES may be: a kept answer is read whole into
 * memory on each replay and compaction copy, and its record must stay below the frame maximum.
 */
export const IDEMPOTENCY_MAX_ANSWER_CEILING_BYTES = 32 * 1024 * 1024

/**
 * The default of BRAIN_MAX_SESSION_LOG_KEYS, as a share of BRAIN_MAX_IDEMPOTENCY_KEYS: the keys the
 * server-wide idempotency log holds for requests about one session (its keyed cancels, ends,
 * deletes and kept refusals of sends and submits), at least 1. One session's requests can then
 * take a sixty-fourth of the log, not all of it: without it, one client's keyed cancels of its own
 * idle session filled the log in under a minute and every other client's new keys (creates,
 * deletes) were refused for the whole retention.
 */
export const SESSION_LOG_KEYS_SHARE = 1 / 64

/**
 * The default of BRAIN_DELETE_RESERVE_KEYS, as a share of BRAIN_MAX_IDEMPOTENCY_KEYS: keys the log
 * takes past its bound, for deletes only (a keyed delete's own key and the keys of sends and
 * submits its session hands over), so that a log other sessions filled never leaves a session
 * undeletable. Bounded, so the index holds at most the bound plus this many keys (a quarter more
 * heap than the bound's, at the same cost a key).
 */
export const DELETE_RESERVE_KEYS_SHARE = 1 / 4

/**
 * Keys. The default of BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS: the keys of keyed sends and submits one
 * session holds at most (each an entry of its state while it is open, about 0.4 KiB of heap, and
 * of each of its checkpoints, about 0.2 KiB): about 37 MiB and 20 MiB at the bound. Past it a new
 * key is refused, so one session sent keyed turns without pause cannot grow its state, its
 * checkpoints and the heap until its keys expire.
 */
export const SESSION_IDEMPOTENCY_KEYS = 100_000

/**
 * Milliseconds. A session at BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS drops its expired keys once the
 * oldest is this long past its expiry (an eighth of retention otherwise): each prune walks every
 * key, so a full session refused a stream of new keys walks them at most once per interval. Also
 * how often the server says at most that a session is refusing new keys.
 */
export const SESSION_KEYS_PRUNE_MS = 60_000

/**
 * Bytes. The idempotency log is read in chunks of this size at open (a larger frame is read
 * whole, up to the frame maximum), and compaction writes its copy in batches of about this size.
 */
export const IDEMPOTENCY_READ_CHUNK_BYTES = 1024 * 1024

/**
 * Records and bytes. The newest records of each open journal are kept in memory, so the reads a
 * turn makes of what it just wrote (and a live reader's catch-up) cost no file IO. A turn reads
 * back from its previous activation's start: about 12 records for a text turn, 33 for a tool loop
 * of 2 rounds of 4 calls; a longer turn's reads go to the file (the page cache, usually).
 */
export const RECENT_RECORDS = 48
export const RECENT_BYTES = 24 * 1024

/**
 * Bytes. All recent tails together when the journal is used alone (the server sizes it from
 * BRAIN_CACHE_BYTES); the least recently written sessions' tails are dropped first.
 */
export const RECENT_TOTAL_BYTES = 64 * 1024 * 1024

/**
 * Sessions. Opened journals kept in memory (segments, read index, recent tail); past this the least
 * recently used idle ones are dropped and reopened (rescanned) on their next access.
 */
export const OPEN_JOURNAL_HANDLES = 16_384

/**
 * Bytes. The heap one opened journal keeps besides its recent tail (counted in the tails' bound)
 * and what its store says it keeps (JOURNAL_SEGMENT_BYTES, JOURNAL_INDEX_ENTRY_BYTES): the core's
 * map entries, its shared open and its handle object, rounded up. A listing of 6,000 small
 * sessions kept about 3.3 KiB of heap per session after forced collections, tails and released
 * states included, before open journals were weighed (docs/journal.md, "Memory").
 */
export const OPEN_JOURNAL_BYTES = 2048

/**
 * Bytes. One session id in the journal's in-memory listing (journal/Listing.ts): its string and
 * its slot in the sorted array, rounded up. The index holds at most LISTING_HEAP_FRACTION of the
 * heap limit of them (about 21,800 ids with a 128 MiB heap); past that each page lists the sessions
 * directory again.
 */
export const LISTED_ID_BYTES = 96
export const LISTING_HEAP_FRACTION = 1 / 64

/** Bytes. One segment as an open file journal keeps it (its path and sizes). */
export const JOURNAL_SEGMENT_BYTES = 256

/** Bytes. One entry of an open file journal's read index (READ_INDEX_STRIDE). */
export const JOURNAL_INDEX_ENTRY_BYTES = 48

/**
 * Bytes. How far a live SSE subscriber may fall behind (frames not yet handed to its socket)
 * before it is cut off and resumes by cursor; BRAIN_SSE_BACKLOG_BYTES. Bounded in Events too, by
 * SUBSCRIBER_BACKLOG_RECORDS. An empty backlog always takes the next Event, however large (commits
 * gathered into one write that no backlog holds are offered in parts that one does).
 */
export const SSE_BACKLOG_BYTES = 16 * 1024 * 1024

/**
 * Bytes. About the most frame bytes one SSE write hands a socket before waiting for it to drain
 * (one commit's frames always go whole): with the backlog, what one slow subscriber holds.
 */
export const SSE_WRITE_BYTES = 256 * 1024

/**
 * Bytes. About the most journal frame bytes one SSE catch-up read takes, and no more than
 * BRAIN_SSE_BACKLOG_BYTES (a larger Event comes alone).
 */
export const SSE_CATCH_UP_BYTES = 1024 * 1024

/**
 * Reads. SSE catch-up pages read at once in the process; more wait their turn. Reading a page of
 * large Events is main-thread work (checksums, UTF-8, JSON): without a bound, a few dozen readers
 * reconnecting to a session of 3 MB Events held other sessions' sends up for seconds.
 */
export const SSE_CATCH_UP_READS = 2

/**
 * Milliseconds. A session's live fan-out (one write of the shared frames to each of its SSE
 * subscribers' sockets) that took less than this is not paced: the next commit goes out at once.
 */
export const SSE_FAN_OUT_PACE_MIN_MS = 1

/**
 * Milliseconds. After a fan-out that took t ms (at least SSE_FAN_OUT_PACE_MIN_MS), the session's
 * next commits wait min(3t, this) and go out together, in one write per subscriber: a socket write
 * costs a system call whatever it holds, and a turn commits an Event at a time, so hundreds of
 * subscribers of one session were written to once per Event and slowed every other session's
 * turns. Paced, a fan-out takes at most about a quarter of the main thread, and a live Event
 * waits at most this.
 */
export const SSE_FAN_OUT_PACE_MAX_MS = 25

/** Milliseconds. How long an SSE reader still catching up may leave its socket undrained before it is cut off; BRAIN_SSE_STALL_MS. */
export const SSE_STALL_MS = 30_000

/** Milliseconds. How long a cut-off SSE stream's socket has to take what it was handed before it is closed; BRAIN_SSE_CLOSE_GRACE_MS. */
export const SSE_CLOSE_GRACE_MS = 5_000

/**
 * Milliseconds. How long a connection may hold bytes of an answer its client takes none of before
 * it is closed and those bytes let go; BRAIN_RESPONSE_STALL_MS. As BRAIN_SSE_STALL_MS for a stream.
 */
export const RESPONSE_STALL_MS = 30_000

/** Milliseconds. How long an idle keep-alive connection is kept for its next request; BRAIN_KEEP_ALIVE_TIMEOUT_MS (Node's default). */
export const KEEP_ALIVE_TIMEOUT_MS = 5_000

/**
 * Milliseconds. The shortest BRAIN_KEEP_ALIVE_TIMEOUT_MS: clients are told a whole second less
 * (`Keep-Alive: timeout=`, in whole seconds, rounded down), so that they stop reusing a connection
 * before the server closes it; below 2 s they would be told `timeout=0`, not to reuse it at all.
 */
export const KEEP_ALIVE_TIMEOUT_MIN_MS = 2_000

/**
 * Milliseconds. The shortest BRAIN_SSE_HEARTBEAT_MS but 0 (none): a comment on every stream each
 * millisecond would cost 10,000 streams ten million writes a second.
 */
export const SSE_HEARTBEAT_MIN_MS = 100

/**
 * Reads. Events pages and transcripts built at once in the process; BRAIN_PAGE_READS. Building one
 * (reading and decoding the journal's frames, encoding the answer's JSON) is main-thread work: a
 * hundred readers of an 8 MiB page at once held health checks up for 20 s.
 */
export const PAGE_READS = 2

/** Subscribers. SSE streams of sessions in the process before new ones are refused (503). */
export const SSE_SUBSCRIBERS = 10_000

/**
 * A divisor. Unless BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION is set, one session may hold this
 * fraction (an eighth) of the streams sessions' readers may take (84 with the defaults): a
 * session's honest followers are a few (a UI, a logger, some tabs), and one session's readers, or
 * one client's on one session, must leave the other sessions seven eighths of the streams. A
 * bound above the process's streams would never apply.
 */
export const SSE_SESSION_SHARE = 8

/**
 * A divisor. Of the connections SSE streams may hold (BRAIN_MAX_CONNECTIONS less
 * BRAIN_RESERVED_CONNECTIONS), this fraction (an eighth: 96 with the defaults) is kept for hosts'
 * command streams, which sessions' readers never take: a host reconnecting its stream must not be
 * refused because other tenants' readers hold every stream, or its sessions' calls fail
 * `host_disconnected`. An application has few hosts, each with one stream; command streams may
 * take every stream connection.
 */
export const HOST_STREAM_SHARE = 8

/**
 * Bytes. The default bound on telemetry waiting for its sink (BRAIN_TELEMETRY_QUEUE_BYTES),
 * counted as the records' serialized JSON: telemetry is best-effort, so a slow or stalled sink
 * costs at most this much memory and then drops, never blocks a turn.
 */
export const TELEMETRY_QUEUE_BYTES = 8 * 1024 * 1024
/** Records. Telemetry records waiting for the sink, whatever their size (small records cost bookkeeping too). */
export const TELEMETRY_QUEUE_RECORDS = 16_384
/** Bytes. The largest one telemetry record (its JSON line); a larger one is dropped, so one call cannot fill the queue. */
export const TELEMETRY_RECORD_BYTES = 256 * 1024
/** Records. The most records one write to the file or one OTLP export carries, so one request stays small. */
export const TELEMETRY_BATCH_RECORDS = 512
/** Milliseconds. One OTLP export may take this long; then its batch is dropped and the next one is tried. */
export const TELEMETRY_EXPORT_TIMEOUT_MS = 10_000
/** Milliseconds. A stopping server gives its telemetry sink this long to take what is still queued. */
export const TELEMETRY_FLUSH_MS = 2_000
/** Milliseconds. At most one warning per sink per interval about dropped or failed telemetry, with the counts. */
export const TELEMETRY_WARN_INTERVAL_MS = 60_000

/**
 * Commands (tool calls and cancels). The most commands waiting in one host's command stream while
 * its socket takes no more (a host that does not read). A call offered beyond it is not sent
 * (`error`, nothing happened) rather than let a host that stopped reading grow the server's memory;
 * a cancel beyond it is not sent (the call ends unconfirmed). Commands offered while the socket
 * takes what it is given are not counted: a burst goes out whole (hosts/CommandStream.ts).
 */
export const HOST_COMMAND_QUEUE = 1_024
/**
 * Bytes. The most of a host's command stream handed to its connection at a time (one frame larger
 * than it goes alone). A frame handed over cannot be taken back, one still queued can (a stopped
 * call is then never sent): small, so that a host that stops reading leaves little beyond recall
 * past the socket buffers; large enough that a dispatch's calls still go out in one write.
 */
export const HOST_COMMAND_CHUNK_BYTES = 16 * 1024

/**
 * Hosts. The most results one `POST /v1/hosts/{id}/results` may carry (`{"results": [...]}`):
 * as many as one command stream holds waiting. The request's bytes are bounded apart
 * (BRAIN_MAX_REQUEST_BYTES).
 */
export const HOST_RESULTS_BATCH = 1_024

/**
 * Results. The most results taken from hosts that the server remembers (the call, a digest of the
 * answer, whether its outcome record is durable: some 250 bytes each, about 4 MiB in all), so
 * that a host whose post's answer was lost and which posts the same result again is answered as
 * the first time (204), not 409 `not_in_flight` (hosts/Taken.ts). A repeat comes within seconds
 * (the SDK posts again at most 2 s apart); at a thousand host results a second this still covers
 * some 16 s. Past it the oldest is forgotten, and a repeat for it is `not_in_flight`.
 */
export const HOST_TAKEN_RESULTS = 16_384

/**
 * Milliseconds. How long a result taken from a host is remembered (HOST_TAKEN_RESULTS), at most:
 * far past any repeat of a lost answer (the SDK posts again at most 2 s apart, and once more when
 * its stream drops), and short enough that an idle server does not keep them.
 */
export const HOST_TAKEN_RESULT_MS = 10 * 60_000

/**
 * Hosts. The most registrations a server keeps. Each is a line in `hosts/registrations.jsonl`
 * and an entry in memory for as long as the data directory lives (they survive restarts), so
 * the count is bounded; past it `POST /v1/hosts` answers 503 `overloaded`.
 */
export const MAX_HOSTS = 4_096

/**
 * Milliseconds. The longest wait between two sweeps for host registrations idle past
 * BRAIN_HOST_IDLE_EXPIRY_SECS, so one is removed at most this long after it is due. Sweeps come
 * every tenth of the expiry within HOST_EXPIRY_SWEEP_MIN_MS and this.
 */
export const HOST_EXPIRY_SWEEP_MS = 60_000

/** Milliseconds. The shortest wait between two sweeps: a short expiry does not keep the registry busy. */
export const HOST_EXPIRY_SWEEP_MIN_MS = 1_000

/**
 * Lines. The most host-file records waiting to be appended that nothing waits for (a stream
 * closed, a session deleted). Past it a record is dropped: the file then says less, never
 * something false (the host counts as connected until the next start; the deleted session still
 * holds the host until a sweep finds it gone).
 */
export const HOST_RECORDS_QUEUE = 4_096

/** Bytes of randomness in a host token (256 bits): unguessable; only its SHA-256 is stored. */
export const HOST_TOKEN_BYTES = 32

/**
 * Milliseconds. How long a session open or a turn waits, in order, for its share of the working
 * memory (BRAIN_WORKING_MEMORY_BYTES) before it is refused 503 `overloaded`, having changed
 * nothing: long enough to ride out a burst of large opens (one takes about a second), short
 * enough that a client is told to come back rather than left waiting behind long turns.
 */
export const WORKING_MEMORY_WAIT_MS = 10_000

/**
 * The share of the V8 heap limit a session open's and a turn's working memory may take at once
 * when BRAIN_WORKING_MEMORY_BYTES is unset.
 */
export const WORKING_MEMORY_HEAP_FRACTION = 1 / 4

/**
 * The share of the V8 heap limit large answers not yet taken by their clients may hold at once
 * (BRAIN_ANSWER_BYTES, http/AnswerMemory.ts) when the setting is unset: transcripts (weighed by
 * their characters and one encoded piece) and Events pages above 64 KiB (by their encoded bytes),
 * each from when it is built until its response is written or its connection closed. Measured
 * (2026-12-07, `--max-old-space-size=512`, 8 sessions of one 4 MiB turn): 30 clients asking for
 * their 8 MiB transcripts and reading nothing took the heap from 168 to past 512 MiB in 4 s (each
 * answer held its transcript, pieces of its JSON and its encoding, about 24 MiB) and the process
 * died long before BRAIN_RESPONSE_STALL_MS cut them. An eighth (64 MiB of a 512 MiB heap: seven
 * such transcripts in flight at once) leaves the working memory and the caches their shares.
 */
export const ANSWER_HEAP_FRACTION = 1 / 8

/**
 * The share of the V8 heap limit request bodies held at once may count (BRAIN_INFLIGHT_BODY_BYTES,
 * counted by the bytes that arrive) when the setting is unset. A body admitted waits for its
 * working-memory share parsed, its parsed form on the heap, while a request larger than the
 * working memory's whole bound runs alone past it. Measured (2026-12-07, `node
 * --max-old-space-size=N bin/brain.js serve`, twelve 4 MiB sends at once, `--trace-gc`): a waiting
 * body took 1.45 heap bytes per body byte for ASCII text and 2.8 for text with a character beyond
 * Latin-1 (V8 then holds the whole string at two bytes a character); one 4 MiB turn took 45 to 62
 * MiB of heap for ASCII and 64 to 80 MiB for such text, above an idle server's 26 MiB. With a 128
 * MiB heap that leaves room for one such body beside the turn, not two: at a quarter (raw bytes)
 * twelve 4 MiB sends, or twelve creates with 4 MiB opening transcripts, exhausted the heap (the
 * operator audit, 3 of 3 runs); at a sixteenth two 4 MiB sends of such text still did. A 32nd
 * holds one 4 MiB body at a time at 128 MiB, two at 256 MiB, and 129 MiB of bodies with Node's
 * default 4 GiB heap (thirty-two 4 MiB bodies, or a thousand of 128 KiB, at once).
 */
export const INFLIGHT_BODY_HEAP_FRACTION = 1 / 32

/**
 * Heap bytes a session open takes per byte it reads (the journal it has to open, the checkpoint):
 * measured, with the audit's probe (16 sessions of one 4 MiB turn: a 25 MB journal and an 8 MB
 * checkpoint each), at about 55 MiB of V8 heap per open, 1.65 per byte read; 2 counts it whole.
 */
export const OPEN_HEAP_PER_BYTE = 2

/**
 * Heap bytes a turn takes per byte of its input (its message and media): measured at 50 to 62
 * MiB of V8 heap for a turn of a 4 MiB message (its body parsed, journaled, sent to the model and
 * the model's answer), 12 to 15 per byte; 16 counts it whole. The session's state is counted
 * besides, once (what a model request or a loop's input encodes of it).
 */
export const TURN_HEAP_PER_INPUT_BYTE = 16

/**
 * Heap bytes a session create takes per byte of its request (its configuration and opening
 * transcript, as jsonWeight counts it): measured at its peak (scripts/bench/createHeap.js: creates
 * of about 30 MB bodies on a 4 GiB heap, docs/benchmarks.md "The create's weight, measured") at
 * 12.4 to 13.5 for a long opening transcript (most of it live, not garbage), 6.0 for a long tools
 * list, 5.0 for a long system prompt; 14 counts the heaviest whole.
 */
export const CREATE_HEAP_PER_BODY_BYTE = 14

/**
 * The share of the V8 heap limit compiled uploaded modules may keep in memory when
 * BRAIN_MODULE_CACHE_BYTES is unset (V8 keeps a module's bytes besides its code): as much as the
 * idempotency keys, so a store of large modules cannot fill the heap by being used.
 */
export const MODULE_CACHE_HEAP_FRACTION = 1 / 16

/**
 * Bytes (UTF-8). The most of a failure's message Brain keeps when the text comes from outside its
 * own code (a guest's `brain.fail`, a loop's or a tool's error, a provider's or an Environment's
 * answer): a longer one is cut and says so (`boundedFailure`). A failure is journaled, twice for a
 * turn (its activation's record and its turn's), and JSON escapes a byte as up to 6: bounded so
 * that its record always fits a frame, whatever the text holds.
 */
export const MAX_FAILURE_MESSAGE_BYTES = 64 * 1024

/**
 * Bytes. The most a failure's `details` may take as JSON when they come from outside Brain's own
 * code: larger ones are replaced by a note of their size (`boundedFailure`), for the same reason.
 */
export const MAX_FAILURE_DETAILS_BYTES = 64 * 1024

/**
 * Milliseconds. How long a reading of the data directory's free bytes (statfs) stands before the
 * next create, send or submit reads it again (BRAIN_MIN_FREE_DISK_BYTES): one system call a second
 * at most, not one per request, and a disk filling at a gigabyte a second is seen within a second.
 */
export const DISK_STAT_INTERVAL_MS = 1000

/**
 * Bytes. The most BRAIN_MAX_TOOL_SCHEMA_BYTES may be: Brain compiles a host tool's schema on the
 * main thread, in time that grows with its size (about half a second for 100 KiB of properties on
 * a busy machine), so the setting cannot let one create hold the server for long.
 */
export const TOOL_SCHEMA_SETTING_CEILING_BYTES = 1024 * 1024

/**
 * Instructions of RE2's compiled program, over all the `pattern`s and `patternProperties` keys of
 * one tool schema (estimated from the pattern's text before it is compiled, each counted
 * repetition `{n,m}` as `m` copies of what it repeats). Compiling and matching take time in
 * proportion to it: a schema past it is refused at create.
 */
export const SCHEMA_PATTERN_PROGRAM_MAX = 10_000

/**
 * Program instructions times characters: the most matching a schema's patterns may cost in one
 * check of one value (RE2 matches in time linear in both). A check that would pass it stops
 * matching, and the value breaks the schema (`invalid_input` or `invalid_output`, saying why):
 * a value that huge strings and a pattern-rich schema meet cannot hold the main thread.
 */
export const PATTERN_CHECK_STEPS = 20_000_000

/**
 * Steps: the most one check of one value against a host tool's schema may cost, each application
 * of a (sub)schema counted as one plus one for each of its keywords and for each entry of their
 * arrays and maps (an `enum` or a `const`: one). Ajv's keywords take time in proportion to
 * the schema times the value, and a schema can make that product enormous for a small value (an
 * `allOf` of two `$ref`s, 30 deep, applies the last 2^30 times): a check that would pass it stops,
 * and the value breaks the schema, saying so. Plain checks cost a few steps a byte of the value:
 * this admits values of several MB, in about a second at most.
 */
export const SCHEMA_CHECK_STEPS = 20_000_000

/**
 * Errors one Ajv validating function may hold in one check: Ajv (with `allErrors`) keeps an error
 * for every wrong item (a million wrong items took 139 MB), and a check that passes this stops,
 * showing its first SCHEMA_ISSUES_SHOWN.
 */
export const SCHEMA_CHECK_ERRORS = 10_000

/** Issues of a value that breaks a host tool's schema shown at most (in `invalid_input` and `invalid_output`). */
export const SCHEMA_ISSUES_SHOWN = 20

/**
 * UTF-16 units of an issue's message, and of each key of its path, shown at most (the rest cut,
 * counted): a message quotes the schema (a `pattern` of 60 KB, twenty times) and a path the
 * value's keys (a key of 100 KB under twenty wrong items), and the issues are journaled with the
 * call's outcome, twice (in `issues` and in `message`).
 */
export const SCHEMA_ISSUE_TEXT_CHARS = 256

/** Compiled tool schemas kept at most (each compiled alone, so that one schema cannot affect another's check). */
export const COMPILED_SCHEMAS = 256

/**
 * Bytes (as JSON) of the compiled tool schemas kept, all together: a compiled schema holds about
 * five to fifteen times its JSON in generated code (fifteen for a 4 KiB schema, five for a 200 KiB
 * one), so this bounds what checking keeps in memory.
 */
export const COMPILED_SCHEMA_BYTES = 2 * 1024 * 1024

/**
 * Functions. The most a module may define and still be given an instrumented twin
 * (layers/wasm/TwinCost.ts): Binaryen's time grows with them (measured on a loaded 2-core machine:
 * 10,000 small functions 6 s, 30,000 16 s, 100,000 33 to 190 s, all that time the one
 * instrumenting thread's, which every other module's twin waits for). A module past it runs on
 * worker threads, as one Binaryen cannot instrument does.
 */
export const MAX_TWIN_FUNCTIONS = 10_000

/**
 * Levels. The deepest nesting of blocks, loops, ifs and trys in any function of a module given an
 * instrumented twin: Binaryen's memory and time grow with its square (measured: 4,000 levels 75 MiB
 * above its baseline and 2 s, 10,000 470 MiB, 20,000 1.9 GiB, 1,000,000 3.4 GB of the server's
 * RSS and minutes, whatever its heap limit). A compiler's code nests a few dozen levels; a switch
 * of a few thousand cases as many. Past it the module runs on worker threads.
 */
export const MAX_TWIN_NESTING = 4096

/**
 * Levels squared. The most the squares of a module's functions' deepest nestings may sum to and
 * the module still be given a twin: Binaryen's time grows with it (20 functions nesting 4,000
 * levels, 320 Mi, took 11 s and 550 MiB), where MAX_TWIN_NESTING bounds one function. Four
 * functions at MAX_TWIN_NESTING; ten thousand at 80 levels.
 */
export const MAX_TWIN_NESTING_WORK = 4 * MAX_TWIN_NESTING * MAX_TWIN_NESTING

/**
 * Milliseconds. The longest the instrumenting thread works on one module's twin (from the moment it
 * is handed the module, its start included): past it the thread is terminated and replaced, the
 * module left without a twin (it runs on worker threads) and remembered as such, in the process and
 * beside its kept twins (layers/wasm/InlineModules.ts), and the modules waiting behind it go to the
 * new thread. Modules within the limits above take at most a few seconds (the official loop 0.3 s
 * on a quiet machine, 9 s with 16 runnable threads on 2 cores); this bounds any shape the limits
 * do not foresee, so that no module holds every later module's twin for minutes.
 */
export const TWIN_DEADLINE_MS = 30_000
