/**
 * A loop's input JSON, written field by field with each Event's data as the journal kept it
 * (`guestInputJson`), is the text JSON.stringify gives the input object docs/abi.md describes.
 */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { parseKept } from "../../../src/domain/JsonText.js"
import type { Message } from "../../../src/domain/Messages.js"
import { type Event, eventsOf } from "../../../src/domain/Events.js"
import type { JournalRecord } from "../../../src/domain/Records.js"
import { transcriptTail, unansweredOf } from "../../../src/domain/TranscriptTail.js"
import { guestInputJson, runtimeJson } from "../../../src/layers/WasmHostWorkers.js"
import type { ActivationInput } from "../../../src/services/Agentloop.js"
import { journalArb } from "../../support/records.js"
import { activationInput } from "../../support/wasmHost.js"
import { runGuest, shippedGuest } from "../../guest/harness.js"

const message: fc.Arbitrary<Message> = fc.oneof(
  fc.record({ role: fc.constantFrom("user" as const, "assistant" as const), content: fc.unicodeString() }),
  fc.subarray(["a", "b", "c"], { minLength: 1 }).map((ids): Message => ({ role: "assistant", content: "", tool_calls: ids.map((id) => ({ id, name: "t", input: { id } })) })),
  fc.constantFrom("a", "b", "c").map((id): Message => ({ role: "tool", tool_call_id: id, content: "1" }))
)

/** Tools as a configuration declares them: a name, and perhaps a description and an input schema of any JSON. */
const tools = fc.array(
  fc.record(
    { name: fc.stringMatching(/^[a-z_]{1,12}$/), description: fc.unicodeString(), input_schema: fc.dictionary(fc.string(), fc.unicodeJsonValue()) },
    { requiredKeys: ["name"] }
  ),
  { maxLength: 4 }
)

/** An Event's data of any JSON, as text of one, two, three and four bytes a character in UTF-8. */
const text = fc.array(fc.constantFrom("a", "é", "€", "😀", "\u2028", "\ud800", '"'), { maxLength: 200 }).map((cs) => cs.join(""))

