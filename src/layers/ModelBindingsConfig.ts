/**
 * Loads BRAIN_MODELS: a JSON file's path, or inline JSON (anything starting with `{` or `[`), mapping a
 * name to `{provider, model, base_url?, api_key_env?, options?}`. The server refuses to start on
 * anything it cannot use, naming the file (or "inline"), the field and the reason: a file it cannot
 * read, text that is not JSON, a bad name, an unknown or missing field, a `base_url` that is not an
 * http(s) URL or holds credentials, a query or a fragment, a provider this build does not carry,
 * an `api_key_env` that is not set, empty, or holds a line break. Messages never quote a value (a
 * key pasted into the wrong field must not reach a log).
 */
import * as fs from "node:fs"
import { Config, Effect, Either, Layer, Option, ParseResult, Redacted, Schema } from "effect"
import { BindingName, keyRefusal, ModelBinding, ModelProvider } from "../domain/ModelBinding.js"
import { type BoundModel, ModelBindings, ModelBindingsInvalid, type ModelBindingsShape } from "../services/ModelBindings.js"
import { ServerConfig } from "../services/ServerConfig.js"

const decodeBinding = Schema.decodeUnknownEither(ModelBinding, { errors: "all", onExcessProperty: "error" })
const isName = Schema.is(BindingName)

/** Every provider a binding may name, for the refusal of another (the schema's own message names only the first). */
const PROVIDERS_NAMED = ModelProvider.literals.map((p) => JSON.stringify(p)).join(", ")

/** A schema issue as a field path and a reason, without the offending value. */
const describeIssue = (issue: ParseResult.ArrayFormatterIssue) => ({
  field: issue.path.map(String).join("."),
  reason: issue._tag === "Unexpected"
    ? issue.path[issue.path.length - 1] === "api_key"
      ? "unexpected field: a binding never holds a key; name the environment variable that does in api_key_env"
      : "unexpected field"
    : issue._tag === "Type" && issue.path.length === 1 && issue.path[0] === "provider"
    ? `must be one of ${PROVIDERS_NAMED}`
    : issue.message.replace(/,?\s*actual\b[\s\S]*$/, "").trim()
})

/** The field a refusal of the whole text names: "(file)" for a file, none for inline JSON (its source says so). */
const wholeField = (source: string) => (source.endsWith("(inline JSON)") ? "" : "(file)")

/** Reads the text of BRAIN_MODELS and where it came from. */
const sourceOf = (models: string) =>
  Effect.suspend(() => {
    if (/^\s*[{[]/.test(models)) return Effect.succeed({ source: "BRAIN_MODELS (inline JSON)", text: models })
    return Effect.try({
      try: () => ({ source: models, text: fs.readFileSync(models, "utf8") }),
      catch: (err) =>
        new ModelBindingsInvalid({ source: models, field: "(file)", reason: `cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"})` })
    })
  })

export const load = (
  models: string | undefined,
  available: ReadonlySet<ModelProvider>
): Effect.Effect<ModelBindingsShape, ModelBindingsInvalid> =>
  Effect.gen(function*() {
    if (models === undefined) return { names: [], get: () => undefined }
    const { source, text } = yield* sourceOf(models)
    const invalid = (field: string, reason: string) => Effect.fail(new ModelBindingsInvalid({ source, field, reason }))
    const parsed = Either.try(() => JSON.parse(text) as unknown)
    if (Either.isLeft(parsed)) return yield* invalid(wholeField(source), "not JSON")
    const root = parsed.right
    if (root === null || typeof root !== "object" || Array.isArray(root)) {
      return yield* invalid(wholeField(source), "must be a JSON object mapping binding names to bindings")
    }
    const bound = new Map<string, BoundModel>()
    for (const [name, value] of Object.entries(root)) {
      if (!isName(name)) return yield* invalid(name, "a binding name is 1–64 letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
      const decoded = decodeBinding(value)
      if (Either.isLeft(decoded)) {
        const [first] = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
        const issue = first ? describeIssue(first) : { field: "", reason: "invalid" }
        return yield* invalid(issue.field ? `${name}.${issue.field}` : name, issue.reason)
      }
      const binding = decoded.right
      if (!available.has(binding.provider)) {
        return yield* invalid(`${name}.provider`, `${binding.provider} is not available in this build`)
      }
      let apiKey: BoundModel["apiKey"] = undefined
      if (binding.api_key_env !== undefined) {
        const key = yield* Config.option(Config.redacted(binding.api_key_env)).pipe(Effect.orElseSucceed(() => Option.none()))
        if (Option.isNone(key)) return yield* invalid(`${name}.api_key_env`, `the environment variable ${binding.api_key_env} is not set`)
        const refusal = keyRefusal(binding.api_key_env, Redacted.value(key.value))
        if (refusal !== undefined) return yield* invalid(`${name}.api_key_env`, refusal)
        apiKey = key.value
      }
      bound.set(name, { binding, apiKey })
    }
    const names = [...bound.keys()].sort()
    return { names, get: (name: string) => bound.get(name) }
  })

/** The bindings of ServerConfig's BRAIN_MODELS, for the providers this build carries. */
export const layer = (available: ReadonlySet<ModelProvider>) =>
  Layer.effect(ModelBindings, Effect.flatMap(ServerConfig, (config) => load(config.models, available)))
