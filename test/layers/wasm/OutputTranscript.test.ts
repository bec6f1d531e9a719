/**
 * A loop's output may carry the transcript to save (docs/abi.md, "The entries"):
 * `{"ok": result, "transcript": <a set_transcript request>}`. Brain saves it as that
 * `set_transcript` call would — the same checks, the same `transcript_delta` record, with the same
 * delta base (what the activation last saved) — in the turn's closing append, and the result is
 * the turn's only once that append is durable. WAT guests behind the WebAssembly host's worker threads, each a session's
 * Agentloop over the real sessions runtime.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import type { SessionId } from "../../../src/domain/Ids.js"
import type { JournalRecord } from "../../../src/domain/Records.js"
import * as JournalMemory from "../../../src/layers/JournalMemory.js"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import type { AgentloopShape } from "../../../src/services/Agentloop.js"
import { Journal } from "../../../src/services/Journal.js"
import { Sessions } from "../../../src/services/Sessions.js"
import type { TelemetryShape } from "../../../src/services/Telemetry.js"
import { runtimeLayer } from "../../support/runtime.js"
import { data, guest, returning, wat } from "../../support/wat.js"

const OPTIONS = { workers: 2, memoryBytes: 4 * 1024 * 1024, computeMs: 2_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }

/** The session's transcript when it is created. */
const CREATED = [{ role: "user" as const, content: "earlier" }, { role: "assistant" as const, content: "noted" }]
const A = { role: "assistant", content: "a" }
const B = { role: "user", content: "b" }

/**
 * A guest that makes the host call `op` with `request` (again and again until it answers an error,
 * with `poll`), drops its answer and returns `output`.
 */
const afterCall = (op: string, request: string, output: string, poll = false) => {
  const o = data(200, op)
  const r = data(300, request)
  const out = data(1000, output)
  if (r.len > 700 || out.len > 3000) throw new Error("the fixture's texts are too long for its data segments")
  return guest(`${o.segment} ${r.segment} ${out.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (local $ans i64)
      (loop $again
        (local.set $ans (call $call (i32.const ${o.ptr}) (i32.const ${o.len}) (i32.const ${r.ptr}) (i32.const ${r.len})))
        ;; {"ok"… or {"error"…: the third byte tells
        ${poll ? `(br_if $again (i32.ne (i32.load8_u (i32.add (i32.wrap_i64 (i64.shr_u (local.get $ans) (i64.const 32))) (i32.const 2))) (i32.const 101)))` : ""})
      (call $out (i32.const ${out.ptr}) (i32.const ${out.len})))`)
}

const okSaving = (transcript: unknown) => JSON.stringify({ ok: "fine", transcript })

/** The same telemetry hook for every session: `onTelemetry` is set by a test, then called with the session. */
let onTelemetry: (session: SessionId) => void = () => {}
const telemetry: TelemetryShape = {
  record: (r) => Effect.sync(() => onTelemetry(r.session_id as SessionId)),
  stats: Effect.succeed({ accepted: 0, dropped: 0, delivered: 0, failed: 0 })
}

/** Runs `body` in a runtime whose loops are `guests` (WAT, by name), over a memory journal it can make fail. */
const withGuests = <A, E>(
  guests: Record<string, string>,
  body: (control: JournalMemory.MemoryJournalControl) => Effect.Effect<A, E, Sessions | Journal>,
  config = {}
) =>
  Effect.gen(function*() {
    const host = yield* WasmHostWorkers.make(OPTIONS)
    const loops: Record<string, AgentloopShape> = {}
    for (const [name, text] of Object.entries(guests)) {
      const m = yield* Effect.orDie(host.admit(yield* Effect.promise(() => wat(text))))
      loops[name] = { activate: (input, h) => host.runLoop(m, input, h) }
    }
    const memory = yield* JournalMemory.make
    return yield* body(memory.control).pipe(
      Effect.provide(runtimeLayer({ loops, journal: Layer.succeed(Journal, memory.journal), telemetry, config }))
    )
  })

const session = (agentloop: string) =>
  Effect.map(Effect.flatMap(Sessions, (s) => s.create({ agentloop, model: { provider: "scripted" }, transcript: CREATED })), (c) => c.session_id)

const turn = (s: SessionId) => Effect.flatMap(Sessions, (sessions) => sessions.send(s, { message: "go" }))

const recordsOf = (s: SessionId) => Effect.flatMap(Journal, (journal) => Effect.orDie(journal.read(s, { after: 0, limit: 100_000 })))

