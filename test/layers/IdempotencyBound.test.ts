/**
 * The durable idempotency store's bound on live keys, on real files: a refused key writes nothing,
 * a log holding more live keys than the bound (a lowered setting) opens whole and every key in it
 * still answers, and the index finds a key by a digest of its scope and key (never the key
 * itself), which keeps every pair apart. The contract suite (test/contracts) covers the semantics.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import * as v8 from "node:v8"
import * as crypto from "node:crypto"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Logger, TestClock } from "effect"
import * as IdempotencyFile from "../../src/layers/IdempotencyFile.js"
import { idOf } from "../../src/layers/idempotency/Index.js"
import { IDEMPOTENCY_FULL_SWEEP_MS, maxIdempotencyKeys } from "../../src/layers/idempotency/KeyBound.js"
import { FileDriver, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import type { Answer, IdempotencyShape } from "../../src/services/Idempotency.js"
import { tempDir } from "../support/journals.js"

const RETENTION_MS = 60_000

const withStore = <A, E>(
  dataDir: string,
  maxKeys: number,
  use: (store: IdempotencyShape) => Effect.Effect<A, E>,
  retentionMs = RETENTION_MS,
  more: { readonly maxSessionKeys?: number; readonly deleteReserveKeys?: number } = { deleteReserveKeys: 0 }
) =>
  Effect.scoped(
    Effect.flatMap(
      IdempotencyFile.make({ dataDir, retentionMs, maxKeys, ...more }).pipe(Effect.provide(Layer.succeed(FileDriver, nodeDriver))),
      use
    )
  )

const answer = (body: string): Answer => ({ status: 200, headers: { "content-type": "application/json" }, body })
const logSize = (dataDir: string) => fs.statSync(path.join(dataDir, "idempotency", "claims.log")).size

describe("IdempotencyFile: the bound on live keys", () => {
  it.scoped("a key refused at the bound writes nothing to the log; a lower bound at the next open keeps every live key, which replays, and refuses new ones", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-idem-")
      yield* withStore(dir, 4, (store) =>
        Effect.gen(function*() {
          for (const k of ["a", "b", "c"]) {
            yield* store.claim("s", k, `h-${k}`)
            yield* store.complete("s", k, answer(k))
          }
          yield* store.claim("s", "unanswered", "h-u")
          const before = logSize(dir)
          expect((yield* Effect.flip(store.claim("s", "new", "h")))._tag).toBe("IdempotencyFull")
          expect(yield* store.reserve("s", "reserved", "h")).toEqual({ _tag: "Claimed" })
          expect((yield* Effect.flip(store.complete("s", "reserved", answer("refused"))))._tag).toBe("IdempotencyFull")
          expect((yield* Effect.flip(store.adopt([{ scope: "s", key: "adopted", bodyHash: "h", atMs: 0, answer: answer("x") }])))._tag)
            .toBe("IdempotencyFull")
          expect(logSize(dir)).toBe(before)
        }))
      yield* withStore(dir, 2, (store) =>
        Effect.gen(function*() {
          for (const k of ["a", "b", "c"]) expect(yield* store.claim("s", k, `h-${k}`)).toEqual({ _tag: "Replay", answer: answer(k) })
          expect(yield* store.claim("s", "unanswered", "h-u")).toEqual({ _tag: "Ambiguous", inFlight: false })
          expect(yield* Effect.flip(store.claim("s", "new", "h"))).toMatchObject({ _tag: "IdempotencyFull", maxKeys: 2 })
          // The refused keys of the first open were never kept.
          expect(yield* store.reserve("s", "reserved", "other")).toEqual({ _tag: "Claimed" })
          expect(yield* store.reserve("s", "adopted", "other")).toEqual({ _tag: "Claimed" })
        }))
    }))

  it.scoped("room is made from the front, where keys expire first, each key placed by its answer: a long request answered late does not hold back the keys answered before it; a key out of that order waits for the next full sweep", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-idem-")
      // Long enough that no key expires within a full sweep's interval unless the test says so.
      const retentionMs = 10 * IDEMPOTENCY_FULL_SWEEP_MS
      yield* withStore(dir, 3, (store) =>
        Effect.gen(function*() {
          expect(yield* store.claim("s", "long", "h")).toEqual({ _tag: "Claimed" })
          expect(yield* store.claim("s", "quick", "h")).toEqual({ _tag: "Claimed" })
          yield* store.complete("s", "quick", answer("quick"))
          yield* TestClock.adjust(retentionMs / 2)
          yield* store.complete("s", "long", answer("long"))
          yield* store.adopt([{ scope: "s", key: "adopted", bodyHash: "h", atMs: 0, answer: answer("adopted") }])
          // Full, one millisecond before "quick" and "adopted" expire: the full sweep this makes finds nothing.
          yield* TestClock.adjust(retentionMs / 2 - 1)
          expect((yield* Effect.flip(store.claim("s", "new", "h")))._tag).toBe("IdempotencyFull")
          yield* TestClock.adjust(1)
          // "quick" leads (answered first): the front sweep takes it at once.
          expect(yield* store.claim("s", "new", "h")).toEqual({ _tag: "Claimed" })
          // "adopted" is behind "long", which is live: found only by the next full sweep.
          expect((yield* Effect.flip(store.claim("s", "newer", "h")))._tag).toBe("IdempotencyFull")
          // The last full sweep was 1 ms before "quick" expired.
          yield* TestClock.adjust(IDEMPOTENCY_FULL_SWEEP_MS - 2)
          expect((yield* Effect.flip(store.claim("s", "newer", "h")))._tag).toBe("IdempotencyFull")
          yield* TestClock.adjust(1)
          expect(yield* store.claim("s", "newer", "h")).toEqual({ _tag: "Claimed" })
          expect(yield* store.claim("s", "long", "h")).toEqual({ _tag: "Replay", answer: answer("long") })
        }), retentionMs)
    }))

  it.scoped("the order is rebuilt from the log at an open: a key answered before one claimed earlier still leads", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-idem-")
      const retentionMs = 10 * IDEMPOTENCY_FULL_SWEEP_MS
      yield* withStore(dir, 2, (store) =>
        Effect.gen(function*() {
          yield* store.claim("s", "long", "h")
          yield* store.claim("s", "quick", "h")
          yield* store.complete("s", "quick", answer("quick"))
          yield* TestClock.adjust(retentionMs / 2)
          yield* store.complete("s", "long", answer("long"))
        }), retentionMs)
      yield* TestClock.adjust(retentionMs / 2 - 1)
      yield* withStore(dir, 2, (store) =>
        Effect.gen(function*() {
          // Full, and the full sweep this makes finds nothing; then "quick" expires, at the front.
          expect((yield* Effect.flip(store.claim("s", "new", "h")))._tag).toBe("IdempotencyFull")
          yield* TestClock.adjust(1)
          expect(yield* store.claim("s", "new", "h")).toEqual({ _tag: "Claimed" })
          expect(yield* store.claim("s", "long", "h")).toEqual({ _tag: "Replay", answer: answer("long") })
        }), retentionMs)
    }))

  it.scoped("refusing at the bound is said in the log, at most once a minute however many keys are refused", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-idem-")
      const warnings: Array<string> = []
      const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ logLevel, message }) => {
        if (logLevel._tag === "Warning") warnings.push(String(message))
      }))
      yield* withStore(dir, 1, (store) =>
        Effect.gen(function*() {
          yield* store.claim("s", "held", "h")
          yield* store.complete("s", "held", answer("held"))
          for (let i = 0; i < 50; i++) expect((yield* Effect.flip(store.claim("s", `new-${i}`, "h")))._tag).toBe("IdempotencyFull")
          expect(warnings.length).toBe(1)
          expect(warnings[0]).toContain("BRAIN_MAX_IDEMPOTENCY_KEYS")
          yield* TestClock.adjust(IDEMPOTENCY_FULL_SWEEP_MS - 1)
          yield* Effect.flip(store.claim("s", "new", "h"))
          expect(warnings.length).toBe(1)
          yield* TestClock.adjust(1)
          yield* Effect.flip(store.claim("s", "new", "h"))
          expect(warnings.length).toBe(2)
        }).pipe(Effect.provide(capture)), 10 * IDEMPOTENCY_FULL_SWEEP_MS)
    }))

  it.scoped("a restart keeps each session's share and the delete reserve counted: a full session's new keys are still refused, others' are not, and its keys still answer", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-idem-")
      const limits = { maxSessionKeys: 2, deleteReserveKeys: 1 }
      yield* withStore(dir, 5, (store) =>
        Effect.gen(function*() {
          for (const [scope, k] of [["cancel:ses_a", "c1"], ["end:ses_a", "e1"], ["cancel:ses_b", "c1"]] as const) {
            yield* store.claim(scope, k, "h")
            yield* store.complete(scope, k, answer(k))
          }
          // Released keys and adopted ones are not the session's.
          yield* store.claim("cancel:ses_b", "released", "h")
          yield* store.release("cancel:ses_b", "released")
          yield* store.adopt([{ scope: "send:ses_b", key: "s1", bodyHash: "h", atMs: 0, answer: answer("s1") }])
          expect(yield* Effect.flip(store.claim("cancel:ses_a", "new", "h"))).toMatchObject({ _tag: "IdempotencyFull", session: "ses_a" })
        }), RETENTION_MS, limits)
      yield* withStore(dir, 5, (store) =>
        Effect.gen(function*() {
          expect(yield* Effect.flip(store.claim("cancel:ses_a", "new", "h"))).toMatchObject({ _tag: "IdempotencyFull", session: "ses_a", keys: 2 })
          expect(yield* store.claim("end:ses_a", "e1", "h")).toEqual({ _tag: "Replay", answer: answer("e1") })
          expect(yield* store.claim("send:ses_b", "s1", "h")).toEqual({ _tag: "Replay", answer: answer("s1") })
          // ses_b holds one key of its share: one more fits, then the log is at its bound of 5.
          expect(yield* store.claim("cancel:ses_b", "c2", "h")).toEqual({ _tag: "Claimed" })
          yield* store.complete("cancel:ses_b", "c2", answer("c2"))
          expect(yield* Effect.flip(store.claim("create", "k", "h", "ses_c"))).toMatchObject({ _tag: "IdempotencyFull", maxKeys: 5 })
          // Full: the delete reserve (1) takes one more adopted key, not two.
          expect(yield* Effect.flip(store.adopt([
            { scope: "send:ses_c", key: "s1", bodyHash: "h", atMs: 0, answer: answer("s1") },
            { scope: "send:ses_c", key: "s2", bodyHash: "h", atMs: 0, answer: answer("s2") }
          ]))).toMatchObject({ _tag: "IdempotencyFull" })
          yield* store.adopt([{ scope: "send:ses_c", key: "s1", bodyHash: "h", atMs: 0, answer: answer("s1") }])
          expect(yield* store.claim("send:ses_c", "s1", "h")).toEqual({ _tag: "Replay", answer: answer("s1") })
        }), RETENTION_MS, limits)
    }))

  it("the index's key is a 32-byte digest whatever the key's length, and keeps apart pairs that run together or differ only in a lone surrogate", () => {
    expect(idOf("cancel:ses_x", "k".repeat(256)).length).toBe(32)
    expect(idOf("s", "").length).toBe(32)
    const pairs: ReadonlyArray<readonly [string, string]> = [
      ["ab", "c"], ["a", "bc"], ["abc", ""], ["", "abc"],
      ["s", "\ud800"], ["s", "\ud801"], ["s", "\ufffd"], ["s", "\ud83d\ude00"], ["s", "😀"]
    ]
    const ids = pairs.map(([scope, key]) => idOf(scope, key))
    // "\ud83d\ude00" and "😀" are the same string; every other pair differs.
    expect(new Set(ids).size).toBe(pairs.length - 1)
    expect(idOf("s", "k")).toBe(idOf("s", "k"))
  })

  it("a pair's digest is its length-prefixed text's SHA-256 whatever was asked just before: the same pair again, another, or one that runs together with it", () => {
    const digest = (scope: string, key: string) => crypto.hash("sha256", `8${scope.length}:${scope}${key}`, "binary")
    const asks: ReadonlyArray<readonly [string, string]> = [
      ["s", "k"], ["s", "k"], ["s", "k2"], ["s", "k"], ["sk", ""], ["s", "k"], ["", ""], ["", ""], ["t", "k"], ["s", "k"]
    ]
    for (const [scope, key] of asks) expect(idOf(scope, key)).toBe(digest(scope, key))
  })

  it("unset, the bound is a sixteenth of the heap limit at 512 bytes a key; a setting is taken as it is", () => {
    expect(maxIdempotencyKeys(7)).toBe(7)
    expect(maxIdempotencyKeys(undefined)).toBe(Math.floor(v8.getHeapStatistics().heap_size_limit / 16 / 512))
  })
})
