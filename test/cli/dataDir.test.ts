/**
 * The operator commands on a mistaken data directory, as child processes: each refuses in one line
 * saying what is wrong, with a documented exit code (docs/operations.md, "Operator commands"),
 * never a raw errno or a stack trace, and writes nothing there. An empty directory — what a server
 * takes as a new data directory — is clean: nothing to verify, nothing to repair.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import { tempDir } from "../support/journals.js"
import { BIN, ensureBuilt, ROOT } from "../support/server.js"

const NOT_FOUND = 66
const USAGE = 64

/**
 * Milliseconds one command may run before it is killed (SIGKILL: a command stuck in a synchronous
 * loop would not end on SIGTERM): a hang guard, not a timing claim. A command takes under a second
 * alone, and many times that on a 2-core machine shared with other suites (load 20-30).
 */
const COMMAND_MS = 60_000
/**
 * Milliseconds one test may take: up to 16 commands one after another, each a fresh Node process
 * (about 10 s alone, well past vitest's default 60 s at load 20-30).
 */
const TEST_MS = 600_000

/**
 * Runs the CLI as a child process and collects its output. Not spawnSync: that blocks this worker's
 * event loop for the whole command, so under load vitest's own calls to the worker time out
 * ("Timeout calling onTaskUpdate") and fail the run though every test passed.
 */
const run = (cwd: string, args: ReadonlyArray<string>) =>
  new Promise<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => void (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => void (stderr += chunk))
    const timer = setTimeout(() => child.kill("SIGKILL"), COMMAND_MS)
    child.on("error", (err) => {
      clearTimeout(timer)
      reject(err)
    })
    child.on("close", (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })

/** A command run from the repository: its exit code (null when killed at COMMAND_MS), output and non-empty lines. */
const brain = (...args: Array<string>) =>
  Effect.promise(() => run(ROOT, args)).pipe(Effect.map((r) => {
    const output = r.stdout + r.stderr
    return { ...r, output, lines: output.split("\n").filter((l) => l.trim().length > 0) }
  }))

/** What the operator should never see for a mistaken path. */
const RAW = /ENOENT|EEXIST|ENOTDIR|Error:|FiberFailure|\n\s+at /

/** Every command that names a data directory and a session, and the one that names a data directory only. */
const withSession = (session: string) => [
  ["journal", "verify"],
  ["journal", "dump"],
  ["journal", "remove"]
].map((c) => (dir: string) => [...c, dir, session])

const snapshot = (dir: string) => fs.readdirSync(dir, { recursive: true }).map(String).sort()

