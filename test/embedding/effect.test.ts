/**
 * `brain/effect`, the package's entry for Effect applications (docs/embedding.md), used as an
 * application outside the repository's sources would: a child Node process imports it through
 * the package's `exports` map (test/fixtures/effect-probe.mjs), composes the services into its own
 * `ManagedRuntime` with a tool of its own, runs a turn and disposes the runtime; a second process
 * opens the same data directory and continues the session. And a TypeScript application
 * (test/fixtures/effect-app) type-checks against its declarations as a consumer's compiler reads
 * them: strict, lib checks on, with and without the DOM library; the same calls mistyped do not.
 */
import { execFile, execSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ROOT } from "../support/server.js"

const run = promisify(execFile)
const TSC = path.join(ROOT, "node_modules/typescript/bin/tsc")
const APP = path.join(ROOT, "test/fixtures/effect-app")
/** `tsc -p <project>`: its exit code and what it printed. */
const typecheck = (project: string) =>
  run(process.execPath, [TSC, "-p", path.join(APP, project)], { cwd: ROOT }).then(
    ({ stdout }) => ({ code: 0, out: stdout }),
    (e: { code: number; stdout: string }) => ({ code: e.code, out: e.stdout })
  )
const PROBE = path.join(ROOT, "test/fixtures/effect-probe.mjs")
const lines = (stdout: string) => stdout.trim().split("\n").map((l) => JSON.parse(l))

describe("brain/effect", () => {
  let dataDir: string
  beforeAll(() => {
    if (!fs.existsSync(path.join(ROOT, "dist/effect.js")) || !fs.existsSync(path.join(ROOT, "dist/loops/official.wasm"))) {
      execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
    }
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-effect-"))
  }, 180_000)
  afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }))

  it("package.json exports brain/effect with its type declarations", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8"))
    expect(pkg.exports["./effect"]).toEqual({ types: "./dist/effect.d.ts", default: "./dist/effect.js" })
    expect(fs.existsSync(path.join(ROOT, "dist/effect.d.ts"))).toBe(true)
  })

  it("an application type-checks against brain/effect's declarations, with and without the DOM library; mistyped calls are refused", async () => {
    for (const project of ["tsconfig.json", "tsconfig.dom.json"]) {
      const { code, out } = await typecheck(project)
      expect(out, project).toBe("")
      expect(code, project).toBe(0)
    }
    const wrong = await typecheck("tsconfig.wrong.json")
    expect(wrong.code).not.toBe(0)
    expect(wrong.out).toContain("wrong.ts(9,")
    expect(wrong.out).toContain("wrong.ts(12,")
    expect(wrong.out.match(/error TS/g)).toHaveLength(2)
    // Three whole type checks of Effect's types: about 20 s each on a quiet 2-core machine, past 40 s each on a loaded one.
  }, 300_000)

  it("an application's runtime runs a turn with its own tool through the official loop, decodes its Events with the exported schema, meets typed errors, holds the data directory until disposed (a second runtime is refused with a DataDirError caught by tag), and a later runtime continues the session", async () => {
    const first = lines((await run(process.execPath, [PROBE, dataDir, "first"], { cwd: ROOT })).stdout)
    const [turn, second, disposed] = first
    expect(turn.status).toBe("ended")
    expect(turn.result).toEqual({ text: "42 it is" })
    expect(turn.roles).toEqual(["user", "assistant", "tool", "assistant"])
    expect(JSON.parse(turn.tool)).toEqual({ doubled: 42 })
    // Each effect recorded before and after it happened, in the session's journal.
    expect(turn.kinds).toEqual([
      "session_creation_started",
      "session_creation_ended",
      "turn_started",
      "activation_started",
      "model_call_started",
      "model_call_ended",
      "tool_call_started",
      "tool_call_ended",
      "model_call_started",
      "model_call_ended",
      "activation_ended",
      "turn_ended"
    ])
    expect(turn.missing).toEqual({ tag: "NotFound", code: "not_found" })
    // The values it exports are schemas at run time; `Event`, the public Event's, decodes the Events the runtime answers, unchanged, and refuses a misshapen one.
    expect(turn.notSchemas).toEqual([])
    expect(turn.decoded).toEqual(turn.events)
    expect(turn.misshapen).toBe(true)
    expect(second.second).toEqual({
      tag: "DataDirError",
      isClass: true,
      dir: path.resolve(dataDir),
      reason: expect.stringContaining("held by another runtime of this process")
    })
    expect(disposed).toEqual({ disposed: true })

    const again = lines((await run(process.execPath, [PROBE, dataDir, "again", turn.session], { cwd: ROOT })).stdout)
    expect(again[0]).toEqual({ status: "idle", before: 4, turn: "ended", after: 8 })
    expect(again[1]).toEqual({ disposed: true })
  })
})
