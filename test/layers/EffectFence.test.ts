/**
 * The fence's outcome commit and BRAIN_CLEANUP_DEADLINE_MS (DESIGN §3; seed "Effects happen after
 * commit"): the caller gets the dispatch's result only once its outcome is durable; an outcome the
 * journal has not acknowledged in time fails the fence with OutcomeUnrecorded, and the append
 * still lands (or fails) afterwards, which `settled` reports. The memory journal is wrapped so that
 * the outcome append is held until the test lets it go.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Duration, Effect, Either, Exit, Fiber, FiberId, Layer, Option } from "effect"
import { failure } from "../../src/domain/Failure.js"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry, type Entry } from "../../src/domain/Records.js"
import * as EffectFenceJournal from "../../src/layers/EffectFenceJournal.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import type { Dispatching, FenceHooks } from "../../src/services/EffectFence.js"
import { Journal, type JournalAppendError, type JournalShape, JournalWriteFailed } from "../../src/services/Journal.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"

/** A memory journal whose appends of `kind` wait for `release` (once `reached` says they arrived). */
const holding = (kind: string) =>
  Effect.gen(function*() {
    const { journal: base } = yield* JournalMemory.make
    const reached = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const journal: JournalShape = {
      ...base,
      append: (session, entries, options) =>
        entries.some((e) => e.kind === kind)
          ? Deferred.succeed(reached, undefined).pipe(
            Effect.zipRight(Deferred.await(release)),
            Effect.zipRight(base.append(session, entries, options))
          )
          : base.append(session, entries, options)
    }
    const session = yield* mintSessionId
    yield* base.create(session)
    yield* base.append(session, [entry("session_creation_started", { configuration: { agentloop: "official", model: "m" } })])
    return { journal, base, session, reached, release }
  })

const fenceWith = (journal: JournalShape, cleanupDeadlineMs: number) =>
  EffectFenceJournal.make.pipe(
    Effect.provide(Layer.merge(Layer.succeed(Journal, journal), ServerConfig.layerWith({ cleanupDeadlineMs })))
  )

const started = entry("tool_call_started", { tool: "t", call_id: "c1", input: null, deadline_at_ms: 0 })
const ended = (sequence: number): Entry => entry("tool_call_ended", { sequence, outcome: "ok", output: { secret: 42 }, is_error: false })

describe("EffectFence: the outcome commit and the cleanup deadline", () => {
  it.scopedLive("an outcome not durable within the deadline fails the fence with OutcomeUnrecorded (even for an uninterruptible caller), never returns the result, and settles when the append lands", () =>
    Effect.gen(function*() {
      const h = yield* holding("tool_call_ended")
      const fence = yield* fenceWith(h.journal, 100)
      const unsettled: Array<Effect.Effect<void>> = []
      const folded: Array<number> = []
      const hooks: FenceHooks = { committed: (es) => es.forEach(([s]) => folded.push(s)), unrecorded: (s) => void unsettled.push(s) }
      // The append is held until released below: a fence that waited for it would never answer.
      const result = yield* Effect.either(
        Effect.uninterruptible(fence.fence(h.session, started, () => Effect.succeed({ secret: 42 }), ended, hooks))
      )
      expect(result._tag === "Left" && result.left._tag === "OutcomeUnrecorded" && result.left.started).toBe(2)
      expect(unsettled).toHaveLength(1)
      expect(folded).toEqual([2]) // the started record only

      // The append is still on its way: `settled` waits for it, and it lands once released.
      const settling = yield* Effect.fork(unsettled[0]!)
      expect(Option.isNone(yield* Fiber.poll(settling).pipe(Effect.delay(Duration.millis(50))))).toBe(true)
      yield* Deferred.succeed(h.release, undefined)
      yield* Fiber.join(settling)
      const records = yield* h.base.read(h.session, { after: 0, limit: 10 })
      expect(records.map((r) => r.kind)).toEqual(["session_creation_started", "tool_call_started", "tool_call_ended"])
    }))

  it.scopedLive("an interrupted caller does not leave before its outcome is durable: the interruption waits for the append (within the deadline)", () =>
    Effect.gen(function*() {
      const h = yield* holding("tool_call_ended")
      const fence = yield* fenceWith(h.journal, 5_000)
      const folded: Array<number> = []
      const fiber = yield* Effect.fork(
        fence.fence(h.session, started, () => Effect.succeed({ secret: 42 }), ended, { committed: (es) => es.forEach(([s]) => folded.push(s)) })
      )
      yield* Deferred.await(h.reached)
      const interrupting = yield* Effect.fork(Fiber.interrupt(fiber))
      yield* Effect.sleep(Duration.millis(100))
      // Still waiting for the outcome, although interrupted.
      expect(Option.isNone(yield* Fiber.poll(interrupting))).toBe(true)
      yield* Deferred.succeed(h.release, undefined)
      const exit = yield* Fiber.join(interrupting)
      expect(Exit.isSuccess(exit) || Exit.isInterrupted(exit)).toBe(true)
      expect(folded).toEqual([2, 3])
      const records = yield* h.base.read(h.session, { after: 0, limit: 10 })
      expect(records.at(-1)?.kind).toBe("tool_call_ended")
    }))

  it.scopedLive("with BRAIN_CLEANUP_DEADLINE_MS at 0 the fence waits for its outcome however long the journal takes", () =>
    Effect.gen(function*() {
      const h = yield* holding("tool_call_ended")
      const fence = yield* fenceWith(h.journal, 0)
      const fiber = yield* Effect.fork(fence.fence(h.session, started, () => Effect.succeed({ secret: 42 }), ended))
      yield* Deferred.await(h.reached)
      yield* Effect.sleep(Duration.millis(200))
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      yield* Deferred.succeed(h.release, undefined)
      const fenced = yield* Fiber.join(fiber)
      expect(fenced.outcome).toBe(3)
      expect(Exit.isSuccess(fenced.exit) && fenced.exit.value).toEqual({ secret: 42 })
    }))
})

