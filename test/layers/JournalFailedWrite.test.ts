/**
 * A write the file journal reports failed leaves nothing a later open, read or start takes as
 * committed, with the commit log and without it (src/layers/journal/FileStore.ts, "A failed
 * write"): what landed of it in the session's segment is cut back to the committed end and synced,
 * and a failed batch of the commit log is erased from it, before the failure is reported. When
 * that cannot be done, the failure's outcome is unknown: the session's durable end is refused
 * until the session is reset, and what is stored then stands.
 *
 * The writes fail the way a disk fails them: part of a write lands and the next part finds the
 * disk full (ENOSPC), or the whole of an `O_DSYNC` write lands and its sync fails (EIO).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, FileError, type FileDriverShape, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { instrumentedDriver, type Landing, logsNow, restoreLogs, tempDir } from "../support/journals.js"

const kv = (key: string) => entry("kv_put", { key, value: { pad: "x".repeat(200) } })

const keysOf = (journal: JournalShape, session: SessionId) =>
  Effect.map(journal.read(session, { after: 0, limit: 1000 }), (rs) => rs.filter((r) => r.kind === "kv_put").map((r) => [r.sequence, r.payload.key]))

const modes = [
  { name: "without the commit log", commitLogBytes: 0 },
  { name: "with the commit log", commitLogBytes: 1 << 20 }
] as const

/** Where each mode's failing write goes, and how it fails. */
const failures: ReadonlyArray<{ readonly name: string; readonly commitLogBytes: number; readonly target: "segment" | "log"; readonly landing: Landing }> = [
  ...modes.flatMap((m) => [
    { name: `${m.name}: a segment write that landed whole and failed (EIO)`, commitLogBytes: m.commitLogBytes, target: "segment" as const, landing: { landed: (n: number) => n, code: "EIO" as const } },
    { name: `${m.name}: a segment write cut by a full disk one byte short (ENOSPC)`, commitLogBytes: m.commitLogBytes, target: "segment" as const, landing: { landed: (n: number) => n - 1, code: "ENOSPC" as const } }
  ]),
  { name: "with the commit log: a log write cut by a full disk half way (ENOSPC)", commitLogBytes: 1 << 20, target: "log", landing: { landed: (n) => n >> 1, code: "ENOSPC" } },
  { name: "with the commit log: a log write that landed whole and failed (EIO)", commitLogBytes: 1 << 20, target: "log", landing: { landed: (n) => n, code: "EIO" } }
]

