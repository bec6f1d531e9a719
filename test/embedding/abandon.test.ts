/**
 * An application's in-process tools, run by the runtime `layer` builds (docs/embedding.md): work
 * Brain does not control is interrupted with a bound. A tool that ignores interruption does not
 * hold the runtime's close, nor another session's send: it is abandoned after the grace and its
 * call recorded unconfirmed. A tool that throws or dies failed (`tool_failed`, with what it
 * threw), which is not a cancellation. The work that ignores interruption waits on a promise the
 * test holds, released only after what is checked: a close or an interrupt that waited for it
 * would never return, and the test's own timeout (a hang guard, not a timing claim) says so.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect, ManagedRuntime } from "effect"
import { layer, Sessions } from "../../src/effect.js"
import type { ToolHandler } from "../../src/layers/ToolsInProcess.js"
import type { JournalRecord } from "../../src/domain/Records.js"
import { Journal } from "../../src/services/Journal.js"
import type { ModelsShape } from "../../src/services/Models.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"

const dirs: Array<string> = []
const freshDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-abandon-"))
  dirs.push(dir)
  return dir
}
/** What releases each promise `held` made, once its test is over. */
const holds: Array<() => void> = []
/** A promise that stays pending until the test releases it (afterEach at the latest). */
const held = () => new Promise<void>((resolve) => void holds.push(resolve))
afterEach(() => {
  for (const release of holds.splice(0)) release()
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

/** A session whose scripted model calls `tool` once, then answers "done". */
const withTool = (tool: string) => ({
  model: { provider: "scripted" as const, replies: [{ tool_calls: [{ name: tool, input: {} }] }, { text: "done" }] },
  tools: [{ name: tool }]
})

const toolOutcome = (records: ReadonlyArray<JournalRecord>) =>
  records.find((r) => r.kind === "tool_call_ended" || r.kind === "tool_call_failed")

/** Waits whatever happens until its test is over: interruption waits for it (a non-abortable native call, say). */
const stubborn: ToolHandler = () => Effect.uninterruptible(Effect.promise(held)).pipe(Effect.as({ outcome: "ok", output: "late" } as const))
/** Never answers, and yields to interruption. */
const hanging: ToolHandler = () => Effect.never

describe("work Brain does not control is interrupted with a bound", () => {
  it("closing the runtime while an in-process tool ignores interruption ends within the stop's bound, records the call unknown (unconfirmed) and answers another session's waiting send", async () => {
    const dataDir = freshDir()
    const runtime = ManagedRuntime.make(layer({ dataDir, cancelGraceMs: 500, cleanupDeadlineMs: 1000 }, { tools: { stubborn, hanging } }))
    const { a, b } = await runtime.runPromise(Effect.gen(function*() {
      const sessions = yield* Sessions
      return { a: (yield* sessions.create(withTool("stubborn"))).session_id, b: (yield* sessions.create(withTool("hanging"))).session_id }
    }))
    const send = (s: string) => runtime.runPromiseExit(Effect.flatMap(Sessions, (sessions) => sessions.send(s as typeof a, { message: "go" })))
    const sendA = send(a)
    const sendB = send(b)
    // Both tools called.
    await runtime.runPromise(Effect.gen(function*() {
      const journal = yield* Journal
      for (let i = 0; i < 2000; i++) {
        const ra = yield* Effect.orDie(journal.read(a, { after: 0, limit: 1000 }))
        const rb = yield* Effect.orDie(journal.read(b, { after: 0, limit: 1000 }))
        if (ra.some((r) => r.kind === "tool_call_started") && rb.some((r) => r.kind === "tool_call_started")) return
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 10)))
      }
      return yield* Effect.dieMessage("the tools were not called")
    }))
    // The stop's own bound is 3 × 500 + 1000 ms; the stubborn tool is held until the test is over,
    // so a close or a send it held would never end.
    await runtime.dispose()
    // The other session's send was answered too, not held by the stubborn tool.
    await Promise.all([sendA, sendB])

    // Reopened: what the journal says.
    const again = ManagedRuntime.make(layer({ dataDir }))
    const [ra, rb] = await again.runPromise(Effect.gen(function*() {
      const journal = yield* Journal
      yield* (yield* Sessions).get(a)
      yield* (yield* Sessions).get(b)
      return [
        yield* Effect.orDie(journal.read(a, { after: 0, limit: 1000 })),
        yield* Effect.orDie(journal.read(b, { after: 0, limit: 1000 }))
      ] as const
    }))
    await again.dispose()
    const outcome = toolOutcome(ra)!
    expect(outcome.kind).toBe("tool_call_failed")
    expect(outcome.payload).toMatchObject({ outcome: "unknown", failure: { code: "unknown", ambiguous: true } })
    expect(ra.some((r) => r.kind === "turn_failed")).toBe(true)
    expect(toolOutcome(rb)!.kind).toBe("tool_call_failed")
  }, 60_000)
})

