/**
 * Crash and corruption on real files (DESIGN §2, open/recovery rules and data directory).
 *
 * Each test writes a session with JournalFile.make, closes its scope, damages the files with
 * node:fs the way a crash or a bad disk would, and opens the directory again with a fresh
 * JournalFile.make in a new scope. Frame boundaries are found by a small parser here, not by the
 * code under test, so a bug in the frame reader cannot hide itself.
 *
 * The tests run on the live clock (the data-directory lock waits in real time), except the one
 * that needs to move time backwards.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import * as zlib from "node:zlib"
import { spawn, spawnSync } from "node:child_process"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Exit, Fiber, Scope, TestClock, TestContext } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry, type JournalRecord } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import { lengthCrc } from "../../src/layers/journal/Frame.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { tempDir } from "../support/journals.js"
import { checkpointFile, type FrameAt, framesOf, wellFramed } from "../support/frames.js"

const kv = (key: string, value: unknown) => entry("kv_put", { key, value })

/**
 * Without a commit log: these tests damage frames as a crash or a bad disk would once the commit
 * log no longer holds them (a torn write is one whose round was never acknowledged, so never
 * logged). With the log, the same damage to frames it still holds is written over at the next
 * start (test/layers/CommitLog.test.ts).
 */
const openJournal = (dataDir: string, options: Omit<JournalFile.JournalFileOptions, "dataDir"> = {}) =>
  JournalFile.make({ dataDir, ...options, limits: { commitLogBytes: 0, ...options.limits } }).pipe(Effect.provide(nodeFiles))

/** Opens the data directory in its own scope, runs `use`, and closes it (lock released) after. */
const withJournal = <A, E>(
  dataDir: string,
  use: (journal: JournalShape) => Effect.Effect<A, E>,
  options: Omit<JournalFile.JournalFileOptions, "dataDir"> = {}
) => Effect.scoped(Effect.flatMap(openJournal(dataDir, options), use))

const journalDirOf = (dataDir: string, session: SessionId) => path.join(dataDir, "sessions", session, "journal")

/** The session's segment files, in name order (absolute paths; JournalCorrupt names them relative to the data directory). */
const segmentsOf = (dataDir: string, session: SessionId) => {
  const dir = journalDirOf(dataDir, session)
  return fs.readdirSync(dir).filter((n) => n.endsWith(".seg")).sort().map((n) => path.join(dir, n))
}

const onlySegment = (dataDir: string, session: SessionId) => {
  const segs = segmentsOf(dataDir, session)
  expect(segs.length).toBe(1)
  return segs[0]!
}

/** Creates a session and appends one record per value, each its own append. */
const writeSession = (dataDir: string, session: SessionId, count: number, value: (i: number) => unknown = (i) => ({ i })) =>
  withJournal(dataDir, (journal) =>
    Effect.gen(function*() {
      yield* journal.create(session)
      for (let i = 1; i <= count; i++) yield* journal.append(session, [kv(`k${i}`, value(i))])
    }))

/** The error a fresh open gives for the session (lastSequence forces the open). */
const openError = (dataDir: string, session: SessionId) =>
  withJournal(dataDir, (journal) => Effect.flip(journal.lastSequence(session)))

const keysOf = (records: ReadonlyArray<{ readonly payload: any }>) => records.map((r) => r.payload.key)

/** A frame header whose length checksum is right, followed by `rest` bytes of 0x22. */
const validHeader = (length: number, rest: number) => {
  const b = Buffer.alloc(12 + rest, 0x22)
  b.writeUInt32LE(length, 0)
  b.writeUInt32LE(zlib.crc32(b.subarray(0, 4)), 4)
  return b
}

const range = (from: number, to: number) => Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i)

