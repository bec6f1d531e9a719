/**
 * The file journal at the open-file limit (EMFILE: the process's, ENFILE: the system's). A file
 * that cannot be opened for want of a descriptor is not damaged: the access is refused as
 * `JournalUnavailable` (503 `overloaded`, retryable), never as `JournalCorrupt` (which tells an
 * operator the data is damaged), never as a missing session, and never as an empty list of
 * sessions. Nothing of the refusal is remembered: the same call works once descriptors are back.
 * A create refused so leaves nothing behind. The journal says so in the log, at most once per
 * JOURNAL_EXHAUSTED_WARN_MS, with the count of refusals.
 *
 * A file or directory the file system refuses to read (EACCES, EPERM, EIO: its owner or mode, a
 * failing disk) is not damage found in the journal either: `JournalUnavailable` too, saying so
 * (never corruption, which an operator repairs by removing the session, nor "no such session").
 * A sessions directory that cannot be listed fails the list (`JournalListFailed`).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Logger, Option, TestClock } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { JOURNAL_EXHAUSTED_WARN_MS } from "../../src/domain/Limits.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, type FileDriverShape, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { refusingDriver as refusing, tempDir } from "../support/journals.js"

/** A data directory with one session whose records are too big for the recent tail (reads after 0 go to its segment). */
const withSession = Effect.gen(function*() {
  const dataDir = yield* tempDir("brain-emfile-")
  const session = yield* mintSessionId
  yield* Effect.scoped(Effect.gen(function*() {
    const journal = yield* JournalFile.make({ dataDir }).pipe(Effect.provide(Layer.succeed(FileDriver, nodeDriver)))
    yield* journal.create(session)
    for (let i = 0; i < 3; i++) yield* journal.append(session, [entry("kv_put", { key: `k${i}`, value: "v".repeat(32 * 1024) })])
  }))
  return { dataDir, session }
})

const journalOver = (dataDir: string, driver: FileDriverShape) => JournalFile.make({ dataDir }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))

const kvs = (records: ReadonlyArray<{ readonly kind: string }>) => records.filter((r) => r.kind === "kv_put").length

