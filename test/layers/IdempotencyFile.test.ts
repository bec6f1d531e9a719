/**
 * The durable idempotency store on real files: restart, torn and corrupt logs, compaction, group
 * commit and write failures. Each restart closes the store's scope and opens the same directory
 * again. Frame boundaries are found by a small parser here (DESIGN §2 layout), not by the code
 * under test.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, TestClock, TestServices } from "effect"
import { IDEMPOTENCY_READ_CHUNK_BYTES, MAX_FRAME_BYTES } from "../../src/domain/Limits.js"
import * as IdempotencyFile from "../../src/layers/IdempotencyFile.js"
import { FileDriver, type FileDriverShape, FileError, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { encodeFrame } from "../../src/layers/journal/Frame.js"
import { Idempotency, type Answer, type IdempotencyError, type IdempotencyShape } from "../../src/services/Idempotency.js"
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

/** Flips one bit of the byte at `at` in the file, in place (the store may have it open). */
const flipByte = (file: string, at: number) => {
  const fd = fs.openSync(file, "r+")
  const b = Buffer.alloc(1)
  fs.readSync(fd, b, 0, 1, at)
  b[0] = b[0]! ^ 0x40
  fs.writeSync(fd, b, 0, 1, at)
  fs.closeSync(fd)
}

/**
 * A driver whose next `plan.writes` log writes fail the way a full disk does (half of the bytes
 * land, then ENOSPC), and whose next `plan.truncates` ftruncates fail with EIO.
 */
const faultyDriver = () => {
  const plan = { writes: 0, truncates: 0 }
  const state = { plan, landed: 0, driver: nodeDriver }
  state.driver = {
    ...nodeDriver,
    writev: (fd, buffers, position) =>
      Effect.suspend(() => {
        if (plan.writes === 0) return nodeDriver.writev(fd, buffers, position)
        plan.writes--
        const all = Buffer.concat(buffers)
        const half = all.subarray(0, all.length >> 1)
        return nodeDriver.writev(fd, [half], position).pipe(
          Effect.tap((n) => void (state.landed += n)),
          Effect.zipRight(Effect.fail(new FileError({ op: "write", path: `fd ${fd}`, code: "ENOSPC", detail: "ENOSPC: no space left on device, write" })))
        )
      }),
    ftruncate: (fd, length) =>
      Effect.suspend(() => {
        if (plan.truncates === 0) return nodeDriver.ftruncate(fd, length)
        plan.truncates--
        return Effect.fail(new FileError({ op: "ftruncate", path: `fd ${fd}`, code: "EIO", detail: "EIO: i/o error, ftruncate" }))
      })
  }
  return state
}

