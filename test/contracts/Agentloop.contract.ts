/**
 * The Agentloop host contract: every host service's semantics, as a suite any implementation
 * must pass. The loops here are small test loops that exercise one host service each; the
 * assertions read what the journal and Sessions show, never the implementation's internals.
 * The WebAssembly host reruns this suite with the same loops behind the WebAssembly host.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, type Layer, Option, type Scope } from "effect"
import { failure, FailureCodes } from "../../src/domain/Failure.js"
import type { SessionId } from "../../src/domain/Ids.js"
import type { Message, ToolCallRequest } from "../../src/domain/Messages.js"
import type { ModelResult } from "../../src/domain/Model.js"
import { rebuildModelRequest } from "../../src/domain/ModelContext.js"
import type { Event } from "../../src/domain/Events.js"
import { EXTENSION_KIND, type JournalRecord, RecordKinds, TRANSCRIPT_REPLACED } from "../../src/domain/Records.js"
import * as ToolsInProcess from "../../src/layers/ToolsInProcess.js"
import {
  type ActivationInput,
  AgentloopFailed,
  type AgentloopShape,
  type Host,
  type HostCallFailed,
  type ToolResult
} from "../../src/services/Agentloop.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"
import type { ModelCall } from "../../src/services/Models.js"
import { Sessions, type SessionsShape } from "../../src/services/Sessions.js"
import type { RuntimeOptions } from "../support/runtime.js"

/** What a contract test asks of the runtime; the factory chooses the journal (and, later, the loop host). */
export type HostContractOptions = Omit<RuntimeOptions, "journal">
export type HostContractLayer = (options: HostContractOptions) => Layer.Layer<Sessions | Journal, unknown>

/** Lets loops and tool handlers read the journal of the runtime they run in. */
class Probe {
  journal: JournalShape | undefined = undefined
  records = (session: string): Effect.Effect<ReadonlyArray<JournalRecord>> =>
    Effect.suspend(() => this.journal!.read(session as SessionId, { after: 0, limit: 1_000_000 })).pipe(Effect.orDie)
  lastSequence = (session: string): Effect.Effect<number> =>
    Effect.suspend(() => this.journal!.lastSequence(session as SessionId)).pipe(Effect.orDie)
  last = (session: string): Effect.Effect<JournalRecord> => Effect.map(this.records(session), (rs) => rs[rs.length - 1]!)
}

interface Runtime {
  readonly sessions: SessionsShape
  readonly journal: JournalShape
  readonly records: (session: SessionId) => Effect.Effect<ReadonlyArray<JournalRecord>>
  readonly events: (session: SessionId) => Effect.Effect<ReadonlyArray<Event>>
}

const loop = (activate: AgentloopShape["activate"]): AgentloopShape => ({ activate })

const msg = (role: Message["role"], content: string): Message => ({ role, content })

/** The code a host call failed with, or "ok". */
const codeOf = <A>(call: Effect.Effect<A, HostCallFailed>) =>
  Effect.map(Effect.either(call), (e) => (Either.isLeft(e) ? e.left.failure.code : "ok"))

/** A turn's opening records, which a sync send's turn writes with its first write. */
const OPENING = new Set(["turn_started", "activation_started", "request_claimed"])

const ofKind = (records: ReadonlyArray<JournalRecord>, kind: string) => records.filter((r) => r.kind === kind)

/**
 * What a record weighs in the journal, as BRAIN_MAX_EMITTED_BYTES and BRAIN_MAX_TURN_WRITE_BYTES
 * count it (docs/operations.md): its frame (30 bytes), its record kind and its payload, as UTF-8.
 */
const recordBytes = (r: JournalRecord) => 30 + Buffer.byteLength(r.kind, "utf8") + Buffer.byteLength(JSON.stringify(r.payload), "utf8")

/** The record that closes the effect started at `sequence`. */
const outcomeOf = (records: ReadonlyArray<JournalRecord>, sequence: number) =>
  records.find((r) => (r.kind.endsWith("_ended") || r.kind.endsWith("_failed")) && r.payload?.sequence === sequence)

/** Polls (real time) until `check` holds; fails the test after about two seconds. */
const eventually = (what: string, check: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 400; i++) {
      if (yield* check) return
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
    }
    return yield* Effect.dieMessage(`timed out waiting for ${what}`)
  })

const scripted = (replies?: ReadonlyArray<{ text?: string; tool_calls?: ReadonlyArray<{ name: string; input: unknown }>; fail?: { code: string; message: string } }>) =>
  replies === undefined ? { provider: "scripted" as const } : { provider: "scripted" as const, replies }

