/**
 * `untilIdle` (test/support/runtime.ts), the tests' wait for a session's turns: once it returns,
 * every turn that ran has closed, the session's claim given back, so a new turn is admitted at
 * once, never refused session_busy; and it does not count looks or yields, so a turn that takes
 * a while (a model's answer delayed) is waited for. It waits on the turn's own signal that it has
 * closed, not on the session's status, which reads idle before the close has given the session
 * back (the release that follows the closing records may still wait on the journal).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

describe("untilIdle", () => {
  for (const journal of ["memory", "file"] as const) {
    it.scopedLive(`once it returns, each submitted turn has closed and a new one is admitted at once, 200 times over (${journal} journal)`, () =>
      Effect.gen(function*() {
        const dataDir = yield* tempDir("brain-idle-")
        yield* Effect.gen(function*() {
          const sessions = yield* Sessions
          const id = (yield* sessions.create({ model: { provider: "scripted" } })).session_id
          for (let i = 0; i < 200; i++) {
            const receipt = yield* Effect.either(sessions.submit(id, { message: `m${i}` }))
            expect(Either.isRight(receipt) || receipt.left._tag, `turn ${i}`).toBe(true)
            yield* untilIdle(id)
          }
        }).pipe(Effect.provide(runtimeLayer({ journal: journal === "memory" ? "memory" : { dataDir } })))
      }), 60_000)
  }

  it.scopedLive("waits for a turn whose model answers only after a while of wall time, however many looks that takes", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const id = (yield* sessions.create({ model: { provider: "scripted", replies: [{ text: "late", delay_ms: 2000 }] } })).session_id
      yield* sessions.submit(id, { message: "go" })
      yield* untilIdle(id)
      expect((yield* sessions.get(id)).status).toBe("idle")
    }).pipe(Effect.provide(runtimeLayer())))

  it.scopedLive("once it returns, the turn's close is over, its release included: no journal call of it is still in flight, however slow", () =>
    Effect.gen(function*() {
      // The release of an unused cell (no idle TTL: released at once) asks the journal its size: here it takes 300 ms.
      let inFlight = 0
      const slowSize = Layer.effect(
        Journal,
        Effect.map(Journal, (journal) => ({
          ...journal,
          size: (session: Parameters<typeof journal.size>[0]) =>
            Effect.acquireUseRelease(
              Effect.sync(() => inFlight++),
              () => Effect.zipRight(Effect.sleep("300 millis"), journal.size(session)),
              () => Effect.sync(() => inFlight--)
            )
        }))
      ).pipe(Layer.provide(JournalMemory.layer))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const id = (yield* sessions.create({ model: { provider: "scripted" } })).session_id
        yield* untilIdle(id)
        for (let i = 0; i < 3; i++) {
          yield* sessions.submit(id, { message: `m${i}` })
          yield* untilIdle(id)
          expect(inFlight, `turn ${i}`).toBe(0)
        }
      }).pipe(Effect.provide(runtimeLayer({ journal: slowSize })))
    }), 30_000)
})
