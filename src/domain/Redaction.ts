/**
 * Secrets kept out of what a server sent back. A binding's secret (a model key, an Environment's
 * token or header) is sent to its server; a server or a gateway in front of it may quote it back
 * (a 401 body, an error's message, a gateway echoing the request in an answer) and Brain keeps
 * what it is sent back in failures and in a model's answers, which are journaled and shown. Every
 * occurrence of a secret there is replaced by `<redacted>` first.
 * Pure: the callers pass the secrets' values, longest first (so a secret that holds a shorter one
 * is replaced whole).
 */

export const REDACTED = "<redacted>"

/** `text` with every occurrence of a secret replaced by `<redacted>`. */
export const redactText = (text: string, secrets: ReadonlyArray<string>): string => {
  let out = text
  for (const secret of secrets) if (secret !== "" && out.includes(secret)) out = out.split(secret).join(REDACTED)
  return out
}

/** A string or a number redacted; any other scalar as it is. */
const redactScalar = (value: unknown, secrets: ReadonlyArray<string>): unknown => {
  if (typeof value === "string") return redactText(value, secrets)
  if (typeof value === "number") return secrets.some((s) => s !== "" && String(value).includes(s)) ? REDACTED : value
  return value
}

/**
 * `value` with every occurrence of a secret replaced by `<redacted>`: in strings, in member names,
 * and a number whose digits hold one becomes the string `<redacted>`.
 *
 * A copy built with a list of work, not by recursion: a server's JSON may nest as deep as its
 * bytes allow, and what is too deep is refused later by its record's bound (MAX_JSON_DEPTH), as it
 * would be with no secret, not here by the stack. Every member is the copy's own, whatever its name:
 * `__proto__` is defined, not assigned (an assignment would set the copy's prototype and lose it).
 */
export const redact = (value: unknown, secrets: ReadonlyArray<string>): unknown => redactCopy(value, secrets, true)

/** `redact`, numbers included or (`numbers` false) kept as they are. */
const redactCopy = (value: unknown, secrets: ReadonlyArray<string>, numbers: boolean): unknown => {
  if (secrets.length === 0) return value
  const scalar = (v: unknown) => (numbers || typeof v !== "number" ? redactScalar(v, secrets) : v)
  if (value === null || typeof value !== "object") return scalar(value)
  const work: Array<readonly [from: object, to: Record<string, unknown> | Array<unknown>]> = []
  const copy = (v: unknown): unknown => {
    if (v === null || typeof v !== "object") return scalar(v)
    const to = Array.isArray(v) ? new Array<unknown>(v.length) : {}
    work.push([v, to])
    return to
  }
  const root = copy(value)
  while (work.length > 0) {
    const [from, to] = work.pop()!
    if (Array.isArray(to)) {
      const items = from as ReadonlyArray<unknown>
      for (let i = 0; i < items.length; i++) to[i] = copy(items[i])
      continue
    }
    for (const [k, v] of Object.entries(from)) {
      const name = redactText(k, secrets)
      if (name === "__proto__") Object.defineProperty(to, name, { value: copy(v), writable: true, enumerable: true, configurable: true })
      else to[name] = copy(v)
    }
  }
  return root
}

/** Whether a string of `value` (a member name too) holds a secret; walked with a list of work, as `redact` is. */
const holdsSecretText = (value: unknown, secrets: ReadonlyArray<string>): boolean => {
  const holds = (text: string) => secrets.some((s) => s !== "" && text.includes(s))
  const work: Array<unknown> = [value]
  while (work.length > 0) {
    const v = work.pop()
    if (typeof v === "string") {
      if (holds(v)) return true
    } else if (Array.isArray(v)) {
      for (const item of v) work.push(item)
    } else if (v !== null && typeof v === "object") {
      for (const [k, item] of Object.entries(v)) {
        if (holds(k)) return true
        work.push(item)
      }
    }
  }
  return false
}

/**
 * `value` with every occurrence of a secret in its strings and member names replaced by
 * `<redacted>`, its numbers kept: for an answer (a model's result), whose counts must stay numbers
 * for its record. `value` itself when none of its strings holds a secret (the usual case: no copy).
 */
export const redactTexts = <A>(value: A, secrets: ReadonlyArray<string>): A => {
  if (!holdsSecretText(value, secrets)) return value
  // Strings stay strings and numbers numbers: the copy has the value's shape (a member renamed
  // `<redacted>` is still a member of a record of strings).
  return redactCopy(value, secrets, false) as A
}

/**
 * The first bytes of a longer text (a body cut at its bound, or cut short) redacted: beside every
 * whole secret, a tail that is the first characters of one is dropped too (a false match only
 * costs a few characters of a text that was cut anyway).
 */
export const redactCutText = (text: string, secrets: ReadonlyArray<string>): string => {
  const whole = redactText(text, secrets)
  for (const secret of secrets) {
    for (let k = Math.min(secret.length - 1, whole.length); k > 0; k--) {
      if (whole.endsWith(secret.slice(0, k))) return whole.slice(0, whole.length - k) + REDACTED
    }
  }
  return whole
}