describe("IdempotencyFile: answers live in the log", () => {
  it.scoped("a replay reads its answer back from the log: an answer frame damaged after it was written is IdempotencyLogDamaged naming the file and offset, never replayed", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, ["a", "b"])
          const frames = framesOf(fs.readFileSync(logOf(dir)))
          const bAnswer = frames[3]!
          expect(bAnswer.kind).toBe("idem_answer")
          flipByte(logOf(dir), bAnswer.end - 5)
          yield* expectReplay(store, "a")
          for (let i = 0; i < 2; i++) {
            const err = yield* Effect.flip(store.claim("s", "b", "h-b"))
            expect(err._tag).toBe("IdempotencyLogDamaged")
            if (err._tag !== "IdempotencyLogDamaged") return
            expect(err.file).toBe("idempotency/claims.log")
            expect(err.offset).toBe(bAnswer.start)
            expect(err.reason).toContain("checksum")
          }
          // A different body is still a conflict, decided from the index alone.
          expect(yield* store.claim("s", "b", "other")).toEqual({ _tag: "Conflict" })
        }))
    }))

  it.scoped("open reads the log in bounded chunks (a larger frame whole), never the whole file at once", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const big = "z".repeat(2 * IDEMPOTENCY_READ_CHUNK_BYTES)
      const small = Array.from({ length: 200 }, (_, i) => `k${i}`)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, small.slice(0, 100))
          expect((yield* store.claim("s", "big", "h-big"))._tag).toBe("Claimed")
          yield* store.complete("s", "big", answer(big))
          // Enough small records after the big one that the log spans several chunks.
          for (const k of small.slice(100)) {
            yield* store.claim("s", k, `h-${k}`)
            yield* store.complete("s", k, answer(`answer ${k} ${"p".repeat(30_000)}`))
          }
        }), { maxAnswerBytes: 4 * IDEMPOTENCY_READ_CHUNK_BYTES })
      const size = fs.statSync(logOf(dir)).size
      expect(size).toBeGreaterThan(4 * IDEMPOTENCY_READ_CHUNK_BYTES)
      const largestFrame = Math.max(...framesOf(fs.readFileSync(logOf(dir))).map((f) => f.end - f.start))
      const reads: Array<number> = []
      const driver: FileDriverShape = {
        ...nodeDriver,
        readFile: (p) => Effect.dieMessage(`readFile(${p}): the log must be read in chunks`),
        read: (fd, buffer, position) => Effect.zipRight(Effect.sync(() => reads.push(buffer.length)), nodeDriver.read(fd, buffer, position))
      }
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          // Opening read every byte, in pieces no larger than a chunk or the one larger frame.
          expect(reads.length).toBeGreaterThan(4)
          expect(Math.max(...reads)).toBeLessThanOrEqual(Math.max(IDEMPOTENCY_READ_CHUNK_BYTES, largestFrame))
          const r = yield* store.claim("s", "big", "h-big")
          expect(r._tag === "Replay" && r.answer.body === big).toBe(true)
          yield* expectReplay(store, "k0")
        }), { maxAnswerBytes: 4 * IDEMPOTENCY_READ_CHUNK_BYTES }, driver)
    }))

  it.scoped("an answer above the maximum is recorded as not kept: the key resolves to its status and size at once and after a restart, and the log stays small", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const body = "x".repeat(5_000)
      const expected = { _tag: "AnswerNotKept", status: 200, bytes: JSON.stringify(answer(body)).length }
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          expect((yield* store.claim("s", "k", "h"))._tag).toBe("Claimed")
          yield* store.complete("s", "k", answer(body))
          expect(yield* store.claim("s", "k", "h")).toEqual(expected)
          expect(yield* store.claim("s", "k", "other")).toEqual({ _tag: "Conflict" })
        }), { maxAnswerBytes: 4_096 })
      expect(fs.statSync(logOf(dir)).size).toBeLessThan(1_000)
      yield* withStore(dir, (store) => Effect.map(store.claim("s", "k", "h"), (r) => expect(r).toEqual(expected)), { maxAnswerBytes: 4_096 })
    }))

  it.scoped("an answer above the frame maximum resolves its key (never in progress), at once and after a restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const huge = answer("h".repeat(MAX_FRAME_BYTES + 1))
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          expect((yield* store.claim("s", "huge", "h"))._tag).toBe("Claimed")
          yield* store.complete("s", "huge", huge)
          const r = yield* store.claim("s", "huge", "h")
          expect(r._tag).toBe("AnswerNotKept")
          expect(r._tag === "AnswerNotKept" && r.bytes).toBeGreaterThan(MAX_FRAME_BYTES)
        }))
      yield* withStore(dir, (store) => Effect.map(store.claim("s", "huge", "h"), (r) => expect(r._tag).toBe("AnswerNotKept")))
    }))
})

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

  it.scoped("the session a claim names is durable with the claim: after a restart its unanswered key is Ambiguous not in flight naming it, and an answered one replays", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          expect(yield* store.claim("create", "lost", "h", "ses_lost")).toEqual({ _tag: "Claimed" })
          expect(yield* store.claim("create", "done", "h", "ses_done")).toEqual({ _tag: "Claimed" })
          yield* store.complete("create", "done", answer("created"))
          expect(yield* store.claim("create", "plain", "h")).toEqual({ _tag: "Claimed" })
        }))
      const log = fs.readFileSync(logOf(dir))
      // A frame's record follows its 30-byte header and its kind.
      const claims = framesOf(log).filter((f) => f.kind === "idem_claim").map((f) => JSON.parse(log.toString("utf8", f.start + 30 + f.kind.length, f.end)))
      expect(claims.map((c) => c.session)).toEqual(["ses_lost", "ses_done", undefined])
      for (let reopen = 0; reopen < 2; reopen++) {
        yield* withStore(dir, (store) =>
          Effect.gen(function*() {
            expect(yield* store.claim("create", "lost", "h")).toStrictEqual({ _tag: "Ambiguous", inFlight: false, session: "ses_lost" })
            expect(yield* store.claim("create", "plain", "h")).toStrictEqual({ _tag: "Ambiguous", inFlight: false })
            expect(yield* store.claim("create", "done", "h")).toEqual({ _tag: "Replay", answer: answer("created") })
          }))
      }
    }))

  it.scoped("adopted keys are durable when adopt returns: after a restart an answered one replays and a never-answered one is Ambiguous", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-idem-")
      yield* withStore(dataDir, (store) =>
        store.adopt([
          { scope: "s", key: "a", bodyHash: "h-a", atMs: 0, answer: answer("answer a") },
          { scope: "s", key: "u", bodyHash: "h-u", atMs: 0, answer: undefined }
        ]))
      yield* withStore(dataDir, (store) =>
        Effect.gen(function*() {
          yield* expectReplay(store, "a")
          yield* expectAmbiguousFromLog(store, "u")
        }))
    }))

  it.scoped("an answer that expired while the server was down is gone after the restart; a claim never answered is not: it stays ambiguous however long the server was down, and under a lowered retention", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) => record(store, ["old"], ["old-unanswered"]))
      yield* TestClock.adjust(RETENTION_MS / 2)
      yield* withStore(dir, (store) => record(store, ["young"]))
      yield* TestClock.adjust(RETENTION_MS / 2)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          expect(yield* store.claim("s", "old", "new body")).toEqual({ _tag: "Claimed" })
          yield* expectAmbiguousFromLog(store, "old-unanswered")
          expect(yield* store.claim("s", "old-unanswered", "new body")).toEqual({ _tag: "Conflict" })
          yield* expectReplay(store, "young")
        }))
      yield* TestClock.adjust(100 * RETENTION_MS)
      yield* withStore(dir, (store) => expectAmbiguousFromLog(store, "old-unanswered"), { retentionMs: 1 })
    }))

  it.scoped("claims never answered and ambiguous verdicts outlive the retention through compaction, a rewrite of the log and restarts, still answering as they did; the answers beside them expire", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const verdict: Answer = {
        status: 409,
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ code: "ambiguous", message: "it may have taken effect", retryable: false, details: { ambiguous: true } })
      }
      const limits = { limits: { rewriteDeadBytes: 1 } }
      const answered = Array.from({ length: 50 }, (_, i) => `answered-${i}`)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, answered, ["crashed"])
          expect((yield* store.claim("s", "verdict", "h-verdict"))._tag).toBe("Claimed")
          yield* store.complete("s", "verdict", verdict, { beyondBound: true })
        }), limits)
      const before = fs.statSync(logOf(dir)).size
      yield* TestClock.adjust(2 * RETENTION_MS)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          expect(yield* store.compact).toBe(0) // what expired was dropped at the open
          expect(fs.statSync(logOf(dir)).size).toBeLessThan(before / 4)
          yield* expectAmbiguousFromLog(store, "crashed")
          expect(yield* store.claim("s", "verdict", "h-verdict")).toEqual({ _tag: "Replay", answer: verdict })
          expect(yield* store.claim("s", "answered-0", "other")).toEqual({ _tag: "Claimed" })
        }), limits)
      // The rewritten log holds them.
      expect(framesOf(fs.readFileSync(logOf(dir))).map((f) => f.kind).sort()).toEqual(["idem_answer", "idem_claim", "idem_claim", "idem_claim"])
      yield* TestClock.adjust(2 * RETENTION_MS)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* expectAmbiguousFromLog(store, "crashed")
          expect(yield* store.claim("s", "verdict", "h-verdict")).toEqual({ _tag: "Replay", answer: verdict })
        }))
    }))

  it.scoped("a key adopted without its answer (a deleted session's send: nothing can run it again) expires with the retention, also after a restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) => store.adopt([{ scope: "s", key: "u", bodyHash: "h-u", atMs: 0, answer: undefined }]))
      yield* TestClock.adjust(RETENTION_MS - 1)
      yield* withStore(dir, (store) => expectAmbiguousFromLog(store, "u"))
      yield* TestClock.adjust(1)
      yield* withStore(dir, (store) => Effect.map(store.claim("s", "u", "other"), (r) => expect(r).toEqual({ _tag: "Claimed" })))
    }))
})

