/**
 * An abandoned loop's writes (Turn.ts, Abandon.ts): a loop that ignores its turn's cancel and
 * interruption is abandoned after the graces, and the turn closes without it. A host call it made
 * before the cancel that is still waiting its turn to write (queued behind a write the journal has
 * not yet answered) must then be refused, never written after the turn's close, however long the
 * journal stalls past the graces. The file journal over a driver whose fdatasync is held: every
 * append waits, in order, as on a disk that stops answering for a while.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Either, Fiber, Layer } from "effect"
import type { JournalRecord } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, type FileDriverShape, nodeDriver, syncManyVia } from "../../src/layers/journal/FileDriver.js"
import type { AgentloopShape, HostCallFailed } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

/** Milliseconds of each cancel grace: the loop is abandoned about three of them after the cancel. */
const GRACE_MS = 100
/** Milliseconds the disk holds its syncs: well past the graces, within the closing append's deadline. */
const STALL_MS = 1_000

/** Node's file driver whose fdatasync waits, once `stall` is set, until that Deferred is done. */
const stallingDriver = () => {
  let gate: Deferred.Deferred<void> | undefined
  const driver: FileDriverShape = {
    ...nodeDriver,
    fdatasync: (fd) => Effect.suspend(() => (gate ? Effect.zipRight(Deferred.await(gate), nodeDriver.fdatasync(fd)) : nodeDriver.fdatasync(fd))),
    syncMany: (items, onDone, log) => syncManyVia(driver)(items, onDone, log)
  }
  return { driver, stall: (until: Deferred.Deferred<void>) => void (gate = until) }
}

describe("an abandoned loop's queued writes", () => {
  it.live("a kvPut queued behind a stalled write when the turn is cancelled is refused with the cancel, and nothing of the loop is written after the turn's close, though the journal stalls past the graces", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-abandoned-")
      const disk = stallingDriver()
      const stalled = yield* Deferred.make<void>()
      const issued = yield* Deferred.make<void>()
      const answers = yield* Deferred.make<ReadonlyArray<Either.Either<void, HostCallFailed>>>()
      // Deaf to the cancel and to interruption: a save, then a kvPut that queues behind it while the disk holds the save.
      const deaf: AgentloopShape = {
        activate: (input, host) =>
          Effect.uninterruptible(Effect.gen(function*() {
            disk.stall(stalled)
            const save = yield* Effect.fork(Effect.either(host.setTranscript([...input.transcript, { role: "user", content: "saved" }])))
            yield* Effect.yieldNow()
            const put = yield* Effect.fork(Effect.either(host.kvPut("late", 1)))
            yield* Effect.yieldNow()
            yield* Deferred.succeed(issued, undefined)
            const both = [yield* Fiber.join(save), yield* Fiber.join(put)]
            yield* Deferred.succeed(answers, both)
            return { text: "late" }
          }))
      }
      const journal = JournalFile.layer({ dataDir: dir, lockWaitMs: 0 }).pipe(Layer.provide(Layer.succeed(FileDriver, disk.driver)), Layer.orDie)
      const context = yield* Layer.build(runtimeLayer({ journal, loops: { deaf }, config: { cancelGraceMs: GRACE_MS, cleanupDeadlineMs: 10_000 } }))
      const sessions = Context.get(context, Sessions)
      const { session_id } = yield* sessions.create({ model: { provider: "scripted" }, agentloop: "deaf" })
      const sent = yield* Effect.fork(sessions.send(session_id, { message: "go" }))
      yield* Deferred.await(issued)
      // The disk answers again STALL_MS from now: the loop is abandoned long before.
      yield* Effect.fork(Effect.zipRight(Effect.sleep(STALL_MS), Deferred.succeed(stalled, undefined)))
      yield* sessions.interrupt(session_id)
      const outcome = yield* Fiber.join(sent)
      expect(outcome.turn).toMatchObject({ status: "failed", failure: { code: "cancelled", message: expect.stringContaining("abandoned") } })
      const [save, put] = yield* Deferred.await(answers)
      // The save was written before the cancel reached it (the turn's close follows it); the kvPut never was.
      expect(Either.isRight(save!)).toBe(true)
      expect(Either.isLeft(put!) && put.left.failure.code).toBe("cancelled")
      const records: ReadonlyArray<JournalRecord> = yield* Effect.orDie(Context.get(context, Journal).read(session_id, { after: 0, limit: 1000 }))
      const closed = records.findIndex((r) => r.kind === "turn_failed")
      expect(closed).toBeGreaterThan(0)
      expect(records.slice(closed + 1).map((r) => r.kind)).toEqual([])
      expect(records.filter((r) => r.kind === "kv_put")).toEqual([])
    }).pipe(Effect.scoped), 30_000)
})
