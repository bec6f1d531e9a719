/**
 * A group-commit round with the commit log writes its segment files and its batch at once
 * (src/layers/journal/FileDriver.ts, `syncMany`): the batch, holding every item, is submitted
 * before the items' writes have come back, so a commit waits for the longer of the two writes,
 * not for both in a row. What the driver then reports is what it reported when the batch followed
 * the items: a batch of exactly the items written stands at the log's position, or the log's write
 * is reported failed (and the file store erases whatever of it landed). These cases run each
 * interleaving of failures against each way a round is written: the Node driver's own round from
 * the main thread, its round of many files on the sync thread, and `syncManyVia` (a driver built
 * from its own `writev` and `fdatasync`, as the fault-injecting drivers are).
 */
import * as fs from "node:fs"
import { createRequire, syncBuiltinESMExports } from "node:module"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { scanLog } from "../../../src/layers/journal/CommitLogFormat.js"
import { type CommitLogWrite, FileError, type FileDriverShape, nodeDriver, type SyncItem, syncManyVia } from "../../../src/layers/journal/FileDriver.js"
import { tempDir } from "../../support/journals.js"

const drivers: ReadonlyArray<{ readonly name: string; readonly files: number; readonly driver: FileDriverShape }> = [
  { name: "the Node driver, a round of two files from the main thread", files: 2, driver: nodeDriver },
  { name: "the Node driver, a round of four files on the sync thread", files: 4, driver: nodeDriver },
  { name: "syncManyVia (a driver's own writev and fdatasync)", files: 2, driver: { ...nodeDriver, syncMany: syncManyVia(nodeDriver) } }
]

/** node:fs as a CommonJS module, whose functions can be replaced (then synced into its ESM namespace, which the driver imports). */
const fsModule: { writev: typeof fs.writev } = createRequire(import.meta.url)("node:fs")

const USE = { epoch: 3, salt: 0x1234_5678_9abc }

interface Round {
  readonly dir: string
  readonly files: ReadonlyArray<string>
  readonly log: string
  readonly items: Array<SyncItem>
  readonly logFd: number
}

/** `files` segment files, each to get 40 bytes at 100, and a log file (`O_DSYNC`, as the store opens it); `readOnly` items' descriptors refuse writes (EBADF). */
const round = (files: number, options: { readonly readOnly?: ReadonlyArray<number>; readonly logReadOnly?: boolean } = {}) =>
  Effect.map(tempDir(), (dir): Round => {
    const paths = Array.from({ length: files }, (_, i) => path.join(dir, `s${i}.seg`))
    const items = paths.map((p, i) => {
      fs.writeFileSync(p, Buffer.alloc(100, 0x2e))
      const fd = fs.openSync(p, options.readOnly?.includes(i) ? "r" : "r+")
      return { fd, buffers: [Buffer.alloc(15, 0x61 + i), Buffer.alloc(25, 0x41 + i)], position: 100, bytes: 40 }
    })
    const log = path.join(dir, "a.log")
    fs.writeFileSync(log, Buffer.alloc(0))
    const logFd = fs.openSync(log, options.logReadOnly === true ? fs.constants.O_RDONLY : fs.constants.O_RDWR | fs.constants.O_DSYNC)
    return { dir, files: paths, log, items, logFd }
  })

/** Runs the round through `driver.syncMany` with a log, and tells what each side was told. */
const run = (driver: FileDriverShape, r: Round) =>
  Effect.gen(function*() {
    const told: { logged?: { bytes: number; error: FileError | undefined }; items: Array<FileError | undefined | "untold"> } = {
      items: r.items.map(() => "untold" as const)
    }
    const log: CommitLogWrite = {
      fd: r.logFd,
      position: 0,
      use: USE,
      synced: true,
      paths: r.files.map((f) => new TextEncoder().encode(path.basename(f))),
      onWritten: (bytes, error) => {
        expect(told.items.every((t) => t === "untold"), "the log's outcome comes before any item's").toBe(true)
        told.logged = { bytes, error }
      }
    }
    yield* driver.syncMany(r.items, (i, error) => {
      told.items[i] = error
    }, log)
    for (const item of r.items) fs.closeSync(item.fd)
    fs.closeSync(r.logFd)
    return told
  })

/** The batches the log holds, each as the names of its entries. */
const logged = (r: Round) => scanLog(fs.readFileSync(r.log)).batches.map((b) => b.map((e) => e.path))
/** Each segment's bytes past the 100 it had. */
const tails = (r: Round) => r.files.map((f) => fs.readFileSync(f).subarray(100).toString("latin1"))
const expected = (i: number) => "abcdefgh"[i]!.repeat(15) + "ABCDEFGH"[i]!.repeat(25)

