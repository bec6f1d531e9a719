/**
 * `npm start` under a process manager: SIGTERM (or SIGINT) sent to the `npm start` process itself
 * drains and stops the server, as it does for `brain serve`, leaving nothing running. (npm signals
 * the script's shell; the script runs with `exec`, so the signal reaches Brain's start script,
 * which passes it on to the server and exits with it.)
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, ROOT } from "../support/server.js"

/**
 * Milliseconds `npm start` may take to print the server's listening line: a hang guard, not a
 * timing claim. npm, the start script and the server are three Node processes started one after
 * another: a few seconds alone, many times that on a 2-core machine shared with other suites
 * (load 20-30).
 */
const LISTEN_MS = 120_000
/** Milliseconds one test may take: the start above, a drain and three processes' exits. */
const TEST_MS = 300_000

/** Whether any process of the process group `pgid` is still there (signal 0 only checks). */
const groupAlive = (pgid: number) => {
  try {
    process.kill(-pgid, 0)
    return true
  } catch {
    return false
  }
}

describe("npm start", { timeout: TEST_MS }, () => {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    it(`${signal} to the npm start process drains the server and exits 0, leaving no server behind`, async () => {
      ensureBuilt()
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-npm-start-"))
      const npm = spawn("npm", ["start"], {
        cwd: ROOT,
        env: { ...process.env, BRAIN_LISTEN: "127.0.0.1:0", BRAIN_DATA_DIR: dataDir },
        stdio: ["ignore", "pipe", "pipe"],
        // Its own process group, so that a failed test can kill npm, the start script and the server
        // together (the signals under test are still sent to the npm process alone).
        detached: true
      })
      try {
        let output = ""
        const baseUrl = await new Promise<string>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`npm start did not listen within ${LISTEN_MS} ms:\n${output}`)), LISTEN_MS)
          npm.stdout.setEncoding("utf8")
          npm.stdout.on("data", (chunk: string) => {
            output += chunk
            const m = /brain listening on (http:\/\/[^\s"]+)/.exec(output)
            if (m) {
              clearTimeout(timer)
              resolve(m[1]!)
            }
          })
          npm.stderr.on("data", (chunk) => void (output += chunk))
        })
        expect((await request(baseUrl, "/health/live")).status).toBe(204)
        const exited = new Promise<number | null>((resolve) => npm.on("close", (code) => resolve(code)))
        npm.kill(signal)
        expect(await exited).toBe(0)
        // The server is gone too: nothing answers where it listened, its lock is released, and no
        // process of the group npm started is left.
        await expect(request(baseUrl, "/health/live")).rejects.toThrow()
        expect(fs.existsSync(path.join(dataDir, "lock"))).toBe(false)
        // A process of the group that has just exited may not be reaped yet (its parent, npm, is
        // gone, so init reaps it): wait for that, bounded, rather than read the group at once.
        for (let i = 0; i < 100 && groupAlive(npm.pid!); i++) await new Promise((r) => setTimeout(r, 50))
        expect(groupAlive(npm.pid!)).toBe(false)
      } finally {
        try {
          process.kill(-npm.pid!, "SIGKILL")
        } catch {
          // the group is gone: everything in it has exited
        }
        fs.rmSync(dataDir, { recursive: true, force: true })
      }
    })
  }
})
