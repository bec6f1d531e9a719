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
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

const patternOf = (path: string) =>
  new RegExp(`^${path.split("/").map((segment) => (segment.startsWith(":") ? "[^/]+" : escape(segment))).join("/")}/?$`, "i")

const byPath = (() => {
  const paths = new Map<string, PathMethods>()
  const routes = [
    ...Object.values(BrainApi.groups).flatMap((group) => Object.values(group.endpoints)),
    OPENAPI_ROUTE
  ]
  for (const { method, path } of routes) {
    const entry = paths.get(path) ?? { pattern: patternOf(path), methods: new Set<string>() }
    entry.methods.add(method)
    if (method === "GET") entry.methods.add("HEAD")
    paths.set(path, entry)
  }
  return [...paths.values()].map(({ methods, pattern }) => ({ pattern, methods: [...methods].sort() }))
})()

/** The methods `path` (no query) takes, sorted; undefined when no route has this path. */
export const methodsOf = (path: string): ReadonlyArray<string> | undefined => {
  let found: Array<string> | undefined
  for (const { methods, pattern } of byPath) {
    if (pattern.test(path)) found = [...new Set([...(found ?? []), ...methods])].sort()
  }
  return found
}
