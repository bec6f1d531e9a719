/**
 * The file store's guarantees with a round's segment writes and its commit-log batch written at
 * once (src/layers/journal/FileDriver.ts `syncMany`, FileStore.ts "A failed write"): the batch
 * holds every session's frames before anyone knows which segment writes land, so a segment write
 * that fails leaves its bytes in a batch that landed, and they must be taken back before the
 * failure is answered. Two sessions are put in one round (the round before it held at its log
 * sync); one's segment write fails. A power loss is modelled as in test/layers/CommitLog.test.ts:
 * each segment keeps what its last fdatasync covered, the logs what their `O_DSYNC` writes wrote
 * by the moment of the crash.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../../src/domain/Ids.js"
import { entry } from "../../../src/domain/Records.js"
import * as JournalFile from "../../../src/layers/JournalFile.js"
import { FileDriver, FileError, type FileDriverShape, syncManyVia } from "../../../src/layers/journal/FileDriver.js"
import type { JournalShape } from "../../../src/services/Journal.js"
import { instrumentedDriver, logsNow, restoreLogs, tempDir } from "../../support/journals.js"

const kv = (key: string) => entry("kv_put", { key, value: { pad: "x".repeat(200) } })

const keysOf = (journal: JournalShape, session: SessionId) =>
  Effect.map(journal.read(session, { after: 0, limit: 1000 }), (rs) => rs.filter((r) => r.kind === "kv_put").map((r) => [r.sequence, r.payload.key]))

/**
 * The instrumented driver (failures injected by session), able to hold a round at its log's sync
 * (`oneRound`), recording each file's size at its last fdatasync, and failing the next batch
 * written again in the place of the one before it (`failRewrite`) once it landed whole; the logs
 * and the segments' synced sizes as they were just before that write are kept (`beforeRewrite`).
 */
