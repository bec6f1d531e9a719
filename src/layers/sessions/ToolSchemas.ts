/**
 * A host tool's input and output checked against the `input_schema` and `output_schema` its
 * session declared (JSON Schema, by Ajv): an input that breaks its schema is answered
 * `invalid_input` before the call is sent, and an `ok` output that breaks its schema is recorded
 * as the error `invalid_output`; the host's own checks (the SDK's) are the other side.
 *
 * - No schema checks nothing. A create is refused (`schemaRefusal`) for a host tool's schema that
 *   is not a JSON Schema, is larger than BRAIN_MAX_TOOL_SCHEMA_BYTES, or cannot be compiled; one
 *   read from an older session's record that cannot be compiled makes its calls fail
 *   `invalid_schema` (not sent, or the output not taken), never pass unchecked.
 * - One schema never affects another's check: each is compiled by its own Ajv instance, so that
 *   an `$id` (or a `$ref` to one) means only what its own schema says, whichever session used it
 *   first.
 * - What checking keeps is bounded: the compiled schemas are kept by their JSON, the least
 *   recently used let go past COMPILED_SCHEMAS or COMPILED_SCHEMA_BYTES, and with them their Ajv
 *   instance and everything it holds.
 * - Patterns are matched in linear time (LinearPatterns.ts), within PATTERN_CHECK_STEPS a check,
 *   and `uniqueItems`, `enum` and `const` in time linear in the value (JsonEquality.ts), not by
 *   Ajv's deep equality of every pair.
 * - The rest of a check is counted as it runs (CheckSteps.ts): past SCHEMA_CHECK_STEPS, or past
 *   SCHEMA_CHECK_ERRORS errors held, it stops, and the value breaks the schema, saying so. A schema
 *   whose `$ref`s loop without going into the value is refused at create (CheckSteps.ts). What is
 *   checked is held to MAX_JSON_DEPTH before it gets here (a host's output by the HTTP body's
 *   scan, a model's tool input once its answer is whole: models/Provider.ts `withCheckedCalls`, a
 *   scripted one by its create's); a check that still overflows the stack breaks it too, and never
 *   throws.
 *
 * Issues have the shape the SDK posts: `{path, message}`, `path` the keys down to the value; at
 * most SCHEMA_ISSUES_SHOWN, each message and key within SCHEMA_ISSUE_TEXT_CHARS.
 */
import * as AjvModule from "ajv"
import type { ErrorObject, ValidateFunction } from "ajv"
import { COMPILED_SCHEMA_BYTES, COMPILED_SCHEMAS, PATTERN_CHECK_STEPS, SCHEMA_CHECK_ERRORS, SCHEMA_CHECK_STEPS, SCHEMA_ISSUE_TEXT_CHARS, SCHEMA_ISSUES_SHOWN } from "../../domain/Limits.js"
import { counted, stepKeyword, withinCheckSteps } from "./CheckSteps.js"
import { linearRegExp, withinSteps } from "./LinearPatterns.js"
import { constKeyword, enumKeyword, uniqueItemsKeyword, withNumbering } from "./JsonEquality.js"

/** A schema compiled, or why it cannot be; its JSON's bytes (what the cache counts). */
type Compiled = { readonly validate: ValidateFunction; readonly bytes: number } | { readonly refused: string; readonly bytes: number }

/** By JSON text, least recently used first. */
const compiled = new Map<string, Compiled>()
let compiledBytes = 0

/** How many compiled schemas (and bytes of their JSON) checking keeps now. */
export const keptSchemas = (): { readonly count: number; readonly bytes: number } => ({ count: compiled.size, bytes: compiledBytes })

/** The compiled check kept for `schema` now, if any (tests watch one let go). */
export const keptCheck = (schema: unknown): ValidateFunction | undefined => {
  const kept = compiled.get(JSON.stringify(schema))
  return kept !== undefined && "validate" in kept ? kept.validate : undefined
}

/** Compiles `schema` alone: its own Ajv instance (Ajv is CommonJS: under NodeNext its class is the module's `default`). */
const compileAlone = (schema: unknown, bytes: number): Compiled => {
  const ajv = new AjvModule.default.default({
    allErrors: true,
    strict: false,
    validateSchema: false,
    // The schema is known by its own `$id` (or none) within its own instance: a `$ref` to "#" resolves (Ajv cannot resolve it without).
    addUsedSchema: true,
    // A tenant's schema is no news for the server's log (an unknown `format` is ignored either way).
    logger: false,
    code: { regExp: linearRegExp() }
  })
  // Ajv's own compare by deep equality, every pair of items, every allowed value: these are linear in the value (JsonEquality.ts).
  for (const keyword of ["uniqueItems", "enum", "const"]) ajv.removeKeyword(keyword)
  ajv.addKeyword(uniqueItemsKeyword()).addKeyword(enumKeyword()).addKeyword(constKeyword()).addKeyword(stepKeyword())
  // The copy compiled counts what applying each of its schemas costs (CheckSteps.ts).
  const copy = counted(schema)
  if ("refused" in copy) return { refused: copy.refused, bytes }
  try {
    return { validate: ajv.compile(copy.schema as object), bytes }
  } catch (e) {
    return { refused: (e instanceof Error ? e.message : String(e)).split("\n")[0]!, bytes }
  }
}

