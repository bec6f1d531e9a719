/**
 * The durable idempotency store on real files: restart, torn and corrupt logs, compaction, group
 * commit and write failures. Each restart closes the store's scope and opens the same directory
 * again. Frame boundaries are found by a small parser here (DESIGN §2 layout), not by the code
 * under test.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, TestClock } from "effect"
import * as IdempotencyFile from "../../src/layers/IdempotencyFile.js"
import { FileDriver, type FileDriverShape, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { Idempotency, type Answer, type IdempotencyShape } from "../../src/services/Idempotency.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"
import { framesOf } from "../support/frames.js"

const RETENTION_MS = 60_000

type Options = Omit<IdempotencyFile.IdempotencyFileOptions, "dataDir">

const open = (dataDir: string, options: Partial<Options> = {}, driver: FileDriverShape = nodeDriver) =>
  IdempotencyFile.make({ dataDir, retentionMs: RETENTION_MS, ...options }).pipe(
    Effect.provide(Layer.succeed(FileDriver, driver))
  )

/** Opens the store in its own scope, runs `use`, and closes it after. */
const withStore = <A, E>(
  dataDir: string,
  use: (store: IdempotencyShape) => Effect.Effect<A, E>,
  options: Partial<Options> = {},
  driver?: FileDriverShape
) => Effect.scoped(Effect.flatMap(open(dataDir, options, driver), use))

const logOf = (dataDir: string) => path.join(dataDir, "idempotency", "claims.log")

const answer = (body: string): Answer => ({ status: 200, headers: { "content-type": "application/json" }, body })

/** Claims and answers each key in `answered`, and only claims each key in `unanswered`. */
const record = (store: IdempotencyShape, answered: ReadonlyArray<string>, unanswered: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    for (const k of answered) {
      expect((yield* store.claim("s", k, `h-${k}`))._tag).toBe("Claimed")
      yield* store.complete("s", k, answer(`answer ${k}`))
    }
    for (const k of unanswered) expect((yield* store.claim("s", k, `h-${k}`))._tag).toBe("Claimed")
  })

const expectReplay = (store: IdempotencyShape, k: string) =>
  Effect.map(store.claim("s", k, `h-${k}`), (r) => expect(r, k).toEqual({ _tag: "Replay", answer: answer(`answer ${k}`) }))

const expectAmbiguousFromLog = (store: IdempotencyShape, k: string) =>
  Effect.map(store.claim("s", k, `h-${k}`), (r) => expect(r, k).toEqual({ _tag: "Ambiguous", inFlight: false }))

describe("IdempotencyFile: restart", () => {
  it.scoped("claims and answers survive a restart: answered ⇒ Replay, claimed-not-answered ⇒ Ambiguous not in flight", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) => record(store, ["a", "b"], ["c"]))
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* expectReplay(store, "a")
          yield* expectReplay(store, "b")
          yield* expectAmbiguousFromLog(store, "c")
          expect(yield* store.claim("s", "c", "other")).toEqual({ _tag: "Conflict" })
          expect(yield* store.claim("s", "a", "other")).toEqual({ _tag: "Conflict" })
          yield* record(store, ["d"])
        }))
      // Sequences stay dense across opens: the second process appended after the first's records.
      const frames = framesOf(fs.readFileSync(logOf(dir)))
      expect(frames.map((f) => f.sequence)).toEqual([1, 2, 3, 4, 5, 6, 7])
      expect(frames.map((f) => f.kind)).toEqual(["idem_claim", "idem_answer", "idem_claim", "idem_answer", "idem_claim", "idem_claim", "idem_answer"])
      yield* withStore(dir, (store) => Effect.zipRight(expectReplay(store, "d"), expectAmbiguousFromLog(store, "c")))
    }))

  it.scoped("an entry that expired while the server was down is gone after the restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) => record(store, ["old"], ["old-unanswered"]))
      yield* TestClock.adjust(RETENTION_MS / 2)
      yield* withStore(dir, (store) => record(store, ["young"]))
      yield* TestClock.adjust(RETENTION_MS / 2)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          expect(yield* store.claim("s", "old", "new body")).toEqual({ _tag: "Claimed" })
          expect(yield* store.claim("s", "old-unanswered", "new body")).toEqual({ _tag: "Claimed" })
          yield* expectReplay(store, "young")
        }))
    }))
})

