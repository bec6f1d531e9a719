import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as FileDriverModule from "../../src/layers/journal/FileDriver.js"
import { FileDriver, type FileDriverShape, syncManyVia } from "../../src/layers/journal/FileDriver.js"
import { OPEN_JOURNAL_BYTES } from "../../src/domain/Limits.js"
import { CHECKPOINT_FILE } from "../../src/layers/journal/DataDir.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"

const kv = (key: string) => entry("kv_put", { key, value: "x".repeat(150) })

describe("Group commit in the file journal", () => {
  const concurrentAppends = (commitLogBytes?: number) =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const inst = instrumentedDriver()
      const options = commitLogBytes === undefined ? { dataDir: dir } : { dataDir: dir, limits: { commitLogBytes } }
      const journal = yield* JournalFile.make(options).pipe(Effect.provide(Layer.succeed(FileDriver, inst.driver)))
      const sessions: Array<SessionId> = []
      for (let i = 0; i < 8; i++) {
        const s = yield* mintSessionId
        yield* journal.create(s)
        sessions.push(s)
      }
      const before = { ...inst.counts }
      const appends = 8 * 100
      yield* Effect.forEach(
        Array.from({ length: appends }, (_, i) => i),
        (i) => journal.append(sessions[i % 8]!, [kv(`k${i}`)]),
        { concurrency: "unbounded", discard: true }
      )
      for (const s of sessions) expect(yield* journal.lastSequence(s)).toBe(100)
      return { appends, syncs: inst.counts.fdatasync - before.fdatasync, writes: inst.counts.writev - before.writev }
    })

  it.scoped("concurrent appends across sessions share syncs: with the commit log, one per round whatever the sessions in it, far fewer than appends", () =>
    Effect.gen(function*() {
      const { appends, syncs, writes } = yield* concurrentAppends()
      expect(syncs).toBeGreaterThanOrEqual(1)
      expect(syncs).toBeLessThan(appends / 10)
      // Each round: a write per session's file and one to the log, synced once.
      expect(writes).toBeGreaterThanOrEqual(8 + syncs)
    }))

  it.scoped("concurrent appends across sessions share syncs: without the commit log, one per file per round, far fewer than appends", () =>
    Effect.gen(function*() {
      const { appends, syncs } = yield* concurrentAppends(0)
      expect(syncs).toBeGreaterThanOrEqual(8)
      expect(syncs).toBeLessThan(appends / 10)
    }))

  it.scopedLive("a latency-lane append queued behind background appends is acknowledged first", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      // The first sync of the busy session blocks until released, so appends pile up behind it.
      const gate = yield* Deferred.make<void>()
      const reached = yield* Deferred.make<void>()
      // Gated from the first append on (the start's own syncs, such as the commit log's, pass).
      let gated = false
      const base = instrumentedDriver().driver
      const driver: FileDriverShape = {
        ...base,
        fdatasync: (fd) =>
          gated
            ? Deferred.succeed(reached, undefined).pipe(
              Effect.zipRight(Deferred.await(gate)),
              Effect.zipRight(Effect.sync(() => (gated = false))),
              Effect.zipRight(base.fdatasync(fd))
            )
            : base.fdatasync(fd),
        syncMany: (items, onDone, log) => syncManyVia(driver)(items, onDone, log)
      }
      const journal = yield* JournalFile.make({ dataDir: dir }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
      const busy = yield* mintSessionId
      const other = yield* mintSessionId
      yield* journal.create(busy)
      yield* journal.create(other)
      // Open both journals now, so the appends below suspend only in the writer's queue.
      yield* journal.lastSequence(busy)
      yield* journal.lastSequence(other)
      const order: Array<string> = []
      const track = (name: string, eff: Effect.Effect<unknown, unknown>) =>
        Effect.forkScoped(Effect.tap(eff, () => Effect.sync(() => order.push(name))))

      gated = true
      const first = yield* track("first", journal.append(busy, [kv("first")], { lane: "background" }))
      // The writer is now inside the first round, blocked on its sync.
      yield* Deferred.await(reached)
      const background = []
      for (let i = 0; i < 5; i++) {
        background.push(yield* track(`bg${i}`, journal.append(busy, [kv(`bg${i}`)], { lane: "background" })))
      }
      const urgent = yield* track("urgent", journal.append(other, [kv("urgent")], { lane: "latency" }))
      // Every append is queued once its fiber is suspended waiting for its acknowledgement.
      for (const f of [...background, urgent]) {
        while ((yield* Fiber.status(f))._tag !== "Suspended") yield* Effect.sleep("1 millis")
      }
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      yield* Fiber.join(urgent)
      for (const f of background) yield* Fiber.join(f)
      expect(order[0]).toBe("first")
      expect(order[1]).toBe("urgent")
      expect(order.slice(2).sort()).toEqual(["bg0", "bg1", "bg2", "bg3", "bg4"])
      // The file stays in sequence order whatever the lanes did.
      const recs = yield* journal.read(busy, { after: 0, limit: 10 })
      expect(recs.map((r) => r.sequence)).toEqual([1, 2, 3, 4, 5, 6])
    }))

  it.scoped("a full queue makes appenders wait instead of growing memory, and every append still lands", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const inst = instrumentedDriver()
      const journal = yield* JournalFile.make({ dataDir: dir, limits: { queueAppends: 4, batchAppends: 2 } }).pipe(
        Effect.provide(Layer.succeed(FileDriver, inst.driver))
      )
      const s = yield* mintSessionId
      yield* journal.create(s)
      const seqs = yield* Effect.forEach(
        Array.from({ length: 50 }, (_, i) => i),
        (i) => journal.append(s, [kv(`k${i}`)]),
        { concurrency: "unbounded" }
      )
      expect(seqs.flat().sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1))
      // With at most two appends per round, it took at least 25 rounds.
      expect(inst.counts.fdatasync).toBeGreaterThanOrEqual(25)
    }))
})

