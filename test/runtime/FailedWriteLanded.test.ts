/**
 * A sync send whose turn's first write fails after its bytes reached the disk (the segment write
 * landed and the commit log's batch found the disk full; or, without the commit log, an `O_DSYNC`
 * write that landed whole and failed): it is answered as not started (`turn.sequence` 0, not
 * ambiguous), and that stays true: nothing of it is ever read back, and a retry with its key runs
 * the turn. Only when the store could not take back what landed is the send ambiguous, with its
 * records standing. The file journal runs over a fault-injecting driver (test/support/journals.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver } from "../../src/layers/journal/FileDriver.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { instrumentedDriver, type Landing, tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

const modes: ReadonlyArray<{ readonly name: string; readonly commitLogBytes: number; readonly target: "log" | "segment"; readonly landing: Landing }> = [
  { name: "with the commit log, its batch cut by a full disk", commitLogBytes: 1 << 20, target: "log", landing: { landed: (n) => n >> 1, code: "ENOSPC" } },
  { name: "without the commit log, a segment write that landed whole and failed", commitLogBytes: 0, target: "segment", landing: { landed: (n) => n, code: "EIO" } }
]

const setup = (commitLogBytes: number) =>
  Effect.gen(function*() {
    const dir = yield* tempDir()
    const inst = instrumentedDriver()
    const journal = JournalFile.layer({ dataDir: dir, lockWaitMs: 0, limits: { commitLogBytes } }).pipe(
      Layer.provide(Layer.succeed(FileDriver, inst.driver)),
      Layer.orDie // a data directory that cannot be opened is a broken test setup
    )
    const context = yield* Layer.build(runtimeLayer({ journal }))
    return { inst, s: Context.get(context, Sessions), j: Context.get(context, Journal) }
  })

describe("a send whose turn's first write failed after landing", () => {
  for (const m of modes) {
    it.scoped(`${m.name}: answered not started, nothing of it is ever read back, and a retry with its key runs the turn`, () =>
      Effect.gen(function*() {
        const { inst, j, s } = yield* setup(m.commitLogBytes)
        const { session_id } = yield* s.create({ model: { provider: "scripted" } })
        const before = (yield* s.get(session_id)).last_sequence
        const part = m.target === "log" ? "commit-log" : session_id
        inst.landsThenFails(part, m.landing)
        const refused = yield* s.sendKeyed(session_id, { message: "A" }, { key: "ka", hash: "ha" })
        expect(refused._tag).toBe("Answered")
        const outcome = (refused as Extract<typeof refused, { _tag: "Answered" }>).value
        expect(outcome.turn.sequence).toBe(0)
        expect(outcome.turn.failure).toMatchObject({ code: "journal_write_failed", ambiguous: false })
        expect(outcome.last_sequence).toBe(before)

        inst.diskFreed(part)
        // The next access reopens the session from what is stored: nothing of the refused send is there.
        expect(yield* s.get(session_id)).toMatchObject({ status: "idle", last_sequence: before })
        const stored = yield* j.read(session_id, { after: 0, limit: 100 })
        expect(stored.filter((r) => r.kind === "turn_started" || r.kind === "turn_failed")).toEqual([])
        expect(stored.some((r) => r.kind === "request_claimed")).toBe(false)

        const retried = yield* s.sendKeyed(session_id, { message: "A" }, { key: "ka", hash: "ha" })
        expect(retried._tag).toBe("Answered")
        const ran = (retried as Extract<typeof retried, { _tag: "Answered" }>).value
        expect(ran.turn).toMatchObject({ sequence: before + 1, status: "ended" })
        const after = yield* j.read(session_id, { after: 0, limit: 100 })
        expect(after.filter((r) => r.kind === "turn_started").map((r) => [r.sequence, r.payload.input])).toEqual([[before + 1, { message: "A" }]])
        expect(after.some((r) => r.kind === "turn_failed")).toBe(false)
      }))
  }

  it.scoped("with the commit log, when the landed segment write cannot be cut back: the send is ambiguous, its turn stands and is closed by recovery, and its key is not run again", () =>
    Effect.gen(function*() {
      const { inst, j, s } = yield* setup(1 << 20)
      const { session_id } = yield* s.create({ model: { provider: "scripted" } })
      const before = (yield* s.get(session_id)).last_sequence
      inst.landsThenFails("commit-log", { landed: (n) => n >> 1, code: "ENOSPC" })
      inst.failTruncates(session_id)
      const refused = yield* s.sendKeyed(session_id, { message: "A" }, { key: "ka", hash: "ha" })
      expect(refused._tag).toBe("Answered")
      const outcome = (refused as Extract<typeof refused, { _tag: "Answered" }>).value
      expect(outcome.turn.sequence).toBe(before + 1)
      expect(outcome.turn.failure).toMatchObject({ code: "journal_write_failed", ambiguous: true })

      inst.diskFreed("commit-log")
      inst.diskFreed(session_id)
      expect((yield* s.get(session_id)).status).toBe("idle")
      const stored = yield* j.read(session_id, { after: 0, limit: 100 })
      expect(stored.filter((r) => r.kind === "turn_started").map((r) => r.sequence)).toEqual([before + 1])
      expect(stored.filter((r) => r.kind === "turn_failed").map((r) => r.payload.failure.code)).toEqual(["interrupted"])
      const retried = yield* s.sendKeyed(session_id, { message: "A" }, { key: "ka", hash: "ha" })
      expect(retried._tag).toBe("Ambiguous")
    }))
})