describe("JournalFile recovery: torn final writes", () => {
  it.scopedLive("a final frame torn at any byte is dropped: open keeps exactly the frames before it, truncates the file to their end, and the next append reuses the sequence", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 5)
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      const frames = framesOf(original)
      expect(frames.map((f) => f.sequence)).toEqual([1, 2, 3, 4, 5])
      expect(frames[4]!.end).toBe(original.length)
      const last = frames[4]!

      for (let cut = last.start; cut < last.end; cut++) {
        fs.writeFileSync(seg, original.subarray(0, cut))
        yield* withJournal(dir, (journal) =>
          Effect.gen(function*() {
            expect(yield* journal.lastSequence(s), `cut at ${cut}`).toBe(4)
            expect(fs.statSync(seg).size, `cut at ${cut}: truncated to the previous frame's end`).toBe(last.start)
            const records = yield* journal.read(s, { after: 0, limit: 100 })
            expect(records.map((r) => r.sequence), `cut at ${cut}`).toEqual([1, 2, 3, 4])
            expect(records.map((r) => r.payload), `cut at ${cut}`).toEqual(range(1, 4).map((i) => ({ key: `k${i}`, value: { i } })))
            expect(yield* journal.append(s, [kv("again", cut)]), `cut at ${cut}`).toEqual([5])
          }))
        // The new frame was written where the torn one began, not after the torn bytes.
        const after = fs.readFileSync(seg)
        expect(framesOf(after).map((f) => f.sequence), `cut at ${cut}`).toEqual([1, 2, 3, 4, 5])
        expect(after.subarray(0, last.start).equals(original.subarray(0, last.start)), `cut at ${cut}`).toBe(true)
      }

      // And the repaired journal opens clean with the new record.
      const records = yield* withJournal(dir, (journal) => journal.read(s, { after: 0, limit: 100 }))
      expect(keysOf(records)).toEqual(["k1", "k2", "k3", "k4", "again"])
    }))

  it.scopedLive("a torn atomic append is dropped whole: cut anywhere inside [b,c,d], even right after c, open keeps only [a]", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          expect(yield* journal.append(s, [kv("a", 0)])).toEqual([1])
          expect(yield* journal.append(s, [kv("b", 1), kv("c", 2), kv("d", 3)])).toEqual([2, 3, 4])
        }))
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      const frames = framesOf(original)
      expect(frames.map((f) => f.sequence)).toEqual([1, 2, 3, 4])
      const [a, b, c, d] = frames as [FrameAt, FrameAt, FrameAt, FrameAt]

      const cuts = range(a.end + 1, d.end - 1)
      // The cuts that leave whole frames of the group behind are the ones that matter most.
      expect(cuts).toContain(b.end)
      expect(cuts).toContain(c.end)
      for (const cut of cuts) {
        fs.writeFileSync(seg, original.subarray(0, cut))
        yield* withJournal(dir, (journal) =>
          Effect.gen(function*() {
            expect(yield* journal.lastSequence(s), `cut at ${cut}`).toBe(1)
            expect(fs.statSync(seg).size, `cut at ${cut}`).toBe(a.end)
            expect(keysOf(yield* journal.read(s, { after: 0, limit: 100 })), `cut at ${cut}`).toEqual(["a"])
            expect(yield* journal.append(s, [kv("e", 4)]), `cut at ${cut}`).toEqual([2])
          }))
      }
      const records = yield* withJournal(dir, (journal) => journal.read(s, { after: 0, limit: 100 }))
      expect(keysOf(records)).toEqual(["a", "e"])
    }))

  it.scopedLive("staged records are one atomic append with the append that writes them: cut anywhere inside [b,c,d] (b, c staged), open keeps only [a]; staged and never written, they leave nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          expect(yield* journal.append(s, [kv("a", 0)])).toEqual([1])
          expect(yield* journal.stage(s, [kv("b", 1), kv("c", 2)])).toMatchObject({ _tag: "Staged" })
          expect(yield* journal.append(s, [kv("d", 3)])).toEqual([4])
          // Staged when the journal closes: never written.
          expect(yield* journal.stage(s, [kv("never", 4)])).toMatchObject({ _tag: "Staged" })
        }))
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      const frames = framesOf(original)
      expect(frames.map((f) => f.sequence)).toEqual([1, 2, 3, 4])
      const [a, b, c, d] = frames as [FrameAt, FrameAt, FrameAt, FrameAt]
      for (const cut of [b.end - 1, b.end, c.end, d.end - 1]) {
        fs.writeFileSync(seg, original.subarray(0, cut))
        yield* withJournal(dir, (journal) =>
          Effect.gen(function*() {
            expect(yield* journal.lastSequence(s), `cut at ${cut}`).toBe(1)
            expect(fs.statSync(seg).size, `cut at ${cut}`).toBe(a.end)
          }))
      }
    }))

  it.scopedLive("staged records flushed alone are one complete atomic group: a new process reads them back whole, and a cut inside them keeps neither", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          expect(yield* journal.append(s, [kv("a", 0)])).toEqual([1])
          expect(yield* journal.stage(s, [kv("b", 1), kv("c", 2)])).toMatchObject({ _tag: "Staged" })
          yield* journal.flush(s)
        }))
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      const frames = framesOf(original)
      expect(frames.map((f) => f.sequence)).toEqual([1, 2, 3])
      expect(keysOf(yield* withJournal(dir, (journal) => journal.read(s, { after: 0, limit: 100 })))).toEqual(["a", "b", "c"])
      const [a, b] = frames as [FrameAt, FrameAt, FrameAt]
      for (const cut of [b.end - 1, b.end]) {
        fs.writeFileSync(seg, original.subarray(0, cut))
        yield* withJournal(dir, (journal) =>
          Effect.gen(function*() {
            expect(yield* journal.lastSequence(s), `cut at ${cut}`).toBe(1)
            expect(fs.statSync(seg).size, `cut at ${cut}`).toBe(a.end)
          }))
      }
    }))

  it.scopedLive("a zero-filled tail on the final segment is an unwritten torn write and is truncated", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 5)
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      for (const zeros of [1, 11, 12, 13, 4096]) {
        fs.writeFileSync(seg, Buffer.concat([original, Buffer.alloc(zeros)]))
        yield* withJournal(dir, (journal) =>
          Effect.gen(function*() {
            expect(yield* journal.lastSequence(s), `${zeros} zero bytes`).toBe(5)
            expect(fs.statSync(seg).size, `${zeros} zero bytes`).toBe(original.length)
            expect(yield* journal.append(s, [kv("next", zeros)]), `${zeros} zero bytes`).toEqual([6])
            expect(keysOf(yield* journal.read(s, { after: 4, limit: 10 })), `${zeros} zero bytes`).toEqual(["k5", "next"])
          }))
      }

      // Zeros after the first whole frame of an atomic append: the append is still incomplete.
      fs.writeFileSync(seg, original)
      yield* withJournal(dir, (journal) => journal.append(s, [kv("b", 1), kv("c", 2)]))
      const grouped = fs.readFileSync(seg)
      const b = framesOf(grouped)[5]!
      expect(b.sequence).toBe(6)
      fs.writeFileSync(seg, Buffer.concat([grouped.subarray(0, b.end), Buffer.alloc(4096)]))
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          expect(yield* journal.lastSequence(s)).toBe(5)
          expect(fs.statSync(seg).size).toBe(original.length)
        }))
    }))

  it.scopedLive("a torn first record leaves what a creation cut off leaves: the open truncates it, finds no record, and the session is not found and removed", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 1)
      const seg = onlySegment(dir, s)
      fs.truncateSync(seg, fs.statSync(seg).size - 1)
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          expect((yield* Effect.flip(journal.lastSequence(s)))._tag).toBe("SessionNotFound")
          expect(fs.existsSync(path.join(dir, "sessions", s))).toBe(false)
          expect((yield* Effect.flip(journal.read(s, { after: 0, limit: 10 })))._tag).toBe("SessionNotFound")
          expect(yield* journal.list).toEqual([])
        }))
    }))

  it.scopedLive("a journal this process created holds no record until its first append, and is no debris meanwhile", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.create(s)
          expect(yield* journal.exists(s)).toBe(true)
          expect(yield* journal.lastSequence(s)).toBe(0)
          expect(yield* journal.read(s, { after: 0, limit: 10 })).toEqual([])
          expect(yield* journal.append(s, [kv("first", 1)])).toEqual([1])
        }))
      expect(keysOf(yield* withJournal(dir, (journal) => journal.read(s, { after: 0, limit: 10 })))).toEqual(["first"])
    }))

  it.scopedLive("a non-zero tail shorter than a header is torn; a full header of garbage, an impossible length or a repeated frame is corruption at its offset", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 5)
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)

      for (const short of [1, 7, 11]) {
        fs.writeFileSync(seg, Buffer.concat([original, Buffer.alloc(short, 0xab)]))
        const last = yield* withJournal(dir, (journal) => journal.lastSequence(s))
        expect(last, `${short} garbage bytes`).toBe(5)
        expect(fs.statSync(seg).size, `${short} garbage bytes`).toBe(original.length)
      }

      const tails = {
        "12 bytes of 0xab": Buffer.alloc(12, 0xab),
        "64 bytes of 0xab": Buffer.alloc(64, 0xab),
        "zeros then garbage": Buffer.concat([Buffer.alloc(4096), Buffer.from("garbage!")]),
        "a small length with a wrong header checksum": (() => {
          const b = Buffer.alloc(40, 0x11)
          b.writeUInt32LE(20, 0)
          return b
        })(),
        // A header whose own checksum holds but whose length is impossible is not a torn write,
        // even though the bytes end long before the length it claims.
        "a checksummed length above the maximum frame size": validHeader(0xffff_fff0, 100),
        "a checksummed length below the fixed body size": validHeader(5, 100),
        // A whole, valid frame replayed at the end: its sequence is not the next one.
        "a duplicate of the last frame": original.subarray(framesOf(original)[4]!.start)
      }
      for (const [name, tail] of Object.entries(tails)) {
        const damaged = Buffer.concat([original, tail])
        fs.writeFileSync(seg, damaged)
        const err = yield* openError(dir, s)
        expect(err._tag, name).toBe("JournalCorrupt")
        if (err._tag === "JournalCorrupt") {
          expect(err.file, name).toBe(path.relative(dir, seg))
          expect(err.offset, name).toBe(original.length)
        }
        // A refused session is left exactly as found.
        expect(fs.readFileSync(seg).equals(damaged), name).toBe(true)
      }
    }))
})