/** A memory journal that records the kinds of each append (appended one by one, never queued). */
const counting = Effect.gen(function*() {
  const { journal: base } = yield* JournalMemory.make
  const appends: Array<ReadonlyArray<string>> = []
  // Without `enqueue`: a journal that offers none has every append go through `append`.
  const { enqueue: _queued, ...appendOnly } = base
  const journal: JournalShape = {
    ...appendOnly,
    append: (session, entries, options) => Effect.suspend(() => {
      appends.push(entries.map((e) => e.kind))
      return base.append(session, entries, options)
    })
  }
  const session = yield* mintSessionId
  yield* base.create(session)
  yield* base.append(session, [entry("session_creation_started", { configuration: { agentloop: "official", model: "m" } })])
  return { journal, base, session, appends }
})
const startedOf = (id: string) => entry("tool_call_started", { tool: "t", call_id: id, input: null, deadline_at_ms: 0 })

describe("EffectFence.fenceAll: effects that start together", () => {
  const kinds = (records: ReadonlyArray<{ readonly kind: string }>) => records.map((r) => r.kind)

  it.scopedLive("every start is durable, in one append, before any effect is dispatched; outcomes follow each dispatch and answers come in order", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      const seenAtDispatch: Array<ReadonlyArray<string>> = []
      const folded: Array<number> = []
      const effects = ["a", "b", "c"].map((id, i) => ({
        started: startedOf(id),
        dispatch: (seq: number) =>
          j.base.read(j.session, { after: 0, limit: 100 }).pipe(
            Effect.orDie,
            Effect.tap((records) => void seenAtDispatch.push(kinds(records))),
            // The later calls end first: each outcome is its own, whenever it comes.
            Effect.zipRight(Effect.sleep(Duration.millis(30 - 10 * i))),
            Effect.as(`${id}@${seq}`)
          ),
        outcome: (seq: number, exit: Exit.Exit<string>) =>
          entry("tool_call_ended", { sequence: seq, outcome: "ok", output: Exit.isSuccess(exit) ? exit.value : null, is_error: false })
      }))
      const fenced = yield* fence.fenceAll(j.session, effects, { committed: (es) => es.forEach(([s]) => folded.push(s)) })
      expect(j.appends[0]).toEqual(["tool_call_started", "tool_call_started", "tool_call_started"])
      expect(j.appends.slice(1)).toEqual([["tool_call_ended"], ["tool_call_ended"], ["tool_call_ended"]])
      for (const seen of seenAtDispatch) expect(seen).toEqual(["session_creation_started", "tool_call_started", "tool_call_started", "tool_call_started"])
      expect(fenced.map((f) => f.started)).toEqual([2, 3, 4])
      expect(fenced.map((f) => Exit.isSuccess(f.exit) && f.exit.value)).toEqual(["a@2", "b@3", "c@4"])
      expect(new Set(fenced.map((f) => f.outcome))).toEqual(new Set([5, 6, 7]))
      expect(folded.slice(0, 3)).toEqual([2, 3, 4])
      expect(folded.slice(3).sort()).toEqual([5, 6, 7])
    }))

  it.scopedLive("a start the journal refuses refuses them all: nothing appended, nothing dispatched", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      let dispatched = 0
      const effect = (started: Entry) => ({
        started,
        dispatch: () => Effect.sync(() => void dispatched++),
        outcome: (seq: number) => ended(seq)
      })
      const refused = { kind: "no_such_kind", payload: {} } as unknown as Entry
      const result = yield* Effect.either(fence.fenceAll(j.session, [effect(startedOf("a")), effect(refused)]))
      expect(result._tag).toBe("Left")
      expect(dispatched).toBe(0)
      expect(kinds(yield* j.base.read(j.session, { after: 0, limit: 100 }))).toEqual(["session_creation_started"])
    }))

  it.scopedLive("an interrupted caller interrupts every dispatch and leaves only once every outcome is durable", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      const running = yield* Deferred.make<void>()
      let started = 0
      const effects = ["a", "b"].map((id) => ({
        started: startedOf(id),
        dispatch: () =>
          Effect.suspend(() => (++started === 2 ? Deferred.succeed(running, undefined) : Effect.void)).pipe(Effect.zipRight(Effect.never)),
        outcome: (seq: number, exit: Exit.Exit<never>, dispatched: boolean) =>
          entry("tool_call_failed", {
            sequence: seq,
            outcome: "cancelled",
            failure: failure("cancelled", Exit.isInterrupted(exit) && dispatched ? "interrupted" : "other"),
            is_error: true
          })
      }))
      const fiber = yield* Effect.fork(fence.fenceAll(j.session, effects))
      yield* Deferred.await(running)
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
      const records = yield* j.base.read(j.session, { after: 0, limit: 100 })
      expect(kinds(records)).toEqual(["session_creation_started", "tool_call_started", "tool_call_started", "tool_call_failed", "tool_call_failed"])
      expect(records.slice(3).map((r) => (r.payload as { failure: { message: string } }).failure.message)).toEqual(["interrupted", "interrupted"])
    }))
})

