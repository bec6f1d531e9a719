/**
 * The package as npm ships it (`npm pack`), not this checkout: what an application installs must
 * carry every file its `exports`, its `bin` and the runtime load (the compiled modules, the worker
 * threads' modules, the official loop's WebAssembly), and nothing of the repository's own (sources,
 * tests, scripts, source maps). An application outside the repository then loads `brain/effect`
 * from the unpacked tarball, through the package's own `exports` map, and runs a turn on the
 * official loop the tarball carries. Dependencies are not fetched (no network): the unpacked
 * package sees this checkout's `node_modules`, as an installed one sees its application's.
 */
import { execFile, execSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ROOT } from "../support/server.js"

const run = promisify(execFile)
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8"))

/** Every file path a package.json field names (`exports`, `bin`, `main`), without the leading `./`. */
const named = (): Array<string> => {
  const paths: Array<string> = []
  const walk = (v: unknown): void => {
    if (typeof v === "string") paths.push(path.posix.normalize(v))
    else if (v !== null && typeof v === "object") Object.values(v).forEach(walk)
  }
  walk(pkg.exports)
  walk(pkg.bin)
  walk(pkg.main)
  return paths.filter((p) => p !== "package.json")
}

describe("the packed package", () => {
  let tmp: string
  let files: Array<string>
  let tarball: string
  beforeAll(async () => {
    if (!fs.existsSync(path.join(ROOT, "dist/effect.js")) || !fs.existsSync(path.join(ROOT, "dist/loops/official.wasm")) || !fs.existsSync(path.join(ROOT, "dist/brain.mjs"))) {
      execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
    }
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), "brain-pack-"))
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", tmp], { cwd: ROOT, maxBuffer: 64 * 1024 * 1024 })
    const [packed] = JSON.parse(stdout) as Array<{ filename: string; files: Array<{ path: string }> }>
    files = packed!.files.map((f) => f.path)
    tarball = path.join(tmp, packed!.filename)
  }, 300_000)
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

  it("carries every file its exports, bin and main name, what bin/brain.js loads, the runtime's worker modules and the official loop's WebAssembly", () => {
    const needed = [
      ...named(),
      "dist/brain.mjs",
      "dist/loops/official.wasm",
      "dist/layers/journal/SyncWorker.js",
      "dist/layers/wasm/GuestWorker.js",
      "dist/layers/wasm/InstrumentWorker.js",
      "package.json",
      "README.md"
    ]
    expect(named()).toEqual(expect.arrayContaining(["dist/effect.js", "dist/effect.d.ts", "dist/sdk/index.js", "dist/sdk/index.d.ts", "bin/brain.js"]))
    expect(needed.filter((f) => !files.includes(f))).toEqual([])
    // Every compiled module and every shipped guest of the build, not only the ones named here.
    const built = (dir: string): Array<string> =>
      fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? built(path.posix.join(dir, e.name)) : [path.posix.join(dir, e.name)]
      )
    expect(built("dist").filter((f) => !f.endsWith(".map") && !files.includes(f))).toEqual([])
  })

  it("carries nothing of the repository's own: no sources, tests, scripts, guests' sources or source maps", () => {
    const stray = files.filter((f) =>
      /^(src|test|scripts|guest|loops|examples|node_modules|brain-data|\.scratch)\//.test(f) || f.endsWith(".map") || f.endsWith(".tgz")
    )
    expect(stray).toEqual([])
    expect(files.every((f) => /^(dist|bin|docs)\/|^(package\.json|README\.md)$/.test(f))).toBe(true)
  })

  it("installed from the tarball, brain/effect resolves through the package's own exports and runs a turn on the official loop it carries", async () => {
    const app = path.join(tmp, "app")
    const installed = path.join(app, "node_modules", "brain")
    fs.mkdirSync(installed, { recursive: true })
    await run("tar", ["xzf", tarball, "-C", installed, "--strip-components=1"])
    // The dependencies, as npm would have installed them beside it (effect is a peer: the application's own).
    fs.symlinkSync(path.join(ROOT, "node_modules"), path.join(installed, "node_modules"), "dir")
    fs.symlinkSync(path.join(ROOT, "node_modules", "effect"), path.join(app, "node_modules", "effect"), "dir")
    fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }))
    fs.writeFileSync(
      path.join(app, "main.mjs"),
      `import { Effect, ManagedRuntime } from "effect"
import { layer, Sessions } from "brain/effect"
const where = import.meta.resolve("brain/effect")
const runtime = ManagedRuntime.make(layer({ dataDir: process.argv[2] }))
const outcome = await runtime.runPromise(Effect.gen(function*() {
  const sessions = yield* Sessions
  const { session_id } = yield* sessions.create({ model: { provider: "scripted", replies: [{ text: "42" }] } })
  return yield* sessions.send(session_id, { message: "hi" })
}))
await runtime.dispose()
console.log(JSON.stringify({ where, status: outcome.turn.status, result: outcome.turn.result }))
`
    )
    const { stdout } = await run(process.execPath, [path.join(app, "main.mjs"), path.join(tmp, "data")], { cwd: app })
    const answer = JSON.parse(stdout.trim().split("\n").at(-1)!)
    expect(answer).toEqual({ where: `file://${installed}/dist/effect.js`, status: "ended", result: { text: "42" } })
    // The command too: bin/brain.js loads the bundle the tarball carries.
    const help = await run(process.execPath, [path.join(installed, "bin", "brain.js"), "--help"], { cwd: app })
    expect(help.stdout).toContain("serve")
  }, 120_000)
})
