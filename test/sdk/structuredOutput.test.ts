/**
 * Structured output on `send` against a real server process: the answer is decoded with the
 * caller's schema; an answer that does not decode is followed by a correction naming the problem,
 * at most `maxCorrections` times, then the send fails with the last issues. Corrections are turns
 * under keys derived from the send's Idempotency-Key, so a retry with the same key replays all of
 * them and starts no new turn.
 */
import { Schema } from "effect"
import { describe, expect, it } from "@effect/vitest"
import { Brain, BrainOutputInvalid, type StandardSchemaV1 } from "../../src/sdk/index.js"
import { history, serverAndClient } from "./support.js"

const City = Schema.Struct({ city: Schema.String, population: Schema.Number })
const scripted = (...texts: Array<string>) => ({ model: { provider: "scripted" as const, replies: texts.map((text) => ({ text })) } })

describe("structured output on send", () => {
  let brain: Brain
  serverAndClient((started) => ({ brain } = started))

  it("an answer that does not decode is corrected once with a message naming the problem; the next answer decodes", async () => {
    const session = await brain.sessions.create(scripted("Paris, about two million", "{\"city\":\"Paris\",\"population\":2100000}"))
    const outcome = await session.send("Which city?", { output: City })
    expect(outcome.output).toEqual({ city: "Paris", population: 2100000 })
    expect(outcome.corrections).toBe(1)
    const users = (await session.transcript()).messages.filter((m) => m.role === "user").map((m) => m.content as string)
    expect(users).toHaveLength(2)
    expect(users[1]).toContain("not JSON")
    expect(users[1]).toContain("\"population\"") // the JSON Schema derived from the Effect Schema
  })

  it("corrections are bounded: after maxCorrections the send rejects with BrainOutputInvalid carrying the last issues, and no further turn runs", async () => {
    const session = await brain.sessions.create(scripted("{\"city\":\"Paris\"}"))
    const failed = await session.send("Which city?", { output: City, maxCorrections: 1 }).catch((e) => e)
    expect(failed).toBeInstanceOf(BrainOutputInvalid)
    expect(failed).toMatchObject({ corrections: 1, text: "{\"city\":\"Paris\"}" })
    expect(failed.issues).toEqual([expect.objectContaining({ path: ["population"] })])
    expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(2)
  })

  it("a Standard Schema validator and a fenced JSON answer decode without a correction", async () => {
    const even: StandardSchemaV1<unknown, number> = {
      "~standard": {
        version: 1,
        vendor: "test",
        validate: (v) => (typeof v === "number" && v % 2 === 0 ? { value: v } : { issues: [{ message: "an even number" }] })
      }
    }
    const session = await brain.sessions.create(scripted("```json\n42\n```"))
    const outcome = await session.send("pick", { output: even, maxCorrections: 0 })
    expect(outcome).toMatchObject({ output: 42, corrections: 0 })
  })

  it("an output validator the client cannot read (a Schema of effect 4) is refused with tool()'s TypeError before anything is sent: no turn runs", async () => {
    // The shape of effect 4's `Schema.Struct(…)`: a function with `ast`, its type id on the
    // prototype, neither an effect 3 Schema nor a Standard Schema.
    const fromEffect4 = Object.setPrototypeOf(Object.assign(() => undefined, { ast: { _tag: "Objects" }, fields: {} }), {
      "~effect/Schema/Schema": "~effect/Schema/Schema",
      pipe() {
        return this
      }
    })
    const session = await brain.sessions.create(scripted("{\"a\":\"x\"}"))
    const refused = await session.send("q", { output: fromEffect4 }).catch((e) => e)
    expect(refused).toBeInstanceOf(TypeError)
    expect(refused.message).toContain("an Effect Schema (of effect 3, this package's line) or a Standard Schema validator")
    expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(0)
  })

  it("an output validator that throws (a bug, not an invalid answer) rejects the send with what it threw: no correction is sent", async () => {
    const bug = new Error("validator bug")
    const throwing: StandardSchemaV1<unknown, unknown> = {
      "~standard": {
        version: 1,
        vendor: "test",
        validate: () => {
          throw bug
        }
      }
    }
    const session = await brain.sessions.create(scripted("{\"a\":\"x\"}", "{\"a\":\"y\"}"))
    const failed = await session.send("q", { output: throwing }).catch((e) => e)
    expect(failed).toBe(bug)
    expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(1)
    expect((await session.transcript()).messages.filter((m) => m.role === "user")).toHaveLength(1)
  })

  it("retrying a structured send with the same Idempotency-Key replays its turn and corrections: no new turn starts", async () => {
    const session = await brain.sessions.create(scripted("no", "{\"city\":\"Oslo\",\"population\":700000}"))
    const first = await session.send("Which city?", { output: City, idempotencyKey: "structured-1" })
    const again = await session.send("Which city?", { output: City, idempotencyKey: "structured-1" })
    expect(again).toEqual(first)
    expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(2)
  })
})
