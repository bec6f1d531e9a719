/**
 * The server runs with the Node flags it is measured with (SERVER_NODE_FLAGS, docs/operations.md
 * "Running"): `npm start` (scripts/start.js) passes them, bin/brain.js's first line gives them to
 * `./bin/brain.js` and `npx brain`. `node bin/brain.js serve` cannot get them without another
 * process (Node has no exec), which a supervisor's or a test's kill -9 of the pid it holds would
 * not reach: it runs as started, the pid its spawner holds is the server's, and it says at start
 * which flags it lacks and how to start it with them, never silently.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { missingNodeFlags, SERVER_NODE_FLAGS } from "../../src/cli/nodeFlags.js"
import { BIN, ensureBuilt, ROOT, ServerProcess } from "../support/server.js"

const WITHOUT = "runs without the Node flag"

const warned = (lines: ReadonlyArray<string>) => lines.some((l) => l.includes(WITHOUT))

/** The pid in a data directory's lock: the process that serves it. */
const lockOwner = (dataDir: string) => Number(fs.readFileSync(path.join(dataDir, "lock"), "utf8").trim().split(/\s+/)[0])

/** A process's command line (Linux). */
const cmdline = (pid: number) => fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((a) => a !== "")

describe("the server's Node flags", () => {
  const servers: Array<ServerProcess> = []
  beforeAll(() => ensureBuilt(), 120_000)
  afterAll(async () => {
    for (const s of servers) await s.dispose()
  })

  it("missingNodeFlags: a flag counts by its name, whatever its value, on the command line or in NODE_OPTIONS", () => {
    expect(SERVER_NODE_FLAGS).toEqual(["--max-semi-space-size=32"])
    expect(missingNodeFlags([], undefined)).toEqual(["--max-semi-space-size=32"])
    expect(missingNodeFlags(["--max-semi-space-size=32"], undefined)).toEqual([])
    expect(missingNodeFlags(["--max_semi_space_size=64"], undefined)).toEqual([])
    expect(missingNodeFlags([], "--enable-source-maps --max-semi-space-size=16")).toEqual([])
    expect(missingNodeFlags(["--max-old-space-size=256"], "--enable-source-maps")).toEqual(["--max-semi-space-size=32"])
  })

  it("bin/brain.js's first line gives every flag", () => {
    const shebang = fs.readFileSync(BIN, "utf8").split("\n")[0]!
    expect(shebang.startsWith("#!/usr/bin/env -S node ")).toBe(true)
    expect(missingNodeFlags(shebang.split(" ").slice(3), undefined)).toEqual([])
  })

  it("`node bin/brain.js serve` without them is the server itself (the pid its spawner holds serves, and a kill -9 of it stops the server) and warns at start naming each flag and how to give it", async () => {
    const s = new ServerProcess({ entry: "product", nodeArgs: [] })
    servers.push(s)
    await s.start()
    expect(lockOwner(s.dataDir)).toBe(s.pid)
    const line = s.lines.find((l) => l.includes(WITHOUT))
    expect(line, s.output).toBeDefined()
    for (const flag of SERVER_NODE_FLAGS) expect(line).toContain(flag)
    expect(line).toContain("npm start")
    const killed = await s.kill()
    expect(killed.signal).toBe("SIGKILL")
  })

  it("with them, on the command line or in NODE_OPTIONS, or started as ./bin/brain.js (its first line) or as the tests spawn a server by default, it does not warn", async () => {
    for (const options of [{}, { nodeArgs: [...SERVER_NODE_FLAGS] }, { nodeArgs: [], env: { NODE_OPTIONS: SERVER_NODE_FLAGS.join(" ") } }]) {
      const s = new ServerProcess({ entry: "product", ...options })
      servers.push(s)
      await s.start()
      expect(warned(s.lines), s.output).toBe(false)
      await s.stop()
    }
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-flags-"))
    try {
      const child = spawn(BIN, ["serve"], { cwd: ROOT, env: { ...process.env, BRAIN_LISTEN: "127.0.0.1:0", BRAIN_DATA_DIR: dataDir }, stdio: ["ignore", "pipe", "pipe"] })
      const out = await untilListening(child)
      expect(warned(out.split("\n")), out).toBe(false)
      expect(cmdline(child.pid!)).toEqual(expect.arrayContaining([...SERVER_NODE_FLAGS]))
      child.kill("SIGTERM")
      await new Promise((resolve) => child.on("close", resolve))
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  })

  it("`npm start` (scripts/start.js) runs the server with them, and it does not warn", async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-flags-"))
    try {
      const child = spawn(process.execPath, [path.join(ROOT, "scripts/start.js"), "serve"], {
        cwd: ROOT,
        env: { ...process.env, BRAIN_LISTEN: "127.0.0.1:0", BRAIN_DATA_DIR: dataDir },
        stdio: ["ignore", "pipe", "pipe"]
      })
      const out = await untilListening(child)
      expect(warned(out.split("\n")), out).toBe(false)
      const server = lockOwner(dataDir)
      expect(cmdline(server)).toEqual(expect.arrayContaining([...SERVER_NODE_FLAGS]))
      child.kill("SIGTERM")
      await new Promise((resolve) => child.on("close", resolve))
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  }, 180_000)
})

/** The output of a spawned server up to its listening line (what it says at start comes before it). */
const untilListening = (child: ReturnType<typeof spawn>) =>
  new Promise<string>((resolve, reject) => {
    let out = ""
    const deadline = setTimeout(() => reject(new Error(`no listening line:\n${out}`)), 150_000)
    const take = (chunk: Buffer) => {
      out += chunk.toString("utf8")
      if (/brain listening on/.test(out)) {
        clearTimeout(deadline)
        resolve(out)
      }
    }
    child.stdout!.on("data", take)
    child.stderr!.on("data", take)
    child.on("close", (code) => reject(new Error(`exited ${code} before listening:\n${out}`)))
  })
