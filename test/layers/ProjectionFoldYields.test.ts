/**
 * The fold of a journal yields to the event loop between its pages: a cold open of a long session
 * without a checkpoint folds the whole journal, and before, it did so in one run of the main
 * thread, holding timers and sockets (`/health/live` included) until it was done. The journal here
 * is the memory one, whose reads never wait for IO: only the fold's own turns let a timer run.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"

const writeSession = (journal: JournalShape, session: SessionId, turns: number) =>
  Effect.gen(function*() {
    yield* journal.create(session)
    yield* journal.append(session, [entry("session_creation_started", { configuration: { agentloop: "official", model: "m" } })])
    yield* journal.append(session, [entry("session_creation_ended", { sequence: 1 })])
    for (let t = 0; t < turns; t++) {
      const [turn] = yield* journal.append(session, [entry("turn_started", { input: { message: `m${t}` }, mode: "send" })])
      yield* journal.append(session, [
        entry("transcript_delta", { keep: 2 * t, append: [{ role: "user", content: `m${t}` }, { role: "assistant", content: `a${t}` }] })
      ])
      yield* journal.append(session, [entry("turn_ended", { sequence: turn! })])
    }
  })

const services = Layer.merge(JournalMemory.layer, CheckpointStore.layerMemory)

describe("the journal's fold", () => {
  it.scoped("lets a timer set before a cold open of a journal of several pages run before the open ends", () =>
    Effect.gen(function*() {
      const journal = yield* Journal
      const session = yield* mintSessionId
      // 3,000 turns: 9,002 records, ten pages of the fold.
      yield* writeSession(journal, session, 3000)
      const projection = yield* ProjectionCheckpointed.make(64 * 1024 * 1024)
      const ran: Array<string> = []
      const opened = yield* Effect.sync(() => {
        setImmediate(() => ran.push("timer"))
        return projection.state(session)
      }).pipe(Effect.flatten, Effect.tap(() => Effect.sync(() => ran.push("open"))))
      expect(opened.source).toBe("journal")
      expect(opened.folded).toBe(9002)
      expect(opened.state.transcript.length).toBe(6000)
      expect(ran).toEqual(["timer", "open"])
    }).pipe(Effect.provide(services)))

  it.scoped("folds a tail of one page without waiting for the event loop", () =>
    Effect.gen(function*() {
      const journal = yield* Journal
      const session = yield* mintSessionId
      yield* writeSession(journal, session, 10)
      const projection = yield* ProjectionCheckpointed.make(64 * 1024 * 1024)
      const ran: Array<string> = []
      const opened = yield* Effect.sync(() => {
        setImmediate(() => ran.push("timer"))
        return projection.state(session)
      }).pipe(Effect.flatten, Effect.tap(() => Effect.sync(() => ran.push("open"))))
      expect(opened.folded).toBe(32)
      expect(ran).toEqual(["open"])
    }).pipe(Effect.provide(services)))
})