describe("IdempotencyFile: torn and corrupt logs", () => {
  it.scoped("a final record torn at any byte is truncated: the store opens with every record before it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) => record(store, ["a", "b"]))
      const log = logOf(dir)
      const original = fs.readFileSync(log)
      const frames = framesOf(original)
      expect(frames.length).toBe(4)
      const last = frames[3]!
      expect(last.kind).toBe("idem_answer")
      // Every cut inside the final answer, plus unwritten zero space after a whole log.
      const damaged = [
        ...Array.from({ length: last.end - last.start }, (_, i) => original.subarray(0, last.start + i)),
        Buffer.concat([original, Buffer.alloc(100)])
      ]
      for (const [i, bytes] of damaged.entries()) {
        fs.writeFileSync(log, bytes)
        yield* withStore(dir, (store) =>
          Effect.gen(function*() {
            const expectedSize = i === damaged.length - 1 ? original.length : last.start
            expect(fs.statSync(log).size, `case ${i}`).toBe(expectedSize)
            yield* expectReplay(store, "a")
            if (expectedSize === last.start) yield* expectAmbiguousFromLog(store, "b")
            else yield* expectReplay(store, "b")
          }))
      }
      // The repaired log takes new records after the kept ones and opens clean.
      yield* withStore(dir, (store) => record(store, ["c"]))
      expect(framesOf(fs.readFileSync(log)).map((f) => f.sequence)).toEqual([1, 2, 3, 4, 5, 6])
      yield* withStore(dir, (store) => expectReplay(store, "c"))
    }))

  it.scoped("a corrupt middle record refuses to open, naming the file and the offset, and changes nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) => record(store, ["a", "b"]))
      const log = logOf(dir)
      const original = fs.readFileSync(log)
      const frames = framesOf(original)
      for (const [what, at] of [["body", frames[1]!.end - 3], ["length", frames[1]!.start]] as const) {
        const damaged = Buffer.from(original)
        damaged[at] = damaged[at]! ^ 0x40
        fs.writeFileSync(log, damaged)
        const err = yield* Effect.flip(Effect.scoped(open(dir)))
        expect(err._tag, what).toBe("IdempotencyLogCorrupt")
        if (err._tag !== "IdempotencyLogCorrupt") return
        expect(err.file, what).toBe(log)
        expect(err.offset, what).toBe(frames[1]!.start)
        expect(err.message, what).toContain(`${log} is corrupt at offset ${frames[1]!.start}`)
        expect(fs.readFileSync(log).equals(damaged), what).toBe(true)
      }
    }))

  it.scoped("a stale rewrite file left by a crash is removed and the log is used as it is", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) => record(store, ["a"]))
      const stale = path.join(dir, "idempotency", "claims.log.rewrite.tmp")
      fs.writeFileSync(stale, "half a rewrite")
      yield* withStore(dir, (store) => expectReplay(store, "a"))
      expect(fs.existsSync(stale)).toBe(false)
    }))
})

