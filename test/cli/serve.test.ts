/**
 * `brain serve` refuses a start it cannot honour: exit 1 and one line saying what and why, before
 * anything listens (docs/operations.md, "Start-up failures"); `--help` prints the usage.
 */
import { execSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { SERVER_NODE_FLAGS } from "../../src/cli/nodeFlags.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const BIN = path.join(ROOT, "bin/brain.js")
let dataDir = ""

beforeAll(() => {
  // `npm test` builds first; a direct `vitest run` of this file builds only when dist is missing.
  if (!fs.existsSync(path.join(ROOT, "dist/cli/main.js"))) execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-serve-cli-"))
})
afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }))

/**
 * A refused start ends at once; one that is wrongly accepted would serve until the timeout kills it
 * (SIGKILL: a server stuck in a synchronous loop never runs its SIGTERM handler). Run as shipped,
 * with the server's Node flags (without them it warns first: test/cli/nodeFlags.test.ts).
 */
const serve = (args: Array<string>, env: Record<string, string> = {}) => {
  const r = spawnSync(process.execPath, [...SERVER_NODE_FLAGS, BIN, "serve", ...args], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: 15_000,
    killSignal: "SIGKILL",
    env: { ...process.env, BRAIN_LISTEN: "127.0.0.1:0", BRAIN_DATA_DIR: dataDir, ...env }
  })
  const output = r.stdout + r.stderr
  return { code: r.status, output, lines: output.split("\n").filter((l) => l.trim().length > 0) }
}

