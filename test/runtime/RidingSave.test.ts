/**
 * A save that rides on a call (docs/abi.md, "A save that rides on a call"): `Host.model(request,
 * save)` and `Host.dispatch(calls, save)` save the transcript as `setTranscript(save)` before the
 * call would, but in the same atomic append as the call's first record (the model call's start,
 * the round's starts), so a save before a call costs no commit of its own; a call that answers
 * without appending writes the save on its own first. Either way the save is durable before the
 * answer.
 */
import { describe, expect, it } from "@effect/vitest"
import { type Context, Effect, Either, Layer } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import type { Message } from "../../src/domain/Messages.js"
import { rebuildModelRequest } from "../../src/domain/ModelContext.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { succeedAfter } from "../../src/layers/ToolsInProcess.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

/**
 * The memory journal, recording the kinds of every append; the round of an append holding
 * `failKind` fails as a write failure does (nothing of it written, what was staged with it
 * dropped, the failure sticky).
 */
const recordingJournal = (appends: Array<ReadonlyArray<string>>, failKind?: { kind: string; armed: boolean }) =>
  Layer.scoped(
    Journal,
    Effect.gen(function*() {
      const { control, journal: base } = yield* JournalMemory.make
      const append: JournalShape["append"] = (session, entries, options) =>
        Effect.suspend(() => {
          appends.push(entries.map((e) => e.kind))
          if (failKind?.armed && entries.some((e) => e.kind === failKind.kind)) {
            failKind.armed = false
            control.failNextWrite(session)
          }
          return base.append(session, entries, options)
        })
      return { ...base, append } satisfies JournalShape
    })
  )

const user = (content: string): Message => ({ role: "user", content })
const assistant = (content: string): Message => ({ role: "assistant", content })
const CALLS = [{ id: "c1", name: "t", input: { a: 1 } }, { id: "c2", name: "t", input: { a: 2 } }]
const asking: Message = { role: "assistant", content: "", tool_calls: CALLS }

/**
 * A loop that saves [user, asking] then dispatches CALLS, saves the results then calls the model,
 * each save on its own (`riding` false) or riding on the call after it; it returns what it saw.
 */
const toolRound = (riding: boolean, seen: Array<unknown>): AgentloopShape => ({
  activate: (input, host) =>
    Effect.gen(function*() {
      const request = [...input.transcript, user(input.input!.message), asking]
      if (!riding) yield* host.setTranscript(request)
      const results = yield* host.dispatch(CALLS, riding ? request : undefined)
      const withResults = [...request, ...results.map((r): Message => ({ role: "tool", tool_call_id: r.call_id, content: JSON.stringify(r.output) }))]
      if (!riding) yield* host.setTranscript(withResults)
      const reply = yield* host.model({ messages: withResults }, riding ? withResults : undefined)
      seen.push(withResults)
      yield* host.setTranscriptAtEnd([...withResults, assistant(reply.text)])
      return { text: reply.text }
    })
})

const recordsOf = (journal: JournalShape, session: SessionId) => Effect.orDie(journal.read(session, { after: 0, limit: 1_000 }))

const withTools = { model: { provider: "scripted" as const }, tools: [{ name: "t" }] }

