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
 * - Nor can a schema whose schemas apply one another to the same value in a loop (`$ref` back to
 *   itself, directly or through `allOf` and the like, without going into an item or a property):
 *   Ajv's check of it would overflow the stack on every value. A loop that goes into the value
 *   (a tree's `items: {$ref: "#"}`) ends with the value, and is admitted.
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
  refused ??= loopRefusal(schema)
  return refused === undefined ? { schema: copy } : { refused }
}

/** Keywords that apply their schemas to the value itself (`then` and `else` only beside an `if`). */
const SAME_VALUE = new Set(["allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies"])
/** Keywords that apply their schemas to a part of the value (an item, a property, a key). */
const INTO_VALUE = new Set(["properties", "patternProperties", "additionalProperties", "items", "prefixItems", "additionalItems", "contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems"])
/** Keywords whose values hold no `$id` or `$anchor` the engine reads (json-schema-traverse skips them). */
const NO_IDS = new Set(["default", "enum", "const", "examples", "required"])
/** Loop members named in a refusal, at most. */
const LOOP_SHOWN = 6

/** `ref` resolved against `base` as a key (fragment percent-decoded, an empty one dropped); undefined when it cannot be resolved here. */
const resolvedKey = (base: string, ref: string): string | undefined => {
  let uri: string
  if (/^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(ref)) uri = ref
  else if (ref.startsWith("#")) uri = `${base}${ref}`
  else if (base === "") uri = ref
  else {
    try {
      uri = new URL(ref, base).href
    } catch {
      return undefined
    }
  }
  const hash = uri.indexOf("#")
  const resource = hash < 0 ? uri : uri.slice(0, hash)
  let fragment = hash < 0 ? "" : uri.slice(hash + 1)
  try {
    fragment = decodeURIComponent(fragment)
  } catch {
    // Not percent-encoded: as written.
  }
  return fragment === "" ? resource : `${resource}#${fragment}`
}

/** The key of the schema at `pointer` (JSON Pointer escaped, as written) in the resource `base`. */
const pointerKey = (base: string, pointer: string) => (pointer === "" ? base : `${base}#${pointer}`)