/** The schema whose JSON is `text` compiled (or refused), kept by that text: the copy it compiles is its own. */
const compile = (text: string): Compiled => {
  const known = compiled.get(text)
  if (known !== undefined) {
    // Used again: last to be let go.
    compiled.delete(text)
    compiled.set(text, known)
    return known
  }
  const fresh = compileAlone(JSON.parse(text), Buffer.byteLength(text, "utf8"))
  compiled.set(text, fresh)
  compiledBytes += fresh.bytes
  for (const [key, old] of compiled) {
    if (compiled.size <= 1 || (compiled.size <= COMPILED_SCHEMAS && compiledBytes <= COMPILED_SCHEMA_BYTES)) break
    compiled.delete(key)
    compiledBytes -= old.bytes
  }
  return fresh
}

/** Whether `schema` is what a tool's schema may be: a JSON Schema object or boolean (null: none). */
const isSchema = (schema: unknown) => typeof schema === "boolean" || (typeof schema === "object" && !Array.isArray(schema))

/**
 * Why `schema` cannot be a host tool's schema, or undefined when it can (it is compiled then, and
 * kept): not a JSON Schema, larger than `maxBytes` as JSON (BRAIN_MAX_TOOL_SCHEMA_BYTES), or Ajv
 * cannot compile it (its patterns among the reasons, LinearPatterns.ts; its `$ref`s looping
 * without going into the value, CheckSteps.ts).
 */
export const schemaRefusal = (schema: unknown, maxBytes: number): string | undefined => {
  if (schema === undefined || schema === null) return undefined
  if (!isSchema(schema)) return "is not a JSON Schema (an object or a boolean)"
  const text = JSON.stringify(schema)
  const bytes = Buffer.byteLength(text, "utf8")
  if (bytes > maxBytes) return `is ${bytes} bytes as JSON, more than ${maxBytes} (BRAIN_MAX_TOOL_SCHEMA_BYTES): Brain compiles it to check the tool's calls`
  const done = compile(text)
  return "refused" in done ? `cannot be compiled to check the tool's calls: ${done.refused}` : undefined
}

export interface InputIssue {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

/** A value checked: it conforms, it breaks the schema (its issues), or the schema cannot check it (why). */
export type SchemaCheck =
  | { readonly _tag: "conforms" }
  | { readonly _tag: "breaks"; readonly issues: ReadonlyArray<InputIssue> }
  | { readonly _tag: "unusable"; readonly reason: string }

const CONFORMS: SchemaCheck = { _tag: "conforms" }

/** `text` within SCHEMA_ISSUE_TEXT_CHARS, the rest cut and counted (never half a surrogate pair). */
const shown = (text: string): string => {
  if (text.length <= SCHEMA_ISSUE_TEXT_CHARS) return text
  const end = /[\uD800-\uDBFF]/.test(text[SCHEMA_ISSUE_TEXT_CHARS - 1]!) ? SCHEMA_ISSUE_TEXT_CHARS - 1 : SCHEMA_ISSUE_TEXT_CHARS
  return `${text.slice(0, end)}… (${text.length - end} more characters)`
}

const pathOf = (e: ErrorObject): Array<string | number> => {
  const parts = e.instancePath.split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"))
  if (e.keyword === "required" && typeof e.params["missingProperty"] === "string") parts.push(e.params["missingProperty"])
  return parts.map((p) => (typeof p === "string" && /^\d+$/.test(p) ? Number(p) : shown(p)))
}

/** The value checked against `schema` (none, undefined or null: it conforms). */
export const checkAgainst = (schema: unknown, value: unknown): SchemaCheck => {
  if (schema === undefined || schema === null) return CONFORMS
  if (!isSchema(schema)) return { _tag: "unusable", reason: "it is not a JSON Schema (an object or a boolean)" }
  const done = compile(JSON.stringify(schema))
  if ("refused" in done) return { _tag: "unusable", reason: `it cannot be compiled: ${done.refused}` }
  const run = withinSteps(() => withNumbering(() => withinCheckSteps(() => ranOrOverflowed(done.validate, value))))
  const { exhausted } = run
  const ran = run.value
  if (ran._tag === "done" && ran.value === "valid" && !exhausted) return CONFORMS
  const errors = ran._tag === "stopped" ? ran.first : ran.value === "invalid" ? (done.validate.errors ?? []) : []
  const issues = errors.slice(0, SCHEMA_ISSUES_SHOWN).map((e) => ({ path: pathOf(e), message: shown(e.message ?? e.keyword) }))
  if (ran._tag === "stopped") {
    issues.unshift({
      path: [],
      message: ran.why === "steps"
        ? `checking it would take more than ${SCHEMA_CHECK_STEPS} steps (SCHEMA_CHECK_STEPS: each application of a schema, one for it and one for each of its keywords and their entries); the rest was not checked`
        : `it breaks the schema in more than ${SCHEMA_CHECK_ERRORS} places (SCHEMA_CHECK_ERRORS); the rest was not checked`
    })
  } else if (ran.value === "overflowed") {
    issues.unshift({
      path: [],
      message: "checking it recursed deeper than the engine's stack allows (a value nested too deep); it was not checked"
    })
  }
  if (exhausted) {
    issues.unshift({
      path: [],
      message: `matching its patterns would take more than ${PATTERN_CHECK_STEPS} steps (PATTERN_CHECK_STEPS: RE2 program size times characters); the rest was not matched`
    })
  }
  return { _tag: "breaks", issues }
}

/** The value checked by `validate`: valid, invalid (its errors on `validate`), or past the engine's stack. */
const ranOrOverflowed = (validate: ValidateFunction, value: unknown): "valid" | "invalid" | "overflowed" => {
  try {
    return validate(value) ? "valid" : "invalid"
  } catch (e) {
    if (e instanceof RangeError) return "overflowed"
    throw e
  }
}
