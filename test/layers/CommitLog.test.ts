/**
 * The file journal's commit log (src/layers/journal/CommitLog.ts, docs/journal.md): a round's
 * segment writes are not synced, one batch in the log makes them durable, and a start writes the
 * log's batches again. These tests model a power loss the way the kernel would leave the files:
 * a segment keeps only what an fdatasync of it covered (the driver here records each file's size
 * at its last fdatasync), the rest of it cut off or left as zeros; the logs keep what their
 * `O_DSYNC` writes wrote, taken at the moment of the crash (a clean stop, which the scope's end is,
 * syncs every segment and empties the logs). Batch boundaries are found by a small parser here,
 * not by the code under test.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { LOG_PREALLOCATED_MAX } from "../../src/layers/journal/CommitLog.js"
import { encodeBatch, scanLog, scanNeedsMore } from "../../src/layers/journal/CommitLogFormat.js"
import { FileDriver, FileError, type FileDriverShape, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { COMMIT_LOGS, logsNow, restoreLogs, tempDir } from "../support/journals.js"

const kv = (key: string, value: unknown = { pad: "x".repeat(100) }) => entry("kv_put", { key, value })

/** nodeDriver, recording each file's size at its last fdatasync (what survives a power loss), and able to fail writes to the log. */
const recordingDriver = () => {
  const paths = new Map<number, string>()
  const synced = new Map<string, number>()
  let failLog = 0
  let failSegmentSyncs = false
  let full: number | undefined
  const driver: FileDriverShape = {
    ...nodeDriver,
    open: (p, flags) => Effect.tap(nodeDriver.open(p, flags), (fd) => Effect.sync(() => paths.set(fd, path.resolve(p)))),
    fdatasync: (fd) =>
      failSegmentSyncs && paths.get(fd)?.endsWith(".seg")
        ? Effect.fail(new FileError({ op: "fdatasync", path: `fd ${fd}`, code: "EIO", detail: "injected" }))
        : Effect.tap(nodeDriver.fdatasync(fd), () =>
        Effect.sync(() => {
          const p = paths.get(fd)!
          // Closed by now (a flush that raced its file's close, which synced it too), or the number
          // taken by another file since: not counted.
          let size: number
          try {
            const st = fs.fstatSync(fd)
            if (st.ino !== fs.statSync(p).ino) return
            size = st.size
          } catch {
            return
          }
          synced.set(p, Math.max(synced.get(p) ?? 0, size))
        })),
    syncMany: (items, onDone, log) => {
      if (log === undefined || failLog === 0) return nodeDriver.syncMany(items, onDone, log)
      failLog--
      // The items are written, the log's write fails: as a full disk would (ENOSPC).
      full ??= fs.openSync("/dev/full", "w")
      return nodeDriver.syncMany(items, onDone, { ...log, fd: full })
    }
  }
  return {
    driver,
    synced: () => new Map(synced),
    /** The next `rounds` rounds' log writes fail (ENOSPC); with `andSegmentSyncs`, every segment's fdatasync from now on too. */
    failLogWrites: (rounds: number, andSegmentSyncs = false) => {
      failLog = rounds
      failSegmentSyncs = andSegmentSyncs
    }
  }
}

/** How many batches each log holds: none once it is emptied. */
const batchesIn = (dataDir: string) => COMMIT_LOGS.map((n) => scanLog(fs.readFileSync(path.join(dataDir, "commit-log", n))).batches.length)

const segmentsUnder = (dataDir: string): Array<string> => {
  const root = path.join(dataDir, "sessions")
  if (!fs.existsSync(root)) return []
  return fs.readdirSync(root).flatMap((s) => {
    const dir = path.join(root, s, "journal")
    return fs.existsSync(dir) ? fs.readdirSync(dir).filter((n) => n.endsWith(".seg")).map((n) => path.resolve(dir, n)) : []
  })
}

/**
 * What a power loss leaves: each segment only as far as its last fdatasync reached, the rest cut
 * off (`cut`) or read back as zeros (`zeros`: the size reached the disk, the data did not).
 */
const losePower = (dataDir: string, synced: ReadonlyMap<string, number>, how: (file: string) => "cut" | "zeros") => {
  let lost = 0
  for (const file of segmentsUnder(dataDir)) {
    const durable = synced.get(file) ?? 0
    const size = fs.statSync(file).size
    if (size <= durable) continue
    lost += size - durable
    if (how(file) === "cut") fs.truncateSync(file, durable)
    else {
      const fd = fs.openSync(file, "r+")
      fs.writeSync(fd, Buffer.alloc(size - durable), 0, size - durable, durable)
      fs.closeSync(fd)
    }
  }
  return lost
}