describe("IdempotencyFile: compaction", () => {
  it.scoped("compaction rewrites the log to its live entries, and everything live survives a restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const old = Array.from({ length: 50 }, (_, i) => `old${i}`)
      const options = { limits: { rewriteDeadBytes: 0 } }
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, old)
          yield* TestClock.adjust(RETENTION_MS / 2)
          yield* record(store, ["live"], ["pending"])
          const before = fs.statSync(logOf(dir)).size
          yield* TestClock.adjust(RETENTION_MS / 2)
          expect(yield* store.compact).toBe(50)
          expect(fs.statSync(logOf(dir)).size).toBeLessThan(before / 10)
          // The store goes on appending to the rewritten log.
          yield* record(store, ["after"])
        }), options)
      const frames = framesOf(fs.readFileSync(logOf(dir)))
      expect(frames.map((f) => f.sequence)).toEqual([1, 2, 3, 4, 5])
      expect(fs.readdirSync(path.join(dir, "idempotency"))).toEqual(["claims.log"])
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* expectReplay(store, "live")
          yield* expectReplay(store, "after")
          yield* expectAmbiguousFromLog(store, "pending")
          for (const k of old) expect(yield* store.claim("s", k, "new body")).toEqual({ _tag: "Claimed" })
        }))
    }))

  it.scoped("a log with little dead weight is not rewritten", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, ["a", "b", "c"])
          yield* TestClock.adjust(RETENTION_MS / 2)
          yield* record(store, ["d", "e", "f", "g"])
          yield* TestClock.adjust(RETENTION_MS / 2)
          const before = fs.readFileSync(logOf(dir))
          expect(yield* store.compact).toBe(3)
          expect(fs.readFileSync(logOf(dir)).equals(before)).toBe(true)
        }), { limits: { rewriteDeadBytes: 0 } })
      yield* withStore(dir, (store) => expectReplay(store, "g"))
    }))

  it.scopedLive("claims and answers made while a rewrite runs are neither lost nor reordered", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      // The rewrite stops at its rename until released, with appends arriving meanwhile.
      const renaming = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const driver: FileDriverShape = {
        ...nodeDriver,
        rename: (from, to) =>
          Deferred.succeed(renaming, undefined).pipe(Effect.zipRight(Deferred.await(release)), Effect.zipRight(nodeDriver.rename(from, to)))
      }
      const retentionMs = 200
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          // Enough dead weight (more than the live entries) for compaction to rewrite.
          yield* record(store, Array.from({ length: 10 }, (_, i) => `expiring${i}`))
          yield* Effect.sleep(`${retentionMs} millis`)
          yield* record(store, ["kept"], ["kept-pending"])
          const compaction = yield* Effect.fork(store.compact)
          yield* Deferred.await(renaming).pipe(Effect.timeout("2 seconds"))
          const during = yield* Effect.fork(Effect.forEach(
            Array.from({ length: 20 }, (_, i) => `during${i}`),
            (k) => Effect.zipRight(store.claim("s", k, `h-${k}`), store.complete("s", k, answer(`answer ${k}`))),
            { concurrency: "unbounded", discard: true }
          ))
          yield* Effect.sleep("20 millis")
          // The appends wait for the rewrite: nothing is acknowledged into the file being replaced.
          expect(Option.isNone(yield* Fiber.poll(during))).toBe(true)
          yield* Deferred.succeed(release, undefined)
          expect(yield* Fiber.join(compaction)).toBe(10)
          yield* Fiber.join(during)
        }), { retentionMs, limits: { rewriteDeadBytes: 0 } }, driver)
      const frames = framesOf(fs.readFileSync(logOf(dir)))
      expect(frames.map((f) => f.sequence)).toEqual(Array.from({ length: 43 }, (_, i) => i + 1))
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* expectReplay(store, "kept")
          yield* expectAmbiguousFromLog(store, "kept-pending")
          for (let i = 0; i < 20; i++) yield* expectReplay(store, `during${i}`)
        }), { retentionMs: 60_000 })
    }))

  it.scopedLive("the layer compacts in the background on its interval (retention / 4 by default)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const retentionMs = 200
      const options = { dataDir: dir, retentionMs, compactEveryMs: 50, limits: { rewriteDeadBytes: 0 } }
      expect(IdempotencyFile.compactInterval({ dataDir: dir, retentionMs: 24 * 3600 * 1000 })).toBe(6 * 3600 * 1000)
      expect(IdempotencyFile.compactInterval({ dataDir: dir, retentionMs: 2_000 })).toBe(1_000)
      const context = yield* Layer.build(IdempotencyFile.layerNode(options))
      const store = yield* Effect.provide(Idempotency, context)
      yield* record(store, ["a"])
      const log = logOf(dir)
      expect(fs.statSync(log).size).toBeGreaterThan(0)
      // Expires at 200 ms; compactions run every 50 ms: the log is emptied soon after.
      let waited = 0
      while (fs.statSync(log).size > 0 && waited < 3_000) {
        yield* Effect.sleep("20 millis")
        waited += 20
      }
      expect(fs.statSync(log).size).toBe(0)
      expect(yield* store.claim("s", "a", "new body")).toEqual({ _tag: "Claimed" })
    }))
})

