/**
 * A tool's output that JSON cannot write (a cycle, a BigInt, nesting deeper than MAX_JSON_DEPTH):
 * the journal cannot record it, yet the call's start must be closed before the loop observes an
 * answer (the seed: "Brain commits *_ended or *_failed referencing the started sequence"). Such an
 * output is the call's `error` outcome, committed, and the loop is shown exactly that. An output
 * JSON can write is written once: the check's text is what the journal records. An output that is
 * not plain JSON data (a Date, a function, an undefined member, NaN) reaches the loop as the journal
 * wrote it, so that what a loop acts on is what a reopened session reads back.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { MAX_JSON_DEPTH } from "../../src/domain/Limits.js"
import type { AgentloopShape, ToolResult } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import type * as ToolsInProcess from "../../src/layers/ToolsInProcess.js"
import { runtimeLayer } from "../support/runtime.js"

/** A value `levels` arrays deep. */
const nested = (levels: number): unknown => {
  let value: unknown = 0
  for (let i = 0; i < levels; i++) value = [value]
  return value
}

const cyclic = (): unknown => {
  const value: Record<string, unknown> = { a: 1 }
  value.self = value
  return value
}

const outputs: Record<string, () => unknown> = {
  cycle: cyclic,
  bigint: () => ({ n: 10n }),
  deep: () => nested(MAX_JSON_DEPTH + 1),
  "deep error": () => nested(MAX_JSON_DEPTH + 1),
  "deep enough": () => nested(MAX_JSON_DEPTH)
}

const tools: Record<string, ToolsInProcess.ToolHandler> = Object.fromEntries(
  Object.entries(outputs).map(([name, output]) => [
    name,
    () => Effect.sync(() => ({ outcome: name.endsWith("error") ? "error" : "ok", output: output() }) as const)
  ])
)

describe("a tool output JSON can write", () => {
  it.effect("is written as JSON once per call: the check that it can be written is the text the journal records", () => {
    let written = 0
    // JSON calls toJSON each time it writes the value: the count is how often the output was written.
    const output = { toJSON: () => (written++, { answer: 42 }) }
    const agentloop: AgentloopShape = {
      activate: (_input, host) => Effect.as(host.dispatch([{ id: "c-1", name: "counted", input: {} }]), "done")
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" }, tools: [{ name: "counted" }] })
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn.status).toBe("ended")
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      expect(records.find((r) => r.kind === "tool_call_ended")!.payload).toMatchObject({ outcome: "ok", output: { answer: 42 } })
      expect(written).toBe(1)
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: agentloop }, tools: { counted: () => Effect.succeed({ outcome: "ok", output }) } })))
  })
})

describe("a tool output that is not plain JSON data", () => {
  it.effect("reaches the loop exactly as the journal records it (a Date as its text, a function or an undefined member left out, NaN as null), and plain data as it was", () => {
    const seen: Array<ToolResult> = []
    const mixed = { when: new Date(0), f: () => 1, u: undefined, n: NaN, list: [undefined, () => 2, Infinity], inner: { s: Symbol("s"), keep: "yes" }, [Symbol("k")]: 1 }
    const plain = { a: [1, "two", null, { b: true }] }
    const agentloop: AgentloopShape = {
      activate: (_input, host) =>
        Effect.gen(function*() {
          seen.push(...yield* host.dispatch([{ id: "c-mixed", name: "mixed", input: {} }, { id: "c-plain", name: "plain", input: {} }]))
          return "done"
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" }, tools: [{ name: "mixed" }, { name: "plain" }] })
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn.status).toBe("ended")
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      const ended = records.filter((r) => r.kind === "tool_call_ended")
      expect(ended).toHaveLength(2)
      const recorded = ended.map((r) => r.payload.output)
      expect(recorded).toContainEqual({ when: "1970-01-01T00:00:00.000Z", n: null, list: [null, null, null], inner: { keep: "yes" } })
      expect(recorded).toContainEqual(plain)
      for (const result of seen) {
        const record = ended.find((r) => records.find((s) => s.sequence === r.payload.sequence)!.payload.call_id === result.call_id)!
        // Deep equality that tells a Date from its text and a missing member from an undefined one.
        expect(result.output).toStrictEqual(record.payload.output)
      }
    }).pipe(Effect.provide(runtimeLayer({
      loops: { t: agentloop },
      tools: { mixed: () => Effect.succeed({ outcome: "ok", output: mixed }), plain: () => Effect.succeed({ outcome: "ok", output: plain }) }
    })))
  })
})

describe("a tool output JSON cannot write", () => {
  it.effect("a cycle, a BigInt or nesting deeper than MAX_JSON_DEPTH is the call's committed error outcome, closing its start, and the loop is shown exactly that; nesting at MAX_JSON_DEPTH is ok", () => {
    const seen: Array<ToolResult> = []
    const agentloop: AgentloopShape = {
      activate: (_input, host) =>
        Effect.gen(function*() {
          for (const name of Object.keys(outputs)) seen.push(...yield* host.dispatch([{ id: `c-${name}`, name, input: {} }]))
          return "done"
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({
        agentloop: "t",
        model: { provider: "scripted" },
        tools: Object.keys(outputs).map((name) => ({ name }))
      })
      const out = yield* sessions.send(session_id, { message: "go" })
      expect(out.turn.status).toBe("ended")
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      for (const name of ["cycle", "bigint", "deep", "deep error"]) {
        const started = records.find((r) => r.kind === "tool_call_started" && r.payload.call_id === `c-${name}`)!
        const closing = records.filter((r) => (r.kind === "tool_call_ended" || r.kind === "tool_call_failed") && r.payload.sequence === started.sequence)
        expect(closing, name).toHaveLength(1)
        expect(closing[0]!.kind).toBe("tool_call_ended")
        expect(closing[0]!.payload, name).toMatchObject({ outcome: "error", is_error: true, output: { code: "invalid_output" } })
        expect(closing[0]!.payload.output.message, name).toMatch(/^the tool's output cannot be written as JSON: /)
        const result = seen.find((r) => r.call_id === `c-${name}`)
        expect(result, name).toEqual({ call_id: `c-${name}`, name, outcome: "error", output: closing[0]!.payload.output, is_error: true })
      }
      expect(seen.find((r) => r.call_id === "c-deep")!.output).toMatchObject({ message: expect.stringContaining(`${MAX_JSON_DEPTH}`) })
      expect(seen.find((r) => r.call_id === "c-deep enough")).toMatchObject({ outcome: "ok", output: nested(MAX_JSON_DEPTH) })
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: agentloop }, tools })))
  })
})
