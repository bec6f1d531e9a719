/**
 * A journal read gives back every descriptor it opened, however it ends: a reader that goes away
 * (an HTTP client that hangs up, an SSE stream cancelled) interrupts its read at any point — while
 * a segment's open is in flight, just after it returned, while a chunk is being read — and the
 * process then holds no more descriptors on the journal's files than before the read. Before,
 * an open interrupted in flight dropped the descriptor its callback brought, and one interrupted
 * after it returned never reached the `ensuring` that closes it: each aborted read could keep a
 * segment open until the process exited (1 → 174 descriptors on one segment after 1,200 aborted
 * reads), and at the process's limit every read and create failed.
 *
 * Counted from /proc/self/fd: the descriptors this process holds on files of the test's data
 * directory (its commit log's two files are held throughout, whatever the reads do).
 */
import * as fs from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, type FileDriverShape, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { tempDir } from "../support/journals.js"

/** Descriptors this process holds on files under `dir`. */
const openUnder = (dir: string) =>
  fs.readdirSync("/proc/self/fd").filter((fd) => {
    try {
      return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir)
    } catch {
      return false // the directory's own descriptor, closed while listed
    }
  }).length

/** How many times each interruption point is tried. */
const ROUNDS = 40

/** Gives a late open callback (a threadpool job) time to arrive before descriptors are counted. */
const settle = Effect.sleep("30 millis")

/** A data directory holding one session whose records are too big for the recent tail: reads after 0 go to its segment file. */
const journalOnDisk = Effect.gen(function*() {
  const dataDir = yield* tempDir("brain-fds-")
  const session = yield* mintSessionId
  yield* Effect.scoped(Effect.gen(function*() {
    const journal = yield* JournalFile.make({ dataDir }).pipe(Effect.provide(Layer.succeed(FileDriver, nodeDriver)))
    yield* journal.create(session)
    for (let i = 0; i < 4; i++) yield* journal.append(session, [entry("kv_put", { key: `k${i}`, value: "v".repeat(64 * 1024) })])
  }))
  return { dataDir, session }
})

/** The journal over `driver`, the session opened and read once (so later reads only open its segment). */
const opened = (dataDir: string, session: SessionId, driver: FileDriverShape) =>
  Effect.gen(function*() {
    const journal = yield* JournalFile.make({ dataDir }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
    const records = yield* journal.read(session, { after: 0, limit: 100 })
    expect(records.filter((r) => r.kind === "kv_put")).toHaveLength(4)
    return journal
  })

/** A segment opened for reading (the read path's only open once the session is open). */
const isSegmentRead = (p: string, flags: string | number) => p.endsWith(".seg") && flags === "r"

describe("a journal read gives back its descriptors however it is interrupted", () => {
  it.scopedLive("a read interrupted while its segment's open is in flight leaves no descriptor open", () =>
    Effect.gen(function*() {
      const { dataDir, session } = yield* journalOnDisk
      let started = yield* Deferred.make<void>()
      const driver: FileDriverShape = {
        ...nodeDriver,
        open: (p, flags) => isSegmentRead(p, flags) ? Effect.zipRight(Deferred.succeed(started, undefined), nodeDriver.open(p, flags)) : nodeDriver.open(p, flags)
      }
      const journal = yield* opened(dataDir, session, driver)
      const baseline = openUnder(dataDir)
      for (let i = 0; i < ROUNDS; i++) {
        started = yield* Deferred.make<void>()
        const reader = yield* Effect.fork(journal.read(session, { after: 0, limit: 100 }))
        yield* Deferred.await(started)
        yield* Fiber.interrupt(reader)
      }
      yield* settle
      expect(openUnder(dataDir)).toBe(baseline)
    }))

  it.scopedLive("a read interrupted just after its segment's open returned leaves no descriptor open", () =>
    Effect.gen(function*() {
      const { dataDir, session } = yield* journalOnDisk
      let returned = yield* Deferred.make<void>()
      const driver: FileDriverShape = {
        ...nodeDriver,
        // The open has its descriptor and has not handed it over yet: a few milliseconds in which to be interrupted.
        open: (p, flags) =>
          isSegmentRead(p, flags)
            ? nodeDriver.open(p, flags).pipe(Effect.tap(() => Deferred.succeed(returned, undefined)), Effect.tap(() => Effect.sleep("5 millis")))
            : nodeDriver.open(p, flags)
      }
      const journal = yield* opened(dataDir, session, driver)
      const baseline = openUnder(dataDir)
      for (let i = 0; i < ROUNDS; i++) {
        returned = yield* Deferred.make<void>()
        const reader = yield* Effect.fork(journal.read(session, { after: 0, limit: 100 }))
        yield* Deferred.await(returned)
        yield* Fiber.interrupt(reader)
      }
      yield* settle
      expect(openUnder(dataDir)).toBe(baseline)
    }))

  it.scopedLive("a read interrupted while a chunk of its segment is being read leaves no descriptor open", () =>
    Effect.gen(function*() {
      const { dataDir, session } = yield* journalOnDisk
      let reading = yield* Deferred.make<void>()
      const driver: FileDriverShape = {
        ...nodeDriver,
        read: (fd, buffer, position) => Effect.zipRight(Deferred.succeed(reading, undefined), nodeDriver.read(fd, buffer, position))
      }
      const journal = yield* opened(dataDir, session, driver)
      const baseline = openUnder(dataDir)
      for (let i = 0; i < ROUNDS; i++) {
        reading = yield* Deferred.make<void>()
        const reader = yield* Effect.fork(journal.read(session, { after: 0, limit: 100 }))
        yield* Deferred.await(reading)
        yield* Fiber.interrupt(reader)
      }
      yield* settle
      expect(openUnder(dataDir)).toBe(baseline)
    }))

  it.scopedLive("reads interrupted after any number of steps, on the Node driver itself, leave no descriptor open", () =>
    Effect.gen(function*() {
      const { dataDir, session } = yield* journalOnDisk
      const journal = yield* opened(dataDir, session, nodeDriver)
      const baseline = openUnder(dataDir)
      for (let i = 0; i < 200; i++) {
        const reader = yield* Effect.fork(journal.read(session, { after: 0, limit: 100 }))
        // Interrupted at a different point each time: from before its open to the middle of its reads.
        for (let k = 0; k < i % 25; k++) yield* Effect.yieldNow()
        if (i % 5 === 4) yield* Effect.sleep(`${i % 3} millis`)
        yield* Fiber.interrupt(reader)
      }
      yield* settle
      expect(openUnder(dataDir)).toBe(baseline)
      // And the journal still reads whole.
      expect((yield* journal.read(session, { after: 0, limit: 100 })).filter((r) => r.kind === "kv_put")).toHaveLength(4)
    }))
})

describe("the Node driver's open", () => {
  it.scopedLive("an open interrupted while in flight closes the descriptor its late callback brings", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-fds-")
      const file = `${dir}/f`
      fs.writeFileSync(file, "x")
      for (let i = 0; i < ROUNDS; i++) {
        const opening = yield* Effect.fork(nodeDriver.open(file, "r"))
        yield* Effect.yieldNow() // the open is under way
        yield* Fiber.interrupt(opening)
      }
      yield* settle
      expect(openUnder(dir)).toBe(0)
    }))
})
