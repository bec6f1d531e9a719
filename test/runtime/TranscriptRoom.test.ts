/**
 * The room a WebAssembly loop's input leaves for the saved transcript (layers/sessions/TranscriptRoom.ts,
 * docs/abi.md "Limits"): no save and no create puts a session in a state whose next activation's
 * input could not carry its transcript. A save past the room is refused `payload_too_large` as
 * that call's answer, nothing of it journaled; a create with such an opening transcript is refused
 * 400 naming `transcript`. The loops here run in process but declare the input a WebAssembly loop
 * has (`input`), so the Sessions layer bounds them as it bounds one.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import { INPUT_ENVELOPE_BYTES } from "../../src/domain/Limits.js"
import type { Message } from "../../src/domain/Messages.js"
import { unansweredOf } from "../../src/domain/TranscriptTail.js"
import { carriedBytes, roomRefusal, transcriptRoom } from "../../src/layers/sessions/TranscriptRoom.js"
import { succeedAfter } from "../../src/layers/ToolsInProcess.js"
import type { AgentloopShape, LoopInput } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

const IO = 64 * 1024
const config = { maxWasmIoBytes: IO, maxInputBytes: 4 * 1024 * 1024 }
const user = (content: string): Message => ({ role: "user", content })
const whole: LoopInput = { tailMessages: undefined, configurationRead: true }

type How = "set" | "model" | "dispatch" | "end"

/**
 * A loop whose input message is `<how> <n>`: it saves its transcript with a user message of n
 * characters appended, by `how` (set_transcript, riding on model, riding on dispatch, with its
 * end), and returns what the save answered (`ok` or the error's code) and the transcript it saw.
 */
const saver = (input: LoopInput | undefined): AgentloopShape => ({
  ...(input === undefined ? {} : { input }),
  activate: (activation, host) =>
    Effect.gen(function*() {
      const [how, n] = activation.input!.message.split(" ") as [How, string]
      const next = [...activation.transcript, user("u".repeat(Number(n)))]
      const answer = yield* Effect.either(
        how === "set"
          ? host.setTranscript(next)
          : how === "model"
          ? host.model({ messages: next }, next)
          : how === "dispatch"
          ? host.dispatch([{ id: "c1", name: "t", input: {} }], next)
          : host.setTranscriptAtEnd(next)
      )
      return {
        save: Either.isRight(answer) ? "ok" : answer.left.failure.code,
        details: Either.isLeft(answer) ? answer.left.failure.details ?? null : null,
        seen: activation.transcript.length
      }
    })
})

const layer = runtimeLayer({
  journal: "memory",
  config,
  loops: { whole: saver(whole), tail: saver({ tailMessages: 1, configurationRead: false }), plain: saver(undefined) },
  tools: { t: succeedAfter(0) }
})