describe("a save riding on a call", () => {
  it.scopedLive("rides on the round's starts and on the model call's start: two appends fewer than saving on its own, the same records, and the transcript reads back", () => {
    const appends: Array<ReadonlyArray<string>> = []
    const seen: Array<unknown> = []
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const counts = {} as Record<"separate" | "riding", number>
      const kinds = {} as Record<"separate" | "riding", Array<string>>
      for (const loop of ["separate", "riding"] as const) {
        const { session_id } = yield* sessions.create({ agentloop: loop, ...withTools })
        appends.length = 0
        const outcome = yield* sessions.send(session_id, { message: "hello" })
        expect(outcome.turn.status, loop).toBe("ended")
        counts[loop] = appends.length
        const records = yield* recordsOf(journal, session_id as SessionId)
        kinds[loop] = records.map((r) => r.kind)
        const text = (outcome.turn as { result?: { text?: string } }).result?.text ?? ""
        expect((yield* sessions.transcript(session_id)).messages, loop).toEqual([...(seen.at(-1) as Array<Message>), assistant(text)])
      }
      // The same records in the same order; the saves are written ahead of the calls' first records.
      expect(kinds.riding).toEqual(kinds.separate)
      const at = kinds.riding.indexOf("tool_call_started")
      expect(kinds.riding.slice(at - 1, at + 2)).toEqual(["transcript_delta", "tool_call_started", "tool_call_started"])
      const model = kinds.riding.lastIndexOf("model_call_started")
      expect(kinds.riding[model - 1]).toBe("transcript_delta")
      expect(counts.riding).toBe(counts.separate - 2)
      // No append of the riding turn is a save on its own.
      expect(appends.some((a) => a.length === 1 && a[0] === "transcript_delta")).toBe(false)
    }).pipe(Effect.provide(runtimeLayer({
      journal: recordingJournal(appends),
      loops: { separate: toolRound(false, seen), riding: toolRound(true, seen) },
      tools: { t: succeedAfter(0) }
    })))
  })

  it.scopedLive("a model call's context counts from the save that rode on it: through_sequence is the save's record, the delta is empty, and the request rebuilds from the journal", () => {
    const seen: Array<unknown> = []
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "riding", ...withTools })
      yield* sessions.send(session_id, { message: "hello" })
      const records = yield* recordsOf(journal, session_id as SessionId)
      const started = records.filter((r) => r.kind === "model_call_started").at(-1)!
      const save = records.find((r) => r.sequence === started.sequence - 1)!
      expect(save.kind).toBe("transcript_delta")
      const payload = started.payload as { context: { through_sequence: number; delta: unknown }; message_count: number }
      expect(payload.context.through_sequence).toBe(save.sequence)
      expect(payload.context.delta).toEqual({ keep: 4, append: [] })
      expect(rebuildModelRequest(records, started.sequence)?.messages).toEqual(seen.at(-1))
    }).pipe(Effect.provide(runtimeLayer({ journal: "memory", loops: { riding: toolRound(true, seen) }, tools: { t: succeedAfter(0) } })))
  })

  it.scopedLive("is durable with the call's start or not at all: a start append that fails leaves no transcript_delta, and the call answers journal_write_failed", () => {
    const appends: Array<ReadonlyArray<string>> = []
    const fail = { kind: "tool_call_started", armed: false }
    const answers: Array<string> = []
    const readDuring: Array<number> = []
    const loop: AgentloopShape = {
      activate: (input, host) =>
        Effect.gen(function*() {
          // A model call first: the turn's staged opening is written with its start, so nothing is staged or in flight after it.
          yield* host.model({ messages: [...input.transcript, user(input.input!.message)] })
          const r = yield* Effect.either(host.dispatch(CALLS, [...input.transcript, user(input.input!.message), asking]))
          answers.push(Either.isLeft(r) ? r.left.failure.code : "ok")
          // Read while the turn still holds the session in memory: the save is not shown.
          const during = yield* Effect.either(durable.sessions!.transcript(durable.session!))
          readDuring.push(Either.isRight(during) ? during.right.messages.length : -1)
          return { text: "after the failure" }
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "failing", ...withTools })
      Object.assign(durable, { sessions, session: session_id as SessionId })
      fail.armed = true
      const outcome = yield* sessions.send(session_id, { message: "hello" })
      expect(answers).toEqual(["journal_write_failed"])
      // Read during the turn: refused (the journal refuses after the failed write: -1) or without
      // the two messages the failed save held; never showing them.
      expect(readDuring).toHaveLength(1)
      expect(readDuring[0]).toBeLessThan(2)
      expect(outcome.turn.status).toBe("failed")
      expect(appends.some((a) => a.includes("tool_call_started"))).toBe(true)
      const kinds = (yield* recordsOf(journal, session_id as SessionId)).map((r) => r.kind)
      expect(kinds).not.toContain("transcript_delta")
      expect(kinds).not.toContain("tool_call_started")
      // Nor does anything read it back: the save was never folded into what the session shows.
      expect((yield* sessions.transcript(session_id)).messages).toEqual([])
    }).pipe(Effect.provide(runtimeLayer({ journal: recordingJournal(appends, fail), loops: { failing: loop }, tools: { t: succeedAfter(0) } })))
  })

  it.scopedLive("a call that answers without appending (refused at the model call limit, an empty dispatch) writes the save on its own before it answers", () => {
    const answers: Array<string> = []
    /** The durable transcript's length when each call answered. */
    const saved: Array<number> = []
    const loop: AgentloopShape = {
      activate: (input, host) =>
        Effect.gen(function*() {
          const first = [...input.transcript, user(input.input!.message)]
          yield* host.model({ messages: first })
          // The second model call passes BRAIN_MAX_MODEL_CALLS (1): refused before anything of it is journaled.
          const second = [...first, assistant("one")]
          const refused = yield* Effect.either(host.model({ messages: second }, second))
          answers.push(Either.isLeft(refused) ? refused.left.failure.code : "ok")
          saved.push(yield* durableTranscriptLength())
          const third = [...second, user("more")]
          const empty = yield* Effect.either(host.dispatch([], third))
          answers.push(Either.isLeft(empty) ? empty.left.failure.code : "ok")
          saved.push(yield* durableTranscriptLength())
          return { text: "done" }
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "refused", ...withTools })
      durable.journal = journal
      durable.session = session_id as SessionId
      const outcome = yield* sessions.send(session_id, { message: "hello" })
      expect(outcome.turn.status).toBe("ended")
      expect(answers).toEqual(["model_call_limit", "ok"])
      expect(saved).toEqual([2, 3])
      const kinds = (yield* recordsOf(journal, session_id as SessionId)).map((r) => r.kind)
      expect(kinds.filter((k) => k === "transcript_delta")).toHaveLength(2)
      expect(kinds.filter((k) => k === "model_call_started")).toHaveLength(1)
      expect((yield* sessions.transcript(session_id)).messages).toEqual([user("hello"), assistant("one"), user("more")])
    }).pipe(Effect.provide(runtimeLayer({ journal: "memory", config: { maxModelCalls: 1 }, loops: { refused: loop }, tools: { t: succeedAfter(0) } })))
  })
})

/** The journal and session a loop reads back from (set by the test before its turn). */
const durable: { journal?: JournalShape; session?: SessionId; sessions?: Context.Tag.Service<typeof Sessions> } = {}

/** How many messages the durable journal's transcript has now: its transcript_delta records folded. */
const durableTranscriptLength = (): Effect.Effect<number> =>
  Effect.map(recordsOf(durable.journal!, durable.session!), (records) =>
    records.filter((r) => r.kind === "transcript_delta").reduce((_, r) => {
      const d = r.payload as { keep: number; append: ReadonlyArray<unknown> }
      return d.keep + d.append.length
    }, 0))
