/**
 * Reading committed frames back from the files: a frame larger than a read chunk is read whole
 * wherever it falls, including when the chunk before it ends inside its header (its length not
 * yet known), and is never mistaken for corruption.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
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