describe("the transcript room of a loop's input", () => {
  it("counts the transcript's JSON bytes as the input carries it: the whole array, or the tail, for an append and for a rewrite", () => {
    const room = { bytes: 0, tailMessages: undefined }
    const base = [user("é".repeat(10)), { role: "assistant" as const, content: "", tool_calls: [{ id: "a", name: "t", input: { x: "\u0001" } }] }]
    const appended = [...base, user("b"), { role: "tool" as const, content: "r", tool_call_id: "a" }]
    const rewritten = [user("c"), ...appended.slice(1)]
    expect(carriedBytes(room, base, unansweredOf(base), appended, base.length)).toBe(Buffer.byteLength(JSON.stringify(appended)))
    expect(carriedBytes(room, base, unansweredOf(base), rewritten, 0)).toBe(Buffer.byteLength(JSON.stringify(rewritten)))
    expect(carriedBytes(room, [], [], [], 0)).toBe(2)
    // The tail of one message reaches back to the first unanswered call.
    const tail = { bytes: 0, tailMessages: 1 }
    const open = [...base, user("b")]
    expect(carriedBytes(tail, base, unansweredOf(base), open, base.length)).toBe(Buffer.byteLength(JSON.stringify(open.slice(1))))
    expect(carriedBytes(tail, base, unansweredOf(base), appended, base.length)).toBe(Buffer.byteLength(JSON.stringify(appended.slice(-1))))
  })

  it("leaves BRAIN_MAX_WASM_IO_BYTES less a turn's input (BRAIN_MAX_INPUT_BYTES, at most a quarter), the configuration the loop reads and the envelope", () => {
    const configuration = JSON.stringify({ agentloop: "x", model: { provider: "scripted" } })
    expect(transcriptRoom(config, whole, () => configuration)?.bytes).toBe(IO - IO / 4 - configuration.length - INPUT_ENVELOPE_BYTES)
    expect(transcriptRoom({ ...config, maxInputBytes: 1000 }, { tailMessages: 3, configurationRead: false }, () => configuration))
      .toEqual({ bytes: IO - 1000 - INPUT_ENVELOPE_BYTES, tailMessages: 3 })
    expect(transcriptRoom(config, undefined, () => configuration)).toBeUndefined()
  })

  for (const how of ["set", "model", "dispatch", "end"] as const) {
    it.scopedLive(`a save (${how}) the loop's next input could not carry is refused payload_too_large, nothing journaled; the transcript stays and the next turn runs`, () =>
      Effect.gen(function*() {
        const sessions = yield* Sessions
        const journal = yield* Journal
        const { session_id } = yield* sessions.create({ agentloop: "whole", model: { provider: "scripted" }, tools: [{ name: "t" }] })
        const first = yield* sessions.send(session_id, { message: `${how} 20000` })
        expect(first.turn.status).toBe("ended")
        expect((first.turn as { result: { save: string } }).result.save).toBe("ok")
        const before = yield* Effect.orDie(journal.read(session_id as SessionId, { after: 0, limit: 1000 }))
        const deltas = before.filter((r) => r.kind === "transcript_delta").length

        const refused = yield* sessions.send(session_id, { message: `${how} 30000` })
        // The call answers the refusal (a WebAssembly loop's output save fails its turn with it instead).
        expect((refused.turn as { result: { save: string } }).result.save).toBe("payload_too_large")
        const after = yield* Effect.orDie(journal.read(session_id as SessionId, { after: 0, limit: 1000 }))
        expect(after.filter((r) => r.kind === "transcript_delta").length, "nothing of the save journaled").toBe(deltas)
        // The call the save rode on was not made either.
        expect(after.filter((r) => r.kind === "model_call_started" || r.kind === "tool_call_started").length)
          .toBe(before.filter((r) => r.kind === "model_call_started" || r.kind === "tool_call_started").length)
        expect((yield* sessions.transcript(session_id)).messages).toHaveLength(1)

        const next = yield* sessions.send(session_id, { message: `${how} 100` })
        expect(next.turn.status).toBe("ended")
        expect((next.turn as { result: { save: string; seen: number } }).result).toMatchObject({ save: "ok", seen: 1 })
        expect((yield* sessions.transcript(session_id)).messages).toHaveLength(2)
      }).pipe(Effect.provide(layer)))
  }

  it.scopedLive("a loop that reads the tail is bounded by its tail only: saves past the room in all are taken, one message past it is refused", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ agentloop: "tail", model: { provider: "scripted" } })
      for (let i = 0; i < 4; i++) {
        const turn = yield* sessions.send(session_id, { message: "set 20000" })
        expect((turn.turn as { result: { save: string } }).result.save).toBe("ok")
      }
      const big = yield* sessions.send(session_id, { message: "set 40000" })
      expect((big.turn as { result: { save: string; details: unknown } }).result).toMatchObject({ save: "payload_too_large", details: { limit: expect.any(Number) } })
    }).pipe(Effect.provide(layer)))

  it.scopedLive("a create whose opening transcript the loop could not receive is refused invalid_request naming transcript, and nothing is created; a tail loop and an in-process loop take it", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const opening = [user("x".repeat(40000))]
      const listed = (yield* sessions.list({ limit: 100 })).sessions.length
      const refused = yield* Effect.flip(sessions.create({ agentloop: "whole", model: { provider: "scripted" }, transcript: opening }))
      expect(refused._tag).toBe("InvalidRequest")
      expect((refused as { details?: unknown }).details).toEqual([{ path: ["transcript"], message: expect.stringContaining("BRAIN_MAX_WASM_IO_BYTES") }])
      expect((refused as { details: Array<{ message: string }> }).details[0]!.message).toMatch(/^the opening transcript would be \d+ bytes of JSON/)
      expect((yield* sessions.list({ limit: 100 })).sessions.length).toBe(listed)
      // One that fits is taken, and its turn runs.
      const fits = yield* sessions.create({ agentloop: "whole", model: { provider: "scripted" }, transcript: [user("x".repeat(20000))] })
      expect((yield* sessions.send(fits.session_id, { message: "set 10" })).turn.status).toBe("ended")
      for (const agentloop of ["tail", "plain"]) {
        const taken = yield* sessions.create({ agentloop, model: { provider: "scripted" }, transcript: [...opening, user("y".repeat(100))] })
        expect((yield* sessions.send(taken.session_id, { message: "set 10" })).turn.status, agentloop).toBe("ended")
      }
    }).pipe(Effect.provide(layer)))

  it.scopedLive("a create whose configuration leaves a loop that reads it no room for even an empty transcript is refused invalid_request naming its largest field and the setting, nothing created; a loop that does not read it takes it", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const listed = (yield* sessions.list({ limit: 100 })).sessions.length
      const system = "s".repeat(IO / 2)
      for (const transcript of [undefined, [user("hi")]]) {
        const refused = yield* Effect.flip(sessions.create({
          agentloop: "whole",
          model: { provider: "scripted" },
          system,
          ...(transcript === undefined ? {} : { transcript })
        }))
        expect(refused._tag).toBe("InvalidRequest")
        const details = (refused as { details?: ReadonlyArray<{ path: unknown; message: string }> }).details
        expect(details?.[0]?.path).toEqual(["system"])
        expect(details?.[0]?.message).toContain("BRAIN_MAX_WASM_IO_BYTES")
        expect(details?.[0]?.message, "no negative room").not.toMatch(/-\d/)
      }
      expect((yield* sessions.list({ limit: 100 })).sessions.length).toBe(listed)
      // Below the bound it is taken and a turn saves; a loop that does not read its configuration takes the larger one.
      const fits = yield* sessions.create({ agentloop: "whole", model: { provider: "scripted" }, system: "s".repeat(IO / 8) })
      expect((yield* sessions.send(fits.session_id, { message: "set 10" })).turn.status).toBe("ended")
      const tail = yield* sessions.create({ agentloop: "tail", model: { provider: "scripted" }, system })
      expect((yield* sessions.send(tail.session_id, { message: "set 10" })).turn.status).toBe("ended")
    }).pipe(Effect.provide(layer)))

  it("a save refused in a session whose configuration leaves no room (one created under larger settings) says so, and never names a negative room", () => {
    const room = transcriptRoom(config, whole, () => "c".repeat(IO))!
    const refused = roomRefusal(room, [], [], [user("hi")], 0)
    expect(refused?.code).toBe("payload_too_large")
    expect(refused?.message).toContain("configuration")
    expect(refused?.message).not.toMatch(/-\d/)
    expect(refused?.details).toMatchObject({ limit: 0 })
  })

  it("a save refused for its size points at the section of docs/abi.md that explains the room", () => {
    const room = transcriptRoom(config, whole, () => "{}")!
    const refused = roomRefusal(room, [], [], [user("x".repeat(IO))], 0)
    expect(refused?.code).toBe("payload_too_large")
    expect(refused?.message).toMatch(/BRAIN_MAX_WASM_IO_BYTES leaves it \(docs\/abi\.md, "The transcript's room"\); nothing was saved$/)
  })
})
