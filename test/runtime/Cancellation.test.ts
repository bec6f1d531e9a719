/**
 * Cancellation, deadlines, busy sessions and the session lifecycle (DESIGN §4, §6). Deadlines and
 * graces run on the TestClock; waiting for the runtime to reach a point polls in real time.
 */
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Either, Fiber, FiberId, Layer, Option, TestClock } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry, type JournalRecord } from "../../src/domain/Records.js"
import * as ToolsInProcess from "../../src/layers/ToolsInProcess.js"
import type { AgentloopShape, HostCallFailed, ToolResult } from "../../src/services/Agentloop.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import type { ApiError } from "../../src/domain/Errors.js"
import { Sessions } from "../../src/services/Sessions.js"
import type { ServerConfigShape } from "../../src/services/ServerConfig.js"
import { tempDir } from "../support/journals.js"
import { type RuntimeOptions, runtimeLayer } from "../support/runtime.js"

const loop = (activate: AgentloopShape["activate"]): AgentloopShape => ({ activate })

const codeOf = <A>(call: Effect.Effect<A, HostCallFailed>) =>
  Effect.map(Effect.either(call), (e) => (Either.isLeft(e) ? e.left.failure.code : "ok"))

const refusal = <A>(call: Effect.Effect<A, ApiError>) => Effect.map(Effect.flip(call), (e) => e.code)

/** Real time, whatever the test's clock: lets the runtime's fibers and IO move. */
const pause = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

/** Polls in real time until `check` holds; fails the test after about two seconds. */
const eventually = (what: string, check: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 400; i++) {
      if (yield* check) return
      yield* pause(5)
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

const ofKind = (records: ReadonlyArray<JournalRecord>, kind: string) => records.filter((r) => r.kind === kind)

const outcomeOf = (records: ReadonlyArray<JournalRecord>, sequence: number) =>
  records.find((r) => (r.kind.endsWith("_ended") || r.kind.endsWith("_failed")) && r.payload?.sequence === sequence)

/** Wraps a handler to keep the AbortSignal it was given. */
const watched = (handler: ToolsInProcess.ToolHandler) => {
  const signals: Array<AbortSignal> = []
  const wrapped: ToolsInProcess.ToolHandler = (input, invocation) =>
    Effect.suspend(() => {
      signals.push(invocation.signal)
      return handler(input, invocation)
    })
  return { handler: wrapped, signals }
}

/** A loop that waits for the test to open its gate, then answers with the message. */
const gated = () => {
  const gate = Deferred.unsafeMake<void>(FiberId.none)
  const state = { entered: 0 }
  const agentloop = loop((input, host) =>
    Effect.gen(function*() {
      state.entered++
      yield* Deferred.await(gate)
      yield* host.kvPut("last", input.input!.message)
      return { echo: input.input!.message }
    }))
  return { agentloop, open: Deferred.succeed(gate, undefined), state }
}

const withRuntime = <A, E, R>(
  options: RuntimeOptions,
  body: (rt: {
    readonly sessions: typeof Sessions.Service
    readonly records: (s: SessionId) => Effect.Effect<ReadonlyArray<JournalRecord>>
    readonly journal: JournalShape
  }) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function*() {
    const journalChoice = currentJournal === "memory" ? "memory" as const : { dataDir: yield* tempDir() }
    return yield* Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const records = (s: SessionId) => Effect.orDie(journal.read(s, { after: 0, limit: 100_000 }))
      return yield* body({ sessions, records, journal })
    }).pipe(Effect.provide(runtimeLayer({ ...options, journal: journalChoice })))
  })

/** Every rule here runs on the memory journal and on the file journal. */
let currentJournal: "memory" | "file" = "memory"

const scripted = { provider: "scripted" as const }
const config = (c: Partial<ServerConfigShape>) => c

