/**
 * An Event kind a loop emits is 1 to 255 characters, as a host's is (docs/abi.md, `emit`): a longer
 * one is refused `invalid_request` with a message that says so — not the record schema's own
 * report — and nothing is written.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

const emitting: AgentloopShape = {
  activate: (activation, host) =>
    Effect.map(Effect.either(host.emit("k".repeat(Number(activation.input!.message)), { x: 1 })), (answer) =>
      Either.isRight(answer) ? { ok: answer.right } : { code: answer.left.failure.code, message: answer.left.failure.message })
}

describe("an emitted Event's kind", () => {
  it.scopedLive("a kind of 255 characters is taken; one of 256 is refused invalid_request saying the bound, nothing written", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" } })
      const taken = yield* sessions.send(session_id, { message: "255" })
      expect(taken.turn.result).toMatchObject({ ok: expect.any(Number) })
      const before = (yield* journal.read(session_id, { after: 0, limit: 1000 })).filter((r) => r.kind === "extension").length
      const refused = yield* sessions.send(session_id, { message: "256" })
      expect(refused.turn.result).toEqual({ code: "invalid_request", message: "an Event kind is 1 to 255 characters, not 256" })
      expect((yield* journal.read(session_id, { after: 0, limit: 1000 })).filter((r) => r.kind === "extension").length).toBe(before)
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: emitting } }))))
})
