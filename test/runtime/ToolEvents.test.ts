/**
 * A tool's own Events (DESIGN §4: tool-origin Events come before the call's outcome): a tool may
 * emit while its call is being executed, and is refused (`conflict`) once the call is over, so no
 * Event of a call is ever recorded after its outcome.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { type Failure, FailureCodes } from "../../src/domain/Failure.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import type * as ToolsInProcess from "../../src/layers/ToolsInProcess.js"
import { runtimeLayer } from "../support/runtime.js"

describe("a tool's own Events", () => {
  it.effect("a tool emits while its call runs, is refused with conflict once the call is over, and no Event of the call follows its outcome", () => {
    let emitLater: ((kind: string, payload: unknown) => Effect.Effect<number, { readonly failure: Failure }>) | undefined
    const chatty: ToolsInProcess.ToolHandler = (input, invocation) =>
      Effect.gen(function*() {
        emitLater = invocation.emit
        yield* Effect.orDie(invocation.emit("progress", { step: 1 }))
        return { outcome: "ok", output: input }
      })
    const seen: { late?: string } = {}
    const agentloop: AgentloopShape = {
      activate: (_input, host) =>
        Effect.gen(function*() {
          yield* host.dispatch([{ id: "c1", name: "chatty", input: { n: 1 } }])
          const late = yield* Effect.either(emitLater!("progress", { step: 2 }))
          seen.late = Either.isLeft(late) ? late.left.failure.code : "accepted"
          return "done"
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" }, tools: [{ name: "chatty" }] })
      yield* sessions.send(session_id, { message: "go" })
      expect(seen.late).toBe("conflict")
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      const kinds = records.map((r) => (r.kind === "extension" ? `extension:${r.payload.kind}` : r.kind))
      const started = kinds.indexOf("tool_call_started")
      const ended = kinds.indexOf("tool_call_ended")
      // The one Event the call emitted while it ran lies between its start and its outcome; none after.
      expect(kinds.filter((k) => k === "extension:progress")).toHaveLength(1)
      const progress = kinds.indexOf("extension:progress")
      expect(started).toBeLessThan(progress)
      expect(progress).toBeLessThan(ended)
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: agentloop }, tools: { chatty } })))
  })

  it.effect("a tool's emit of a reserved kind — a record kind, a public failure code, or a kind holding a line break — is refused reserved_kind, and so is a payload that is not JSON (invalid_request); nothing is written", () => {
    const kinds = ["turn_failed", "tool_call_ended", ...FailureCodes, "two\nlines", "two\rlines"]
    const answers: Array<[string, string]> = []
    const circular: Record<string, unknown> = {}
    circular.self = circular
    const emitter: ToolsInProcess.ToolHandler = (input, invocation) =>
      Effect.gen(function*() {
        for (const kind of kinds) {
          const r = yield* Effect.either(invocation.emit(kind, { x: 1 }))
          answers.push([kind, Either.isLeft(r) ? r.left.failure.code : "accepted"])
        }
        const r = yield* Effect.either(invocation.emit("progress", circular))
        answers.push(["circular", Either.isLeft(r) ? r.left.failure.code : "accepted"])
        return { outcome: "ok", output: input }
      })
    const agentloop: AgentloopShape = {
      activate: (_input, host) => Effect.as(host.dispatch([{ id: "c1", name: "emitter", input: {} }]), "done")
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" }, tools: [{ name: "emitter" }] })
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn.status).toBe("ended")
      expect(answers).toEqual([...kinds.map((k) => [k, "reserved_kind"]), ["circular", "invalid_request"]])
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      expect(records.filter((r) => r.kind === "extension")).toEqual([])
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: agentloop }, tools: { emitter } })))
  })
})