describe("the file journal at the open-file limit", () => {
  for (const code of ["EMFILE", "ENFILE"]) {
    it.scoped(`a read whose segment cannot be opened (${code}) is unavailable, never corrupt, and reads whole once descriptors are back`, () =>
      Effect.gen(function*() {
        const { dataDir, session } = yield* withSession
        const files = refusing()
        const journal = yield* journalOver(dataDir, files.driver)
        expect(kvs(yield* journal.read(session, { after: 0, limit: 100 }))).toBe(3)
        files.set((op, file, flags) => op === "open" && file.endsWith(".seg") && flags === "r" ? code : undefined)
        const refused = yield* Effect.flip(journal.read(session, { after: 0, limit: 100 }))
        expect(refused._tag).toBe("JournalUnavailable")
        expect(refused.message).toContain(code)
        files.clear()
        expect(kvs(yield* journal.read(session, { after: 0, limit: 100 }))).toBe(3)
      }))
  }

  it.scoped("opening a session at the limit is unavailable, not corrupt nor not found, and nothing of the refusal is remembered", () =>
    Effect.gen(function*() {
      const { dataDir, session } = yield* withSession
      const files = refusing()
      const journal = yield* journalOver(dataDir, files.driver)
      // Its journal directory cannot be listed, then its segment cannot be read whole.
      files.set((op, file) => op === "readdir" && file.endsWith("journal") ? "EMFILE" : undefined)
      expect((yield* Effect.flip(journal.read(session, { after: 0, limit: 100 })))._tag).toBe("JournalUnavailable")
      expect((yield* Effect.flip(journal.lastSequence(session)))._tag).toBe("JournalUnavailable")
      files.set((op, file) => op === "readFile" && file.endsWith(".seg") ? "EMFILE" : undefined)
      expect((yield* Effect.flip(journal.append(session, [entry("kv_put", { key: "x", value: 1 })])))._tag).toBe("JournalUnavailable")
      files.clear()
      expect(kvs(yield* journal.read(session, { after: 0, limit: 100 }))).toBe(3)
      yield* journal.append(session, [entry("kv_put", { key: "x", value: 1 })])
      expect(kvs(yield* journal.read(session, { after: 0, limit: 100 }))).toBe(4)
    }))

  it.scoped("a create at the limit is unavailable and leaves no directory behind; the same create works once descriptors are back", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-emfile-")
      const files = refusing()
      const journal = yield* journalOver(dataDir, files.driver)
      const session = yield* mintSessionId
      files.set((op, file) => op === "open" && file.endsWith(".seg") ? "EMFILE" : undefined)
      const refused = yield* Effect.flip(journal.create(session))
      expect(refused._tag).toBe("JournalUnavailable")
      expect(fs.existsSync(path.join(dataDir, "sessions", session))).toBe(false)
      files.clear()
      yield* journal.create(session)
      yield* journal.append(session, [entry("kv_put", { key: "k", value: 1 })])
      expect(yield* journal.lastSequence(session)).toBe(1)
    }))

  it.scoped("the list of sessions at the limit fails unavailable, and one that cannot be listed otherwise fails too: never an empty list", () =>
    Effect.gen(function*() {
      const { dataDir, session } = yield* withSession
      const files = refusing()
      const journal = yield* journalOver(dataDir, files.driver)
      const sessionsDir = path.join(dataDir, "sessions")
      files.set((op, file) => op === "readdir" && file === sessionsDir ? "EMFILE" : undefined)
      const exhausted = yield* Effect.flip(journal.list)
      expect(exhausted._tag).toBe("JournalUnavailable")
      files.set((op, file) => op === "readdir" && file === sessionsDir ? "EACCES" : undefined)
      const refused = yield* Effect.flip(journal.list)
      expect(refused._tag).toBe("JournalListFailed")
      expect(refused.message).toContain("EACCES")
      files.clear()
      expect(yield* journal.list).toEqual([session])
    }))

  for (const [what, op, code] of [
    ["a journal directory that is there and cannot be listed", "readdir", "EIO"],
    ["a segment the file system refuses to read (its owner or mode)", "readFile", "EACCES"],
    ["a segment the file system refuses to read (a policy)", "readFile", "EPERM"],
    ["a segment whose read fails on the disk", "readFile", "EIO"]
  ] as const) {
    it.scoped(`${what} (${code}) is unavailable, never corrupt nor a missing session, and reads whole once it can be read`, () =>
      Effect.gen(function*() {
        const { dataDir, session } = yield* withSession
        const files = refusing()
        const journal = yield* journalOver(dataDir, files.driver)
        files.set((o, file) => o === op && (op === "readdir" ? file.endsWith("journal") : file.endsWith(".seg")) ? code : undefined)
        const refused = yield* Effect.flip(journal.read(session, { after: 0, limit: 100 }))
        expect(refused._tag).toBe("JournalUnavailable")
        expect(refused.message).toContain(code)
        expect(refused.message).not.toContain("open-file limit")
        expect(refused.message).toContain("not damage")
        files.clear()
        expect(kvs(yield* journal.read(session, { after: 0, limit: 100 }))).toBe(3)
      }))
  }

  it.scoped("refusals for want of descriptors are logged, at most once per interval, with the count refused since the last warning", () =>
    Effect.gen(function*() {
      const { dataDir, session } = yield* withSession
      const warnings: Array<string> = []
      const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ logLevel, message }) => {
        if (logLevel._tag === "Warning") warnings.push(String(Array.isArray(message) ? message.join(" ") : message))
      }))
      yield* Effect.gen(function*() {
        const files = refusing()
        const journal = yield* journalOver(dataDir, files.driver)
        yield* journal.read(session, { after: 0, limit: 100 })
        files.set((op, file, flags) => op === "open" && file.endsWith(".seg") && flags === "r" ? "EMFILE" : undefined)
        for (let i = 0; i < 5; i++) yield* Effect.flip(journal.read(session, { after: 0, limit: 100 }))
        expect(warnings).toHaveLength(1)
        expect(warnings[0]).toMatch(/EMFILE.*1 journal access\(es\) refused/)
        yield* TestClock.adjust(JOURNAL_EXHAUSTED_WARN_MS)
        yield* Effect.flip(journal.read(session, { after: 0, limit: 100 }))
        expect(warnings).toHaveLength(2)
        expect(warnings[1]).toMatch(/5 journal access\(es\) refused/)
      }).pipe(Effect.provide(capture))
    }))
  it.scoped("a checkpoint that cannot be read for want of descriptors is unavailable, never \"no checkpoint\" (which would fold the journal from its start); one that cannot be read for another reason, or is missing, is none", () =>
    Effect.gen(function*() {
      const { dataDir, session } = yield* withSession
      fs.writeFileSync(path.join(dataDir, "sessions", session, CheckpointStore.CHECKPOINT_FILE), "a checkpoint")
      const files = refusing()
      const store = yield* CheckpointStore.makeFile(dataDir).pipe(Effect.provide(Layer.succeed(FileDriver, files.driver)))
      expect(Option.map(yield* store.load(session), (b) => Buffer.from(b).toString())).toEqual(Option.some("a checkpoint"))
      for (const code of ["EMFILE", "ENFILE"]) {
        files.set((op, file) => op === "readFile" && file.endsWith(CheckpointStore.CHECKPOINT_FILE) ? code : undefined)
        const refused = yield* Effect.flip(store.load(session))
        expect(refused._tag).toBe("JournalUnavailable")
        expect(refused.message).toContain(code)
      }
      files.set((op, file) => op === "readFile" && file.endsWith(CheckpointStore.CHECKPOINT_FILE) ? "EIO" : undefined)
      expect(yield* store.load(session)).toEqual(Option.none())
      files.clear()
      expect(Option.map(yield* store.load(session), (b) => Buffer.from(b).toString())).toEqual(Option.some("a checkpoint"))
      expect(yield* store.load(yield* mintSessionId)).toEqual(Option.none())
    }))
})