describe("a model provider the application supplies is interrupted with a bound", () => {
  it("closing the runtime while the application's model call ignores interruption ends within the stop's bound and records the model call failed, ambiguous", async () => {
    const dataDir = freshDir()
    const models = { call: () => Effect.uninterruptible(Effect.promise(held)).pipe(Effect.zipRight(Effect.never)) } as unknown as ModelsShape
    const runtime = ManagedRuntime.make(layer({ dataDir, cancelGraceMs: 500, cleanupDeadlineMs: 1000 }, { models }))
    const s = await runtime.runPromise(Effect.flatMap(Sessions, (sessions) => Effect.map(sessions.create({ model: { provider: "scripted", replies: [{ text: "x" }] } }), (c) => c.session_id)))
    const sent = runtime.runPromiseExit(Effect.flatMap(Sessions, (sessions) => sessions.send(s, { message: "go" })))
    await runtime.runPromise(Effect.gen(function*() {
      const journal = yield* Journal
      for (let i = 0; i < 2000; i++) {
        if ((yield* Effect.orDie(journal.read(s, { after: 0, limit: 1000 }))).some((r) => r.kind === "model_call_started")) return
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 10)))
      }
      return yield* Effect.dieMessage("the model was not called")
    }))
    // The stop's own bound is 3 × 500 + 1000 ms; the call is held until the test is over, so a
    // close that waited for it would never end.
    await runtime.dispose()
    await sent
    const again = ManagedRuntime.make(layer({ dataDir }))
    const records = await again.runPromise(Effect.gen(function*() {
      yield* (yield* Sessions).get(s)
      return yield* Effect.orDie((yield* Journal).read(s, { after: 0, limit: 1000 }))
    }))
    await again.dispose()
    const failed = records.find((r) => r.kind === "model_call_failed")
    expect(failed?.payload).toMatchObject({ failure: { ambiguous: true } })
    expect(records.some((r) => r.kind === "turn_failed")).toBe(true)
  }, 60_000)
})

describe("an in-process tool that throws or dies failed; nothing was cancelled", () => {
  const thrower: ToolHandler = () => {
    throw new Error("tool bug: thrown")
  }
  const dier: ToolHandler = () => Effect.die(new Error("tool bug: died"))
  for (const [name, handler, text] of [["thrower", thrower, "tool bug: thrown"], ["dier", dier, "tool bug: died"]] as const) {
    it(`a ${name === "thrower" ? "synchronously throwing" : "dying (Effect.die)"} handler is recorded tool_call_failed error tool_failed with what it threw, not ambiguous, and the turn goes on`, async () => {
      const dataDir = freshDir()
      const runtime = ManagedRuntime.make(layer({ dataDir, cancelGraceMs: 500, cleanupDeadlineMs: 1000 }, { tools: { [name]: handler } }))
      try {
        const { outcome, records } = await runtime.runPromise(Effect.gen(function*() {
          const sessions = yield* Sessions
          const s = (yield* sessions.create(withTool(name))).session_id
          const outcome = yield* sessions.send(s, { message: "go" })
          const records = yield* Effect.orDie((yield* Journal).read(s, { after: 0, limit: 1000 }))
          return { outcome, records }
        }))
        expect(outcome.turn.status).toBe("ended")
        const recorded = toolOutcome(records)!
        expect(recorded.kind).toBe("tool_call_failed")
        expect(recorded.payload).toMatchObject({ outcome: "error", is_error: true, failure: { code: "tool_failed", ambiguous: false } })
        const message = (recorded.payload as { failure: { message: string } }).failure.message
        expect(message).toContain("threw")
        expect(message).toContain(text)
        expect(message).not.toContain("cancelled")
      } finally {
        await runtime.dispose()
      }
    }, 60_000)
  }
})

/** Waits on the runtime until the session's journal holds a record of `kind`. */
const untilRecorded = (runtime: ManagedRuntime.ManagedRuntime<Journal, unknown>, session: string, kind: string) =>
  runtime.runPromise(Effect.gen(function*() {
    const journal = yield* Journal
    for (let i = 0; i < 2000; i++) {
      if ((yield* Effect.orDie(journal.read(session as never, { after: 0, limit: 1000 }))).some((r) => r.kind === kind)) return
      yield* Effect.promise(() => new Promise((r) => setTimeout(r, 10)))
    }
    return yield* Effect.dieMessage(`no ${kind} was recorded`)
  }))