describe("a round's segment writes and its commit-log batch are written at once", () => {
  for (const d of drivers.filter((d) => d.files < 4)) {
    it.scoped(`${d.name}: the batch's write is submitted before the segment writes have come back`, () =>
      Effect.gen(function*() {
        const r = yield* round(d.files)
        // Every write goes through fs.writev: each submission and callback noted, by descriptor.
        const events: Array<string> = []
        const real = fsModule.writev
        const name = (fd: number) => (fd === r.logFd ? "log" : "segment")
        const patched = ((fd: number, buffers: ReadonlyArray<NodeJS.ArrayBufferView>, position: number, cb: (...args: Array<unknown>) => void) => {
          events.push(`${name(fd)} submitted`)
          real(fd, buffers, position, (...args: Array<unknown>) => {
            events.push(`${name(fd)} done`)
            cb(...args)
          })
        }) as typeof fs.writev
        yield* Effect.acquireRelease(
          Effect.sync(() => {
            fsModule.writev = patched
            syncBuiltinESMExports()
          }),
          () =>
            Effect.sync(() => {
              fsModule.writev = real
              syncBuiltinESMExports()
            })
        )
        const told = yield* run(d.driver, r)
        expect(told.items).toEqual(r.items.map(() => undefined))
        const logSubmitted = events.indexOf("log submitted")
        const firstSegmentDone = events.indexOf("segment done")
        expect(logSubmitted, events.join(", ")).toBeGreaterThanOrEqual(0)
        expect(logSubmitted, events.join(", ")).toBeLessThan(firstSegmentDone)
      }))
  }

  for (const d of drivers) {
    it.scoped(`${d.name}: when every write lands, one batch of every item stands in the log and every item is done`, () =>
      Effect.gen(function*() {
        const r = yield* round(d.files)
        const told = yield* run(d.driver, r)
        expect(told.logged).toEqual({ bytes: fs.statSync(r.log).size, error: undefined })
        expect(told.items).toEqual(r.items.map(() => undefined))
        expect(logged(r)).toEqual([r.files.map((f) => path.basename(f))])
        expect(tails(r)).toEqual(r.files.map((_, i) => expected(i)))
      }))

    it.scoped(`${d.name}: a segment write that fails while the batch lands leaves a batch of exactly the items written at the log's position; the failed item alone fails`, () =>
      Effect.gen(function*() {
        const r = yield* round(d.files, { readOnly: [1] })
        const told = yield* run(d.driver, r)
        const kept = r.files.filter((_, i) => i !== 1).map((f) => path.basename(f))
        expect(logged(r)).toEqual([kept])
        expect(told.logged?.error).toBeUndefined()
        // The bytes told are the batch that stands: the next round's goes right after it.
        const scan = scanLog(fs.readFileSync(r.log))
        expect(told.logged?.bytes).toBe(scan.end)
        expect(told.items.map((e) => e === undefined ? "ok" : (e as FileError).code)).toEqual(r.items.map((_, i) => (i === 1 ? "EBADF" : "ok")))
      }))

    it.scoped(`${d.name}: when every segment write fails, no batch stands unless the log's write is reported failed (so the store erases it), and each item fails with its own error`, () =>
      Effect.gen(function*() {
        const r = yield* round(d.files, { readOnly: Array.from({ length: d.files }, (_, i) => i) })
        const told = yield* run(d.driver, r)
        expect(told.logged?.bytes).toBe(0)
        // The batch of a round written at once with its segments landed, and is reported failed; the
        // sync thread writes its batch after the segments, of those written: none here, nothing logged.
        expect(told.logged?.error !== undefined || logged(r).length === 0, `${told.logged?.error} ${logged(r)}`).toBe(true)
        expect(told.items.map((e) => (e as FileError).code)).toEqual(r.items.map(() => "EBADF"))
      }))

    it.scoped(`${d.name}: a log write that fails while the segment writes land fails every item with the log's error`, () =>
      Effect.gen(function*() {
        const r = yield* round(d.files, { logReadOnly: true })
        const told = yield* run(d.driver, r)
        expect(told.logged?.bytes).toBe(0)
        expect(told.logged?.error?.code).toBe("EBADF")
        expect(told.items).toEqual(r.items.map(() => told.logged?.error))
        expect(logged(r)).toEqual([])
      }))

    it.scoped(`${d.name}: a log write and a segment write that both fail fail every item, the failed segment's with its own error`, () =>
      Effect.gen(function*() {
        const r = yield* round(d.files, { readOnly: [0], logReadOnly: true })
        const told = yield* run(d.driver, r)
        expect(told.logged?.bytes).toBe(0)
        expect(told.logged?.error?.code).toBe("EBADF")
        expect(told.items[0]).not.toBe(told.logged?.error)
        expect((told.items[0] as FileError).code).toBe("EBADF")
        expect(told.items.slice(1)).toEqual(r.items.slice(1).map(() => told.logged?.error))
      }))
  }

  it.scoped("syncManyVia: when a segment write fails and the batch of the items written cannot be written in the full batch's place, the log's write is reported failed and every item fails", () =>
    Effect.gen(function*() {
      const r = yield* round(2, { readOnly: [1] })
      let logWrites = 0
      const driver: FileDriverShape = {
        ...nodeDriver,
        writev: (fd, buffers, position) =>
          Effect.suspend(() => {
            if (fd !== r.logFd || ++logWrites === 1) return nodeDriver.writev(fd, buffers, position)
            // The second write of the log (the batch of the items written) lands whole, then fails.
            return Effect.zipRight(
              nodeDriver.writev(fd, buffers, position),
              Effect.fail(new FileError({ op: "write", path: `fd ${fd}`, code: "EIO", detail: "injected after landing" }))
            )
          })
      }
      const told = yield* run({ ...driver, syncMany: syncManyVia(driver) }, r)
      expect(logWrites).toBe(2)
      expect(told.logged).toEqual({ bytes: 0, error: expect.objectContaining({ code: "EIO" }) })
      expect((told.items[1] as FileError).code).toBe("EBADF")
      expect(told.items[0]).toBe(told.logged?.error)
    }))
})