const harness = (dataDir: string) =>
  Effect.gen(function*() {
    const inst = instrumentedDriver()
    const paths = new Map<number, string>()
    const synced = new Map<string, number>()
    const rounds: Array<number> = []
    const gate = yield* Deferred.make<void>()
    const reached = yield* Deferred.make<void>()
    let held = false
    let rewrite = false
    let lastLogWrite: number | undefined
    let beforeRewrite: { readonly logs: Array<Buffer>; readonly synced: Map<string, number> } | undefined
    const isLog = (fd: number) => paths.get(fd)?.includes("commit-log") === true
    const driver: FileDriverShape = {
      ...inst.driver,
      open: (p, flags) => Effect.tap(inst.driver.open(p, flags), (fd) => Effect.sync(() => paths.set(fd, path.resolve(p)))),
      writev: (fd, buffers, position) =>
        Effect.suspend(() => {
          if (!isLog(fd)) return inst.driver.writev(fd, buffers, position)
          // A batch written where the log's last write went (not an erase's zeros): a round's batch written again.
          const again = position === lastLogWrite && buffers.some((b) => b.some((byte) => byte !== 0))
          lastLogWrite = position
          if (!rewrite || !again) return inst.driver.writev(fd, buffers, position)
          rewrite = false
          beforeRewrite = { logs: logsNow(dataDir), synced: new Map(synced) }
          return Effect.zipRight(
            inst.driver.writev(fd, buffers, position),
            Effect.fail(new FileError({ op: "write", path: `fd ${fd}`, code: "EIO", detail: "EIO: injected after the write landed" }))
          )
        }),
      fdatasync: (fd) =>
        Effect.suspend(() => {
          const sync = Effect.tap(inst.driver.fdatasync(fd), () =>
            Effect.sync(() => {
              const p = paths.get(fd)
              if (p !== undefined && p.endsWith(".seg")) synced.set(p, Math.max(synced.get(p) ?? 0, fs.fstatSync(fd).size))
            }))
          if (!held || !isLog(fd)) return sync
          held = false
          return Deferred.succeed(reached, undefined).pipe(Effect.zipRight(Deferred.await(gate)), Effect.zipRight(sync))
        }),
      syncMany: (items, onDone, log) => {
        rounds.push(items.length)
        return syncManyVia(driver)(items, onDone, log)
      }
    }
    const open = JournalFile.make({ dataDir, lockWaitMs: 0, limits: { commitLogBytes: 1 << 20 } }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
    return {
      inst,
      open,
      rounds,
      synced: () => new Map(synced),
      beforeRewrite: () => beforeRewrite,
      failRewrite: () => void (rewrite = true),
      /** Appends to `held` (a round that stops at its log's sync), then `together` in the round after it. */
      oneRound: (first: Effect.Effect<unknown, unknown>, together: ReadonlyArray<Effect.Effect<ReadonlyArray<number>, unknown>>) =>
        Effect.gen(function*() {
          held = true
          const head = yield* Effect.fork(first)
          yield* Deferred.await(reached)
          const fibers = []
          for (const e of together) fibers.push(yield* Effect.fork(Effect.either(e)))
          for (const f of fibers) while ((yield* Fiber.status(f))._tag !== "Suspended") yield* Effect.sleep("1 millis")
          yield* Deferred.succeed(gate, undefined)
          yield* Fiber.join(head)
          return yield* Effect.forEach(fibers, Fiber.join)
        })
    }
  })

/** Each segment cut to what its last fdatasync covered (the rest lost with the page cache). */
const losePower = (dataDir: string, synced: ReadonlyMap<string, number>) => {
  const root = path.join(dataDir, "sessions")
  for (const s of fs.readdirSync(root)) {
    const dir = path.join(root, s, "journal")
    for (const name of fs.readdirSync(dir)) {
      const file = path.resolve(dir, name)
      if (fs.statSync(file).size > (synced.get(file) ?? 0)) fs.truncateSync(file, synced.get(file) ?? 0)
    }
  }
}

/**
 * Sessions a and b with one record each, c opened; then a round of a2 and b2, held while c1
 * commits, in which b's segment write lands and fails (and, with `rewriteFails`, the batch of the
 * writes that landed, written in its place, fails too). The round's two outcomes, b's disk freed.
 */
const failedRound = (h: Effect.Effect.Success<ReturnType<typeof harness>>, journal: JournalShape, [a, b, c]: ReadonlyArray<SessionId>, rewriteFails: boolean) =>
  Effect.gen(function*() {
    for (const s of [a!, b!, c!]) yield* journal.create(s)
    yield* journal.append(a!, [kv("a1")])
    yield* journal.append(b!, [kv("b1")])
    yield* journal.lastSequence(c!)
    h.inst.landsThenFails(b!, { landed: (n) => n, code: "EIO" })
    if (rewriteFails) h.failRewrite()
    const outcomes = yield* h.oneRound(journal.append(c!, [kv("c1")]), [journal.append(a!, [kv("a2")]), journal.append(b!, [kv("b2")])])
    h.inst.diskFreed(b!)
    return outcomes
  })

describe("a round whose segment write fails while its commit-log batch lands", () => {
  it.scopedLive("the other session's append in the round is acknowledged and survives a power loss; the failed one is read back neither by a reopen nor by a start after a crash", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const h = yield* harness(dir)
      const [a, b, c] = [yield* mintSessionId, yield* mintSessionId, yield* mintSessionId]
      const { logs, outcomes, reopened, synced } = yield* Effect.scoped(Effect.gen(function*() {
        const journal = yield* h.open
        const outcomes = yield* failedRound(h, journal, [a, b, c], false)
        yield* journal.reset(b)
        const reopened = yield* keysOf(journal, b)
        return { outcomes, reopened, synced: h.synced(), logs: logsNow(dir) }
      }))
      expect(h.rounds).toContain(2)
      expect(outcomes[0]!._tag === "Right" && outcomes[0]!.right).toEqual([2])
      expect(outcomes[1]!._tag === "Left" && (outcomes[1]!.left as { _tag: string })._tag).toBe("JournalWriteFailed")
      expect(reopened).toEqual([[1, "b1"]])
      // A power loss then: the segments keep only what was synced, the logs are written again at the start.
      restoreLogs(dir, logs)
      losePower(dir, synced)
      const after = yield* Effect.scoped(Effect.flatMap(h.open, (journal) => Effect.all([keysOf(journal, a), keysOf(journal, b), keysOf(journal, c)])))
      expect(after).toEqual([[[1, "a1"], [2, "a2"]], [[1, "b1"]], [[1, "c1"]]])
    }))

  it.scopedLive("when the batch of the writes that landed cannot be written in the batch's place, every append of the round fails, all of it is taken back, and after a crash neither session reads any of it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const h = yield* harness(dir)
      const [a, b, c] = [yield* mintSessionId, yield* mintSessionId, yield* mintSessionId]
      const { logs, outcomes, reopened, synced } = yield* Effect.scoped(Effect.gen(function*() {
        const journal = yield* h.open
        const outcomes = yield* failedRound(h, journal, [a, b, c], true)
        yield* journal.reset(a)
        yield* journal.reset(b)
        const reopened = [yield* keysOf(journal, a), yield* keysOf(journal, b)]
        return { outcomes, reopened, synced: h.synced(), logs: logsNow(dir) }
      }))
      expect(h.rounds).toContain(2)
      expect(h.beforeRewrite()).toBeDefined()
      expect(outcomes.map((o) => o._tag === "Left" && (o.left as { _tag: string })._tag)).toEqual(["JournalWriteFailed", "JournalWriteFailed"])
      expect(reopened).toEqual([[[1, "a1"]], [[1, "b1"]]])
      restoreLogs(dir, logs)
      losePower(dir, synced)
      const after = yield* Effect.scoped(Effect.flatMap(h.open, (journal) =>
        Effect.gen(function*() {
          const keys = [yield* keysOf(journal, a), yield* keysOf(journal, b)]
          // And the journals go on from their committed ends.
          return { keys, next: [yield* journal.append(a, [kv("a3")]), yield* journal.append(b, [kv("b3")])] }
        })))
      expect(after).toEqual({ keys: [[[1, "a1"]], [[1, "b1"]]], next: [[2], [2]] })
    }))

  it.scopedLive("a crash after the batch landed and before its take-back: neither append was answered, and the start writes the whole batch again, each append whole", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const h = yield* harness(dir)
      const [a, b] = yield* crashedBeforeTakeBack(h, dir)
      const after = yield* Effect.scoped(Effect.flatMap(h.open, (journal) => Effect.all([keysOf(journal, a), keysOf(journal, b)])))
      expect(after).toEqual([[[1, "a1"], [2, "a2"]], [[1, "b1"], [2, "b2"]]])
    }))

  it.scopedLive("a crash before the take-back, with the disk still full where the failed write went: the start refuses the data directory, changing nothing, and once there is room it starts with every append whole", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const h = yield* harness(dir)
      const [a, b] = yield* crashedBeforeTakeBack(h, dir)
      const logs = logsNow(dir)
      h.inst.diskFull(b)
      const refused = yield* Effect.flip(Effect.scoped(h.open))
      expect(refused._tag).toBe("DataDirError")
      expect(refused.message).toMatch(/cannot write a segment to recover: .*ENOSPC/)
      // The logs are as they were: the batch is still there for the next start to write.
      expect(logsNow(dir).every((log, i) => log.equals(logs[i]!))).toBe(true)
      h.inst.diskFreed(b)
      const after = yield* Effect.scoped(Effect.flatMap(h.open, (journal) => Effect.all([keysOf(journal, a), keysOf(journal, b)])))
      expect(after).toEqual([[[1, "a1"], [2, "a2"]], [[1, "b1"], [2, "b2"]]])
    }))
})

