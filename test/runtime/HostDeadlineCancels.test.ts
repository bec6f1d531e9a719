/**
 * The calls of a round that share a deadline are stopped together (docs/environments.md, "The
 * command stream"): their `cancel` frames are offered in the deadline's own step, so they reach the
 * host as one write, and before any of those calls' outcomes is committed — not each behind a
 * fiber of its own, nor behind another call's outcome commit (a burst of thousands of calls
 * sharing a deadline used to get its cancels seconds late).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import type { HostId } from "../../src/domain/Ids.js"
import type { CommandStreamBody } from "../../src/layers/hosts/CommandStream.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { Hosts } from "../../src/services/Hosts.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { framesOf } from "../support/hosts.js"
import { runtimeLayer } from "../support/runtime.js"

const CALLS = 40

/** The memory journal, noting how many call outcomes (`tool_call_failed`) it had taken at each moment asked. */
const counting = (outcomes: { n: number }) =>
  Layer.scoped(
    Journal,
    Effect.map(JournalMemory.make, ({ journal: base }): JournalShape => {
      // Without `enqueue` every append (the fence's outcome commits too) goes through `append`.
      const { enqueue: _, ...rest } = base
      return {
        ...rest,
        append: (session, entries, options) =>
          Effect.tap(base.append(session, entries, options), () => {
            outcomes.n += entries.filter((e) => e.kind === "tool_call_failed").length
          })
      }
    })
  )

describe("the cancels of calls sharing a deadline", () => {
  it.scopedLive(`the cancel frames of ${CALLS} calls sharing a deadline are offered in the deadline's own step and go out as one write, before any of their outcomes is committed`, () => {
    const outcomes = { n: 0 }
    const layer = runtimeLayer({ journal: counting(outcomes), hosts: {}, config: { cancelGraceMs: 300 } }) as unknown as Layer.Layer<Sessions | Hosts, unknown>
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const hosts = yield* Hosts
      const { host_id } = yield* hosts.register
      const stream = yield* hosts.connect(host_id as HostId)
      // Each chunk the host reads, with the outcomes committed when it came.
      const chunks: Array<{ readonly cancels: number; readonly outcomesThen: number }> = []
      stream.body.on("data", (chunk: Buffer | string) => {
        const cancels = String(chunk).split("event: cancel\n").length - 1
        if (cancels > 0) chunks.push({ cancels, outcomesThen: outcomes.n })
      })
      // How many cancels had been offered when the first one's step ended (a microtask after it).
      let offered = 0
      let offeredInFirstStep: number | undefined
      const body = stream.body as CommandStreamBody
      const offer = body.offer.bind(body)
      body.offer = (bytes) => {
        if (Buffer.from(bytes).toString().startsWith("event: cancel\n")) {
          if (offered++ === 0) queueMicrotask(() => void (offeredInFirstStep = offered))
        }
        return offer(bytes)
      }
      const frames = framesOf(stream.body)
      yield* Effect.promise(() => frames.expect("ready"))
      const calls = Array.from({ length: CALLS }, (_, i) => ({ name: "slow", input: { i } }))
      const { session_id } = yield* sessions.create({
        model: { provider: "scripted", replies: [{ tool_calls: calls }, { text: "done" }] as any },
        environments: [{ name: "app", driver: "host", host: host_id }],
        tools: [{ name: "slow", description: "never answers", environment: "app", timeout_ms: 200 }]
      })
      // The host reads every call and answers none: each call's deadline stops it.
      const turn = yield* sessions.send(session_id, { message: "go" })
      expect(turn).toBeDefined()
      const events = (yield* sessions.events(session_id, { after: 0, limit: 500 })).events
      const failed = events.filter((e) => e.kind === "tool_call_failed")
      expect(failed).toHaveLength(CALLS)
      expect(failed.every((e) => (e.data as { outcome: string }).outcome === "timeout")).toBe(true)
      // Every cancel offered in the deadline's own step (no fiber per call between them), all in
      // one write, and before any of the calls' outcomes was committed.
      expect(offeredInFirstStep).toBe(CALLS)
      expect(chunks).toEqual([{ cancels: CALLS, outcomesThen: 0 }])
    }).pipe(Effect.provide(layer))
  })
})
