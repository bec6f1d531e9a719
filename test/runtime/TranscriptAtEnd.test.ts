/**
 * `Host.setTranscriptAtEnd`: a loop's last save goes into the turn's closing append (the Wasm
 * official loop's `{"ok", "transcript"}` output takes this path), so a text turn costs one durable
 * commit fewer, and the transcript and the turn's close are durable together or not at all.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import type { Message } from "../../src/domain/Messages.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Journal, type JournalShape, JournalWriteFailed } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

/** The memory journal, recording the kinds of every append; an append holding `failKind` fails unwritten. */
const recordingJournal = (appends: Array<ReadonlyArray<string>>, failKind?: { kind: string; armed: boolean }) =>
  Layer.scoped(
    Journal,
    Effect.gen(function*() {
      const { journal: base } = yield* JournalMemory.make
      const append: JournalShape["append"] = (session, entries, options) =>
        Effect.suspend(() => {
          appends.push(entries.map((e) => e.kind))
          if (failKind?.armed && entries.some((e) => e.kind === failKind.kind)) {
            failKind.armed = false
            return Effect.fail(new JournalWriteFailed({ session, reason: "injected: the closing append was not written" }))
          }
          return base.append(session, entries, options)
        })
      return { ...base, append } satisfies JournalShape
    })
  )

const user = (content: string): Message => ({ role: "user", content })
const assistant = (content: string): Message => ({ role: "assistant", content })

/** Saves [user, answer] one way or the other, then returns the answer. */
const answering = (atEnd: boolean): AgentloopShape => ({
  activate: (input, host) =>
    Effect.gen(function*() {
      const reply = yield* host.model({ messages: [...input.transcript, user(input.input!.message)] })
      const next = [...input.transcript, user(input.input!.message), assistant(reply.text)]
      yield* atEnd ? host.setTranscriptAtEnd(next) : host.setTranscript(next)
      return { text: reply.text }
    })
})

const kindsOf = (journal: JournalShape, session: SessionId) =>
  Effect.map(Effect.orDie(journal.read(session, { after: 0, limit: 1_000 })), (rs) => rs.map((r) => r.kind))

describe("a transcript saved with the activation's end", () => {
  it.scopedLive("rides on the turn's closing append: transcript_delta, activation_ended and turn_ended in one append, one fewer than a separate save, and it reads back", () => {
    const appends: Array<ReadonlyArray<string>> = []
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const turnAppends = {} as Record<"separate" | "atEnd", Array<ReadonlyArray<string>>>
      for (const loop of ["separate", "atEnd"] as const) {
        const { session_id } = yield* sessions.create({ agentloop: loop, model: { provider: "scripted" } })
        appends.length = 0
        const outcome = yield* sessions.send(session_id, { message: "hello" })
        expect(outcome.turn.status, loop).toBe("ended")
        turnAppends[loop] = [...appends]
        const text = (outcome.turn as { result?: { text?: string } }).result?.text ?? ""
        expect((yield* sessions.transcript(session_id)).messages, loop).toEqual([user("hello"), assistant(text)])
        expect(yield* kindsOf(journal, session_id as SessionId), loop).toContain("transcript_delta")
      }
      expect(turnAppends.atEnd.at(-1)).toEqual(["transcript_delta", "activation_ended", "turn_ended"])
      expect(turnAppends.separate.at(-1)).toEqual(["activation_ended", "turn_ended"])
      expect(turnAppends.atEnd.length).toBe(turnAppends.separate.length - 1)
    }).pipe(Effect.provide(runtimeLayer({ journal: recordingJournal(appends), loops: { separate: answering(false), atEnd: answering(true) } })))
  })

  it.scopedLive("is durable with the close or not at all: a closing append that fails leaves no transcript_delta, and the turn fails journal_write_failed", () => {
    const appends: Array<ReadonlyArray<string>> = []
    const fail = { kind: "turn_ended", armed: false }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "atEnd", model: { provider: "scripted" } })
      fail.armed = true
      const outcome = yield* sessions.send(session_id, { message: "hello" })
      expect(outcome.turn.status).toBe("failed")
      expect(outcome.turn.failure?.code).toBe("journal_write_failed")
      expect(appends.at(-1)).toEqual(["transcript_delta", "activation_ended", "turn_ended"])
      expect(yield* kindsOf(journal, session_id as SessionId)).not.toContain("transcript_delta")
    }).pipe(Effect.provide(runtimeLayer({ journal: recordingJournal(appends, fail), loops: { atEnd: answering(true) } })))
  })

  it.scopedLive("ends the loop's host calls: any call after it fails invalid_request, and the saved transcript is still the turn's", () => {
    const seen: Array<string> = []
    const loop: AgentloopShape = {
      activate: (input, host) =>
        Effect.gen(function*() {
          yield* host.setTranscriptAtEnd([...input.transcript, user(input.input!.message)])
          for (const call of [host.kvPut("k", 1), host.setTranscript([]), host.setTranscriptAtEnd([])] as const) {
            const r = yield* Effect.either(call)
            seen.push(Either.isLeft(r) ? r.left.failure.code : "ok")
          }
          return { text: "done" }
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ agentloop: "late", model: { provider: "scripted" } })
      const outcome = yield* sessions.send(session_id, { message: "hello" })
      expect(outcome.turn.status).toBe("ended")
      expect(seen).toEqual(["invalid_request", "invalid_request", "invalid_request"])
      expect((yield* sessions.transcript(session_id)).messages).toEqual([user("hello")])
    }).pipe(Effect.provide(runtimeLayer({ journal: "memory", loops: { late: loop } })))
  })

  it.scopedLive("a transcript the journal refuses (past the frame maximum) fails the turn invalid_request, closes it, and records no transcript_delta", () => {
    const loop: AgentloopShape = {
      activate: (input, host) =>
        Effect.gen(function*() {
          yield* host.setTranscriptAtEnd([...input.transcript, user("x".repeat(65 * 1024 * 1024))])
          return { text: "never the turn's" }
        })
    }
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({ agentloop: "huge", model: { provider: "scripted" } })
      const outcome = yield* sessions.send(session_id, { message: "hello" })
      expect(outcome.turn.status).toBe("failed")
      expect(outcome.turn.failure?.code).toBe("invalid_request")
      expect(outcome.turn.failure?.message).toMatch(/^the transcript could not be saved: /)
      const kinds = yield* kindsOf(journal, session_id as SessionId)
      expect(kinds).not.toContain("transcript_delta")
      expect(kinds.slice(-2)).toEqual(["activation_failed", "turn_failed"])
      expect((yield* sessions.get(session_id)).status).toBe("idle")
    }).pipe(Effect.provide(runtimeLayer({ journal: "memory", loops: { huge: loop } })))
  })
})