describe("IdempotencyFile: reservations", () => {
  it.scoped("a reservation writes nothing, and its release writes nothing: after a restart the key is free; a completed reservation writes its claim and answer, which replay after a restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          expect(yield* store.reserve("s", "journaled", "h-journaled")).toEqual({ _tag: "Claimed" })
          expect(fs.statSync(logOf(dir)).size).toBe(0)
          yield* store.release("s", "journaled")
          expect(yield* store.reserve("s", "held", "h-held")).toEqual({ _tag: "Claimed" })
          expect(yield* store.reserve("s", "refused", "h-refused")).toEqual({ _tag: "Claimed" })
          yield* store.complete("s", "refused", answer("answer refused"))
          yield* store.release("s", "refused")
        }))
      expect(framesOf(fs.readFileSync(logOf(dir))).map((f) => f.kind)).toEqual(["idem_claim", "idem_answer"])
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          // Reserved and never written: the process that held it is gone, and so is the reservation.
          expect(yield* store.claim("s", "journaled", "any body")).toEqual({ _tag: "Claimed" })
          expect(yield* store.claim("s", "held", "any body")).toEqual({ _tag: "Claimed" })
          yield* expectReplay(store, "refused")
        }))
    }))
})

describe("IdempotencyFile: releases", () => {
  it.scoped("a release is durable: after a restart the released key is free, and a later claim of it stands", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, ["a"], ["released", "reclaimed"])
          yield* store.release("s", "released")
          yield* store.release("s", "reclaimed")
          expect(yield* store.claim("s", "reclaimed", "h-reclaimed")).toEqual({ _tag: "Claimed" })
        }))
      expect(framesOf(fs.readFileSync(logOf(dir))).map((f) => f.kind)).toEqual([
        "idem_claim", "idem_answer", "idem_claim", "idem_claim", "idem_release", "idem_release", "idem_claim"
      ])
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* expectReplay(store, "a")
          expect(yield* store.claim("s", "released", "any body")).toEqual({ _tag: "Claimed" })
          // Claimed again after its release: that claim is the key's entry, unanswered.
          yield* expectAmbiguousFromLog(store, "reclaimed")
        }))
    }))

  it.scopedLive("claims of a key while its release is being written see it in flight; a failed release still frees it in this process", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const faults = faultyDriver()
      const gate = yield* Deferred.make<void>()
      let gated = false
      const driver: FileDriverShape = {
        ...faults.driver,
        fdatasync: (fd) => gated ? Effect.zipRight(Deferred.await(gate), nodeDriver.fdatasync(fd)) : nodeDriver.fdatasync(fd)
      }
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, [], ["k", "j"])
          gated = true
          const releasing = yield* Effect.fork(store.release("s", "k"))
          yield* Effect.sleep("20 millis")
          expect(yield* store.claim("s", "k", "h-k")).toEqual({ _tag: "Ambiguous", inFlight: true })
          // An answer arriving meanwhile is not taken: the release decides.
          yield* store.complete("s", "k", answer("too late"))
          gated = false
          yield* Deferred.succeed(gate, undefined)
          yield* Fiber.join(releasing)
          expect(yield* store.claim("s", "k", "other")).toEqual({ _tag: "Claimed" })
          faults.plan.writes = 1
          expect((yield* Effect.flip(store.release("s", "j"))).message).toContain("ENOSPC")
          expect(yield* store.claim("s", "j", "other")).toEqual({ _tag: "Claimed" })
        }), {}, driver)
      // The failed release was never written: a restart sees j's first claim, whose request did
      // nothing, superseded by the second claim (which is unanswered).
      yield* withStore(dir, (store) => Effect.map(store.claim("s", "j", "other"), (r) => expect(r).toEqual({ _tag: "Ambiguous", inFlight: false })))
    }))
})

  it.scopedLive("a key being adopted in place of a reservation is not the reservation owner's: its release or refusal while the adopted frames are written changes nothing, also after a restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const gate = yield* Deferred.make<void>()
      let gated = false
      const driver: FileDriverShape = {
        ...nodeDriver,
        fdatasync: (fd) => gated ? Effect.zipRight(Deferred.await(gate), nodeDriver.fdatasync(fd)) : nodeDriver.fdatasync(fd)
      }
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          for (const k of ["k", "j", "u"]) expect(yield* store.reserve("s", k, `h-${k}`)).toEqual({ _tag: "Claimed" })
          gated = true
          const atMs = Date.now()
          const adopting = yield* Effect.fork(store.adopt([
            { scope: "s", key: "k", bodyHash: "h-k", atMs, answer: answer("answer k") },
            { scope: "s", key: "j", bodyHash: "h-j", atMs, answer: answer("answer j") },
            { scope: "s", key: "u", bodyHash: "h-u", atMs, answer: undefined }
          ]))
          yield* Effect.sleep("20 millis")
          expect(adopting.unsafePoll()).toBeNull()
          // The retries that held the reservations were refused not_found meanwhile.
          const releasing = yield* Effect.fork(Effect.zipRight(store.release("s", "k"), store.release("s", "u")))
          const refusing = yield* Effect.fork(store.complete("s", "j", answer("not found")))
          yield* Effect.sleep("20 millis")
          gated = false
          yield* Deferred.succeed(gate, undefined)
          yield* Fiber.join(adopting)
          yield* Fiber.join(releasing)
          yield* Fiber.join(refusing)
          yield* expectReplay(store, "k")
          yield* expectReplay(store, "j")
          yield* expectAmbiguousFromLog(store, "u")
        }), {}, driver)
      yield* withStore(dir, (store) =>
        Effect.all([expectReplay(store, "k"), expectReplay(store, "j"), expectAmbiguousFromLog(store, "u")], { discard: true }))
    }))

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

  it.scoped("a damaged log opens refusing: every claim and answer fails with IdempotencyLogDamaged naming the file (relative to the data directory) and the offset, and the file is left as found", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) => record(store, ["a", "b"], ["c"]))
      const log = logOf(dir)
      const original = fs.readFileSync(log)
      const frames = framesOf(original)
      const flipped = (at: number) => {
        const damaged = Buffer.from(original)
        damaged[at] = damaged[at]! ^ 0x40
        return damaged
      }
      // A whole frame (both checksums hold) whose record cannot be used.
      const whole = (kind: string, json: string) =>
        Buffer.concat([original, ...encodeFrame(frames.length + 1, 0, Buffer.from(kind), Buffer.from(json), false)])
      const cases = [
        ["a flipped body byte", flipped(frames[1]!.end - 3), frames[1]!.start, "checksum"],
        ["a flipped length byte", flipped(frames[1]!.start), frames[1]!.start, "checksum"],
        ["an unreadable payload", whole("idem_claim", "{\"scope\":1}"), original.length, "unreadable idem_claim payload"],
        ["an unknown kind", whole("idem_other", "{}"), original.length, "unknown record kind"]
      ] as const
      for (const [what, damaged, offset, reason] of cases) {
        fs.writeFileSync(log, damaged)
        yield* withStore(dir, (store) =>
          Effect.gen(function*() {
            const refusals = [
              store.claim("s", "a", "h-a"),
              store.claim("s", "new", "h"),
              store.complete("s", "c", answer("late"))
            ] as const
            for (const refused of refusals) {
              const err = yield* Effect.flip(refused as Effect.Effect<unknown, IdempotencyError>)
              expect(err._tag, what).toBe("IdempotencyLogDamaged")
              if (err._tag !== "IdempotencyLogDamaged") return
              expect(err.file, what).toBe("idempotency/claims.log")
              expect(err.offset, what).toBe(offset)
              expect(err.reason, what).toContain(reason)
              expect(err.message, what).toContain(`idempotency/claims.log is damaged at offset ${offset}`)
            }
            expect(yield* store.compact).toBe(0)
          }))
        // Nothing written, nothing truncated: the damage waits for an operator.
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
          // Replays read the moved frames at their new offsets.
          yield* expectReplay(store, "live")
          expect(yield* store.claim("s", "pending", "h-pending")).toEqual({ _tag: "Ambiguous", inFlight: true })
          // The store goes on appending to the rewritten log.
          yield* record(store, ["after"])
          yield* expectReplay(store, "after")
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

  it.scoped("compaction copies live records from the log file: a live record damaged on disk fails the rewrite, which leaves the old log in place", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, Array.from({ length: 20 }, (_, i) => `old${i}`))
          yield* TestClock.adjust(RETENTION_MS / 2)
          yield* record(store, ["live"])
          const frames = framesOf(fs.readFileSync(logOf(dir)))
          const liveAnswer = frames[frames.length - 1]!
          flipByte(logOf(dir), liveAnswer.end - 2)
          const before = fs.readFileSync(logOf(dir))
          yield* TestClock.adjust(RETENTION_MS / 2)
          const err = yield* Effect.flip(store.compact)
          expect(err._tag).toBe("IdempotencyLogDamaged")
          expect(err._tag === "IdempotencyLogDamaged" && err.offset).toBe(liveAnswer.start)
          expect(fs.readFileSync(logOf(dir)).equals(before)).toBe(true)
          expect(fs.readdirSync(path.join(dir, "idempotency"))).toEqual(["claims.log"])
          // The store goes on: new keys are claimed and answered in the old log.
          yield* record(store, ["next"])
          yield* expectReplay(store, "next")
        }), { limits: { rewriteDeadBytes: 0 } })
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

  // The test clock decides what has expired (the store reads Clock), so a slow machine cannot
  // expire "kept" before it is replayed; the short real-time wait below uses the live clock.
  it.scoped("claims and answers made while a rewrite runs are neither lost nor reordered, and replays during and after it read the right frames", () =>
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
          yield* TestClock.adjust(`${retentionMs + 1} millis`)
          yield* record(store, ["kept"], ["kept-pending"])
          const compaction = yield* Effect.fork(store.compact)
          yield* Deferred.await(renaming).pipe(Effect.timeout("2 seconds"))
          const during = yield* Effect.fork(Effect.forEach(
            Array.from({ length: 20 }, (_, i) => `during${i}`),
            (k) => Effect.zipRight(store.claim("s", k, `h-${k}`), store.complete("s", k, answer(`answer ${k}`))),
            { concurrency: "unbounded", discard: true }
          ))
          yield* TestServices.provideLive(Effect.sleep("20 millis"))
          // The appends wait for the rewrite: nothing is acknowledged into the file being replaced.
          expect(Option.isNone(yield* Fiber.poll(during))).toBe(true)
          // Replays do not wait: they read the old file, which stays open until its readers are done.
          yield* expectReplay(store, "kept")
          yield* Deferred.succeed(release, undefined)
          expect(yield* Fiber.join(compaction)).toBe(10)
          yield* Fiber.join(during)
          yield* expectReplay(store, "kept")
          yield* expectReplay(store, "during7")
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

  it("the background compaction's interval is within Node's timer maximum whatever the retention (a longer sleep would never fire): retention / 4, at most 2,147,483,647 ms", () => {
    const of = (retentionMs: number) => IdempotencyFile.compactInterval({ dataDir: "unused", retentionMs })
    expect(of(4 * (2 ** 31 - 1))).toBe(2 ** 31 - 1)
    for (const days of [100, 1_000, 100_000_000]) expect(of(days * 24 * 3600 * 1000)).toBe(2 ** 31 - 1)
    expect(of(99 * 24 * 3600 * 1000)).toBe(Math.floor(99 * 24 * 3600 * 1000 / 4))
  })

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

  it.scoped("a failed write (ENOSPC) fails only its round: the torn bytes are cut back, the freed key and later records succeed, and a restart finds exactly the durable records", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const faults = faultyDriver()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, ["before"])
          const durable = fs.statSync(logOf(dir)).size
          faults.plan.writes = 1
          const failed = yield* Effect.flip(store.claim("s", "lost", "h-lost"))
          expect(failed._tag).toBe("IdempotencyStoreFailed")
          expect(failed.message).toContain("idempotency/claims.log")
          expect(failed.message).toContain("ENOSPC")
          expect(failed.message).not.toContain(dir)
          // Half a frame landed; it is cut back at once.
          expect(faults.landed).toBeGreaterThan(0)
          expect(fs.statSync(logOf(dir)).size).toBe(durable)
          // The failed claim freed its key; space is back: everything goes on.
          yield* record(store, ["lost", "after"])
          yield* expectReplay(store, "before")
          yield* expectReplay(store, "lost")
        }), {}, faults.driver)
      const frames = framesOf(fs.readFileSync(logOf(dir)))
      expect(frames.map((f) => f.sequence)).toEqual([1, 2, 3, 4, 5, 6])
      expect(frames[frames.length - 1]!.end).toBe(fs.statSync(logOf(dir)).size)
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          for (const k of ["before", "lost", "after"]) yield* expectReplay(store, k)
        }))
    }))

  it.scoped("an answer whose write failed leaves its key ambiguous, not in flight (the work happened), at once and after a restart", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const faults = faultyDriver()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          expect((yield* store.claim("s", "k", "h-k"))._tag).toBe("Claimed")
          faults.plan.writes = 1
          const failed = yield* Effect.flip(store.complete("s", "k", answer("answer k")))
          expect(failed.message).toContain("ENOSPC")
          yield* expectAmbiguousFromLog(store, "k")
          // A later answer for it is not taken either: the first outcome (unrecorded) stands.
          yield* store.complete("s", "k", answer("answer k"))
          yield* expectAmbiguousFromLog(store, "k")
          yield* record(store, ["other"])
        }), {}, faults.driver)
      yield* withStore(dir, (store) => Effect.zipRight(expectAmbiguousFromLog(store, "k"), expectReplay(store, "other")))
    }))

  it.scoped("when the cut back fails too, the next round fails while it cannot be made, and the writer recovers once it can", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const faults = faultyDriver()
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          yield* record(store, ["before"])
          const durable = fs.statSync(logOf(dir)).size
          faults.plan.writes = 1
          // The cut after the failed write and the one before the next round both fail.
          faults.plan.truncates = 2
          expect((yield* Effect.flip(store.claim("s", "one", "h-one"))).message).toContain("ENOSPC")
          expect(fs.statSync(logOf(dir)).size).toBeGreaterThan(durable)
          const next = yield* Effect.flip(store.claim("s", "two", "h-two"))
          expect(next.message).toContain("could not be undone yet")
          expect(next.message).toContain("ftruncate failed: EIO")
          // Never sticky: the third round makes the cut and writes.
          yield* record(store, ["one", "two"])
          expect(faults.plan.truncates).toBe(0)
        }), {}, faults.driver)
      const frames = framesOf(fs.readFileSync(logOf(dir)))
      expect(frames.map((f) => f.kind)).toEqual(["idem_claim", "idem_answer", "idem_claim", "idem_answer", "idem_claim", "idem_answer"])
      expect(frames.map((f) => f.sequence)).toEqual([1, 2, 3, 4, 5, 6])
      yield* withStore(dir, (store) =>
        Effect.gen(function*() {
          for (const k of ["before", "one", "two"]) yield* expectReplay(store, k)
        }))
    }))

  it.scoped("a store used after its scope closed refuses with IdempotencyStoreFailed", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const store = yield* Effect.scoped(open(dir))
      const err = yield* Effect.flip(store.claim("s", "k", "h"))
      expect(err._tag).toBe("IdempotencyStoreFailed")
      expect(err.message).toContain("closed")
    }))
})
