/**
 * Settings given in code (`layer(overrides)`, or a whole configuration to `servicesLayer(config)`,
 * docs/embedding.md) are checked by the same rules as the environment's (`configFromEnv`): a
 * setting its rule refuses fails the layer with a typed ConfigError naming it, before anything is
 * opened (no file, no descriptor, the data directory untouched).
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { ConfigError, ConfigProvider, Effect, Exit, Layer } from "effect"
import { configDefaults, configFromEnv, layer, serve, servicesLayer, Sessions, type ServerConfigShape, StartupRefused } from "../../src/effect.js"

const dirs: Array<string> = []
afterEach(() => {
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})
const freshDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-layercfg-"))
  dirs.push(dir)
  return dir
}
const openFds = () => fs.readdirSync("/proc/self/fd").map((fd) => {
  try {
    return fs.readlinkSync(`/proc/self/fd/${fd}`)
  } catch {
    return ""
  }
})

/** Builds the layer with `overrides` over a fresh directory: its exit, and what it left in the directory and among the descriptors. */
const build = async (overrides: Record<string, unknown>) => {
  const dataDir = freshDir()
  const exit = await Effect.runPromiseExit(Effect.scoped(Layer.build(layer({ dataDir, ...overrides } as Partial<ServerConfigShape>))))
  return { exit, left: fs.readdirSync(dataDir), leaked: openFds().filter((f) => f.startsWith(dataDir)) }
}

/** Builds `servicesLayer` over the whole default configuration with `changes`, over a fresh directory, as `build` does. */
const buildWhole = async (changes: Record<string, unknown>) => {
  const dataDir = freshDir()
  const config = { ...configDefaults, dataDir, ...changes } as ServerConfigShape
  const exit = await Effect.runPromiseExit(Effect.scoped(Layer.build(servicesLayer(config))))
  return { exit, left: fs.readdirSync(dataDir), leaked: openFds().filter((f) => f.startsWith(dataDir)) }
}

const refusal = (exit: Exit.Exit<unknown, unknown>) => {
  expect(Exit.isFailure(exit)).toBe(true)
  if (!Exit.isFailure(exit)) return ""
  // A typed failure, not a defect.
  expect(exit.cause._tag).toBe("Fail")
  const error = (exit.cause as { error: unknown }).error
  expect(ConfigError.isConfigError(error)).toBe(true)
  return String((error as ConfigError.ConfigError).message ?? error)
}

describe("layer(overrides) checks each setting by its variable's rule", () => {
  const refused: ReadonlyArray<readonly [string, Record<string, unknown>]> = [
    ["journalLogBytes", { journalLogBytes: Number.NaN }],
    ["cancelGraceMs", { cancelGraceMs: -5 }],
    ["maxTurnMs", { maxTurnMs: -1 }],
    ["wasmWorkers", { wasmWorkers: 0, wasmInlineMs: 0 }],
    ["sessionIdleTtlMs", { sessionIdleTtlMs: "abc" }],
    ["cleanupDeadlineMs", { cleanupDeadlineMs: 1.5 }],
    ["maxConnections", { maxConnections: 0 }]
  ]
  for (const [field, overrides] of refused) {
    it(`${JSON.stringify(overrides, (_k, v) => (Number.isNaN(v) ? "NaN" : v))} is refused with a typed ConfigError naming ${field}, before anything is opened`, async () => {
      const { exit, left, leaked } = await build(overrides)
      expect(refusal(exit)).toContain(field)
      expect(left).toEqual([])
      expect(leaked).toEqual([])
    }, 60_000)
  }

  it("a blank dataDir is refused (it would silently be the current directory), naming dataDir", async () => {
    const exit = await Effect.runPromiseExit(Effect.scoped(Layer.build(layer({ dataDir: "" }))))
    expect(refusal(exit)).toContain("dataDir")
  })

  it("valid settings in code still build and run, milliseconds below a second included for a setting the environment gives in seconds", async () => {
    const dataDir = freshDir()
    const status = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ model: { provider: "scripted", replies: [{ text: "ok" }] } })
      return (yield* sessions.send(session_id, { message: "hi" })).turn.status
    }).pipe(Effect.provide(layer({ dataDir, maxTurnMs: 1500, cancelGraceMs: 0, sessionIdleTtlMs: undefined, wasmWorkers: 1 })))))
    expect(status).toBe("ended")
  }, 60_000)
})