for (const kind of ["memory", "file"] as const) {
describe(`on the ${kind} journal`, () => {
  beforeAll(() => {
    currentJournal = kind
  })
describe("cancellation", () => {
  it.scoped("interrupt aborts the executor's signal; a tool that confirms within the grace is recorded cancelled, the loop's next host call fails, the turn fails with cancelled and the next turn runs normally", () => {
    const grace = 1000
    // Takes half the grace to wind down after the abort, then confirms it stopped.
    const polite = watched((_input, { signal }) =>
      ToolsInProcess.aborted(signal).pipe(Effect.zipRight(Effect.sleep(grace / 2)), Effect.as({ outcome: "stopped" } as const)))
    const seen: { results?: ReadonlyArray<ToolResult>; next?: string } = {}
    let turn = 0
    const loops = {
      t: loop((_input, host) =>
        Effect.gen(function*() {
          turn++
          if (turn > 1) {
            yield* host.kvPut("second", true)
            return "fine"
          }
          seen.results = yield* host.dispatch([{ id: "c1", name: "polite", input: {} }])
          seen.next = yield* codeOf(host.kvPut("after", true))
          return "unreachable"
        }))
    }
    return withRuntime({ loops, tools: { polite: polite.handler }, config: config({ cancelGraceMs: grace }) }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted, tools: [{ name: "polite" }] })
        const receipt = yield* sessions.submit(s, { message: "go" })
        yield* eventually("the tool to start", Effect.sync(() => polite.signals.length === 1))
        expect(polite.signals[0]!.aborted).toBe(false)
        const interrupting = yield* Effect.fork(sessions.interrupt(s))
        yield* eventually("the abort", Effect.sync(() => polite.signals[0]!.aborted))
        yield* TestClock.adjust(grace / 2)
        const summary = yield* Fiber.join(interrupting)
        expect(summary.status).toBe("idle")
        expect(seen.results?.map((r) => [r.call_id, r.outcome, r.is_error])).toEqual([["c1", "cancelled", true]])
        expect(seen.next).toBe("cancelled")
        const all = yield* records(s)
        const started = ofKind(all, "tool_call_started")[0]!
        const outcome = outcomeOf(all, started.sequence)!
        expect([outcome.kind, outcome.payload.outcome, outcome.payload.failure.code, outcome.payload.is_error]).toEqual([
          "tool_call_failed",
          "cancelled",
          "cancelled",
          true
        ])
        // The call was sent and cancelled (nothing promises it was rolled back): the turn says so.
        expect(ofKind(all, "turn_failed").map((r) => [r.payload.sequence, r.payload.failure.code, r.payload.failure.ambiguous])).toEqual([
          [receipt.sequence, "cancelled", true]
        ])
        expect(ofKind(all, "activation_failed").map((r) => r.payload.failure.code)).toEqual(["cancelled"])
        expect(ofKind(all, "kv_put")).toEqual([])
        const next = yield* sessions.send(s, { message: "again" })
        expect(next.turn).toEqual({ sequence: next.turn.sequence, status: "ended", result: "fine" })
        expect(next.status).toBe("idle")
      }))
  })

  it.scoped("a tool that ignores cancellation is recorded unknown only after BRAIN_CANCEL_GRACE_MS, and the turn closes as cancelled", () => {
    const stubborn = watched(ToolsInProcess.ignoreCancel(Infinity))
    const grace = 1000
    let turn = 0
    const loops = {
      t: loop((_input, host) =>
        Effect.gen(function*() {
          turn++
          if (turn > 1) return "fine"
          return yield* host.dispatch([{ id: "c1", name: "stubborn", input: {} }])
        }))
    }
    return withRuntime({ loops, tools: { stubborn: stubborn.handler }, config: config({ cancelGraceMs: grace }) }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted, tools: [{ name: "stubborn" }] })
        yield* sessions.submit(s, { message: "go" })
        yield* eventually("the tool to start", Effect.sync(() => stubborn.signals.length === 1))
        const interrupting = yield* Effect.fork(sessions.interrupt(s))
        yield* eventually("the abort", Effect.sync(() => stubborn.signals[0]!.aborted))
        yield* TestClock.adjust(grace - 1)
        yield* pause(30)
        expect(Option.isNone(yield* Fiber.poll(interrupting))).toBe(true)
        const during = yield* records(s)
        expect(ofKind(during, "tool_call_failed")).toEqual([])
        expect(ofKind(during, "turn_failed")).toEqual([])
        yield* TestClock.adjust(1)
        yield* Fiber.join(interrupting)
        const all = yield* records(s)
        const started = ofKind(all, "tool_call_started")[0]!
        const outcome = outcomeOf(all, started.sequence)!
        expect(outcome.kind).toBe("tool_call_failed")
        expect(outcome.payload).toMatchObject({ outcome: "unknown", is_error: true, failure: { code: "unknown", ambiguous: true } })
        expect(ofKind(all, "turn_failed").map((r) => r.payload.failure.code)).toEqual(["cancelled"])
        const next = yield* sessions.send(s, { message: "again" })
        expect(next.turn.status).toBe("ended")
        expect(next.turn.result).toBe("fine")
      }))
  })

  it.scoped("interrupt stops waiting on a slow model call: model_call_failed is recorded cancelled and ambiguous, and the session answers the next turn", () => {
    const model = { provider: "scripted" as const, replies: [{ text: "slow", delay_ms: 600_000 }, { text: "fast" }] }
    return withRuntime({}, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ model })
        yield* sessions.submit(s, { message: "go" })
        yield* eventually("the model call to start", Effect.map(records(s), (all) => ofKind(all, "model_call_started").length === 1))
        yield* sessions.interrupt(s)
        const all = yield* records(s)
        const started = ofKind(all, "model_call_started")[0]!
        const outcome = outcomeOf(all, started.sequence)!
        expect(outcome.kind).toBe("model_call_failed")
        expect(outcome.payload.failure).toMatchObject({ code: "cancelled", ambiguous: true })
        expect(ofKind(all, "turn_failed").map((r) => r.payload.failure.code)).toEqual(["cancelled"])
        const next = yield* sessions.send(s, { message: "again" })
        expect(next.turn).toEqual({ sequence: next.turn.sequence, status: "ended", result: { text: "fast" } })
      }))
  })

  it.scoped("a cancelled turn's failure is ambiguous exactly when the cancel cut short an effect that was sent: the model call's record, the loop's error, activation_failed, turn_failed and the send's answer agree", () => {
    const grace = 1000
    const seen: { model?: { code: string; ambiguous: boolean } } = {}
    const loops = {
      // Calls a model that never answers and keeps what its call failed with.
      m: loop((_input, host) =>
        Effect.gen(function*() {
          const called = yield* Effect.either(host.model({ messages: [{ role: "user", content: "go" }] }))
          if (Either.isRight(called)) return called.right
          seen.model = { code: called.left.failure.code, ambiguous: called.left.failure.ambiguous }
          return yield* Effect.fail(called.left)
        })),
      // Computes (waits on nothing Brain runs) and never makes a host call.
      idle: loop(() => Effect.never)
    }
    const model = { provider: "scripted" as const, replies: [{ text: "slow", delay_ms: 600_000 }] }
    const closing = (all: ReadonlyArray<JournalRecord>) =>
      ["activation_failed", "turn_failed"].map((k) => ofKind(all, k).map((r) => [r.payload.failure.code, r.payload.failure.ambiguous]))
    return withRuntime({ loops, config: config({ cancelGraceMs: grace }) }, ({ records, sessions }) =>
      Effect.gen(function*() {
        // A model call in flight: sent, so the provider may have run it.
        const { session_id: s } = yield* sessions.create({ agentloop: "m", model })
        const sending = yield* Effect.fork(sessions.send(s, { message: "go" }))
        yield* eventually("the model call to start", Effect.map(records(s), (all) => ofKind(all, "model_call_started").length === 1))
        yield* sessions.interrupt(s)
        const out = yield* Fiber.join(sending)
        const all = yield* records(s)
        const started = ofKind(all, "model_call_started")[0]!
        expect(outcomeOf(all, started.sequence)!.payload.failure).toMatchObject({ code: "cancelled", ambiguous: true })
        expect(seen.model).toEqual({ code: "cancelled", ambiguous: true })
        expect(closing(all)).toEqual([[["cancelled", true]], [["cancelled", true]]])
        expect(out.turn.failure).toMatchObject({ code: "cancelled", ambiguous: true })

        // Nothing in flight (the loop computes): the cancel cut nothing short.
        const { session_id: quiet } = yield* sessions.create({ agentloop: "idle", model: scripted })
        const waiting = yield* Effect.fork(sessions.send(quiet, { message: "go" }))
        yield* eventually("the turn to start", Effect.map(records(quiet), (all) => ofKind(all, "activation_started").length === 1))
        const interrupting = yield* Effect.fork(sessions.interrupt(quiet))
        yield* pause(20)
        // The loop ignores the cancel: it is stopped after its graces.
        yield* TestClock.adjust(2 * grace)
        yield* Fiber.join(interrupting)
        const quietOut = yield* Fiber.join(waiting)
        expect(closing(yield* records(quiet))).toEqual([[["cancelled", false]], [["cancelled", false]]])
        expect(quietOut.turn.failure).toMatchObject({ code: "cancelled", ambiguous: false })
      }))
  })

  it.scoped("the wall deadline (maxTurnMs) starts cancellation: the outstanding tool call is cancelled and the turn fails with timeout", () => {
    const slow = watched(ToolsInProcess.hang)
    const seen: { results?: ReadonlyArray<ToolResult>; next?: string } = {}
    const loops = {
      t: loop((_input, host) =>
        Effect.gen(function*() {
          seen.results = yield* host.dispatch([{ id: "c1", name: "slow", input: {} }])
          seen.next = yield* codeOf(host.kvPut("after", true))
        }))
    }
    const limits = config({ maxTurnMs: 10_000, cancelGraceMs: 100 })
    return withRuntime({ loops, tools: { slow: slow.handler }, config: limits }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted, tools: [{ name: "slow" }] })
        const sending = yield* Effect.fork(sessions.send(s, { message: "go" }))
        yield* eventually("the tool to start", Effect.sync(() => slow.signals.length === 1))
        yield* TestClock.adjust(9_999)
        yield* pause(20)
        expect(slow.signals[0]!.aborted).toBe(false)
        expect(Option.isNone(yield* Fiber.poll(sending))).toBe(true)
        yield* TestClock.adjust(1)
        const out = yield* Fiber.join(sending)
        expect(out.turn.status).toBe("failed")
        expect(out.turn.failure?.code).toBe("timeout")
        expect(slow.signals[0]!.aborted).toBe(true)
        expect(seen.results?.map((r) => [r.outcome, r.is_error])).toEqual([["cancelled", true]])
        expect(seen.next).toBe("timeout")
        const all = yield* records(s)
        expect(ofKind(all, "turn_failed").map((r) => r.payload.failure.code)).toEqual(["timeout"])
        expect(ofKind(all, "activation_failed").map((r) => r.payload.failure.code)).toEqual(["timeout"])
        const started = ofKind(all, "tool_call_started")[0]!
        expect(outcomeOf(all, started.sequence)!.payload.outcome).toBe("cancelled")
      }))
  })

  it.scoped("maxToolMs is every tool call's deadline (a shorter timeout_ms wins): a call past it is recorded timeout and the turn goes on", () => {
    const short = watched(ToolsInProcess.hang)
    const long = watched(ToolsInProcess.hang)
    const loops = { t: loop((_input, host) => host.dispatch([{ id: "a", name: "short", input: {} }, { id: "b", name: "long", input: {} }])) }
    return withRuntime({ loops, tools: { short: short.handler, long: long.handler }, config: config({ maxToolMs: 500 }) }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({
          agentloop: "t",
          model: scripted,
          tools: [{ name: "short", timeout_ms: 200 }, { name: "long" }]
        })
        const t0 = yield* Clock.currentTimeMillis
        const sending = yield* Effect.fork(sessions.send(s, { message: "go" }))
        yield* eventually("both tools to start", Effect.sync(() => short.signals.length === 1 && long.signals.length === 1))
        const started = ofKind(yield* records(s), "tool_call_started")
        expect(started.map((r) => [r.payload.call_id, r.payload.deadline_at_ms]).sort()).toEqual([["a", t0 + 200], ["b", t0 + 500]])
        yield* TestClock.adjust(200)
        yield* eventually("the short call's timeout", Effect.sync(() => short.signals[0]!.aborted))
        expect(long.signals[0]!.aborted).toBe(false)
        yield* TestClock.adjust(300)
        const out = yield* Fiber.join(sending)
        expect(out.turn.status).toBe("ended")
        expect((out.turn.result as ReadonlyArray<ToolResult>).map((r) => [r.call_id, r.outcome, r.is_error])).toEqual([
          ["a", "timeout", true],
          ["b", "timeout", true]
        ])
        const all = yield* records(s)
        for (const st of started) {
          expect(outcomeOf(all, st.sequence)!.payload).toMatchObject({ outcome: "timeout", is_error: true, failure: { code: "timeout" } })
        }
      }))
  })
  it.scoped("a tool's timeout_ms above Node's timer maximum (a configuration journaled before create bounded it) counts as that maximum: its call is sent with a whole deadline and ends ok, never a failed turn", () => {
    const quick = watched((input) => Effect.succeed({ outcome: "ok", output: input } as const))
    const loops = { t: loop((_input, host) => host.dispatch([{ id: "a", name: "far", input: { n: 1 } }])) }
    return withRuntime({ loops, tools: { far: quick.handler }, config: config({ maxToolMs: 0 }) }, ({ journal, records, sessions }) =>
      Effect.gen(function*() {
        // Past 0, the clock plus such a timeout is no safe integer.
        yield* TestClock.adjust(1_000)
        // Create refuses it now (test/embedding/createBounds.test.ts): the session is journaled as an older server wrote it.
        const s = yield* mintSessionId
        const configuration = { agentloop: "t", model: scripted, tools: [{ name: "far", timeout_ms: Number.MAX_SAFE_INTEGER }] }
        yield* Effect.orDie(journal.create(s))
        const [first] = yield* Effect.orDie(journal.append(s, [entry("session_creation_started", { configuration })]))
        yield* Effect.orDie(journal.append(s, [entry("session_creation_ended", { sequence: first! })]))
        const t0 = yield* Clock.currentTimeMillis
        const out = yield* sessions.send(s, { message: "go" })
        expect(out.turn.status, JSON.stringify(out.turn)).toBe("ended")
        expect((out.turn.result as ReadonlyArray<ToolResult>).map((r) => [r.call_id, r.outcome])).toEqual([["a", "ok"]])
        const started = ofKind(yield* records(s), "tool_call_started")
        expect(started.map((r) => r.payload.deadline_at_ms)).toEqual([t0 + 2 ** 31 - 1])
      }))
  })
})