describe("brain serve refuses a start it cannot honour", () => {
  it("an empty numeric setting, by variable or by flag, exits 1 with one line naming the setting and the value", () => {
    for (const r of [serve([], { BRAIN_MAX_INPUT_BYTES: "" }), serve(["--max-input-bytes", ""]), serve(["--max-request-bytes="])]) {
      expect(r.code, r.output).toBe(1)
      expect(r.lines, r.output).toHaveLength(1)
      expect(r.output).toMatch(/BRAIN_MAX_(INPUT|REQUEST)_BYTES/)
      expect(r.output).toContain(`\\"\\"`)
    }
  })

  it("an unknown flag exits 1 with one line naming it and the nearest known flag", () => {
    const typo = serve(["--max-turn-sec", "1"])
    expect(typo.code, typo.output).toBe(1)
    expect(typo.lines, typo.output).toHaveLength(1)
    expect(typo.output).toContain("--max-turn-sec")
    expect(typo.output).toContain("--max-turn-secs")
    const bogus = serve(["--bogus-flag", "5"])
    expect(bogus.code, bogus.output).toBe(1)
    expect(bogus.output).toContain("--bogus-flag")
  })

  it("BRAIN_MAX_REQUEST_BYTES=0 would refuse every body: it exits 1 saying the setting must be at least 1", () => {
    const r = serve(["--max-request-bytes", "0"])
    expect(r.code, r.output).toBe(1)
    expect(r.output).toContain("BRAIN_MAX_REQUEST_BYTES must be a whole number ≥ 1")
  })

  it("BRAIN_REQUEST_TIMEOUT_MS below BRAIN_HEADERS_TIMEOUT_MS (both counted from the request's first byte) exits 1 with one line naming both, instead of being raised to it", () => {
    const r = serve([], { BRAIN_REQUEST_TIMEOUT_MS: "500", BRAIN_HEADERS_TIMEOUT_MS: "1500" })
    expect(r.code, r.output).toBe(1)
    expect(r.lines, r.output).toHaveLength(1)
    expect(r.output).toContain("BRAIN_REQUEST_TIMEOUT_MS (500)")
    expect(r.output).toContain("BRAIN_HEADERS_TIMEOUT_MS (1500)")
  })

  it("BRAIN_WASM_THREADS at or below BRAIN_WASM_WORKERS, set or unset (the number of cores), exits 1 with one line naming both, instead of the pool running more threads than the setting says", () => {
    const cores = os.availableParallelism()
    for (const [env, says] of [
      [{ BRAIN_WASM_WORKERS: "4", BRAIN_WASM_THREADS: "4" }, "invalid setting: BRAIN_WASM_THREADS (4) must be above BRAIN_WASM_WORKERS (4)"],
      [{ BRAIN_WASM_THREADS: String(cores) }, `invalid setting: BRAIN_WASM_THREADS (${cores}) must be above BRAIN_WASM_WORKERS (unset: the number of cores, ${cores})`]
    ] as const) {
      const r = serve([], env)
      expect(r.code, r.output).toBe(1)
      expect(r.lines, r.output).toHaveLength(1)
      expect(r.output).toContain(says)
    }
  })

  it("a timer setting past Node's timer maximum exits 1 instead of firing after 1 ms", () => {
    const r = serve([], { BRAIN_STAGED_OPENING_MS: "99999999999999999999999" })
    expect(r.code, r.output).toBe(1)
    expect(r.output).toContain("BRAIN_STAGED_OPENING_MS")
    expect(r.output).toContain("2147483647")
    expect(r.output).not.toContain("TimeoutOverflowWarning")
  })

  it("a data directory setting that names a regular file, or a path through one, exits 1 with one line naming the setting and the path, no errno text", () => {
    const file = path.join(dataDir, "a-file")
    fs.writeFileSync(file, "not a directory\n")
    const cases = [
      { r: serve([], { BRAIN_DATA_DIR: file }), setting: "BRAIN_DATA_DIR", says: `${file}: not a directory` },
      { r: serve(["--data-dir", file]), setting: "--data-dir", says: `${file}: not a directory` },
      { r: serve([], { BRAIN_DATA_DIR: path.join(file, "sub") }), setting: "BRAIN_DATA_DIR", says: `a part of its path, ${file}, is not a directory` }
    ]
    for (const { r, setting, says } of cases) {
      expect(r.code, r.output).toBe(1)
      expect(r.lines, r.output).toHaveLength(1)
      expect(r.output).toContain(`invalid setting: ${setting} `)
      expect(r.output).toContain(says)
      expect(r.output).not.toMatch(/EEXIST|ENOTDIR|Error:/)
    }
    expect(fs.readFileSync(file, "utf8")).toBe("not a directory\n")
  })

  it("an empty data directory setting exits 1 naming it, instead of using the working directory", () => {
    for (const r of [serve([], { BRAIN_DATA_DIR: "" }), serve(["--data-dir", " "])]) {
      expect(r.code, r.output).toBe(1)
      expect(r.lines, r.output).toHaveLength(1)
      expect(r.output).toMatch(/invalid setting: (BRAIN_DATA_DIR|--data-dir): an empty value/)
    }
  })

  it("an empty --data-dir= flag is refused naming the flag, an empty BRAIN_DATA_DIR naming the variable", () => {
    for (const [r, named] of [[serve(["--data-dir="]), "--data-dir"], [serve(["--data-dir", ""]), "--data-dir"], [serve([], { BRAIN_DATA_DIR: "" }), "BRAIN_DATA_DIR"]] as const) {
      expect(r.code, r.output).toBe(1)
      expect(r.output).toContain(`invalid setting: ${named}: an empty value names no directory`)
    }
  })

  it("a data directory that cannot be created exits 1 at once, saying where and why (Node's recursive mkdir would loop forever under /proc)", () => {
    const r = serve([], { BRAIN_DATA_DIR: "/proc/brain-no-such-dir/data" })
    expect(r.code, r.output).toBe(1)
    expect(r.lines, r.output).toHaveLength(1)
    expect(r.output).toContain("invalid setting: BRAIN_DATA_DIR /proc/brain-no-such-dir/data: cannot create /proc/brain-no-such-dir")
  })

  it("a directory that holds other files and no format marker exits 1 naming the setting", () => {
    const other = fs.mkdtempSync(path.join(os.tmpdir(), "brain-serve-other-"))
    try {
      fs.writeFileSync(path.join(other, "notes.txt"), "x")
      const r = serve([], { BRAIN_DATA_DIR: other })
      expect(r.code, r.output).toBe(1)
      expect(r.lines, r.output).toHaveLength(1)
      expect(r.output).toContain(`invalid setting: BRAIN_DATA_DIR ${other}: not empty, and has no format marker`)
      expect(fs.readdirSync(other)).toEqual(["notes.txt"])
    } finally {
      fs.rmSync(other, { recursive: true, force: true })
    }
  })

  it("a directory a newer build has opened (format brain-ts/99) exits 1 in one line naming its format and the ones this build reads, and is left as found", () => {
    const newer = fs.mkdtempSync(path.join(os.tmpdir(), "brain-serve-newer-"))
    try {
      fs.writeFileSync(path.join(newer, "format"), "brain-ts/99\n")
      fs.mkdirSync(path.join(newer, "sessions"))
      const r = serve(["--data-dir", newer])
      expect(r.code, r.output).toBe(1)
      expect(r.lines, r.output).toHaveLength(1)
      // The line is the log's JSON where the logger writes JSON: its message, quotes unescaped.
      const said = r.lines[0]!.startsWith("{") ? String(JSON.parse(r.lines[0]!).message) : r.lines[0]!
      expect(said).toContain(`invalid setting: --data-dir ${newer}: holds format "brain-ts/99", which this build does not read (it reads brain-ts/1 and brain-ts/2`)
      expect(fs.readdirSync(newer).sort()).toEqual(["format", "sessions"])
      expect(fs.readFileSync(path.join(newer, "format"), "utf8")).toBe("brain-ts/99\n")
      expect(fs.readdirSync(path.join(newer, "sessions"))).toEqual([])
    } finally {
      fs.rmSync(newer, { recursive: true, force: true })
    }
  })

  it("--help prints the usage and exits 0", () => {
    const r = serve(["--help"])
    expect(r.code, r.output).toBe(0)
    expect(r.output).toContain("brain serve")
    expect(r.output).not.toContain("needs a value")
  })
})
