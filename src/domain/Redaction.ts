/**
 * Secrets kept out of what a server sent back. A binding's secret (a model key, an Environment's
 * token or header) is sent to its server; a server or a gateway in front of it may quote it back
 * (a 401 body, an error's message) and Brain keeps what it is sent back in failures, which are
 * journaled and shown. Every occurrence of a secret there is replaced by `<redacted>` first.
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

/**
 * `value` with every occurrence of a secret replaced by `<redacted>`: in strings, in member names,
 * and a number whose digits hold one becomes the string `<redacted>`.
 */
export const redact = (value: unknown, secrets: ReadonlyArray<string>): unknown => {
  if (secrets.length === 0) return value
  if (typeof value === "string") return redactText(value, secrets)
  if (typeof value === "number") return secrets.some((s) => s !== "" && String(value).includes(s)) ? REDACTED : value
  if (Array.isArray(value)) return value.map((v) => redact(v, secrets))
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) out[redactText(k, secrets)] = redact(v, secrets)
    return out
  }
  return value
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
