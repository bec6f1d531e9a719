/**
 * The JSON text a value was parsed from, kept beside the value while it lives, so that writing
 * it out again costs nothing. Only for text `JSON.stringify` wrote (a journal record's payload):
 * such text parses and writes back to itself exactly, so the kept text is the value's JSON as
 * long as nobody changes the value, and records, once read, are never changed.
 *
 * A record's payload is read back from its JSON text (the journal's recent tail keeps payloads as
 * text) and then, as an Event's `data`, often written out again at once: into a Wasm loop's
 * input, an SSE frame, a page's size. Each of those now takes the text it came from.
 */
const texts = new WeakMap<object, string>()

/** `JSON.parse(text)`, remembering `text` for the value when it is an object or an array. */
export const parseKept = (text: string): unknown => {
  const value: unknown = JSON.parse(text)
  if (value !== null && typeof value === "object") texts.set(value, text)
  return value
}

/** `JSON.stringify(value)`: the text it was parsed from, when `parseKept` read it. */
export const stringifyKept = (value: unknown): string => {
  if (value !== null && typeof value === "object") {
    const text = texts.get(value)
    if (text !== undefined) return text
  }
  return JSON.stringify(value)
}

/**
 * `JSON.stringify(value)`, written once for an object or an array and kept with it: later calls
 * give the kept text. Only for a value nobody changes once it is written out, such as a session's
 * configuration, which its state holds as the creation record gave it and a Wasm loop's input
 * carries on every turn (where a configuration with a few dozen tool schemas took longer to write
 * than the rest of the turn's Wasm work).
 */
export const stringifyOnce = (value: unknown): string => {
  if (value === null || typeof value !== "object") return JSON.stringify(value)
  let text = texts.get(value)
  if (text === undefined) {
    text = JSON.stringify(value)
    texts.set(value, text)
  }
  return text
}

/**
 * Whether `JSON.parse(JSON.stringify(value))` would give `value` back, member for member: only
 * null, booleans, finite numbers (not -0), strings, arrays of such and plain objects of such (no prototype
 * but Object's or none, no `toJSON`, no undefined member, no symbol key). What JSON.parse makes
 * always is; what a caller's code hands over (an in-process tool's output) may not be. Called on
 * text-checked values only (nesting bounded), so its recursion is bounded too.
 */
export const isJsonData = (value: unknown): boolean => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true
    case "number":
      // JSON writes -0 as 0.
      return Number.isFinite(value) && !Object.is(value, -0)
    case "object": {
      if (value === null) return true
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) if (!isJsonData(value[i])) return false
        return true
      }
      const proto = Object.getPrototypeOf(value)
      if ((proto !== Object.prototype && proto !== null) || Object.getOwnPropertySymbols(value).length > 0) return false
      for (const key in value) {
        if (key === "toJSON" || !isJsonData((value as Record<string, unknown>)[key])) return false
      }
      return true
    }
    default:
      return false
  }
}

/**
 * The deepest nesting of objects and arrays in JSON text (strings skipped); cheap, no parse, no
 * recursion. Text deeper than MAX_JSON_DEPTH is refused before anything parses it.
 */
export const nestingDepth = (text: string): number => {
  let depth = 0
  let max = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // backslash: skip the escaped character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91) max = Math.max(max, ++depth)
    else if (c === 125 || c === 93) depth--
  }
  return max
}

/**
 * Where JSON text nests deeper than `max` levels: the keys and indexes down to the first object or
 * array opened past `max` (`max` of them), or undefined when it does not. A scan of the text, no
 * parse and no recursion, as `nestingDepth`: for a refusal to name where (what is too deep is
 * never parsed). A malformed text is named as far as it reads.
 */
export const pathPastDepth = (text: string, max: number): Array<string | number> | undefined => {
  /** One open container: an array's index, or an object's key (and whether a key comes next). */
  const open: Array<{ readonly array: boolean; at: string | number; keyNext: boolean }> = []
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 34) {
      const start = i
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i)
        if (d === 92) i++
        else if (d === 34) break
      }
      const top = open[open.length - 1]
      if (top !== undefined && !top.array && top.keyNext) {
        const literal = text.slice(start, i + 1)
        try {
          top.at = JSON.parse(literal) as string
        } catch {
          top.at = literal
        }
        top.keyNext = false
      }
    } else if (c === 123 || c === 91) {
      if (open.length >= max) return open.map((o) => o.at)
      open.push({ array: c === 91, at: c === 91 ? 0 : "", keyNext: c === 123 })
    } else if (c === 125 || c === 93) open.pop()
    else if (c === 44) {
      const top = open[open.length - 1]
      if (top?.array) top.at = (top.at as number) + 1
      else if (top !== undefined) top.keyNext = true
    }
  }
  return undefined
}

/**
 * Whether `value` nests objects and arrays deeper than `max` levels (as `nestingDepth` counts its
 * JSON: `[1]` is one level), found with a list of work, not by recursion, and stopped at the first
 * container past `max`: for a value parsed from outside (JSON.parse does not recurse) before any
 * recursive code (JSON.stringify, a schema check) walks it. `budget`, when given, bounds the
 * containers looked into (a value built in code may share one object many times over): past it,
 * false.
 */
