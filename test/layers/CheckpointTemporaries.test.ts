/**
 * A checkpoint is written as a temporary file, fdatasync, rename (CheckpointStore.ts): a kill -9
 * between the write and the rename leaves the temporary file in the session's directory, a whole
 * state's bytes that nothing reads. The session's next save removes every such file but its own
 * and those other saves of this process are writing at that moment; nothing at startup.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import { FileDriver, type FileDriverShape, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { tempDir } from "../support/journals.js"

const storeOver = (dataDir: string, driver: FileDriverShape = nodeDriver) =>
  CheckpointStore.makeFile(dataDir).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))

describe("a checkpoint's temporary files", () => {
  it.scopedLive("those a crash left are removed by the session's next save, with nothing else of its directory; the checkpoint saved is whole", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const session = yield* mintSessionId
      const dir = path.join(dataDir, "sessions", session)
      fs.mkdirSync(path.join(dir, "journal"), { recursive: true })
      const journalFile = path.join(dir, "journal", "00000000000000000001.seg")
      fs.writeFileSync(journalFile, "")
      // Two crashed saves, and files that are not a checkpoint's temporary ones.
      fs.writeFileSync(path.join(dir, "checkpoint.12345.tmp"), "a half-written state")
      fs.writeFileSync(path.join(dir, "checkpoint.678.tmp"), "")
      fs.writeFileSync(path.join(dir, "checkpoint.tmp.notes"), "kept")
      fs.writeFileSync(path.join(dir, "other.12345.tmp"), "kept")

      const store = yield* storeOver(dataDir)
      yield* store.save(session, CheckpointStore.textPieces("state one"))
      expect(fs.readdirSync(dir).sort()).toEqual(["checkpoint", "checkpoint.tmp.notes", "journal", "other.12345.tmp"])
      expect(Option.getOrUndefined(yield* store.load(session))?.toString()).toBe("state one")
      expect(fs.existsSync(journalFile)).toBe(true)
    }))

  it.scopedLive("a save never removes the temporary file another save of this process is writing", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const session = yield* mintSessionId
      const dir = path.join(dataDir, "sessions", session)
      fs.mkdirSync(dir, { recursive: true })
      // The first save is held after its write, before its rename.
      const written = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      let held = false
      const driver: FileDriverShape = {
        ...nodeDriver,
        rename: (from, to) =>
          held
            ? nodeDriver.rename(from, to)
            : Effect.zipRight(
              Effect.sync(() => void (held = true)),
              Effect.zipRight(Effect.zipRight(Deferred.succeed(written, undefined), Deferred.await(gate)), nodeDriver.rename(from, to))
            )
      }
      const store = yield* storeOver(dataDir, driver)
      const first = yield* Effect.fork(store.save(session, CheckpointStore.textPieces("first")))
      yield* Deferred.await(written)
      const pending = fs.readdirSync(dir).filter((n) => n.endsWith(".tmp"))
      expect(pending.length).toBe(1)
      yield* store.save(session, CheckpointStore.textPieces("second"))
      expect(fs.readdirSync(dir).filter((n) => n.endsWith(".tmp"))).toEqual(pending)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      expect(fs.readdirSync(dir)).toEqual(["checkpoint"])
    }))
})