describe("servicesLayer(config) checks its whole configuration as layer(overrides) checks the settings given", () => {
  const refused: ReadonlyArray<readonly [string, Record<string, unknown>]> = [
    ["journalLogBytes", { journalLogBytes: Number.NaN }],
    ["cancelGraceMs", { cancelGraceMs: -5 }],
    ["maxConnections", { maxConnections: 0 }],
    ["dataDir", { dataDir: " " }],
    ["sessionIdleTtlMs", { sessionIdleTtlMs: "abc" }]
  ]
  for (const [field, changes] of refused) {
    it(`a configuration with ${JSON.stringify(changes, (_k, v) => (Number.isNaN(v) ? "NaN" : v))} is refused with a typed ConfigError naming ${field}, before anything is opened`, async () => {
      const { exit, left, leaked } = await buildWhole(changes)
      expect(refusal(exit)).toContain(field)
      expect(left).toEqual([])
      expect(leaked).toEqual([])
    }, 60_000)
  }

  it("a refusal names the setting and its variable whole, where another variable's name begins with it", async () => {
    const { exit } = await buildWhole({ sseMaxSubscribersPerSession: 0 })
    const text = refusal(exit)
    expect(text).toContain("sseMaxSubscribersPerSession (BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION)")
    expect(text).not.toContain("sseMaxSubscribers (")
  }, 60_000)

  it("serve(config) refuses such a configuration too, as a StartupRefused naming the setting, before it opens or listens on anything", async () => {
    const dataDir = freshDir()
    const exit = await Effect.runPromiseExit(serve({ ...configDefaults, dataDir, listen: "127.0.0.1:0", journalLogBytes: Number.NaN }))
    expect(Exit.isFailure(exit)).toBe(true)
    const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
    expect(error).toBeInstanceOf(StartupRefused)
    expect((error as StartupRefused).reason).toContain("journalLogBytes")
    expect(fs.readdirSync(dataDir)).toEqual([])
    expect(openFds().filter((f) => f.startsWith(dataDir))).toEqual([])
  }, 60_000)

  it("unusable BRAIN_MODELS or BRAIN_ENVIRONMENTS refuse serve(config) and the layer before the data directory is created", async () => {
    const parent = freshDir()
    for (const [setting, changes] of [["BRAIN_MODELS", { models: "{not json" }], ["BRAIN_ENVIRONMENTS", { environments: "{not json" }]] as const) {
      const dataDir = path.join(parent, `${setting}-serve`)
      const exit = await Effect.runPromiseExit(serve({ ...configDefaults, dataDir, listen: "127.0.0.1:0", ...changes }))
      const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
      expect(error, setting).toBeInstanceOf(StartupRefused)
      expect((error as StartupRefused).reason, setting).toContain(setting)
      expect(fs.existsSync(dataDir), `${setting}: serve created the data directory`).toBe(false)

      const layered = path.join(parent, `${setting}-layer`)
      const built = await Effect.runPromiseExit(Effect.scoped(Layer.build(servicesLayer({ ...configDefaults, dataDir: layered, ...changes }))))
      expect(Exit.isFailure(built), setting).toBe(true)
      expect(fs.existsSync(layered), `${setting}: the layer created the data directory`).toBe(false)
    }
  }, 60_000)

  it("a configuration read from the environment (configFromEnv) is taken as it stands: it builds and runs a turn", async () => {
    const dataDir = freshDir()
    const env = new Map([
      ["BRAIN_DATA_DIR", dataDir],
      ["BRAIN_MAX_TURN_SECS", "30"],
      ["BRAIN_CANCEL_GRACE_MS", "0"],
      ["BRAIN_API_TOKEN", "secret"],
      ["BRAIN_WASM_WORKERS", "1"],
      ["BRAIN_SESSION_IDLE_TTL_MS", "0"]
    ])
    const config = await Effect.runPromise(Effect.withConfigProvider(configFromEnv, ConfigProvider.fromMap(env)))
    const status = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ model: { provider: "scripted", replies: [{ text: "ok" }] } })
      return (yield* sessions.send(session_id, { message: "hi" })).turn.status
    }).pipe(Effect.provide(servicesLayer(config)))))
    expect(status).toBe("ended")
  }, 60_000)
})
