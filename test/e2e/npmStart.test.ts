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

describe("npm start", () => {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    it(`${signal} to the npm start process drains the server and exits 0, leaving no server behind`, async () => {
      ensureBuilt()
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-npm-start-"))
      const npm = spawn("npm", ["start"], {
        cwd: ROOT,
        env: { ...process.env, BRAIN_LISTEN: "127.0.0.1:0", BRAIN_DATA_DIR: dataDir },
        stdio: ["ignore", "pipe", "pipe"]
      })
      try {
        let output = ""
        const baseUrl = await new Promise<string>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`npm start did not listen in time:\n${output}`)), 30_000)
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
        // The server is gone too: nothing answers where it listened, and its lock is released.
        await expect(request(baseUrl, "/health/live")).rejects.toThrow()
        expect(fs.existsSync(path.join(dataDir, "lock"))).toBe(false)
      } finally {
        if (npm.exitCode === null) npm.kill("SIGKILL")
        fs.rmSync(dataDir, { recursive: true, force: true })
      }
    }, 60_000)
  }
})
