/**
 * A sync send's turn opening (`turn_started`, `activation_started`, a keyed send's
 * `request_claimed`) is staged in the journal (`Journal.stage`) and written with the turn's first
 * write, in the same atomic append: a text turn costs three durable commits, a submitted one four
 * (its receipt names a durable `turn_started`). Until the opening is written nothing durable shows
 * it, and the turn itself sees it as it will be read.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import type { Event } from "../../src/domain/Events.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver } from "../../src/layers/journal/FileDriver.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

/** One model call, then the answer saved with the close: the shape of a text turn. */
const text: AgentloopShape = {
  activate: (input, host) =>
    Effect.gen(function*() {
      const reply = yield* host.model({ messages: [...input.transcript, { role: "user", content: input.input!.message }] })
      yield* host.setTranscriptAtEnd([...input.transcript, { role: "user", content: input.input!.message }, { role: "assistant", content: reply.text }])
      return { text: reply.text }
    })
}

const kinds = (records: ReadonlyArray<{ readonly kind: string }>) => records.map((r) => r.kind)

describe("a sync send's staged opening", () => {
  it.scopedLive("a sync text turn costs three fdatasyncs, a submitted one four, and both journals read the same", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const probe = instrumentedDriver()
      const journal = Layer.scoped(Journal, Effect.orDie(JournalFile.make({ dataDir }))).pipe(Layer.provide(Layer.succeed(FileDriver, probe.driver)))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const read = yield* Journal
        const syncs = (run: Effect.Effect<unknown, unknown>) =>
          Effect.gen(function*() {
            const before = probe.counts.fdatasync
            yield* run
            return probe.counts.fdatasync - before
          })
        const sent = (yield* sessions.create({ agentloop: "text", model: { provider: "scripted" } })).session_id
        const submitted = (yield* sessions.create({ agentloop: "text", model: { provider: "scripted" } })).session_id
        expect(yield* syncs(sessions.send(sent, { message: "hello" }))).toBe(3)
        expect(yield* syncs(Effect.gen(function*() {
          const receipt = yield* sessions.submit(submitted, { message: "hello" })
          yield* sessions.drain
          return receipt
        }))).toBe(4)
        const sentKinds = kinds(yield* read.read(sent as SessionId, { after: 0, limit: 100 }))
        const submittedKinds = kinds(yield* read.read(submitted as SessionId, { after: 0, limit: 100 }))
        expect(sentKinds).toEqual(submittedKinds)
        expect(sentKinds.slice(2)).toEqual([
          "turn_started",
          "activation_started",
          "model_call_started",
          "model_call_ended",
          "transcript_delta",
          "activation_ended",
          "turn_ended"
        ])
      }).pipe(Effect.provide(runtimeLayer({ journal, loops: { text } })))
    }))

  it.scopedLive("the official loop's sync text turn costs three fdatasyncs too: its user message, saved riding on the first model call, is written in the opening's append, just ahead of the call's start", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const probe = instrumentedDriver()
      const journal = Layer.scoped(Journal, Effect.orDie(JournalFile.make({ dataDir }))).pipe(Layer.provide(Layer.succeed(FileDriver, probe.driver)))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const read = yield* Journal
        const sent = (yield* sessions.create({ model: { provider: "scripted" } })).session_id
        const before = probe.counts.fdatasync
        yield* sessions.send(sent, { message: "hello" })
        expect(probe.counts.fdatasync - before).toBe(3)
        expect(kinds(yield* read.read(sent as SessionId, { after: 0, limit: 100 })).slice(2)).toEqual([
          "turn_started",
          "activation_started",
          "transcript_delta",
          "model_call_started",
          "model_call_ended",
          "transcript_delta",
          "activation_ended",
          "turn_ended"
        ])
      }).pipe(Effect.provide(runtimeLayer({ journal })))
    }))

  it.scopedLive("before the turn's first write nothing durable shows it: reads and the summary's last_sequence stop before it (its status is running), and the turn sees its opening as it is then written", () => {
    const reached = Deferred.unsafeMake<void>(undefined as never)
    const go = Deferred.unsafeMake<void>(undefined as never)
    let inputEvents: ReadonlyArray<Event> = []
    let hostEvents: ReadonlyArray<Event> = []
    const waiting: AgentloopShape = {
      activate: (input, host) =>
        Effect.gen(function*() {
          inputEvents = input.events
          hostEvents = yield* host.events({ after: 0, limit: 100 })
          yield* Deferred.succeed(reached, undefined)
          yield* Deferred.await(go)
          yield* host.kvPut("first", "write")
          return { text: "done" }
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id, last_sequence: created } = yield* sessions.create({ agentloop: "waiting", model: { provider: "scripted" } })
      const session = session_id as SessionId
      const send = yield* Effect.fork(sessions.send(session_id, { message: "hi" }))
      yield* Deferred.await(reached)

      expect(yield* journal.lastSequence(session)).toBe(created)
      expect(yield* journal.read(session, { after: created, limit: 10 })).toEqual([])
      const summary = yield* sessions.get(session_id)
      expect(summary.status).toBe("running")
      expect(summary.last_sequence).toBe(created)
      expect((yield* sessions.events(session_id, { after: 0, limit: 100 })).events.map((e) => e.kind)).not.toContain("turn_started")

      // The turn sees its own opening, in its input and through the events host call alike.
      expect(kinds(inputEvents).slice(-2)).toEqual(["turn_started", "activation_started"])
      expect(kinds(hostEvents).slice(-2)).toEqual(["turn_started", "activation_started"])

      yield* Deferred.succeed(go, undefined)
      const outcome = yield* Fiber.join(send)
      expect(outcome.turn.status).toBe("ended")
      const written = yield* journal.read(session, { after: created, limit: 10 })
      expect(kinds(written)).toEqual(["turn_started", "activation_started", "kv_put", "activation_ended", "turn_ended"])
      // The Events the turn was given are the records as they were then written, times included.
      expect(inputEvents.slice(-2).map((e) => [e.sequence, e.recorded_at_ms])).toEqual(written.slice(0, 2).map((r) => [r.sequence, r.recorded_at_ms]))
      expect(written[0]!.recorded_at_ms).toBeLessThanOrEqual(written[2]!.recorded_at_ms)
      // A client paging from the summary's last_sequence misses nothing.
      const page = yield* sessions.events(session_id, { after: summary.last_sequence, limit: 100 })
      expect(page.events[0]!.kind).toBe("turn_started")
    }).pipe(Effect.provide(runtimeLayer({ journal: "memory", loops: { waiting }, config: { stagedOpeningMs: 600_000 } })))
  })

  it.scopedLive("an opening the turn's first write has not carried within BRAIN_STAGED_OPENING_MS is written on its own: the running turn is durably started, and its first write follows it", () => {
    const reached = Deferred.unsafeMake<void>(undefined as never)
    const go = Deferred.unsafeMake<void>(undefined as never)
    const waiting: AgentloopShape = {
      activate: (_input, host) =>
        Effect.gen(function*() {
          yield* Deferred.succeed(reached, undefined)
          yield* Deferred.await(go)
          yield* host.kvPut("first", "write")
          return { text: "done" }
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id, last_sequence: created } = yield* sessions.create({ agentloop: "waiting", model: { provider: "scripted" } })
      const session = session_id as SessionId
      const send = yield* Effect.fork(sessions.send(session_id, { message: "hi" }))
      yield* Deferred.await(reached)
      // Past the window (30 ms) with no write of the turn's own: its opening is durable.
      // (Polled for up to 30 s: a hang guard, not a claim about how soon.)
      for (let i = 0; i < 3_000 && (yield* journal.lastSequence(session)) === created; i++) yield* Effect.sleep("10 millis")
      expect(kinds(yield* journal.read(session, { after: created, limit: 10 }))).toEqual(["turn_started", "activation_started"])
      expect((yield* sessions.get(session_id)).last_sequence).toBe(created + 2)
      yield* Deferred.succeed(go, undefined)
      expect((yield* Fiber.join(send)).turn.status).toBe("ended")
      expect(kinds(yield* journal.read(session, { after: created, limit: 10 }))).toEqual(["turn_started", "activation_started", "kv_put", "activation_ended", "turn_ended"])
    }).pipe(Effect.provide(runtimeLayer({ journal: "memory", loops: { waiting }, config: { stagedOpeningMs: 30 } })))
  })

  it.scopedLive("telemetry reported while the opening is staged writes the opening first: the activation sequence it names is durable before the sink has it", () => {
    const reported: Array<{ readonly activation: number; readonly durable: number }> = []
    let durableNow: () => Effect.Effect<number> = () => Effect.succeed(0)
    const reporting: AgentloopShape = {
      activate: (_input, host) =>
        Effect.gen(function*() {
          yield* host.telemetry({ step: "thinking" })
          return { text: "done" }
        })
    }
    const sink = {
      record: (r: { readonly activation: number }) => Effect.flatMap(Effect.suspend(durableNow), (durable) => Effect.sync(() => void reported.push({ activation: r.activation, durable })))
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "reporting", model: { provider: "scripted" } })
      durableNow = () => Effect.orDie(journal.lastSequence(session_id as SessionId))
      yield* sessions.send(session_id, { message: "hi" })
      expect(reported).toHaveLength(1)
      expect(reported[0]!.durable).toBeGreaterThanOrEqual(reported[0]!.activation)
    }).pipe(Effect.provide(runtimeLayer({ journal: "memory", loops: { reporting }, config: { stagedOpeningMs: 600_000 }, telemetry: sink as never })))
  })
})
