/**
 * The Node file driver reports a failed write by the kernel's own errno: a full device is ENOSPC,
 * never a made-up EIO, whether the write fails at once or after writing part of the buffers (a
 * short write is continued from where it stopped, so the call that fails is the one reported). A
 * round of many files goes through the sync thread with the same outcomes, file by file; a sync
 * thread that dies fails every round in it.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { nodeDriver, remainingAfter, SYNC_THREAD_MIN_FILES } from "../../src/layers/journal/FileDriver.js"
import { syncRound, type SyncOutcome, syncThreadNow } from "../../src/layers/journal/SyncThread.js"

describe("the Node file driver", () => {
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
