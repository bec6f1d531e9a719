/**
 * The import graph of `src/` keeps the layout STYLE.md draws: domain is pure, services are
 * contracts, layers never reach up into http, only the composition root sits above both, the
 * HttpApi contract and the SDK run outside Node, and no cycle runs through the modules. Package barrels that
 * load far more than they are asked for are kept out: `@effect/platform`'s index pulls in the
 * Scalar and Swagger UI bundles (about 20 MB of JavaScript strings held on the heap for the life of
 * the process), so the server imports each platform module by its own path.
 */
import * as fs from "node:fs"
import { builtinModules } from "node:module"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ROOT } from "../support/server.js"

const SRC = path.join(ROOT, "src")

const walk = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : []
  )

interface Import {
  readonly specifier: string
  /** `import type …` / `export type … from`: erased at build, never loaded. */
  readonly typeOnly: boolean
}

const importsOf = (file: string): Array<Import> => {
  const text = fs.readFileSync(file, "utf8")
  const found: Array<Import> = []
  for (const m of text.matchAll(/^\s*(?:import|export)\s+(type\s+)?(?:[^"'`;]*?\s+from\s+)?["']([^"']+)["']/gm)) {
    found.push({ specifier: m[2]!, typeOnly: m[1] !== undefined })
  }
  for (const m of text.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g)) found.push({ specifier: m[1]!, typeOnly: false })
  return found
}

/** The source file a relative specifier names (`./X.js` → `X.ts`), or undefined for a package. */
const resolve = (from: string, specifier: string): string | undefined => {
  if (!specifier.startsWith(".")) return undefined
  const target = path.resolve(path.dirname(from), specifier).replace(/\.js$/, ".ts")
  return fs.existsSync(target) ? target : fs.existsSync(path.join(target, "index.ts")) ? path.join(target, "index.ts") : target
}

const files = walk(SRC)
const rel = (f: string) => path.relative(SRC, f)
const areaOf = (f: string) => rel(f).split(path.sep)[0]!.replace(/\.ts$/, "")
const graph = new Map(files.map((f) => [f, importsOf(f)]))

/** Every `from → specifier` edge breaking `rule`, as readable lines. */
const offending = (rule: (from: string, imp: Import, target: string | undefined) => boolean) =>
  [...graph].flatMap(([from, imports]) =>
    imports.filter((imp) => rule(from, imp, resolve(from, imp.specifier))).map((imp) => `${rel(from)} → ${imp.specifier}`)
  )

/**
 * Every module loaded at run time from `entries` (type-only imports are erased), and each import
 * among them of a Node-only module: `node:*`, a bare built-in name (`fs`) or `@effect/platform-node`.
 */
const nodeOnlyFrom = (entries: ReadonlyArray<string>) => {
  const seen = new Set<string>()
  const nodeOnly: Array<string> = []
  const visit = (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    for (const imp of graph.get(file) ?? []) {
      if (imp.typeOnly) continue
      if (imp.specifier.startsWith("node:") || builtinModules.includes(imp.specifier) || imp.specifier.startsWith("@effect/platform-node")) {
        nodeOnly.push(`${rel(file)} → ${imp.specifier}`)
      }
      const target = resolve(file, imp.specifier)
      if (target !== undefined) visit(target)
    }
  }
  entries.forEach(visit)
  return { seen, nodeOnly }
}

describe("the import graph of src/", () => {
  it("finds the source files and their imports (the rules below are not checked against nothing)", () => {
    expect(files.length).toBeGreaterThan(50)
    expect(graph.get(path.join(SRC, "main.ts"))!.length).toBeGreaterThan(10)
  })

  it("domain/ imports only effect and other domain modules", () => {
    expect(offending((from, imp, target) =>
      areaOf(from) === "domain" &&
      (target !== undefined ? areaOf(target) !== "domain" : !(imp.specifier === "effect" || imp.specifier.startsWith("effect/")))
    )).toEqual([])
  })

  it("services/ are contracts: they import effect, domain and other services, no layer, no transport, no Node", () => {
    expect(offending((from, imp, target) =>
      areaOf(from) === "services" && !imp.typeOnly &&
      (target !== undefined ? !["domain", "services"].includes(areaOf(target)) : !(imp.specifier === "effect" || imp.specifier.startsWith("effect/")))
    )).toEqual([])
  })

  it("layers/ never import http/, and only main.ts (the composition root) imports both", () => {
    expect(offending((from, _imp, target) => areaOf(from) === "layers" && target !== undefined && areaOf(target) === "http")).toEqual([])
    const above = files.filter((f) => {
      const areas = new Set(graph.get(f)!.map((imp) => resolve(f, imp.specifier)).filter((t) => t !== undefined).map(areaOf))
      return areas.has("layers") && areas.has("http")
    }).map(rel)
    expect(above).toEqual(["main.ts"])
  })

  it("Sessions and the services it runs on are composed in one place (Composition.ts): the server, the tests, their fixtures and the benches all build from it", () => {
    const everywhere = (dir: string): Array<string> =>
      fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.name === "node_modules"
          ? []
          : e.isDirectory()
          ? everywhere(path.join(dir, e.name))
          : /\.(ts|mjs|js)$/.test(e.name)
          ? [path.join(dir, e.name)]
          : []
      )
    const sources = ["src", "test", "scripts"].flatMap((d) => everywhere(path.join(ROOT, d)))
    const composing = sources.filter((f) => importsOf(f).some((imp) => /(^|\/)layers\/SessionsJournal\.js$/.test(imp.specifier)))
    expect(composing.map((f) => path.relative(ROOT, f))).toEqual([path.join("src", "Composition.ts")])
    const users = sources.filter((f) => importsOf(f).some((imp) => /(^|\/)Composition\.js$/.test(imp.specifier))).map((f) => path.relative(ROOT, f))
    expect(users).toEqual(expect.arrayContaining([path.join("src", "main.ts"), path.join("test", "support", "runtime.ts")]))
  })

  it("a layer module is named <Service><Variant> after what backs it (JournalFile, ModelsScripted), never with a Live suffix", () => {
    const layers = fs.readdirSync(path.join(SRC, "layers")).filter((f) => f.endsWith(".ts"))
    expect(layers.length).toBeGreaterThan(10)
    expect(layers.filter((f) => /Live\.ts$/.test(f))).toEqual([])
  })

  it("http/Api.ts, the contract a client shares, loads no Node-only module", () => {
    const { seen, nodeOnly } = nodeOnlyFrom([path.join(SRC, "http", "Api.ts")])
    expect(seen.size).toBeGreaterThan(3)
    expect(nodeOnly).toEqual([])
  })

  it("sdk/, the client for browsers, Deno and Bun, loads no Node-only module from any of its files", () => {
    const entries = files.filter((f) => areaOf(f) === "sdk")
    expect(entries.map(rel)).toContain(path.join("sdk", "index.ts"))
    const { seen, nodeOnly } = nodeOnlyFrom(entries)
    expect(seen.size).toBeGreaterThan(entries.length)
    expect(nodeOnly).toEqual([])
  })

  it("sdk/ reaches the server only through its contract: no layer, service, CLI or composition root", () => {
    expect(offending((from, imp, target) =>
      areaOf(from) === "sdk" && !imp.typeOnly && target !== undefined && !["sdk", "http", "domain"].includes(areaOf(target))
    )).toEqual([])
  })

  it("no value import of the @effect/platform or @effect/platform-node index: each module by its own path", () => {
    expect(offending((_from, imp) => !imp.typeOnly && /^@effect\/platform(-node)?$/.test(imp.specifier))).toEqual([])
  })

  it("has no cycle among the modules loaded at run time", () => {
    const state = new Map<string, "open" | "done">()
    const cycles: Array<string> = []
    const stack: Array<string> = []
    const visit = (file: string) => {
      const s = state.get(file)
      if (s === "done") return
      if (s === "open") {
        cycles.push([...stack.slice(stack.indexOf(file)), file].map(rel).join(" → "))
        return
      }
      state.set(file, "open")
      stack.push(file)
      for (const imp of graph.get(file) ?? []) {
        const target = imp.typeOnly ? undefined : resolve(file, imp.specifier)
        if (target !== undefined && graph.has(target)) visit(target)
      }
      stack.pop()
      state.set(file, "done")
    }
    for (const f of files) visit(f)
    expect(cycles).toEqual([])
  })
})
