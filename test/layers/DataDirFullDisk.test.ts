/**
 * Taking the data directory's lock on a full file system (the operator audit: a server killed
 * while its disk was full could not start again, "cannot take its lock: … (ENOSPC)"). Taking the
 * lock writes a few bytes (the owner line, to a private file linked to `lock`), so a start on a
 * disk with no space left is refused: the refusal says so and what to do, and the attempt leaves
 * nothing behind (its private file used to stay, the write failing before the step that removes
 * it). Once space is freed the next start takes the lock, a stale one included.
 *
 * The full disk is simulated: `node:fs` passes every call through but a write to a lock attempt's
 * private file, which fails ENOSPC while `full.on` is set (a tmpfs needs root to mount).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { vi } from "vitest"
import { Effect, Either } from "effect"
import { acquireLock } from "../../src/layers/journal/DataDir.js"
import { tempDir } from "../support/journals.js"

const full = vi.hoisted(() => ({ on: false, fds: new Map<number, string>() }))

vi.mock("node:fs", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs")>()
  const watched = {
    ...actual,
    openSync: (file: fs.PathLike, ...rest: Array<unknown>) => {
      const fd = (actual.openSync as (...a: Array<unknown>) => number)(file, ...rest)
      full.fds.set(fd, String(file))
      return fd
    },
    closeSync: (fd: number) => {
      full.fds.delete(fd)
      return actual.closeSync(fd)
    },
    writeSync: (fd: number, ...rest: Array<unknown>) => {
      if (full.on && /[/\\]lock\.[^/\\]*\.new$/.test(full.fds.get(fd) ?? "")) {
        throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC", errno: -28, syscall: "write" })
      }
      return (actual.writeSync as (...a: Array<unknown>) => number)(fd, ...rest)
    }
  }
  return { ...watched, default: watched }
})

/** A pid no process has (above the kernel's pid_max): a lock naming it is stale. */
const DEAD_PID = 4_194_304 + 7

describe("the data directory's lock on a full disk", () => {
  for (const stale of [false, true]) {
    it.effect(`${stale ? "a stale lock (a server killed while the disk was full)" : "no lock"}: the start is refused naming ENOSPC and the remedy, leaves nothing behind, and takes the lock once space is freed`, () =>
      Effect.scoped(Effect.gen(function*() {
        const dir = yield* tempDir()
        const lockPath = path.join(dir, "lock")
        if (stale) fs.writeFileSync(lockPath, `${DEAD_PID} 12345\n`)
        const before = fs.readdirSync(dir).sort()
        full.on = true
        const refused = yield* Effect.either(Effect.scoped(acquireLock(dir, 0)))
        full.on = false
        expect(Either.isLeft(refused)).toBe(true)
        const reason = Either.isLeft(refused) && refused.left._tag === "DataDirError" ? refused.left.reason : ""
        expect(reason).toContain("no space left on the device (ENOSPC)")
        expect(reason).toContain("free space")
        // Nothing left behind, and a stale lock is as it was.
        expect(fs.readdirSync(dir).sort()).toEqual(before)
        if (stale) expect(fs.readFileSync(lockPath, "utf8")).toBe(`${DEAD_PID} 12345\n`)
        // Space freed: the lock is taken (the stale one taken over), and given back at the scope's end.
        const mine = yield* Effect.scoped(Effect.tap(acquireLock(dir, 0), () => Effect.sync(() => {
          expect(fs.readFileSync(lockPath, "utf8")).toMatch(new RegExp(`^${process.pid} `))
        })))
        expect(mine).toMatch(new RegExp(`^${process.pid} `))
        expect(fs.readdirSync(dir)).toEqual([])
      })))
  }
})
