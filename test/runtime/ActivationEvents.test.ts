/**
 * An activation's input Events are those of its range (after its cursor: its predecessor's start,
 * or its end for a loop with `eventsFromEnd`) of the kinds its loop reads. A loop that reads only
 * `turn_failed` Events (the official loop) gets them without a read of the journal when the
 * session's state knows none came after the cursor (`noEventsAfter`): the same Events as the full
 * read, whatever the turns before it did. Each activation here also reads its range in full with
 * the `events` host call and compares.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import fc from "fast-check"
import type { Event } from "../../src/domain/Events.js"
import { failure } from "../../src/domain/Failure.js"
import { PAGE_EVENTS } from "../../src/domain/Limits.js"
import { AgentloopFailed, type AgentloopShape } from "../../src/services/Agentloop.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

type Step = "ok" | "fail" | "model"

interface Seen {
  readonly input: ReadonlyArray<Event>
  readonly full: ReadonlyArray<Event>
}

const loopOf = (kinds: ReadonlySet<string>, fromEnd: boolean, seen: Array<Seen>): AgentloopShape => ({
  eventKinds: kinds,
  eventsFromEnd: fromEnd,
  activate: (input, host) =>
    Effect.gen(function*() {
      const all = yield* host.events({ after: 0, limit: PAGE_EVENTS })
      const marks = all.filter((e) =>
        e.sequence < input.runtime.activation &&
        (fromEnd ? e.kind === "activation_ended" || e.kind === "activation_failed" : e.kind === "activation_started")
      )
      const cursor = Math.max(0, (marks.length > 0 ? marks[marks.length - 1]!.sequence : 0) - 1)
      const full = (yield* host.events({ after: cursor, limit: PAGE_EVENTS })).filter((e) => kinds.has(e.kind))
      seen.push({ input: input.events, full })
      const step = (input.input as { message?: string }).message as Step
      if (step === "model") yield* host.model({ messages: [{ role: "user", content: "hi" }] })
      if (step === "fail") return yield* Effect.fail(new AgentloopFailed({ failure: failure("agentloop_failed", "as scripted") }))
      return "done"
    })
})

const KINDS: ReadonlyArray<ReadonlySet<string>> = [new Set(["turn_failed"]), new Set(["turn_failed", "turn_ended"]), new Set(["turn_started"])]

describe("an activation's input Events", () => {
  it.live("are those of the full read of its range, kept to the loop's kinds, whether or not the read was skipped", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(
          fc.array(fc.constantFrom<Step>("ok", "fail", "model"), { minLength: 1, maxLength: 8 }),
          fc.constantFrom(...KINDS),
          fc.boolean(),
          async (steps, kinds, fromEnd) => {
            const seen: Array<Seen> = []
            await Effect.runPromise(Effect.gen(function*() {
              const sessions = yield* Sessions
              const { session_id } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" } })
              for (const step of steps) yield* sessions.send(session_id, { message: step })
            }).pipe(Effect.provide(runtimeLayer({ loops: { t: loopOf(kinds, fromEnd, seen) } }))))
            expect(seen).toHaveLength(steps.length)
            for (const s of seen) expect(s.input).toEqual(s.full)
            // The runs exercise both: a turn after a failed one sees its turn_failed.
            const failedBefore = steps.slice(0, -1).includes("fail")
            if (failedBefore && kinds.has("turn_failed") && !fromEnd) {
              expect(seen.some((s) => s.input.some((e) => e.kind === "turn_failed"))).toBe(true)
            }
          }
        ),
        { numRuns: 25 }
      )
    ))
})
