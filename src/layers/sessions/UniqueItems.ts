/**
 * `uniqueItems` for a host tool's schema, checked in time linear in the value: Ajv's own compares
 * every pair of items by deep equality (items not declared of one scalar type), the square of the
 * array's length, about 19 s for 16 000 small objects, the main thread held all along.
 *
 * - Each value the keyword meets is given a number that is the same exactly when JSON Schema calls
 *   two values equal: objects whatever the order of their keys, arrays item by item in order,
 *   numbers by value (1 and 1.0 are one number), strings, booleans and null each apart. An array's
 *   items are unique when their numbers are: one pass and a Set.
 * - A value's number is made of its children's numbers (interned: a text of the children's numbers
 *   and keys), kept by the object for the rest of the check: a value under `uniqueItems` at every
 *   depth is read once, not once for each array above it, and the numbers are made without
 *   recursion, so no depth overflows the stack.
 * - It replaces Ajv's `uniqueItems` in each schema's own Ajv instance (`removeKeyword` then
 *   `addKeyword`): the schema is compiled as written, and its error is Ajv's, with the pair Ajv
 *   would name (the last item that repeats an earlier one, and the nearest earlier one).
 */
import type { ErrorObject, KeywordDefinition } from "ajv"

/** One check's numbering: each distinct value's text to its number, and each object met to its number. */
interface Numbering {
  readonly byText: Map<string, number>
  readonly byObject: WeakMap<object, number>
}

const fresh = (): Numbering => ({ byText: new Map(), byObject: new WeakMap() })

/** The numbering of the check running now (`withNumbering`); one per keyword call outside any. */
let current: Numbering | undefined

/** Runs one check with one numbering for all its `uniqueItems`, let go after. */
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

/** A scalar's number: its type and its JSON text (numbers by value: String(1.0) is "1", String(-0) "0"). */
const scalarNumber = (numbering: Numbering, value: unknown): number => {
  switch (typeof value) {
    case "string":
      return intern(numbering, `s${value}`)
    case "number":
      return intern(numbering, `n${String(value)}`)
    case "boolean":
      return intern(numbering, value ? "t" : "f")
    case "undefined":
      return intern(numbering, "u")
    case "bigint":
      return intern(numbering, `b${String(value)}`)
    default:
      // null; a symbol or a function is no JSON, each only equal to itself.
      return value === null ? intern(numbering, "z") : intern(numbering, `x${numbering.byText.size}`)
  }
}

/** An object or array being numbered: its children in order, the numbers of those done so far. */
interface Frame {
  readonly node: object
  readonly keys: ReadonlyArray<string> | undefined
  readonly children: ReadonlyArray<unknown>
  readonly numbers: Array<number>
}

const frameOf = (node: object): Frame => {
  if (Array.isArray(node)) return { node, keys: undefined, children: node, numbers: [] }
  const keys = Object.keys(node).sort()
  const record = node as Record<string, unknown>
  return { node, keys, children: keys.map((k) => record[k]), numbers: [] }
}

/** The number of `value`: equal for values JSON Schema calls equal, and only for them. */
export const numberOf = (numbering: Numbering, value: unknown): number => {
  if (typeof value !== "object" || value === null) return scalarNumber(numbering, value)
  const known = numbering.byObject.get(value)
  if (known !== undefined) return known
  // Children before their parent, with a stack of our own.
  const stack: Array<Frame> = [frameOf(value)]
  // An object met again before it is numbered is within itself: no JSON, only equal to itself.
  const open = new WeakSet<object>([value])
  let last = -1
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!
    const next = top.numbers.length
    if (next < top.children.length) {
      const child = top.children[next]
      if (typeof child !== "object" || child === null) top.numbers.push(scalarNumber(numbering, child))
      else {
        const done = numbering.byObject.get(child)
        if (done !== undefined) top.numbers.push(done)
        else if (open.has(child)) top.numbers.push(intern(numbering, `x${numbering.byText.size}`))
        else {
          open.add(child)
          stack.push(frameOf(child))
        }
      }
      continue
    }
    const text = top.keys === undefined
      ? `[${top.numbers.join(",")}]`
      : `{${top.keys.map((k, i) => `${JSON.stringify(k)}:${top.numbers[i]}`).join(",")}}`
    last = intern(numbering, text)
    numbering.byObject.set(top.node, last)
    stack.pop()
    if (stack.length > 0) stack[stack.length - 1]!.numbers.push(last)
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