describe("deadlines of a round of calls", () => {
  it.scoped("parallel calls with one budget share their deadline: those still running at deadline_at_ms time out, one answered before it stays ok, and the next round gets its own", () => {
    const slow = watched(ToolsInProcess.hang)
    const loops = {
      t: loop((_input, host) =>
        Effect.gen(function*() {
          const first = yield* host.dispatch([
            { id: "a", name: "quick", input: { n: 1 } },
            { id: "b", name: "slow", input: {} },
            { id: "c", name: "slow", input: {} }
          ])
          const second = yield* host.dispatch([{ id: "d", name: "quick", input: { n: 2 } }])
          return [...first, ...second]
        }))
    }
    return withRuntime({ loops, tools: { quick: ToolsInProcess.succeedAfter(0), slow: slow.handler }, config: config({ maxToolMs: 300 }) }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted, tools: [{ name: "quick" }, { name: "slow" }] })
        const t0 = yield* Clock.currentTimeMillis
        const sending = yield* Effect.fork(sessions.send(s, { message: "go" }))
        yield* eventually("both slow calls to start", Effect.sync(() => slow.signals.length === 2))
        const started = ofKind(yield* records(s), "tool_call_started")
        expect(started.map((r) => r.payload.deadline_at_ms)).toEqual([t0 + 300, t0 + 300, t0 + 300])
        yield* TestClock.adjust(299)
        yield* pause(20)
        expect(slow.signals.map((x) => x.aborted)).toEqual([false, false])
        yield* TestClock.adjust(1)
        const out = yield* Fiber.join(sending)
        expect(slow.signals.map((x) => x.aborted)).toEqual([true, true])
        expect((out.turn.result as ReadonlyArray<ToolResult>).map((r) => [r.call_id, r.outcome])).toEqual([
          ["a", "ok"],
          ["b", "timeout"],
          ["c", "timeout"],
          ["d", "ok"]
        ])
        const second = ofKind(yield* records(s), "tool_call_started").find((r) => r.payload.call_id === "d")!
        expect(second.payload.deadline_at_ms).toBe(t0 + 600)
      }))
  })
})

