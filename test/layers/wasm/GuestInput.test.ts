/**
 * A loop's input JSON, written field by field with each Event's data as the journal kept it
 * (`guestInputJson`), is the text JSON.stringify gives the input object docs/abi.md describes.
 */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { parseKept } from "../../../src/domain/JsonText.js"
import type { Message } from "../../../src/domain/Messages.js"
import { eventsOf } from "../../../src/domain/Projection.js"
import type { JournalRecord } from "../../../src/domain/Records.js"
import { transcriptTail, unansweredOf } from "../../../src/domain/TranscriptTail.js"
import { guestInputJson } from "../../../src/layers/WasmHostWorkers.js"
import type { ActivationInput } from "../../../src/services/Agentloop.js"
import { journalArb } from "../../support/records.js"
import { activationInput } from "../../support/wasmHost.js"

const message: fc.Arbitrary<Message> = fc.oneof(
  fc.record({ role: fc.constantFrom("user" as const, "assistant" as const), content: fc.unicodeString() }),
  fc.subarray(["a", "b", "c"], { minLength: 1 }).map((ids): Message => ({ role: "assistant", content: "", tool_calls: ids.map((id) => ({ id, name: "t", input: { id } })) })),
  fc.constantFrom("a", "b", "c").map((id): Message => ({ role: "tool", tool_call_id: id, content: "1" }))
)

describe("a loop's input JSON", () => {
  it("is JSON.stringify of the input object: the turn input (or none), the transcript or its tail with transcript_start, the configuration, the Events (data kept or not) and the runtime", () => {
    fc.assert(
      fc.property(
        journalArb,
        fc.array(message, { maxLength: 30 }),
        fc.option(fc.unicodeString(), { nil: undefined }),
        fc.option(fc.nat({ max: 40 }), { nil: undefined }),
        fc.boolean(),
        fc.boolean(),
        (records, transcript, text, tailMessages, kept, keptCalls) => {
          const read = records.map((r): JournalRecord => ({ ...r, payload: kept ? parseKept(JSON.stringify(r.payload)) : r.payload }))
          const base = activationInput()
          const input: ActivationInput = {
            ...base,
            input: text === undefined ? undefined : { message: text },
            transcript,
            ...(keptCalls ? { unanswered: unansweredOf(transcript) } : {}),
            events: eventsOf(base.runtime.session_id, read, 0)
          }
          const module = { tail: tailMessages !== undefined, tailMessages: tailMessages ?? 16 }
          const tail = module.tail ? transcriptTail(transcript, undefined, module.tailMessages) : undefined
          const expected = {
            input: input.input,
            transcript: tail ? tail.transcript : transcript,
            ...(tail ? { transcript_start: tail.transcript_start } : {}),
            configuration: input.configuration,
            events: input.events,
            runtime: input.runtime
          }
          expect(guestInputJson(input, module)).toBe(JSON.stringify(expected))
        }
      ),
      { numRuns: 300 }
    )
  })
})
