/**
 * The host bridge's transcript forms (docs/abi.md, "Host services"): `model` and `set_transcript`
 * take the whole transcript (`messages`) or a delta against the saved one (`context: {keep,
 * append}` / `{keep, append}`). The delta's kept messages are the saved transcript's own objects
 * (the activation input's, then the last successful save's), so the Host's diff stays an identity
 * check per kept message; the journal holds exactly what the whole form gives for the same
 * transcript; a delta that does not fit the saved transcript is refused before anything is
 * journaled.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import { failure } from "../../../src/domain/Failure.js"
import type { SessionId } from "../../../src/domain/Ids.js"
import { Message } from "../../../src/domain/Messages.js"
import type { JournalRecord } from "../../../src/domain/Records.js"
import { asModelRequest, asSetTranscriptRequest, isMessage, loopServices, ModelRequest, SetTranscriptRequest, toolServices } from "../../../src/layers/wasm/HostBridge.js"
import { type ActivationInput, type AgentloopShape, type Host, HostCallFailed } from "../../../src/services/Agentloop.js"
import { Journal } from "../../../src/services/Journal.js"
import { Sessions } from "../../../src/services/Sessions.js"
import { runtimeLayer } from "../../support/runtime.js"

const msg = (role: Message["role"], content: string): Message => ({ role, content })

const RESULT = { text: "r", tool_calls: [], stop_reason: "end" }

/** A Host that records what `model` and `setTranscript` were given; `setTranscript` fails while `failSaves` is set. */
const recordingHost = () => {
  const calls: Array<{ readonly op: "model" | "set_transcript"; readonly messages: ReadonlyArray<Message> }> = []
  const state = { failSaves: false }
  const never = () => Effect.dieMessage("not used in this test")
  const host: Host = {
    model: (request) => Effect.sync(() => void calls.push({ op: "model", messages: request.messages })).pipe(Effect.as(RESULT as any)),
    setTranscript: (messages) =>
      state.failSaves
        ? Effect.fail(new HostCallFailed({ failure: failure("journal_write_failed", "the disk is full") }))
        : Effect.sync(() => void calls.push({ op: "set_transcript", messages })),
    setTranscriptAtEnd: never,
    dispatch: never,
    emit: never,
    telemetry: () => Effect.void,
    refusal: () => undefined,
    kvRead: never,
    kvPut: never,
    kvDelete: never,
    events: never
  }
  return { host, calls, state }
}

/** Runs one request through the bridge and parses the answer. */
const perform = (services: ReturnType<typeof loopServices>, op: string, request: unknown) =>
  Effect.map(services(op, typeof request === "string" ? request : JSON.stringify(request)), (text) => JSON.parse(text))

const invalid = { error: { code: "invalid_request", message: expect.any(String), retryable: false, ambiguous: false } }