describe("JournalFile recovery: corruption refuses the session", () => {
  it("a frame's length checksum, computed without zlib, is zlib's CRC-32 of its four bytes, whatever they are", () => {
    const values = [0, 1, 0xff, 0x100, 0x7fffffff, 0x80000000, 0xffffffff, ...Array.from({ length: 5000 }, () => Math.floor(Math.random() * 2 ** 32))]
    for (const v of values) {
      const b = Buffer.alloc(7, 0xaa)
      b.writeUInt32LE(v, 2)
      expect(lengthCrc(b, 2), `${v}`).toBe(zlib.crc32(b.subarray(2, 6)))
    }
  })

  it.scopedLive("a flipped byte anywhere in a middle frame (length, checksums, sequence, time, kind, payload) refuses the session with JournalCorrupt naming the file and the frame's offset", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 5)
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      const middle = framesOf(original)[2]!
      expect(middle.sequence).toBe(3)

      for (let at = middle.start; at < middle.end; at++) {
        const damaged = Buffer.from(original)
        damaged[at] = damaged[at]! ^ 0xff
        fs.writeFileSync(seg, damaged)
        const errors = yield* withJournal(dir, (journal) =>
          Effect.all([
            Effect.flip(journal.lastSequence(s)),
            Effect.flip(journal.read(s, { after: 0, limit: 100 })),
            Effect.flip(journal.append(s, [kv("refused", at)]))
          ]))
        for (const err of errors) {
          expect(err._tag, `byte ${at - middle.start} of the frame`).toBe("JournalCorrupt")
          if (err._tag === "JournalCorrupt") {
            expect(err.session).toBe(s)
            expect(err.file, `byte ${at - middle.start}`).toBe(path.relative(dir, seg))
            expect(err.offset, `byte ${at - middle.start}`).toBe(middle.start)
          }
        }
        expect(fs.readFileSync(seg).equals(damaged), `byte ${at - middle.start}: file left as found`).toBe(true)
      }
    }))

  it.scopedLive("a complete final frame with a flipped byte is corruption, never a torn write to truncate", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 5)
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      const last = framesOf(original)[4]!

      for (let at = last.start; at < last.end; at++) {
        const damaged = Buffer.from(original)
        damaged[at] = damaged[at]! ^ 0x01
        fs.writeFileSync(seg, damaged)
        const err = yield* openError(dir, s)
        expect(err._tag, `byte ${at - last.start} of the final frame`).toBe("JournalCorrupt")
        if (err._tag === "JournalCorrupt") expect(err.offset, `byte ${at - last.start}`).toBe(last.start)
        expect(fs.statSync(seg).size, `byte ${at - last.start}: nothing truncated`).toBe(original.length)
      }
    }))

  it.scopedLive("damage to a non-final segment's tail refuses the session, even though later segments are intact", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const big = "x".repeat(300)
      yield* withJournal(
        dir,
        (journal) =>
          Effect.gen(function*() {
            yield* journal.create(s)
            for (let i = 1; i <= 30; i++) yield* journal.append(s, [kv(`k${i}`, big)])
          }),
        { limits: { rotateBytes: 4096 } }
      )
      const segs = segmentsOf(dir, s)
      expect(segs.length).toBeGreaterThanOrEqual(3)
      const originals = segs.map((p) => fs.readFileSync(p))
      const first = originals[0]!
      const frames = framesOf(first)
      const last = frames[frames.length - 1]!
      expect(last.end).toBe(first.length)

      const restore = () => segs.forEach((p, i) => fs.writeFileSync(p, originals[i]!))
      const cases: Array<{ name: string; bytes: Buffer; file: string; offset: number }> = [
        { name: "cut inside the last frame's body", bytes: first.subarray(0, last.start + 20), file: segs[0]!, offset: last.start },
        { name: "cut inside the last frame's header", bytes: first.subarray(0, last.start + 5), file: segs[0]!, offset: last.start },
        { name: "one byte missing", bytes: first.subarray(0, last.end - 1), file: segs[0]!, offset: last.start },
        { name: "a zero-filled tail", bytes: Buffer.concat([first, Buffer.alloc(4096)]), file: segs[0]!, offset: first.length },
        // A clean cut at a frame boundary leaves a gap in the sequence: the next segment is where it shows.
        { name: "the whole last frame missing", bytes: first.subarray(0, last.start), file: segs[1]!, offset: 0 }
      ]
      for (const c of cases) {
        restore()
        fs.writeFileSync(segs[0]!, c.bytes)
        const err = yield* openError(dir, s)
        expect(err._tag, c.name).toBe("JournalCorrupt")
        if (err._tag === "JournalCorrupt") {
          expect(err.file, c.name).toBe(path.relative(dir, c.file))
          expect(err.offset, c.name).toBe(c.offset)
        }
        expect(fs.readFileSync(segs[0]!).equals(c.bytes), `${c.name}: damaged segment left as found`).toBe(true)
        for (let i = 1; i < segs.length; i++) {
          expect(fs.readFileSync(segs[i]!).equals(originals[i]!), `${c.name}: segment ${i} untouched`).toBe(true)
        }
      }

      restore()
      const records = yield* withJournal(dir, (journal) => journal.read(s, { after: 0, limit: 100 }))
      expect(records.map((r) => r.sequence)).toEqual(range(1, 30))
    }))

  it.scopedLive("one damaged session does not stop another in the same data directory from opening, reading and appending", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const damaged = yield* mintSessionId
      const torn = yield* mintSessionId
      const healthy = yield* mintSessionId
      yield* writeSession(dir, damaged, 5)
      yield* writeSession(dir, torn, 5)
      yield* writeSession(dir, healthy, 5)

      const damagedSeg = onlySegment(dir, damaged)
      const bytes = fs.readFileSync(damagedSeg)
      const middle = framesOf(bytes)[2]!
      bytes[middle.start + 20] = bytes[middle.start + 20]! ^ 0xff
      fs.writeFileSync(damagedSeg, bytes)
      const tornSeg = onlySegment(dir, torn)
      fs.truncateSync(tornSeg, fs.statSync(tornSeg).size - 3)

      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          expect([...(yield* journal.list)].sort()).toEqual([damaged, torn, healthy].sort())
          // Opened concurrently: the refusal of one must not fail the others' opens.
          const [bad, tornLast, healthyLast] = yield* Effect.all([
            Effect.either(journal.lastSequence(damaged)),
            journal.lastSequence(torn),
            journal.lastSequence(healthy)
          ], { concurrency: "unbounded" })
          expect(Either.isLeft(bad) && bad.left._tag).toBe("JournalCorrupt")
          expect(tornLast).toBe(4)
          expect(healthyLast).toBe(5)
          expect(keysOf(yield* journal.read(healthy, { after: 0, limit: 100 }))).toEqual(["k1", "k2", "k3", "k4", "k5"])
          expect(yield* journal.append(healthy, [kv("more", 1)])).toEqual([6])
          expect(yield* journal.append(torn, [kv("more", 1)])).toEqual([5])
          // Still refused on every later access, not only the first.
          const again = yield* Effect.either(journal.append(damaged, [kv("refused", 1)]))
          expect(Either.isLeft(again) && again.left._tag).toBe("JournalCorrupt")
          expect(yield* journal.append(healthy, [kv("more", 2)])).toEqual([7])
        }))

      const [healthyRecords, tornRecords] = yield* withJournal(dir, (journal) =>
        Effect.all([journal.read(healthy, { after: 0, limit: 100 }), journal.read(torn, { after: 0, limit: 100 })]))
      expect(keysOf(healthyRecords)).toEqual(["k1", "k2", "k3", "k4", "k5", "more", "more"])
      expect(keysOf(tornRecords)).toEqual(["k1", "k2", "k3", "k4", "more"])
      expect(fs.readFileSync(damagedSeg).equals(bytes)).toBe(true)
    }))
})