export const agentloopHostContract = (name: string, layerFactory: HostContractLayer) =>
  describe(`Agentloop host contract: ${name}`, () => {
    const run = <A, E>(
      options: HostContractOptions,
      probe: Probe,
      body: (rt: Runtime) => Effect.Effect<A, E, Scope.Scope>
    ): Effect.Effect<A, unknown, Scope.Scope> =>
      Effect.gen(function*() {
        const sessions = yield* Sessions
        const journal = yield* Journal
        probe.journal = journal
        const records = (session: SessionId) => probe.records(session)
        const events = (session: SessionId) =>
          Effect.map(Effect.orDie(sessions.events(session, { after: 0, limit: 1000 })), (p) => p.events)
        return yield* body({ sessions, journal, records, events })
      }).pipe(Effect.provide(layerFactory(options)))

    // ---------------------------------------------------------------- set_transcript

    it.scopedLive("setTranscript of an append commits only the tail (keep = saved length), privately", () => {
      const probe = new Probe()
      const [u1, a1, u2, a2, u3] = [msg("user", "one"), msg("assistant", "two"), msg("user", "three"), msg("assistant", "four"), msg("user", "five")]
      let turn = 0
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            turn++
            if (turn === 1) {
              yield* host.setTranscript([u1])
              yield* host.setTranscript([u1, a1])
              yield* host.setTranscript([u1, a1, u2, a2])
            } else {
              yield* host.setTranscript([...input.transcript, u3])
            }
          }))
      }
      return run({ loops }, probe, ({ events, records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "go" })
          yield* sessions.send(s, { message: "again" })
          const deltas = ofKind(yield* records(s), "transcript_delta")
          expect(deltas.map((r) => r.payload)).toEqual([
            { keep: 0, append: [u1] },
            { keep: 1, append: [a1] },
            { keep: 2, append: [u2, a2] },
            { keep: 4, append: [u3] }
          ])
          const evs = yield* events(s)
          expect(evs.filter((e) => e.kind === TRANSCRIPT_REPLACED || e.kind === "transcript_delta")).toEqual([])
          expect(evs.map((e) => e.sequence)).not.toContain(deltas[0]!.sequence)
          const t = yield* sessions.transcript(s)
          expect(t).toEqual({ messages: [u1, a1, u2, a2, u3], through_sequence: deltas[3]!.sequence })
        }))
    })

    it.scopedLive("setTranscript of a rewrite restarts at the first changed item and is a public transcript_replaced Event at the same sequence", () => {
      const probe = new Probe()
      const [m1, m2, m3, x, summary, m4] = [
        msg("user", "m1"),
        msg("assistant", "m2"),
        msg("user", "m3"),
        msg("assistant", "edited"),
        msg("system", "summary of m1..m3"),
        msg("user", "m4")
      ]
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            yield* host.setTranscript([m1, m2, m3]) // append
            yield* host.setTranscript([m1, x, m3]) // edit
            yield* host.setTranscript([m1, m3, x]) // reorder
            yield* host.setTranscript([summary]) // summary
            yield* host.setTranscript([summary, m4]) // append again
          }))
      }
      return run({ loops }, probe, ({ events, records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "go" })
          const deltas = ofKind(yield* records(s), "transcript_delta")
          expect(deltas.map((r) => r.payload)).toEqual([
            { keep: 0, append: [m1, m2, m3] },
            { keep: 1, append: [x, m3] },
            { keep: 1, append: [m3, x] },
            { keep: 0, append: [summary] },
            { keep: 1, append: [m4] }
          ])
          const replaced = (yield* events(s)).filter((e) => e.kind === TRANSCRIPT_REPLACED)
          expect(replaced.map((e) => [e.sequence, e.data])).toEqual(
            [deltas[1]!, deltas[2]!, deltas[3]!].map((d) => [d.sequence, d.payload])
          )
          expect(replaced.every((e) => e.session_id === s && e.origin === undefined)).toBe(true)
          expect((yield* sessions.transcript(s)).messages).toEqual([summary, m4])
        }))
    })

    it.scopedLive("setTranscript with the saved transcript writes nothing", () => {
      const probe = new Probe()
      const seen: Array<readonly [number, number]> = []
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const s = input.runtime.session_id
            const next = [...input.transcript, msg("user", input.input!.message)]
            yield* host.setTranscript(next)
            const before = yield* probe.lastSequence(s)
            yield* host.setTranscript(next.map((m) => ({ ...m }))) // equal content, new objects
            yield* host.setTranscript(next)
            seen.push([before, yield* probe.lastSequence(s)])
          }))
      }
      return run({ loops }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "one" })
          yield* sessions.send(s, { message: "two" })
          expect(seen.length).toBe(2)
          for (const [before, after] of seen) expect(after).toBe(before)
          expect(ofKind(yield* records(s), "transcript_delta").length).toBe(2)
        }))
    })

    // ---------------------------------------------------------------- kv

    it.scopedLive("kvPut and kvDelete are durable before they return and survive a turn that then fails", () => {
      const probe = new Probe()
      const observed: Array<JournalRecord> = []
      const reads: Array<[Option.Option<unknown>, Option.Option<unknown>]> = []
      let turn = 0
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const s = input.runtime.session_id
            turn++
            if (turn === 1) {
              yield* host.kvPut("a", { n: 1 })
              observed.push(yield* probe.last(s))
              yield* host.kvPut("b", [2])
              observed.push(yield* probe.last(s))
              yield* host.kvDelete("a")
              observed.push(yield* probe.last(s))
              return yield* Effect.fail(new AgentloopFailed({ failure: failure("agentloop_failed", "the loop gives up") }))
            }
            reads.push([yield* host.kvRead("a"), yield* host.kvRead("b")])
          }))
      }
      return run({ loops }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          const first = yield* sessions.send(s, { message: "one" })
          expect(first.turn.status).toBe("failed")
          expect(first.turn.failure?.code).toBe("agentloop_failed")
          expect(observed.map((r) => [r.kind, r.payload])).toEqual([
            ["kv_put", { key: "a", value: { n: 1 } }],
            ["kv_put", { key: "b", value: [2] }],
            ["kv_delete", { key: "a" }]
          ])
          const all = yield* records(s)
          const failedAt = ofKind(all, "turn_failed")[0]!.sequence
          for (const r of observed) {
            expect(all.find((x) => x.sequence === r.sequence)).toEqual(r)
            expect(r.sequence).toBeLessThan(failedAt)
          }
          const second = yield* sessions.send(s, { message: "two" })
          expect(second.turn.status).toBe("ended")
          expect(reads).toEqual([[Option.none(), Option.some([2])]])
        }))
    })

    it.scopedLive("kvRead distinguishes a missing key (none) from a stored JSON null (some(null))", () => {
      const probe = new Probe()
      const reads: Array<Record<string, Option.Option<unknown>>> = []
      let turn = 0
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            turn++
            if (turn === 1) {
              yield* host.kvPut("nul", null)
              yield* host.kvPut("gone", null)
              yield* host.kvDelete("gone")
            }
            reads.push({
              nul: yield* host.kvRead("nul"),
              gone: yield* host.kvRead("gone"),
              never: yield* host.kvRead("never")
            })
          }))
      }
      return run({ loops }, probe, ({ sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "one" })
          yield* sessions.send(s, { message: "two" }) // a fresh activation reads the saved state
          const expected = { nul: Option.some(null), gone: Option.none(), never: Option.none() }
          expect(reads).toEqual([expected, expected])
        }))
    })

    it.scopedLive("a turn's return value never overwrites kv or the transcript", () => {
      const probe = new Probe()
      const reads: Array<Option.Option<unknown>> = []
      const saved = [msg("user", "kept"), msg("assistant", "also kept")]
      const returned = { transcript: [], messages: [], kv: { k: "overwritten" }, state: { k: "overwritten" } }
      let turn = 0
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            turn++
            if (turn === 1) {
              yield* host.setTranscript(saved)
              yield* host.kvPut("k", "saved")
              return returned
            }
            reads.push(yield* host.kvRead("k"))
            return null
          }))
      }
      return run({ loops }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          const out = yield* sessions.send(s, { message: "one" })
          expect(out.turn).toEqual({ sequence: out.turn.sequence, status: "ended", result: returned })
          const all = yield* records(s)
          const ended = ofKind(all, "activation_ended")[0]!.sequence
          const lastWrite = Math.max(...all.filter((r) => r.kind === "kv_put" || r.kind === "transcript_delta").map((r) => r.sequence))
          expect(lastWrite).toBeLessThan(ended)
          expect((yield* sessions.transcript(s)).messages).toEqual(saved)
          yield* sessions.send(s, { message: "two" })
          expect(reads).toEqual([Option.some("saved")])
          expect((yield* sessions.transcript(s)).messages).toEqual(saved)
        }))
    })

    // ---------------------------------------------------------------- model

    it.scopedLive("model_call_started records message_count and context {through_sequence, delta} against the saved transcript; model_call_ended holds the complete result", () => {
      const probe = new Probe()
      const [u1, a1, u2, aux] = [msg("user", "u1"), msg("assistant", "a1"), msg("user", "u2"), msg("system", "an auxiliary context")]
      const results: Array<ModelResult> = []
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            yield* host.setTranscript([u1, a1])
            results.push(yield* host.model({ messages: [u1, a1, u2] }))
            results.push(yield* host.model({ messages: [aux] }))
          }))
      }
      const model = scripted([{ text: "let me look", tool_calls: [{ name: "lookup", input: { q: [1, "two", null] } }] }, { text: "short" }])
      return run({ loops }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model, tools: [{ name: "lookup" }] })
          yield* sessions.send(s, { message: "go" })
          const all = yield* records(s)
          const delta = ofKind(all, "transcript_delta")[0]!
          const started = ofKind(all, "model_call_started")
          expect(started.map((r) => r.payload)).toEqual([
            { message_count: 3, context: { through_sequence: delta.sequence, delta: { keep: 2, append: [u2] } } },
            { message_count: 1, context: { through_sequence: delta.sequence, delta: { keep: 0, append: [aux] } } }
          ])
          expect(results.length).toBe(2)
          expect(results[0]!.tool_calls).toEqual([{ id: expect.any(String), name: "lookup", input: { q: [1, "two", null] } }])
          for (const [i, st] of started.entries()) {
            const ended = outcomeOf(all, st.sequence)!
            expect(ended.kind).toBe("model_call_ended")
            expect(ended.payload).toEqual({ sequence: st.sequence, result: results[i] })
          }
          // Model calls never change the saved transcript.
          expect((yield* sessions.transcript(s)).messages).toEqual([u1, a1])
        }))
    })

    it.scopedLive("the journal alone rebuilds the exact request of every model call of multi-call official turns with tools (rebuildModelRequest)", () => {
      const probe = new Probe()
      const calls: Array<ModelCall> = []
      const model = scripted([
        { text: "checking", tool_calls: [{ name: "lookup", input: { q: "a" } }, { name: "broken", input: {} }] },
        { tool_calls: [{ name: "lookup", input: { q: "b" } }] },
        { text: "final" }
      ])
      const tools = {
        lookup: ToolsInProcess.succeedAfter(1, (input) => ({ found: input })),
        broken: ToolsInProcess.failWith({ reason: "nope" })
      }
      return run({ tools, onModelCall: (c) => void calls.push(c) }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({
            model,
            system: "be brief",
            tools: [{ name: "lookup", description: "looks things up" }, { name: "broken" }],
            transcript: [msg("user", "earlier"), msg("assistant", "noted")]
          })
          const first = yield* sessions.send(s, { message: "go" })
          expect(first.turn).toMatchObject({ result: { text: "final" } })
          yield* sessions.send(s, { message: "again" })
          const all = yield* records(s)
          const started = ofKind(all, "model_call_started")
          expect(started.length).toBe(6)
          expect(calls.map((c) => c.sequence)).toEqual(started.map((r) => r.sequence))
          for (const [i, st] of started.entries()) {
            expect(rebuildModelRequest(all, st.sequence)).toEqual(calls[i]!.request)
            // from the journal up to the call alone, too
            expect(rebuildModelRequest(all.filter((r) => r.sequence <= st.sequence), st.sequence)).toEqual(calls[i]!.request)
          }
        }))
    })

    it.scopedLive("the journal alone rebuilds the exact request of model calls with auxiliary contexts and a per-call system prompt", () => {
      const probe = new Probe()
      const calls: Array<ModelCall> = []
      const [u1, a1, u2, note] = [msg("user", "u1"), msg("assistant", "a1"), msg("user", "u2"), msg("system", "summary so far")]
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            yield* host.setTranscript([u1])
            yield* host.model({ messages: [u1] })
            yield* host.model({ messages: [note, u1], system: "you summarize" })
            yield* host.setTranscript([u1, a1])
            yield* host.model({ messages: [u1, a1, u2] })
            yield* host.model({ messages: [] })
            yield* host.setTranscript([note])
            yield* host.model({ messages: [note, u2] })
          }))
      }
      return run({ loops, onModelCall: (c) => void calls.push(c) }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted(), system: "default system" })
          yield* sessions.send(s, { message: "go" })
          const all = yield* records(s)
          const started = ofKind(all, "model_call_started")
          expect(started.length).toBe(5)
          expect(calls[1]!.request.system).toBe("you summarize")
          for (const [i, st] of started.entries()) {
            expect(rebuildModelRequest(all, st.sequence)).toEqual(calls[i]!.request)
          }
        }))
    })

    it.scopedLive("the journal alone rebuilds the exact request of a model call with request options (and a per-call system)", () => {
      const probe = new Probe()
      const calls: Array<ModelCall> = []
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            yield* host.model({ messages: [msg("user", "u1")], options: { temperature: 0 } })
            yield* host.model({ messages: [msg("user", "u1")], system: "per call", options: { temperature: 1 } })
            // A provider option that happens to be named `system` is not a system prompt.
            yield* host.model({ messages: [msg("user", "u1")], options: { system: "a provider option" } })
          }))
      }
      return run({ loops, onModelCall: (c) => void calls.push(c) }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted(), system: "default system" })
          yield* sessions.send(s, { message: "go" })
          const all = yield* records(s)
          const started = ofKind(all, "model_call_started")
          expect(started.length).toBe(3)
          expect(calls.map((c) => [c.request.system, c.request.options])).toEqual([
            ["default system", { temperature: 0 }],
            ["per call", { temperature: 1 }],
            ["default system", { system: "a provider option" }]
          ])
          for (const [i, st] of started.entries()) {
            expect(rebuildModelRequest(all, st.sequence)).toEqual(calls[i]!.request)
          }
        }))
    })

    // ---------------------------------------------------------------- BRAIN_MAX_MODEL_CALLS

    it.scopedLive("BRAIN_MAX_MODEL_CALLS: the call past the limit fails with model_call_limit and nothing is journaled for it", () => {
      const probe = new Probe()
      const seen: Array<{ code: string; before: number; after: number }> = []
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const s = input.runtime.session_id
            yield* host.model({ messages: [msg("user", "1")] })
            yield* host.model({ messages: [msg("user", "2")] })
            const before = yield* probe.lastSequence(s)
            const code = yield* codeOf(host.model({ messages: [msg("user", "3")] }))
            seen.push({ code, before, after: yield* probe.lastSequence(s) })
            // An unhandled refusal fails the turn with the same code.
            yield* host.model({ messages: [msg("user", "4")] })
          }))
      }
      let modelCalls = 0
      return run({ loops, config: { maxModelCalls: 2 }, onModelCall: () => void modelCalls++ }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          const out = yield* sessions.send(s, { message: "go" })
          expect(seen).toEqual([{ code: "model_call_limit", before: seen[0]!.before, after: seen[0]!.before }])
          expect(out.turn.status).toBe("failed")
          expect(out.turn.failure?.code).toBe("model_call_limit")
          expect(modelCalls).toBe(2)
          const all = yield* records(s)
          expect(ofKind(all, "model_call_started").length).toBe(2)
          expect(ofKind(all, "model_call_failed")).toEqual([])
        }))
    })

    // ---------------------------------------------------------------- BRAIN_MAX_TOOL_CALLS_PER_DISPATCH

    it.scopedLive("BRAIN_MAX_TOOL_CALLS_PER_DISPATCH: a dispatch of more calls is refused whole with tool_call_limit, nothing of it journaled or run; one at the bound runs", () => {
      const probe = new Probe()
      const seen: Array<{ code: string; written: number }> = []
      let ran = 0
      const tools = { echo: ((input: unknown) => Effect.sync(() => (ran++, { outcome: "ok", output: input } as const))) satisfies ToolsInProcess.ToolHandler }
      const calls = (n: number): Array<ToolCallRequest> => Array.from({ length: n }, (_, i) => ({ id: `c${i}`, name: "echo", input: { i } }))
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const s = input.runtime.session_id
            const before = yield* probe.lastSequence(s)
            const code = yield* codeOf(host.dispatch(calls(3)))
            // A sync send's opening may be written meanwhile (a staged opening's flush after
            // BRAIN_STAGED_OPENING_MS, on a loaded machine): not the dispatch's own.
            const written = (yield* probe.records(s)).filter((r) => r.sequence > before && !OPENING.has(r.kind))
            seen.push({ code, written: written.length })
            expect((yield* host.dispatch(calls(2))).map((r) => r.outcome)).toEqual(["ok", "ok"])
            // An unhandled refusal fails the turn with the same code.
            yield* host.dispatch(calls(3))
          }))
      }
      return run({ loops, tools, config: { maxToolCallsPerDispatch: 2 } }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted(), tools: [{ name: "echo" }] })
          const out = yield* sessions.send(s, { message: "go" })
          expect(seen).toEqual([{ code: "tool_call_limit", written: 0 }])
          expect(out.turn.status).toBe("failed")
          expect(out.turn.failure?.code).toBe("tool_call_limit")
          expect(ran).toBe(2)
          const all = yield* records(s)
          expect(ofKind(all, "tool_call_started").map((r) => r.payload.call_id)).toEqual(["c0", "c1"])
        }))
    })

    it.scopedLive("BRAIN_MAX_MODEL_CALLS is per turn: the next turn can call the model again", () => {
      const probe = new Probe()
      const codes: Array<Array<string>> = []
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            const turn: Array<string> = []
            for (let i = 0; i < 3; i++) turn.push(yield* codeOf(host.model({ messages: [msg("user", `${i}`)] })))
            codes.push(turn)
          }))
      }
      return run({ loops, config: { maxModelCalls: 2 } }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "one" })
          yield* sessions.send(s, { message: "two" })
          expect(codes).toEqual([["ok", "ok", "model_call_limit"], ["ok", "ok", "model_call_limit"]])
          expect(ofKind(yield* records(s), "model_call_started").length).toBe(4)
        }))
    })

    it.scopedLive("BRAIN_MAX_MODEL_CALLS = 0 means no bound", () => {
      const probe = new Probe()
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            for (let i = 0; i < 20; i++) yield* host.model({ messages: [msg("user", `${i}`)] })
          }))
      }
      return run({ loops, config: { maxModelCalls: 0 } }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          const out = yield* sessions.send(s, { message: "go" })
          expect(out.turn.status).toBe("ended")
          expect(ofKind(yield* records(s), "model_call_ended").length).toBe(20)
        }))
    })

    // ---------------------------------------------------------------- emit

    it.scopedLive("emit: an extension Event gets origin {agentloop, activation_started} and payload fields cannot change it", () => {
      const probe = new Probe()
      const emitted: Array<number> = []
      let activation = 0
      const forged = { origin: { kind: "tool", sequence: 1 }, step: 1 }
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            activation = input.runtime.activation
            emitted.push(yield* host.emit("progress", forged))
            emitted.push(yield* host.emit("progress", { origin: null, session_id: "ses_forged", sequence: 1, kind: "turn_ended" }))
          }))
      }
      return run({ loops }, probe, ({ events, records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "go" })
          const all = yield* records(s)
          const activationStarted = ofKind(all, "activation_started")[0]!
          expect(activation).toBe(activationStarted.sequence)
          const origin = { kind: "agentloop", sequence: activationStarted.sequence }
          const extension = ofKind(all, EXTENSION_KIND)
          expect(extension.map((r) => r.sequence)).toEqual(emitted)
          expect(extension.map((r) => r.payload.origin)).toEqual([origin, origin])
          const evs = (yield* events(s)).filter((e) => emitted.includes(e.sequence))
          expect(evs).toEqual([
            { session_id: s, sequence: emitted[0], recorded_at_ms: expect.any(Number), kind: "progress", data: forged, origin },
            {
              session_id: s,
              sequence: emitted[1],
              recorded_at_ms: expect.any(Number),
              kind: "progress",
              data: { origin: null, session_id: "ses_forged", sequence: 1, kind: "turn_ended" },
              origin
            }
          ])
        }))
    })

    it.scopedLive("emit refuses every reserved kind (catalogue kinds, public failure codes, transcript_replaced, extension) with reserved_kind and writes nothing", () => {
      const probe = new Probe()
      const reserved = [...new Set([...RecordKinds, ...FailureCodes, TRANSCRIPT_REPLACED, EXTENSION_KIND])]
      const outcomes: Array<[string, string]> = []
      let unchanged = false
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const s = input.runtime.session_id
            // An allowed kind first: its write carries the turn's opening with it, so nothing the
            // server writes on its own (a staged opening's flush after BRAIN_STAGED_OPENING_MS)
            // can land between the two counts below.
            outcomes.push(["allowed", yield* codeOf(host.emit("allowed", {}))])
            const before = yield* probe.lastSequence(s)
            for (const kind of reserved) outcomes.push([kind, yield* codeOf(host.emit(kind, { x: 1 }))])
            unchanged = (yield* probe.lastSequence(s)) === before
          }))
      }
      return run({ loops }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          const out = yield* sessions.send(s, { message: "go" })
          expect(out.turn.status).toBe("ended")
          expect(reserved).toContain("turn_started")
          expect(reserved).toContain("kv_put")
          expect(reserved).toContain("cancelled")
          expect(reserved).toContain("agentloop_failed")
          expect(outcomes).toEqual([["allowed", "ok"], ...reserved.map((k) => [k, "reserved_kind"])])
          expect(unchanged).toBe(true)
          expect(ofKind(yield* records(s), EXTENSION_KIND).map((r) => r.payload.kind)).toEqual(["allowed"])
        }))
    })

    it.scopedLive("emit refuses a kind holding a line break (LF, CR or both) with reserved_kind and writes nothing, so every Event's SSE frame carries its event: line", () => {
      const probe = new Probe()
      const broken = ["two\nlines", "two\rlines", "two\r\nlines", "\n", "progress\nid: 99\nevent: session_ended"]
      const outcomes: Array<[string, string]> = []
      let unchanged = false
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const s = input.runtime.session_id
            outcomes.push(["allowed", yield* codeOf(host.emit("two lines", {}))])
            const before = yield* probe.lastSequence(s)
            for (const kind of broken) outcomes.push([kind, yield* codeOf(host.emit(kind, { x: 1 }))])
            unchanged = (yield* probe.lastSequence(s)) === before
          }))
      }
      return run({ loops }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          const out = yield* sessions.send(s, { message: "go" })
          expect(out.turn.status).toBe("ended")
          expect(outcomes).toEqual([["allowed", "ok"], ...broken.map((k) => [k, "reserved_kind"])])
          expect(unchanged).toBe(true)
          expect(ofKind(yield* records(s), EXTENSION_KIND).map((r) => r.payload.kind)).toEqual(["two lines"])
        }))
    })

    it.scopedLive("BRAIN_MAX_EMITTED_BYTES bounds each turn's Events by the bytes of their journal records (kind, payload and origin as JSON, the record kind and the frame); a refused emit writes nothing", () => {
      const probe = new Probe()
      const log: Array<Array<[string, string, number]>> = []
      const limit = 400
      let turn = 0
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const s = input.runtime.session_id
            turn++
            const entries: Array<[string, string, number]> = []
            const attempt = (label: string, kind: string, payload: unknown) =>
              Effect.gen(function*() {
                const before = yield* probe.lastSequence(s)
                const code = yield* codeOf(host.emit(kind, payload))
                // A sync send's opening is written with the turn's first write: not the emit's own.
                const written = (yield* probe.records(s)).filter((r) => r.sequence > before && !OPENING.has(r.kind))
                entries.push([label, code, written.length])
              })
            // About 170 bytes of the 400.
            yield* attempt("first", "a", "x".repeat(60))
            if (turn === 1) {
              // Its kind and payload (174 bytes) would fit in what is left; its record (about 280) does not.
              yield* attempt("long kind", "k".repeat(150), "y".repeat(20))
              // About 130 bytes.
              yield* attempt("fits", "c", "z".repeat(20))
              // Its kind and payload are 25 bytes, its record about 130: about 100 are left.
              yield* attempt("over", "d", "w".repeat(20))
            }
            log.push(entries)
          }))
      }
      return run({ loops, config: { maxEmittedBytes: limit } }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "one" })
          yield* sessions.send(s, { message: "two" }) // the budget is per turn
          expect(log).toEqual([
            [
              ["first", "ok", 1],
              ["long kind", "emitted_bytes_limit", 0],
              ["fits", "ok", 1],
              ["over", "emitted_bytes_limit", 0]
            ],
            [["first", "ok", 1]]
          ])
          const extension = ofKind(yield* records(s), EXTENSION_KIND)
          expect(extension.map((r) => r.payload.kind)).toEqual(["a", "c", "a"])
          // What is counted is what the journal holds: the two Events of the first turn within the bound ...
          expect(recordBytes(extension[0]!) + recordBytes(extension[1]!)).toBeLessThanOrEqual(limit)
          // ... and the refused "over" would have passed it by its record, not by its kind and payload.
          const kindAndPayload = Buffer.byteLength(JSON.stringify("d") + JSON.stringify("w".repeat(20)), "utf8")
          expect(recordBytes(extension[0]!) + recordBytes(extension[1]!) + kindAndPayload).toBeLessThanOrEqual(limit)
        }))
    })

    it.scopedLive("BRAIN_MAX_TURN_WRITE_BYTES bounds the journal bytes a turn's host calls write: past it a kv change, a transcript save (riding on a call or at the end too), an Event, a model or tool call is refused turn_write_limit with nothing written; the next turn has the whole bound", () => {
      const probe = new Probe()
      const log: Array<Array<[string, string, number]>> = []
      const limit = 8000
      const big = "x".repeat(3000)
      let turn = 0
      let modelCalls = 0
      let toolCalls = 0
      const tools = {
        echo: ((input) => Effect.sync(() => (toolCalls++, { outcome: "ok", output: input } as const))) satisfies ToolsInProcess.ToolHandler
      }
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const s = input.runtime.session_id
            turn++
            const entries: Array<[string, string, number]> = []
            const attempt = <A>(label: string, call: Effect.Effect<A, HostCallFailed>) =>
              Effect.gen(function*() {
                const before = yield* probe.lastSequence(s)
                const code = yield* codeOf(call)
                const written = (yield* probe.records(s)).filter((r) => r.sequence > before && !OPENING.has(r.kind))
                entries.push([label, code, written.length])
              })
            // About 3,060 bytes each: 6,120 of the 8,000.
            yield* attempt("put a", host.kvPut("a", big))
            yield* attempt("put b", host.kvPut("b", big))
            if (turn === 1) {
              // Each of these writes more than the 1,880 bytes left.
              yield* attempt("put c", host.kvPut("c", big))
              yield* attempt("delete", host.kvDelete("k".repeat(3000)))
              yield* attempt("save", host.setTranscript([msg("user", big)]))
              yield* attempt("emit", host.emit("note", { big }))
              yield* attempt("model", host.model({ messages: [msg("user", big)] }))
              yield* attempt("a save riding on a model call", host.model({ messages: [msg("user", "hi")] }, [msg("user", big)]))
              yield* attempt("dispatch", host.dispatch([{ id: "c1", name: "echo", input: { big } }]))
              yield* attempt("a save riding on a dispatch", host.dispatch([{ id: "c2", name: "echo", input: {} }], [msg("user", big)]))
              // About 60 bytes: it fits.
              yield* attempt("small put", host.kvPut("d", 1))
              yield* attempt("save at the end", host.setTranscriptAtEnd([msg("user", big)]))
            }
            log.push(entries)
          }))
      }
      return run({ loops, tools, config: { maxTurnWriteBytes: limit }, onModelCall: () => void modelCalls++ }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted(), tools: [{ name: "echo" }] })
          const first = yield* sessions.send(s, { message: "one" })
          expect(first.turn.status).toBe("ended")
          const second = yield* sessions.send(s, { message: "two" }) // the bound is per turn
          expect(second.turn.status).toBe("ended")
          const refused = (label: string): [string, string, number] => [label, "turn_write_limit", 0]
          expect(log).toEqual([
            [
              ["put a", "ok", 1],
              ["put b", "ok", 1],
              refused("put c"),
              refused("delete"),
              refused("save"),
              refused("emit"),
              refused("model"),
              refused("a save riding on a model call"),
              refused("dispatch"),
              refused("a save riding on a dispatch"),
              ["small put", "ok", 1],
              refused("save at the end")
            ],
            [["put a", "ok", 1], ["put b", "ok", 1]]
          ])
          // Nothing was sent for a refused call.
          expect([modelCalls, toolCalls]).toEqual([0, 0])
          const all = yield* records(s)
          const firstTurn = all.filter((r) => r.sequence > first.turn.sequence && r.sequence < second.turn.sequence)
          expect(firstTurn.filter((r) => r.kind === "transcript_delta" || r.kind === EXTENSION_KIND || r.kind.startsWith("model_call") || r.kind.startsWith("tool_call"))).toEqual([])
          const written = firstTurn.filter((r) => r.kind === "kv_put")
          expect(written.map((r) => r.payload.key)).toEqual(["a", "b", "d"])
          expect(written.reduce((n, r) => n + recordBytes(r), 0)).toBeLessThanOrEqual(limit)
        }))
    })

    it.scopedLive("a model or tool call's outcome is always recorded whole and counted against BRAIN_MAX_TURN_WRITE_BYTES: the writes after it are refused turn_write_limit", () => {
      const probe = new Probe()
      const limit = 4000
      const codes: Array<Array<string>> = []
      let turn = 0
      const tools = {
        large: (() => Effect.succeed({ outcome: "ok", output: "y".repeat(6000) } as const)) satisfies ToolsInProcess.ToolHandler
      }
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            turn++
            const answered = turn === 1
              ? codeOf(Effect.map(host.dispatch([{ id: "c1", name: "large", input: {} }]), (rs) => expect(rs[0]!.output).toBe("y".repeat(6000))))
              : codeOf(Effect.map(host.model({ messages: [msg("user", "hi")] }), (r) => expect(r.text).toBe("z".repeat(6000))))
            codes.push([yield* answered, yield* codeOf(host.kvPut("k", 1))])
          }))
      }
      return run({ loops, tools, config: { maxTurnWriteBytes: limit } }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted([{ text: "z".repeat(6000) }]), tools: [{ name: "large" }] })
          yield* sessions.send(s, { message: "one" })
          yield* sessions.send(s, { message: "two" })
          expect(codes).toEqual([["ok", "turn_write_limit"], ["ok", "turn_write_limit"]])
          const all = yield* records(s)
          expect(ofKind(all, "tool_call_ended").map((r) => r.payload.output)).toEqual(["y".repeat(6000)])
          expect(ofKind(all, "model_call_ended").map((r) => r.payload.result.text)).toEqual(["z".repeat(6000)])
          expect(ofKind(all, "kv_put")).toEqual([])
        }))
    })

    // ---------------------------------------------------------------- events

    it.scopedLive("the events host call returns public Events (never private records), paged by after and limit", () => {
      const probe = new Probe()
      let got: ReadonlyArray<Event> = []
      let page: ReadonlyArray<Event> = []
      let through = 0
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            yield* host.setTranscript([msg("user", "a"), msg("assistant", "b")]) // private append
            yield* host.setTranscript([msg("user", "replaced")]) // public transcript_replaced
            yield* host.kvPut("k", 1)
            yield* host.kvDelete("k")
            yield* host.emit("note", { a: 1 })
            through = yield* probe.lastSequence(input.runtime.session_id)
            got = yield* host.events({ after: 0, limit: 1000 })
            page = yield* host.events({ after: got[1]!.sequence, limit: 2 })
          }))
      }
      return run({ loops }, probe, ({ events, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "go" })
          const kinds = got.map((e) => e.kind)
          for (const k of ["transcript_delta", "kv_put", "kv_delete", EXTENSION_KIND]) expect(kinds).not.toContain(k)
          expect(kinds).toContain(TRANSCRIPT_REPLACED)
          expect(kinds).toContain("note")
          expect(got).toEqual((yield* events(s)).filter((e) => e.sequence <= through))
          expect(page).toEqual(got.slice(2, 4))
        }))
    })

    it.scopedLive("an activation's input events are the public Events from the previous activation's start on", () => {
      const probe = new Probe()
      const inputs: Array<ActivationInput> = []
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            inputs.push(input)
            yield* host.emit("note", { turn: inputs.length })
            yield* host.setTranscript([...input.transcript, msg("user", input.input!.message)])
          }))
      }
      return run({ loops }, probe, ({ events, records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "one" })
          yield* sessions.send(s, { message: "two" })
          const all = yield* records(s)
          const evs = yield* events(s)
          const activations = ofKind(all, "activation_started").map((r) => r.sequence)
          const closed = ofKind(all, "activation_ended").map((r) => r.sequence)
          expect(inputs.length).toBe(2)
          expect(inputs[0]!.events).toEqual(evs.filter((e) => e.sequence <= activations[0]!))
          expect(closed.length).toBe(2)
          expect(inputs[1]!.events).toEqual(evs.filter((e) => e.sequence >= activations[0]! && e.sequence <= activations[1]!))
          expect(inputs[1]!.events.map((e) => e.kind)).toEqual([
            "activation_started",
            "note",
            "activation_ended",
            "turn_ended",
            "turn_started",
            "activation_started"
          ])
          expect(inputs[1]!.transcript).toEqual([msg("user", "one")])
        }))
    })

    it.scopedLive("a loop that takes its Events from its predecessor's end is given them from the previous activation_ended or activation_failed on", () => {
      const probe = new Probe()
      const inputs: Array<ActivationInput> = []
      const loops = {
        t: {
          eventsFromEnd: true,
          activate: (input: ActivationInput, host: Host) =>
            Effect.gen(function*() {
              inputs.push(input)
              yield* host.emit("note", { turn: inputs.length })
              if (input.input!.message === "fail") return yield* Effect.fail(new AgentloopFailed({ failure: failure("agentloop_failed", "asked to fail") }))
            })
        } satisfies AgentloopShape
      }
      return run({ loops }, probe, ({ events, records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "one" })
          yield* Effect.either(sessions.send(s, { message: "fail" }))
          yield* sessions.send(s, { message: "three" })
          const all = yield* records(s)
          const evs = yield* events(s)
          const starts = ofKind(all, "activation_started").map((r) => r.sequence)
          const ended = ofKind(all, "activation_ended").map((r) => r.sequence)
          const failedAt = ofKind(all, "activation_failed").map((r) => r.sequence)
          expect(inputs.length).toBe(3)
          // The first activation has no predecessor: everything since the session began.
          expect(inputs[0]!.events).toEqual(evs.filter((e) => e.sequence <= starts[0]!))
          expect(inputs[1]!.events).toEqual(evs.filter((e) => e.sequence >= ended[0]! && e.sequence <= starts[1]!))
          expect(inputs[1]!.events.map((e) => e.kind)).toEqual(["activation_ended", "turn_ended", "turn_started", "activation_started"])
          expect(inputs[2]!.events).toEqual(evs.filter((e) => e.sequence >= failedAt[0]! && e.sequence <= starts[2]!))
          expect(inputs[2]!.events.map((e) => e.kind)).toEqual(["activation_failed", "turn_failed", "turn_started", "activation_started"])
          expect(inputs[2]!.events[1]!.data).toMatchObject({ failure: { code: "agentloop_failed", message: "asked to fail" } })
        }))
    })

    it.scopedLive("a loop that names the kinds of Event it reads is given only those, from the same range as without them; the events host call still reads every kind", () => {
      const probe = new Probe()
      const inputs: Array<ActivationInput> = []
      const read: Array<ReadonlyArray<string>> = []
      const loops = {
        t: {
          eventsFromEnd: true,
          eventKinds: new Set(["turn_failed", "note"]),
          activate: (input: ActivationInput, host: Host) =>
            Effect.gen(function*() {
              inputs.push(input)
              read.push((yield* host.events({ after: 0, limit: 1000 })).map((e) => e.kind))
              yield* host.emit("note", { turn: inputs.length })
              if (input.input!.message === "fail") return yield* Effect.fail(new AgentloopFailed({ failure: failure("agentloop_failed", "asked to fail") }))
            })
        } satisfies AgentloopShape
      }
      return run({ loops }, probe, ({ events, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted() })
          yield* sessions.send(s, { message: "one" })
          yield* Effect.either(sessions.send(s, { message: "fail" }))
          yield* sessions.send(s, { message: "three" })
          const evs = yield* events(s)
          expect(inputs.length).toBe(3)
          // The previous activation's own note is before its end: outside the range.
          expect(inputs.map((i) => i.events.map((e) => e.kind))).toEqual([[], [], ["turn_failed"]])
          expect(inputs[2]!.events).toEqual(evs.filter((e) => e.kind === "turn_failed"))
          expect(read[2]).toContain("activation_started")
          expect(read[2]).toContain("note")
        }))
    })

    // ---------------------------------------------------------------- dispatch

    it.scopedLive("dispatch returns results in call order even when later calls finish first", () => {
      const probe = new Probe()
      let results: ReadonlyArray<ToolResult> = []
      const calls: Array<ToolCallRequest> = [
        { id: "c1", name: "slow", input: { n: 1 } },
        { id: "c2", name: "fast", input: { n: 2 } },
        { id: "c3", name: "fast", input: { n: 3 } }
      ]
      const tools = {
        slow: ToolsInProcess.succeedAfter(80, (input) => ({ slow: input })),
        fast: ToolsInProcess.succeedAfter(1, (input) => ({ fast: input }))
      }
      const loops = { t: loop((_input, host) => Effect.map(host.dispatch(calls), (r) => void (results = r))) }
      return run({ loops, tools }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted(), tools: [{ name: "slow" }, { name: "fast" }] })
          yield* sessions.send(s, { message: "go" })
          expect(results).toEqual([
            { call_id: "c1", name: "slow", outcome: "ok", output: { slow: { n: 1 } }, is_error: false },
            { call_id: "c2", name: "fast", outcome: "ok", output: { fast: { n: 2 } }, is_error: false },
            { call_id: "c3", name: "fast", outcome: "ok", output: { fast: { n: 3 } }, is_error: false }
          ])
          const all = yield* records(s)
          const started = ofKind(all, "tool_call_started")
          const outcomeSeq = (id: string) => outcomeOf(all, started.find((r) => r.payload.call_id === id)!.sequence)!.sequence
          expect(outcomeSeq("c1")).toBeGreaterThan(outcomeSeq("c2")) // the slow call really finished last
          expect(outcomeSeq("c1")).toBeGreaterThan(outcomeSeq("c3"))
        }))
    })

    it.scopedLive("each tool call is fenced: tool_call_started is durable before the executor runs and the outcome before the loop sees it", () => {
      const probe = new Probe()
      const inTool: Array<{ started: JournalRecord | undefined; outcome: JournalRecord | undefined; deadline: number | undefined }> = []
      const inLoop: Array<JournalRecord | undefined> = []
      const tools = {
        probe: ((input, invocation) =>
          Effect.gen(function*() {
            const all = yield* probe.records(invocation.session)
            inTool.push({
              started: all.find((r) => r.sequence === invocation.sequence),
              outcome: outcomeOf(all, invocation.sequence),
              deadline: invocation.deadlineAtMs
            })
            return { outcome: "ok", output: input } as const
          })) satisfies ToolsInProcess.ToolHandler
      }
      const loops = {
        t: loop((input, host) =>
          Effect.gen(function*() {
            const results = yield* host.dispatch([{ id: "p1", name: "probe", input: { v: 1 } }, { id: "p2", name: "probe", input: { v: 2 } }])
            const all = yield* probe.records(input.runtime.session_id)
            for (const r of results) {
              const started = all.find((x) => x.kind === "tool_call_started" && x.payload.call_id === r.call_id)!
              inLoop.push(outcomeOf(all, started.sequence))
            }
          }))
      }
      return run({ loops, tools }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ agentloop: "t", model: scripted(), tools: [{ name: "probe" }] })
          yield* sessions.send(s, { message: "go" })
          expect(inTool.length).toBe(2)
          for (const seen of inTool) {
            expect(seen.started?.kind).toBe("tool_call_started")
            expect(seen.started?.payload.tool).toBe("probe")
            expect(seen.started?.payload.deadline_at_ms).toBe(seen.deadline)
            expect(seen.outcome).toBeUndefined()
          }
          expect(inTool.map((t) => t.started?.payload.call_id).sort()).toEqual(["p1", "p2"])
          expect(inLoop.map((r) => [r?.kind, r?.payload.outcome, r?.payload.is_error])).toEqual([
            ["tool_call_ended", "ok", false],
            ["tool_call_ended", "ok", false]
          ])
          const all = yield* records(s)
          for (const r of inLoop) expect(all.find((x) => x.sequence === r!.sequence)).toEqual(r)
        }))
    })

    it.scopedLive("tool outcomes are ok | error | timeout | unknown as recorded, and every non-ok reaches the loop with is_error true", () => {
      const probe = new Probe()
      let results: ReadonlyArray<ToolResult> = []
      const calls: Array<ToolCallRequest> = [
        { id: "ok", name: "good", input: { v: 1 } },
        { id: "err", name: "bad", input: {} },
        { id: "late", name: "sleepy", input: {} },
        { id: "lost", name: "flaky", input: {} },
        { id: "ghost", name: "not_configured", input: {} }
      ]
      const tools = {
        good: ToolsInProcess.succeedAfter(0),
        bad: ToolsInProcess.failWith({ why: "bad input" }),
        sleepy: ToolsInProcess.hang,
        flaky: ToolsInProcess.lose
      }
      const loops = { t: loop((_input, host) => Effect.map(host.dispatch(calls), (r) => void (results = r))) }
      return run({ loops, tools }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({
            agentloop: "t",
            model: scripted(),
            tools: [{ name: "good" }, { name: "bad" }, { name: "sleepy", timeout_ms: 30 }, { name: "flaky" }]
          })
          const out = yield* sessions.send(s, { message: "go" })
          expect(out.turn.status).toBe("ended")
          expect(results.map((r) => [r.call_id, r.outcome, r.is_error])).toEqual([
            ["ok", "ok", false],
            ["err", "error", true],
            ["late", "timeout", true],
            ["lost", "unknown", true],
            ["ghost", "error", true]
          ])
          expect(results[0]!.output).toEqual({ v: 1 })
          expect(results[1]!.output).toEqual({ why: "bad input" })
          const all = yield* records(s)
          const recorded = (id: string) => {
            const started = all.find((r) => r.kind === "tool_call_started" && r.payload.call_id === id)!
            const o = outcomeOf(all, started.sequence)!
            return [o.kind, o.payload.outcome, o.payload.is_error, o.payload.failure?.code]
          }
          expect(calls.map((c) => recorded(c.id))).toEqual([
            ["tool_call_ended", "ok", false, undefined],
            ["tool_call_ended", "error", true, undefined],
            ["tool_call_failed", "timeout", true, "timeout"],
            ["tool_call_failed", "unknown", true, "unknown"],
            ["tool_call_ended", "error", true, undefined]
          ])
        }))
    })

    it.scopedLive("three tool calls dispatched together: a timeout, one cancelled by interrupt and one ok are recorded in call order with their codes", () => {
      const probe = new Probe()
      let results: ReadonlyArray<ToolResult> = []
      let next = ""
      const calls: Array<ToolCallRequest> = [
        { id: "t1", name: "deadline", input: {} },
        { id: "t2", name: "waits", input: {} },
        { id: "t3", name: "quick", input: { q: 3 } }
      ]
      const tools = { deadline: ToolsInProcess.hang, waits: ToolsInProcess.hang, quick: ToolsInProcess.succeedAfter(5) }
      const loops = {
        t: loop((_input, host) =>
          Effect.gen(function*() {
            results = yield* host.dispatch(calls)
            next = yield* codeOf(host.kvPut("after", true))
          }))
      }
      return run({ loops, tools }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({
            agentloop: "t",
            model: scripted(),
            tools: [{ name: "deadline", timeout_ms: 40 }, { name: "waits" }, { name: "quick" }]
          })
          const receipt = yield* sessions.submit(s, { message: "go" })
          const outcomes = Effect.map(records(s), (all) => ofKind(all, "tool_call_ended").length + ofKind(all, "tool_call_failed").length)
          yield* eventually("the timeout and the ok outcome", Effect.map(outcomes, (n) => n >= 2))
          yield* sessions.interrupt(s)
          expect(results.map((r) => [r.call_id, r.outcome, r.is_error])).toEqual([
            ["t1", "timeout", true],
            ["t2", "cancelled", true],
            ["t3", "ok", false]
          ])
          expect(next).toBe("cancelled")
          const all = yield* records(s)
          const started = ofKind(all, "tool_call_started")
          expect(started.map((r) => r.payload.call_id).sort()).toEqual(["t1", "t2", "t3"])
          const byId = (id: string) => outcomeOf(all, started.find((r) => r.payload.call_id === id)!.sequence)!
          expect(calls.map((c) => [byId(c.id).payload.outcome, byId(c.id).payload.failure?.code])).toEqual([
            ["timeout", "timeout"],
            ["cancelled", "cancelled"],
            ["ok", undefined]
          ])
          // the timeout came first, then the cancel
          expect(byId("t3").sequence).toBeLessThan(byId("t2").sequence)
          expect(byId("t1").sequence).toBeLessThan(byId("t2").sequence)
          const closed = ofKind(all, "turn_failed")
          expect(closed.map((r) => [r.payload.sequence, r.payload.failure.code])).toEqual([[receipt.sequence, "cancelled"]])
          expect(ofKind(all, "kv_put")).toEqual([])
        }))
    })

    // ---------------------------------------------------------------- the official loop

    it.scopedLive("the official loop runs model → tools → results → model until a final answer, and tool failures reach the model as is_error tool messages", () => {
      const probe = new Probe()
      const calls: Array<ModelCall> = []
      const model = scripted([
        { text: "", tool_calls: [{ name: "echo", input: { x: 1 } }, { name: "broken", input: { y: 2 } }] },
        { text: "done" }
      ])
      const tools = { echo: ToolsInProcess.succeedAfter(1), broken: ToolsInProcess.failWith({ reason: "it broke" }) }
      return run({ tools, onModelCall: (c) => void calls.push(c) }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ model, tools: [{ name: "echo" }, { name: "broken" }] })
          const out = yield* sessions.send(s, { message: "use the tools" })
          expect(out.turn).toEqual({ sequence: out.turn.sequence, status: "ended", result: { text: "done" } })
          const all = yield* records(s)
          const [id1, id2] = (ofKind(all, "model_call_ended")[0]!.payload.result as ModelResult).tool_calls.map((c) => c.id)
          const user = msg("user", "use the tools")
          const assistant: Message = {
            role: "assistant",
            content: "",
            tool_calls: [{ id: id1!, name: "echo", input: { x: 1 } }, { id: id2!, name: "broken", input: { y: 2 } }]
          }
          expect(calls.length).toBe(2)
          expect(calls[0]!.request.messages).toEqual([user])
          const toolMessages = calls[1]!.request.messages.slice(2)
          expect(calls[1]!.request.messages.slice(0, 2)).toEqual([user, assistant])
          expect(toolMessages.map((m) => [m.role, m.tool_call_id])).toEqual([["tool", id1], ["tool", id2]])
          expect(JSON.parse(toolMessages[0]!.content as string)).toEqual({ x: 1 })
          expect(JSON.parse(toolMessages[1]!.content as string)).toEqual({ outcome: "error", error: { reason: "it broke" } })
          const t = yield* sessions.transcript(s)
          expect(t.messages).toEqual([user, assistant, ...toolMessages, msg("assistant", "done")])
          expect(all.map((r) => r.kind).filter((k) => k.startsWith("model_") || k.startsWith("tool_"))).toEqual([
            "model_call_started",
            "model_call_ended",
            "tool_call_started",
            "tool_call_started",
            "tool_call_ended",
            "tool_call_ended",
            "model_call_started",
            "model_call_ended"
          ])
        }))
    })

    it.scopedLive("the official loop saves a text turn's user message with its first model call's start, just ahead of it: durable from the first call on, the call's context an empty delta after it, the answer's save only the answer", () => {
      const probe = new Probe()
      const calls: Array<ModelCall> = []
      return run({ onModelCall: (c) => void calls.push(c) }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const earlier = [msg("user", "earlier"), msg("assistant", "noted")]
          const { session_id: s } = yield* sessions.create({ model: scripted([{ text: "hi there" }]), transcript: earlier })
          yield* sessions.send(s, { message: "hello" })
          const all = yield* records(s)
          const [save, answer] = ofKind(all, "transcript_delta").slice(-2)
          const [started] = ofKind(all, "model_call_started")
          expect(save!.payload).toEqual({ keep: 2, append: [msg("user", "hello")] })
          expect(started!.sequence).toBe(save!.sequence + 1)
          expect(started!.payload).toEqual({ message_count: 3, context: { through_sequence: save!.sequence, delta: { keep: 3, append: [] } } })
          expect(rebuildModelRequest(all, started!.sequence)).toEqual(calls[0]!.request)
          expect(answer!.payload).toEqual({ keep: 3, append: [msg("assistant", "hi there")] })
          expect((yield* sessions.transcript(s)).messages).toEqual([...earlier, msg("user", "hello"), msg("assistant", "hi there")])
        }))
    })

    it.scopedLive("the official loop asks the model with a turn input's media as parts of the user's message after its text, and keeps them in the transcript with the answer", () => {
      const probe = new Probe()
      const calls: Array<ModelCall> = []
      const media = [{ type: "image", url: "https://example.com/a.png" }, { type: "image", data: "iVBORw0KGgo=", mime_type: "image/png" }]
      return run({ onModelCall: (c) => void calls.push(c) }, probe, ({ records, sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ model: scripted([{ text: "two pictures" }]) })
          const out = yield* sessions.send(s, { message: "what are these?", media })
          expect(out.turn).toMatchObject({ status: "ended", result: { text: "two pictures" } })
          const user: Message = { role: "user", content: [{ type: "text", text: "what are these?" }, ...media] }
          expect(calls.map((c) => c.request.messages)).toEqual([[user]])
          const all = yield* records(s)
          expect(rebuildModelRequest(all, ofKind(all, "model_call_started")[0]!.sequence)).toEqual(calls[0]!.request)
          expect((yield* sessions.transcript(s)).messages).toEqual([user, msg("assistant", "two pictures")])
        }))
    })

    it.scopedLive("the official loop keeps no media turn whose first model call was refused (model_rejected): the transcript is as it was, and the next turn goes through without it", () => {
      const probe = new Probe()
      const calls: Array<ModelCall> = []
      const model = scripted([{ fail: { code: "model_rejected", message: "message 0 part 1 is an \"audio\" part" } }, { text: "fine" }])
      return run({ onModelCall: (c) => void calls.push(c) }, probe, ({ sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ model })
          const refused = yield* sessions.send(s, { message: "listen", media: [{ type: "audio", data: "UklGRg==", mime_type: "audio/wav" }] })
          expect(refused.turn).toMatchObject({ status: "failed", failure: { code: "model_rejected" } })
          expect((yield* sessions.transcript(s)).messages).toEqual([])
          const next = yield* sessions.send(s, { message: "hello" })
          expect(next.turn).toMatchObject({ status: "ended", result: { text: "fine" } })
          expect(calls[1]!.request.messages.filter((m) => m.role === "user")).toEqual([msg("user", "hello")])
        }))
    })

    it.scopedLive("the official loop tells the model about a tool timeout as an is_error tool message", () => {
      const probe = new Probe()
      const calls: Array<ModelCall> = []
      const model = scripted([{ tool_calls: [{ name: "stuck", input: {} }] }, { text: "gave up" }])
      return run({ tools: { stuck: ToolsInProcess.hang }, onModelCall: (c) => void calls.push(c) }, probe, ({ sessions }) =>
        Effect.gen(function*() {
          const { session_id: s } = yield* sessions.create({ model, tools: [{ name: "stuck", timeout_ms: 20 }] })
          const out = yield* sessions.send(s, { message: "try" })
          expect(out.turn.result).toEqual({ text: "gave up" })
          const last = calls[1]!.request.messages.at(-1)!
          expect(last.role).toBe("tool")
          expect(JSON.parse(last.content as string)).toMatchObject({ outcome: "timeout", error: { code: "timeout" } })
        }))
    })
  })