const open = (dataDir: string, driver: FileDriverShape = nodeDriver, limits: Partial<{ commitLogBytes: number; openFiles: number }> = {}) =>
  JournalFile.make({ dataDir, lockWaitMs: 0, limits }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))

const withJournal = <A, E>(dataDir: string, use: (journal: JournalShape) => Effect.Effect<A, E>, driver?: FileDriverShape, limits?: Partial<{ commitLogBytes: number; openFiles: number }>) =>
  Effect.scoped(Effect.flatMap(open(dataDir, driver, limits), use))

const readAll = (journal: JournalShape, session: SessionId) =>
  Effect.map(journal.read(session, { after: 0, limit: 10_000 }), (rs) => rs.map((r) => ({ sequence: r.sequence, kind: r.kind, payload: r.payload })))

/** The batches of a log file: [start, end) of each, by its header's length field (28-byte headers). */
const batchBounds = (bytes: Buffer): Array<readonly [number, number]> => {
  const out: Array<readonly [number, number]> = []
  let at = 0
  while (at + 28 <= bytes.length && bytes.readUInt32LE(at) === 0x4c434e42) {
    const end = at + 28 + bytes.readUInt32LE(at + 16)
    if (end > bytes.length) break
    out.push([at, end])
    at = end
  }
  return out
}

