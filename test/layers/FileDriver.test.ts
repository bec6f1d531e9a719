/**
 * The Node file driver reports a failed write by the kernel's own errno: a full device is ENOSPC,
 * never a made-up EIO, whether the write fails at once or after writing part of the buffers (a
 * short write is continued from where it stopped, so the call that fails is the one reported). A
 * round of many files goes through the sync thread with the same outcomes, file by file; a sync
 * thread that dies fails every round in it. The file journal's rounds are made durable by one
 * write to its commit log, opened with O_DSYNC, beside plain writes to the segments; without the
 * log it appends to segments opened with O_DSYNC, so its rounds' writes are durable when they
 * return and need no fdatasync after them.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, type FileDriverShape, nodeDriver, PLAIN_SEGMENT_FLAGS, remainingAfter, SEGMENT_FLAGS, SYNC_THREAD_MIN_FILES } from "../../src/layers/journal/FileDriver.js"
import { syncRound, type SyncOutcome, syncThreadNow } from "../../src/layers/journal/SyncThread.js"

/** The flags the kernel holds for `fd` of this process (Linux: /proc/self/fdinfo, in octal). */
const kernelFlags = (fd: number) => parseInt(/^flags:\s*([0-7]+)$/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))![1]!, 8)

describe("the Node file driver", () => {
  const roundsOn = (commitLogBytes: number | undefined, check: (items: Parameters<FileDriverShape["syncMany"]>[0], log: Parameters<FileDriverShape["syncMany"]>[2], opened: Map<number, { path: string; flags: string | number }>) => void) =>
    Effect.gen(function*() {
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-dsync-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dataDir, { recursive: true, force: true })))
      const opened = new Map<number, { path: string; flags: string | number }>()
      const written = new Set<number>()
      const driver: FileDriverShape = {
        ...nodeDriver,
        open: (p, flags) => Effect.tap(nodeDriver.open(p, flags), (fd) => Effect.sync(() => opened.set(fd, { path: p, flags }))),
        syncMany: (items, onDone, log) => {
          for (const item of items) written.add(item.fd)
          check(items, log, opened)
          return nodeDriver.syncMany(items, onDone, log)
        }
      }
      const limits = commitLogBytes === undefined ? {} : { limits: { commitLogBytes } }
      const journal = yield* JournalFile.make({ dataDir, ...limits }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
      // Enough sessions that a round goes through the sync thread too.
      const sessions = yield* Effect.all(Array.from({ length: SYNC_THREAD_MIN_FILES + 1 }, () => mintSessionId))
      yield* Effect.forEach(sessions, (s) => journal.create(s), { discard: true })
      for (let i = 1; i <= 3; i++) {
        yield* Effect.forEach(sessions, (s) => journal.append(s, [entry("kv_put", { key: `k${i}`, value: i })]), { concurrency: "unbounded", discard: true })
      }
      // And one session alone, a round from the main thread.
      yield* journal.append(sessions[0]!, [entry("kv_put", { key: "k4", value: 4 })])
      expect(written.size).toBe(sessions.length)
      for (const s of sessions) {
        const records = yield* journal.read(s, { after: 0, limit: 100 })
        const expected = s === sessions[0] ? [1, 2, 3, 4] : [1, 2, 3]
        expect(records.filter((r) => r.kind === "kv_put").map((r) => r.payload)).toEqual(expected.map((i) => ({ key: `k${i}`, value: i })))
      }
      return { opened, written }
    })

  it.scoped("with the commit log (the default), each round's segment writes go with a batch to a log file the kernel holds open with O_DSYNC, the segments without it, and every round's records read back whole", () =>
    Effect.gen(function*() {
      let rounds = 0
      const { opened, written } = yield* roundsOn(undefined, (items, log, opened) => {
        rounds++
        expect(log, "every round writes a batch").toBeDefined()
        expect(log!.paths.length).toBe(items.length)
        expect(kernelFlags(log!.fd) & fs.constants.O_DSYNC, opened.get(log!.fd)?.path).toBe(fs.constants.O_DSYNC)
        expect(opened.get(log!.fd)?.path).toMatch(/commit-log[/\\][ab]\.log$/)
        for (const item of items) {
          expect(kernelFlags(item.fd) & fs.constants.O_DSYNC, opened.get(item.fd)?.path).toBe(0)
          expect(item.synced).toBe(false)
        }
      })
      expect(rounds).toBeGreaterThanOrEqual(4)
      for (const fd of written) expect([PLAIN_SEGMENT_FLAGS.create, PLAIN_SEGMENT_FLAGS.append]).toContain(opened.get(fd)?.flags)
    }))

  it.scoped("without the commit log, every file the journal's rounds write is open with O_DSYNC (as the kernel holds it), so a write that returns is durable, and every round's records read back whole", () =>
    Effect.gen(function*() {
      const { opened, written } = yield* roundsOn(0, (items, log, opened) => {
        expect(log).toBeUndefined()
        for (const item of items) {
          // Still open: the kernel's own flags for it, not only the flags asked for.
          expect(kernelFlags(item.fd) & fs.constants.O_DSYNC, opened.get(item.fd)?.path).toBe(fs.constants.O_DSYNC)
          expect(item.synced).toBe(true) // Linux has O_DSYNC (SEGMENT_WRITES_SYNCED)
        }
      })
      for (const fd of written) expect([SEGMENT_FLAGS.create, SEGMENT_FLAGS.append]).toContain(opened.get(fd)?.flags)
    }))

  it.effect("a write to a full device fails with ENOSPC, alone and in a group-commit round, and names no path in its reason", () =>
    Effect.gen(function*() {
      const fd = yield* nodeDriver.open("/dev/full", "w")
      const single = yield* Effect.either(nodeDriver.writev(fd, [Buffer.from("abc"), Buffer.from("def")], 0))
      expect(Either.isLeft(single) && single.left.code).toBe("ENOSPC")
      expect(Either.isLeft(single) && single.left.reason).not.toContain("/dev/full")
      const codes: Array<string | undefined> = []
      yield* nodeDriver.syncMany([{ fd, buffers: [Buffer.from("x")], position: 0, bytes: 1 }], (_, e) => codes.push(e?.code))
      expect(codes).toEqual(["ENOSPC"])
      yield* nodeDriver.close(fd)
    }))

  it("a short write continues with exactly the bytes not yet written", () => {
    const buffers = [Buffer.from("abc"), Buffer.from("de"), Buffer.from("fghi")]
    const rest = (n: number) => Buffer.concat(remainingAfter(buffers, n)).toString()
    for (let n = 0; n <= 9; n++) expect(rest(n), `after ${n}`).toBe("abcdefghi".slice(n))
  })

  it.effect("a round of many files, through the sync thread: each file gets exactly its bytes at its position, and a file that fails reports its own errno while the others succeed", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-sync-"))
      const files = SYNC_THREAD_MIN_FILES + 2
      const fds = yield* Effect.forEach(Array.from({ length: files }, (_, i) => path.join(dir, `f${i}`)), (p) => nodeDriver.open(p, "w+"))
      // One of them cannot be written: the device is full.
      const full = yield* nodeDriver.open("/dev/full", "w")
      const items = [...fds.map((fd, i) => ({ fd, buffers: [Buffer.from(`file ${i}: `), Buffer.from("x".repeat(i * 1000))], position: 5 })), {
        fd: full,
        buffers: [Buffer.from("y")],
        position: 0
      }].map((item) => ({ ...item, bytes: item.buffers.reduce((n, b) => n + b.length, 0) }))
      const outcomes: Array<[number, string | undefined]> = []
      yield* nodeDriver.syncMany(items, (i, e) => outcomes.push([i, e?.code]))
      expect(outcomes.sort((a, b) => a[0] - b[0])).toEqual(items.map((_, i) => [i, i === files ? "ENOSPC" : undefined]))
      expect(syncThreadNow(), "the round went through the sync thread").toBeDefined()
      for (let i = 0; i < files; i++) {
        expect(fs.readFileSync(path.join(dir, `f${i}`)).toString()).toBe(`\0\0\0\0\0file ${i}: ${"x".repeat(i * 1000)}`)
      }
      yield* Effect.forEach([...fds, full], (fd) => nodeDriver.close(fd))
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it("a sync thread that dies fails every round in it, each file EIO, and the next round starts a new thread", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-sync-"))
    const fds = Array.from({ length: SYNC_THREAD_MIN_FILES }, (_, i) => fs.openSync(path.join(dir, `f${i}`), "w"))
    const round = (bytes: Buffer) => new Promise<ReadonlyArray<SyncOutcome>>((resolve) => syncRound(fds.map((fd) => ({ fd, buffers: [bytes], position: 0 })), resolve))
    const small = Buffer.from("abc")
    expect(await round(small)).toEqual(fds.map(() => undefined))
    const first = syncThreadNow()!
    // Large enough that the thread is still writing and syncing it when it is stopped.
    const lost = round(Buffer.alloc(32 << 20, 1))
    await first.terminate()
    expect(await lost).toEqual(fds.map(() => ({ op: "write", code: "EIO", detail: expect.stringMatching(/^the sync thread exited/) })))
    expect(await round(small)).toEqual(fds.map(() => undefined))
    expect(syncThreadNow()).not.toBe(first)
    for (const fd of fds) fs.closeSync(fd)
    fs.rmSync(dir, { recursive: true, force: true })
  })
})