describe("the host bridge: transcript deltas", () => {
  const saved = [msg("user", "one"), msg("assistant", "two"), msg("user", "three")]

  it.effect("model with context {keep, append} gives the Host the saved transcript's first keep messages — the same objects — then append: keep 0, mid and full", () =>
    Effect.gen(function*() {
      const { host, calls } = recordingHost()
      const services = loopServices(host, saved)
      const added = msg("user", "four")
      for (const keep of [0, 1, 3]) {
        expect(yield* perform(services, "model", { context: { keep, append: [added] } })).toEqual({ ok: RESULT })
      }
      expect(calls.map((c) => c.messages)).toEqual([[added], [saved[0], added], [...saved, added]])
      const [, mid, full] = calls
      expect(mid!.messages[0]).toBe(saved[0])
      saved.forEach((m, i) => expect(full!.messages[i], `kept message ${i}`).toBe(m))
      // The whole form still works, and system and options pass through with either form.
      expect(yield* perform(services, "model", { messages: [added], system: "s", options: { t: 1 } })).toEqual({ ok: RESULT })
      expect(yield* perform(services, "model", { context: { keep: 3, append: [] }, system: "s", options: { t: 1 } })).toEqual({ ok: RESULT })
      expect(calls.slice(3).map((c) => c.messages)).toEqual([[added], saved])
    }))

  it.effect("set_transcript {keep, append} saves the saved transcript's first keep messages then append, and the next delta counts from what it saved — the same objects", () =>
    Effect.gen(function*() {
      const { host, calls } = recordingHost()
      const services = loopServices(host, saved)
      expect(yield* perform(services, "set_transcript", { keep: 2, append: [msg("user", "THREE"), msg("assistant", "four")] })).toEqual({ ok: null })
      const first = calls[0]!.messages
      expect(first).toEqual([saved[0], saved[1], msg("user", "THREE"), msg("assistant", "four")])
      expect(first[0]).toBe(saved[0])
      expect(first[1]).toBe(saved[1])
      // keep now counts against the four messages just saved, not the input's three.
      expect(yield* perform(services, "model", { context: { keep: 4, append: [msg("user", "five")] } })).toEqual({ ok: RESULT })
      const asked = calls[1]!.messages
      expect(asked).toHaveLength(5)
      first.forEach((m, i) => expect(asked[i], `kept message ${i}`).toBe(m))
      // A whole-form save is the base of the next delta too.
      expect(yield* perform(services, "set_transcript", { messages: [msg("user", "fresh")] })).toEqual({ ok: null })
      expect(yield* perform(services, "set_transcript", { keep: 1, append: [msg("assistant", "on")] })).toEqual({ ok: null })
      expect(calls[3]!.messages[0]).toBe(calls[2]!.messages[0])
      expect(calls[3]!.messages).toEqual([msg("user", "fresh"), msg("assistant", "on")])
      expect(yield* perform(services, "set_transcript", { keep: 2, append: [] })).toEqual({ ok: null })
      expect(calls[4]!.messages).toEqual(calls[3]!.messages)
      calls[3]!.messages.forEach((m, i) => expect(calls[4]!.messages[i]).toBe(m))
    }))

  it.effect("a failed set_transcript leaves the base as it was: the next delta still counts from the last successful save", () =>
    Effect.gen(function*() {
      const { host, calls, state } = recordingHost()
      const services = loopServices(host, saved)
      state.failSaves = true
      expect(yield* perform(services, "set_transcript", { keep: 3, append: [msg("user", "four"), msg("user", "five")] })).toEqual({
        error: { code: "journal_write_failed", message: "the disk is full", retryable: false, ambiguous: false }
      })
      state.failSaves = false
      expect(yield* perform(services, "model", { context: { keep: 5, append: [] } })).toEqual(invalid)
      expect(yield* perform(services, "model", { context: { keep: 3, append: [] } })).toEqual({ ok: RESULT })
      saved.forEach((m, i) => expect(calls[0]!.messages[i]).toBe(m))
    }))

  it.effect("messages reach the Host as the guest wrote them, keys in the guest's order, in either form (no decoded copy)", () =>
    Effect.gen(function*() {
      const { host, calls } = recordingHost()
      const services = loopServices(host, saved)
      const result = `{"role":"tool","tool_call_id":"c1","content":"7"}`
      expect(yield* perform(services, "model", `{"context":{"keep":3,"append":[${result}]}}`)).toEqual({ ok: RESULT })
      expect(yield* perform(services, "set_transcript", `{"messages":[${result}]}`)).toEqual({ ok: null })
      expect(yield* perform(services, "set_transcript", `{"keep":1,"append":[${result}]}`)).toEqual({ ok: null })
      expect(calls.map((c) => JSON.stringify(c.messages.at(-1)))).toEqual([result, result, result])
    }))

  it.effect("keep out of range, not an integer, both forms at once or neither, or half a delta: invalid_request, and the Host is never called", () =>
    Effect.gen(function*() {
      const { host, calls } = recordingHost()
      const services = loopServices(host, saved)
      const append = [msg("user", "x")]
      const refused: Array<[string, unknown]> = [
        ["model", { context: { keep: 4, append } }],
        ["model", { context: { keep: -1, append } }],
        ["model", { context: { keep: 1.5, append } }],
        ["model", { context: { keep: "1", append } }],
        ["model", { context: { keep: 1 } }],
        ["model", { context: { keep: 1, append: [{ role: "robot", content: "x" }] } }],
        ["model", { context: { keep: 1, append, extra: true } }],
        ["model", { messages: append, context: { keep: 0, append } }],
        ["model", { system: "s" }],
        ["set_transcript", { keep: 4, append }],
        ["set_transcript", { keep: -1, append: [] }],
        ["set_transcript", { keep: 0.5, append: [] }],
        ["set_transcript", { keep: 1 }],
        ["set_transcript", { append }],
        ["set_transcript", { messages: append, keep: 0, append }],
        ["set_transcript", { messages: append, keep: 0 }],
        ["set_transcript", {}],
        ["set_transcript", { context: { keep: 0, append } }]
      ]
      for (const [op, request] of refused) {
        expect(yield* perform(services, op, request), `${op} ${JSON.stringify(request)}`).toEqual(invalid)
      }
      expect(calls).toEqual([])
      // With an empty saved transcript only keep 0 fits until a save.
      const bare = loopServices(host, [])
      expect(yield* perform(bare, "model", { context: { keep: 1, append } })).toEqual(invalid)
      expect(yield* perform(bare, "model", { context: { keep: 0, append } })).toEqual({ ok: RESULT })
    }))
})

