/**
 * The names `brain serve` reads (src/cli/settingNames.ts): a `BRAIN_*` variable it does not read
 * gets one warning naming it and the read name close to it, never its value; the settings table of
 * docs/operations.md, the names the code and the docs mention, and the names the start reads are
 * one list.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect } from "effect"
import { closest, knownSettings, recordingReads, RESERVED_PREFIXES, unreadSettings } from "../../src/cli/settingNames.js"
import { checkBindings } from "../../src/main.js"
import { defaults } from "../../src/services/ServerConfig.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const read = (file: string) => fs.readFileSync(path.join(ROOT, file), "utf8")

/** The names in the first column of docs/operations.md's settings table (the one under "Running"). */
const documentedSettings = (): ReadonlyArray<string> => {
  const doc = read("docs/operations.md")
  const start = doc.indexOf("| setting | default | meaning |")
  expect(start, "docs/operations.md has no settings table").toBeGreaterThan(0)
  const rows: Array<string> = []
  for (const line of doc.slice(start).split("\n").slice(2)) {
    if (!line.startsWith("|")) break
    const m = /^\| `(BRAIN_[A-Z0-9_]+)` \|/.exec(line)
    expect(m, `a settings row that names no BRAIN_ variable: ${line.slice(0, 80)}`).not.toBeNull()
    rows.push(m![1]!)
  }
  return rows
}

/** Every file under `dir` (relative to the root) whose name ends with one of `exts`. */
const filesUnder = (dir: string, exts: ReadonlyArray<string>): Array<string> =>
  fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name)
    return e.isDirectory() ? filesUnder(p, exts) : exts.some((x) => e.name.endsWith(x)) ? [p] : []
  })

const reserved = (name: string) => RESERVED_PREFIXES.some((prefix) => name.startsWith(prefix))

