/**
 * The room on disk a turn or a create needs (layers/sessions/StorageRoom.ts): the free-disk
 * watermark reads the file system's free bytes at most once per DISK_STAT_INTERVAL_MS, whatever the
 * number of requests, and refuses below it with `overloaded` naming the setting; a session's journal
 * at BRAIN_MAX_SESSION_JOURNAL_BYTES refuses a turn with `conflict` and `session_journal_limit`;
 * and a running turn's write that would pass the journal's bound is refused `turn_write_limit`.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, TestClock } from "effect"
import { DISK_STAT_INTERVAL_MS } from "../../src/domain/Limits.js"
import { freeBytesOf } from "../../src/layers/JournalFile.js"
import type { Cell } from "../../src/layers/sessions/Cell.js"
import { makeStorageRoom } from "../../src/layers/sessions/StorageRoom.js"
import { writeRefusal } from "../../src/layers/sessions/TurnWrites.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { defaults } from "../../src/services/ServerConfig.js"

/** A journal answering only what the room reads: its size and its free bytes, each call counted. */
const fakeJournal = (state: { free: number | undefined; size: number; stats: number }) =>
  ({
    freeBytes: Effect.sync(() => {
      state.stats++
      return state.free
    }),
    size: () => Effect.sync(() => state.size)
  }) as unknown as JournalShape

const cell = { session: "ses_00000000000000000000000000" } as unknown as Cell

describe("the room on disk for turns and creates", () => {
  it.effect("the free bytes are read at most once per DISK_STAT_INTERVAL_MS, however many requests ask; below BRAIN_MIN_FREE_DISK_BYTES creates and turns are refused overloaded naming the setting, and admitted again once a new reading is above it", () =>
    Effect.gen(function*() {
      const state = { free: 10_000, size: 0, stats: 0 }
      const room = yield* makeStorageRoom(fakeJournal(state), { ...defaults, minFreeDiskBytes: 5_000 })
      for (let i = 0; i < 100; i++) {
        yield* room.forCreate
        yield* room.forTurn(cell)
      }
      expect(state.stats).toBe(1)
      state.free = 100
      // The reading stands for its interval: still admitted.
      yield* room.forCreate
      expect(state.stats).toBe(1)
      yield* TestClock.adjust(DISK_STAT_INTERVAL_MS + 1)
      const create = yield* Effect.either(room.forCreate)
      const turn = yield* Effect.either(Effect.asVoid(room.forTurn(cell)))
      expect(state.stats).toBe(2)
      for (const r of [create, turn]) {
        expect(Either.isLeft(r)).toBe(true)
        if (Either.isLeft(r)) {
          expect(r.left).toMatchObject({ code: "overloaded", retryable: true, details: { setting: "BRAIN_MIN_FREE_DISK_BYTES", limit: 5_000, free_bytes: 100 } })
          expect(r.left.message).toContain("BRAIN_MIN_FREE_DISK_BYTES")
        }
      }
      state.free = 6_000
      yield* TestClock.adjust(DISK_STAT_INTERVAL_MS + 1)
      yield* room.forCreate
      expect(state.stats).toBe(3)
    }))

  it.effect("requests arriving while the free bytes are being read wait for that one reading, and one of them interrupted leaves the reading to the others", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const state = { stats: 0 }
      const journal = {
        freeBytes: Effect.zipRight(Effect.sync(() => state.stats++), Effect.as(Deferred.await(gate), 100)),
        size: () => Effect.succeed(0)
      } as unknown as JournalShape
      const room = yield* makeStorageRoom(journal, { ...defaults, minFreeDiskBytes: 5_000 })
      const waiting = yield* Effect.forEach(Array.from({ length: 10 }, (_, i) => i), () => Effect.fork(Effect.either(room.forCreate)))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(waiting[0]!)
      yield* Deferred.succeed(gate, undefined)
      const answers = yield* Effect.forEach(waiting.slice(1), Fiber.join)
      expect(state.stats).toBe(1)
      for (const a of answers) expect(Either.isLeft(a) && a.left).toMatchObject({ code: "overloaded", details: { free_bytes: 100 } })
      // The reading stands for its interval after it was taken.
      expect(Either.isLeft(yield* Effect.either(room.forCreate))).toBe(true)
      expect(state.stats).toBe(1)
    }))

  it.effect("with BRAIN_MIN_FREE_DISK_BYTES 0 the free bytes are never read, and a file system that cannot say them refuses nothing", () =>
    Effect.gen(function*() {
      const off = { free: 0, size: 0, stats: 0 }
      const roomOff = yield* makeStorageRoom(fakeJournal(off), { ...defaults, minFreeDiskBytes: 0 })
      yield* roomOff.forCreate
      yield* roomOff.forTurn(cell)
      expect(off.stats).toBe(0)
      const unknown = { free: undefined, size: 0, stats: 0 }
      const roomUnknown = yield* makeStorageRoom(fakeJournal(unknown), { ...defaults, minFreeDiskBytes: 5_000 })
      yield* roomUnknown.forCreate
      expect(unknown.stats).toBe(1)
    }))

  it.effect("the free bytes of a real directory are a positive number, and of a missing one unknown", () =>
    Effect.gen(function*() {
      const free = yield* freeBytesOf(process.cwd())
      expect(free).toBeGreaterThan(0)
      expect(yield* freeBytesOf("/no/such/directory/for/brain")).toBe(undefined)
    }))

  it.effect("a session whose journal has reached BRAIN_MAX_SESSION_JOURNAL_BYTES starts no turn (conflict, session_journal_limit); below it the turn is told the journal's bytes; 0 is no bound", () =>
    Effect.gen(function*() {
      const state = { free: undefined, size: 1_000, stats: 0 }
      const room = yield* makeStorageRoom(fakeJournal(state), { ...defaults, maxSessionJournalBytes: 1_000 })
      const refused = yield* Effect.either(room.forTurn(cell))
      expect(Either.isLeft(refused) && refused.left).toMatchObject({
        code: "conflict",
        retryable: false,
        details: { reason: "session_journal_limit", setting: "BRAIN_MAX_SESSION_JOURNAL_BYTES", limit: 1_000, journal_bytes: 1_000 }
      })
      state.size = 999
      expect(yield* room.forTurn(cell)).toBe(999)
      const unbounded = yield* makeStorageRoom(fakeJournal({ free: undefined, size: 10 ** 12, stats: 0 }), { ...defaults, maxSessionJournalBytes: 0 })
      expect(yield* unbounded.forTurn(cell)).toBe(undefined)
    }))

  it("a turn's write that would take the session's journal past its bound is refused turn_write_limit with the reason; one that fits, or with the bound off, is not", () => {
    const config = { maxTurnWriteBytes: 0, maxSessionJournalBytes: 1_000 }
    expect(writeRefusal(config, { journalBytes: 600, writtenBytes: 300 }, 100)).toBe(undefined)
    expect(writeRefusal(config, { journalBytes: 600, writtenBytes: 300 }, 101)).toMatchObject({
      code: "turn_write_limit",
      details: { reason: "session_journal_limit", setting: "BRAIN_MAX_SESSION_JOURNAL_BYTES", limit: 1_000, journal_bytes: 900 }
    })
    expect(writeRefusal({ ...config, maxSessionJournalBytes: 0 }, { journalBytes: 600, writtenBytes: 300 }, 10_000)).toBe(undefined)
    expect(writeRefusal(config, { writtenBytes: 300 }, 10_000)).toBe(undefined)
  })
})