// ---------------------------------------------------------------------------------------------
// Through the real Host and journal

type Step = readonly [op: string, request: unknown]

/** A loop that sends `steps(input)` through the host bridge, as a guest would, and returns the answers. */
const bridged = (steps: (input: ActivationInput) => ReadonlyArray<Step>): AgentloopShape => ({
  activate: (input, host) =>
    Effect.gen(function*() {
      const services = loopServices(host, input.transcript)
      const answers: Array<unknown> = []
      for (const [op, request] of steps(input)) answers.push(yield* perform(services, op, request))
      return answers
    })
})

/** The session's records as text, without their times (two sessions are compared). */
const recordsOf = (session: SessionId) =>
  Effect.flatMap(Journal, (journal) => Effect.orDie(journal.read(session, { after: 0, limit: 1_000_000 }))).pipe(
    Effect.map((records) => records.map(({ recorded_at_ms: _, ...r }: JournalRecord) => JSON.stringify(r)))
  )

describe("the host bridge: a save riding on a call", () => {
  const saved = [msg("user", "one"), msg("assistant", "two")]
  const CALL = { id: "c1", name: "t", input: {} }
  const TOOL_RESULT = { call_id: "c1", name: "t", outcome: "ok", output: 1, is_error: false }

  /** A Host whose model and dispatch record the save they were given, answering ok, or failing while `fail` is set. */
  const ridingHost = () => {
    const calls: Array<{ readonly op: string; readonly save: ReadonlyArray<Message> | undefined; readonly messages?: ReadonlyArray<Message> }> = []
    const state = { fail: false }
    const failed = Effect.fail(new HostCallFailed({ failure: failure("model_unavailable", "busy") }))
    const { host: base } = recordingHost()
    const host: Host = {
      ...base,
      model: (request, save) =>
        state.fail ? failed : Effect.sync(() => void calls.push({ op: "model", save, messages: request.messages })).pipe(Effect.as(RESULT as any)),
      dispatch: (_calls, save) => state.fail ? failed : Effect.sync(() => void calls.push({ op: "dispatch", save })).pipe(Effect.as([TOOL_RESULT] as any)),
      setTranscript: (messages) => Effect.sync(() => void calls.push({ op: "set_transcript", save: messages }))
    }
    return { host, calls, state }
  }

  it.effect("dispatch and model take a transcript (a set_transcript request, either form) and hand it to the Host with the call; the model's context counts from it; on ok it is the base of the next delta", () =>
    Effect.gen(function*() {
      const { host, calls } = ridingHost()
      const services = loopServices(host, saved)
      const asking = { role: "assistant", content: "", tool_calls: [CALL] }
      expect(yield* perform(services, "dispatch", { calls: [CALL], transcript: { keep: 2, append: [msg("user", "go"), asking] } })).toEqual({ ok: [TOOL_RESULT] })
      expect(calls[0]!.save).toEqual([...saved, msg("user", "go"), asking])
      saved.forEach((m, i) => expect(calls[0]!.save![i]).toBe(m))
      const result = { role: "tool", tool_call_id: "c1", content: "1" }
      expect(yield* perform(services, "model", { transcript: { keep: 4, append: [result] }, context: { keep: 5, append: [] } })).toEqual({ ok: RESULT })
      expect(calls[1]!.save).toEqual([...saved, msg("user", "go"), asking, result])
      expect(calls[1]!.messages).toEqual(calls[1]!.save)
      // The whole form rides too; the next delta counts from what the last call saved.
      expect(yield* perform(services, "dispatch", { calls: [CALL], transcript: { messages: [msg("user", "only")] } })).toEqual({ ok: [TOOL_RESULT] })
      expect(yield* perform(services, "set_transcript", { keep: 1, append: [] })).toEqual({ ok: null })
      expect(calls[3]!.save).toEqual([msg("user", "only")])
    }))

  it.effect("a call that carried a save and answered an error leaves the base as it was: the next delta counts from the last call that answered ok", () =>
    Effect.gen(function*() {
      const { host, calls, state } = ridingHost()
      const services = loopServices(host, saved)
      state.fail = true
      expect((yield* perform(services, "model", { transcript: { keep: 2, append: [msg("user", "a"), msg("user", "b")] }, context: { keep: 4, append: [] } })).error.code).toBe("model_unavailable")
      state.fail = false
      expect(yield* perform(services, "set_transcript", { keep: 4, append: [] })).toEqual(invalid)
      expect(yield* perform(services, "set_transcript", { keep: 2, append: [msg("user", "a")] })).toEqual({ ok: null })
      expect(calls.map((c) => c.op)).toEqual(["set_transcript"])
    }))

  it.effect("a transcript that set_transcript would refuse (its shape, keep out of range, not messages, null), or a context out of range of it: invalid_request, and the Host is never called", () =>
    Effect.gen(function*() {
      const { host, calls } = ridingHost()
      const services = loopServices(host, saved)
      const refused: Array<[string, unknown]> = [
        ["dispatch", { calls: [CALL], transcript: null }],
        ["dispatch", { calls: [CALL], transcript: [] }],
        ["dispatch", { calls: [CALL], transcript: { keep: 3, append: [] } }],
        ["dispatch", { calls: [CALL], transcript: { keep: 1 } }],
        ["dispatch", { calls: [CALL], transcript: { messages: [{ role: "robot", content: "x" }] } }],
        ["dispatch", { calls: [CALL], transcript: { messages: [], keep: 0, append: [] } }],
        ["model", { transcript: { keep: 3, append: [] }, context: { keep: 0, append: [] } }],
        ["model", { transcript: { messages: [{ content: "x" }] }, context: { keep: 0, append: [] } }],
        ["model", { transcript: { keep: 1, append: [] }, context: { keep: 2, append: [] } }],
        ["model", { transcript: "saved", messages: [] }]
      ]
      for (const [op, request] of refused) expect(yield* perform(services, op, request), JSON.stringify(request)).toEqual(invalid)
      expect(calls).toEqual([])
    }))
})

