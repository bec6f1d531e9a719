/**
 * Which methods a path takes, from the contract's routes (Api.ts) and the OpenAPI document's, so
 * that a method a known path does not take is answered 405 with `Allow` (RFC 9110 §15.5.6) and
 * only an unknown path 404. The paths match as the router matches them: a `:param` segment is any
 * non-empty segment, letters in any case, a trailing slash or not. The router answers HEAD with a
 * path's GET route, so HEAD is allowed wherever GET is.
 */
import { BrainApi } from "./Api.js"

/** The OpenAPI document's route (main.ts), which is not one of the contract's. */
const OPENAPI_ROUTE = { method: "GET", path: "/openapi.json" } as const

interface PathMethods {
  readonly pattern: RegExp
  readonly methods: Set<string>
  /** The methods whose route on this path answers a query itself (declares its keys, or ignores it). */
  readonly queried: Set<string>
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

const patternOf = (path: string) =>
  new RegExp(`^${path.split("/").map((segment) => (segment.startsWith(":") ? "[^/]+" : escape(segment))).join("/")}/?$`, "i")

const byPath = (() => {
  const paths = new Map<string, PathMethods>()
  const routes = [
    ...Object.values(BrainApi.groups).flatMap((group) =>
      Object.values(group.endpoints).map((e) => ({ method: e.method, path: e.path, query: e.urlParamsSchema._tag === "Some" }))
    ),
    // The document reads no input: a query (a cache-buster, say) changes nothing, and is ignored.
    { ...OPENAPI_ROUTE, query: true }
  ]
  for (const { method, path, query } of routes) {
    const entry = paths.get(path) ?? { pattern: patternOf(path), methods: new Set<string>(), queried: new Set<string>() }
    const methods = method === "GET" ? [method, "HEAD"] : [method]
    for (const m of methods) {
      entry.methods.add(m)
      if (query) entry.queried.add(m)
    }
    paths.set(path, entry)
  }
  return [...paths.values()].map(({ methods, pattern, queried }) => ({ pattern, methods: [...methods].sort(), queried }))
})()

/** The methods `path` (no query) takes, sorted; undefined when no route has this path. */
export const methodsOf = (path: string): ReadonlyArray<string> | undefined => {
  let found: Array<string> | undefined
  for (const { methods, pattern } of byPath) {
    if (pattern.test(path)) found = [...new Set([...(found ?? []), ...methods])].sort()
  }
  return found
}

/**
 * Whether the route of `method` on `path` (no query) answers a query itself: its keys are declared
 * and its decoder refuses the others, or (the OpenAPI document, which reads no input) it ignores
 * it. Every other route takes no query key at all (the gate refuses one).
 */
export const takesQuery = (method: string, path: string): boolean => {
  for (const { pattern, queried } of byPath) if (queried.has(method) && pattern.test(path)) return true
  return false
}
