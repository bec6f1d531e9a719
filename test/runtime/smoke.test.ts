import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

describe("smoke", () => {
  it.scopedLive("a text turn echoes and is journaled", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const created = yield* sessions.create({ model: { provider: "scripted" } })
      expect(created.status).toBe("idle")
      const out = yield* sessions.send(created.session_id, { message: "hello" })
      expect(out.turn).toEqual({ sequence: 3, status: "ended", result: { text: "hello" } })
      const t = yield* sessions.transcript(created.session_id)
      expect(t.messages).toEqual([{ role: "user", content: "hello" }, { role: "assistant", content: "hello" }])
      const page = yield* sessions.events(created.session_id, { after: 0, limit: 100 })
      console.log(page.events.map((e) => `${e.sequence} ${e.kind}`).join("\n"))
    }).pipe(Effect.provide(runtimeLayer())))
})