describe("the host bridge: transcript deltas, journaled", () => {
  const [u0, a0, u1, a1, x, y, z, w, u2] = ["u0", "a0", "u1", "a1", "x", "y", "z", "w", "u2"].map((t, i) => msg(i % 2 ? "assistant" : "user", t))
  const whole: Record<number, ReadonlyArray<Step>> = {
    1: [
      ["model", { messages: [u0, a0, u1] }],
      ["set_transcript", { messages: [u0, a0, u1, a1] }],
      ["model", { messages: [u0, a0, u1, a1], system: "terse", options: { temperature: 0 } }],
      ["set_transcript", { messages: [u0, x, y] }],
      ["set_transcript", { messages: [u0, x, y] }],
      ["set_transcript", { messages: [] }],
      ["set_transcript", { messages: [z] }],
      ["set_transcript", { messages: [z, w] }]
    ],
    2: [
      ["model", { messages: [z, w, u2] }],
      ["set_transcript", { messages: [z, u2] }]
    ]
  }
  const delta: Record<number, ReadonlyArray<Step>> = {
    1: [
      ["model", { context: { keep: 2, append: [u1] } }],
      ["set_transcript", { keep: 2, append: [u1, a1] }],
      ["model", { context: { keep: 4, append: [] }, system: "terse", options: { temperature: 0 } }],
      ["set_transcript", { keep: 1, append: [x, y] }],
      ["set_transcript", { keep: 0, append: [u0, x, y] }],
      ["set_transcript", { keep: 0, append: [] }],
      ["set_transcript", { keep: 0, append: [z] }],
      // Sent again though kept: the Host's diff keeps it all the same.
      ["set_transcript", { keep: 0, append: [z, w] }]
    ],
    2: [
      ["model", { context: { keep: 2, append: [u2] } }],
      ["set_transcript", { keep: 1, append: [u2] }]
    ]
  }

  it.scopedLive("the delta forms journal byte for byte what the whole form journals for the same transcripts (keep 0, mid, full, a replacement, a no-op), turn after turn", () => {
    /** Two turns of `script` in a session made with the transcript [u0, a0], in a runtime of its own. */
    const run = (script: Record<number, ReadonlyArray<Step>>) => {
      let turn = 0
      const loops = { bridged: bridged(() => script[++turn] ?? []) }
      return Effect.gen(function*() {
        const sessions = yield* Sessions
        const model = { provider: "scripted" as const, replies: [{ text: "r1" }, { text: "r2" }] }
        const { session_id } = yield* sessions.create({ agentloop: "bridged", model, transcript: [u0, a0] })
        const results: Array<unknown> = []
        for (const message of ["first", "second"]) {
          const out = yield* sessions.send(session_id, { message })
          expect(out.turn.status, JSON.stringify(out.turn)).toBe("ended")
          results.push(out.turn.result)
        }
        expect((yield* sessions.transcript(session_id)).messages).toEqual([z, u2])
        return { results, records: yield* recordsOf(session_id) }
      }).pipe(Effect.provide(runtimeLayer({ loops })))
    }
    return Effect.gen(function*() {
      const wholeRun = yield* run(whole)
      const deltaRun = yield* run(delta)
      expect(deltaRun.results).toEqual(wholeRun.results)
      for (const answers of deltaRun.results as Array<Array<unknown>>) for (const a of answers) expect(a).not.toHaveProperty("error")
      expect(deltaRun.records).toEqual(wholeRun.records)
      const kinds = deltaRun.records.map((r) => JSON.parse(r).kind)
      expect(kinds.filter((k) => k === "model_call_started")).toHaveLength(3)
      // The creation's, then 6 of the 7 saves: saving the same transcript again journals nothing.
      expect(kinds.filter((k) => k === "transcript_delta")).toHaveLength(1 + 6)
    })
  })

  it.scopedLive("a delta out of range, or both forms at once, answers invalid_request and journals nothing: the turn's records are those of a loop that made no call", () => {
    const append = [msg("user", "x")]
    const loops = {
      refused: bridged(() => [
        ["model", { context: { keep: 3, append } }],
        ["model", { context: { keep: -1, append } }],
        ["model", { messages: append, context: { keep: 0, append } }],
        ["set_transcript", { keep: 3, append }],
        ["set_transcript", { messages: append, keep: 2, append }]
      ]),
      idle: bridged(() => [])
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const model = { provider: "scripted" as const }
      const kinds: Record<string, ReadonlyArray<string>> = {}
      for (const agentloop of ["refused", "idle"]) {
        const { session_id } = yield* sessions.create({ agentloop, model, transcript: [u0, a0] })
        const out = yield* sessions.send(session_id, { message: "go" })
        expect(out.turn.status).toBe("ended")
        if (agentloop === "refused") expect(out.turn.result).toEqual(Array(5).fill(invalid))
        expect((yield* sessions.transcript(session_id)).messages).toEqual([u0, a0])
        kinds[agentloop] = (yield* recordsOf(session_id)).map((r) => JSON.parse(r).kind)
      }
      expect(kinds.refused).toEqual(kinds.idle)
    }).pipe(Effect.provide(runtimeLayer({ loops })))
  })
})

