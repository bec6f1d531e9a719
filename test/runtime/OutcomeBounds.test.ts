/**
 * Every started effect gets exactly one outcome record, and an outcome record is always writable
 * (the seed: "Brain commits *_ended or *_failed referencing the started sequence"), whatever the
 * text a tool, a loop or a provider hands Brain: text Brain did not write is bounded before it is
 * put in a record (MAX_FAILURE_MESSAGE_BYTES, MAX_FAILURE_DETAILS_BYTES, a frame for an output),
 * and a host call whose own record would pass the journal's frame maximum is the loop's bad input:
 * refused `invalid_request` naming the limit, nothing journaled, the session healthy.
 *
 * 12 MiB of NUL characters is below BRAIN_MAX_WASM_IO_BYTES, but JSON writes each as `\u0000`
 * (6 bytes): 72 MiB, past the 64 MiB frame.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { guestMessage } from "../../src/domain/CutText.js"
import { failure } from "../../src/domain/Failure.js"
import { MAX_FAILURE_MESSAGE_BYTES, MAX_FRAME_BYTES } from "../../src/domain/Limits.js"
import type { JournalRecord } from "../../src/domain/Records.js"
import { AgentloopFailed, type AgentloopShape, type ToolResult } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

const NULS = "\u0000".repeat(12 * 1024 * 1024)

/** Each `*_started` of an effect and the records that close it: exactly one each. */
const outcomesOf = (records: ReadonlyArray<JournalRecord>) =>
  records
    .filter((r) => r.kind === "tool_call_started" || r.kind === "model_call_started")
    .map((s) => records.filter((r) => (r.kind.endsWith("_ended") || r.kind.endsWith("_failed")) && (r.payload as { sequence?: number }).sequence === s.sequence).length)

const create = (tools: ReadonlyArray<string> = []) =>
  Effect.flatMap(Sessions, (sessions) =>
    sessions.create({ agentloop: "t", model: { provider: "scripted" }, tools: tools.map((name) => ({ name })) }))