describe("an application's in-process Agentloop is interrupted with a bound", () => {
  it("closing the runtime while the application's loop ignores interruption ends within the stop's bound, answers the send, and records the turn failed interrupted once, the loop abandoned", async () => {
    const dataDir = freshDir()
    // Uninterruptible for good: only abandoning it lets the runtime close.
    const deaf: AgentloopShape = { activate: () => Effect.uninterruptible(Effect.never) }
    const runtime = ManagedRuntime.make(layer({ dataDir, cancelGraceMs: 500, cleanupDeadlineMs: 1000 }, { loops: { deaf } }))
    const s = await runtime.runPromise(Effect.flatMap(Sessions, (sessions) => Effect.map(sessions.create({ model: { provider: "scripted" }, agentloop: "deaf" }), (c) => c.session_id)))
    const sent = runtime.runPromiseExit(Effect.flatMap(Sessions, (sessions) => sessions.send(s, { message: "go" })))
    await untilRecorded(runtime, s, "activation_started")
    // The stop's own bound is 3 × 500 + 1000 ms; without it, the close would never end.
    await runtime.dispose()
    const answer = await sent
    expect(answer._tag === "Success" && answer.value.turn).toMatchObject({ status: "failed", failure: { code: "interrupted" } })

    const again = ManagedRuntime.make(layer({ dataDir }))
    const records = await again.runPromise(Effect.gen(function*() {
      yield* (yield* Sessions).get(s)
      return yield* Effect.orDie((yield* Journal).read(s, { after: 0, limit: 1000 }))
    }))
    await again.dispose()
    const closes = records.filter((r) => r.kind === "turn_failed" || r.kind === "turn_ended")
    expect(closes).toHaveLength(1)
    expect(closes[0]!.payload).toMatchObject({ failure: { code: "interrupted", message: expect.stringContaining("abandoned") } })
    expect(records.find((r) => r.kind === "activation_failed")?.payload).toMatchObject({ failure: { code: "interrupted" } })
  }, 60_000)

  it("an interrupt of a turn whose loop ignores interruption answers within the grace's bound, records it cancelled, the loop abandoned; the session runs its next turn, and the abandoned loop's later host calls are refused, nothing of them recorded", async () => {
    const dataDir = freshDir()
    let activations = 0
    const late: Array<string> = []
    // The first activation is deaf until the test releases it (after the interrupt and the next
    // turn), then tries a model call and an Event; later ones wait 1 s and answer.
    const deafUntil = held()
    const stubborn: AgentloopShape = {
      activate: (_input, host) =>
        Effect.suspend(() => {
          if (++activations > 1) return Effect.as(Effect.sleep("1 second"), { text: "next" })
          // Wholly uninterruptible: an interrupt that arrived during it would stop the fiber on the way out of a shorter region.
          return Effect.uninterruptible(Effect.promise(() => deafUntil).pipe(
            Effect.zipRight(Effect.either(host.model({ messages: [{ role: "user", content: "late" }] }))),
            Effect.tap((model) => Effect.sync(() => void late.push(model._tag === "Left" ? model.left.failure.code : "model answered"))),
            Effect.zipRight(Effect.either(host.emit("late", {}))),
            Effect.tap((emitted) => Effect.sync(() => void late.push(emitted._tag === "Left" ? emitted.left.failure.code : "emitted"))),
            Effect.as({ text: "late" })
          ))
        })
    }
    const runtime = ManagedRuntime.make(layer({ dataDir, cancelGraceMs: 100, cleanupDeadlineMs: 1000 }, { loops: { stubborn } }))
    try {
      const s = await runtime.runPromise(Effect.flatMap(Sessions, (sessions) => Effect.map(sessions.create({ model: { provider: "scripted" }, agentloop: "stubborn" }), (c) => c.session_id)))
      const sent = runtime.runPromise(Effect.flatMap(Sessions, (sessions) => sessions.send(s, { message: "go" })))
      await untilRecorded(runtime, s, "activation_started")
      // Three graces of 100 ms and an append; an interrupt that waited for the loop would never be
      // answered, the loop being released only below.
      await runtime.runPromise(Effect.flatMap(Sessions, (sessions) => sessions.interrupt(s)))
      const first = await sent
      expect(first.turn).toMatchObject({ status: "failed", failure: { code: "cancelled", message: expect.stringContaining("abandoned") } })
      // The next turn runs while the abandoned loop is still deaf.
      const next = await runtime.runPromise(Effect.flatMap(Sessions, (sessions) => sessions.send(s, { message: "again" })))
      expect(next.turn).toMatchObject({ status: "ended", result: { text: "next" } })
      expect(late, "the abandoned loop has not woken yet").toEqual([])
      // The abandoned loop wakes: its host calls are refused with the cancel's code, nothing journaled.
      for (const release of holds.splice(0)) release()
      while (late.length < 2) await new Promise((r) => setTimeout(r, 50))
      expect(late).toEqual(["cancelled", "cancelled"])
      const records = await runtime.runPromise(Effect.orDie(Effect.flatMap(Journal, (journal) => journal.read(s, { after: 0, limit: 1000 }))))
      expect(records.filter((r) => r.kind === "model_call_started" || r.kind === "extension")).toEqual([])
      expect(records.filter((r) => r.kind === "turn_failed" || r.kind === "turn_ended").map((r) => r.kind)).toEqual(["turn_failed", "turn_ended"])
    } finally {
      await runtime.dispose()
    }
  }, 60_000)
})
