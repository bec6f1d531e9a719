/**
 * A journal write that fails in the middle of a turn (the disk is full) closes the turn in memory,
 * never leaves the session `running` for ever, answers a clear non-retryable error while the disk
 * still refuses writes, and recovers on the next access once it accepts them, without a restart.
 * The file journal runs over a fault-injecting driver that answers ENOSPC to every write of the
 * session until the disk is "freed".
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Either, Fiber, Layer } from "effect"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver } from "../../src/layers/journal/FileDriver.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"
import { firstCallHeld } from "../support/models.js"
import { runtimeLayer } from "../support/runtime.js"

describe("a journal write failure during a turn", () => {
  it.scoped("closes the turn in memory, answers journal_write_failed (not session_busy) while the disk is full, and recovers on the next access once it has room", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const inst = instrumentedDriver()
      // The first model call waits until the test has filled the disk; later ones answer at once.
      const { models, proceed, reached } = yield* firstCallHeld
      const journal = JournalFile.layer({ dataDir: dir, lockWaitMs: 0 }).pipe(
        Layer.provide(Layer.succeed(FileDriver, inst.driver)),
        Layer.orDie // a data directory that cannot be opened is a broken test setup
      )
      const context = yield* Layer.build(runtimeLayer({ journal, models }))
      const s = Context.get(context, Sessions)
      const j = Context.get(context, Journal)

      const { session_id } = yield* s.create({ model: { provider: "scripted" } })
      const sending = yield* Effect.fork(s.send(session_id, { message: "hello" }))
      yield* Deferred.await(reached)
      inst.diskFull(session_id)
      yield* Deferred.succeed(proceed, undefined)
      const outcome = yield* Fiber.join(sending)
      expect(outcome.turn.status).toBe("failed")
      expect(outcome.turn.failure?.code).toBe("journal_write_failed")
      expect(outcome.turn.failure?.message).toContain("ENOSPC")
      expect(outcome.status).toBe("idle")

      // The disk is still full: every access says so, none says busy, none hangs.
      for (const attempt of [s.get(session_id), s.send(session_id, { message: "again" }), s.interrupt(session_id), s.end(session_id)]) {
        const r = yield* Effect.either(attempt)
        expect(Either.isLeft(r) && r.left.code).toBe("journal_write_failed")
        expect(Either.isLeft(r) && r.left.retryable).toBe(false)
      }

      // Room again: the next access records the interrupted turn and the session works.
      inst.diskFreed(session_id)
      const summary = yield* s.get(session_id)
      expect(summary.status).toBe("idle")
      const records = yield* j.read(session_id, { after: 0, limit: 100 })
      const kinds = records.map((r) => r.kind)
      expect(kinds.filter((k) => k === "turn_failed")).toHaveLength(1)
      expect(kinds.filter((k) => k === "model_call_failed")).toHaveLength(1)
      const closed = records.find((r) => r.kind === "turn_failed")!
      expect(closed.payload.failure).toMatchObject({ code: "interrupted", ambiguous: true })
      expect(closed.payload.failure.message).toContain("a journal write failed")
      const next = yield* s.send(session_id, { message: "after" })
      expect(next.turn.status).toBe("ended")
      expect((yield* s.transcript(session_id)).messages.map((m) => m.content)).toContain("after")
    }))

  it.scoped("a send whose turn's first write fails names no turn sequence, is not ambiguous, and its key and sequence are free for the next send", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const inst = instrumentedDriver()
      const journal = JournalFile.layer({ dataDir: dir, lockWaitMs: 0 }).pipe(
        Layer.provide(Layer.succeed(FileDriver, inst.driver)),
        Layer.orDie
      )
      const context = yield* Layer.build(runtimeLayer({ journal }))
      const s = Context.get(context, Sessions)
      const j = Context.get(context, Journal)

      const { session_id } = yield* s.create({ model: { provider: "scripted" } })
      const before = (yield* s.get(session_id)).last_sequence
      // The disk is full before the send: its staged opening is never written.
      inst.diskFull(session_id)
      const refused = yield* s.sendKeyed(session_id, { message: "A" }, { key: "ka", hash: "ha" })
      expect(refused._tag).toBe("Answered")
      const outcome = (refused as Extract<typeof refused, { _tag: "Answered" }>).value
      expect(outcome.turn.status).toBe("failed")
      // Sequence 0 names no record: the turn's opening was never durable.
      expect(outcome.turn.sequence).toBe(0)
      expect(outcome.last_sequence).toBe(before)
      expect(outcome.turn.failure?.code).toBe("journal_write_failed")
      expect(outcome.turn.failure?.message).toMatch(/^the turn could not be started: /)
      expect(outcome.turn.failure?.message).toContain("ENOSPC")
      expect(outcome.turn.failure?.ambiguous).toBe(false)
      expect(outcome.turn.failure?.retryable).toBe(false)

      // Room again: nothing of A is in the journal, and the next send takes the next sequence.
      inst.diskFreed(session_id)
      expect((yield* s.get(session_id)).status).toBe("idle")
      const b = yield* s.sendKeyed(session_id, { message: "B" }, { key: "kb", hash: "hb" })
      expect(b._tag === "Answered" && b.value.turn.status).toBe("ended")
      const records = yield* j.read(session_id, { after: 0, limit: 100 })
      const started = records.filter((r) => r.kind === "turn_started")
      expect(started.map((r) => r.payload.input)).toEqual([{ message: "B" }])
      expect(b._tag === "Answered" && b.value.turn.sequence).toBe(started[0]!.sequence)
      expect(records.some((r) => r.kind === "request_claimed" && r.payload.key === "ka")).toBe(false)
      // The refused send's key is free: a retry with it runs.
      const retried = yield* s.sendKeyed(session_id, { message: "A" }, { key: "ka", hash: "ha" })
      expect(retried._tag === "Answered" && retried.value.turn.status).toBe("ended")
      expect(retried._tag === "Answered" && retried.value.turn.sequence).toBeGreaterThan(started[0]!.sequence)
    }))
})