describe("IdempotencyFile: durability and group commit", () => {
  it.scopedLive("a claim is acknowledged only after its fdatasync, and a new log's directory is synced", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const gate = yield* Deferred.make<void>()
      let dirSyncs = 0
      const driver: FileDriverShape = {
        ...nodeDriver,
        fdatasync: (fd) => Effect.zipRight(Deferred.await(gate), nodeDriver.fdatasync(fd)),
        syncDir: (p) => Effect.zipRight(Effect.sync(() => dirSyncs++), nodeDriver.syncDir(p))
      }
      const store = yield* open(dir, {}, driver)
      expect(dirSyncs).toBeGreaterThanOrEqual(1)
      const claim = yield* Effect.fork(store.claim("s", "k", "h"))
      yield* Effect.sleep("30 millis")
      expect(Option.isNone(yield* Fiber.poll(claim))).toBe(true)
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(claim)).toEqual({ _tag: "Claimed" })
    }))

  it.scoped("N concurrent claims share fdatasyncs: far fewer syncs than claims, all durable", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const inst = instrumentedDriver()
      const n = 400
      const keys = Array.from({ length: n }, (_, i) => `k${i}`)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          const before = inst.counts.fdatasync
          const results = yield* Effect.forEach(keys, (k) => store.claim("s", k, `h-${k}`), { concurrency: "unbounded" })
          expect(results.every((r) => r._tag === "Claimed")).toBe(true)
          const syncs = inst.counts.fdatasync - before
          expect(syncs).toBeGreaterThanOrEqual(1)
          expect(syncs).toBeLessThan(n / 10)
        }), {}, inst.driver)
      yield* withStore(dir, (store) =>
        Effect.forEach(keys, (k) => expectAmbiguousFromLog(store, k), { discard: true }))
    }))

  it.scoped("a write failure is IdempotencyStoreFailed and sticky; nothing unacknowledged comes back after a restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const inst = instrumentedDriver()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, ["before"])
          inst.failNextWrite("claims.log")
          const failed = yield* Effect.flip(store.claim("s", "lost", "h"))
          expect(failed._tag).toBe("IdempotencyStoreFailed")
          expect(failed.reason).toContain("EIO")
          // Sticky: the next write would have worked, but the store refuses everything.
          for (const later of [store.claim("s", "other", "h"), store.complete("s", "before", answer("x")), store.compact]) {
            const err = yield* Effect.flip(later as Effect.Effect<unknown, { readonly _tag: string }>)
            expect(err._tag).toBe("IdempotencyStoreFailed")
          }
          expect(inst.counts.writev).toBe(3)
        }), {}, inst.driver)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* expectReplay(store, "before")
          expect(yield* store.claim("s", "lost", "h")).toEqual({ _tag: "Claimed" })
        }))
    }))

  it.scoped("a store used after its scope closed refuses with IdempotencyStoreFailed", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const store = yield* Effect.scoped(open(dir))
      const err = yield* Effect.flip(store.claim("s", "k", "h"))
      expect(err._tag).toBe("IdempotencyStoreFailed")
      expect(err.reason).toContain("closed")
    }))
})
