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
})