describe("the host bridge: request shapes checked by hand", () => {
  const m = { role: "user", content: "x" }
  const candidates: ReadonlyArray<unknown> = [
    {}, [], null, 1, "x", true,
    { messages: [m] }, { messages: [] }, { messages: "x" }, { messages: null }, { messages: {} },
    { context: { keep: 0, append: [m] } }, { context: { keep: 2, append: [] } }, { context: { keep: -1, append: [] } },
    { context: { keep: 1.5, append: [] } }, { context: { keep: "1", append: [] } }, { context: { keep: 2 ** 53, append: [] } },
    { context: { keep: 0 } }, { context: { append: [] } }, { context: { keep: 0, append: [], more: 1 } }, { context: [] }, { context: null },
    { messages: [m], system: "s" }, { messages: [m], system: 1 }, { messages: [m], options: { t: 1 } }, { messages: [m], options: null },
    { messages: [m], extra: 1 }, { keep: 0, append: [m] }, { keep: 0 }, { append: [m] }, { keep: 0.5, append: [] }, { keep: 0, append: "x" },
    { messages: [m], keep: 1, append: [] }, { messages: [m], context: { keep: 0, append: [] } }, JSON.parse('{"__proto__": {"keep": 1}}'),
    { keep: null, append: [] }, { messages: [m], tools: [] }
  ]

  it("model and set_transcript requests are accepted by hand exactly when their Schemas (unknown fields refused) accept them", () => {
    const decodes = (schema: Schema.Schema<any, any>) => (u: unknown) =>
      Either.isRight(Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })(u))
    for (const u of candidates) {
      expect(asModelRequest(u) !== undefined, `model ${JSON.stringify(u)}`).toBe(decodes(ModelRequest)(u))
      expect(asSetTranscriptRequest(u) !== undefined, `set_transcript ${JSON.stringify(u)}`).toBe(decodes(SetTranscriptRequest)(u))
    }
  })

  it("messages are accepted by hand exactly when the Message Schema (unknown fields refused) accepts them", () => {
    const is = Schema.is(Message, { onExcessProperty: "error" })
    const call = { id: "c1", name: "t", input: { a: 1 } }
    const messages: ReadonlyArray<unknown> = [
      { role: "user", content: "x" }, { role: "system", content: "" }, { role: "tool", content: "r", tool_call_id: "c1" },
      { role: "assistant", content: "x", tool_calls: [call] }, { role: "assistant", content: "x", tool_calls: [] },
      { role: "assistant", content: "x", tool_calls: [{ id: "c1", name: "t", input: null }] },
      { role: "assistant", content: "x", tool_calls: [{ id: "c1", name: "t" }] }, { role: "assistant", content: "x", tool_calls: [{ ...call, extra: 1 }] },
      { role: "assistant", content: "x", tool_calls: [{ ...call, id: 1 }] }, { role: "assistant", content: "x", tool_calls: call },
      { role: "assistant", content: "x", tool_calls: null }, { role: "user", content: [{ type: "text", text: "x" }] },
      { role: "user", content: [{ type: "image", url: "u", detail: { a: [1] } }] }, { role: "user", content: [] },
      { role: "user", content: [{ text: "x" }] }, { role: "user", content: [{ type: 1 }] }, { role: "user", content: ["x"] },
      { role: "user", content: [null] }, { role: "user", content: null }, { role: "user", content: 1 }, { role: "user" },
      { content: "x" }, { role: "narrator", content: "x" }, { role: "toString", content: "x" }, { role: 1, content: "x" },
      { role: "user", content: "x", extra: true }, { role: "user", content: "x", tool_call_id: 1 }, { role: "user", content: "x", tool_call_id: null },
      JSON.parse('{"role": "user", "content": "x", "__proto__": {}}'), [], null, "user", 1
    ]
    for (const u of messages) expect(isMessage(u), JSON.stringify(u)).toBe(is(u))
  })
})

