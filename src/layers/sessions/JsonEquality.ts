/**
 * JSON Schema's equality for a host tool's schema (`uniqueItems`, `enum`, `const`), checked in time
 * linear in the value: Ajv's own compares by deep equality, every pair of items for `uniqueItems`
 * (items not declared of one scalar type: the square of the array's length, about 19 s for 16 000
 * small objects) and every allowed value for `enum` (1 000 objects against 100 000 items: 8 s),
 * the main thread held all along.
 *
 * - Each value these keywords meet is given a number that is the same exactly when JSON Schema
 *   calls two values equal: objects whatever the order of their keys, arrays item by item in
 *   order, numbers by value (1 and 1.0 are one number), strings, booleans and null each apart. An
 *   array's items are unique when their numbers are (one pass and a Map); a value is one of an
 *   `enum`'s when its number is among theirs (a Set, made once a check).
 * - A value's number is made of its children's (interned: a text of its keys, its scalars' JSON and
 *   its other children's numbers), kept by the object for the rest of the check: a value under `uniqueItems` at every
 *   depth is read once, not once for each array above it, and the numbers are made without
 *   recursion, so no depth overflows the stack.
 * - These replace Ajv's own in each schema's own Ajv instance (`removeKeyword` then `addKeyword`):
 *   the schema is compiled as written, and the errors are Ajv's: for `uniqueItems` with the pair
 *   Ajv would name (the last item that repeats an earlier one, and the nearest earlier one).
 */
import type { ErrorObject, KeywordDefinition } from "ajv"

/** One check's numbering: each distinct value's text to its number, each object met to its number, each `enum` to its values' numbers. */
interface Numbering {
  readonly byText: Map<string, number>
  // Maps, not WeakMaps (several times slower): a numbering lives only for its check.
  readonly byObject: Map<object, number>
  readonly enums: Map<ReadonlyArray<unknown>, Set<number>>
}

const fresh = (): Numbering => ({ byText: new Map(), byObject: new Map(), enums: new Map() })

/** The numbering of the check running now (`withNumbering`); one per keyword call outside any. */
let current: Numbering | undefined

/** Runs one check with one numbering for all its `uniqueItems`, `enum` and `const`, let go after. */
export const withNumbering = <A>(check: () => A): A => {
  const outer = current
  current = fresh()
  try {
    return check()
  } finally {
    current = outer
  }
}

const intern = (numbering: Numbering, text: string): number => {
  const known = numbering.byText.get(text)
  if (known !== undefined) return known
  const made = numbering.byText.size
  numbering.byText.set(text, made)
  return made
}

/**
 * A scalar's text, standing for it in its parent's: its type and its JSON (numbers by value:
 * String(1.0) is "1", String(-0) "0"). An object's or array's is `#` and its number.
 */
const scalarText = (numbering: Numbering, value: unknown): string => {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value)
    case "number":
      return `n${String(value)}`
    case "boolean":
      return value ? "t" : "f"
    case "undefined":
      return "u"
    case "bigint":
      return `b${String(value)}`
    default:
      // null; a symbol or a function is no JSON, each only equal to itself.
      return value === null ? "z" : `#${intern(numbering, `x${numbering.byText.size}`)}`
  }
}

const scalarNumber = (numbering: Numbering, value: unknown): number => intern(numbering, scalarText(numbering, value))

/** An object or array being numbered: its children in order, the texts of those done so far. */
interface Frame {
  readonly node: object
  readonly keys: ReadonlyArray<string> | undefined
  readonly children: ReadonlyArray<unknown>
  readonly parts: Array<string>
}

const frameOf = (node: object): Frame => {
  if (Array.isArray(node)) return { node, keys: undefined, children: node, parts: [] }
  const keys = Object.keys(node).sort()
  const record = node as Record<string, unknown>
  return { node, keys, children: keys.map((k) => record[k]), parts: [] }
}

const OPEN = -1

