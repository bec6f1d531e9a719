/**
 * A turn's closing records are folded, and its outcome made, while their append is in flight,
 * once the journal has given them their sequences (`Journal.enqueue`'s `sequenced`, Cell.ts
 * `commitQueueable`); what was made ahead is installed only when the append is durable, and
 * dropped when it fails, which breaks the cell and answers as a failed close always has
 * (docs/benchmarks.md, "One session's keyed turn, stop 66").
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, HashMap, Layer, Option } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { empty } from "../../src/domain/Projection.js"
import { entry, type Entry } from "../../src/domain/Records.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { Cell, cellFolds, commitQueueable } from "../../src/layers/sessions/Cell.js"
import {
  type EnqueueOptions,
  Journal,
  type JournalAppendError,
  type JournalShape,
  JournalWriteFailed
} from "../../src/services/Journal.js"
import { Sessions, type TurnOutcome } from "../../src/services/Sessions.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

type Done = (exit: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void

/** A journal whose `enqueue` is the test's: it records each call, to answer it by hand. */
const handJournal = () => {
  const calls: Array<{ entries: ReadonlyArray<Entry>; done: Done; options: EnqueueOptions | undefined }> = []
  const journal = {
    enqueue: (_session: unknown, entries: ReadonlyArray<Entry>, done: Done, options?: EnqueueOptions) => {
      calls.push({ entries, done, options })
      return true
    }
  } as unknown as JournalShape
  return { journal, calls }
}

const closing = (turn: number, activation: number): ReadonlyArray<Entry> => [
  entry("activation_ended", { sequence: activation, result: "hi" }),
  entry("turn_ended", { sequence: turn, result: "hi" })
]

