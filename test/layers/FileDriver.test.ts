/**
 * The Node file driver reports a failed write by the kernel's own errno: a full device is ENOSPC,
 * never a made-up EIO, whether the write fails at once or after writing part of the buffers (a
 * short write is continued from where it stopped, so the call that fails is the one reported).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { nodeDriver, remainingAfter } from "../../src/layers/journal/FileDriver.js"

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
})