/**
 * Sessions a and b with one record each; a round of a2 and b2 whose batch lands, b's segment write
 * landing nothing, and a crash (and a power loss) between the batch's write and its take-back:
 * the files as they were then. Sessions a and b.
 */
const crashedBeforeTakeBack = (h: Effect.Effect.Success<ReturnType<typeof harness>>, dir: string) =>
  Effect.gen(function*() {
    const [a, b, c] = [yield* mintSessionId, yield* mintSessionId, yield* mintSessionId]
    yield* Effect.scoped(Effect.gen(function*() {
      const journal = yield* h.open
      for (const s of [a, b, c]) yield* journal.create(s)
      yield* journal.append(a, [kv("a1")])
      yield* journal.append(b, [kv("b1")])
      yield* journal.lastSequence(c)
      h.inst.landsThenFails(b, { landed: () => 0, code: "EIO" })
      h.failRewrite()
      yield* h.oneRound(journal.append(c, [kv("c1")]), [journal.append(a, [kv("a2")]), journal.append(b, [kv("b2")])])
      h.inst.diskFreed(b)
      expect(h.rounds).toContain(2)
    }))
    const crash = h.beforeRewrite()!
    restoreLogs(dir, crash.logs)
    losePower(dir, crash.synced)
    return [a, b] as const
  })