describe("a turn's close made while its append is in flight", () => {
  it("the fold made ahead changes nothing in the cell until the append is durable, and is then the cell's state with the same sequences", () => {
    const { journal, calls } = handJournal()
    const cell = new Cell("s-ahead" as never, empty)
    const before = cell.state
    const seen: Array<string> = []
    const queueable = commitQueueable(journal, cell, closing(1, 2), (sequences, state) => {
      seen.push(`ahead ${sequences.join(",")}`)
      expect(state.lastSequence).toBe(4)
    })
    expect(queueable.enqueue(() => seen.push("done"))).toBe(true)
    const call = calls[0]!
    expect(call.options?.sequenced).toBeDefined()
    call.options!.sequenced!([3, 4])
    expect(seen).toEqual(["ahead 3,4"])
    // Provisional: nothing read from the cell shows it.
    expect(cell.state).toBe(before)
    call.done(Exit.succeed([3, 4]))
    expect(seen).toEqual(["ahead 3,4", "done"])
    expect(cell.state.lastSequence).toBe(4)
    expect(cell.broken).toBe(false)
  })

  it("a failed append drops what was made ahead and breaks the cell, its state as it was", () => {
    const { journal, calls } = handJournal()
    const cell = new Cell("s-ahead" as never, empty)
    const before = cell.state
    let exit: Exit.Exit<ReadonlyArray<number>, JournalAppendError> | undefined
    commitQueueable(journal, cell, closing(1, 2), () => {}).enqueue((e) => void (exit = e))
    calls[0]!.options!.sequenced!([3, 4])
    calls[0]!.done(Exit.fail(new JournalWriteFailed({ session: "s-ahead", reason: "injected" })))
    expect(exit !== undefined && Exit.isFailure(exit)).toBe(true)
    expect(cell.state).toBe(before)
    expect(cell.broken).toBe(true)
    expect(cell.brokenBy).toMatch(/injected/)
  })

  it("a fold made ahead is not installed when the cell changed meanwhile or the sequences differ: the records are folded as they landed", () => {
    const { journal, calls } = handJournal()
    const cell = new Cell("s-ahead" as never, empty)
    commitQueueable(journal, cell, closing(1, 2)).enqueue(() => {})
    calls[0]!.options!.sequenced!([3, 4])
    calls[0]!.done(Exit.succeed([5, 6]))
    expect(cell.state.lastSequence).toBe(6)
    const other = new Cell("s-ahead" as never, empty)
    commitQueueable(journal, other, closing(1, 2)).enqueue(() => {})
    calls[1]!.options!.sequenced!([3, 4])
    other.foldIn([[3, entry("kv_put", { key: "k", value: 1 })]])
    calls[1]!.done(Exit.succeed([4, 5]))
    expect(other.state.lastSequence).toBe(5)
  })

  it("a fence's records folded ahead (cellFolds) leave the cell as it was until committed, and then as foldIn leaves it; other sequences or a changed cell fold as they landed", () => {
    const records = closing(1, 2)
    const plain = new Cell("s-ahead" as never, empty)
    plain.foldIn([[3, records[0]!], [4, records[1]!]])
    const cell = new Cell("s-ahead" as never, empty)
    const folds = cellFolds(cell)
    folds.ahead([[3, records[0]!], [4, records[1]!]])
    expect(cell.state).toBe(empty)
    folds.committed([[3, records[0]!], [4, records[1]!]])
    expect(cell.state).toEqual(plain.state)
    const other = new Cell("s-ahead" as never, empty)
    const otherFolds = cellFolds(other)
    otherFolds.ahead([[3, records[0]!], [4, records[1]!]])
    otherFolds.committed([[5, records[0]!], [6, records[1]!]])
    expect(other.state.lastSequence).toBe(6)
    const changed = new Cell("s-ahead" as never, empty)
    const changedFolds = cellFolds(changed)
    changedFolds.ahead([[4, records[0]!], [5, records[1]!]])
    changed.foldIn([[3, entry("kv_put", { key: "k", value: 1 })]])
    changedFolds.committed([[4, records[0]!], [5, records[1]!]])
    expect(changed.state.lastSequence).toBe(5)
    expect(HashMap.get(changed.state.kv, "k")).toEqual(Option.some(1))
  })

  it.scopedLive("while a keyed turn's closing append is held, the session shows the turn running and a retry of its key is in flight; once durable the answer is the one its replay gives, byte for byte; a failed close answers journal_write_failed, ambiguous", () =>
    Effect.gen(function*() {
      let hold: "hold" | "fail" | undefined
      const held: Array<() => void> = []
      let closedAt = 0
      const closes = (entries: ReadonlyArray<Entry>) => entries.some((e) => e.kind === "turn_ended" || e.kind === "turn_failed")
      const journal = Layer.scoped(
        Journal,
        Effect.map(JournalMemory.make, ({ journal }): JournalShape => ({
          ...journal,
          enqueue: (session, entries, done, options) =>
            journal.enqueue!(session, entries, (exit) => {
              if (closes(entries) && Exit.isSuccess(exit)) closedAt = exit.value[exit.value.length - 1]!
              if (hold === undefined || !closes(entries)) return done(exit)
              const how = hold
              held.push(() =>
                done(how === "fail" ? Exit.fail(new JournalWriteFailed({ session, reason: "injected after the write" })) : exit)
              )
            }, options)
        }))
      )
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const id = (yield* sessions.create({ model: { provider: "scripted" } })).session_id
        yield* untilIdle(id)
        const key = { key: `k-${yield* mintSessionId}`, hash: "h" }
        hold = "hold"
        const send = yield* Effect.fork(sessions.sendKeyed(id, { message: "hello" }, key))
        for (let i = 0; i < 2000 && held.length === 0; i++) yield* Effect.sleep(1)
        expect(held.length).toBe(1)
        // Durable or not, the close is not shown before the journal says it is.
        expect((yield* sessions.get(id)).status).toBe("running")
        const retry = yield* Effect.either(sessions.sendKeyed(id, { message: "hello" }, key))
        expect(retry._tag === "Right" ? retry.right : retry.left).toMatchObject({ _tag: "Ambiguous", inFlight: true })
        hold = undefined
        held.shift()!()
        const answered = yield* send.await
        expect(Exit.isSuccess(answered)).toBe(true)
        const first = (answered as Exit.Success<{ _tag: string; value: TurnOutcome }, never>).value
        expect(first._tag).toBe("Answered")
        const summary = yield* sessions.get(id)
        expect(first.value.last_sequence).toBe(summary.last_sequence)
        const replay = yield* sessions.sendKeyed(id, { message: "hello" }, key)
        expect(replay._tag).toBe("Answered")
        expect(JSON.stringify((replay as { value: TurnOutcome }).value)).toBe(JSON.stringify(first.value))
        yield* untilIdle(id)

        // The same close failing after its fold was made: the answer every failed close gives.
        hold = "fail"
        const failing = yield* Effect.fork(sessions.sendKeyed(id, { message: "again" }, { key: `k-${yield* mintSessionId}`, hash: "h" }))
        for (let i = 0; i < 2000 && held.length === 0; i++) yield* Effect.sleep(1)
        hold = undefined
        held.shift()!()
        const failed = yield* failing.await
        expect(Exit.isSuccess(failed)).toBe(true)
        const outcome = (failed as Exit.Success<{ _tag: string; value: TurnOutcome }, never>).value.value
        expect(outcome.turn.status).toBe("failed")
        expect(outcome.turn.failure).toMatchObject({ code: "journal_write_failed", ambiguous: true })
        expect(outcome.turn.failure?.message).toMatch(/^the turn's end could not be recorded: .*injected after the write$/)
        // What was made ahead was dropped: the outcome names the end the cell had, not the close's.
        expect(outcome.last_sequence).toBeLessThan(closedAt)
        expect(outcome.last_sequence).toBeGreaterThan(summary.last_sequence)
        yield* untilIdle(id)
      }).pipe(Effect.provide(runtimeLayer({ journal })))
    }))
})
