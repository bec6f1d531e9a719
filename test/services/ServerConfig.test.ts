/**
 * ServerConfig read from the environment the way `brain serve` reads it: unset settings take
 * their documented defaults, and "unset" stays distinct from zero where zero means something.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import { fromConfig } from "../../src/services/ServerConfig.js"

const read = (env: Record<string, string>) =>
  Effect.either(Effect.withConfigProvider(fromConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))

describe("ServerConfig from the environment", () => {
  it.effect("BRAIN_SESSION_IDLE_TTL_MS unset means release at once (undefined), 0 means keep forever, N means N", () =>
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

  it.effect("an empty or blank BRAIN_API_TOKEN is no token at all", () =>
    Effect.gen(function*() {
      for (const token of ["", " ", "\t \n"]) {
        const c = yield* read({ BRAIN_API_TOKEN: token })
        expect(Either.isRight(c) && c.right.apiToken, JSON.stringify(token)).toBe(undefined)
      }
      const real = yield* read({ BRAIN_API_TOKEN: "s3cret" })
      expect(Either.isRight(real) && real.right.apiToken).toBe("s3cret")
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
})