/** Records that are not records of the catalogue, each in a frame whose checksums hold. */
const unreadable = [
  { name: "a payload that is not JSON", kind: "kv_put", json: "{not json" },
  { name: "an unknown kind", kind: "bogus_kind", json: "{}" },
  { name: "a known kind whose payload breaks its schema", kind: "turn_ended", json: `{"sequence":"x"}` }
]

describe("JournalFile recovery: a well-framed record that cannot be read is corruption", () => {
  it.scopedLive("a middle or final frame whose checksums hold but whose record is not JSON, of an unknown kind or against its kind's schema refuses the session with JournalCorrupt at that frame, and nothing is truncated", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 5)
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      const frames = framesOf(original)
      const middle = frames[2]!
      for (const bad of unreadable) {
        const cases = [
          {
            where: "middle",
            bytes: Buffer.concat([
              original.subarray(0, middle.start),
              wellFramed(3, bad.kind, bad.json),
              original.subarray(middle.end)
            ]),
            offset: middle.start
          },
          {
            where: "final",
            bytes: Buffer.concat([original, wellFramed(6, bad.kind, bad.json)]),
            offset: original.length
          }
        ]
        for (const c of cases) {
          const what = `${bad.name}, ${c.where} frame`
          fs.writeFileSync(seg, c.bytes)
          const errors = yield* withJournal(dir, (journal) =>
            Effect.all([
              Effect.flip(journal.lastSequence(s)),
              Effect.flip(journal.read(s, { after: 0, limit: 100 })),
              Effect.flip(journal.append(s, [kv("refused", 1)]))
            ]))
          for (const err of errors) {
            expect(err._tag, what).toBe("JournalCorrupt")
            if (err._tag === "JournalCorrupt") {
              expect(err.file, what).toBe(path.relative(dir, seg))
              expect(err.offset, what).toBe(c.offset)
              expect(err.reason, what).toContain("unreadable record")
            }
          }
          expect(fs.readFileSync(seg).equals(c.bytes), `${what}: file left as found`).toBe(true)
        }
      }
    }))

  it.scopedLive("a well-framed unreadable record that appears after open is refused by the read that meets it, as JournalCorrupt naming the frame, never a defect", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      // Enough records that the early ones are read from the file, not the recent tail in memory.
      yield* writeSession(dir, s, 100)
      const seg = onlySegment(dir, s)
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          expect(yield* journal.lastSequence(s)).toBe(100)
          const bytes = fs.readFileSync(seg)
          const tenth = framesOf(bytes)[9]!
          // The same size, so every offset the open found still holds.
          const jsonBytes = tenth.end - tenth.start - 12 - 18 - Buffer.byteLength(tenth.kind)
          const replaced = wellFramed(10, tenth.kind, "x".repeat(jsonBytes))
          expect(replaced.length).toBe(tenth.end - tenth.start)
          replaced.copy(bytes, tenth.start)
          fs.writeFileSync(seg, bytes)
          const err = yield* Effect.flip(journal.read(s, { after: 0, limit: 100 }))
          expect(err._tag).toBe("JournalCorrupt")
          if (err._tag === "JournalCorrupt") {
            expect(err.offset).toBe(tenth.start)
            expect(err.reason).toContain("kv_put payload is not JSON")
          }
        }))
    }))
})