describe("the host bridge: after a cancel", () => {
  it.effect("every host call answers the cancel's error, those the Host does not perform too (telemetry, transcript, an unknown op, a request that is not JSON), and none reaches the Host", () =>
    Effect.gen(function*() {
      const reached: Array<string> = []
      const { host } = recordingHost()
      let cancelled = false
      const services = loopServices(
        { ...host, telemetry: () => Effect.sync(() => void reached.push("telemetry")), refusal: () => (cancelled ? failure("cancelled", "the turn was cancelled") : undefined) },
        [msg("user", "one")]
      )
      expect(yield* perform(services, "transcript", { from: 0, to: 1 })).toEqual({ ok: [msg("user", "one")] })
      cancelled = true
      const error = { error: { code: "cancelled", message: "the turn was cancelled", retryable: false, ambiguous: false } }
      for (const [op, request] of [["telemetry", { x: 1 }], ["transcript", { from: 0, to: 1 }], ["nope", {}], ["kv_read", "not json"], ["model", { messages: [] }]] as const) {
        expect(yield* perform(services, op, request), op).toEqual(error)
      }
      expect(reached).toEqual([])
    }))

  it.effect("a tool's host calls answer its stop's error once its call is stopped", () =>
    Effect.gen(function*() {
      let stopped = false
      const reached: Array<string> = []
      const services = toolServices({
        emit: () => Effect.sync(() => (reached.push("emit"), 1)),
        telemetry: () => Effect.sync(() => void reached.push("telemetry")),
        refusal: () => (stopped ? failure("cancelled", "the tool call was stopped") : undefined)
      })
      expect(JSON.parse(yield* services("telemetry", "{}"))).toEqual({ ok: null })
      stopped = true
      for (const op of ["telemetry", "emit", "nope"]) {
        expect(JSON.parse(yield* services(op, '{"kind":"k"}')), op).toMatchObject({ error: { code: "cancelled" } })
      }
      expect(reached).toEqual(["telemetry"])
    }))
})

