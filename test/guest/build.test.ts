/**
 * `node scripts/build-guests.js <entry.ts> <out.wasm>`, a loop of one's own (docs/agentloops.md,
 * "Build"), run as a user runs it: a module admission would refuse fails the build (exit 1, the
 * reason on stderr) and is never written, so nothing at the output path can be mistaken for it;
 * an admissible one is written whole, with its data segments merged.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { admissionProblem, ROOT } from "../../scripts/build-guests.js"

const SCRIPT = path.join(ROOT, "scripts", "build-guests.js")
/** The script's exit code and what it printed. */
const build = (entry: string, out: string) =>
  promisify(execFile)(process.execPath, [SCRIPT, entry, out], { cwd: ROOT }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr })
  )

describe("scripts/build-guests.js <entry.ts> <out.wasm>", () => {
  let root: string
  /** A directory of the test's own, empty. */
  const emptyDir = () => fs.mkdtempSync(path.join(root, "out-"))
  beforeAll(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), "brain-build-guest-"))
  })
  afterAll(() => fs.rmSync(root, { recursive: true, force: true }))

  it("a loop Brain would refuse (it reads Date.now) fails the build with the reason, and no module is left at the output path", async () => {
    const dir = emptyDir()
    const out = path.join(dir, "clock.wasm")
    const { code, stderr } = await build("guest/test/clock.ts", out)
    expect(code).toBe(1)
    expect(stderr).toContain("Brain would refuse this module: it imports env.Date.now")
    expect(fs.readdirSync(dir)).toEqual([])
  }, 120_000)

  it("a refused build leaves a module already at the output path as it was", async () => {
    const dir = emptyDir()
    const out = path.join(dir, "kept.wasm")
    const before = Uint8Array.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0])
    fs.writeFileSync(out, before)
    const { code } = await build("guest/test/clock.ts", out)
    expect(code).toBe(1)
    expect(new Uint8Array(fs.readFileSync(out))).toEqual(before)
    expect(fs.readdirSync(dir)).toEqual(["kept.wasm"])
  }, 120_000)

  it("an admissible loop is written, whole and admissible, and nothing else beside it", async () => {
    const dir = emptyDir()
    const out = path.join(dir, "echo-tool.wasm")
    const { code, stdout } = await build("loops/examples/echo-tool.ts", out)
    expect(code).toBe(0)
    expect(stdout).toContain(`(${fs.statSync(out).size} bytes)`)
    expect(admissionProblem(fs.readFileSync(out))).toBeUndefined()
    expect(fs.readdirSync(dir)).toEqual(["echo-tool.wasm"])
  }, 120_000)
})