/** An effect's outcome record: its value when it succeeded, else how it ended (and whether it was dispatched). */
const outcomeOf = (seq: number, exit: Exit.Exit<string>, dispatched: boolean): Entry =>
  Exit.isSuccess(exit)
    ? entry("tool_call_ended", { sequence: seq, outcome: "ok", output: exit.value, is_error: false })
    : entry("tool_call_failed", {
      sequence: seq,
      outcome: "unknown",
      failure: failure("unknown", `${Exit.isInterrupted(exit) ? "interrupted" : "died"}${dispatched ? ", dispatched" : ""}`, { ambiguous: true }),
      is_error: true
    })

describe("EffectFence.fenceAll: effects tried now (dispatchNow)", () => {
  it.scopedLive("when every effect goes to its end when tried, none is dispatched and their outcomes are committed together: one atomic append, in the effects' order, before the answer", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      let dispatched = 0
      const durableAtTry: Array<number> = []
      const folded: Array<number> = []
      const effects = ["a", "b", "c"].map((id) => ({
        started: startedOf(id),
        dispatch: () => Effect.sync(() => void dispatched++).pipe(Effect.as("dispatched")),
        dispatchNow: (seq: number) => {
          durableAtTry.push(seq)
          return Exit.succeed(`${id}@${seq}`)
        },
        outcome: outcomeOf
      }))
      const fenced = yield* fence.fenceAll(j.session, effects, { committed: (es) => es.forEach(([s]) => folded.push(s)) })
      expect(dispatched).toBe(0)
      expect(durableAtTry).toEqual([2, 3, 4])
      expect(j.appends).toEqual([["tool_call_started", "tool_call_started", "tool_call_started"], ["tool_call_ended", "tool_call_ended", "tool_call_ended"]])
      expect(fenced.map((f) => [f.started, f.outcome, f.dispatched, Exit.isSuccess(f.exit) && f.exit.value])).toEqual([
        [2, 5, true, "a@2"],
        [3, 6, true, "b@3"],
        [4, 7, true, "c@4"]
      ])
      expect(folded).toEqual([2, 3, 4, 5, 6, 7])
      const records = yield* j.base.read(j.session, { after: 4, limit: 100 })
      expect(records.map((r) => (r.payload as { sequence: number; output: string }))).toEqual([
        { sequence: 2, outcome: "ok", output: "a@2", is_error: false },
        { sequence: 3, outcome: "ok", output: "b@3", is_error: false },
        { sequence: 4, outcome: "ok", output: "c@4", is_error: false }
      ])
    }))

  it.scopedLive("an effect that cannot be tried is dispatched; the others keep the exits their tries gave, dispatched once at most, and every outcome is durable before the answer", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      const dispatched: Array<string> = []
      const effects = ["a", "b", "c"].map((id) => ({
        started: startedOf(id),
        dispatch: (seq: number) => Effect.sync(() => void dispatched.push(id)).pipe(Effect.zipRight(Effect.sleep(Duration.millis(10))), Effect.as(`${id} dispatched@${seq}`)),
        dispatchNow: (seq: number) => (id === "b" ? undefined : Exit.succeed(`${id} tried@${seq}`)),
        outcome: outcomeOf
      }))
      const fenced = yield* fence.fenceAll(j.session, effects)
      expect(dispatched).toEqual(["b"])
      expect(fenced.map((f) => Exit.isSuccess(f.exit) && f.exit.value)).toEqual(["a tried@2", "b dispatched@3", "c tried@4"])
      const records = yield* j.base.read(j.session, { after: 4, limit: 100 })
      expect(records.map((r) => (r.payload as { output: string }).output).sort()).toEqual(["a tried@2", "b dispatched@3", "c tried@4"])
      expect(fenced.every((f) => f.outcome > 4 && f.dispatched)).toBe(true)
    }))

  it.scopedLive("a try that throws is recorded as a dispatch that died, and the round's other outcomes are committed all the same", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      const effects = ["a", "b"].map((id) => ({
        started: startedOf(id),
        dispatch: () => Effect.succeed("dispatched"),
        dispatchNow: (seq: number): Exit.Exit<string> => {
          if (id === "a") throw new Error("a bug in the try")
          return Exit.succeed(`${id}@${seq}`)
        },
        outcome: outcomeOf
      }))
      const fenced = yield* fence.fenceAll(j.session, effects)
      expect(Exit.isFailure(fenced[0]!.exit) && Cause.isDie(fenced[0]!.exit.cause)).toBe(true)
      const records = yield* j.base.read(j.session, { after: 3, limit: 100 })
      expect(records.map((r) => [r.kind, (r.payload as { sequence: number }).sequence])).toEqual([["tool_call_failed", 2], ["tool_call_ended", 3]])
      expect((records[0]!.payload as { failure: { message: string } }).failure.message).toBe("died, dispatched")
    }))
})