describe("a deadline that passes before the call is sent", () => {
  it.scoped("a call whose deadline passed while its start was being committed is never sent: recorded timeout, not sent", () => {
    const invoked: Array<string> = []
    const tool: ToolsInProcess.ToolHandler = (input) => Effect.sync(() => {
      invoked.push("x")
      return { outcome: "ok", output: input }
    })
    const reached = Deferred.unsafeMake<void>(FiberId.none)
    const release = Deferred.unsafeMake<void>(FiberId.none)
    const held = Layer.scoped(
      Journal,
      Effect.map(JournalMemory.make, ({ journal: base }): JournalShape => ({
        ...base,
        append: (session, entries, options) =>
          entries.some((e) => e.kind === "tool_call_started")
            ? Effect.zipRight(Effect.zipRight(Deferred.succeed(reached, undefined), Deferred.await(release)), base.append(session, entries, options))
            : base.append(session, entries, options)
      }))
    )
    const loops = { t: loop((_input, host) => host.dispatch([{ id: "a", name: "tool", input: {} }])) }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted, tools: [{ name: "tool" }] })
      const sending = yield* Effect.fork(sessions.send(s, { message: "go" }))
      yield* Deferred.await(reached)
      yield* TestClock.adjust(300)
      yield* pause(20)
      yield* Deferred.succeed(release, undefined)
      const out = yield* Fiber.join(sending)
      expect(invoked).toEqual([])
      expect((out.turn.result as ReadonlyArray<ToolResult>).map((r) => [r.call_id, r.outcome])).toEqual([["a", "timeout"]])
      const records = yield* Effect.orDie(journal.read(s, { after: 0, limit: 1000 }))
      const started = ofKind(records, "tool_call_started")[0]!
      expect(outcomeOf(records, started.sequence)!.payload).toMatchObject({ outcome: "timeout", failure: { code: "timeout" } })
      expect(outcomeOf(records, started.sequence)!.payload.failure.message).toMatch(/deadline of 300 ms passed before it was sent; the call was not sent/)
    }).pipe(Effect.provide(runtimeLayer({ loops, tools: { tool }, config: config({ maxToolMs: 300 }), journal: held })))
  })
})

