/**
 * `untilIdle` (test/support/runtime.ts), the tests' wait for a session's turns: once it returns,
 * every turn that ran has closed, the session's claim given back, so a new turn is admitted at
 * once, never refused session_busy; and it does not count looks or yields, so a turn that takes
 * a while (a model's answer delayed) is waited for.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
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
})