describe("JournalFile recovery: frames a valid checkpoint covers", () => {
  /** Records 1–100, a checkpoint through `through` (valid unless `checkpoint` says otherwise), then the segment as `damage` makes it. */
  const coveredSession = (
    through: number,
    damage: (original: Buffer, frames: ReadonlyArray<FrameAt>) => Buffer,
    checkpoint: (session: SessionId, covered: JournalRecord) => Buffer = checkpointFile
  ) =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 100)
      const [covered] = yield* withJournal(dir, (journal) => journal.read(s, { after: through - 1, limit: 1 }))
      fs.writeFileSync(path.join(dir, "sessions", s, "checkpoint"), checkpoint(s, covered!))
      const seg = onlySegment(dir, s)
      const original = fs.readFileSync(seg)
      const frames = framesOf(original)
      fs.writeFileSync(seg, damage(original, frames))
      return { dir, s, seg, frames }
    })

  /** Frame `sequence` (1-based) replaced by `frame`. */
  const replaced = (sequence: number, frame: Buffer) => (original: Buffer, frames: ReadonlyArray<FrameAt>) =>
    Buffer.concat([original.subarray(0, frames[sequence - 1]!.start), frame, original.subarray(frames[sequence - 1]!.end)])

  it.scopedLive("a record a valid checkpoint covers whose checksums hold but which cannot be read opens, and the read that meets it refuses it as JournalCorrupt naming the frame, never serving it", () =>
    Effect.gen(function*() {
      for (const bad of unreadable) {
        const { dir, s, seg, frames } = yield* coveredSession(90, replaced(10, wellFramed(10, bad.kind, bad.json)))
        yield* withJournal(dir, (journal) =>
          Effect.gen(function*() {
            expect(yield* journal.lastSequence(s), bad.name).toBe(100)
            for (const from of [0, 5, 9]) {
              const err = yield* Effect.flip(journal.read(s, { after: from, limit: 100 }))
              expect(err._tag, bad.name).toBe("JournalCorrupt")
              if (err._tag === "JournalCorrupt") {
                expect(err.file, bad.name).toBe(path.relative(dir, seg))
                expect(err.offset, bad.name).toBe(frames[9]!.start)
                expect(err.reason, bad.name).toContain("unreadable record")
              }
            }
            // The records around it are served, checked as every read checks them.
            expect(keysOf(yield* journal.read(s, { after: 0, limit: 9 }))).toEqual(range(1, 9).map((i) => `k${i}`))
            expect(keysOf(yield* journal.read(s, { after: 10, limit: 100 }))).toEqual(range(11, 100).map((i) => `k${i}`))
            // Appends go on after it.
            expect(yield* journal.append(s, [kv("after", 1)])).toEqual([101])
          }))
      }
    }))

  it.scopedLive("a checkpoint that does not hold covers nothing: damaged, of another record at its sequence, past the journal's end, of another session or format, the open refuses a record it claims to cover that cannot be read, as before", () =>
    Effect.gen(function*() {
      const bad = wellFramed(10, "turn_ended", `{"sequence":"x"}`)
      const cases: Array<{ name: string; through: number; checkpoint: (session: SessionId, covered: JournalRecord) => Buffer }> = [
        {
          name: "a byte of its state flipped",
          through: 90,
          checkpoint: (session, covered) => {
            const file = checkpointFile(session, covered)
            file[file.length - 3] ^= 0x01
            return file
          }
        },
        { name: "another record at its sequence", through: 90, checkpoint: (session, covered) => checkpointFile(session, { ...covered, payload: { key: "other", value: 0 } }) },
        { name: "a sequence past the journal's end", through: 90, checkpoint: (session, covered) => checkpointFile(session, { ...covered, sequence: 150 }) },
        { name: "another session's", through: 90, checkpoint: (_session, covered) => checkpointFile(Effect.runSync(mintSessionId), covered) },
        {
          name: "another format",
          through: 90,
          checkpoint: (session, covered) => {
            const json = checkpointFile(session, covered).subarray(9).toString("utf8").replace(`"brain-checkpoint/3"`, `"brain-checkpoint/2"`)
            return Buffer.from(`${zlib.crc32(Buffer.from(json, "utf8")).toString(16).padStart(8, "0")}\n${json}`, "utf8")
          }
        },
        { name: "through the unreadable record itself", through: 10, checkpoint: checkpointFile }
      ]
      for (const c of cases) {
        const { dir, s, seg, frames } = yield* coveredSession(c.through, replaced(10, bad), c.checkpoint)
        const err = yield* openError(dir, s)
        expect(err._tag, c.name).toBe("JournalCorrupt")
        if (err._tag === "JournalCorrupt") {
          expect(err.file, c.name).toBe(path.relative(dir, seg))
          expect(err.offset, c.name).toBe(frames[9]!.start)
          expect(err.reason, c.name).toContain("unreadable record")
        }
      }
    }))

  it.scopedLive("frames a valid checkpoint covers are still checked at open by their checksums, bounds and density", () =>
    Effect.gen(function*() {
      const cases: Array<{ name: string; damage: (original: Buffer, frames: ReadonlyArray<FrameAt>) => Buffer; reason: string }> = [
        {
          name: "a flipped payload byte",
          damage: (original, frames) => {
            const damaged = Buffer.from(original)
            damaged[frames[9]!.end - 2] ^= 0x01
            return damaged
          },
          reason: "frame body checksum mismatch"
        },
        {
          name: "a flipped length byte",
          damage: (original, frames) => {
            const damaged = Buffer.from(original)
            damaged[frames[9]!.start] ^= 0x01
            return damaged
          },
          reason: "frame header checksum mismatch"
        },
        { name: "a sequence out of place", damage: replaced(10, wellFramed(11, "kv_put", `{"key":"k10","value":{"i":10}}`)), reason: "sequence 11 where 10 was expected" }
      ]
      for (const c of cases) {
        const { dir, s, seg, frames } = yield* coveredSession(90, c.damage)
        const err = yield* openError(dir, s)
        expect(err._tag, c.name).toBe("JournalCorrupt")
        if (err._tag === "JournalCorrupt") {
          expect(err.file, c.name).toBe(path.relative(dir, seg))
          expect(err.offset, c.name).toBe(frames[9]!.start)
          expect(err.reason, c.name).toContain(c.reason)
        }
      }
    }))

  it.scopedLive("a record a valid checkpoint covers that the recent tail would serve from memory is checked at open: one that cannot be read refuses the session", () =>
    Effect.gen(function*() {
      const { dir, s, seg, frames } = yield* coveredSession(100, replaced(99, wellFramed(99, "turn_ended", `{"sequence":"x"}`)))
      const err = yield* openError(dir, s)
      expect(err._tag).toBe("JournalCorrupt")
      if (err._tag === "JournalCorrupt") {
        expect(err.file).toBe(path.relative(dir, seg))
        expect(err.offset).toBe(frames[98]!.start)
        expect(err.reason).toContain("unreadable record")
      }
    }))

  it.scopedLive("a torn final write after the records a valid checkpoint covers is truncated as without one", () =>
    Effect.gen(function*() {
      const { dir, s, seg, frames } = yield* coveredSession(90, (original, frames) => original.subarray(0, frames[99]!.end - 3))
      yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          expect(yield* journal.lastSequence(s)).toBe(99)
          expect(fs.statSync(seg).size).toBe(frames[98]!.end)
          expect(keysOf(yield* journal.read(s, { after: 0, limit: 100 }))).toEqual(range(1, 99).map((i) => `k${i}`))
        }))
    }))
})

