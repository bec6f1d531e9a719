import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

describe("a text turn end to end", () => {
  it.scopedLive("a text turn of the official loop with the scripted model echoes, saves user and assistant messages, and journals its public Events in order", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const created = yield* sessions.create({ model: { provider: "scripted" } })
      expect(created.status).toBe("idle")
      const out = yield* sessions.send(created.session_id, { message: "hello" })
      expect(out.turn).toEqual({ sequence: 3, status: "ended", result: { text: "hello" } })
      const t = yield* sessions.transcript(created.session_id)
      expect(t.messages).toEqual([{ role: "user", content: "hello" }, { role: "assistant", content: "hello" }])
      const page = yield* sessions.events(created.session_id, { after: 0, limit: 100 })
      expect(page.events.map((e) => e.kind)).toEqual([
        "session_creation_started",
        "session_creation_ended",
        "turn_started",
        "activation_started",
        "model_call_started",
        "model_call_ended",
        "activation_ended",
        "turn_ended"
      ])
    }).pipe(Effect.provide(runtimeLayer())))
})
