/**
 * `brain serve [--flag value …]`: every setting is an environment variable (BRAIN_LISTEN,
 * BRAIN_DATA_DIR, BRAIN_API_TOKEN, the limits) and the same name as a flag: `--listen`,
 * `--data-dir`, `--max-model-calls`, … A flag wins over the environment.
 */
import { type ConfigError, ConfigProvider, Effect } from "effect"
import { serve } from "../main.js"
import { fromConfig } from "../services/ServerConfig.js"

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

/**
 * A configuration error as the operator needs it: flags fall back to the environment, so a bad
 * value reads "missing here or invalid there"; the invalid values are what to report.
 */
export const describeConfigError = (e: ConfigError.ConfigError): string => {
  const invalid: Array<string> = []
  const walk = (err: ConfigError.ConfigError) => {
    if (err._op === "And" || err._op === "Or") {
      walk(err.left)
      walk(err.right)
    } else if (err._op === "InvalidData") invalid.push(`${err.path.join(".")}: ${err.message}`)
  }
  walk(e)
  return invalid.length > 0 ? `invalid setting: ${[...new Set(invalid)].join("; ")}` : e.toString()
}

export const serveCommand = (args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const flags = yield* Effect.try({ try: () => flagsToEnv(args), catch: (e) => e as Error })
    const provider = ConfigProvider.fromMap(flags).pipe(ConfigProvider.orElse(() => ConfigProvider.fromEnv()))
    const config = yield* Effect.withConfigProvider(fromConfig, provider).pipe(
      Effect.mapError((e) => new FlagError(describeConfigError(e)))
    )
    yield* serve(config)
    return 0
  }).pipe(Effect.catchAll((e) => Effect.as(Effect.logError(`brain serve: ${e.message}`), 1)))