describe("JournalFile recovery: segments", () => {
  it.scopedLive("a session of many segments reads back dense and in order across every boundary after reopen; segments are named by their first sequence", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const big = "y".repeat(280)
      const limits = { rotateBytes: 4096 }
      // Singles and atomic triples, so groups meet segment boundaries too.
      const expected: Array<string> = []
      yield* withJournal(
        dir,
        (journal) =>
          Effect.gen(function*() {
            yield* journal.create(s)
            for (let n = 0; n < 60; n++) {
              const keys = n % 3 === 2 ? [`g${n}.0`, `g${n}.1`, `g${n}.2`] : [`s${n}`]
              const seqs = yield* journal.append(s, keys.map((k) => kv(k, big)))
              expect(seqs).toEqual(range(expected.length + 1, expected.length + keys.length))
              expected.push(...keys)
            }
          }),
        { limits }
      )
      const total = expected.length
      expect(total).toBe(100)

      const checkSegments = () => {
        const segs = segmentsOf(dir, s)
        expect(segs.length).toBeGreaterThanOrEqual(5)
        let next = 1
        for (const seg of segs) {
          const bytes = fs.readFileSync(seg)
          const frames = framesOf(bytes)
          expect(frames.length, seg).toBeGreaterThan(0)
          expect(frames[frames.length - 1]!.end, seg).toBe(bytes.length)
          expect(path.basename(seg)).toBe(`${String(next).padStart(20, "0")}.seg`)
          expect(frames.map((f) => f.sequence), seg).toEqual(range(next, next + frames.length - 1))
          expect(bytes.length, seg).toBeLessThanOrEqual(limits.rotateBytes)
          next += frames.length
        }
        return next - 1
      }
      expect(checkSegments()).toBe(total)

      yield* withJournal(
        dir,
        (journal) =>
          Effect.gen(function*() {
            expect(yield* journal.lastSequence(s)).toBe(total)
            const all = yield* journal.read(s, { after: 0, limit: 1000 })
            expect(all.map((r) => r.sequence)).toEqual(range(1, total))
            expect(keysOf(all)).toEqual(expected)
            expect(all.every((r) => r.payload.value === big)).toBe(true)
            // From every cursor, a short page is the next records in order.
            for (let after = 0; after < total; after++) {
              const page = yield* journal.read(s, { after, limit: 3 })
              expect(page.map((r) => r.sequence), `after ${after}`).toEqual(range(after + 1, Math.min(after + 3, total)))
            }
            // Paging by a byte bound walks the whole journal without a gap or a repeat.
            const seen: Array<number> = []
            let after = 0
            for (;;) {
              const page = yield* journal.read(s, { after, limit: 1000, maxBytes: 1500 })
              if (page.length === 0) break
              seen.push(...page.map((r) => r.sequence))
              after = page[page.length - 1]!.sequence
            }
            expect(seen).toEqual(range(1, total))
            // Appending after reopen continues in order, across further rotations.
            for (let n = 0; n < 20; n++) expect(yield* journal.append(s, [kv(`t${n}`, big)])).toEqual([total + n + 1])
            expected.push(...range(0, 19).map((n) => `t${n}`))
            expect(keysOf(yield* journal.read(s, { after: total - 5, limit: 1000 }))).toEqual(expected.slice(total - 5))
          }),
        { limits }
      )

      expect(checkSegments()).toBe(total + 20)
      const all = yield* withJournal(dir, (journal) => journal.read(s, { after: 0, limit: 1000 }), { limits })
      expect(keysOf(all)).toEqual(expected)
    }))
})

