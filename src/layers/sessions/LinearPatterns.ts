/**
 * The regular expressions of a host tool's schema (`pattern`, `patternProperties`), matched by
 * RE2 (the pure-JavaScript `re2js`) in time linear in the text, never by JavaScript's
 * backtracking engine, which takes time exponential in the text for patterns such as `^(a+)+$`
 * and would hold the main thread, every session's and host's with it.
 *
 * - A pattern must be one both dialects read: an ECMA-262 pattern (JSON Schema's, with the `u`
 *   flag, as Ajv reads it) that RE2 can run. RE2 has no lookaround (`(?=`, `(?!`, `(?<=`,
 *   `(?<!`) and no backreferences (`\1`, `\k<name>`): a schema using them cannot be compiled.
 * - Where the dialects read one pattern differently, the pattern is rewritten to JavaScript's
 *   meaning before RE2 compiles it: `\s` and `\S` (JavaScript's include Unicode spaces and `\v`)
 *   and `.` (JavaScript's matches neither `\r`, U+2028 nor U+2029). `\d`, `\w` and `\b` are ASCII
 *   in both.
 * - Compiling and matching cost time in proportion to the program RE2 compiles: a schema's
 *   patterns are bounded together by SCHEMA_PATTERN_PROGRAM_MAX (estimated from the text before
 *   compiling, so that an expensive pattern is never compiled), and one check's matching by
 *   PATTERN_CHECK_STEPS (program size times characters, counted before each match).
 */
import { RE2JS } from "re2js"
import { PATTERN_CHECK_STEPS, SCHEMA_PATTERN_PROGRAM_MAX } from "../../domain/Limits.js"

/** JavaScript's `\s`: what RE2 reads inside a class. */
const SPACE = "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
/** JavaScript's `\S`: the code points SPACE leaves out, as ranges. */
const NOT_SPACE = "\\x{00}-\\x{08}\\x{0E}-\\x{1F}\\x{21}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}" +
  "\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{FEFE}\\x{FF00}-\\x{10FFFF}"
/** JavaScript's `.` without the `s` flag. */
const DOT = "[^\\n\\r\\x{2028}\\x{2029}]"

/**
 * The pattern with `\s`, `\S` and `.` given JavaScript's meaning, and an upper bound of the size
 * of RE2's program for it: each atom one instruction, a group its alternatives and two, `*`, `+`
 * and `?` one more, and `{n,m}` m copies of what it repeats (`{n,}` n + 1).
 */
export const rewritten = (pattern: string): { readonly text: string; readonly program: number } => {
  let text = ""
  // One frame per open group: the program of its earlier alternatives, of the current one so far, and of its last item.
  const frames: Array<{ alternatives: number; sum: number; last: number }> = [{ alternatives: 0, sum: 0, last: 0 }]
  const top = () => frames[frames.length - 1]!
  const atom = (cost: number) => {
    top().sum += cost
    top().last = cost
  }
  let i = 0
  while (i < pattern.length) {
    const c = pattern[i]!
    if (c === "\\") {
      const next = pattern[i + 1]
      if (next === "s") text += `[${SPACE}]`
      else if (next === "S") text += `[${NOT_SPACE}]`
      else text += pattern.slice(i, i + 2)
      atom(1)
      i += 2
    } else if (c === "[") {
      // A class: to its closing bracket (JavaScript's `[]` and `[^]` included), its escapes copied but `\s` and `\S`.
      let j = i + 1
      let body = ""
      if (pattern[j] === "^") {
        body += "^"
        j++
      }
      while (j < pattern.length && pattern[j] !== "]") {
        if (pattern[j] === "\\") {
          const next = pattern[j + 1]
          body += next === "s" ? SPACE : next === "S" ? NOT_SPACE : pattern.slice(j, j + 2)
          j += 2
        } else {
          body += pattern[j]
          j++
        }
      }
      text += `[${body}]`
      atom(1)
      i = j + 1
    } else if (c === "(") {
      text += c
      frames.push({ alternatives: 0, sum: 0, last: 0 })
      i++
    } else if (c === ")") {
      text += c
      const closed = frames.length > 1 ? frames.pop()! : { alternatives: 0, sum: 0, last: 0 }
      atom(closed.alternatives + closed.sum + 2)
      i++
    } else if (c === "|") {
      text += c
      top().alternatives += top().sum + 1
      top().sum = 0
      top().last = 0
      i++
    } else if (c === "*" || c === "+" || c === "?") {
      text += c
      top().sum += 1
      i++
    } else if (c === "{") {
      const counted = /^\{(\d+)(,(\d*))?\}/.exec(pattern.slice(i))
      if (counted === null) {
        text += c
        atom(1)
        i++
        continue
      }
      const least = Number(counted[1])
      const most = counted[2] === undefined ? least : counted[3] === "" ? least + 1 : Number(counted[3])
      const copies = Math.max(least, most, 1)
      const frame = top()
      frame.sum += frame.last * (copies - 1) + copies
      frame.last *= copies
      text += counted[0]
      i += counted[0].length
    } else if (c === ".") {
      text += DOT
      atom(1)
      i++
    } else {
      text += c
      atom(1)
      i++
    }
  }
  const root = frames[0]!
  return { text, program: root.alternatives + root.sum + 2 }
}

