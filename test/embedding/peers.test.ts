/**
 * Effect's values are recognised by identity (an Effect, a Tag, a Schema made by one copy of
 * `effect` is "Not a valid effect" to another copy of another version), so the packages whose
 * types the public API names must be the application's own: peer dependencies, pinned exactly as
 * this repository builds and tests with them (devDependencies), not private copies npm would nest
 * under Brain when the application's version differs (docs/embedding.md, "Effect's version").
 */
import * as fs from "node:fs"
import { builtinModules } from "node:module"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ROOT } from "../support/server.js"

const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8"))

/** The packages a declaration file and the local ones it imports name (`effect`, `@effect/platform`, …), builtins left out. */
const packagesNamedFrom = (entries: Array<string>): Set<string> => {
  const seen = new Set<string>()
  const packages = new Set<string>()
  const visit = (file: string) => {
    if (seen.has(file)) return
    seen.add(file)
    const text = fs.readFileSync(file, "utf8")
    for (const [, spec] of text.matchAll(/(?:from |import\()"([^"]+)"/g)) {
      if (spec!.startsWith(".")) visit(path.resolve(path.dirname(file), spec!.replace(/\.js$/, ".d.ts")))
      else {
        const name = spec!.startsWith("@") ? spec!.split("/").slice(0, 2).join("/") : spec!.split("/")[0]!
        if (!name.startsWith("node:") && !builtinModules.includes(name)) packages.add(name)
      }
    }
  }
  entries.forEach((e) => visit(path.join(ROOT, e)))
  return packages
}

describe("the package's peers", () => {
  it("effect and @effect/platform are peer dependencies, pinned exactly, at the versions the repository builds and tests with, and not also private dependencies", () => {
    for (const name of ["effect", "@effect/platform"]) {
      expect(pkg.peerDependencies?.[name], name).toMatch(/^\d+\.\d+\.\d+$/)
      expect(pkg.devDependencies?.[name], name).toBe(pkg.peerDependencies[name])
      expect(pkg.dependencies?.[name], name).toBeUndefined()
      const installed = JSON.parse(fs.readFileSync(path.join(ROOT, "node_modules", name, "package.json"), "utf8"))
      expect(installed.version, name).toBe(pkg.peerDependencies[name])
    }
  })

  it("every package the public declarations (brain/effect, brain/sdk) name is a peer dependency", () => {
    const typesOf = Object.values(pkg.exports as Record<string, unknown>)
      .flatMap((e) => (e !== null && typeof e === "object" && "types" in e ? [String((e as { types: string }).types)] : []))
    expect(typesOf).toEqual(expect.arrayContaining(["./dist/effect.d.ts", "./dist/sdk/index.d.ts"]))
    if (!typesOf.every((t) => fs.existsSync(path.join(ROOT, t)))) throw new Error("build first: npm run build")
    const named = [...packagesNamedFrom(typesOf)].sort()
    expect(named).toContain("effect")
    expect(named.filter((n) => !(n in (pkg.peerDependencies ?? {})))).toEqual([])
  })
})