/** The number of `value`: equal for values JSON Schema calls equal, and only for them. */
export const numberOf = (numbering: Numbering, value: unknown): number => {
  if (typeof value !== "object" || value === null) return scalarNumber(numbering, value)
  const known = numbering.byObject.get(value)
  if (known !== undefined) return known
  // Children before their parent, with a stack of our own; OPEN marks an object being numbered.
  const stack: Array<Frame> = [frameOf(value)]
  numbering.byObject.set(value, OPEN)
  let last = -1
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!
    const next = top.parts.length
    if (next < top.children.length) {
      const child = top.children[next]
      // A scalar's text is copied into its parent's only: each value has one parent, so all the texts are as long as the value.
      if (typeof child !== "object" || child === null) top.parts.push(scalarText(numbering, child))
      else {
        const done = numbering.byObject.get(child)
        // An object met again before it is numbered is within itself: no JSON, only equal to itself.
        if (done === OPEN) top.parts.push(`#${intern(numbering, `x${numbering.byText.size}`)}`)
        else if (done !== undefined) top.parts.push(`#${done}`)
        else {
          numbering.byObject.set(child, OPEN)
          stack.push(frameOf(child))
        }
      }
      continue
    }
    const text = top.keys === undefined
      ? `[${top.parts.join(",")}]`
      : `{${top.keys.map((k, i) => `${JSON.stringify(k)}:${top.parts[i]}`).join(",")}}`
    last = intern(numbering, text)
    numbering.byObject.set(top.node, last)
    stack.pop()
    if (stack.length > 0) stack[stack.length - 1]!.parts.push(`#${last}`)
  }
  return last
}

/** The pair Ajv's `uniqueItems` names (`j` before `i`), or undefined when the items are unique. */
export const repeatedPair = (numbering: Numbering, items: ReadonlyArray<unknown>): { readonly i: number; readonly j: number } | undefined => {
  const lastAt = new Map<number, number>()
  let pair: { i: number; j: number } | undefined
  for (let i = 0; i < items.length; i++) {
    const n = numberOf(numbering, items[i])
    const j = lastAt.get(n)
    if (j !== undefined) pair = { i, j }
    lastAt.set(n, i)
  }
  return pair
}

/** Ajv's `uniqueItems`, as a keyword for `addKeyword` once Ajv's own is removed. */
export const uniqueItemsKeyword = (): KeywordDefinition => {
  // Ajv empties `errors` before each call, and reads them after one that answers false.
  const validate = Object.assign(
    (unique: boolean, data: ReadonlyArray<unknown>): boolean => {
      if (!unique || data.length < 2) return true
      const pair = repeatedPair(current ?? fresh(), data)
      if (pair === undefined) return true
      validate.errors = [{
        keyword: "uniqueItems",
        message: `must NOT have duplicate items (items ## ${pair.j} and ${pair.i} are identical)`,
        params: { i: pair.i, j: pair.j }
      }]
      return false
    },
    { errors: [] as Array<Partial<ErrorObject>> }
  )
  return { keyword: "uniqueItems", type: "array", schemaType: "boolean", errors: true, validate }
}

/** Ajv's `enum`, as a keyword for `addKeyword` once Ajv's own is removed: an empty one cannot be compiled, as Ajv's. */
export const enumKeyword = (): KeywordDefinition => ({
  keyword: "enum",
  schemaType: "array",
  errors: true,
  compile: (allowed: ReadonlyArray<unknown>) => {
    if (allowed.length === 0) throw new Error("enum must have non-empty array")
    const validate = Object.assign(
      (data: unknown): boolean => {
        const numbering = current ?? fresh()
        let numbers = numbering.enums.get(allowed)
        if (numbers === undefined) {
          numbers = new Set(allowed.map((v) => numberOf(numbering, v)))
          numbering.enums.set(allowed, numbers)
        }
        if (numbers.has(numberOf(numbering, data))) return true
        validate.errors = [{ keyword: "enum", message: "must be equal to one of the allowed values", params: { allowedValues: allowed } }]
        return false
      },
      { errors: [] as Array<Partial<ErrorObject>> }
    )
    return validate
  }
})

/** Ajv's `const`, as a keyword for `addKeyword` once Ajv's own is removed. */
export const constKeyword = (): KeywordDefinition => ({
  keyword: "const",
  errors: true,
  compile: (allowed: unknown) => {
    const validate = Object.assign(
      (data: unknown): boolean => {
        const numbering = current ?? fresh()
        if (numberOf(numbering, allowed) === numberOf(numbering, data)) return true
        validate.errors = [{ keyword: "const", message: "must be equal to constant", params: { allowedValue: allowed } }]
        return false
      },
      { errors: [] as Array<Partial<ErrorObject>> }
    )
    return validate
  }
})
