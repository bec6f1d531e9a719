/**
 * A real `kill -9` in the middle of taking a data directory's lock: a child process
 * (test/fixtures/locker.mjs, running the compiled DataDir.ts) takes and releases the lock without
 * end, and is killed at a random moment, until a kill has left an attempt's private file
 * (`lock.*.new`) behind. The next start in this process takes the lock at once (the killed
 * child's is stale) and removes that file, and the directory holds no lock file once it stops.
 */
import { execSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { acquireLock } from "../../src/layers/journal/DataDir.js"
import { tempDir } from "../support/journals.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const FIXTURE = path.join(ROOT, "test/fixtures/locker.mjs")
/** Kills tried before giving up on catching an attempt in the middle. */
const MAX_KILLS = 40
/** Milliseconds after the child is ready before SIGKILL, drawn uniformly. */
const KILL_AFTER_MS = { min: 5, max: 60 }

/** `npm test` builds first; a direct `vitest run` of this file builds only when dist is missing. */
const ensureBuilt = () => {
  if (!fs.existsSync(path.join(ROOT, "dist/layers/journal/DataDir.js"))) {
    execSync("npm run build", { cwd: ROOT, stdio: "inherit" })
  }
}

/** Runs one locker and SIGKILLs it `killAfterMs` after it is ready; answers the signal it died of. */
const runAndKill = (dataDir: string, killAfterMs: number) =>
  Effect.async<NodeJS.Signals | null, Error>((resume) => {
    const child = spawn(process.execPath, [FIXTURE, dataDir], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] })
    let stderr = ""
    const deadline = setTimeout(() => child.kill("SIGKILL"), 20_000)
    child.stdout.setEncoding("utf8")
    child.stdout.once("data", () => setTimeout(() => child.kill("SIGKILL"), killAfterMs))
    child.stderr.setEncoding("utf8")
    child.stderr.on("data", (chunk: string) => void (stderr += chunk))
    child.on("error", (err) => resume(Effect.fail(err)))
    child.on("close", (_code, signal) => {
      clearTimeout(deadline)
      resume(signal === "SIGKILL" ? Effect.succeed(signal) : Effect.fail(new Error(`the locker exited by itself: ${stderr}`)))
    })
    return Effect.sync(() => {
      clearTimeout(deadline)
      child.kill("SIGKILL")
    })
  })

const debrisIn = (dir: string) => fs.readdirSync(dir).filter((n) => /^lock\..*\.(new|stale)$/.test(n))

describe("kill -9 while a data directory's lock is being taken", () => {
  beforeAll(ensureBuilt, 120_000)

  it.scopedLive("leaves an attempt's private file, which the next start removes as it takes the stale lock at once", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      let left: Array<string> = []
      for (let kill = 0; kill < MAX_KILLS && left.length === 0; kill++) {
        const after = KILL_AFTER_MS.min + Math.floor(Math.random() * (KILL_AFTER_MS.max - KILL_AFTER_MS.min))
        expect(yield* runAndKill(dir, after)).toBe("SIGKILL")
        left = debrisIn(dir)
      }
      expect(left.length, `no kill in ${MAX_KILLS} landed inside a lock attempt`).toBeGreaterThan(0)
      // With no wait for a live owner (0 ms): taken at once, or refused.
      yield* Effect.scoped(acquireLock(dir, 0))
      expect(fs.readdirSync(dir).filter((n) => n.startsWith("lock"))).toEqual([])
    }))
})