describe("JournalFile recovery: crashes around segments", () => {
  const limits = { rotateBytes: 4096 }
  const big = "w".repeat(300)
  const writeSegmented = (dir: string, s: SessionId, count: number) =>
    withJournal(dir, (journal) =>
      Effect.gen(function*() {
        yield* journal.create(s)
        for (let i = 1; i <= count; i++) yield* journal.append(s, [kv(`k${i}`, big)])
      }), { limits })

  it.scopedLive("an empty final segment (a crash right after rotation created it) opens clean and the next append fills it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSegmented(dir, s, 30)
      const before = segmentsOf(dir, s)
      const created = path.join(journalDirOf(dir, s), `${String(31).padStart(20, "0")}.seg`)
      expect(before).not.toContain(created)
      for (const leftover of [Buffer.alloc(0), validHeader(400, 50)]) {
        fs.writeFileSync(created, leftover)
        yield* withJournal(
          dir,
          (journal) =>
            Effect.gen(function*() {
              expect(yield* journal.lastSequence(s)).toBe(30)
              expect(fs.statSync(created).size).toBe(0)
              expect((yield* journal.read(s, { after: 25, limit: 100 })).map((r) => r.sequence)).toEqual([26, 27, 28, 29, 30])
            }),
          { limits }
        )
      }
      yield* withJournal(dir, (journal) => journal.append(s, [kv("k31", big)]), { limits })
      expect(segmentsOf(dir, s)).toEqual([...before, created])
      expect(framesOf(fs.readFileSync(created)).map((f) => f.sequence)).toEqual([31])
      const all = yield* withJournal(dir, (journal) => journal.read(s, { after: 0, limit: 100 }), { limits })
      expect(all.map((r) => r.sequence)).toEqual(range(1, 31))
    }))

  it.scopedLive("a torn write at the end of the last of many segments is truncated there and earlier segments are kept whole", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSegmented(dir, s, 30)
      const segs = segmentsOf(dir, s)
      const final = segs[segs.length - 1]!
      const bytes = fs.readFileSync(final)
      const frames = framesOf(bytes)
      const last = frames[frames.length - 1]!
      expect(last.sequence).toBe(30)
      fs.truncateSync(final, last.start + 100)
      yield* withJournal(
        dir,
        (journal) =>
          Effect.gen(function*() {
            expect(yield* journal.lastSequence(s)).toBe(29)
            expect(fs.statSync(final).size).toBe(last.start)
            expect((yield* journal.read(s, { after: 0, limit: 100 })).map((r) => r.sequence)).toEqual(range(1, 29))
            expect(yield* journal.append(s, [kv("again", big)])).toEqual([30])
          }),
        { limits }
      )
      expect(segmentsOf(dir, s)).toEqual(segs)
    }))

  it.scopedLive("a missing segment (first or middle) refuses the session: the sequence would have a gap", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSegmented(dir, s, 40)
      const segs = segmentsOf(dir, s)
      expect(segs.length).toBeGreaterThanOrEqual(3)
      const saved = segs.map((p) => fs.readFileSync(p))
      for (const gone of [0, 1]) {
        fs.unlinkSync(segs[gone]!)
        const err = yield* openError(dir, s)
        expect(err._tag, `segment ${gone} missing`).toBe("JournalCorrupt")
        if (err._tag === "JournalCorrupt") {
          expect(err.file, `segment ${gone} missing`).toBe(path.relative(dir, segs[gone + 1]!))
          expect(err.offset).toBe(0)
        }
        fs.writeFileSync(segs[gone]!, saved[gone]!)
      }
    }))
})

describe("JournalFile recovery: time", () => {
  // TestClock: the clock moves backwards between the two processes' lives.
  it.scoped("recorded_at_ms never goes backwards across a reopen, even when the clock does", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const future = 4_000_000_000_000
      yield* TestClock.setTime(future)
      yield* writeSession(dir, s, 3)
      yield* TestClock.setTime(1_000)
      const records = yield* withJournal(dir, (journal) =>
        Effect.gen(function*() {
          yield* journal.append(s, [kv("later", 1)])
          return yield* journal.read(s, { after: 0, limit: 10 })
        }))
      expect(records.map((r) => r.recorded_at_ms)).toEqual([future, future, future, future])
    }))
})