export const nestsDeeperThan = (value: unknown, max: number, budget = Number.POSITIVE_INFINITY): boolean => {
  if (value === null || typeof value !== "object") return false
  const work: Array<readonly [object, number]> = [[value, 1]]
  let left = budget
  while (work.length > 0) {
    const [container, depth] = work.pop()!
    if (depth > max) return true
    if (--left < 0) return false
    const items = Array.isArray(container) ? container : Object.values(container)
    for (const item of items) if (item !== null && typeof item === "object") work.push([item, depth + 1])
  }
  return false
}

/**
 * The UTF-8 bytes of `JSON.stringify(s)`, counted without writing it: a message may be megabytes,
 * and a copy of it only to be measured is memory a small heap may not have.
 */
export const jsonStringBytes = (s: string): number => {
  let bytes = 2
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c < 0x80) {
      bytes += c === 34 || c === 92 ? 2 : c >= 0x20 ? 1 : c === 8 || c === 9 || c === 10 || c === 12 || c === 13 ? 2 : 6
    } else if (c < 0x800) bytes += 2
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      bytes += 4
      i++
    } else if (c >= 0xd800 && c <= 0xdfff) bytes += 6 // a lone surrogate: written as \uXXXX
    else bytes += 3
  }
  return bytes
}

/**
 * The deepest nesting of objects and arrays in JSON text (as `nestingDepth`), and whether the text
 * may hold a number JSON.parse makes Infinity (outside strings: an exponent of three digits or
 * more, or 210 digits in a row; with an exponent of two digits at most, fewer digits stay below
 * 1.8e308, the largest double). One pass: the number check costs a comparison per character
 * outside strings, and a string's contents are crossed by `indexOf` to its next quote or
 * backslash, not character by character: most of a large request is strings (messages, values),
 * and a character loop over them cost the main thread 4-37 ms a MiB where JSON.parse takes 2. When
 * it may, the parsed value is walked (`holdsNonFinite`).
 */
export const scanJsonText = (text: string): { readonly depth: number; readonly mayOverflow: boolean } => {
  const end = text.length
  let depth = 0
  let max = 0
  /** Digits in a row; those of the exponent, once an `e` came (-1 before). */
  let digits = 0
  let exponent = -1
  let mayOverflow = false
  /** The next quote and backslash at or after where they were last looked for (`end`: none). */
  let quote = -1
  let backslash = -1
  for (let i = 0; i < end; i++) {
    const c = text.charCodeAt(i)
    if (c >= 48 && c <= 57) {
      if (++digits >= 210 || (exponent >= 0 && ++exponent >= 3)) mayOverflow = true
      continue
    }
    if (c === 101 || c === 69) exponent = 0
    else if (c !== 43 && c !== 45) exponent = -1 // a sign keeps the exponent going
    digits = 0
    if (c === 123 || c === 91) max = Math.max(max, ++depth)
    else if (c === 125 || c === 93) depth--
    else if (c === 34) {
      // A string, from after its opening quote to its closing one (or the text's end): each
      // backslash before it escapes the character after it, which may be a quote.
      i++
      for (;;) {
        if (quote < i) quote = indexFrom(text, 34, i, end)
        if (backslash < i) backslash = indexFrom(text, 92, i, end)
        if (backslash < quote) {
          i = backslash + 2
          continue
        }
        i = quote
        break
      }
    }
  }
  return { depth: max, mayOverflow }
}

/** The index of the character `code` in `text` at or after `from`, or `end` when there is none. */
const indexFrom = (text: string, code: 34 | 92, from: number, end: number): number => {
  const at = text.indexOf(code === 34 ? "\"" : "\\", from)
  return at < 0 ? end : at
}

/** Why guest JSON holding such a number is refused (docs/abi.md, "Numbers"). */
export const NOT_FINITE = "a number is beyond the range of a double (such as 1e400): JSON would keep it as null, so it is refused (docs/abi.md, \"Numbers\")"

/** Whether a number in `value` is not finite. Called on text-checked values only (nesting bounded). */
export const holdsNonFinite = (value: unknown): boolean => {
  if (typeof value === "number") return !Number.isFinite(value)
  if (value === null || typeof value !== "object") return false
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (holdsNonFinite(value[i])) return true
    return false
  }
  for (const key in value) if (holdsNonFinite((value as Record<string, unknown>)[key])) return true
  return false
}

/**
 * Where in `value` the first number that is not finite is: the keys and indexes leading to it, or
 * undefined when there is none (what a refusal names). Called on text-checked values only
 * (nesting bounded).
 */
export const nonFiniteAt = (value: unknown): Array<string | number> | undefined => {
  if (typeof value === "number") return Number.isFinite(value) ? undefined : []
  if (value === null || typeof value !== "object") return undefined
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const at = nonFiniteAt(value[i])
      if (at !== undefined) return [i, ...at]
    }
    return undefined
  }
  for (const key in value) {
    const at = nonFiniteAt((value as Record<string, unknown>)[key])
    if (at !== undefined) return [key, ...at]
  }
  return undefined
}