/** The records from the turn's start on, without their session, sequences and times. */
const turnRecords = (records: ReadonlyArray<JournalRecord>) => {
  const start = records.findIndex((r) => r.kind === "turn_started")
  return records.slice(start).map((r) => ({ kind: r.kind, payload: r.kind === "transcript_delta" ? r.payload : undefined }))
}

const transcriptOf = (s: SessionId) => Effect.map(Effect.flatMap(Sessions, (sessions) => Effect.orDie(sessions.transcript(s))), (t) => t.messages)

describe("a loop's output carrying the transcript to save", () => {
  it.scopedLive("the output's transcript is journaled with the turn's end, as the same set_transcript call records it, whole or as a delta against the input's transcript", () => {
    const whole = { messages: [...CREATED, A] }
    const delta = { keep: 2, append: [A] }
    const guests = {
      outputWhole: returning(okSaving(whole)),
      outputDelta: returning(okSaving(delta)),
      callWhole: afterCall("set_transcript", JSON.stringify(whole), `{"ok":"fine"}`),
      callDelta: afterCall("set_transcript", JSON.stringify(delta), `{"ok":"fine"}`)
    }
    return withGuests(guests, () =>
      Effect.gen(function*() {
        const runs: Record<string, { records: ReturnType<typeof turnRecords>; transcript: unknown }> = {}
        for (const name of Object.keys(guests)) {
          const s = yield* session(name)
          const outcome = yield* turn(s)
          expect(outcome.turn, name).toMatchObject({ status: "ended", result: "fine" })
          runs[name] = { records: turnRecords(yield* recordsOf(s)), transcript: yield* transcriptOf(s) }
        }
        const expected = [
          { kind: "turn_started", payload: undefined },
          { kind: "activation_started", payload: undefined },
          { kind: "transcript_delta", payload: { keep: 2, append: [A] } },
          { kind: "activation_ended", payload: undefined },
          { kind: "turn_ended", payload: undefined }
        ]
        for (const name of Object.keys(guests)) {
          expect(runs[name]!.records, name).toEqual(expected)
          expect(runs[name]!.transcript, name).toEqual([...CREATED, A])
        }
      }))
  })

  it.scopedLive("a delta on the output counts from what the activation last saved: after a set_transcript call, keep reaches past the input's transcript", () =>
    withGuests({ savedFirst: afterCall("set_transcript", JSON.stringify({ keep: 2, append: [A] }), okSaving({ keep: 3, append: [B] })) }, () =>
      Effect.gen(function*() {
        const s = yield* session("savedFirst")
        expect((yield* turn(s)).turn).toMatchObject({ status: "ended", result: "fine" })
        expect(turnRecords(yield* recordsOf(s)).filter((r) => r.kind === "transcript_delta").map((r) => r.payload)).toEqual([
          { keep: 2, append: [A] },
          { keep: 3, append: [B] }
        ])
        expect(yield* transcriptOf(s)).toEqual([...CREATED, A, B])
      })))

  it.scopedLive("an output transcript that set_transcript would refuse fails the turn agentloop_failed, naming the problem, and journals no transcript_delta", () => {
    const refused: Record<string, [string, RegExp]> = {
      keepTooFar: [okSaving({ keep: 3, append: [A] }), /keep must be between 0 and the saved transcript's length \(2\), not 3/],
      notMessages: [okSaving({ keep: 0, append: [{ role: "nobody", content: "x" }] }), /append is not an array of messages/],
      bothForms: [okSaving({ messages: [A], keep: 0, append: [] }), /give either messages, or keep and append/],
      wrongShape: [okSaving({ messages: [A], extra: 1 }), /does not have set_transcript's shape/],
      nullTranscript: [okSaving(null), /does not have set_transcript's shape/]
    }
    return withGuests(Object.fromEntries(Object.entries(refused).map(([name, [output]]) => [name, returning(output)])), () =>
      Effect.gen(function*() {
        for (const [name, [, message]] of Object.entries(refused)) {
          const s = yield* session(name)
          const outcome = yield* turn(s)
          expect(outcome.turn.status, name).toBe("failed")
          expect(outcome.turn.failure?.code, name).toBe("agentloop_failed")
          expect(outcome.turn.failure?.message, name).toMatch(/^the output's transcript is not a valid set_transcript request: /)
          expect(outcome.turn.failure?.message, name).toMatch(message)
          expect(turnRecords(yield* recordsOf(s)).filter((r) => r.kind === "transcript_delta"), name).toEqual([])
          expect(yield* transcriptOf(s), name).toEqual(CREATED)
        }
      }))
  })

  it.scopedLive("a journal write that fails: the output's save fails with the turn's close (one append, neither recorded), journal_write_failed and ambiguous, as a set_transcript call's error passed on does", () => {
    const t = data(200, "telemetry")
    const st = data(220, "set_transcript")
    const r = data(300, JSON.stringify({ keep: 2, append: [A] }))
    // Telemetry, then set_transcript with the same request, its answer returned as the output (an error passed on).
    const passingOn = guest(`${t.segment} ${st.segment} ${r.segment} ${data(240, "{}").segment}
      (func (export "brain_run") (param i32 i32) (result i64)
        (drop (call $call (i32.const ${t.ptr}) (i32.const ${t.len}) (i32.const 240) (i32.const 2)))
        (call $call (i32.const ${st.ptr}) (i32.const ${st.len}) (i32.const ${r.ptr}) (i32.const ${r.len})))`)
    return withGuests({ onOutput: afterCall("telemetry", "{}", okSaving({ keep: 2, append: [A] })), passingOn }, (control) =>
      Effect.gen(function*() {
        // The guest's telemetry call marks its session: the next journal write (the transcript's) fails.
        onTelemetry = (s) => control.failNextWrite(s)
        const failures: Record<string, unknown> = {}
        for (const name of ["onOutput", "passingOn"]) {
          const s = yield* session(name)
          const outcome = yield* turn(s)
          expect(outcome.turn.status, name).toBe("failed")
          expect(outcome.turn.failure?.code, name).toBe("journal_write_failed")
          failures[name] = { ...outcome.turn.failure, message: outcome.turn.failure?.message.replaceAll(s, "(session)") }
          expect(turnRecords(yield* recordsOf(s)).filter((r) => r.kind === "transcript_delta"), name).toEqual([])
        }
        onTelemetry = () => {}
        const { message: outputMessage, ...output } = failures.onOutput as { message: string }
        const { message: _passedOn, ...passingOn } = failures.passingOn as { message: string }
        expect(output).toEqual(passingOn)
        // The save and the close were one append: its own failure is the close's.
        expect(outputMessage).toBe("the turn's end could not be recorded: journal of (session) refuses appends after a failed write: injected write failure")
      }))
  })

  it.scopedLive("a cancel while the guest works: the output's transcript is not saved, and the turn fails with the cancel", () =>
    withGuests({ poller: afterCall("kv_read", `{"key":"k"}`, okSaving({ keep: 2, append: [A] }), true) }, () =>
      Effect.gen(function*() {
        const sessions = yield* Sessions
        const s = yield* session("poller")
        const polled = yield* Effect.fork(turn(s))
        yield* Effect.sleep("50 millis")
        yield* sessions.interrupt(s)
        const outcome = yield* Fiber.join(polled)
        expect(outcome.turn.status).toBe("failed")
        expect(outcome.turn.failure?.code).toBe("cancelled")
        expect(turnRecords(yield* recordsOf(s)).filter((r) => r.kind === "transcript_delta")).toEqual([])
        expect(yield* transcriptOf(s)).toEqual(CREATED)
      }), { cancelGraceMs: 30_000 }))

  it.scopedLive("a transcript beside an error is ABI misuse: agentloop_failed, nothing saved", () =>
    withGuests({ both: returning(JSON.stringify({ error: { code: "model_failed", message: "x" }, transcript: { keep: 2, append: [A] } })) }, () =>
      Effect.gen(function*() {
        const s = yield* session("both")
        const outcome = yield* turn(s)
        expect(outcome.turn.failure?.code).toBe("agentloop_failed")
        expect(outcome.turn.failure?.message).toMatch(/transcript/)
        expect(turnRecords(yield* recordsOf(s)).filter((r) => r.kind === "transcript_delta")).toEqual([])
      })))

  it.effect("a tool's output may not carry a transcript: outcome error, saying so", () =>
    Effect.gen(function*() {
      const host = yield* WasmHostWorkers.make(OPTIONS)
      const m = yield* Effect.orDie(host.admit(yield* Effect.promise(() => wat(returning(okSaving({ keep: 0, append: [] }), "brain_tool")))))
      const run = yield* host.runTool(m, { input: {}, call: { session_id: "ses_1", sequence: 1, name: "t", deadline_at_ms: Date.now() + 10_000 } }, {
        emit: () => Effect.succeed(0),
        telemetry: () => Effect.void
      })
      expect(run).toEqual({ _tag: "error", output: { message: "a tool's output may not carry a transcript (only a loop's may)" } })
    }).pipe(Effect.scoped))
})