const escaped = (key: string) => key.replace(/~/g, "~0").replace(/\//g, "~1")

/**
 * Why `schema` cannot check any value, or undefined: its schemas, through the keywords that apply
 * a schema to the value itself (`$ref` and the other references, `allOf`, `anyOf`, `oneOf`, `not`,
 * `if`/`then`/`else`, `dependentSchemas`, `dependencies`), come back to one another without going
 * into a part of the value (`properties`, `items`, `contains`, …), so that applying it never ends
 * (JSON Schema 2020-12 leaves such a schema's behaviour undefined; Ajv's check overflows the stack
 * each time). Only loops a check can reach from the root are counted. A reference resolved here:
 * a JSON pointer, an `$id` or an `$anchor` within the schema; one that is not (or means more than
 * one schema) is no edge, and Ajv decides as before.
 */
const loopRefusal = (schema: unknown): string | undefined => {
  if (!isPlainObject(schema)) return undefined
  type Node = { readonly schema: Record<string, unknown>; readonly base: string; readonly where: string }
  const nodes: Array<Node> = []
  const byKey = new Map<string, number | null>()
  const register = (key: string | undefined, at: number) => {
    if (key === undefined) return
    const known = byKey.get(key)
    byKey.set(key, known === undefined || known === at ? at : null)
  }
  const indexOf = new Map<object, number>()
  const rootId = typeof schema["$id"] === "string" ? resolvedKey("", schema["$id"]) : undefined
  const rootBase = rootId === undefined || rootId.includes("#") ? "" : rootId
  let dynamicAnchors = false
  let recursiveAnchors = false
  // Every object of the schema a pointer can reach, with its base URI and its pointer from the root and from its resource.
  const stack: Array<{ node: unknown; base: string; resource: string; pointer: string; ids: boolean }> = [{ node: schema, base: "", resource: "", pointer: "", ids: true }]
  while (stack.length > 0) {
    const { node, base: parentBase, resource: parentResource, pointer, ids } = stack.pop()!
    if (Array.isArray(node)) {
      node.forEach((item, i) => stack.push({ node: item, base: parentBase, resource: `${parentResource}/${i}`, pointer: `${pointer}/${i}`, ids }))
      continue
    }
    if (!isPlainObject(node) || indexOf.has(node)) continue
    const at = nodes.length
    let base = parentBase
    let resource = parentResource
    const id = ids && typeof node["$id"] === "string" ? resolvedKey(parentBase, node["$id"]) : undefined
    if (id !== undefined) {
      register(id, at)
      if (!id.includes("#")) {
        base = id
        resource = ""
      }
    }
    nodes.push({ schema: node, base, where: `#${pointer}` })
    indexOf.set(node, at)
    register(pointerKey(rootBase, pointer), at)
    register(pointerKey(base, resource), at)
    if (ids) {
      for (const anchor of ["$anchor", "$dynamicAnchor"]) if (typeof node[anchor] === "string") register(resolvedKey(base, `#${node[anchor] as string}`), at)
      if (typeof node["$dynamicAnchor"] === "string") dynamicAnchors = true
      if (node["$recursiveAnchor"] === true) recursiveAnchors = true
    }
    for (const [key, value] of Object.entries(node)) {
      if (typeof value === "object" && value !== null) {
        stack.push({ node: value, base, resource: `${resource}/${escaped(key)}`, pointer: `${pointer}/${escaped(key)}`, ids: ids && !NO_IDS.has(key) })
      }
    }
  }
  const target = (key: string | undefined): number | undefined => {
    const at = key === undefined ? undefined : byKey.get(key)
    return at === null ? undefined : at
  }
  const schemasOf = (value: unknown): Array<number> =>
    (Array.isArray(value) ? value : [value]).flatMap((v) => (isPlainObject(v) && indexOf.has(v) ? [indexOf.get(v)!] : []))
  const mapped = (value: unknown): Array<number> => (isPlainObject(value) ? Object.values(value).flatMap(schemasOf) : [])
  // Each schema's edges: to the schemas it applies to the value itself, and to those it applies to a part of it.
  const same: Array<Array<number>> = []
  const into: Array<Array<number>> = []
  for (const { schema: node, base } of nodes) {
    const s: Array<number> = []
    const i: Array<number> = []
    const ref = (key: string | undefined) => {
      const at = target(key)
      if (at !== undefined) s.push(at)
    }
    for (const [key, value] of Object.entries(node)) {
      if (key === "$ref" && typeof value === "string") ref(resolvedKey(base, value))
      // Dynamic: the schema it names statically, when no dynamic anchor could name another.
      else if (key === "$dynamicRef" && typeof value === "string" && (!dynamicAnchors || /#\//.test(value) || !value.includes("#"))) ref(resolvedKey(base, value))
      else if (key === "$recursiveRef" && typeof value === "string" && !recursiveAnchors) ref(resolvedKey(base, value))
      // Applied by Ajv only beside an `if` (`then`, `else`), beside a `then` or `else` not `true` (`if`), or with no branch `true` (`anyOf`): else a check never applies them.
      else if ((key === "then" || key === "else") && !("if" in node)) continue
      else if (key === "if" && !((node["then"] !== undefined && node["then"] !== true) || (node["else"] !== undefined && node["else"] !== true))) continue
      else if (key === "anyOf" && Array.isArray(value) && value.includes(true)) continue
      else if (key === "dependentSchemas" || key === "dependencies") s.push(...mapped(value))
      else if (SAME_VALUE.has(key)) s.push(...schemasOf(value))
      else if (key === "properties" || key === "patternProperties") i.push(...mapped(value))
      else if (INTO_VALUE.has(key)) i.push(...schemasOf(value))
    }
    same.push(s)
    into.push(i)
  }
  // The schemas a check can reach from the root.
  const reached = new Uint8Array(nodes.length)
  const pending = [0]
  reached[0] = 1
  while (pending.length > 0) {
    const at = pending.pop()!
    for (const next of [...same[at]!, ...into[at]!]) {
      if (reached[next] === 0) {
        reached[next] = 1
        pending.push(next)
      }
    }
  }
  // A loop of same-value edges among them: a depth-first search, without recursion (0: unseen, 1: on the path, 2: done).
  const state = new Uint8Array(nodes.length)
  for (let start = 0; start < nodes.length; start++) {
    if (reached[start] === 0 || state[start] !== 0) continue
    const path: Array<{ at: number; next: number }> = [{ at: start, next: 0 }]
    state[start] = 1
    while (path.length > 0) {
      const top = path[path.length - 1]!
      const edges = same[top.at]!
      if (top.next >= edges.length) {
        state[top.at] = 2
        path.pop()
        continue
      }
      const next = edges[top.next++]!
      if (state[next] === 1) {
        const loop = path.slice(path.findIndex((p) => p.at === next)).map((p) => nodes[p.at]!.where)
        const named = loop.slice(0, LOOP_SHOWN).map((w) => JSON.stringify(w))
        const more = loop.length > LOOP_SHOWN ? `, which applies ${loop.length - LOOP_SHOWN} more in turn, the last of which applies ` : ", which applies "
        const shown = `${named.join(", which applies ").replace(", which applies ", " applies ")}${loop.length === 1 ? " applies " : more}${JSON.stringify(loop[0])}`
        return `its schemas loop without going into the value: ${shown}, each to the same value, so checking any value against it would never end`
      }
      if (state[next] === 0) {
        state[next] = 1
        path.push({ at: next, next: 0 })
      }
    }
  }
  return undefined
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