describe("appendWithin: an append queued without a fiber where the journal can", () => {
  /** A Queueable that takes the append (or not) and answers when the test says. */
  const queueable = (takes: boolean) => {
    let answer: ((exit: Exit.Exit<ReadonlyArray<number>, never>) => void) | undefined
    let ran = 0
    return {
      append: {
        enqueue: (done: (exit: Exit.Exit<ReadonlyArray<number>, never>) => void) => {
          if (takes) answer = done
          return takes
        },
        effect: Effect.sync(() => {
          ran++
          return [9]
        })
      },
      answer: (sequences: ReadonlyArray<number>) => answer!(Exit.succeed(sequences)),
      ran: () => ran
    }
  }

  it.scopedLive("a taken append is answered by its callback and its effect never runs; a refused one runs its effect", () =>
    Effect.gen(function*() {
      const q = queueable(true)
      const waiting = yield* Effect.fork(EffectFenceJournal.appendWithin(q.append, 10_000))
      yield* Effect.sleep(Duration.millis(10))
      q.answer([4, 5])
      const got = yield* Fiber.join(waiting)
      expect(got._tag === "Answered" && Exit.isSuccess(got.exit) ? got.exit.value : undefined).toEqual([4, 5])
      expect(q.ran()).toBe(0)
      const refused = queueable(false)
      const ran = yield* EffectFenceJournal.appendWithin(refused.append, 10_000)
      expect(ran._tag === "Answered" && Exit.isSuccess(ran.exit) ? ran.exit.value : undefined).toEqual([9])
      expect(refused.ran()).toBe(1)
    }))

  it.scopedLive("a taken append past the deadline is Unsettled, and its settled waits for the late answer", () =>
    Effect.gen(function*() {
      const q = queueable(true)
      const got = yield* EffectFenceJournal.appendWithin(q.append, 20)
      expect(got._tag).toBe("Unsettled")
      if (got._tag !== "Unsettled") return
      const settled = yield* Effect.fork(got.settled)
      yield* Effect.sleep(Duration.millis(20))
      expect(Option.isNone(yield* Fiber.poll(settled))).toBe(true)
      q.answer([7])
      yield* Fiber.join(settled)
      expect(q.ran()).toBe(0)
    }))
})