describe("the BRAIN_ names brain serve reads", () => {
  it.effect("every setting in docs/operations.md's settings table is read, and every setting read is in the table", () =>
    Effect.gen(function*() {
      const known = yield* knownSettings
      const documented = documentedSettings()
      expect(documented.length).toBeGreaterThan(40)
      expect(documented.filter((name) => !known.has(name)), "documented but not read (and so warned about)").toEqual([])
      expect([...known].filter((name) => !documented.includes(name)), "read but not in the settings table").toEqual([])
      expect(unreadSettings(documented, known)).toEqual([])
    }))

  it.effect("every BRAIN_ name the sources, scripts, docs and examples mention, and every one the tests read from the environment, is read or a harness's", () =>
    Effect.gen(function*() {
      const known = yield* knownSettings
      const mentioned = new Map<string, string>()
      const name = /BRAIN_[A-Z0-9][A-Z0-9_]*[A-Z0-9](?![A-Z0-9_])/g
      const sources = [
        ...["src", "bin", "scripts", "docs", "examples"].flatMap((dir) => filesUnder(dir, [".ts", ".js", ".mjs", ".cjs", ".md"])),
        "README.md",
        "package.json"
      ]
      // The module itself and the warnings shown as examples name misspellings on purpose.
      for (const file of sources.filter((f) => f !== path.join("src", "cli", "settingNames.ts"))) {
        for (const line of read(file).split("\n").filter((l) => !l.includes("is not a setting Brain reads"))) {
          for (const m of line.matchAll(name)) mentioned.set(m[0], file)
        }
      }
      // The tests mention misspellings on purpose: only the names they read from the environment count.
      const envRead = /process\.env(?:\.|\[")(BRAIN_[A-Z0-9_]+)/g
      for (const file of filesUnder("test", [".ts", ".mjs", ".js", ".cjs"])) for (const m of read(file).matchAll(envRead)) mentioned.set(m[1]!, file)
      expect(mentioned.size).toBeGreaterThan(50)
      const unread = [...mentioned].filter(([n]) => !known.has(n) && !reserved(n)).map(([n, file]) => `${n} (${file})`)
      expect(unread).toEqual([])
    }))

  it.effect("every setting ServerConfigOverrides.ts maps a setting given in code to is read", () =>
    Effect.gen(function*() {
      const known = yield* knownSettings
      const named = [...read("src/services/ServerConfigOverrides.ts").matchAll(/"(BRAIN_[A-Z0-9_]+)"/g)].map((m) => m[1]!)
      // One for each setting but the telemetry sink, which is given parsed.
      expect(new Set(named).size).toBe(Object.keys(defaults).length - 1)
      expect(named.filter((n) => !known.has(n))).toEqual([])
    }))

  it.effect("a BRAIN_ variable Brain does not read gets one warning naming it and the close name it reads, never its value; the names it reads and the harnesses' get none", () =>
    Effect.gen(function*() {
      const known = yield* knownSettings
      const warnings = unreadSettings(
        ["BRAIN_MAX_TURN_SEC", "BRAIN_CACHEBYTES", "BRAIN_SOMETHING_ELSE_ENTIRELY", "BRAIN_MAX_TURN_SECS", "BRAIN_TEST_TOOL_LOG", "BRAIN_BENCH_OPS", "PATH", "BRAIN_MAX_TURN_SEC"],
        known
      )
      expect(warnings).toEqual([
        "BRAIN_CACHEBYTES is not a setting Brain reads (did you mean BRAIN_CACHE_BYTES?)",
        "BRAIN_MAX_TURN_SEC is not a setting Brain reads (did you mean BRAIN_MAX_TURN_SECS?)",
        "BRAIN_SOMETHING_ELSE_ENTIRELY is not a setting Brain reads"
      ])
    }))

  it("a suggestion is a read name within two edits (case aside) or the same once underscores are dropped, the closest ones only", () => {
    const names = ["BRAIN_LISTEN", "BRAIN_SSE_MAX_SUBSCRIBERS", "BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION", "BRAIN_WASM_WORKERS", "BRAIN_WASM_THREADS"]
    expect(closest("BRAIN_LISTN", names)).toEqual(["BRAIN_LISTEN"])
    expect(closest("BRAIN_listen", names)).toEqual(["BRAIN_LISTEN"])
    expect(closest("BRAIN_SSE_MAX_SUBSCRIBER", names)).toEqual(["BRAIN_SSE_MAX_SUBSCRIBERS"])
    expect(closest("BRAIN_SSEMAXSUBSCRIBERSPERSESSION", names)).toEqual(["BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION"])
    expect(closest("BRAIN_WASM_WORKER_THREADS", names)).toEqual([])
    expect(closest("BRAIN_LISTENER_ADDRESS", names)).toEqual([])
  })

  it.effect("a variable a binding names (api_key_env, token_env, headers_env) is read as the bindings load, so it is not warned about", () =>
    Effect.gen(function*() {
      const names = new Set<string>()
      const models = JSON.stringify({ fast: { provider: "openai-chat", model: "m", api_key_env: "BRAIN_OPENAI_KEY" } })
      const environments = JSON.stringify({
        box: { driver: "http", base_url: "http://127.0.0.1:1/env", token_env: "BRAIN_ENV_TOKEN", headers_env: { "x-tenant": "BRAIN_ENV_TENANT" } }
      })
      const env = new Map([["BRAIN_OPENAI_KEY", "sk-test"], ["BRAIN_ENV_TOKEN", "t"], ["BRAIN_ENV_TENANT", "acme"]])
      yield* Effect.withConfigProvider(
        recordingReads(checkBindings({ ...defaults, models, environments }), names),
        ConfigProvider.fromMap(env)
      ).pipe(Effect.orDie)
      expect([...names].sort()).toEqual(["BRAIN_ENV_TENANT", "BRAIN_ENV_TOKEN", "BRAIN_OPENAI_KEY"])
    }))
})