describe("JournalFile data directory", () => {
  it.scopedLive("a second open in the process that holds the data directory is refused at once, the holder unaffected; once the first closes, it opens", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      const first = yield* Scope.make()
      const journal = yield* Scope.extend(openJournal(dir), first)
      yield* journal.create(s)
      yield* journal.append(s, [kv("k", 1)])

      // This process will not exit to let go of it: waiting (here up to ten minutes, past the
      // test's timeout, so an open that waited would not be refused here) would only delay the refusal.
      const second = yield* Effect.either(Effect.scoped(openJournal(dir, { lockWaitMs: 600_000 })))
      expect(Either.isLeft(second) && second.left._tag).toBe("DataDirError")
      expect(Either.isLeft(second) && String((second.left as { reason?: string }).reason)).toContain("another runtime of this process")
      // The holder is unaffected by the refused open.
      expect(yield* journal.append(s, [kv("k", 2)])).toEqual([2])

      yield* Scope.close(first, Exit.void)
      expect(fs.existsSync(path.join(dir, "lock"))).toBe(false)
      // With no wait for a live owner (0 ms): taken at once, or refused.
      const last = yield* withJournal(dir, (j) => j.lastSequence(s), { lockWaitMs: 0 })
      expect(last).toBe(2)
    }))

  it.scopedLive("a lock another live process holds is waited for the bounded time, then refused; once that process is gone, it is taken", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 2)
      const lock = path.join(dir, "lock")
      const holder = spawn("sleep", ["30"], { stdio: "ignore" })
      yield* Effect.addFinalizer(() => Effect.sync(() => holder.kill("SIGKILL")))
      const stat = fs.readFileSync(`/proc/${holder.pid}/stat`, "utf8")
      fs.writeFileSync(lock, `${holder.pid} ${stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]}\n`)

      // The wait on a clock the test moves, 50 ms at a time, once the open is waiting on it (or done):
      // still waiting before 200 ms, refused at 200 ms, whatever the machine's load.
      const { refused, waited } = yield* Effect.gen(function*() {
        const open = yield* Effect.fork(Effect.either(Effect.scoped(openJournal(dir, { lockWaitMs: 200 }))))
        let waited = 0
        for (;;) {
          while (open.unsafePoll() === null && (yield* TestClock.sleeps()).length === 0) yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
          if (open.unsafePoll() !== null) break
          expect(waited).toBeLessThan(200)
          yield* TestClock.adjust("50 millis")
          waited += 50
        }
        return { refused: yield* Fiber.join(open), waited }
      }).pipe(Effect.provide(TestContext.TestContext))
      expect(Either.isLeft(refused) && refused.left._tag).toBe("DataDirError")
      expect(Either.isLeft(refused) && String((refused.left as { reason?: string }).reason)).toContain("another live process")
      expect(waited).toBe(200)
      expect(fs.readFileSync(lock, "utf8")).toContain(String(holder.pid))

      const exited = new Promise((resolve) => holder.once("exit", resolve))
      holder.kill("SIGKILL")
      yield* Effect.promise(() => exited)
      expect(yield* withJournal(dir, (j) => j.lastSequence(s), { lockWaitMs: 0 })).toBe(2)
      expect(fs.existsSync(lock)).toBe(false)
    }))

  it.scopedLive("a new empty directory gets the format marker; a non-empty directory without one is refused and left as found", () =>
    Effect.gen(function*() {
      const root = yield* tempDir()
      const fresh = path.join(root, "fresh")
      yield* withJournal(fresh, () => Effect.void)
      expect(fs.readFileSync(path.join(fresh, "format"), "utf8").trim()).toBe("brain-ts/2")
      // Reopening its own format is fine.
      yield* withJournal(fresh, () => Effect.void)

      const foreign = path.join(root, "foreign")
      fs.mkdirSync(foreign)
      fs.writeFileSync(path.join(foreign, "notes.txt"), "someone else's files\n")
      const refused = yield* Effect.either(Effect.scoped(openJournal(foreign, { lockWaitMs: 0 })))
      expect(Either.isLeft(refused) && refused.left._tag).toBe("DataDirError")
      if (Either.isLeft(refused)) expect(refused.left.reason).toMatch(/format/)
      // Nothing written, and no lock left behind by the refused open.
      expect(fs.readdirSync(foreign)).toEqual(["notes.txt"])
    }))

  it.scopedLive("a first start killed while writing the format marker (only format.tmp left) does not block the restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      fs.writeFileSync(path.join(dir, "format.tmp"), "brain-t")
      const opened = yield* Effect.either(withJournal(dir, () => Effect.void, { lockWaitMs: 0 }))
      expect(Either.isRight(opened), Either.isLeft(opened) ? opened.left.message : "").toBe(true)
      expect(fs.readFileSync(path.join(dir, "format"), "utf8").trim()).toBe("brain-ts/2")
    }))

  it.scopedLive("a format marker naming another format is refused and left unchanged", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      fs.writeFileSync(path.join(dir, "format"), "brain-rs/1\n")
      const refused = yield* Effect.either(Effect.scoped(openJournal(dir, { lockWaitMs: 0 })))
      expect(Either.isLeft(refused) && refused.left._tag).toBe("DataDirError")
      if (Either.isLeft(refused)) expect(refused.left.reason).toMatch(/brain-rs\/1/)
      expect(fs.readFileSync(path.join(dir, "format"), "utf8")).toBe("brain-rs/1\n")
      expect(fs.readdirSync(dir)).toEqual(["format"])
    }))

  it.scopedLive("a stale lock (its process is gone, or its pid now names another process) is taken over without waiting", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const s = yield* mintSessionId
      yield* writeSession(dir, s, 2)
      const lock = path.join(dir, "lock")

      const exited = spawnSync(process.execPath, ["-e", ""])
      expect(exited.status).toBe(0)
      const stale = [`${exited.pid} -\n`, `${exited.pid} 12345\n`, `${process.pid} 1\n`]
      for (const owner of stale) {
        fs.writeFileSync(lock, owner)
        // With no wait for a live owner (0 ms): a stale lock is taken at once, or the open refused.
        const last = yield* withJournal(dir, (j) => j.lastSequence(s), { lockWaitMs: 0 })
        expect(last, owner).toBe(2)
        expect(fs.existsSync(lock), `${owner}: released on close`).toBe(false)
      }
    }))
})