describe("the commit log: acknowledged appends survive a power loss", () => {
  it.scopedLive("every acknowledged append of many sessions, across log switches and descriptors closed mid-log, is read back whole after the segments lose every write no fdatasync covered", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const rec = recordingDriver()
      const sessions = yield* Effect.all(Array.from({ length: 12 }, () => mintSessionId))
      // A small log (many switches) and few descriptors (closed, so synced, while their log is current).
      const limits = { commitLogBytes: 8 * 1024, openFiles: 4 }
      const { before, logs, synced } = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          for (const s of sessions) yield* journal.create(s)
          for (let round = 0; round < 15; round++) {
            // All sessions at once (rounds on the sync thread), then one alone (a round from the main thread).
            yield* Effect.forEach(sessions, (s, i) => journal.append(s, i % 3 === 0 ? [kv(`r${round}a`), kv(`r${round}b`)] : [kv(`r${round}`)]), {
              concurrency: "unbounded",
              discard: true
            })
            yield* journal.append(sessions[round % sessions.length]!, [kv(`alone${round}`)])
          }
          const before = yield* Effect.forEach(sessions, (s) => readAll(journal, s))
          // What a power loss now would leave: taken before the scope's close syncs everything.
          return { before, synced: rec.synced(), logs: logsNow(dir) }
        }), rec.driver, limits)
      // The log switched: segments were synced by its flushes and closes, yet not all of them.
      expect([...synced.keys()].filter((p) => p.endsWith(".seg")).length).toBeGreaterThan(0)
      restoreLogs(dir, logs)
      const lost = losePower(dir, synced, (file) => sessions.findIndex((s) => file.includes(s)) % 2 === 0 ? "cut" : "zeros")
      expect(lost, "some acknowledged bytes were only in the page cache").toBeGreaterThan(0)

      const after = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          // Written again and synced, the logs were emptied: nothing stale for a later start.
          expect(batchesIn(dir)).toEqual([0, 0])
          const records = yield* Effect.forEach(sessions, (s) => readAll(journal, s))
          // And the journals go on from where they were.
          const next = yield* journal.append(sessions[0]!, [kv("next")])
          return { records, next, last: before[0]!.at(-1)!.sequence }
        }), undefined, limits)
      expect(after.records).toEqual(before)
      expect(after.next).toEqual([after.last + 1])
    }))

  it.scopedLive("a batch torn in the log was never acknowledged: it is not written again, and what its segment holds of it follows the segment's own rules", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const rec = recordingDriver()
      const [a, b] = [yield* mintSessionId, yield* mintSessionId]
      const { logs, synced } = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(a)
          yield* journal.create(b)
          for (let i = 1; i <= 3; i++) yield* journal.append(a, [kv(`a${i}`)])
          for (let i = 1; i <= 3; i++) yield* journal.append(b, [kv(`b${i}`)])
          return { synced: rec.synced(), logs: logsNow(dir) }
        }), rec.driver)
      restoreLogs(dir, logs)
      // The last round (b3's) torn in the log: its batch cut in the middle.
      const current = COMMIT_LOGS.map((n) => path.join(dir, "commit-log", n)).find((f) => batchBounds(fs.readFileSync(f)).length > 0)!
      const bounds = batchBounds(fs.readFileSync(current))
      const [start, end] = bounds.at(-1)!
      fs.truncateSync(current, start + Math.floor((end - start) / 2))
      // And both segments lose what no fdatasync covered: here, all of it.
      losePower(dir, synced, () => "cut")
      const aSegment = segmentsUnder(dir).find((f) => f.includes(a))!
      const bSegment = segmentsUnder(dir).find((f) => f.includes(b))!
      expect(fs.statSync(aSegment).size + fs.statSync(bSegment).size).toBe(0)

      const read = yield* withJournal(dir, (journal) => Effect.all([readAll(journal, a), readAll(journal, b)]))
      expect(read[0]!.map((r) => r.payload.key)).toEqual(["a1", "a2", "a3"])
      // b3 was in the torn batch only: gone, as an append that never returned; b1 and b2 written again.
      expect(read[1]!.map((r) => r.payload.key)).toEqual(["b1", "b2"])
    }))

  it.scopedLive("a batch whose round landed in its segment is kept when the log's copy is torn (a write that landed, unacknowledged)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const logs = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          for (let i = 1; i <= 3; i++) yield* journal.append(s, [kv(`k${i}`)])
          return logsNow(dir)
        }))
      restoreLogs(dir, logs)
      const current = COMMIT_LOGS.map((n) => path.join(dir, "commit-log", n)).find((f) => batchBounds(fs.readFileSync(f)).length > 0)!
      const [start, end] = batchBounds(fs.readFileSync(current)).at(-1)!
      fs.truncateSync(current, start + Math.floor((end - start) / 2))
      const read = yield* withJournal(dir, (journal) => readAll(journal, s))
      expect(read.map((r) => r.payload.key)).toEqual(["k1", "k2", "k3"])
    }))

  it.scopedLive("a session deleted after its appends were logged stays deleted: writing the log again never brings a file back", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const [gone, kept] = [yield* mintSessionId, yield* mintSessionId]
      const logs = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(gone)
          yield* journal.create(kept)
          yield* Effect.all([journal.append(gone, [kv("g")]), journal.append(kept, [kv("k")])], { concurrency: "unbounded" })
          yield* journal.remove(gone)
          return logsNow(dir)
        }))
      // A crash after the delete: the log still holds the deleted session's writes.
      restoreLogs(dir, logs)
      expect(logs.some((l) => l.includes(Buffer.from(gone)))).toBe(true)
      const after = yield* withJournal(dir, (journal) =>
        Effect.all([journal.exists(gone), Effect.either(journal.lastSequence(gone)), readAll(journal, kept)]))
      expect(after[0]).toBe(false)
      expect(Either.isLeft(after[1]) && after[1].left._tag).toBe("SessionNotFound")
      expect(after[2].map((r) => r.payload.key)).toEqual(["k"])
      expect(fs.existsSync(path.join(dir, "sessions", gone))).toBe(false)
    }))

  it.scopedLive("a start never writes a logged batch past its segment's end: a session restored from an older copy beside a log that holds later writes keeps its own bytes, readable, and the other sessions are mended", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const [restored, other] = [yield* mintSessionId, yield* mintSessionId]
      const seg = path.join(dir, "sessions", restored, "journal", "00000000000000000001.seg")
      yield* withJournal(dir, (journal) => Effect.zipRight(journal.create(restored), journal.append(restored, [kv("r1")])))
      // The operator's older copy of the session: one record.
      const copy = fs.readFileSync(seg)
      yield* withJournal(dir, (journal) => journal.append(restored, [kv("r2")]))
      const { logs, synced } = yield* Effect.gen(function*() {
        const rec = recordingDriver()
        return yield* withJournal(dir, (journal) =>
          Effect.gen(function*() {
            yield* journal.create(other)
            for (const k of ["r3", "r4"]) yield* journal.append(restored, [kv(k)])
            for (const k of ["o1", "o2"]) yield* journal.append(other, [kv(k)])
            return { logs: logsNow(dir), synced: rec.synced() }
          }), rec.driver)
      })
      // A crash, then a power loss: the segments lose what no fdatasync covered, the log holds it.
      restoreLogs(dir, logs)
      losePower(dir, synced, () => "cut")
      expect(fs.statSync(path.join(dir, "sessions", other, "journal", "00000000000000000001.seg")).size).toBe(0)
      // Then the session's directory is restored from the older copy: its segment ends before where the log's writes to it begin.
      fs.writeFileSync(seg, copy)
      const after = yield* withJournal(dir, (journal) => Effect.all([readAll(journal, restored), readAll(journal, other)]))
      expect(after[0].map((r) => r.payload.key)).toEqual(["r1"])
      expect(fs.readFileSync(seg).equals(copy)).toBe(true)
      expect(after[1].map((r) => r.payload.key)).toEqual(["o1", "o2"])
    }))

  it.scopedLive("a deleted session's id cannot be created again while a log may still hold its writes, and can once both logs have moved on", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const [gone, busy] = [yield* mintSessionId, yield* mintSessionId]
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(gone)
          yield* journal.create(busy)
          yield* journal.append(gone, [kv("g")])
          yield* journal.remove(gone)
          const again = yield* Effect.flip(journal.create(gone))
          expect(again._tag).toBe("SessionAlreadyExists")
          // Enough writes elsewhere for two switches of a 4 KiB log.
          for (let i = 0; i < 60; i++) yield* journal.append(busy, [kv(`b${i}`)])
          yield* journal.create(gone)
          expect(yield* journal.lastSequence(gone)).toBe(0)
        }), undefined, { commitLogBytes: 4096 })
    }))

  it.scopedLive("a log write that fails fails its round's appends with JournalWriteFailed, what landed of them in their segment files is cut back, and the journals go on; a power loss then keeps what followed and nothing of the failed appends", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const rec = recordingDriver()
      const [s, t] = [yield* mintSessionId, yield* mintSessionId]
      const { failed, k3, later, logs, synced } = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          yield* journal.create(t)
          yield* journal.append(t, [kv("t1")])
          // s's first write is the one whose batch fails: nothing of s is synced or logged before it.
          rec.failLogWrites(1)
          const failed = yield* Effect.flip(journal.append(s, [kv("k1")]))
          // s's journal refuses appends until it is reset (DESIGN §2); then it goes on from its committed end.
          const later = yield* Effect.flip(journal.append(s, [kv("k2")]))
          yield* journal.reset(s)
          const k3 = yield* journal.append(s, [kv("k3")])
          yield* journal.append(t, [kv("t2")])
          return { failed, later, k3, synced: rec.synced(), logs: logsNow(dir) }
        }), rec.driver)
      expect(failed._tag).toBe("JournalWriteFailed")
      expect(later._tag).toBe("JournalWriteFailed")
      restoreLogs(dir, logs)
      losePower(dir, synced, () => "zeros")
      const read = yield* withJournal(dir, (journal) => Effect.all([readAll(journal, s), readAll(journal, t)]))
      // k1 was reported failed and landed in its segment: cut back before it was answered, it never
      // stands, and k3 took its place (logged after it, never after a hole).
      expect(read[0].filter((r) => r.kind === "kv_put").map((r) => [r.sequence, r.payload.key])).toEqual([[k3[0], "k3"]])
      expect(read[1].filter((r) => r.kind === "kv_put").map((r) => r.payload.key)).toEqual(["t1", "t2"])
    }))

  it.scopedLive("a log write that fails and a segment sync after it that fails too refuse every later append of every session (sticky); a restart keeps everything acknowledged", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const rec = recordingDriver()
      const [s, t] = [yield* mintSessionId, yield* mintSessionId]
      const { failed, other, logs, synced } = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          yield* journal.create(t)
          yield* journal.append(s, [kv("k1")])
          rec.failLogWrites(1, true)
          const failed = yield* Effect.flip(journal.append(s, [kv("k2")]))
          const other = yield* Effect.flip(journal.append(t, [kv("t1")]))
          return { failed, other, synced: rec.synced(), logs: logsNow(dir) }
        }), rec.driver)
      expect(failed._tag).toBe("JournalWriteFailed")
      expect(other._tag).toBe("JournalWriteFailed")
      restoreLogs(dir, logs)
      losePower(dir, synced, () => "cut")
      const read = yield* withJournal(dir, (journal) => readAll(journal, s))
      // k2 was never acknowledged, its batch never written and its segment never synced: lost with the page cache.
      expect(read.filter((r) => r.kind === "kv_put").map((r) => r.payload.key)).toEqual(["k1"])
    }))

  it.scopedLive("a flush of segments that dies (a driver's defect) makes the journal refuse appends with JournalWriteFailed at the next switch; its rounds never die of it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const paths = new Map<number, string>()
      const driver: FileDriverShape = {
        ...nodeDriver,
        open: (p, flags) => Effect.tap(nodeDriver.open(p, flags), (fd) => Effect.sync(() => paths.set(fd, p))),
        fdatasync: (fd) => (paths.get(fd)?.endsWith(".seg") ? Effect.die(new Error("driver bug")) : nodeDriver.fdatasync(fd))
      }
      const s = yield* mintSessionId
      const failure = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          for (let i = 0; i < 200; i++) {
            const r = yield* Effect.either(journal.append(s, [kv(`k${i}`)]))
            if (Either.isLeft(r)) return { at: i, error: r.left }
          }
          return undefined
        }), driver, { commitLogBytes: 2048 })
      expect(failure).toBeDefined()
      expect(failure!.at).toBeGreaterThan(0)
      expect(failure!.error._tag).toBe("JournalWriteFailed")
      expect(failure!.error.message).toContain("flush")
    }))

  it.scopedLive("both logs are zero-filled to their capacity (at most LOG_PREALLOCATED_MAX) at start: a round's log write changes no log's size, and a start after a clean stop finds them emptied in place", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const sizes = () => COMMIT_LOGS.map((n) => fs.statSync(path.join(dir, "commit-log", n)).size)
      const sessions = yield* Effect.all(Array.from({ length: 4 }, () => mintSessionId))
      const during = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          const atStart = sizes()
          for (const s of sessions) yield* journal.create(s)
          yield* Effect.forEach(sessions, (s) => journal.append(s, [kv("a")]), { concurrency: "unbounded", discard: true })
          expect(batchesIn(dir)[0]).toBeGreaterThan(0)
          return { atStart, after: sizes() }
        }), undefined, { commitLogBytes: 1 << 20 })
      expect(during).toEqual({ atStart: [1 << 20, 1 << 20], after: [1 << 20, 1 << 20] })
      expect(batchesIn(dir)).toEqual([0, 0])
      // A capacity past the bound is given the bound ahead, and grows past it as written.
      const again = yield* withJournal(dir, () => Effect.sync(sizes), undefined, { commitLogBytes: LOG_PREALLOCATED_MAX + (1 << 20) })
      expect(again).toEqual([LOG_PREALLOCATED_MAX, LOG_PREALLOCATED_MAX])
      // Without the log nothing is given ahead, and the files are left as they are.
      const without = yield* withJournal(dir, () => Effect.sync(sizes), undefined, { commitLogBytes: 0 })
      expect(without).toEqual([LOG_PREALLOCATED_MAX, LOG_PREALLOCATED_MAX])
    }))

  it.scopedLive("a clean stop syncs every segment written and leaves both logs empty, so the next start writes nothing again", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const rec = recordingDriver()
      const sessions = yield* Effect.all(Array.from({ length: 6 }, () => mintSessionId))
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          for (const s of sessions) yield* journal.create(s)
          yield* Effect.forEach(sessions, (s) => journal.append(s, [kv("a"), kv("b")]), { concurrency: "unbounded", discard: true })
          const logged = batchesIn(dir)
          expect(logged[0]! + logged[1]!).toBeGreaterThan(0)
        }), rec.driver)
      expect(batchesIn(dir)).toEqual([0, 0])
      // Every segment durable as it is: a power loss now loses nothing.
      const synced = rec.synced()
      for (const file of segmentsUnder(dir)) expect(synced.get(file), file).toBe(fs.statSync(file).size)
    }))

  it.scopedLive("a log naming a file that is not a journal segment refuses the data directory at start, and writes nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withJournal(dir, () => Effect.void)
      const outside = path.join(dir, "outside")
      fs.writeFileSync(outside, "untouched")
      const batch = encodeBatch({ epoch: 7, salt: 1 }, [{ path: Buffer.from("outside"), position: 0, pieces: [Buffer.from("overwritten")] }])
      fs.writeFileSync(path.join(dir, "commit-log", "a.log"), batch)
      const opened = yield* Effect.either(Effect.scoped(open(dir)))
      expect(Either.isLeft(opened) && opened.left._tag).toBe("DataDirError")
      expect(Either.isLeft(opened) && opened.left.message).toContain("not a journal segment")
      expect(fs.readFileSync(outside, "utf8")).toBe("untouched")
    }))
})