describe("the operator commands refuse a mistaken data directory in one line, with a documented exit code", { timeout: TEST_MS }, () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("a data directory that does not exist: `no such data directory`, exit 66, for every command, and nothing is created", () =>
    Effect.gen(function*() {
      const parent = yield* tempDir()
      const missing = path.join(parent, "missing")
      const session = yield* mintSessionId
      const commands = [
        ...withSession(session),
        (dir: string) => ["journal", "verify", dir],
        (dir: string) => ["idempotency", "repair", dir],
        (dir: string) => ["hosts", "list", dir],
        (dir: string) => ["hosts", "remove", dir, "host_01hzzzzzzzzzzzzzzzzzzzzzzz"]
      ]
      for (const command of commands) {
        const args = command(missing)
        const r = yield* brain(...args)
        expect(r.code, `${args.join(" ")}: ${r.output}`).toBe(NOT_FOUND)
        expect(r.lines, r.output).toEqual([`${missing}: no such data directory`])
        expect(r.output).not.toContain("stop the server")
        expect(fs.existsSync(missing), args.join(" ")).toBe(false)
      }
    }))

  it.scopedLive("a path that is a regular file, or runs through one: `not a directory` naming the file, exit 66, for every command and the demo", () =>
    Effect.gen(function*() {
      const parent = yield* tempDir()
      const file = path.join(parent, "a-file")
      fs.writeFileSync(file, "x")
      const session = yield* mintSessionId
      const commands = [
        ...withSession(session),
        (dir: string) => ["journal", "verify", dir],
        (dir: string) => ["idempotency", "repair", dir],
        (dir: string) => ["hosts", "list", dir],
        (dir: string) => ["hosts", "remove", dir, "host_01hzzzzzzzzzzzzzzzzzzzzzzz"],
        (dir: string) => ["demo", dir]
      ]
      for (const command of commands) {
        for (const [dir, says] of [[file, "not a directory"], [path.join(file, "sub"), `a part of its path, ${file}, is not a directory`]] as const) {
          const args = command(dir)
          const r = yield* brain(...args)
          expect(r.code, `${args.join(" ")}: ${r.output}`).toBe(NOT_FOUND)
          expect(r.lines, r.output).toEqual([`${dir}: ${says}`])
          expect(r.output).not.toMatch(RAW)
        }
      }
      expect(fs.readFileSync(file, "utf8")).toBe("x")
      expect(fs.readdirSync(parent)).toEqual(["a-file"])
    }))

  it.scopedLive("an empty directory is a new data directory: verify exits 0 with nothing to verify, repair exits 0 with nothing to repair, hosts list exits 0 with no registration, and none writes", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const verified = yield* brain("journal", "verify", dir)
      expect(verified.code, verified.output).toBe(0)
      expect(verified.lines).toEqual([`${dir}: an empty data directory (a server takes it as a new one); nothing to verify`])
      const repaired = yield* brain("idempotency", "repair", dir)
      expect(repaired.code, repaired.output).toBe(0)
      expect(repaired.lines).toEqual([`${dir}: an empty data directory (a server takes it as a new one); nothing to repair`])
      const listed = yield* brain("hosts", "list", dir)
      expect(listed.code, listed.output).toBe(0)
      expect(listed.lines).toEqual(["0 host registration(s) in hosts/registrations.jsonl (a server keeps at most 4096)"])
      expect(fs.readdirSync(dir)).toEqual([])
    }))

  it.scopedLive("a session that is not there, in an empty or a Brain data directory: `no such session`, exit 66, for verify, dump and remove, and nothing is written", () =>
    Effect.gen(function*() {
      const empty = yield* tempDir()
      const brainDir = yield* tempDir()
      const kept = yield* mintSessionId
      yield* Effect.scoped(Effect.gen(function*() {
        const journal = yield* JournalFile.make({ dataDir: brainDir }).pipe(Effect.provide(nodeFiles))
        yield* journal.create(kept)
        yield* journal.append(kept, [entry("kv_put", { key: "k", value: 1 })])
      }))
      const before = snapshot(brainDir)
      const absent = yield* mintSessionId
      for (const dir of [empty, brainDir]) {
        for (const command of withSession(absent)) {
          const args = command(dir)
          const r = yield* brain(...args)
          expect(r.code, `${args.join(" ")}: ${r.output}`).toBe(NOT_FOUND)
          expect(r.lines, r.output).toEqual([`${absent}: no such session in ${dir}`])
        }
      }
      expect(fs.readdirSync(empty)).toEqual([])
      expect(snapshot(brainDir)).toEqual(before)
      // The session that is there is untouched and still verifies.
      const kept1 = yield* brain("journal", "verify", brainDir, kept)
      expect(kept1.code, kept1.output).toBe(0)
      expect(kept1.stdout).toContain(`${kept}: ok, 1 records`)
    }))

  it.scopedLive("a session argument that is not a session id is a usage error: exit 64, for verify, dump and remove", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      for (const command of withSession("not-a-session")) {
        const args = command(dir)
        const r = yield* brain(...args)
        expect(r.code, `${args.join(" ")}: ${r.output}`).toBe(USAGE)
        expect(r.lines, r.output).toHaveLength(1)
        expect(r.output).toContain("not-a-session: not a session id")
      }
    }))

  it.scopedLive("asked for, the usage goes to stdout with exit 0; a flag where a path goes is a usage error (64) and creates nothing", () =>
    Effect.gen(function*() {
      const cwd = yield* tempDir()
      for (const args of [["--help"], ["-h"], ["help"], ["demo", "--help"], ["journal", "verify", "--help"]]) {
        const r = yield* Effect.promise(() => run(cwd, args))
        expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(0)
        expect(r.stdout).toContain("brain journal verify <data-dir>")
        expect(r.stdout).toContain("brain demo [data-dir]")
      }
      for (const args of [[], ["demo", "-x"], ["journal", "verify", "--data-dir"], ["idempotency", "repair", "--force"]]) {
        const r = yield* Effect.promise(() => run(cwd, args))
        expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(USAGE)
        expect(r.stderr).toContain("usage:")
      }
      expect(fs.readdirSync(cwd)).toEqual([])
    }))

  it("the demo on a path it cannot create, or a directory that holds other files, exits 66 in one line at once (Node's recursive mkdir would loop forever under /proc)", async () => {
    const proc = await Effect.runPromise(brain("demo", "/proc/brain-no-such-dir/data"))
    expect(proc.code, proc.output).toBe(NOT_FOUND)
    expect(proc.lines, proc.output).toHaveLength(1)
    expect(proc.output).toContain("cannot create /proc/brain-no-such-dir")
    expect(proc.output).not.toMatch(/FiberFailure|\n\s+at /)

    const other = fs.mkdtempSync(path.join(os.tmpdir(), "brain-demo-other-"))
    try {
      fs.writeFileSync(path.join(other, "notes.txt"), "x")
      const r = await Effect.runPromise(brain("demo", other))
      expect(r.code, r.output).toBe(NOT_FOUND)
      expect(r.lines, r.output).toEqual([`${other}: not empty, and has no format marker; not a brain-ts/2 data directory`])
      expect(fs.readdirSync(other)).toEqual(["notes.txt"])
    } finally {
      fs.rmSync(other, { recursive: true, force: true })
    }
  })
})