describe("turns while busy", () => {
  it.scoped("a sync send (or a submit) while a turn runs is refused with session_busy and is never queued", () => {
    const g = gated()
    return withRuntime({ loops: { g: g.agentloop } }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "g", model: scripted })
        const first = yield* Effect.fork(sessions.send(s, { message: "first" }))
        yield* eventually("the first turn to run", Effect.sync(() => g.state.entered === 1))
        const busy = yield* Effect.flip(sessions.send(s, { message: "second" }))
        expect(busy.code).toBe("session_busy")
        expect(yield* refusal(sessions.submit(s, { message: "third" }))).toBe("session_busy")
        yield* g.open
        const out = yield* Fiber.join(first)
        expect(out.turn.result).toEqual({ echo: "first" })
        yield* pause(20)
        expect(g.state.entered).toBe(1)
        const all = yield* records(s)
        expect(ofKind(all, "turn_started").map((r) => r.payload.input.message)).toEqual(["first"])
      }))
  })

  it.scoped("submit returns the receipt of the durable turn_started while the turn goes on", () => {
    const g = gated()
    return withRuntime({ loops: { g: g.agentloop } }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "g", model: scripted })
        const receipt = yield* sessions.submit(s, { message: "later" })
        expect(receipt.session_id).toBe(s)
        const now = yield* records(s)
        const started = now.find((r) => r.sequence === receipt.sequence)!
        expect([started.kind, started.payload]).toEqual(["turn_started", { input: { message: "later" }, mode: "submit" }])
        expect(ofKind(now, "turn_ended")).toEqual([])
        expect((yield* sessions.get(s)).status).toBe("running")
        yield* g.open
        yield* eventually("the turn to end", Effect.map(records(s), (all) => ofKind(all, "turn_ended").length === 1))
        const ended = ofKind(yield* records(s), "turn_ended")[0]!
        expect(ended.payload).toEqual({ sequence: receipt.sequence, result: { echo: "later" } })
        expect((yield* sessions.get(s)).status).toBe("idle")
      }))
  })

  it.scoped("a caller interrupted while waiting on send does not cancel the turn: it completes and its turn_ended is journaled", () => {
    const g = gated()
    return withRuntime({ loops: { g: g.agentloop } }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "g", model: scripted })
        const caller = yield* Effect.fork(sessions.send(s, { message: "keep going" }))
        yield* eventually("the turn to run", Effect.sync(() => g.state.entered === 1))
        yield* Fiber.interrupt(caller)
        expect((yield* sessions.get(s)).status).toBe("running")
        yield* g.open
        yield* eventually("the turn to end", Effect.map(records(s), (all) => ofKind(all, "turn_ended").length === 1))
        const all = yield* records(s)
        const turn = ofKind(all, "turn_started")[0]!
        expect(ofKind(all, "turn_ended").map((r) => r.payload)).toEqual([{ sequence: turn.sequence, result: { echo: "keep going" } }])
        expect(ofKind(all, "turn_failed")).toEqual([])
        expect(ofKind(all, "kv_put").map((r) => r.payload)).toEqual([{ key: "last", value: "keep going" }])
      }))
  })
})