describe("the host bridge: numbers", () => {
  it.effect("a request holding a number beyond a double's range (1e400, 400 digits) is refused invalid_request and reaches no Host method; numbers within it pass as doubles", () =>
    Effect.gen(function*() {
      const puts: Array<unknown> = []
      const { host } = recordingHost()
      const services = loopServices({ ...host, kvPut: (_key, value) => Effect.sync(() => void puts.push(value)) }, [])
      for (const request of ['{"key":"k","value":[1e400]}', '{"key":"k","value":{"x":-1E+400}}', `{"key":"k","value":${"9".repeat(400)}}`, '{"key":"k","value":[1,{"a":[2,1.5e309]}]}']) {
        expect(yield* perform(services, "kv_put", request), request).toEqual({ error: { ...invalid.error, message: expect.stringContaining("beyond the range of a double") } })
      }
      expect(puts).toEqual([])
      // Within range: kept as IEEE-754 doubles (docs/abi.md, "Numbers"); text that only looks large is not refused.
      for (const request of ['{"key":"k","value":[1e308,1.50,12345678901234567890123,"1e400"]}', `{"key":"k","value":"${"9".repeat(400)}"}`]) {
        expect(yield* perform(services, "kv_put", request), request).toEqual({ ok: null })
      }
      expect(puts).toEqual([[1e308, 1.5, 12345678901234567890123, "1e400"], "9".repeat(400)])
    }))
})

describe("the host bridge: events", () => {
  it.effect("after and limit outside their range are brought to the nearest (limit 1 to 1,000, after from 0), however far outside, and fractions round down", () =>
    Effect.gen(function*() {
      const asked: Array<{ after: number; limit: number }> = []
      const { host } = recordingHost()
      const services = loopServices({ ...host, events: (o) => Effect.sync(() => (asked.push(o), [])) }, [])
      for (const request of [{ after: 0, limit: 1e300 }, { after: -1, limit: 0 }, { after: -1e300, limit: -5 }, { after: 9007199254740993, limit: 2.5 }, { after: 3.7, limit: 1000 }]) {
        expect(yield* perform(services, "events", request), JSON.stringify(request)).toEqual({ ok: [] })
      }
      expect(asked).toEqual([{ after: 0, limit: 1000 }, { after: 0, limit: 1 }, { after: 0, limit: 1 }, { after: 9007199254740992, limit: 2 }, { after: 3, limit: 1000 }])
    }))
})

