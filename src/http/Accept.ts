/**
 * Content negotiation for the Events route, which answers the same URL as a JSON page or as an
 * SSE stream (DESIGN §7). The `Accept` header is read as RFC 9110 §12.5.1 has it: media ranges
 * with quality values, the most specific range that matches a type giving that type's quality
 * (`text/event-stream` over `text/*` over `*\/*`).
 *
 * The stream is chosen only when it is acceptable (q > 0) and preferred to JSON: a higher
 * quality, or the same quality from a more specific range (`text/event-stream, *\/*` names the
 * stream, and only admits JSON through its wildcard). Everything else — no header, `*\/*`, JSON
 * named as well at the same quality, `text/event-stream;q=0` — is a page.
 */

interface MediaRange {
  readonly type: string
  readonly subtype: string
  readonly q: number
}

/** The ranges of an `Accept` header; a range that does not parse (or with a bad q) is skipped. */
const mediaRanges = (header: string): Array<MediaRange> =>
  header.split(",").flatMap((part): Array<MediaRange> => {
    const [range, ...params] = part.split(";")
    const m = /^\s*([\w.+*!#$&^`|~-]+)\/([\w.+*!#$&^`|~-]+)\s*$/.exec(range ?? "")
    if (m === null) return []
    let q = 1
    for (const param of params) {
      const p = /^\s*q\s*=\s*([0-9.]+)\s*$/i.exec(param)
      if (p === null) continue
      if (!/^(0(\.\d{0,3})?|1(\.0{0,3})?)$/.test(p[1]!)) return []
      q = Number(p[1])
    }
    return [{ type: m[1]!.toLowerCase(), subtype: m[2]!.toLowerCase(), q }]
  })

/** The quality a header gives `type/subtype`, and how specific the deciding range was (2 exact, 1 `type/*`, 0 `*\/*`, -1 none). */
const qualityOf = (ranges: ReadonlyArray<MediaRange>, type: string, subtype: string) => {
  let best = { q: 0, specificity: -1 }
  for (const r of ranges) {
    const specificity = r.type === type && r.subtype === subtype
      ? 2
      : r.type === type && r.subtype === "*"
      ? 1
      : r.type === "*" && r.subtype === "*"
      ? 0
      : -1
    if (specificity > best.specificity) best = { q: r.q, specificity }
  }
  return best
}

/** Whether a request with this `Accept` header gets the Events as SSE rather than a page. */
export const prefersEventStream = (accept: string | undefined): boolean => {
  if (accept === undefined) return false
  const ranges = mediaRanges(accept)
  const sse = qualityOf(ranges, "text", "event-stream")
  const json = qualityOf(ranges, "application", "json")
  if (sse.q <= 0) return false
  return sse.q > json.q || (sse.q === json.q && sse.specificity > json.specificity)
}
