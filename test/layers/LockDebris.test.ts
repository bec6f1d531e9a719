/**
 * What a lock attempt cut off by a crash leaves in the data directory (src/layers/journal/DataDir.ts,
 * `removeLockDebris`): its private files, `lock.*.new` and `lock.*.stale`. The next start removes
 * those whose maker is gone, and never a live process's (an attempt under way); a dead maker's
 * `.stale` file that holds a live owner's lock is put back first. The files are laid out by hand
 * here; test/e2e/lockDebris.test.ts makes them with a real `kill -9`.
 */
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import { tempDir } from "../support/journals.js"

const open = (dataDir: string, lockWaitMs = 0) => Effect.scoped(Effect.asVoid(JournalFile.make({ dataDir, lockWaitMs }).pipe(Effect.provide(nodeFiles))))

const startTimeOf = (pid: number) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]!
}

/** A pid no process has any more: a child's that has exited. */
const deadPid = () => spawnSync(process.execPath, ["-e", ""]).pid!

/** A live process other than this one, and its kernel start time; killed when the scope ends. */
const liveProcess = Effect.acquireRelease(
  Effect.sync(() => {
    const child = spawn("sleep", ["30"], { stdio: "ignore" })
    return { child, pid: child.pid!, start: startTimeOf(child.pid!) }
  }),
  ({ child }) => Effect.sync(() => child.kill("SIGKILL"))
)

const lockFiles = (dir: string) => fs.readdirSync(dir).filter((n) => n.startsWith("lock")).sort()

describe("a data directory's lock debris", () => {
  it.scopedLive("a start removes the lock attempts' files whose maker is gone (by pid, or by a pid reused by another process), and leaves a live maker's", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const dead = deadPid()
      const live = yield* liveProcess
      const ms = Date.now()
      const gone = [
        `lock.${dead}.12345.${ms}.0.new`,
        `lock.${dead}.-.${ms}.1.stale`,
        // As earlier versions named them: no start time.
        `lock.${dead}.${ms}.2.new`,
        // The pid lives, but another process has it now.
        `lock.${live.pid}.1.${ms}.3.new`
      ]
      const kept = [`lock.${live.pid}.${live.start}.${ms}.4.new`, `lock.${live.pid}.${ms}.5.stale`, "lock.notes"]
      for (const name of gone) fs.writeFileSync(path.join(dir, name), `${dead} 12345\n`)
      for (const name of kept) fs.writeFileSync(path.join(dir, name), `${live.pid} ${live.start}\n`)
      yield* open(dir)
      expect(lockFiles(dir)).toEqual([...kept].sort())
    }))

  it.scopedLive("a dead maker's .stale file holding a live owner's lock (it died between moving the lock aside and giving it back) is put back: the start waits for that owner and is refused", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const owner = yield* liveProcess
      const line = `${owner.pid} ${owner.start}\n`
      const aside = `lock.${deadPid()}.12345.${Date.now()}.0.stale`
      fs.writeFileSync(path.join(dir, aside), line)
      const refused = yield* Effect.either(open(dir, 200))
      expect(Either.isLeft(refused) && refused.left.message).toContain("another live process")
      expect(fs.readFileSync(path.join(dir, "lock"), "utf8")).toBe(line)
      expect(lockFiles(dir)).toEqual(["lock"])
    }))
})
