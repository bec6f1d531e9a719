/**
 * Two owners of one session, as two processes sharing a store would be after a hand-over: the
 * second owner's first access recovers the session, and what the first owner still had in
 * flight never lands after that recovery. The model call in flight is recorded once, as
 * recovery's unknown outcome; the first owner's late result is refused and nothing it sends
 * afterwards is written.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Either, Fiber, Layer } from "effect"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import type { MemorySessions } from "../../src/layers/JournalMemory.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { firstCallHeld } from "../support/models.js"
import { runtimeLayer } from "../support/runtime.js"

describe("a session handed to another owner", () => {
  it.scoped("is recovered by the new owner, and the old owner's late outcome and later sends are refused without writing anything", () =>
    Effect.gen(function*() {
      const shared: MemorySessions = new Map()
      // The old owner's first model call waits until the new owner has taken the session over.
      const { models, proceed, reached } = yield* firstCallHeld
      const oldOwner = yield* Layer.build(runtimeLayer({ journal: JournalMemory.layerOver(shared), models }))
      const newOwner = yield* Layer.build(runtimeLayer({ journal: JournalMemory.layerOver(shared), models }))
      const a = Context.get(oldOwner, Sessions)
      const b = Context.get(newOwner, Sessions)
      const j = Context.get(newOwner, Journal)

      const { session_id } = yield* a.create({ model: { provider: "scripted" } })
      const sending = yield* Effect.fork(a.send(session_id, { message: "hello" }))
      yield* Deferred.await(reached)

      // The new owner's first access finds the turn unfinished and records its recovery.
      const summary = yield* b.get(session_id)
      expect(summary.status).toBe("idle")
      const recovered = yield* j.read(session_id, { after: 0, limit: 100 })
      const before = recovered.length
      expect(recovered.filter((r) => r.kind === "model_call_failed")).toHaveLength(1)
      expect(recovered.find((r) => r.kind === "turn_failed")!.payload.failure).toMatchObject({ code: "interrupted", ambiguous: true })

      // The old owner's model answers now: its outcome is refused, never recorded after recovery's.
      yield* Deferred.succeed(proceed, undefined)
      const outcome = yield* Fiber.join(sending)
      expect(outcome.turn.status).toBe("failed")
      expect(outcome.turn.failure?.code).toBe("journal_write_failed")
      const late = yield* Effect.either(a.send(session_id, { message: "from the old owner" }))
      // Refused whole or as a turn that could not be recorded: either way journal_write_failed.
      expect(Either.isLeft(late) ? late.left.code : late.right.turn.failure?.code).toBe("journal_write_failed")
      const after = yield* j.read(session_id, { after: 0, limit: 100 })
      expect(after.length).toBe(before)
      expect(after.filter((r) => r.kind === "model_call_ended" || r.kind === "model_call_failed")).toHaveLength(1)

      // The new owner serves the session.
      const next = yield* b.send(session_id, { message: "to the new owner" })
      expect(next.turn.status).toBe("ended")
      const messages = (yield* b.transcript(session_id)).messages.map((m) => m.content)
      expect(messages).toContain("to the new owner")
      expect(messages).not.toContain("from the old owner")
    }))
})
