/**
 * A binding's base URL (a model binding's, an Environment binding's), as configured and as
 * compared with what a session recorded.
 */
import { Schema } from "effect"

/**
 * A base URL: http or https, no credentials, query or fragment (paths are appended to it). Held as
 * the URL parser writes it (`URL.href`: scheme and host lower-cased, a default port dropped, `//`
 * where it was left out or written with backslashes: `HTTP://h/v1`, `http:h/v1`, `http:\\h\v1` all
 * become `http://h/v1`), which is where requests went anyway (every request URL is parsed the same
 * way), so a respelled binding records what the plain spelling records. `credentials` says where
 * the secret goes instead (`the key in api_key_env`).
 */
export const BaseUrl = (credentials: string) =>
  Schema.transform(
    Schema.String.pipe(
      Schema.filter((s) => {
        if (/\s/.test(s) || !URL.canParse(s)) return "must be an absolute http:// or https:// URL"
        const url = new URL(s)
        if (url.protocol !== "http:" && url.protocol !== "https:") return "must be an http:// or https:// URL"
        if (url.username !== "" || url.password !== "") return `must not hold credentials: name the variable holding ${credentials}`
        if (url.search !== "" || url.hash !== "" || /[?#]/.test(s)) return "must have no query or fragment"
        return true
      })
    ),
    Schema.String,
    { strict: true, decode: (s) => new URL(s).href, encode: (s) => s }
  )

/**
 * A base URL as compared: parsed (a scheme's or host's case, a default port), without trailing
 * slashes; a text the parser cannot read, as it is. Two spellings of one URL compare equal, so a
 * session recorded under another spelling (one an earlier server kept verbatim) is not moved by a
 * cosmetic edit; a path's case, a scheme or a port that differ still differ.
 */
export const comparableBaseUrl = (base: string): string => {
  if (!URL.canParse(base)) return base
  const url = new URL(base)
  url.pathname = url.pathname.replace(/\/+$/, "")
  return url.href
}