describe("Writer robustness", () => {
  it.scoped("a round that dies unexpectedly fails its appends and the writer keeps serving other sessions", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      let dying = false
      const inst = instrumentedDriver()
      const driver: FileDriverShape = {
        ...inst.driver,
        syncMany: (items, onDone, log) => (dying ? Effect.die(new Error("driver bug")) : syncManyVia(inst.driver)(items, onDone, log))
      }
      const journal = yield* JournalFile.make({ dataDir: dir }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
      const a = yield* mintSessionId
      const b = yield* mintSessionId
      yield* journal.create(a)
      yield* journal.create(b)
      dying = true
      const failed = yield* Effect.either(journal.append(a, [kv("x")]))
      expect(failed._tag === "Left" && failed.left._tag).toBe("JournalWriteFailed")
      dying = false
      expect(yield* journal.append(b, [kv("y")])).toEqual([1])
      const again = yield* Effect.either(journal.append(a, [kv("z")]))
      expect(again._tag === "Left" && again.left._tag).toBe("JournalWriteFailed")
    }))
})

describe("Journal handles under a memory bound", () => {
  it.scoped("with more sessions than open handles, idle handles are dropped and reopened; concurrent appends stay dense and none is lost", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      let opens = 0
      const driver: FileDriverShape = {
        ...FileDriverModule.nodeDriver,
        readFile: (p) => Effect.zipRight(Effect.sync(() => void opens++), FileDriverModule.nodeDriver.readFile(p))
      }
      const journal = yield* JournalFile.make({ dataDir: dir, maxHandles: 3 }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
      const sessions: Array<SessionId> = []
      for (let i = 0; i < 12; i++) {
        const s = yield* mintSessionId
        yield* journal.create(s)
        sessions.push(s)
      }
      yield* Effect.forEach(
        Array.from({ length: 12 * 15 }, (_, i) => i),
        (i) => journal.append(sessions[i % 12]!, [kv(`k${Math.floor(i / 12)}`)]),
        { concurrency: 24, discard: true }
      )
      for (const s of sessions) {
        expect(yield* journal.lastSequence(s)).toBe(15)
        const records = yield* journal.read(s, { after: 0, limit: 100 })
        expect(records.map((r) => r.sequence)).toEqual(Array.from({ length: 15 }, (_, i) => i + 1))
      }
      // Handles were dropped and their journals reopened (each open reads the segment).
      expect(opens).toBeGreaterThan(12)
    }))
})