describe("an outcome record is always writable", () => {
  it.effect("a tool output too large for one record closes its call as error naming the limit; its sibling's outcome is as it ended; the dispatch answers", () => {
    const seen: Array<ToolResult> = []
    const agentloop: AgentloopShape = {
      activate: (_input, host) =>
        Effect.gen(function*() {
          seen.push(...yield* host.dispatch([{ id: "c-big", name: "big", input: {} }, { id: "c-small", name: "small", input: {} }]))
          yield* host.kvPut("after", 1)
          return "done"
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* create(["big", "small"])
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn.status).toBe("ended")
      expect(seen.map((r) => [r.call_id, r.outcome])).toEqual([["c-big", "error"], ["c-small", "ok"]])
      expect(JSON.stringify(seen[0]!.output)).toMatch(/above the \d+ one journal record takes/)
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      expect(outcomesOf(records)).toEqual([1, 1])
      expect(records.some((r) => r.kind === "kv_put")).toBe(true)
    }).pipe(Effect.provide(runtimeLayer({
      loops: { t: agentloop },
      tools: { big: () => Effect.succeed({ outcome: "ok", output: NULS }), small: () => Effect.succeed({ outcome: "ok", output: "fine" }) }
    })))
  })

  it.effect("a model answer too large for one record closes its call model_output_limit (ambiguous) naming the limit, the loop is told so, and the session stays usable", () => {
    const answers: Array<string> = []
    const agentloop: AgentloopShape = {
      activate: (_input, host) =>
        host.model({ messages: [{ role: "user", content: "go" }] }).pipe(
          Effect.map((r) => r.text),
          Effect.catchAll((e) => Effect.succeed(`${e.failure.code} ${e.failure.ambiguous}`)),
          Effect.tap((a) => Effect.sync(() => answers.push(a)))
        )
    }
    let calls = 0
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* create()
      expect((yield* sessions.send(session_id, { message: "go" })).turn.status).toBe("ended")
      expect((yield* sessions.send(session_id, { message: "again" })).turn.status).toBe("ended")
      expect(answers).toEqual(["model_output_limit true", "small"])
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      expect(outcomesOf(records)).toEqual([1, 1])
      const failed = records.find((r) => r.kind === "model_call_failed")!.payload as { failure: { code: string; message: string } }
      expect(failed.failure.code).toBe("model_output_limit")
      expect(failed.failure.message).toMatch(/above the \d+ one journal record takes/)
    }).pipe(Effect.provide(runtimeLayer({
      loops: { t: agentloop },
      models: { call: () => Effect.succeed({ text: calls++ === 0 ? NULS : "small", tool_calls: [], stop_reason: "end" }) }
    })))
  })

  it.effect("a loop's failure message is cut to MAX_FAILURE_MESSAGE_BYTES with a marker, recorded with its code, and the session stays usable", () => {
    let turns = 0
    const agentloop: AgentloopShape = {
      activate: () =>
        turns++ === 0
          ? Effect.fail(new AgentloopFailed({ failure: failure("agentloop_failed", NULS, { details: { body: NULS } }) }))
          : Effect.succeed("second")
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* create()
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn.status).toBe("failed")
      expect(out.turn.failure?.code).toBe("agentloop_failed")
      expect(out.turn.failure!.message.length).toBeLessThan(MAX_FAILURE_MESSAGE_BYTES + 200)
      expect(out.turn.failure!.message).toMatch(/… \[cut: \d+ more bytes; Brain keeps at most 65536 bytes of a failure's message\]$/)
      expect(out.turn.failure!.details).toEqual({ cut: expect.stringMatching(/above the 65536 Brain keeps/) })
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      expect(records.find((r) => r.kind === "turn_failed")!.payload).toMatchObject({ failure: { code: "agentloop_failed" } })
      expect((yield* sessions.send(session_id, { message: "again" })).turn).toMatchObject({ status: "ended", result: "second" })
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: agentloop } })))
  })

  it.effect("a guest's brain.fail message, cut once as it is read, is recorded as it was cut, with the count of the bytes left out", () => {
    const cut = guestMessage(new Uint8Array(100_000).fill(0x61), (b) => new TextDecoder().decode(b))
    const agentloop: AgentloopShape = { activate: () => Effect.fail(new AgentloopFailed({ failure: failure("agentloop_failed", cut) })) }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* create()
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn.failure?.message).toBe(cut)
      expect(out.turn.failure?.message).toMatch(/ … \[cut: 34464 more bytes; /)
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: agentloop } })))
  })

  it.effect("a turn result too large for one record fails the turn agentloop_failed naming the frame maximum (not journal_write_failed), and the session stays usable", () => {
    let turns = 0
    const agentloop: AgentloopShape = { activate: () => Effect.succeed(turns++ === 0 ? NULS : "second") }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* create()
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn.status).toBe("failed")
      expect(out.turn.failure).toMatchObject({ code: "agentloop_failed", ambiguous: false })
      expect(out.turn.failure!.message).toContain(`the journal's frame maximum (${MAX_FRAME_BYTES} bytes)`)
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      expect(records.filter((r) => r.kind === "turn_failed").map((r) => (r.payload as any).failure.code)).toEqual(["agentloop_failed"])
      expect((yield* sessions.send(session_id, { message: "again" })).turn).toMatchObject({ status: "ended", result: "second" })
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: agentloop } })))
  })

  it.effect("a host call whose record would pass the frame maximum is refused invalid_request naming it; nothing is journaled and the session stays healthy", () => {
    const answers: Array<unknown> = []
    const agentloop: AgentloopShape = {
      activate: (_input, host) =>
        Effect.gen(function*() {
          answers.push(yield* Effect.either(host.kvPut("big", NULS)))
          answers.push(yield* Effect.either(host.emit("big", { s: NULS })))
          yield* host.kvPut("small", 1)
          return "done"
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* create()
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn).toMatchObject({ status: "ended", result: "done" })
      expect(answers).toHaveLength(2)
      for (const a of answers) {
        expect(a).toMatchObject({ _tag: "Left", left: { failure: { code: "invalid_request", message: expect.stringContaining("frame maximum") } } })
      }
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      expect(records.filter((r) => r.kind === "kv_put").map((r) => (r.payload as any).key)).toEqual(["small"])
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: agentloop }, config: { maxEmittedBytes: 0 } })))
  })
})