describe("lifecycle", () => {
  it.scoped("end waits for the running turn, then records session_end_started and session_ended; meanwhile sends and submits, keyed or not, are refused session_busy (retryable) and journal nothing; from the ending's record on they are refused session_ended", () => {
    const g = gated()
    const keyed = (key: string) => ({ key, hash: `hash of ${key}` })
    return withRuntime({ loops: { g: g.agentloop } }, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "g", model: scripted })
        yield* sessions.submit(s, { message: "work" })
        yield* eventually("the turn to run", Effect.sync(() => g.state.entered === 1))
        const ending = yield* Effect.fork(sessions.end(s))
        // A chance for the end to reach the session and wait for the turn (not an assertion: the
        // answers below are the same whether it has got there or not).
        yield* pause(20)
        expect(Option.isNone(yield* Fiber.poll(ending))).toBe(true)
        const before = yield* records(s)
        expect(ofKind(before, "session_end_started")).toEqual([])
        // Nothing of the ending is recorded yet: a crash now leaves the session idle, taking
        // messages. So each refusal is one a retry outgrows, never a definite session_ended.
        const refusals = [
          yield* Effect.flip(sessions.send(s, { message: "more" })),
          yield* Effect.flip(sessions.submit(s, { message: "more" })),
          yield* Effect.flip(sessions.sendKeyed(s, { message: "more" }, keyed("k-send"))),
          yield* Effect.flip(sessions.submitKeyed(s, { message: "more" }, keyed("k-submit")))
        ]
        expect(refusals.map((e) => [e.code, e.retryable])).toEqual(Array.from({ length: 4 }, () => ["session_busy", true]))
        expect((yield* records(s)).length).toBe(before.length)
        yield* g.open
        const summary = yield* Fiber.join(ending)
        expect(summary.status).toBe("ended")
        const all = yield* records(s)
        const turnEnded = ofKind(all, "turn_ended")[0]!
        const endStarted = ofKind(all, "session_end_started")[0]!
        const ended = ofKind(all, "session_ended")[0]!
        expect(turnEnded.sequence).toBeLessThan(endStarted.sequence)
        expect(endStarted.sequence).toBeLessThan(ended.sequence)
        expect(ended.payload).toEqual({ sequence: endStarted.sequence })
        expect(all[all.length - 1]).toEqual(ended)
        expect(ofKind(all, "turn_started")).toHaveLength(1)
        // The ending recorded, the same requests are refused for good.
        expect(yield* refusal(sessions.send(s, { message: "more" }))).toBe("session_ended")
        expect(yield* refusal(sessions.sendKeyed(s, { message: "more" }, keyed("k-send")))).toBe("session_ended")
        expect(yield* refusal(sessions.submitKeyed(s, { message: "more" }, keyed("k-submit")))).toBe("session_ended")
      }))
  })

  it.scoped("an end interrupted while it waits for the running turn holds nothing back: once the turn closes, the session takes messages again", () => {
    const g = gated()
    return withRuntime({ loops: { g: g.agentloop } }, ({ records, sessions }) =>
      Effect.gen(function*() {
        // Kept in memory between turns, so that what the end left on the session is what the next send meets.
        const { session_id: s } = yield* sessions.create({ agentloop: "g", model: scripted, idle_ttl_ms: 60_000 })
        yield* sessions.submit(s, { message: "work" })
        yield* eventually("the turn to run", Effect.sync(() => g.state.entered === 1))
        const ending = yield* Effect.fork(sessions.end(s))
        yield* pause(20)
        yield* Fiber.interrupt(ending)
        yield* g.open
        yield* eventually("the turn to end", Effect.map(records(s), (all) => ofKind(all, "turn_ended").length === 1))
        yield* eventually("the session to be idle", Effect.map(Effect.orDie(sessions.get(s)), (summary) => summary.status === "idle"))
        const next = yield* sessions.send(s, { message: "again" })
        expect(next.turn.status).toBe("ended")
        expect(ofKind(yield* records(s), "session_end_started")).toEqual([])
      }))
  })

  it.scoped("a cancel during an end's wait answers the session as recorded by its last_sequence (idle before the ending's record), and the end then records the ending", () =>
    withRuntime({}, ({ records, sessions }) =>
      Effect.gen(function*() {
        // Its model call held for ten minutes of the test clock, which never advances here.
        const { session_id: s } = yield* sessions.create({ model: { provider: "scripted", replies: [{ text: "slow", delay_ms: 600_000 }] } })
        yield* sessions.submit(s, { message: "work" })
        yield* eventually("the model call to start", Effect.map(records(s), (all) => ofKind(all, "model_call_started").length === 1))
        const ending = yield* Effect.fork(sessions.end(s))
        yield* pause(20)
        const cancelled = yield* sessions.interrupt(s)
        // The summary names no ending that was not recorded by its last_sequence (one a crash could
        // take back): idle before the end's session_end_started, then ending, then ended.
        const through = (yield* records(s)).filter((r) => r.sequence <= cancelled.last_sequence)
        const recorded = ofKind(through, "session_ended").length > 0 ? "ended" : ofKind(through, "session_end_started").length > 0 ? "ending" : "idle"
        expect(cancelled.status).toBe(recorded)
        const summary = yield* Fiber.join(ending)
        expect(summary.status).toBe("ended")
        expect(yield* refusal(sessions.send(s, { message: "more" }))).toBe("session_ended")
      })))

  it.scoped("a message to an ended session is refused with session_ended", () =>
    withRuntime({}, ({ records, sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ model: scripted })
        yield* sessions.send(s, { message: "hi" })
        yield* sessions.end(s)
        const before = (yield* records(s)).length
        expect(yield* refusal(sessions.send(s, { message: "again" }))).toBe("session_ended")
        expect(yield* refusal(sessions.submit(s, { message: "again" }))).toBe("session_ended")
        expect((yield* records(s)).length).toBe(before)
        expect((yield* sessions.get(s)).status).toBe("ended")
      })))

  it.scoped("delete is refused with conflict unless the session is ended or failed; after delete the session is not_found", () => {
    const g = gated()
    return withRuntime({ loops: { g: g.agentloop } }, ({ sessions }) =>
      Effect.gen(function*() {
        const { session_id: s } = yield* sessions.create({ agentloop: "g", model: scripted })
        expect(yield* refusal(sessions.delete(s))).toBe("conflict") // idle
        yield* sessions.submit(s, { message: "work" })
        yield* eventually("the turn to run", Effect.sync(() => g.state.entered === 1))
        expect(yield* refusal(sessions.delete(s))).toBe("conflict") // running
        yield* g.open
        yield* sessions.end(s)
        yield* sessions.delete(s)
        expect(yield* refusal(sessions.get(s))).toBe("not_found")
        expect(yield* refusal(sessions.send(s, { message: "hello?" }))).toBe("not_found")
        expect(yield* refusal(sessions.transcript(s))).toBe("not_found")
        expect(yield* refusal(sessions.events(s, { after: 0, limit: 10 }))).toBe("not_found")
        expect(yield* refusal(sessions.delete(s))).toBe("not_found")
        const listed = yield* sessions.list({ limit: 100 })
        expect(listed.sessions.map((x) => x.session_id)).not.toContain(s)
      }))
  })
})

})
}