describe("Opened journals within their byte bound", () => {
  /** Twelve sessions of a record each, written by one journal and then opened by a fresh one over `driver`. */
  const stored = (dir: string) =>
    Effect.gen(function*() {
      const sessions: Array<SessionId> = []
      yield* Effect.scoped(Effect.gen(function*() {
        const journal = yield* JournalFile.make({ dataDir: dir }).pipe(Effect.provide(Layer.succeed(FileDriver, FileDriverModule.nodeDriver)))
        for (let i = 0; i < 12; i++) {
          const s = yield* mintSessionId
          yield* journal.create(s)
          yield* journal.append(s, [kv("a")])
          sessions.push(s)
        }
      }))
      return sessions
    })

  it.scoped("a walk opening many sessions keeps no more opened journals than maxHandleBytes holds: the first is reopened afterwards", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const sessions = yield* stored(dir)
      let opens = 0
      const driver: FileDriverShape = {
        ...FileDriverModule.nodeDriver,
        readFile: (p) => Effect.zipRight(Effect.sync(() => void opens++), FileDriverModule.nodeDriver.readFile(p))
      }
      const journal = yield* JournalFile.make({ dataDir: dir, maxHandleBytes: 4 * OPEN_JOURNAL_BYTES }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
      for (const s of sessions) expect(yield* journal.lastSequence(s)).toBe(1)
      expect(opens).toBe(12)
      // The newest few are still open; the first was dropped and is read from its files again.
      expect(yield* journal.lastSequence(sessions[11]!)).toBe(1)
      expect(opens).toBe(12)
      expect(yield* journal.lastSequence(sessions[0]!)).toBe(1)
      expect(opens).toBe(13)
    }))

  it.scoped("a journal alone past maxHandleBytes stays usable: concurrent appends on sessions each past the bound stay dense", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const sessions = yield* stored(dir)
      const journal = yield* JournalFile.make({ dataDir: dir, maxHandleBytes: 1 }).pipe(Effect.provide(Layer.succeed(FileDriver, FileDriverModule.nodeDriver)))
      const some = sessions.slice(0, 3)
      yield* Effect.forEach(
        Array.from({ length: 3 * 10 }, (_, i) => i),
        (i) => journal.append(some[i % 3]!, [kv(`k${i}`)]),
        { concurrency: 6, discard: true }
      )
      for (const s of some) {
        const records = yield* journal.read(s, { after: 0, limit: 100 })
        expect(records.map((r) => r.sequence)).toEqual(Array.from({ length: 11 }, (_, i) => i + 1))
      }
    }))

  it.scoped("the newest records an open reads are counted in the recent tails' bound: past it, a read after the open goes to the files", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const sessions = yield* stored(dir)
      let reads = 0
      const driver: FileDriverShape = {
        ...FileDriverModule.nodeDriver,
        // A journal segment's reads; an open also looks for the session's checkpoint (what it covers), which is not a record's read.
        open: (p, flags) =>
          Effect.zipRight(Effect.sync(() => void (flags === "r" && path.basename(p) !== CHECKPOINT_FILE && reads++)), FileDriverModule.nodeDriver.open(p, flags))
      }
      const journal = yield* JournalFile.make({ dataDir: dir, limits: { recentTotalBytes: 1 } }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
      for (const s of sessions) expect(yield* journal.lastSequence(s)).toBe(1)
      expect(reads).toBe(0)
      // Each open's tail was dropped by the next's: the records come from the file.
      const records = yield* journal.read(sessions[0]!, { after: 0, limit: 10 })
      expect(records.map((r) => r.sequence)).toEqual([1])
      expect(reads).toBe(1)
    }))
})
