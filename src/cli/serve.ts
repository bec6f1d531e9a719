/**
 * `brain serve [--flag value …]`: every setting is an environment variable (BRAIN_LISTEN,
 * BRAIN_DATA_DIR, BRAIN_API_TOKEN, the limits) and the same name as a flag: `--listen`,
 * `--data-dir`, `--max-model-calls`, … A flag wins over the environment.
 */
import * as os from "node:os"
import { Config, type ConfigError, ConfigProvider, Effect, Option } from "effect"
import { createDataDir, inspectDataDir } from "../layers/journal/DataDir.js"
import { checkBindings, serve } from "../main.js"
import { fromConfig, wasmThreadsRefusal } from "../services/ServerConfigEnv.js"
import { missingNodeFlags, missingNodeFlagsWarning } from "./nodeFlags.js"
import { distance, knownSettings, recordingReads, unreadSettings } from "./settingNames.js"

export class FlagError extends Error {}

/** `--max-turn-secs 10` ⇒ BRAIN_MAX_TURN_SECS=10. */
export const flagsToEnv = (args: ReadonlyArray<string>): Map<string, string> => {
  const out = new Map<string, string>()
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    const m = /^--([a-z][a-z0-9-]*)(?:=(.*))?$/.exec(arg)
    if (!m) throw new FlagError(`unexpected argument ${JSON.stringify(arg)}`)
    const value = m[2] ?? args[++i]
    if (value === undefined) throw new FlagError(`--${m[1]} needs a value`)
    out.set(`BRAIN_${m[1]!.replace(/-/g, "_").toUpperCase()}`, value)
  }
  return out
}

const flagOf = (setting: string) => `--${setting.replace(/^BRAIN_/, "").replace(/_/g, "-").toLowerCase()}`

/** A flag no setting has is refused, not ignored: a typo would otherwise leave the default in force unseen. */
export const unknownFlag = (flags: ReadonlyMap<string, string>, known: ReadonlySet<string>): string | undefined => {
  for (const setting of flags.keys()) {
    if (known.has(setting)) continue
    const flag = flagOf(setting)
    const nearest = [...known].map(flagOf).sort((x, y) => distance(flag, x) - distance(flag, y))[0]
    const hint = nearest !== undefined && distance(flag, nearest) <= 3 ? ` (did you mean ${nearest}?)` : ""
    return `unknown flag ${flag}${hint}`
  }
  return undefined
}

/**
 * A configuration error as the operator needs it: flags fall back to the environment, so a bad
 * value reads "missing here or invalid there"; the invalid values are what to report, each named
 * as the operator gave it (a setting given as a flag by its flag).
 */
export const describeConfigError = (e: ConfigError.ConfigError, flags: ReadonlyMap<string, string> = new Map()): string => {
  const invalid: Array<string> = []
  const named = (path: ReadonlyArray<string>) => {
    const setting = path.join(".")
    return flags.has(setting) ? flagOf(setting) : setting
  }
  const walk = (err: ConfigError.ConfigError) => {
    if (err._op === "And" || err._op === "Or") {
      walk(err.left)
      walk(err.right)
    } else if (err._op === "InvalidData") invalid.push(err.path.length === 0 ? err.message : `${named(err.path)}: ${err.message}`)
  }
  walk(e)
  return invalid.length > 0 ? `invalid setting: ${[...new Set(invalid)].join("; ")}` : e.toString()
}

/**
 * The data directory setting, checked (and a missing directory made) before anything starts, so a
 * mistaken path is refused in one line naming the setting as the operator gave it, not with the
 * errno of whichever file the server would have touched first.
 */
const dataDirSetting = (dataDir: string, flags: ReadonlyMap<string, string>) =>
  Effect.gen(function*() {
    const setting = flags.has("BRAIN_DATA_DIR") ? "--data-dir" : "BRAIN_DATA_DIR"
    if (dataDir.trim() === "") return yield* Effect.fail(new FlagError(`invalid setting: ${setting}: an empty value names no directory`))
    const state = inspectDataDir(dataDir)
    if (state._tag === "Unusable" || state._tag === "Foreign") {
      return yield* Effect.fail(new FlagError(`invalid setting: ${setting} ${dataDir}: ${state.reason}`))
    }
    if (state._tag === "Missing") {
      yield* createDataDir(dataDir).pipe(Effect.mapError((e) => new FlagError(`invalid setting: ${setting} ${dataDir}: ${e.reason}`)))
    }
  })

/**
 * `environment`: the names of the process's environment variables (only names: a value may be a
 * secret); `execArgv`: the Node arguments it was started with.
 */
export const serveCommand = (
  args: ReadonlyArray<string>,
  environment: ReadonlyArray<string> = Object.keys(process.env),
  execArgv: ReadonlyArray<string> = process.execArgv
) =>
  Effect.gen(function*() {
    const flags = yield* Effect.try({ try: () => flagsToEnv(args), catch: (e) => e as Error })
    const read = yield* knownSettings
    const unknown = unknownFlag(flags, read)
    if (unknown !== undefined) return yield* Effect.fail(new FlagError(unknown))
    const provider = ConfigProvider.fromMap(flags).pipe(ConfigProvider.orElse(() => ConfigProvider.fromEnv()))
    const config = yield* Effect.withConfigProvider(fromConfig, provider).pipe(
      Effect.mapError((e) => new FlagError(describeConfigError(e, flags)))
    )
    // Both set, the configuration's rule checked them; BRAIN_WASM_WORKERS unset is the number of cores.
    const threadsRefused = config.wasmThreads !== undefined && config.wasmWorkers === undefined
      ? wasmThreadsRefusal(os.availableParallelism(), false, config.wasmThreads)
      : undefined
    if (threadsRefused !== undefined) return yield* Effect.fail(new FlagError(`invalid setting: ${threadsRefused}`))
    // An unusable binding refuses the start before a missing data directory is made. The variables
    // the bindings name are read as they load: Brain reads them too.
    yield* recordingReads(checkBindings(config), read)
    // A misspelled setting would leave its default in force unseen: one warning each, never a value,
    // never a refusal. (Only once the bindings loaded: a refused one may not have read all its names.)
    for (const warning of unreadSettings(environment, read)) yield* Effect.logWarning(warning)
    yield* dataDirSetting(config.dataDir, flags)
    // Started without the Node flags it is measured with (`node bin/brain.js serve`): it serves all the same, and says so.
    const missing = missingNodeFlags(execArgv, Option.getOrUndefined(yield* Config.option(Config.string("NODE_OPTIONS"))))
    if (missing.length > 0) yield* Effect.logWarning(missingNodeFlagsWarning(missing))
    yield* serve(config)
    return 0
  }).pipe(Effect.catchAll((e) => Effect.as(Effect.logError(`brain serve: ${e.message}`), 1)))