/** A pattern as Ajv uses it (`test`, and `toString` naming it among the schema's patterns). */
export interface LinearPattern {
  readonly test: (text: string) => boolean
  readonly toString: () => string
}

/** What one check's matching may still cost (PATTERN_CHECK_STEPS), and whether a match was refused for it. */
const budget = { left: PATTERN_CHECK_STEPS, exhausted: false }

/** Runs one check with PATTERN_CHECK_STEPS of matching: what it gives, and whether it ran out. */
export const withinSteps = <A>(check: () => A): { readonly value: A; readonly exhausted: boolean } => {
  budget.left = PATTERN_CHECK_STEPS
  budget.exhausted = false
  try {
    return { value: check(), exhausted: budget.exhausted }
  } finally {
    budget.left = PATTERN_CHECK_STEPS
    budget.exhausted = false
  }
}

/**
 * Ajv's `code.regExp` for one schema's compile: every pattern checked in both dialects and
 * compiled by RE2, their programs together within SCHEMA_PATTERN_PROGRAM_MAX (one past it throws,
 * and the schema cannot be compiled). Its matches share one check's PATTERN_CHECK_STEPS: one that
 * would pass them answers "no match" at once, and the check says so (`withinSteps`).
 */
export const linearRegExp = () => {
  let program = 0
  const engine = (pattern: string, _flags: string): LinearPattern => {
    // JSON Schema's dialect first: a pattern JavaScript cannot read is no pattern (the error names it).
    new RegExp(pattern, "u")
    const { program: estimate, text } = rewritten(pattern)
    program += estimate
    if (program > SCHEMA_PATTERN_PROGRAM_MAX) {
      throw new Error(
        `its patterns are too large to match: about ${program} RE2 instructions, more than ${SCHEMA_PATTERN_PROGRAM_MAX} (SCHEMA_PATTERN_PROGRAM_MAX; each {n,m} counts m copies of what it repeats)`
      )
    }
    let re: RE2JS
    try {
      re = RE2JS.compile(RE2JS.translateRegExp(text))
    } catch (e) {
      throw new Error(`the pattern ${JSON.stringify(pattern)} cannot be matched in linear time (RE2 has no lookaround or backreferences): ${e instanceof Error ? e.message : String(e)}`)
    }
    const size = re.programSize()
    return {
      test: (s: string) => {
        const cost = size * (s.length + 1)
        if (cost > budget.left) {
          budget.left = 0
          budget.exhausted = true
          return false
        }
        budget.left -= cost
        return re.test(s)
      },
      toString: () => pattern
    }
  }
  // Ajv names the engine in generated code only for standalone validators, which Brain does not make.
  return Object.assign(engine, { code: "re2js" })
}