describe("a journal write reported failed leaves nothing that reads as committed", () => {
  for (const f of failures) {
    it.scopedLive(`${f.name}: neither a reopen nor a start after a crash reads it, and the next append takes its sequence`, () =>
      Effect.gen(function*() {
        const dir = yield* tempDir()
        const inst = instrumentedDriver()
        const s = yield* mintSessionId
        const open = JournalFile.make({ dataDir: dir, lockWaitMs: 0, limits: { commitLogBytes: f.commitLogBytes } }).pipe(
          Effect.provide(Layer.succeed(FileDriver, inst.driver))
        )
        const part = f.target === "log" ? "commit-log" : s
        const { failed, reopened, logs } = yield* Effect.scoped(Effect.gen(function*() {
          const journal = yield* open
          yield* journal.create(s)
          yield* journal.append(s, [kv("k1")])
          inst.landsThenFails(part, f.landing)
          // Two appends in one round (two atomic groups): the first lands whole even when the write is cut short.
          const failed = yield* Effect.all([journal.append(s, [kv("a1")]), journal.append(s, [kv("a2"), kv("a3")])].map(Effect.flip), { concurrency: "unbounded" })
          inst.diskFreed(part)
          yield* journal.reset(s)
          const reopened = { last: yield* journal.lastSequence(s), keys: yield* keysOf(journal, s) }
          yield* journal.append(s, [kv("k2")])
          return { failed, reopened, logs: logsNow(dir) }
        }))
        expect(failed.map((e) => e._tag)).toEqual(["JournalWriteFailed", "JournalWriteFailed"])
        expect(reopened).toEqual({ last: 1, keys: [[1, "k1"]] })
        // A crash now: the commit log as it was (a clean stop emptied it), written again at the start.
        restoreLogs(dir, logs)
        const after = yield* Effect.scoped(Effect.flatMap(open, (journal) => keysOf(journal, s)))
        expect(after).toEqual([[1, "k1"], [2, "k2"]])
      }))
  }

  it.scopedLive("with the commit log: a log write refused by a full disk before any of it landed erases nothing (writing there could fail too), and the journal goes on once the disk has room", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const inst = instrumentedDriver()
      const s = yield* mintSessionId
      const journal = yield* JournalFile.make({ dataDir: dir, lockWaitMs: 0, limits: { commitLogBytes: 1 << 20 } }).pipe(
        Effect.provide(Layer.succeed(FileDriver, inst.driver))
      )
      yield* journal.create(s)
      yield* journal.append(s, [kv("k1")])
      // Every write of the log fails while the disk is full, an erase's too.
      inst.diskFull("commit-log")
      const failed = yield* Effect.flip(journal.append(s, [kv("a1")]))
      expect(failed._tag).toBe("JournalWriteFailed")
      expect(yield* journal.lastSequence(s)).toBe(1)
      inst.diskFreed("commit-log")
      yield* journal.reset(s)
      expect(yield* journal.append(s, [kv("k2")])).toEqual([2])
      expect(yield* keysOf(journal, s)).toEqual([[1, "k1"], [2, "k2"]])
    }))

  for (const m of modes) {
    it.scopedLive(`${m.name}: a failed write whose landed bytes cannot be cut back has an unknown outcome: its durable end is refused until the session is reset, and what is stored then stands`, () =>
      Effect.gen(function*() {
        const dir = yield* tempDir()
        const inst = instrumentedDriver()
        const s = yield* mintSessionId
        const journal = yield* JournalFile.make({ dataDir: dir, lockWaitMs: 0, limits: { commitLogBytes: m.commitLogBytes } }).pipe(
          Effect.provide(Layer.succeed(FileDriver, inst.driver))
        )
        yield* journal.create(s)
        yield* journal.append(s, [kv("k1")])
        const part = m.commitLogBytes === 0 ? s : "commit-log"
        inst.landsThenFails(part, { landed: (n) => n, code: "EIO" })
        inst.failTruncates(s)
        const failed = yield* Effect.flip(journal.append(s, [kv("a1")]))
        expect(failed._tag).toBe("JournalWriteFailed")
        const durable = yield* Effect.flip(journal.lastSequence(s))
        expect(durable._tag).toBe("JournalUnavailable")
        expect(durable.message).toContain("not known")
        inst.diskFreed(part)
        inst.diskFreed(s)
        yield* journal.reset(s)
        // The write landed and could not be taken back: it stands (the failure said it might).
        expect(yield* journal.lastSequence(s)).toBe(2)
        expect(yield* keysOf(journal, s)).toEqual([[1, "k1"], [2, "a1"]])
      }))
  }
})

describe("the sticky failure of a round whose batch could not be erased says what failed", () => {
  it.scopedLive("when every segment write of a round fails and its landed batch cannot be erased, the journal's refusal says the round's segment writes failed, not the commit log's write", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const paths = new Map<number, string>()
      let failErase = false
      // A log write of zeros only (an erase's header) fails while `failErase`; the batch, which holds data, lands.
      const base: FileDriverShape = {
        ...nodeDriver,
        open: (p, flags) => Effect.tap(nodeDriver.open(p, flags), (fd) => Effect.sync(() => paths.set(fd, p))),
        writev: (fd, buffers, position) =>
          failErase && (paths.get(fd) ?? "").includes("commit-log") && buffers.every((b) => b.every((byte) => byte === 0))
            ? Effect.fail(new FileError({ op: "write", path: `fd ${fd}`, code: "EIO", detail: "EIO: injected at the erase" }))
            : nodeDriver.writev(fd, buffers, position)
      }
      const inst = instrumentedDriver(base)
      const s = yield* mintSessionId
      const journal = yield* JournalFile.make({ dataDir: dir, lockWaitMs: 0, limits: { commitLogBytes: 1 << 20 } }).pipe(
        Effect.provide(Layer.succeed(FileDriver, inst.driver))
      )
      yield* journal.create(s)
      yield* journal.append(s, [kv("k1")])
      inst.diskFull(s)
      failErase = true
      const failed = yield* Effect.flip(journal.append(s, [kv("a1")]))
      expect(failed._tag).toBe("JournalWriteFailed")
      failErase = false
      inst.diskFreed(s)
      yield* journal.reset(s)
      const sticky = yield* Effect.flip(journal.append(s, [kv("a2")]))
      expect(sticky.message).toMatch(/^journal of \S+ refuses appends after a failed write: every segment write of a round failed \(write failed: ENOSPC/)
      expect(sticky.message).toContain("the round's batch, which landed in the commit log, could not be erased from it")
      expect(sticky.message).not.toContain("the commit log's write failed")
    }))
})
