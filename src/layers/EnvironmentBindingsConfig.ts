/**
 * Loads BRAIN_ENVIRONMENTS at start (docs/environments.md, "Bindings"): a JSON file's path, or the
 * JSON itself. The server refuses to start on a binding it cannot use; the refusal names the
 * source, the field and the reason, never a value. The variables a binding names (`token_env`,
 * `headers_env`) are read through `Config`, like every setting, and kept `Redacted`.
 */
import * as fs from "node:fs"
import { Config, Effect, Either, Layer, Option } from "effect"
import {
  bindingsSetting,
  type EnvironmentBindings as Bindings,
  EnvironmentBindingsInvalid,
  noEnvironmentBindings,
  parseEnvironmentBindings
} from "../domain/Environment.js"
import { EnvironmentBindings } from "../services/Environments.js"
import { ServerConfig } from "../services/ServerConfig.js"

/** The variable names a binding's text mentions (read before parsing, so the parse stays pure). */
const variablesOf = (text: string): ReadonlyArray<string> => {
  const parsed = Either.try(() => JSON.parse(text) as unknown)
  if (Either.isLeft(parsed) || parsed.right === null || typeof parsed.right !== "object") return []
  const names = new Set<string>()
  for (const binding of Object.values(parsed.right as Record<string, unknown>)) {
    if (binding === null || typeof binding !== "object") continue
    const { token_env, headers_env } = binding as { token_env?: unknown; headers_env?: unknown }
    if (typeof token_env === "string") names.add(token_env)
    if (headers_env !== null && typeof headers_env === "object") {
      for (const v of Object.values(headers_env)) if (typeof v === "string") names.add(v)
    }
  }
  return [...names]
}

export const load = (setting: string | undefined): Effect.Effect<Bindings, EnvironmentBindingsInvalid> =>
  Effect.gen(function*() {
    if (setting === undefined) return noEnvironmentBindings
    const where = bindingsSetting(setting)
    const text = where._tag === "inline" ? where.text : yield* Effect.try({
      try: () => fs.readFileSync(where.path, "utf8"),
      catch: (err) =>
        new EnvironmentBindingsInvalid({
          source: where.source,
          field: "(file)",
          reason: `cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"})`
        })
    })
    const values = new Map<string, string>()
    for (const name of variablesOf(text)) {
      // A name that is not a variable name is refused by the parse, with its field.
      const value = yield* Config.option(Config.string(name)).pipe(Effect.orElseSucceed(() => Option.none<string>()))
      if (Option.isSome(value)) values.set(name, value.value)
    }
    return yield* parseEnvironmentBindings({ source: where.source, text }, (name) => values.get(name))
  })

/** The bindings of ServerConfig's BRAIN_ENVIRONMENTS. */
export const layer = Layer.effect(EnvironmentBindings, Effect.flatMap(ServerConfig, (config) => load(config.environments)))
