/**
 * Opening a long journal does not hold the event loop for the whole scan (DESIGN §2's open rules
 * are unchanged: JournalFile.recovery.test.ts). Every record is still checked, but a segment is
 * checked in slices with a turn of the event loop between them, so timers and sockets of other
 * requests run during a long open.
 *
 * The open here goes through a file driver whose reads are synchronous, so that the only place
 * the event loop can get a turn during the open is the scan itself.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { RECENT_RECORDS } from "../../src/domain/Limits.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileError, type FileDriverShape, layerNode, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { openHandle } from "../../src/layers/journal/Handle.js"
import { SCAN_SLICE_BYTES } from "../../src/layers/journal/Scan.js"
import { tempDir } from "../support/journals.js"

const failed = (op: string, p: string) => (e: unknown) =>
  new FileError({ op, path: p, code: (e as NodeJS.ErrnoException).code ?? "EIO", detail: String(e) })

const syncReads: FileDriverShape = {
  ...nodeDriver,
  readdir: (p) => Effect.try({ try: () => fs.readdirSync(p), catch: failed("readdir", p) }),
  readFile: (p) => Effect.try({ try: () => fs.readFileSync(p), catch: failed("readFile", p) })
}

const RECORDS = 2000

describe("opening a long journal", () => {
  it.scoped("gives the event loop turns while it scans a segment, and still reads every record", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const session = yield* mintSessionId
      yield* Effect.scoped(Effect.gen(function*() {
        const journal = yield* JournalFile.make({ dataDir, limits: { commitLogBytes: 0 } }).pipe(Effect.provide(layerNode))
        yield* journal.create(session)
        for (let i = 0; i < RECORDS; i += 50) {
          yield* journal.append(session, Array.from({ length: 50 }, (_, j) => entry("kv_put", { key: `k${i + j}`, value: "v".repeat(500) })))
        }
      }))
      const segments = fs.readdirSync(path.join(dataDir, "sessions", session, "journal")).filter((n) => n.endsWith(".seg"))
      expect(segments.length).toBe(1)
      const bytes = fs.statSync(path.join(dataDir, "sessions", session, "journal", segments[0]!)).size
      expect(bytes).toBeGreaterThan(4 * SCAN_SLICE_BYTES)

      let turns = 0
      let counting = true
      const count = () => {
        turns++
        if (counting) setImmediate(count)
      }
      setImmediate(count)
      // Let the first callback run so the chain is live; count only what runs during the open.
      yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
      turns = 0
      const opened = yield* openHandle(syncReads, dataDir, session, false)
      const during = turns
      counting = false

      expect(during).toBeGreaterThanOrEqual(Math.floor(bytes / SCAN_SLICE_BYTES) - 1)
      expect(opened.lastSequence).toBe(RECORDS)
      expect(opened.torn).toBeUndefined()
      expect(opened.recent.length).toBeGreaterThan(0)
      expect(opened.recent.length).toBeLessThanOrEqual(RECENT_RECORDS)
      expect(opened.recent[opened.recent.length - 1]!.sequence).toBe(RECORDS)
      expect(JSON.parse(opened.recent[opened.recent.length - 1]!.json)).toEqual({ key: `k${RECORDS - 1}`, value: "v".repeat(500) })
    }), 60_000)
})
