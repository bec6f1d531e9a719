/**
 * A host tool's input and output checked against the `input_schema` and `output_schema` its
 * session declared (JSON Schema, by Ajv): an input that breaks its schema is answered
 * `invalid_input` before the call is sent, and an `ok` output that breaks its schema is recorded
 * as the error `invalid_output`; the host's own checks (the SDK's) are the other side. A schema
 * Ajv cannot compile checks nothing: the declaration is the application's, and refusing every
 * call over it would take the tool away.
 *
 * Issues have the shape the SDK posts: `{path, message}`, `path` the keys down to the value.
 */
import * as AjvModule from "ajv"
import type { ErrorObject, ValidateFunction } from "ajv"

/** Compiled schemas kept, by their JSON; past it the cache starts again (sessions declare few). */
const COMPILED_SCHEMAS = 256

// Ajv is CommonJS: under NodeNext its class is the module's `default`.
const ajv = new AjvModule.default.default({ allErrors: true, strict: false, validateSchema: false })
const compiled = new Map<string, ValidateFunction | null>()

const compile = (schema: unknown): ValidateFunction | null => {
  const key = JSON.stringify(schema)
  const known = compiled.get(key)
  if (known !== undefined) return known
  if (compiled.size >= COMPILED_SCHEMAS) compiled.clear()
  let fn: ValidateFunction | null
  try {
    fn = ajv.compile(schema as object)
  } catch {
    fn = null
  }
  compiled.set(key, fn)
  return fn
}

export interface InputIssue {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

const pathOf = (e: ErrorObject): Array<string | number> => {
  const parts = e.instancePath.split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"))
  if (e.keyword === "required" && typeof e.params["missingProperty"] === "string") parts.push(e.params["missingProperty"])
  return parts.map((p) => (typeof p === "string" && /^\d+$/.test(p) ? Number(p) : p))
}

/** The value's issues against `schema`, or undefined when it conforms (or the schema checks nothing). */
export const schemaIssues = (schema: unknown, input: unknown): ReadonlyArray<InputIssue> | undefined => {
  if (schema === undefined || schema === null || typeof schema !== "object") return undefined
  const validate = compile(schema)
  if (validate === null || validate(input)) return undefined
  return (validate.errors ?? []).slice(0, 20).map((e) => ({ path: pathOf(e), message: e.message ?? e.keyword }))
}