describe("appendNow: a fence's starts queued without the append's effects where the journal can", () => {
  /** A journal whose `enqueue` takes the append (or not, or answers it at once) and whose `append` counts its runs. */
  const journalWith = (takes: boolean, atOnce?: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => {
    let answer: ((exit: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void) | undefined
    let appended = 0
    const journal = {
      enqueue: (_session: unknown, _entries: unknown, done: (exit: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void) => {
        if (!takes) return false
        if (atOnce !== undefined) done(atOnce)
        else answer = done
        return true
      },
      append: () =>
        Effect.sync(() => {
          appended++
          return [9]
        })
    } as unknown as JournalShape
    return { journal, answer: (sequences: ReadonlyArray<number>) => answer!(Exit.succeed(sequences)), appended: () => appended }
  }

  it.scopedLive("a start the journal queues is answered by its callback, and `append` never runs; one it cannot queue goes through `append`", () =>
    Effect.gen(function*() {
      const session = yield* mintSessionId
      const q = journalWith(true)
      const waiting = yield* Effect.fork(EffectFenceJournal.appendNow(q.journal, session, [started]))
      yield* Effect.sleep(Duration.millis(10))
      expect(Option.isNone(yield* Fiber.poll(waiting))).toBe(true)
      q.answer([4])
      expect(yield* Fiber.join(waiting)).toEqual([4])
      expect(q.appended()).toBe(0)
      const refused = journalWith(false)
      expect(yield* EffectFenceJournal.appendNow(refused.journal, session, [started])).toEqual([9])
      expect(refused.appended()).toBe(1)
    }))

  it.scopedLive("a start the journal refuses as it queues it (a broken session) fails with the journal's error, and nothing else is tried", () =>
    Effect.gen(function*() {
      const session = yield* mintSessionId
      const broken = new JournalWriteFailed({ session, reason: "a failed write" })
      const q = journalWith(true, Exit.fail(broken))
      const got = yield* Effect.either(EffectFenceJournal.appendNow(q.journal, session, [started]))
      expect(got).toEqual(Either.left(broken))
      expect(q.appended()).toBe(0)
    }))
})

describe("EffectFence.fenceAll: effects under way with no fiber (Dispatching)", () => {
  /** A dispatch under way that the test ends (`finish`); `interrupt` ends it interrupted, as an interrupted fiber would. */
  const underWay = () => {
    let exit: Exit.Exit<string> | undefined
    const ends: Array<(exit: Exit.Exit<string>) => void> = []
    let interrupted = 0
    const finish = (e: Exit.Exit<string>) => {
      if (exit !== undefined) return
      exit = e
      for (const f of ends.splice(0)) f(e)
    }
    const dispatching: Dispatching<string, never> = {
      _tag: "Dispatching",
      onEnd: (f) => (exit !== undefined ? f(exit) : void ends.push(f)),
      interrupt: () => {
        interrupted++
        finish(Exit.interrupt(FiberId.none))
      }
    }
    return { dispatching, finish, interrupted: () => interrupted }
  }
  const roundOf = (ways: ReadonlyArray<ReturnType<typeof underWay> | undefined>, dispatched: Array<string>) =>
    ways.map((way, i) => ({
      started: startedOf(`c${i}`),
      dispatch: (seq: number) => Effect.sync(() => void dispatched.push(`c${i}`)).pipe(Effect.as(`c${i} dispatched@${seq}`)),
      dispatchNow: (seq: number) => (way === undefined ? Exit.succeed(`c${i} tried@${seq}`) : way.dispatching),
      outcome: outcomeOf
    }))

  it.scopedLive("none is dispatched in a fiber; outcomes are committed as the effects end, those that ended together in one append in the effects' order, every one before the answer", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      const ways = [underWay(), undefined, underWay(), underWay()]
      const dispatched: Array<string> = []
      const folded: Array<number> = []
      const fiber = yield* Effect.fork(fence.fenceAll(j.session, roundOf(ways, dispatched), { committed: (es) => es.forEach(([s]) => folded.push(s)) }))
      yield* Effect.sleep(Duration.millis(20))
      // The one that ended when tried is committed at once; the others are waited for.
      expect(j.appends).toEqual([["tool_call_started", "tool_call_started", "tool_call_started", "tool_call_started"], ["tool_call_ended"]])
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      // The last two end in one step (a host's results in one POST): one append, in the effects' order.
      ways[3]!.finish(Exit.succeed("d"))
      ways[2]!.finish(Exit.succeed("c"))
      yield* Effect.sleep(Duration.millis(20))
      expect(j.appends.slice(2)).toEqual([["tool_call_ended", "tool_call_ended"]])
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      ways[0]!.finish(Exit.succeed("a"))
      const fenced = yield* Fiber.join(fiber)
      expect(dispatched).toEqual([])
      expect(j.appends.slice(3)).toEqual([["tool_call_ended"]])
      expect(fenced.map((f) => [f.started, f.outcome, f.dispatched, Exit.isSuccess(f.exit) && f.exit.value])).toEqual([
        [2, 9, true, "a"],
        [3, 6, true, "c1 tried@3"],
        [4, 7, true, "c"],
        [5, 8, true, "d"]
      ])
      expect(folded).toEqual([2, 3, 4, 5, 6, 7, 8, 9])
      const records = yield* j.base.read(j.session, { after: 5, limit: 100 })
      expect(records.map((r) => (r.payload as { sequence: number }).sequence)).toEqual([3, 4, 5, 2])
    }))

  it.scopedLive("an interrupted caller interrupts every effect still under way and leaves only once every outcome is durable", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      const ways = [underWay(), underWay()]
      const fiber = yield* Effect.fork(fence.fenceAll(j.session, roundOf(ways, [])))
      yield* Effect.sleep(Duration.millis(20))
      ways[1]!.finish(Exit.succeed("b"))
      yield* Effect.sleep(Duration.millis(20))
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect([ways[0]!.interrupted(), ways[1]!.interrupted()]).toEqual([1, 0])
      const records = yield* j.base.read(j.session, { after: 3, limit: 100 })
      expect(records.map((r) => [r.kind, (r.payload as { sequence: number }).sequence])).toEqual([["tool_call_ended", 3], ["tool_call_failed", 2]])
      expect((records[1]!.payload as { failure: { message: string } }).failure.message).toBe("interrupted, dispatched")
    }))

  it.scopedLive("an outcome not durable within the deadline interrupts the effects still under way, whose outcomes are still committed, and the round fails with OutcomeUnrecorded", () =>
    Effect.gen(function*() {
      const h = yield* holding("tool_call_ended")
      const fence = yield* fenceWith(h.journal, 100)
      const ways = [underWay(), underWay()]
      const unsettled: Array<Effect.Effect<void>> = []
      const fiber = yield* Effect.fork(fence.fenceAll(h.session, roundOf(ways, []), { unrecorded: (s) => void unsettled.push(s) }))
      yield* Effect.sleep(Duration.millis(20))
      ways[0]!.finish(Exit.succeed("a"))
      const result = yield* Effect.either(Fiber.join(fiber))
      expect(result._tag === "Left" && result.left._tag).toBe("OutcomeUnrecorded")
      expect(ways[1]!.interrupted()).toBe(1)
      expect(unsettled).toHaveLength(1)
      // Its own outcome went to the journal (a failure, recorded): only the held one is still on its way.
      const records = yield* h.base.read(h.session, { after: 0, limit: 100 })
      expect(records.map((r) => r.kind)).toEqual(["session_creation_started", "tool_call_started", "tool_call_started", "tool_call_failed"])
      yield* Deferred.succeed(h.release, undefined)
      yield* unsettled[0]!
      const after = yield* h.base.read(h.session, { after: 4, limit: 100 })
      expect(after.map((r) => [r.kind, (r.payload as { sequence: number }).sequence])).toEqual([["tool_call_ended", 2]])
    }))

  it.scopedLive("an interrupted caller whose effect's stop ends it only later waits for that end, and leaves only once every outcome is durable", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      const slow = underWay()
      let asked = 0
      // Its stop is asked for now; the effect ends when the test says (a stop that takes a while).
      const slowly: Dispatching<string, never> = { ...slow.dispatching, interrupt: () => void asked++ }
      const ways = [slow, underWay()]
      const effects = roundOf(ways, [])
      const round = [{ ...effects[0]!, dispatchNow: () => slowly }, effects[1]!]
      const fiber = yield* Effect.fork(fence.fenceAll(j.session, round))
      yield* Effect.sleep(Duration.millis(20))
      const interrupting = yield* Effect.fork(Fiber.interrupt(fiber))
      yield* Effect.sleep(Duration.millis(20))
      expect([asked, ways[1]!.interrupted()]).toEqual([1, 1])
      // The other's outcome is durable; the caller still waits for the slow one.
      expect(Option.isNone(yield* Fiber.poll(interrupting))).toBe(true)
      slow.finish(Exit.succeed("late"))
      expect(Exit.isInterrupted(yield* Fiber.join(interrupting))).toBe(true)
      const records = yield* j.base.read(j.session, { after: 3, limit: 100 })
      expect(records.map((r) => [r.kind, (r.payload as { sequence: number }).sequence])).toEqual([["tool_call_failed", 3], ["tool_call_ended", 2]])
    }))

  it.scopedLive("in a round that also has an effect to run in a fiber, the one under way is waited for in a fiber of its own and recorded as it ended", () =>
    Effect.gen(function*() {
      const j = yield* counting
      const fence = yield* fenceWith(j.journal, 5_000)
      const way = underWay()
      const dispatched: Array<string> = []
      const effects = roundOf([way, way], dispatched)
      const round = [effects[0]!, { ...effects[1]!, dispatchNow: () => undefined }]
      const fiber = yield* Effect.fork(fence.fenceAll(j.session, round))
      yield* Effect.sleep(Duration.millis(20))
      expect(dispatched).toEqual(["c1"])
      way.finish(Exit.succeed("a"))
      const fenced = yield* Fiber.join(fiber)
      expect(fenced.map((f) => Exit.isSuccess(f.exit) && f.exit.value)).toEqual(["a", "c1 dispatched@3"])
      const records = yield* j.base.read(j.session, { after: 3, limit: 100 })
      expect(records.map((r) => (r.payload as { output: string }).output).sort()).toEqual(["a", "c1 dispatched@3"])
    }))
})

