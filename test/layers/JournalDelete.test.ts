/**
 * A session delete is crash-safe (FileStore.ts `remove`): a process stopped at any step of it
 * leaves the session either whole or gone at the next start, never a journal missing some of its
 * segments.
 *
 * The crash is a driver that stops doing anything after a given number of file-system changes:
 * that change and every later one fail, as if the process had died just before it. Its `rmrf`
 * removes one entry at a time, as `rm -r` does, so a crash can land between two of them.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, FileError, type FileDriverShape, layerNode as nodeFiles, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { tempDir } from "../support/journals.js"

/** A driver whose file-system changes fail from the `crashAt`-th one on, once armed. */
const crashing = (crashAt: number) => {
  let armed = false
  let steps = 0
  const crashed = () => new FileError({ op: "crash", path: "", code: "EIO", detail: "the process stopped here" })
  const step = <A>(change: () => A): Effect.Effect<A, FileError> =>
    Effect.suspend(() => {
      if (armed && steps++ >= crashAt) return Effect.fail(crashed())
      return Effect.sync(change)
    })
  const rmrf = (p: string): Effect.Effect<void, FileError> =>
    Effect.suspend(() => {
      const stat = fs.lstatSync(p, { throwIfNoEntry: false })
      if (stat === undefined) return Effect.void
      if (!stat.isDirectory()) return step(() => fs.unlinkSync(p))
      return Effect.zipRight(
        Effect.forEach(fs.readdirSync(p).sort(), (name) => rmrf(path.join(p, name)), { discard: true }),
        step(() => fs.rmdirSync(p))
      )
    })
  const guard = <Args extends Array<any>, A>(f: (...args: Args) => Effect.Effect<A, FileError>) => (...args: Args) =>
    Effect.suspend(() => (armed && steps++ >= crashAt ? Effect.fail(crashed()) : f(...args)))
  const driver: FileDriverShape = {
    ...nodeDriver,
    rename: guard(nodeDriver.rename),
    unlink: guard(nodeDriver.unlink),
    syncDir: guard(nodeDriver.syncDir),
    mkdir: guard(nodeDriver.mkdir),
    writeFile: guard(nodeDriver.writeFile),
    writev: guard(nodeDriver.writev),
    rmrf
  }
  return {
    driver,
    arm: () => void (armed = true),
    /** Whether the crash point was reached (false: everything ran before it). */
    get reached() {
      return armed && steps > crashAt
    }
  }
}

const open = (dataDir: string, driver: Layer.Layer<FileDriver>) =>
  JournalFile.make({ dataDir, limits: { rotateBytes: 2048 } }).pipe(Effect.provide(driver))

const withJournal = <A, E>(dataDir: string, driver: Layer.Layer<FileDriver>, use: (journal: JournalShape) => Effect.Effect<A, E>) =>
  Effect.scoped(Effect.flatMap(open(dataDir, driver), use))

describe("session delete", () => {
  it.scopedLive("a process stopped at any step of deleting a session of many segments leaves it whole or gone after restart, never corrupt, and no tombstone", () =>
    Effect.gen(function*() {
      const values = Array.from({ length: 40 }, (_, i) => `${i}:${"v".repeat(200)}`)
      let outcomes = { whole: 0, gone: 0 }
      for (let crashAt = 0; ; crashAt++) {
        const dir = yield* tempDir()
        const s = yield* mintSessionId
        yield* withJournal(dir, nodeFiles, (journal) =>
          Effect.gen(function*() {
            yield* journal.create(s)
            for (const v of values) yield* journal.append(s, [entry("kv_put", { key: "k", value: v })])
          }))
        expect(fs.readdirSync(path.join(dir, "sessions", s, "journal")).filter((n) => n.endsWith(".seg")).length).toBeGreaterThan(3)

        const crash = crashing(crashAt)
        yield* withJournal(dir, Layer.succeed(FileDriver, crash.driver), (journal) =>
          Effect.gen(function*() {
            yield* journal.lastSequence(s)
            crash.arm()
            yield* Effect.either(journal.remove(s))
          }))

        // The restart.
        const after = yield* withJournal(dir, nodeFiles, (journal) =>
          Effect.gen(function*() {
            const listed = (yield* journal.list).includes(s)
            const read = yield* Effect.either(journal.read(s, { after: 0, limit: 1000 }))
            return { listed, read }
          }))
        expect(fs.readdirSync(path.join(dir, "sessions"))).toEqual(after.listed ? [s] : [])
        expect(fs.existsSync(path.join(dir, "deleted")) ? fs.readdirSync(path.join(dir, "deleted")) : []).toEqual([])
        if (after.listed) {
          expect(Either.isRight(after.read) && after.read.right.map((r) => r.payload.value)).toEqual(values)
          outcomes.whole++
        } else {
          expect(Either.isLeft(after.read) && after.read.left._tag).toBe("SessionNotFound")
          outcomes.gone++
        }
        if (!crash.reached) break
      }
      // Crashes both before and after the delete's commit point were tried.
      expect(outcomes.whole).toBeGreaterThan(0)
      expect(outcomes.gone).toBeGreaterThan(5)
    }), 60_000)

  it.scopedLive("a deleted session stays deleted after a restart, and its id cannot be read again", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* withJournal(dir, nodeFiles, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          yield* journal.append(s, [entry("kv_put", { key: "k", value: 1 })])
          yield* journal.remove(s)
          expect(yield* journal.exists(s)).toBe(false)
        }))
      expect(fs.readdirSync(path.join(dir, "sessions"))).toEqual([])
      expect(fs.readdirSync(path.join(dir, "deleted"))).toEqual([])
      const again = yield* withJournal(dir, nodeFiles, (journal) => Effect.flip(journal.lastSequence(s)))
      expect(again._tag).toBe("SessionNotFound")
    }))
})
