/**
 * What one check of a value against a host tool's schema may cost, counted as it runs: Ajv's
 * keywords take time in proportion to the schema times the value, and some schemas make that
 * product enormous for a small value (`allOf` of two `$ref`s to a schema that does the same, 30
 * deep, applies the last 2^30 times; `oneOf` of 1 000 branches over 10 000 items took 47 s and
 * made 10 million errors), all of it on the main thread.
 *
 * - Every schema object in the copy Ajv compiles is given the keyword STEP_KEYWORD, whose value is
 *   what applying that schema once costs: one, and one for each of its keywords and for each entry
 *   of their arrays and maps (`enum` and `const` one each: JsonEquality.ts looks the value up). The
 *   keyword's code adds it up each time Ajv applies the schema, and past SCHEMA_CHECK_STEPS stops
 *   the check; it stops it too when the errors one validating function holds pass
 *   SCHEMA_CHECK_ERRORS (Ajv keeps every error with `allErrors`, one per wrong item), keeping the
 *   first ones to show.
 * - `enum` and `const` values are data, compared with the value: never rewritten. A schema that
 *   uses STEP_KEYWORD itself, or a `$ref` into an `enum` or `const` (whose schemas would not be
 *   counted), cannot be compiled.
 */
import * as AjvModule from "ajv"
import type { CodeKeywordDefinition, ErrorObject, KeywordCxt } from "ajv"
import { SCHEMA_CHECK_ERRORS, SCHEMA_CHECK_STEPS, SCHEMA_ISSUES_SHOWN } from "../../domain/Limits.js"

/** The keyword counting steps: `$`-named, so that no vocabulary of a tenant's means anything by it. */
export const STEP_KEYWORD = "$brainCheckSteps"

/** Keywords whose values are data, compared with the value: never rewritten. */
const DATA = new Set(["enum", "const"])
/** Keywords whose values map names to schemas. */
const MAPS = new Set(["properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"])
/** Keywords whose values are references to a schema. */
const REFS = new Set(["$ref", "$dynamicRef", "$recursiveRef"])

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/** Why a reference cannot be used (it points into an `enum` or `const`), or undefined. */
const refRefusal = (ref: string): string | undefined => {
  const hash = ref.indexOf("#")
  if (hash < 0 || ref[hash + 1] !== "/") return undefined
  let position: "schema" | "map" = "schema"
  for (const raw of ref.slice(hash + 2).split("/")) {
    let segment = raw
    try {
      segment = decodeURIComponent(raw)
    } catch {
      // Not percent-encoded: as written.
    }
    segment = segment.replace(/~1/g, "/").replace(/~0/g, "~")
    if (position === "map") position = "schema"
    else if (DATA.has(segment)) return `the $ref ${JSON.stringify(ref)} points into an enum or const, which are values, not schemas`
    else if (MAPS.has(segment)) position = "map"
  }
  return undefined
}

/** The copy of a schema Ajv compiles: every schema object costed with STEP_KEYWORD; or why it cannot be. */
export const counted = (schema: unknown): { readonly schema: unknown } | { readonly refused: string } => {
  let refused: string | undefined
  const walk = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(walk)
    if (!isPlainObject(node)) return node
    const entries: Array<[string, unknown]> = []
    let cost = 1
    for (const [key, value] of Object.entries(node)) {
      if (key === STEP_KEYWORD) refused ??= `it uses the keyword ${STEP_KEYWORD}, which Brain keeps for counting a check's work`
      // An `enum` or `const` is one step: a lookup of the value's number (JsonEquality.ts).
      cost += DATA.has(key) ? 1 : Array.isArray(value) ? value.length : isPlainObject(value) ? Object.keys(value).length : 1
      if (DATA.has(key)) entries.push([key, value])
      else if (MAPS.has(key) && isPlainObject(value)) entries.push([key, Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v)]))])
      else {
        if (REFS.has(key) && typeof value === "string") refused ??= refRefusal(value)
        entries.push([key, walk(value)])
      }
    }
    entries.push([STEP_KEYWORD, cost])
    // Own keys all (fromEntries defines them), a key "__proto__" among them.
    const copy = Object.fromEntries(entries)
    return copy
  }
  const copy = walk(schema)
  return refused === undefined ? { schema: copy } : { refused }
}

/** Thrown through Ajv's code to stop a check (caught by `withinCheckSteps`). */
class Stopped {
  constructor(readonly why: "steps" | "errors", readonly first: ReadonlyArray<ErrorObject>) {}
}

/** What the running check may still cost. */
const budget = { left: SCHEMA_CHECK_STEPS }

/** Called by the generated code each time a schema is applied: its cost, and the errors its function holds now. */
const step = (cost: number, errors: number, held: ReadonlyArray<ErrorObject> | null): void => {
  budget.left -= cost
  if (budget.left < 0) throw new Stopped("steps", held?.slice(0, Math.min(errors, SCHEMA_ISSUES_SHOWN)) ?? [])
  if (errors > SCHEMA_CHECK_ERRORS) throw new Stopped("errors", held?.slice(0, Math.min(errors, SCHEMA_ISSUES_SHOWN)) ?? [])
}

/** The keyword for `addKeyword`: a call of `step` wherever a schema is applied. */
export const stepKeyword = (): CodeKeywordDefinition => ({
  keyword: STEP_KEYWORD,
  schemaType: "number",
  code: (cxt: KeywordCxt) => {
    const counter = cxt.gen.scopeValue("keyword", { ref: step })
    // `errors` and `vErrors`: the count and the list of errors of the function Ajv generates.
    cxt.gen.code(AjvModule.default._`${counter}(${cxt.schema as number}, errors, vErrors)`)
  }
})

/** A check run within SCHEMA_CHECK_STEPS: what it gave, or that it stopped (why, and the errors it had). */
export const withinCheckSteps = <A>(check: () => A): { readonly _tag: "done"; readonly value: A } | { readonly _tag: "stopped"; readonly why: "steps" | "errors"; readonly first: ReadonlyArray<ErrorObject> } => {
  budget.left = SCHEMA_CHECK_STEPS
  try {
    return { _tag: "done", value: check() }
  } catch (e) {
    if (e instanceof Stopped) return { _tag: "stopped", why: e.why, first: e.first }
    throw e
  } finally {
    budget.left = SCHEMA_CHECK_STEPS
  }
}