describe("EffectFence: records made ahead", () => {
  it.scopedLive("a fence tells its caller's `ahead` each append's records with their sequences while the append is in flight, and `committed` the same records only once durable", () =>
    Effect.gen(function*() {
      const { journal } = yield* JournalMemory.make
      const session = yield* mintSessionId
      yield* journal.create(session)
      yield* journal.append(session, [entry("session_creation_started", { configuration: { agentloop: "official", model: "m" } })])
      const fence = yield* fenceWith(journal, 5_000)
      const seen: Array<string> = []
      const told = (what: string) => (es: ReadonlyArray<readonly [number, Entry]>) => void seen.push(`${what} ${es.map(([s, e]) => `${s}:${e.kind}`).join(",")}`)
      let durableAtAhead = -1
      const hooks: FenceHooks = {
        ahead: (es) => {
          told("ahead")(es)
          durableAtAhead = Effect.runSync(Effect.orElseSucceed(journal.lastSequence(session), () => -2))
        },
        committed: told("committed")
      }
      yield* fence.fence(session, started, (seq) => Effect.succeed({ secret: seq }), ended, hooks)
      expect(seen).toEqual([
        "ahead 2:tool_call_started",
        "committed 2:tool_call_started",
        "ahead 3:tool_call_ended",
        "committed 3:tool_call_ended"
      ])
      // Told before it was durable: the journal's end was still the start's.
      expect(durableAtAhead).toBe(2)
    }))
})