describe("the host bridge: requests of the wrong shape", () => {
  /** The Host's dispatch and kv_put record what they were given. */
  const dispatching = () => {
    const { host } = recordingHost()
    const seen: Array<unknown> = []
    const services = loopServices({
      ...host,
      dispatch: (calls) => Effect.sync(() => (seen.push(calls), calls.map((c) => ({ call_id: c.id, name: c.name, outcome: "ok", output: c.input, is_error: false })) as any)),
      kvPut: (key) => Effect.sync(() => void seen.push(key))
    }, [])
    return { services, seen }
  }
  const refusedWith = (message: string) => ({ error: { ...invalid.error, message } })

  it.effect("a dispatch call without input, or two calls sharing an id, answers invalid_request naming the call, and no call reaches the Host", () =>
    Effect.gen(function*() {
      const { services, seen } = dispatching()
      expect(yield* perform(services, "dispatch", { calls: [{ id: "a", name: "echo", input: 1 }, { id: "b", name: "echo" }] })).toEqual(
        refusedWith("dispatch: the request does not have the op's shape: calls[1].input is missing (give null for a call without input)")
      )
      expect(yield* perform(services, "dispatch", { calls: [{ id: "a", name: "echo", input: 1 }, { id: "b", name: "echo", input: 2 }, { id: "a", name: "other", input: 3 }] })).toEqual(
        refusedWith('dispatch: calls[0] and calls[2] have the same id "a": each call needs an id of its own (its result is told apart by call_id)')
      )
      expect(seen).toEqual([])
      // Input null is input; distinct ids pass.
      expect(yield* perform(services, "dispatch", { calls: [{ id: "a", name: "echo", input: null }, { id: "b", name: "echo", input: 2 }] })).toEqual({
        ok: [{ call_id: "a", name: "echo", outcome: "ok", output: null, is_error: false }, { call_id: "b", name: "echo", outcome: "ok", output: 2, is_error: false }]
      })
    }))

  it.effect("a request of the wrong shape answers invalid_request naming the field that lacks the op's shape and what is wrong with it", () =>
    Effect.gen(function*() {
      const { services, seen } = dispatching()
      const cases: Array<[string, unknown, string]> = [
        ["dispatch", { calls: [{ name: "echo", input: 1 }] }, "dispatch: the request does not have the op's shape: calls[0].id is missing"],
        ["dispatch", { calls: [{ id: 7, name: "echo", input: 1 }] }, "dispatch: the request does not have the op's shape: calls[0].id: Expected string, actual 7"],
        ["dispatch", { calls: [{ id: "a", name: "echo", input: 1, foo: 1 }] }, 'dispatch: the request does not have the op\'s shape: calls[0].foo is unexpected, expected: "id" | "name" | "input"'],
        ["kv_put", { key: "k", value: 1, foo: 1 }, 'kv_put: the request does not have the op\'s shape: foo is unexpected, expected: "key" | "value"'],
        ["emit", { kind: 3 }, "emit: the request does not have the op's shape: kind: Expected string, actual 3"],
        ["model", { messages: [], extra: true }, "model: the request does not have the op's shape: extra is unexpected, expected: \"messages\" | \"context\" | \"system\" | \"options\" | \"transcript\""],
        ["model", { context: { keep: "1", append: [] } }, "model: the request does not have the op's shape: context.keep: Expected number, actual \"1\""],
        ["set_transcript", { keep: 0, append: 5 }, "set_transcript: the request does not have the op's shape: append: Expected ReadonlyArray<unknown>, actual 5"]
      ]
      for (const [op, request, message] of cases) expect(yield* perform(services, op, request), `${op} ${JSON.stringify(request)}`).toEqual(refusedWith(message))
      expect(seen).toEqual([])
    }))
})

describe("the host bridge: a loop that does not read a model answer's metadata", () => {
  const FULL = {
    text: "r",
    tool_calls: [{ id: "c1", name: "t", input: { p: 1 } }],
    stop_reason: "tool_calls",
    reasoning: [{ type: "thinking", thinking: "hm", signature: "s" }],
    usage: { input_tokens: 1234, output_tokens: 56, cache_read_input_tokens: 1024 },
    response_id: "msg_01XFDUDYJgAACzvnptvVoYEL",
    model: "claude-sonnet-4-20250514",
    provider_stop_reason: "tool_use"
  }
  const answering = (result: unknown) => {
    const { host, calls } = recordingHost()
    return { host: { ...host, model: (request: Parameters<Host["model"]>[0]) => Effect.as(host.model(request), result as any) }, calls }
  }

  it.effect("with brain_model_metadata_unread a model answer carries only text, tool_calls and reasoning (when given); the Host is asked the same; without the marker the answer is whole", () =>
    Effect.gen(function*() {
      const request = { context: { keep: 0, append: [msg("user", "hi")] } }
      const marked = answering(FULL)
      expect(yield* perform(loopServices(marked.host, [], { modelMetadataUnread: true }), "model", request)).toEqual({
        ok: { text: FULL.text, tool_calls: FULL.tool_calls, reasoning: FULL.reasoning }
      })
      const { reasoning: _, ...withoutReasoning } = FULL
      const plain = answering(withoutReasoning)
      const answer = yield* perform(loopServices(plain.host, [], { modelMetadataUnread: true }), "model", request)
      expect(answer).toEqual({ ok: { text: FULL.text, tool_calls: FULL.tool_calls } })
      expect(Object.keys(answer.ok)).toEqual(["text", "tool_calls"])
      const whole = answering(FULL)
      expect(yield* perform(loopServices(whole.host, []), "model", request)).toEqual({ ok: FULL })
      expect(yield* perform(loopServices(whole.host, [], { modelMetadataUnread: false }), "model", request)).toEqual({ ok: FULL })
      // The Host was asked the same in each case: only the answer's text differs.
      expect(marked.calls).toEqual(whole.calls.slice(0, 1))
      expect(plain.calls).toEqual(whole.calls.slice(0, 1))
    }))
})
