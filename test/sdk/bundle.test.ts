/**
 * The built SDK (`brain/sdk` through the package's `exports` map, dist/sdk/index.js) imported in
 * a plain ESM context without Node built-ins: a child Node process whose module loader refuses
 * every `node:*` specifier and bare built-in name (test/fixtures/sdk-no-node-hooks.mjs), with no
 * `Buffer` global while its modules load, imports it and runs a session with it against a real server
 * (and one whose host tool runs in that process). A control run
 * shows that the guard does refuse a module that imports a built-in.
 */
import { execFile, execSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ROOT, type ServerProcess, startServer } from "../support/server.js"

const run = promisify(execFile)
const PROBE = path.join(ROOT, "test/fixtures/sdk-probe.mjs")

describe("the built SDK", () => {
  let server: ServerProcess
  beforeAll(async () => {
    if (!fs.existsSync(path.join(ROOT, "dist/sdk/index.js")) || !fs.existsSync(path.join(ROOT, "dist/main.js"))) {
      execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
    }
    server = await startServer()
  }, 180_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("brain/sdk loads where every Node built-in is refused, and runs a session there, one with a host tool too", async () => {
    const { stdout } = await run(process.execPath, [PROBE, "brain/sdk", server.baseUrl], { cwd: ROOT })
    const report = JSON.parse(stdout.trim().split("\n").at(-1)!)
    expect(report.exports).toEqual(expect.arrayContaining(["Brain", "BrainClient", "BrainError", "BrainClosed"]))
    expect(report.turn).toBe("ended")
    expect(report.kinds).toEqual(expect.arrayContaining(["session_creation_ended", "turn_started", "turn_ended"]))
    expect(report.tool).toEqual([{ doubled: 42 }])
  })

  it("the guard is not vacuous: a built module that imports node:crypto fails to load under it", async () => {
    const failed = await run(process.execPath, [PROBE, "../../dist/http/Idempotent.js"], { cwd: ROOT }).then(() => undefined, (e) => e)
    expect(failed, "the guard let a Node built-in through").toBeDefined()
    expect(String(failed.stderr)).toContain("a Node built-in was imported: node:crypto")
  })

  it("package.json exports brain/sdk with its type declarations", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8"))
    expect(pkg.exports["./sdk"]).toEqual({ types: "./dist/sdk/index.d.ts", default: "./dist/sdk/index.js" })
    expect(fs.existsSync(path.join(ROOT, "dist/sdk/index.d.ts"))).toBe(true)
  })
})
