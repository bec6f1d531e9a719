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
import { Effect } from "effect"
import { admissionProblem, ROOT } from "../../scripts/build-guests.js"
import { admitModule } from "../../src/layers/wasm/Module.js"
import { defaults } from "../../src/services/ServerConfig.js"
import { guest, returning, wat } from "../support/wat.js"

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
    expect(stderr).toContain("Brain would refuse this module: the module imports env.Date.now")
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
    expect(await admissionProblem(fs.readFileSync(out))).toBeUndefined()
    expect(fs.readdirSync(dir)).toEqual(["echo-tool.wasm"])
  }, 120_000)

  it("a loop whose brain_transcript_tail_length is mutable fails the build with admission's reason, and no module is written", async () => {
    const dir = emptyDir()
    const out = path.join(dir, "mutable.wasm")
    const { code, stderr } = await build("guest/test/mutable-tail-length.ts", out)
    expect(code).toBe(1)
    expect(stderr).toContain("Brain would refuse this module: brain_transcript_tail_length must be an immutable i32 global")
    expect(fs.readdirSync(dir)).toEqual([])
  }, 120_000)
})

describe("the build script's check of a module", () => {
  /** What admission itself answers for `bytes` with the server's default limits: its reason, or undefined. */
  const admission = (bytes: Uint8Array) =>
    Effect.runPromise(
      admitModule(bytes, { maxModuleBytes: defaults.maxWasmModuleBytes, maxMemoryBytes: defaults.maxWasmMemoryBytes }).pipe(
        Effect.match({ onFailure: (e) => e.reason, onSuccess: () => undefined })
      )
    )
  const RUN = `(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`
  const cases: Record<string, Promise<Uint8Array>> = {
    "a mutable brain_transcript_tail_length": wat(guest(RUN, { tail: true, tailLength: "(mut i32) (i32.const 3)" })),
    "brain_transcript_tail_length without brain_transcript_tail": wat(guest(RUN, { tailLength: "i32 (i32.const 3)" })),
    "brain_configuration_unread as a function": wat(guest(`${RUN} (func (export "brain_configuration_unread"))`)),
    "a brain_events_kind_ naming no kind": wat(guest(`${RUN} (global (export "brain_events_kind_") i32 (i32.const 1))`)),
    "a name in the host's namespace": wat(guest(`${RUN} (global (export "brain$written") i32 (i32.const 1))`)),
    "a table without a maximum": wat(guest(`${RUN} (table 1 funcref)`)),
    "brain_alloc of the wrong type": wat(guest(`${RUN}`, { alloc: false }).replace('(func (export "brain_run")', '(func (export "brain_alloc") (param i64) (result i32) (i32.const 0)) (func (export "brain_run")'))
  }

  it("refuses each module admission refuses, with admission's own reason", async () => {
    for (const [name, bytes] of Object.entries(cases)) {
      const reason = await admission(await bytes)
      expect(reason, `${name}: admission refuses it`).toBeDefined()
      expect(await admissionProblem(await bytes), name).toBe(reason)
    }
  })

  it("passes a module admission admits", async () => {
    const bytes = await wat(returning('{"ok":1}'))
    expect(await admission(bytes)).toBeUndefined()
    expect(await admissionProblem(bytes)).toBeUndefined()
  })
})
