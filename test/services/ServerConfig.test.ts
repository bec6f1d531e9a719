/**
 * ServerConfig read from the environment the way `brain serve` reads it: unset settings take
 * their documented defaults, and "unset" stays distinct from zero where zero means something.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import { describeConfigError } from "../../src/cli/serve.js"
import { hostStreamReserve, readerStreams, reservedConnections, sessionStreams, streamConnections } from "../../src/services/ServerConfig.js"
import { fromConfig } from "../../src/services/ServerConfigEnv.js"
import { validated } from "../../src/services/ServerConfigOverrides.js"

const read = (env: Record<string, string>) =>
  Effect.either(Effect.withConfigProvider(fromConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))

describe("ServerConfig from the environment", () => {
  it.effect("BRAIN_SESSION_IDLE_TTL_MS unset means no TTL (undefined: released after the short grace), 0 means keep forever, N means N", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.sessionIdleTtlMs).toBe(undefined)
      const zero = yield* read({ BRAIN_SESSION_IDLE_TTL_MS: "0" })
      expect(Either.isRight(zero) && zero.right.sessionIdleTtlMs).toBe(0)
      const some = yield* read({ BRAIN_SESSION_IDLE_TTL_MS: "5000" })
      expect(Either.isRight(some) && some.right.sessionIdleTtlMs).toBe(5000)
      const bad = yield* read({ BRAIN_SESSION_IDLE_TTL_MS: "-1" })
      expect(Either.isLeft(bad)).toBe(true)
    }))

  it.effect("BRAIN_JOURNAL_LOG_BYTES is 16 MiB unset, 0 turns the commit log off, and a negative or non-number is refused", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.journalLogBytes).toBe(16 * 1024 * 1024)
      const off = yield* read({ BRAIN_JOURNAL_LOG_BYTES: "0" })
      expect(Either.isRight(off) && off.right.journalLogBytes).toBe(0)
      const small = yield* read({ BRAIN_JOURNAL_LOG_BYTES: "65536" })
      expect(Either.isRight(small) && small.right.journalLogBytes).toBe(65536)
      expect(Either.isLeft(yield* read({ BRAIN_JOURNAL_LOG_BYTES: "-1" }))).toBe(true)
      expect(Either.isLeft(yield* read({ BRAIN_JOURNAL_LOG_BYTES: "big" }))).toBe(true)
    }))

  it.effect("BRAIN_CHECKPOINT_AFTER_BYTES is 1 MiB unset, 0 turns warm sessions' checkpoints off, and a negative or non-number is refused", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.checkpointAfterBytes).toBe(1024 * 1024)
      const off = yield* read({ BRAIN_CHECKPOINT_AFTER_BYTES: "0" })
      expect(Either.isRight(off) && off.right.checkpointAfterBytes).toBe(0)
      const small = yield* read({ BRAIN_CHECKPOINT_AFTER_BYTES: "65536" })
      expect(Either.isRight(small) && small.right.checkpointAfterBytes).toBe(65536)
      expect(Either.isLeft(yield* read({ BRAIN_CHECKPOINT_AFTER_BYTES: "-1" }))).toBe(true)
      expect(Either.isLeft(yield* read({ BRAIN_CHECKPOINT_AFTER_BYTES: "big" }))).toBe(true)
    }))

  it.effect("BRAIN_MAX_SESSION_KV_BYTES is 64 MiB unset, 0 means no bound, and a negative, fractional or non-number value is refused at start by name, from the environment and from code alike", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.maxSessionKvBytes).toBe(64 * 1024 * 1024)
      const off = yield* read({ BRAIN_MAX_SESSION_KV_BYTES: "0" })
      expect(Either.isRight(off) && off.right.maxSessionKvBytes).toBe(0)
      const some = yield* read({ BRAIN_MAX_SESSION_KV_BYTES: "4096" })
      expect(Either.isRight(some) && some.right.maxSessionKvBytes).toBe(4096)
      for (const bad of ["-1", "1.5", "lots", ""]) {
        const r = yield* read({ BRAIN_MAX_SESSION_KV_BYTES: bad })
        expect(Either.isLeft(r), bad).toBe(true)
        if (Either.isLeft(r)) expect(describeConfigError(r.left), bad).toContain("BRAIN_MAX_SESSION_KV_BYTES")
      }
      const given = yield* Effect.either(validated({ maxSessionKvBytes: 2048 }))
      expect(Either.isRight(given) && given.right.maxSessionKvBytes).toBe(2048)
      for (const bad of [-1, 1.5, Number.NaN]) {
        const r = yield* Effect.either(validated({ maxSessionKvBytes: bad }))
        expect(Either.isLeft(r), String(bad)).toBe(true)
        if (Either.isLeft(r)) expect(describeConfigError(r.left), String(bad)).toContain("BRAIN_MAX_SESSION_KV_BYTES")
      }
    }))

  it.effect("BRAIN_MAX_SESSION_JOURNAL_BYTES is 4 GiB and BRAIN_MIN_FREE_DISK_BYTES 1 GiB unset, 0 turns either off, and a negative, fractional, blank or non-number value is refused at start by name, from the environment and from code alike", () =>
    Effect.gen(function*() {
      const GiB = 1024 * 1024 * 1024
      const unset = yield* read({})
      expect(Either.isRight(unset) && [unset.right.maxSessionJournalBytes, unset.right.minFreeDiskBytes]).toEqual([4 * GiB, GiB])
      const cases = [["BRAIN_MAX_SESSION_JOURNAL_BYTES", "maxSessionJournalBytes"], ["BRAIN_MIN_FREE_DISK_BYTES", "minFreeDiskBytes"]] as const
      for (const [name, key] of cases) {
        const off = yield* read({ [name]: "0" })
        expect(Either.isRight(off) && off.right[key], name).toBe(0)
        const some = yield* read({ [name]: "65536" })
        expect(Either.isRight(some) && some.right[key], name).toBe(65536)
        // Above 2^32: a byte count, not a 32-bit one.
        const large = yield* read({ [name]: String(64 * GiB) })
        expect(Either.isRight(large) && large.right[key], name).toBe(64 * GiB)
        for (const bad of ["-1", "1.5", "4GiB", "", " ", "0x10"]) {
          const r = yield* read({ [name]: bad })
          expect(Either.isLeft(r), `${name}=${bad}`).toBe(true)
          if (Either.isLeft(r)) expect(describeConfigError(r.left), `${name}=${bad}`).toContain(name)
        }
        const given = yield* Effect.either(validated({ [key]: 2048 }))
        expect(Either.isRight(given) && given.right[key], name).toBe(2048)
        for (const bad of [-1, 1.5, Number.NaN]) {
          const r = yield* Effect.either(validated({ [key]: bad }))
          expect(Either.isLeft(r), `${key}=${bad}`).toBe(true)
          if (Either.isLeft(r)) expect(describeConfigError(r.left), `${key}=${bad}`).toContain(name)
        }
      }
    }))

  it.effect("BRAIN_REQUEST_TIMEOUT_MS, the time a whole request may take to arrive, is 60 s unset and at least 1 ms", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && [unset.right.requestTimeoutMs, unset.right.headersTimeoutMs]).toEqual([60_000, 10_000])
      const set = yield* read({ BRAIN_REQUEST_TIMEOUT_MS: "120000" })
      expect(Either.isRight(set) && set.right.requestTimeoutMs).toBe(120_000)
      expect(Either.isLeft(yield* read({ BRAIN_REQUEST_TIMEOUT_MS: "0" }))).toBe(true)
    }))

  it.effect("BRAIN_PAGE_READS, the Events pages and transcripts built at once, is 2 unset and at least 1", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.pageReads).toBe(2)
      const set = yield* read({ BRAIN_PAGE_READS: "4" })
      expect(Either.isRight(set) && set.right.pageReads).toBe(4)
      const zero = yield* read({ BRAIN_PAGE_READS: "0" })
      expect(Either.isLeft(zero) && describeConfigError(zero.left)).toContain("BRAIN_PAGE_READS must be a whole number ≥ 1")
    }))

  it.effect("BRAIN_KEEP_ALIVE_TIMEOUT_MS is 5 s unset and at least 2 s (a client is told a whole second less, so that it stops reusing a connection before the server closes it); BRAIN_RESPONSE_STALL_MS, how long an answer may go untaken, is 30 s unset and 0 turns it off", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && [unset.right.keepAliveTimeoutMs, unset.right.responseStallMs]).toEqual([5_000, 30_000])
      const set = yield* read({ BRAIN_KEEP_ALIVE_TIMEOUT_MS: "65000", BRAIN_RESPONSE_STALL_MS: "0" })
      expect(Either.isRight(set) && [set.right.keepAliveTimeoutMs, set.right.responseStallMs]).toEqual([65_000, 0])
      expect(Either.isRight(yield* read({ BRAIN_KEEP_ALIVE_TIMEOUT_MS: "2000" }))).toBe(true)
      for (const bad of ["0", "1", "1999"]) {
        const r = yield* read({ BRAIN_KEEP_ALIVE_TIMEOUT_MS: bad })
        expect(Either.isLeft(r) && describeConfigError(r.left), bad).toContain("BRAIN_KEEP_ALIVE_TIMEOUT_MS must be a whole number from 2000 to")
      }
      expect(Either.isLeft(yield* read({ BRAIN_RESPONSE_STALL_MS: "-1" }))).toBe(true)
    }))

  it.effect("BRAIN_SSE_HEARTBEAT_MS is 15 s unset, 0 for none, or 100 ms or more: a shorter one (a comment per stream every millisecond) is refused naming the setting", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.sseHeartbeatMs).toBe(15_000)
      for (const good of [0, 100, 30_000]) {
        const r = yield* read({ BRAIN_SSE_HEARTBEAT_MS: String(good) })
        expect(Either.isRight(r) && r.right.sseHeartbeatMs, String(good)).toBe(good)
      }
      for (const bad of ["1", "99"]) {
        const r = yield* read({ BRAIN_SSE_HEARTBEAT_MS: bad })
        expect(Either.isLeft(r) && describeConfigError(r.left), bad).toContain("BRAIN_SSE_HEARTBEAT_MS must be a whole number from 100 to 2147483647 (Node's timer maximum, about 24.8 days), or 0 (no heartbeats)")
      }
    }))

  it.effect("BRAIN_RESERVED_CONNECTIONS is unset by default, which keeps a quarter of BRAIN_MAX_CONNECTIONS from SSE streams; set, it is 0 or more", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && [unset.right.reservedConnections, reservedConnections(unset.right)]).toEqual([undefined, 256])
      const small = yield* read({ BRAIN_MAX_CONNECTIONS: "10" })
      expect(Either.isRight(small) && reservedConnections(small.right)).toBe(2)
      const none = yield* read({ BRAIN_RESERVED_CONNECTIONS: "0" })
      expect(Either.isRight(none) && reservedConnections(none.right)).toBe(0)
      const bad = yield* read({ BRAIN_RESERVED_CONNECTIONS: "-1" })
      expect(Either.isLeft(bad) && describeConfigError(bad.left)).toContain("BRAIN_RESERVED_CONNECTIONS must be a whole number ≥ 0")
    }))

  it.effect("by default one session may hold an eighth of the streams sessions' readers may (84 of 672), who leave an eighth of the 768 stream connections (96) to hosts' command streams; a BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION above the readers' streams is lowered to them, and 0 is refused", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.sseMaxSubscribersPerSession).toBe(undefined)
      expect(Either.isRight(unset) && [hostStreamReserve(768), readerStreams(unset.right), sessionStreams(unset.right)]).toEqual([96, 672, 84])
      // The open-file limit may serve fewer connections than BRAIN_MAX_CONNECTIONS: the reserve and
      // the shares follow them (400 served: 100 reserved, 300 streams, 37 for hosts, 263 readers).
      expect(Either.isRight(unset) && [reservedConnections(unset.right, 400), streamConnections(unset.right, 400), readerStreams(unset.right, 400), sessionStreams(unset.right, 400)]).toEqual([100, 300, 263, 32])
      // The operator audit's case: 65,536 configured, 9,904 served; a quarter of the setting (16,384) left streams none.
      const raised = yield* read({ BRAIN_MAX_CONNECTIONS: "65536" })
      expect(Either.isRight(raised) && [reservedConnections(raised.right, 9904), streamConnections(raised.right, 9904)]).toEqual([2476, 7428])
      // Set, the reserve is what it says, whatever is served.
      const set = yield* read({ BRAIN_RESERVED_CONNECTIONS: "10" })
      expect(Either.isRight(set) && [reservedConnections(set.right, 32), streamConnections(set.right, 32)]).toEqual([10, 22])
      const above = yield* read({ BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION: "1000" })
      expect(Either.isRight(above) && sessionStreams(above.right)).toBe(672)
      const fewer = yield* read({ BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION: "3" })
      expect(Either.isRight(fewer) && sessionStreams(fewer.right)).toBe(3)
      const processBound = yield* read({ BRAIN_SSE_MAX_SUBSCRIBERS: "40" })
      expect(Either.isRight(processBound) && [readerStreams(processBound.right), sessionStreams(processBound.right)]).toEqual([40, 5])
      const tiny = yield* read({ BRAIN_MAX_CONNECTIONS: "3", BRAIN_RESERVED_CONNECTIONS: "2" })
      expect(Either.isRight(tiny) && sessionStreams(tiny.right)).toBe(1)
      const zero = yield* read({ BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION: "0" })
      expect(Either.isLeft(zero) && describeConfigError(zero.left)).toContain("BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION")
    }))

  it.effect("an empty or blank BRAIN_API_TOKEN is refused, not taken as no token (which would turn authentication off); so is one no bearer header can carry; neither message holds the value", () =>
    Effect.gen(function*() {
      for (const token of ["", " ", "\t \n"]) {
        const c = yield* read({ BRAIN_API_TOKEN: token })
        expect(Either.isLeft(c) && describeConfigError(c.left), JSON.stringify(token)).toContain("BRAIN_API_TOKEN is set but blank")
      }
      for (const token of ["s3cret\nx", "s3cret\r\n", "two words", " s3cret", "s3cret\t", "s3crét"]) {
        const c = yield* read({ BRAIN_API_TOKEN: token })
        const message = Either.isLeft(c) ? describeConfigError(c.left) : ""
        expect(message, JSON.stringify(token)).toContain("BRAIN_API_TOKEN holds a space, a line break or another character a bearer header cannot carry")
        expect(message).not.toContain("s3cr")
      }
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.apiToken).toBe(undefined)
      const real = yield* read({ BRAIN_API_TOKEN: "s3cret-._~+/=" })
      expect(Either.isRight(real) && real.right.apiToken).toBe("s3cret-._~+/=")
    }))

  it.effect("BRAIN_CACHE_BYTES unset is left to the heap-sized default; connection limits must be positive", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.cacheBytes).toBe(undefined)
      const set = yield* read({ BRAIN_CACHE_BYTES: "1048576", BRAIN_MAX_CONNECTIONS: "10" })
      expect(Either.isRight(set) && [set.right.cacheBytes, set.right.maxConnections]).toEqual([1048576, 10])
      expect(Either.isLeft(yield* read({ BRAIN_MAX_CONNECTIONS: "0" }))).toBe(true)
      expect(Either.isLeft(yield* read({ BRAIN_CACHE_BYTES: "lots" }))).toBe(true)
    }))

  it.effect("BRAIN_ENVIRONMENTS is kept as given (blank is unset); BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES is 4 MiB by default and 1 B to 32 MiB", () =>
    Effect.gen(function*() {
      const unset = yield* read({ BRAIN_ENVIRONMENTS: "  " })
      expect(Either.isRight(unset) && [unset.right.environments, unset.right.maxEnvironmentResponseBytes]).toEqual([undefined, 4 * 1024 * 1024])
      const set = yield* read({ BRAIN_ENVIRONMENTS: "/etc/brain/environments.json", BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES: "1024" })
      expect(Either.isRight(set) && [set.right.environments, set.right.maxEnvironmentResponseBytes]).toEqual(["/etc/brain/environments.json", 1024])
      expect(Either.isRight(yield* read({ BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES: String(32 * 1024 * 1024) }))).toBe(true)
      expect(Either.isLeft(yield* read({ BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES: "0" }))).toBe(true)
      expect(Either.isLeft(yield* read({ BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES: String(32 * 1024 * 1024 + 1) }))).toBe(true)
    }))

  it.effect("every setting that bounds an outcome's size (model response, Wasm output, Environment answer) is 1 B to 32 MiB, so the outcome always fits one journal frame; 0 (no bound) is refused", () =>
    Effect.gen(function*() {
      const MiB = 1024 * 1024
      for (const name of ["BRAIN_MAX_MODEL_OUTPUT_BYTES", "BRAIN_MAX_WASM_IO_BYTES", "BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES"]) {
        expect(Either.isRight(yield* read({ [name]: "1" })), name).toBe(true)
        expect(Either.isRight(yield* read({ [name]: String(32 * MiB) })), name).toBe(true)
        for (const bad of ["0", String(32 * MiB + 1), String(64 * MiB)]) {
          const r = yield* read({ [name]: bad })
          expect(Either.isLeft(r), `${name}=${bad}`).toBe(true)
          expect(Either.isLeft(r) && String(r.left), `${name}=${bad}`).toContain(`${name} must be a whole number from 1 to 33554432 (32 MiB)`)
        }
      }
      const unset = yield* read({})
      expect(Either.isRight(unset) && [unset.right.maxModelOutputBytes, unset.right.maxWasmIoBytes]).toEqual([16 * MiB, 16 * MiB])
    }))
  const NUMERIC_SETTINGS = [
    "BRAIN_MAX_MODEL_CALLS", "BRAIN_MAX_TOOL_CALLS_PER_DISPATCH", "BRAIN_WASM_COMPILE_QUEUE", "BRAIN_MAX_MODEL_SECS", "BRAIN_MAX_MODEL_OUTPUT_BYTES", "BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES",
    "BRAIN_WASM_WORKERS", "BRAIN_WASM_THREADS", "BRAIN_WASM_INLINE_MS", "BRAIN_MAX_WASM_MEMORY_BYTES", "BRAIN_MAX_WASM_COMPUTE_MS",
    "BRAIN_MAX_WASM_IO_BYTES", "BRAIN_MAX_WASM_MODULE_BYTES", "BRAIN_MAX_WASM_STORE_BYTES", "BRAIN_MAX_TURN_SECS", "BRAIN_MAX_TOOL_SECS",
    "BRAIN_MAX_EMITTED_BYTES", "BRAIN_MAX_TURN_WRITE_BYTES", "BRAIN_MAX_SESSION_KV_BYTES", "BRAIN_MAX_SESSION_JOURNAL_BYTES", "BRAIN_MIN_FREE_DISK_BYTES", "BRAIN_MAX_INPUT_BYTES", "BRAIN_CANCEL_GRACE_MS", "BRAIN_STAGED_OPENING_MS", "BRAIN_JOURNAL_LOG_BYTES",
    "BRAIN_SESSION_IDLE_TTL_MS", "BRAIN_CHECKPOINT_AFTER_BYTES", "BRAIN_CLEANUP_DEADLINE_MS", "BRAIN_REQUEST_RETENTION_SECS", "BRAIN_MAX_REQUEST_BYTES",
    "BRAIN_DRAIN_DEADLINE_MS", "BRAIN_SSE_HEARTBEAT_MS", "BRAIN_CACHE_BYTES", "BRAIN_INFLIGHT_BODY_BYTES", "BRAIN_MAX_CONNECTIONS",
    "BRAIN_HEADERS_TIMEOUT_MS", "BRAIN_REQUEST_TIMEOUT_MS", "BRAIN_IDEMPOTENCY_MAX_ANSWER_BYTES", "BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION", "BRAIN_SSE_MAX_SUBSCRIBERS",
    "BRAIN_SSE_BACKLOG_BYTES", "BRAIN_SSE_STALL_MS", "BRAIN_SSE_CLOSE_GRACE_MS", "BRAIN_TELEMETRY_QUEUE_BYTES", "BRAIN_MAX_IDEMPOTENCY_KEYS",
    "BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS", "BRAIN_HOST_IDLE_EXPIRY_SECS",
    "BRAIN_PAGE_READS",
    "BRAIN_KEEP_ALIVE_TIMEOUT_MS", "BRAIN_RESPONSE_STALL_MS", "BRAIN_RESERVED_CONNECTIONS"
  ]

  it.effect("an empty or blank value of any numeric setting is refused, naming the setting and the value, never read as 0", () =>
    Effect.gen(function*() {
      for (const name of NUMERIC_SETTINGS) {
        for (const blank of ["", " ", "\t"]) {
          const r = yield* read({ [name]: blank })
          expect(Either.isLeft(r), `${name}=${JSON.stringify(blank)}`).toBe(true)
          if (Either.isLeft(r)) {
            const said = describeConfigError(r.left)
            expect(said, name).toContain(name)
            expect(said, name).toContain(JSON.stringify(blank))
            expect(said, name).not.toContain("\n")
          }
        }
      }
    }))

  it.effect("a numeric setting is decimal digits only: hex, exponents, signs, fractions and values past 2^53 are refused, naming the setting", () =>
    Effect.gen(function*() {
      for (const text of ["0x10", "1e3", "1e21", "+5", "5.0", "0b11", "0o7", "9007199254740993", "1_000"]) {
        const refused = yield* read({ BRAIN_MAX_REQUEST_BYTES: text })
        expect([text, Either.isLeft(refused)]).toEqual([text, true])
        if (Either.isLeft(refused)) expect(describeConfigError(refused.left)).toContain("BRAIN_MAX_REQUEST_BYTES")
      }
      const spaced = yield* read({ BRAIN_MAX_REQUEST_BYTES: " 4096 " })
      expect(Either.isRight(spaced) && spaced.right.maxRequestBytes).toBe(4096)
    }))

  it.effect("BRAIN_MAX_WASM_MEMORY_BYTES is at most 4 GiB (65,536 pages, WebAssembly's 32-bit memory maximum): a larger value is refused at start, not by every activation", () =>
    Effect.gen(function*() {
      const four = yield* read({ BRAIN_MAX_WASM_MEMORY_BYTES: String(4 * 1024 ** 3) })
      expect(Either.isRight(four) && four.right.maxWasmMemoryBytes).toBe(4 * 1024 ** 3)
      for (const text of [String(4 * 1024 ** 3 + 65536), "10000000000000"]) {
        const refused = yield* read({ BRAIN_MAX_WASM_MEMORY_BYTES: text })
        expect([text, Either.isLeft(refused)]).toEqual([text, true])
        if (Either.isLeft(refused)) expect(describeConfigError(refused.left)).toContain("BRAIN_MAX_WASM_MEMORY_BYTES")
      }
    }))

  it.effect("an invalid numeric value is reported with the value itself", () =>
    Effect.gen(function*() {
      const r = yield* read({ BRAIN_MAX_TURN_SECS: "5abc" })
      expect(Either.isLeft(r) && describeConfigError(r.left)).toMatch(/BRAIN_MAX_TURN_SECS.*"5abc"/)
    }))

  it.effect("BRAIN_MAX_IDEMPOTENCY_KEYS is a whole number ≥ 1, unset by default (the store then sizes it from the heap limit)", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.maxIdempotencyKeys).toBeUndefined()
      const set = yield* read({ BRAIN_MAX_IDEMPOTENCY_KEYS: "250000" })
      expect(Either.isRight(set) && set.right.maxIdempotencyKeys).toBe(250_000)
      for (const bad of ["0", "-1", "1.5"]) {
        const r = yield* read({ BRAIN_MAX_IDEMPOTENCY_KEYS: bad })
        expect(Either.isLeft(r) && describeConfigError(r.left), bad).toContain("BRAIN_MAX_IDEMPOTENCY_KEYS must be a whole number ≥ 1")
      }
    }))

  it.effect("BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS is a whole number ≥ 1, 100,000 unset", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.maxSessionIdempotencyKeys).toBe(100_000)
      const set = yield* read({ BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS: "3" })
      expect(Either.isRight(set) && set.right.maxSessionIdempotencyKeys).toBe(3)
      for (const bad of ["0", "-1", "1.5", "many"]) {
        const r = yield* read({ BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS: bad })
        expect(Either.isLeft(r) && describeConfigError(r.left), bad).toContain(`BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS must be a whole number ≥ 1, not ${JSON.stringify(bad)}`)
      }
    }))

  it.effect("BRAIN_HOST_IDLE_EXPIRY_SECS is a day unset, 0 means registrations never expire, N means N seconds, and a negative or fractional value is refused", () =>
    Effect.gen(function*() {
      const unset = yield* read({})
      expect(Either.isRight(unset) && unset.right.hostIdleExpiryMs).toBe(86_400_000)
      const never = yield* read({ BRAIN_HOST_IDLE_EXPIRY_SECS: "0" })
      expect(Either.isRight(never) && never.right.hostIdleExpiryMs).toBe(0)
      const set = yield* read({ BRAIN_HOST_IDLE_EXPIRY_SECS: "3600" })
      expect(Either.isRight(set) && set.right.hostIdleExpiryMs).toBe(3_600_000)
      for (const bad of ["-1", "1.5", "a day"]) {
        const r = yield* read({ BRAIN_HOST_IDLE_EXPIRY_SECS: bad })
        expect(Either.isLeft(r) && describeConfigError(r.left), bad).toContain("BRAIN_HOST_IDLE_EXPIRY_SECS must be a whole number ≥ 0")
      }
    }))

  it.effect("BRAIN_MAX_REQUEST_BYTES is at least 1: 0 would refuse every request body, so it is refused at start", () =>
    Effect.gen(function*() {
      const zero = yield* read({ BRAIN_MAX_REQUEST_BYTES: "0" })
      expect(Either.isLeft(zero) && describeConfigError(zero.left)).toContain("BRAIN_MAX_REQUEST_BYTES must be a whole number ≥ 1")
      const one = yield* read({ BRAIN_MAX_REQUEST_BYTES: "1" })
      expect(Either.isRight(one) && one.right.maxRequestBytes).toBe(1)
    }))

  it.effect("every setting that ends up in a timer is at most 2,147,483,647 ms (Node's timer maximum), so it never fires at once instead", () =>
    Effect.gen(function*() {
      const MAX = 2_147_483_647
      for (const name of [
        "BRAIN_STAGED_OPENING_MS", "BRAIN_CANCEL_GRACE_MS", "BRAIN_CLEANUP_DEADLINE_MS", "BRAIN_DRAIN_DEADLINE_MS", "BRAIN_SSE_HEARTBEAT_MS",
        "BRAIN_HEADERS_TIMEOUT_MS", "BRAIN_REQUEST_TIMEOUT_MS", "BRAIN_SESSION_IDLE_TTL_MS", "BRAIN_MAX_WASM_COMPUTE_MS", "BRAIN_SSE_STALL_MS",
        "BRAIN_SSE_CLOSE_GRACE_MS", "BRAIN_KEEP_ALIVE_TIMEOUT_MS", "BRAIN_RESPONSE_STALL_MS"
      ]) {
        expect(Either.isRight(yield* read({ [name]: String(MAX) })), name).toBe(true)
        for (const bad of [String(MAX + 1), "1e23"]) {
          const r = yield* read({ [name]: bad })
          expect(Either.isLeft(r), `${name}=${bad}`).toBe(true)
          expect(Either.isLeft(r) && describeConfigError(r.left), name).toContain(`${name} must be a whole number from`)
        }
      }
      const SECS = Math.floor(MAX / 1000)
      for (const name of ["BRAIN_MAX_TURN_SECS", "BRAIN_MAX_TOOL_SECS", "BRAIN_MAX_MODEL_SECS"]) {
        expect(Either.isRight(yield* read({ [name]: String(SECS) })), name).toBe(true)
        expect(Either.isLeft(yield* read({ [name]: String(SECS + 1) })), name).toBe(true)
      }
      // A setting that is no timer keeps no such bound.
      expect(Either.isRight(yield* read({ BRAIN_REQUEST_RETENTION_SECS: String(10 * MAX) }))).toBe(true)
      expect(Either.isRight(yield* read({ BRAIN_HOST_IDLE_EXPIRY_SECS: String(10 * MAX) }))).toBe(true)
    }))

  it.effect("BRAIN_WASM_THREADS at or below BRAIN_WASM_WORKERS is refused, naming both, instead of the pool running more threads than it says; above it, or unset, it stands (BRAIN_WASM_WORKERS unset: test/cli/serve.test.ts)", () =>
    Effect.gen(function*() {
      for (const [workers, threads] of [["4", "3"], ["4", "4"], ["8", "2"]] as const) {
        const r = yield* read({ BRAIN_WASM_WORKERS: workers, BRAIN_WASM_THREADS: threads })
        expect(Either.isLeft(r), `${workers}/${threads}`).toBe(true)
        if (Either.isLeft(r)) {
          const said = describeConfigError(r.left)
          expect(said).toContain(`BRAIN_WASM_THREADS (${threads}) must be above BRAIN_WASM_WORKERS (${workers})`)
          expect(said).not.toContain("\n")
        }
      }
      for (const [workers, threads] of [["4", "5"], ["1", "2"]] as const) {
        const r = yield* read({ BRAIN_WASM_WORKERS: workers, BRAIN_WASM_THREADS: threads })
        expect(Either.isRight(r) && r.right.wasmThreads, `${workers}/${threads}`).toBe(Number(threads))
      }
      expect(Either.isRight(yield* read({ BRAIN_WASM_WORKERS: "64" }))).toBe(true)
      // Given in code (`layer(overrides)`), the same rule, naming the settings as given.
      const given = yield* Effect.either(validated({ wasmWorkers: 4, wasmThreads: 4 }))
      expect(Either.isLeft(given) && String(given.left)).toContain("wasmThreads (BRAIN_WASM_THREADS) (4) must be above wasmWorkers (BRAIN_WASM_WORKERS) (4)")
    }))
})
