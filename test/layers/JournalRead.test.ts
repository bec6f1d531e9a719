/**
 * Reading committed frames back from the files: a frame larger than a read chunk is read whole
 * wherever it falls, including when the chunk before it ends inside its header (its length not
 * yet known), and is never mistaken for corruption.
 *
 * A read from any sequence of a journal of large records reads about what it returns: the read
 * index remembers a position at least every READ_INDEX_BYTES (not only every READ_INDEX_STRIDE
 * records, which for 3 MB records meant checksumming up to 190 MB to serve one), and a read that
 * is full by bytes does not read the frame after.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, layerNode as nodeFiles, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { READ_INDEX_BYTES } from "../../src/domain/Limits.js"
import { framesOf } from "../support/frames.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { tempDir } from "../support/journals.js"

/** Bytes the file journal reads at a time (Handle.ts READ_CHUNK). */
const READ_CHUNK = 256 * 1024
/** Frame bytes around a kv_put's JSON payload: header 12, sequence and time 16, kind field 2, "kv_put". */
const FRAME_OVERHEAD = 12 + 16 + 2 + "kv_put".length
const kvOfFrameSize = (key: string, frameBytes: number) => {
  const json = (value: string) => JSON.stringify({ key, value })
  return entry("kv_put", { key, value: "x".repeat(frameBytes - FRAME_OVERHEAD - json("").length) })
}

describe("reading frames back from the journal files", () => {
  for (const cut of [1, 2, 3, 4, 11]) {
    it.scoped(`a frame larger than a read chunk whose header the chunk before cuts after ${cut} byte(s) is read whole, not reported corrupt`, () =>
      Effect.gen(function*() {
        const dataDir = yield* tempDir()
        const session = yield* mintSessionId
        const big = "y".repeat(3 * READ_CHUNK)
        yield* Effect.scoped(Effect.gen(function*() {
          const journal = yield* JournalFile.make({ dataDir }).pipe(Effect.provide(nodeFiles))
          yield* journal.create(session)
          yield* journal.append(session, [kvOfFrameSize("a", READ_CHUNK - cut)])
          yield* journal.append(session, [entry("kv_put", { key: "b", value: big })])
          yield* journal.append(session, [entry("kv_put", { key: "c", value: 1 })])
        }))
        const dir = path.join(dataDir, "sessions", session, "journal")
        const frames = framesOf(fs.readFileSync(path.join(dir, fs.readdirSync(dir)[0]!)))
        expect(frames.map((f) => f.start)).toEqual([0, READ_CHUNK - cut, frames[2]!.start])

        // A fresh open keeps only the newest record in memory: the first two are read from the file.
        const records = yield* Effect.scoped(Effect.flatMap(
          JournalFile.make({ dataDir }).pipe(Effect.provide(nodeFiles)),
          (journal) => journal.read(session, { after: 0, limit: 10 })
        ))
        expect(records.map((r) => [r.sequence, r.payload.key])).toEqual([[1, "a"], [2, "b"], [3, "c"]])
        expect(records[1]!.payload.value).toBe(big)
      }))
  }
})

describe("reading from the middle of a journal of large records", () => {
  it.scoped("a read after any sequence reads from the file little more than the records it returns, and nothing past a full read", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const session = yield* mintSessionId
      const RECORD = 3 * READ_INDEX_BYTES
      const RECORDS = 40 // fewer than READ_INDEX_STRIDE: only the first would be remembered by count
      yield* Effect.scoped(Effect.gen(function*() {
        const journal = yield* JournalFile.make({ dataDir }).pipe(Effect.provide(nodeFiles))
        yield* journal.create(session)
        for (let i = 0; i < RECORDS; i++) yield* journal.append(session, [kvOfFrameSize(`k${i}`, RECORD)])
      }))
      let bytesRead = 0
      const counting = Layer.succeed(FileDriver, {
        ...nodeDriver,
        read: (fd, buffer, position) => Effect.tap(nodeDriver.read(fd, buffer, position), (n) => Effect.sync(() => (bytesRead += n)))
      })
      yield* Effect.scoped(Effect.gen(function*() {
        const journal = yield* JournalFile.make({ dataDir }).pipe(Effect.provide(counting))
        for (const after of [1, 17, 30, 38]) {
          bytesRead = 0
          const records = yield* journal.read(session, { after, limit: 10, maxBytes: 1 })
          expect(records.map((r) => r.payload.key)).toEqual([`k${after}`])
          expect(bytesRead, `after ${after}`).toBeLessThanOrEqual(RECORD + READ_INDEX_BYTES)
        }
      }))
    }))

  it.scoped("what a read of one record goes through is told without reading (readBytes): never less than the record's frame, never more than READ_INDEX_BYTES and one frame more, both before and after the journal is opened again", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const session = yield* mintSessionId
      const sizes = [100, 300_000, 200, 5_000, 400_000, 64, 64, 90_000, 300, 600_000, 128]
      const check = (journal: JournalShape) =>
        Effect.gen(function*() {
          const dir = path.join(dataDir, "sessions", session, "journal")
          const frames = fs.readdirSync(dir).filter((n) => n.endsWith(".seg")).sort().flatMap((n) => framesOf(fs.readFileSync(path.join(dir, n))))
          expect(frames.map((f) => f.sequence)).toEqual(sizes.map((_, i) => i + 1))
          for (const f of frames) {
            const bytes = yield* journal.readBytes!(session, f.sequence - 1)
            expect(bytes, `record ${f.sequence}`).toBeGreaterThanOrEqual(f.end - f.start)
            // The frames from the read index's entry before it to the next entry: under READ_INDEX_BYTES, and the one that passes it.
            expect(bytes, `record ${f.sequence}`).toBeLessThanOrEqual(f.end - f.start + READ_INDEX_BYTES + Math.max(...frames.map((g) => g.end - g.start)))
          }
        })
      const opened = JournalFile.make({ dataDir, limits: { rotateBytes: 1024 * 1024 } }).pipe(Effect.provide(nodeFiles))
      yield* Effect.scoped(Effect.gen(function*() {
        const journal = yield* opened
        yield* journal.create(session)
        for (const [i, size] of sizes.entries()) yield* journal.append(session, [kvOfFrameSize(`k${i}`, size)])
        yield* check(journal)
      }))
      yield* Effect.scoped(Effect.flatMap(opened, check))
    }))
})
