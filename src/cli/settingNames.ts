/**
 * The `BRAIN_*` variables `brain serve` reads, and a warning for every other one in its
 * environment: a misspelled setting (`BRAIN_MAX_TURN_SEC`) would otherwise leave the default in
 * force unseen. The names come from the code, never from a second list kept by hand:
 *
 * - the settings: `fromConfig` (ServerConfigEnv.ts) read from a provider that records each name it is
 *   asked for and holds none, so every setting it declares is found, whatever its rule;
 * - the variables the start's bindings name (`api_key_env`, `token_env`, `headers_env`, which an
 *   operator may well call `BRAIN_…`): recorded as the bindings are read (`recordingReads`);
 * - names under a prefix the repository's own harnesses use (RESERVED_PREFIXES): the benchmarks'
 *   preloads read theirs inside the server process, and the tests read theirs in the test runner,
 *   whose shell (and whose servers' environment) holds them too.
 *
 * A warning names the variable and, when one name Brain reads is close, that name; never the
 * value, which may be a secret. It never refuses the start.
 */
import { ConfigError, ConfigProvider, ConfigProviderPathPatch, Effect, HashSet } from "effect"
import { fromConfig } from "../services/ServerConfigEnv.js"

/**
 * Prefixes of variables read by the repository's harnesses, not by the server: `BRAIN_BENCH_`
 * (scripts/bench, some by preloads inside a benchmarked server), `BRAIN_TEST_`, `BRAIN_FUZZ_` and
 * `BRAIN_LIVE_` (the test suite; test/support/server.ts hands every server it starts one).
 */
export const RESERVED_PREFIXES: ReadonlyArray<string> = ["BRAIN_BENCH_", "BRAIN_TEST_", "BRAIN_FUZZ_", "BRAIN_LIVE_"]

/** A provider that records the name of every variable it is asked for and answers from `answer`. */
const recorder = (names: Set<string>, answer: ConfigProvider.ConfigProvider["flattened"] | undefined) =>
  ConfigProvider.fromFlat(ConfigProvider.makeFlat({
    load: (path, primitive, split) => {
      names.add(path.join("."))
      return answer === undefined ? Effect.fail(ConfigError.MissingData([...path], "unset")) : answer.load(path, primitive, split)
    },
    enumerateChildren: (path) => (answer === undefined ? Effect.succeed(HashSet.empty<string>()) : answer.enumerateChildren(path)),
    patch: ConfigProviderPathPatch.empty
  }))

/** The settings `fromConfig` reads, found by reading it from a provider that records each name and holds none. */
export const knownSettings: Effect.Effect<Set<string>> = Effect.gen(function*() {
  const names = new Set<string>()
  yield* Effect.ignore(Effect.withConfigProvider(fromConfig, recorder(names, undefined)))
  return names
})

/**
 * `effect` run with the configuration it would have (the environment, unless told otherwise), with
 * the name of every variable it reads added to `names` (the variables a binding names, read as the
 * bindings load).
 */
export const recordingReads = <A, E, R>(effect: Effect.Effect<A, E, R>, names: Set<string>): Effect.Effect<A, E, R> =>
  Effect.configProviderWith((current) => Effect.withConfigProvider(effect, recorder(names, current.flattened)))

/** Edits (insert, delete, substitute) from `a` to `b`. */
export const distance = (a: string, b: string): number => {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const next = [i]
    for (let j = 1; j <= b.length; j++) next.push(Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)))
    row = next
  }
  return row[b.length]!
}

/** Edits within which a read name is suggested for one that is not. */
const SUGGESTION_EDITS = 2

/**
 * The read names closest to `name` within SUGGESTION_EDITS (case aside), or written the same once
 * underscores are dropped (`BRAIN_CACHEBYTES`), which counts as closest; every one equally close.
 */
export const closest = (name: string, read: Iterable<string>): ReadonlyArray<string> => {
  const given = name.toUpperCase()
  const squashed = given.replace(/_/g, "")
  let best = Number.POSITIVE_INFINITY
  let out: Array<string> = []
  for (const candidate of read) {
    const d = candidate.replace(/_/g, "") === squashed ? 0 : distance(given, candidate)
    if (d > SUGGESTION_EDITS || d > best) continue
    if (d < best) out = []
    best = d
    out.push(candidate)
  }
  return out.sort()
}

/**
 * One warning for each name in `environment` that begins with `BRAIN_` but is not in `read` nor
 * under a reserved prefix, sorted by name: the name and the closest read names, never a value.
 */
export const unreadSettings = (environment: Iterable<string>, read: ReadonlySet<string>): ReadonlyArray<string> =>
  [...new Set(environment)]
    .filter((name) => name.startsWith("BRAIN_") && !read.has(name) && !RESERVED_PREFIXES.some((prefix) => name.startsWith(prefix)))
    .sort()
    .map((name) => {
      const near = closest(name, read)
      return `${name} is not a setting Brain reads${near.length > 0 ? ` (did you mean ${near.join(" or ")}?)` : ""}`
    })
