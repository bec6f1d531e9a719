/**
 * The Journal contract: every implementation must pass this suite.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Exit, Fiber, type Scope, Stream } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import type { JournalAppendError, JournalShape } from "../../src/services/Journal.js"
import type { Entry } from "../../src/domain/Records.js"
import type { SessionId } from "../../src/domain/Ids.js"
import type { JournalHarness } from "../support/journals.js"

const kv = (key: string, value: unknown) => entry("kv_put", { key, value })

/** A few milliseconds of the host's time (the suite runs under the test clock). */
const realPause = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 5)))

/** `enqueue`'s answer: whether it took the append, and every exit `done` was called with (once the append settles). */
const enqueued = (journal: JournalShape, session: SessionId, entries: ReadonlyArray<Entry>) =>
  Effect.gen(function*() {
    const exits: Array<Exit.Exit<ReadonlyArray<number>, JournalAppendError>> = []
    let answer: ((exit: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void) | undefined
    const taken = journal.enqueue!(session, entries, (exit) => {
      exits.push(exit)
      answer?.(exit)
    })
    if (taken && exits.length === 0) {
      yield* Effect.async<void>((resume) => {
        answer = () => resume(Effect.void)
      })
    }
    yield* realPause // a second answer would come by now
    return { taken, exits }
  })

export const journalContract = (name: string, harness: Effect.Effect<JournalHarness, unknown, Scope.Scope>) =>
  describe(`Journal contract: ${name}`, () => {
    it.scoped("appends get dense sequences from 1 in order and read back exactly", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        expect(yield* journal.lastSequence(s)).toBe(0)
        const got: Array<number> = []
        for (let i = 0; i < 10; i++) got.push(...(yield* journal.append(s, [kv(`k${i}`, { i })])))
        expect(got).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        const records = yield* journal.read(s, { after: 0, limit: 100 })
        expect(records.map((r) => r.sequence)).toEqual(got)
        expect(records.map((r) => r.payload)).toEqual(got.map((_, i) => ({ key: `k${i}`, value: { i } })))
        expect(yield* journal.lastSequence(s)).toBe(10)
      }))

    it.scoped("size is 0 for an empty journal and grows with each durable append by at least its records' JSON, by the same for the same records", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        expect(yield* journal.size(s)).toBe(0)
        const big = "x".repeat(10_000)
        yield* journal.append(s, [kv("a", big)])
        const one = yield* journal.size(s)
        expect(one).toBeGreaterThan(10_000)
        yield* journal.append(s, [kv("b", big)])
        expect(yield* journal.size(s)).toBe(2 * one)
        expect(yield* Effect.flip(journal.size(yield* mintSessionId))).toMatchObject({ _tag: "SessionNotFound" })
      }))

    it.scoped("a multi-record append gets consecutive sequences, never interleaved with concurrent appends", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        const results = yield* Effect.forEach(
          Array.from({ length: 20 }, (_, i) => i),
          (i) => journal.append(s, [kv(`a${i}`, 1), kv(`b${i}`, 2), kv(`c${i}`, 3)]),
          { concurrency: "unbounded" }
        )
        for (const seqs of results) expect(seqs).toEqual([seqs[0], seqs[0]! + 1, seqs[0]! + 2])
        const all = results.flat().sort((a, b) => a - b)
        expect(all).toEqual(Array.from({ length: 60 }, (_, i) => i + 1))
        const records = yield* journal.read(s, { after: 0, limit: 1000 })
        for (const [i, seqs] of results.entries()) {
          expect(records[seqs[0]! - 1]!.payload.key).toBe(`a${i}`)
          expect(records[seqs[2]! - 1]!.payload.key).toBe(`c${i}`)
        }
      }))

    it.scoped("reads page by cursor, limit and byte bound, and the first record always comes", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        for (let i = 0; i < 250; i++) yield* journal.append(s, [kv("k", "x".repeat(100))])
        const page1 = yield* journal.read(s, { after: 0, limit: 100 })
        const page2 = yield* journal.read(s, { after: 100, limit: 100 })
        const page3 = yield* journal.read(s, { after: 200, limit: 100 })
        expect(page1.map((r) => r.sequence)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1))
        expect(page2[0]!.sequence).toBe(101)
        expect(page3.length).toBe(50)
        expect(yield* journal.read(s, { after: 250, limit: 100 })).toEqual([])
        const bounded = yield* journal.read(s, { after: 0, limit: 1000, maxBytes: 1000 })
        expect(bounded.length).toBeGreaterThan(1)
        expect(bounded.length).toBeLessThan(10)
        const one = yield* journal.read(s, { after: 7, limit: 1000, maxBytes: 1 })
        expect(one.map((r) => r.sequence)).toEqual([8])
      }))

    it.scoped("enqueue, where offered: queued at once, answered exactly once with the sequences append would give, durable and read back in order with appends", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        if (journal.enqueue === undefined) return
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [kv("a", 1)])
        const first = yield* enqueued(journal, s, [kv("b", 2), kv("c", 3)])
        expect(first.taken).toBe(true)
        expect(first.exits).toEqual([Exit.succeed([2, 3])])
        expect(yield* journal.append(s, [kv("d", 4)])).toEqual([4])
        const records = yield* journal.read(s, { after: 0, limit: 10 })
        expect(records.map((r) => [r.sequence, r.payload.key])).toEqual([[1, "a"], [2, "b"], [3, "c"], [4, "d"]])
        expect(yield* journal.lastSequence(s)).toBe(4)
      }))

    it.scoped("enqueue's sequenced, where offered: told once, before done, the very sequences done answers (after what is staged); never for a record refused", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        if (journal.enqueue === undefined) return
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [kv("a", 1)])
        yield* journal.stage(s, [kv("staged", 2)])
        const seen: Array<string> = []
        let told: ReadonlyArray<number> | undefined
        yield* Effect.async<void>((resume) => {
          const taken = journal.enqueue!(s, [kv("b", 3), kv("c", 4)], (exit) => {
            seen.push(`done ${Exit.isSuccess(exit) ? exit.value.join(",") : "failed"}`)
            expect(Exit.isSuccess(exit) && exit.value).toEqual(told)
            resume(Effect.void)
          }, {
            sequenced: (sequences) => {
              told = sequences
              seen.push(`sequenced ${sequences.join(",")}`)
            }
          })
          expect(taken).toBe(true)
        })
        yield* realPause
        expect(seen).toEqual(["sequenced 3,4", "done 3,4"])
        let refusedTold = false
        const bad = yield* Effect.async<Exit.Exit<ReadonlyArray<number>, JournalAppendError>>((resume) => {
          journal.enqueue!(s, [{ kind: "kv_put", payload: { key: 7 } } as unknown as Entry], (exit) => resume(Effect.succeed(exit)), {
            sequenced: () => void (refusedTold = true)
          })
        })
        yield* realPause
        expect(Exit.isFailure(bad)).toBe(true)
        expect(refusedTold).toBe(false)
        expect(yield* journal.lastSequence(s)).toBe(4)
      }))

    it.scoped("enqueue refuses a bad record through done (RecordRejected, nothing written) and takes nothing for a session not open", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        if (journal.enqueue === undefined) return
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [kv("a", 1)])
        const bad = yield* enqueued(journal, s, [kv("b", 2), { kind: "kv_put", payload: { key: 7 } } as unknown as Entry])
        expect(bad.taken).toBe(true)
        expect(bad.exits.length).toBe(1)
        expect(String(Exit.isFailure(bad.exits[0]!) ? bad.exits[0]!.cause : "")).toMatch(/RecordRejected/)
        expect(yield* journal.lastSequence(s)).toBe(1)
        const unknown = yield* mintSessionId
        let called = false
        expect(journal.enqueue(unknown, [kv("x", 1)], () => void (called = true))).toBe(false)
        yield* realPause
        expect(called).toBe(false)
        expect(yield* journal.exists(unknown)).toBe(false)
      }))

    it.scoped("enqueue on a copy of the journal with its own append takes nothing: the decorator's append sees every append", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        if (journal.enqueue === undefined) return
        const s = yield* mintSessionId
        yield* journal.create(s)
        const seen: Array<number> = []
        const decorated: JournalShape = { ...journal, append: (session, entries, options) => Effect.tap(journal.append(session, entries, options), (seqs) => void seen.push(...seqs)) }
        let called = false
        expect(decorated.enqueue!(s, [kv("x", 1)], () => void (called = true))).toBe(false)
        expect(called).toBe(false)
        expect(yield* journal.lastSequence(s)).toBe(0)
        expect(yield* decorated.append(s, [kv("y", 2)])).toEqual([1])
        expect(seen).toEqual([1])
      }))

    it.scoped("recorded_at_ms never goes backwards within a session", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        for (let i = 0; i < 20; i++) yield* journal.append(s, [kv("k", i)])
        const records = yield* journal.read(s, { after: 0, limit: 100 })
        for (let i = 1; i < records.length; i++) {
          expect(records[i]!.recorded_at_ms).toBeGreaterThanOrEqual(records[i - 1]!.recorded_at_ms)
        }
      }))

    it.scoped("a subscriber sees records committed after it subscribed, each already durable and readable", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [kv("before", 0)])
        const feed = yield* journal.subscribe(s)
        const seen = yield* Effect.forkScoped(
          feed.pipe(
            Stream.take(5),
            Stream.mapEffect((r) =>
              Effect.map(journal.lastSequence(s), (last) => ({ sequence: r.sequence, readable: last >= r.sequence }))
            ),
            Stream.runCollect
          )
        )
        for (let i = 0; i < 5; i++) yield* journal.append(s, [kv("after", i)])
        const got = Chunk.toArray(yield* Fiber.join(seen))
        expect(got.map((g) => g.sequence)).toEqual([2, 3, 4, 5, 6])
        expect(got.every((g) => g.readable)).toBe(true)
      }))

    it.scoped("a failed write is sticky: that session refuses every later append, others go on", () =>
      Effect.gen(function*() {
        const { journal, failNextWrite } = yield* harness
        const s = yield* mintSessionId
        const other = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.create(other)
        yield* journal.append(s, [kv("ok", 1)])
        failNextWrite(s)
        const first = yield* Effect.either(journal.append(s, [kv("lost", 2)]))
        expect(Either.isLeft(first) && first.left._tag).toBe("JournalWriteFailed")
        const later = yield* Effect.either(journal.append(s, [kv("refused", 3)]))
        expect(Either.isLeft(later) && later.left._tag).toBe("JournalWriteFailed")
        expect((yield* journal.read(s, { after: 0, limit: 10 })).map((r) => r.payload.key)).toEqual(["ok"])
        expect(yield* journal.append(other, [kv("fine", 1)])).toEqual([1])
      }))

    it.scoped("reset ends a failure's stickiness: the journal holds what was stored, appends resume densely; reset of a healthy journal changes nothing", () =>
      Effect.gen(function*() {
        const { journal, failNextWrite } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [kv("ok", 1)])
        yield* journal.reset(s)
        expect(yield* journal.append(s, [kv("still", 2)])).toEqual([2])
        failNextWrite(s)
        expect(Either.isLeft(yield* Effect.either(journal.append(s, [kv("lost", 3)])))).toBe(true)
        expect(Either.isLeft(yield* Effect.either(journal.append(s, [kv("refused", 4)])))).toBe(true)
        yield* journal.reset(s)
        expect(yield* journal.lastSequence(s)).toBe(2)
        expect(yield* journal.append(s, [kv("again", 5)])).toEqual([3])
        expect((yield* journal.read(s, { after: 0, limit: 10 })).map((r) => r.payload.key)).toEqual(["ok", "still", "again"])
      }))

    it.scoped("staged records take the next sequences and their time at once, no read, lastSequence or subscriber sees them, and the next append writes them ahead of its own", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [kv("a", 0)])
        const feed = yield* journal.subscribe(s)
        const seen = yield* Effect.forkScoped(feed.pipe(Stream.take(3), Stream.runCollect))
        const staged = yield* journal.stage(s, [kv("b", 1), kv("c", 2)])
        expect(staged._tag).toBe("Staged")
        const records = staged._tag === "Staged" ? staged.records : []
        expect(records.map((r) => [r.sequence, r.kind, r.payload])).toEqual([[2, "kv_put", { key: "b", value: 1 }], [3, "kv_put", { key: "c", value: 2 }]])
        expect(yield* journal.lastSequence(s)).toBe(1)
        expect(yield* journal.read(s, { after: 0, limit: 10 })).toHaveLength(1)
        expect(yield* journal.append(s, [kv("d", 3)])).toEqual([4])
        const all = yield* journal.read(s, { after: 0, limit: 10 })
        expect(all.map((r) => r.payload.key)).toEqual(["a", "b", "c", "d"])
        // What stage answered is what is read: sequences and time.
        expect(all.slice(1, 3)).toEqual(records)
        expect(all[3]!.recorded_at_ms).toBeGreaterThanOrEqual(records[0]!.recorded_at_ms)
        expect(Chunk.toArray(yield* Fiber.join(seen)).map((r) => r.sequence)).toEqual([2, 3, 4])
      }))

    it.scoped("flush writes the staged records alone, durably and in order, ahead of what follows; with nothing staged it writes nothing", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.flush(s)
        expect(yield* journal.lastSequence(s)).toBe(0)
        yield* journal.append(s, [kv("a", 0)])
        yield* journal.stage(s, [kv("b", 1), kv("c", 2)])
        yield* journal.flush(s)
        expect(yield* journal.lastSequence(s)).toBe(3)
        expect((yield* journal.read(s, { after: 0, limit: 10 })).map((r) => r.payload.key)).toEqual(["a", "b", "c"])
        yield* journal.flush(s)
        expect(yield* journal.append(s, [kv("d", 3)])).toEqual([4])
        expect((yield* journal.read(s, { after: 0, limit: 10 })).map((r) => r.payload.key)).toEqual(["a", "b", "c", "d"])
      }))

    it.scoped("a stage while records are staged and nothing else is in flight joins them: the sequences after theirs, their time, nothing durable yet, all written ahead of the next append; bad input to stage is refused and stages nothing", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        const refused = yield* Effect.either(journal.stage(s, [entry("kv_put", { nope: true } as never)]))
        expect(Either.isLeft(refused) && refused.left._tag).toBe("RecordRejected")
        const first = yield* journal.stage(s, [kv("a", 0), kv("b", 1)])
        const second = yield* journal.stage(s, [kv("c", 2)])
        expect(first._tag).toBe("Staged")
        expect(second._tag).toBe("Staged")
        const staged = [...(first._tag === "Staged" ? first.records : []), ...(second._tag === "Staged" ? second.records : [])]
        expect(staged.map((r) => [r.sequence, r.payload.key])).toEqual([[1, "a"], [2, "b"], [3, "c"]])
        expect(new Set(staged.map((r) => r.recorded_at_ms)).size).toBe(1)
        expect(yield* journal.lastSequence(s)).toBe(0)
        expect(yield* journal.read(s, { after: 0, limit: 10 })).toEqual([])
        expect(yield* journal.append(s, [kv("d", 3)])).toEqual([4])
        const all = yield* journal.read(s, { after: 0, limit: 10 })
        expect(all.slice(0, 3)).toEqual(staged)
        expect(all.map((r) => r.payload.key)).toEqual(["a", "b", "c", "d"])
      }))

    it.scoped("a stage while an append is in flight (records staged or not) appends, after it: a staged record never overtakes an append", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        const alone = yield* Effect.fork(journal.append(s, [kv("a", 0)]))
        yield* Effect.yieldNow()
        expect(yield* journal.stage(s, [kv("b", 1)])).toEqual({ _tag: "Appended", sequences: [2] })
        expect(yield* Fiber.join(alone)).toEqual([1])
        yield* journal.stage(s, [kv("c", 2)])
        const carrying = yield* Effect.fork(journal.append(s, [kv("d", 3)]))
        yield* Effect.yieldNow()
        expect(yield* journal.stage(s, [kv("e", 4)])).toEqual({ _tag: "Appended", sequences: [5] })
        expect(yield* Fiber.join(carrying)).toEqual([4])
        expect((yield* journal.read(s, { after: 0, limit: 10 })).map((r) => r.payload.key)).toEqual(["a", "b", "c", "d", "e"])
      }))

    it.scoped("stageNow stages as stage does, in the same step, joining records already staged; it does nothing (undefined) where stage would append or refuse: an append in flight, bad input, a session not open", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [kv("a", 0)])
        const staged = yield* journal.stage(s, [kv("b", 1)])
        const now = journal.stageNow?.(s, [kv("c", 2)])
        expect(now?.map((r) => [r.sequence, r.payload.key])).toEqual([[3, "c"]])
        expect(now![0]!.recorded_at_ms).toBe(staged._tag === "Staged" ? staged.records[0]!.recorded_at_ms : -1)
        expect(journal.stageNow?.(s, [entry("kv_put", { nope: true } as never)])).toBeUndefined()
        expect(yield* journal.lastSequence(s)).toBe(1)
        const carrying = yield* Effect.fork(journal.append(s, [kv("d", 3)]))
        yield* Effect.yieldNow()
        expect(journal.stageNow?.(s, [kv("e", 4)])).toBeUndefined()
        expect(yield* Fiber.join(carrying)).toEqual([4])
        expect((yield* journal.read(s, { after: 0, limit: 10 })).map((r) => [r.sequence, r.payload.key])).toEqual([[1, "a"], [2, "b"], [3, "c"], [4, "d"]])
        const other = yield* mintSessionId
        expect(journal.stageNow?.(other, [kv("x", 0)])).toBeUndefined()
      }))

    it.scoped("reset drops staged records (the next append takes their sequences); a failed write loses them with its own records", () =>
      Effect.gen(function*() {
        const { journal, failNextWrite } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.stage(s, [kv("dropped", 0)])
        yield* journal.reset(s)
        expect(yield* journal.append(s, [kv("a", 1)])).toEqual([1])
        yield* journal.stage(s, [kv("lost", 2)])
        failNextWrite(s)
        const failed = yield* Effect.either(journal.append(s, [kv("lost too", 3)]))
        expect(Either.isLeft(failed) && failed.left._tag).toBe("JournalWriteFailed")
        yield* journal.reset(s)
        expect(yield* journal.append(s, [kv("b", 4)])).toEqual([2])
        expect((yield* journal.read(s, { after: 0, limit: 10 })).map((r) => r.payload.key)).toEqual(["a", "b"])
      }))

    it.scoped("a record of several MiB reads back whole once it is no longer among the recent records", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        const big = "b".repeat(3 * 1024 * 1024)
        // Sequence 64 starts a read exactly at the big frame (a file journal indexes every 64th).
        for (let i = 1; i < 64; i++) yield* journal.append(s, [kv(`before${i}`, i)])
        yield* journal.append(s, [kv("big", big)])
        for (let i = 0; i < 300; i++) yield* journal.append(s, [kv(`after${i}`, i)])
        const [alone] = yield* journal.read(s, { after: 63, limit: 1 })
        expect(alone!.sequence).toBe(64)
        expect(alone!.payload.value).toBe(big)
        const around = yield* journal.read(s, { after: 62, limit: 3 })
        expect(around.map((r) => r.payload.key)).toEqual(["before63", "big", "after0"])
      }))

    it.scoped("bad input is refused with a typed error and writes nothing", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [kv("k", 1)])
        const bad = [
          [{ kind: "no_such_kind", payload: {} }],
          [kv("k", 1), { kind: "kv_put", payload: { key: 5 } }],
          [{ kind: "kv_put", payload: { key: "k", value: 1, extra: true } }],
          [{ kind: "transcript_delta", payload: { keep: -1, append: [] } }],
          [kv("k", 10n)],
          []
        ] as const
        for (const entries of bad) {
          const result = yield* Effect.either(journal.append(s, entries as any))
          expect(Either.isLeft(result) && result.left._tag).toBe("RecordRejected")
        }
        expect(yield* journal.lastSequence(s)).toBe(1)
        expect(yield* journal.append(s, [kv("k", 2)])).toEqual([2])
      }))

    it.scoped("remove deletes a journal for good: later accesses are SessionNotFound and other sessions are untouched", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        const other = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.create(other)
        yield* journal.append(s, [kv("k", 1)])
        yield* journal.append(other, [kv("k", 1)])
        yield* journal.remove(s)
        expect(yield* journal.exists(s)).toBe(false)
        const after = yield* Effect.either(journal.append(s, [kv("k", 2)]))
        expect(Either.isLeft(after) && after.left._tag).toBe("SessionNotFound")
        const again = yield* Effect.either(journal.remove(s))
        expect(Either.isLeft(again) && again.left._tag).toBe("SessionNotFound")
        expect(yield* journal.lastSequence(other)).toBe(1)
      }))

    it.scoped("an unknown session is SessionNotFound; creating twice is SessionAlreadyExists", () =>
      Effect.gen(function*() {
        const { journal } = yield* harness
        const s = yield* mintSessionId
        const missing = yield* Effect.either(journal.append(s, [kv("k", 1)]))
        expect(Either.isLeft(missing) && missing.left._tag).toBe("SessionNotFound")
        expect(Either.isLeft(yield* Effect.either(journal.read(s, { after: 0, limit: 1 })))).toBe(true)
        expect(yield* journal.exists(s)).toBe(false)
        yield* journal.create(s)
        expect(yield* journal.exists(s)).toBe(true)
        expect((yield* journal.list).includes(s)).toBe(true)
        const again = yield* Effect.either(journal.create(s))
        expect(Either.isLeft(again) && again.left._tag).toBe("SessionAlreadyExists")
      }))
  })