describe("a loop's input JSON", () => {
  it("writes the runtime envelope as JSON.stringify writes it: any session id, any number (NaN and the infinities as null)", () => {
    fc.assert(
      fc.property(
        fc.record({
          session_id: fc.unicodeString(),
          turn: fc.nat(),
          activation: fc.nat(),
          now_ms: fc.oneof(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), fc.double()),
          seed: fc.oneof(fc.integer({ min: -(2 ** 31), max: 2 ** 32 }), fc.double())
        }),
        (runtime) => {
          expect(runtimeJson(runtime)).toBe(JSON.stringify(runtime))
        }
      )
    )
  })

  it("writes a large integer (an epoch millisecond) as JSON.stringify does: at ten digits and just below, with zeros inside, up to the largest safe integer", () => {
    const runtime = { session_id: "s", turn: 0, activation: 1, now_ms: 0, seed: 0 }
    for (const n of [999_999_999, 1e9, 1e9 + 1, 1_764_590_000_000, 1_000_000_000_005, 1_234_000_000_000_000, 2 ** 31, 2 ** 32, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 1, 1e21, 1.5e9 + 0.5]) {
      for (const field of ["now_ms", "seed", "turn"] as const) {
        const r = { ...runtime, [field]: n }
        expect(runtimeJson(r), `${field} ${n}`).toBe(JSON.stringify(r))
      }
    }
  })

  it("carries the first Events, in order, as many as fit in the I/O bound after the rest of the input: within it, and one more would pass it", () => {
    fc.assert(
      fc.property(
        fc.array(text, { maxLength: 40 }),
        fc.array(message, { maxLength: 5 }),
        fc.boolean(),
        fc.double({ min: 0, max: 1.2, noNaN: true }),
        fc.boolean(),
        (payloads, transcript, configurationUnread, share, runtimeUnread) => {
          const base = activationInput()
          const events = payloads.map((p, i): Event => ({
            session_id: base.runtime.session_id,
            sequence: i + 1,
            recorded_at_ms: 1,
            kind: "emitted",
            data: { text: p },
            origin: { kind: "agentloop", sequence: 1 }
          }))
          const input: ActivationInput = { ...base, transcript, events }
          const module = { tail: false, tailMessages: 16, configurationUnread, runtimeUnread }
          const withEvents = (n: number) =>
            JSON.stringify({
              input: input.input,
              transcript,
              ...(configurationUnread ? {} : { configuration: input.configuration }),
              events: input.events.slice(0, n),
              ...(runtimeUnread ? {} : { runtime: input.runtime })
            })
          const bound = Math.floor(Buffer.byteLength(withEvents(input.events.length)) * share)
          const written = guestInputJson(input, module, bound)
          const carried = (JSON.parse(written) as { events: ReadonlyArray<unknown> }).events.length
          expect(written).toBe(withEvents(carried))
          if (carried > 0) expect(Buffer.byteLength(written)).toBeLessThanOrEqual(bound)
          if (carried < input.events.length) expect(Buffer.byteLength(withEvents(carried + 1))).toBeGreaterThan(bound)
        }
      ),
      { numRuns: 300 }
    )
  })

  it("carries a cut-short round's tool results whole when they fit, else in order each whole while the rest can be carried as notes, the others with their output replaced by a note: within the bound, every call present with its outcome", () => {
    const base = activationInput()
    const result = (i: number, bytes: number) => ({ call_id: `call_${i}`, name: "t", outcome: "ok" as const, output: "x".repeat(bytes), is_error: false })
    const tool_results = [result(0, 30_000), result(1, 30_000), result(2, 30_000), result(3, 10)]
    const input: ActivationInput = { ...base, transcript: [], events: [], tool_results }
    const module = { tail: false, tailMessages: 16, configurationUnread: true }
    // Room for all: exactly JSON.stringify's text.
    const roomy = guestInputJson(input, module, 1 << 20)
    expect(roomy).toBe(JSON.stringify({ input: input.input, transcript: [], tool_results, events: [], runtime: input.runtime }))
    // Room for about two: the first two whole, the third as a note, the small last one whole; within the bound.
    const bound = 70_000
    const written = guestInputJson(input, module, bound)
    expect(Buffer.byteLength(written)).toBeLessThanOrEqual(bound)
    const carried = (JSON.parse(written) as { tool_results: ReadonlyArray<{ call_id: string; outcome: string; output: unknown; is_error: boolean }> }).tool_results
    expect(carried.map((r) => [r.call_id, r.outcome, r.is_error])).toEqual(tool_results.map((r) => [r.call_id, r.outcome, r.is_error]))
    expect(carried.map((r) => r.output === tool_results[carried.indexOf(r)]!.output)).toEqual([true, true, false, true])
    expect(String(carried[2]!.output)).toMatch(/^\[not carried: this output is \d+ bytes as JSON/)
  })

  it("an output replaced by a note names the Event that holds it: tool_call_ended for a call that ended, tool_call_failed for one that failed, either for an error (a tool's error answer ends it, a tool that threw fails it)", () => {
    const base = activationInput()
    const big = "x".repeat(30_000)
    const tool_results = [
      { call_id: "ended", name: "t", outcome: "ok" as const, output: big, is_error: false },
      { call_id: "timeout", name: "t", outcome: "timeout" as const, output: { code: "timeout", message: big }, is_error: true },
      { call_id: "cancelled", name: "t", outcome: "cancelled" as const, output: { code: "cancelled", message: big }, is_error: true },
      { call_id: "unknown", name: "t", outcome: "unknown" as const, output: { code: "unknown", message: big }, is_error: true },
      { call_id: "error", name: "t", outcome: "error" as const, output: big, is_error: true }
    ]
    const input: ActivationInput = { ...base, transcript: [], events: [], tool_results }
    const written = guestInputJson(input, { tail: false, tailMessages: 16, configurationUnread: true }, 4_096)
    const carried = (JSON.parse(written) as { tool_results: ReadonlyArray<{ call_id: string; output: unknown }> }).tool_results
    const notes = Object.fromEntries(carried.map((r) => [r.call_id, String(r.output)]))
    for (const note of Object.values(notes)) expect(note).toMatch(/^\[not carried: this output is \d+ bytes as JSON/)
    expect(notes.ended).toMatch(/the call's tool_call_ended Event holds it\]$/)
    for (const failed of ["timeout", "cancelled", "unknown"]) expect(notes[failed]).toMatch(/the call's tool_call_failed Event holds it\]$/)
    expect(notes.error).toMatch(/the call's tool_call_ended or tool_call_failed Event holds it\]$/)
  })

  it("carries a round of thousands of calls whose entries alone pass the bound within it: the first entries in order, as many as fit, then one note naming how many more were left out and the events host call", () => {
    const base = activationInput()
    const n = 3_000
    const tool_results = Array.from({ length: n }, (_, i) => ({
      call_id: `call_${String(i).padStart(6, "0")}`,
      name: "lookup",
      outcome: i % 3 === 0 ? ("cancelled" as const) : ("ok" as const),
      output: i % 3 === 0 ? { code: "cancelled", message: "the tool call was cancelled" } : "é".repeat(i % 50),
      is_error: i % 3 === 0
    }))
    const input: ActivationInput = { ...base, transcript: [], events: [], tool_results }
    const module = { tail: false, tailMessages: 16, configurationUnread: true }
    const entriesAlone = Buffer.byteLength(JSON.stringify(tool_results.map((r) => ({ ...r, output: null }))))
    for (const bound of [600, 4_096, 20_000, 100_000, entriesAlone]) {
      const written = guestInputJson(input, module, bound)
      expect(Buffer.byteLength(written), `bound ${bound}`).toBeLessThanOrEqual(bound)
      const carried = (JSON.parse(written) as { tool_results: ReadonlyArray<unknown> }).tool_results
      const entries = carried.slice(0, -1) as ReadonlyArray<{ call_id: string; outcome: string; is_error: boolean }>
      const note = carried[carried.length - 1]
      expect(typeof note, `bound ${bound}`).toBe("string")
      expect(entries.length, `bound ${bound}: some entries`).toBeGreaterThan(0)
      expect(entries.map((r) => [r.call_id, r.outcome, r.is_error])).toEqual(tool_results.slice(0, entries.length).map((r) => [r.call_id, r.outcome, r.is_error]))
      expect(note).toMatch(new RegExp(`^\\[not carried: ${n - entries.length} more tool results, .*BRAIN_MAX_WASM_IO_BYTES.*events host call\\]$`))
      // As many as fit: one more entry (each is at its smallest whole: its output is shorter than a note) would pass the bound.
      expect(Buffer.byteLength(written) + Buffer.byteLength(JSON.stringify(tool_results[entries.length])) + 1, `bound ${bound}`).toBeGreaterThan(bound)
    }
    // Not even the note fits: none are carried, and the tool results add two bytes.
    const tiny = guestInputJson(input, module, 100)
    expect((JSON.parse(tiny) as { tool_results: ReadonlyArray<unknown> }).tool_results).toEqual([])
  })

  it("the official loop runs on such an input: it answers the carried calls with their outcomes, the rest as interrupted, and asks its model", () => {
    const n = 3_000
    const calls = Array.from({ length: n }, (_, i) => ({ id: `c${i}`, name: "lookup", input: {} }))
    const transcript: Array<Message> = [{ role: "user", content: "go" }, { role: "assistant", content: "", tool_calls: calls }]
    const tool_results = calls.map((c, i) => ({ call_id: c.id, name: c.name, outcome: "ok" as const, output: { n: i }, is_error: false }))
    const input: ActivationInput = { ...activationInput(), transcript, events: [], tool_results }
    const bound = 200_000
    const written = guestInputJson(input, { tail: false, tailMessages: 16, configurationUnread: true }, bound)
    expect(Buffer.byteLength(written)).toBeLessThanOrEqual(bound)
    const carried = (JSON.parse(written) as { tool_results: ReadonlyArray<unknown> }).tool_results.length - 1
    expect(carried).toBeGreaterThan(0)
    expect(carried).toBeLessThan(n)
    let asked: any
    const run = runGuest(shippedGuest("official"), written, (op, request) => {
      if (op === "model") {
        asked ??= request
        return { ok: { text: "done", tool_calls: [], stop_reason: "end" } }
      }
      return { ok: null }
    })
    expect(run.failed).toBeUndefined()
    expect(run.output).toMatch(/^\{"ok":/)
    const results = (asked.transcript.append as ReadonlyArray<{ role: string; tool_call_id?: string; content: string }>).filter((m) => m.role === "tool")
    expect(results.map((m) => m.tool_call_id)).toEqual(calls.map((c) => c.id))
    expect(results.slice(0, carried).map((m) => m.content)).toEqual(tool_results.slice(0, carried).map((r) => JSON.stringify(r.output)))
    for (const m of results.slice(carried)) expect(m.content).toContain("interrupted")
  })

  it("is JSON.stringify of the input object: the turn input (or none), the transcript or its tail with transcript_start, the configuration unless the loop does not read it (written once, then its text kept), the Events (data kept or not) and the runtime unless the loop does not read it", () => {
    fc.assert(
      fc.property(
        journalArb,
        fc.array(message, { maxLength: 30 }),
        fc.option(fc.unicodeString(), { nil: undefined }),
        fc.option(fc.nat({ max: 40 }), { nil: undefined }),
        fc.boolean(),
        fc.boolean(),
        tools,
        fc.boolean(),
        fc.boolean(),
        (records, transcript, text, tailMessages, kept, keptCalls, declared, configurationUnread, runtimeUnread) => {
          const read = records.map((r): JournalRecord => ({ ...r, payload: kept ? parseKept(JSON.stringify(r.payload)) : r.payload }))
          const base = activationInput()
          const input: ActivationInput = {
            ...base,
            input: text === undefined ? undefined : { message: text },
            transcript,
            configuration: { ...base.configuration, tools: declared },
            ...(keptCalls ? { unanswered: unansweredOf(transcript) } : {}),
            events: eventsOf(base.runtime.session_id, read, 0)
          }
          const module = { tail: tailMessages !== undefined, tailMessages: tailMessages ?? 16, configurationUnread, runtimeUnread }
          const tail = module.tail ? transcriptTail(transcript, undefined, module.tailMessages) : undefined
          const expected = {
            input: input.input,
            transcript: tail ? tail.transcript : transcript,
            ...(tail ? { transcript_start: tail.transcript_start } : {}),
            ...(configurationUnread ? {} : { configuration: input.configuration }),
            events: input.events,
            ...(runtimeUnread ? {} : { runtime: input.runtime })
          }
          const whole = JSON.stringify(expected)
          expect(guestInputJson(input, module, Infinity)).toBe(whole)
          // Within the bound exactly: every Event carried.
          expect(guestInputJson(input, module, Buffer.byteLength(whole))).toBe(whole)
          // The next turn's input, with the same configuration: its text as written the first time.
          const next = { ...input, runtime: { ...input.runtime, turn: input.runtime.turn + 2 } }
          expect(guestInputJson(next, module, Infinity)).toBe(JSON.stringify(runtimeUnread ? expected : { ...expected, runtime: next.runtime }))
        }
      ),
      { numRuns: 300 }
    )
  })
})
