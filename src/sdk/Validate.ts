/**
 * The validators a host tool and a structured `send` accept: an Effect Schema (`effect/Schema`,
 * decoded and encoded with every issue collected), or any Standard Schema validator (an object
 * with `~standard`: Zod, Valibot, ArkType, `Schema.standardSchemaV1(…)`, …). An Effect Schema is
 * read as one even when it also carries `~standard`, so that its JSON Schema can be derived.
 *
 * A value is checked in one direction each: what arrives (a tool's input, a model's answer) is
 * decoded — its Type is what the application sees; what leaves (a tool's output) is encoded — its
 * Encoded side is what goes on the wire. A Standard Schema has one direction, `validate`, used for
 * both. Issues come back as `{path, message}` whichever kind produced them.
 */
import { Either, JSONSchema, ParseResult, Schema } from "effect"

/** The Standard Schema v1 interface (standardschema.dev), the part of it the SDK uses. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly "~standard": {
    readonly version: 1
    readonly vendor: string
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>
    readonly types?: { readonly input: Input; readonly output: Output } | undefined
    /** Standard JSON Schema (an optional companion spec): a JSON Schema of the input side. */
    readonly jsonSchema?: { readonly input?: (options: { readonly target: string }) => unknown } | undefined
  }
}

type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined }> }

/** An Effect Schema without requirements, or a Standard Schema validator. */
export type Validator = Schema.Schema<any, any, never> | StandardSchemaV1<any, any>

/** What decoding with `V` gives: an Effect Schema's Type, a Standard Schema's output. */
export type Decoded<V> = V extends Schema.Schema<infer A, infer _I, never> ? A
  : V extends StandardSchemaV1<infer _In, infer Out> ? Out
  : never

/** What encoding with `V` takes: an Effect Schema's Type, a Standard Schema's input. */
export type Encodable<V> = V extends Schema.Schema<infer A, infer _I, never> ? A
  : V extends StandardSchemaV1<infer In, infer _Out> ? In
  : never

/** One problem with a value: where (`path`, empty for the value itself) and what. */
export interface Issue {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

export type Checked<A> =
  | { readonly ok: true; readonly value: A }
  | {
    readonly ok: false
    readonly issues: ReadonlyArray<Issue>
    /** The validator threw (a bug of the validator, not a value that fails it): what it threw. */
    readonly thrown?: { readonly error: unknown }
  }

export const isEffectSchema = (v: Validator): v is Schema.Schema<unknown, unknown, never> => Schema.isSchema(v)

export const isValidator = (v: unknown): v is Validator =>
  (typeof v === "object" || typeof v === "function") && v !== null &&
  (Schema.isSchema(v) || (typeof (v as { "~standard"?: { validate?: unknown } })["~standard"]?.validate === "function"))

const keyOf = (k: PropertyKey): string | number => (typeof k === "number" ? k : String(k))

const fromParseError = (e: ParseResult.ParseIssue): ReadonlyArray<Issue> =>
  ParseResult.ArrayFormatter.formatIssueSync(e).map((i) => ({ path: i.path.map(keyOf), message: i.message }))

const standard = async <A>(v: StandardSchemaV1<unknown, A>, value: unknown): Promise<Checked<A>> => {
  const r = await v["~standard"].validate(value)
  if (r.issues === undefined) return { ok: true, value: r.value }
  return {
    ok: false,
    issues: r.issues.map((i) => ({
      message: i.message,
      path: (i.path ?? []).map((p) => keyOf(typeof p === "object" && p !== null ? p.key : p as PropertyKey))
    }))
  }
}

/**
 * A validator that throws is reported as one issue, not as the caller's failure, and marked
 * `thrown`: a host tool answers it as the call's error; a structured send rejects with it.
 */
const guarded = async <A>(f: () => Promise<Checked<A>> | Checked<A>): Promise<Checked<A>> => {
  try {
    return await f()
  } catch (e) {
    return { ok: false, issues: [{ path: [], message: `the validator threw: ${e instanceof Error ? e.message : String(e)}` }], thrown: { error: e } }
  }
}

/** Checks a value that arrived (a tool's input, a model's answer); answers what the application sees. */
export const decode = <V extends Validator>(v: V, value: unknown): Promise<Checked<Decoded<V>>> =>
  guarded(() => {
    if (isEffectSchema(v)) {
      const r = ParseResult.decodeUnknownEither(v)(value, { errors: "all" })
      return Either.isRight(r) ? { ok: true, value: r.right as Decoded<V> } : { ok: false, issues: fromParseError(r.left) }
    }
    return standard(v as StandardSchemaV1<unknown, Decoded<V>>, value)
  })

/** Checks a value that leaves (a tool's output); answers what goes on the wire. */
export const encode = <V extends Validator>(v: V, value: unknown): Promise<Checked<unknown>> =>
  guarded(() => {
    if (isEffectSchema(v)) {
      const r = ParseResult.encodeUnknownEither(v)(value, { errors: "all" })
      return Either.isRight(r) ? { ok: true, value: r.right } : { ok: false, issues: fromParseError(r.left) }
    }
    return standard(v as StandardSchemaV1<unknown, unknown>, value)
  })

/**
 * The JSON Schema of what `v` accepts, when it can tell: derived from an Effect Schema
 * (`JSONSchema.make`), or offered by a Standard Schema (Standard JSON Schema's
 * `~standard.jsonSchema.input`, or a `toJsonSchema()`/`toJSONSchema()` method). Undefined otherwise.
 */
export const jsonSchemaOf = (v: Validator): object | undefined => {
  try {
    if (isEffectSchema(v)) {
      const { $schema: _, ...rest } = JSONSchema.make(v) as unknown as Record<string, unknown>
      return rest
    }
    const offered = v["~standard"].jsonSchema?.input?.({ target: "draft-07" })
    if (typeof offered === "object" && offered !== null) return offered
    const self = v as unknown as { toJsonSchema?: () => unknown; toJSONSchema?: () => unknown }
    const method = self.toJsonSchema ?? self.toJSONSchema
    const made = typeof method === "function" ? method.call(v) : undefined
    return typeof made === "object" && made !== null ? made : undefined
  } catch {
    return undefined
  }
}

/** Issues as one line each, for a message: `path: message`. */
export const describeIssues = (issues: ReadonlyArray<Issue>): string =>
  issues.map((i) => (i.path.length > 0 ? `${i.path.join(".")}: ${i.message}` : i.message)).join("; ")