describe("the commit log's format", () => {
  const entries = (n: number, epoch: number, salt = 0xabcdef) =>
    encodeBatch({ epoch, salt }, Array.from({ length: n }, (_, i) => ({ path: Buffer.from(`sessions/s${i}/journal/x.seg`), position: i * 10, pieces: [Buffer.from(`bytes-${i}`), Buffer.from("!")] })))

  it("a prefix of a log needs more only while its scan stopped at a header or a sound header's body cut by the prefix: zeros (a log sized ahead) or a broken header end it", () => {
    const one = entries(2, 5)
    const two = entries(3, 5)
    const zeros = Buffer.alloc(4096)
    const whole = Buffer.concat([one, two, zeros])
    for (let cut = 0; cut < one.length + two.length + 28; cut++) {
      expect(scanNeedsMore(whole.subarray(0, cut)), `cut at ${cut}`).toBe(true)
    }
    for (let cut = one.length + two.length + 28; cut <= whole.length; cut++) {
      expect(scanNeedsMore(whole.subarray(0, cut)), `cut at ${cut}`).toBe(false)
    }
    const broken = Buffer.from(Buffer.concat([one, two]))
    broken[one.length + 3] ^= 0xff
    expect(scanNeedsMore(broken)).toBe(false)
  })

  it("batches read back as written; a cut anywhere inside the last leaves exactly the ones before it", () => {
    const one = entries(2, 5)
    const two = entries(3, 5)
    const whole = Buffer.concat([one, two])
    const scanned = scanLog(whole)
    expect(scanned.epoch).toBe(5)
    expect(scanned.end).toBe(whole.length)
    expect(scanned.batches.map((b) => b.map((e) => [e.path, e.position, Buffer.from(e.bytes).toString()]))).toEqual([
      [["sessions/s0/journal/x.seg", 0, "bytes-0!"], ["sessions/s1/journal/x.seg", 10, "bytes-1!"]],
      [["sessions/s0/journal/x.seg", 0, "bytes-0!"], ["sessions/s1/journal/x.seg", 10, "bytes-1!"], ["sessions/s2/journal/x.seg", 20, "bytes-2!"]]
    ])
    for (let cut = one.length; cut < whole.length; cut++) {
      const s = scanLog(whole.subarray(0, cut))
      expect(s.batches.length, `cut at ${cut}`).toBe(1)
      expect(s.end).toBe(one.length)
    }
  })

  it("a flipped byte in a batch ends the log there; a batch of another epoch after the first (left from an earlier use of the file) is not read", () => {
    const one = entries(2, 9)
    const two = entries(1, 9)
    for (let at = 0; at < two.length; at++) {
      const damaged = Buffer.from(two)
      damaged[at] = damaged[at]! ^ 0x40
      expect(scanLog(Buffer.concat([one, damaged])).batches.length, `byte ${at}`).toBe(1)
    }
    expect(scanLog(Buffer.concat([one, entries(1, 8)])).batches.length).toBe(1)
    expect(scanLog(Buffer.concat([entries(1, 8), one])).epoch).toBe(8)
    expect(scanLog(Buffer.alloc(4096)).batches.length).toBe(0)
  })

  it("a batch of the same epoch but another salt is not this use's: a header forged inside a payload, or left by another use, ends the log", () => {
    const one = entries(2, 9)
    expect(scanLog(Buffer.concat([one, entries(1, 9, 0x123456)])).batches.length).toBe(1)
    // A whole well-formed batch carried as an entry's bytes (a payload is anyone's text): read as
    // the entry's bytes, and when the log is cut so that the scan lands on it, still not a batch.
    const forged = entries(1, 9, 0x777777)
    const carrier = encodeBatch({ epoch: 9, salt: 0xabcdef }, [{ path: Buffer.from("sessions/s/journal/x.seg"), position: 0, pieces: [forged] }])
    expect(scanLog(Buffer.concat([one, carrier])).batches.length).toBe(2)
    const inner = carrier.indexOf(forged)
    expect(scanLog(Buffer.concat([one, carrier.subarray(inner)])).batches.length).toBe(1)
  })
})
