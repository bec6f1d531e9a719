/**
 * An effect's outcome that is not durable within BRAIN_CLEANUP_DEADLINE_MS is never observed
 * (seed "Effects happen after commit": the outcome is committed before the loop observes it).
 *
 * A probe Agentloop calls the model once and reports what it saw; after a failure it tries every
 * other host service, and each must be refused. The file journal is wrapped so that the first
 * append of a chosen kind is held (then let through, or failed the way a disk fails: sticky until
 * `reset`), or the file driver's fdatasync is stalled (a disk that stops answering). Checked:
 * the loop and the caller get `journal_write_failed` (ambiguous), never the result; the stale
 * cell commits nothing more; every access is refused while the append is in flight; once it has
 * landed or failed the next access recovers consistently (every effect closed exactly once, the
 * late record never followed by a second closing of the same effect); a restart recovers too.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Context, Deferred, Duration, Effect, Either, Exit, Fiber, Layer, Scope } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import type { JournalRecord } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { type FileDriverShape, FileDriver, layerNode as nodeFiles, nodeDriver, syncManyVia } from "../../src/layers/journal/FileDriver.js"
import { type AgentloopShape, HostCallFailed } from "../../src/services/Agentloop.js"
import { Journal, type JournalShape, JournalWriteFailed } from "../../src/services/Journal.js"
import type { ModelsShape } from "../../src/services/Models.js"
import { Sessions, type SessionsShape } from "../../src/services/Sessions.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

/**
 * Milliseconds the journal has to acknowledge an outcome in these tests. The appends that must miss
 * it are held until the test lets them go, so it is missed at any value; every other append is a
 * real fdatasync that must make it, and on a loaded machine one can take several hundred ms.
 */
const DEADLINE_MS = 2_000
/**
 * Milliseconds within which a caller must be answered although the append is still held: a hang
 * guard (the held append never lands by itself), far past DEADLINE_MS.
 */
const ANSWER_WITHIN_MS = 10_000
/** Milliseconds a session may take to reopen once its late append is let go: a hang guard. */
const REOPEN_WITHIN_MS = 30_000
const SECRET = "the model's secret answer"

// ---------------------------------------------------------------------------------------------
// Fault injection

interface Hold {
  /** The first append containing a record of this kind is held. */
  readonly kind: string
  readonly reached: Deferred.Deferred<void>
  readonly release: Deferred.Deferred<"land" | "fail">
  taken: boolean
  /** After a failed release: refuse the session's appends until `reset` (the Journal contract). */
  broken: boolean
}

const makeHold = (kind: string) =>
  Effect.map(
    Effect.all([Deferred.make<void>(), Deferred.make<"land" | "fail">()]),
    ([reached, release]): Hold => ({ kind, reached, release, taken: false, broken: false })
  )

/** The file journal, with the first append of `hold.kind` held until released. */
const holdingJournal = (dataDir: string, hold: Hold) =>
  Layer.scoped(
    Journal,
    Effect.gen(function*() {
      // orDie: a data directory that cannot be opened is a broken test setup.
      const base = yield* JournalFile.make({ dataDir, lockWaitMs: 0 }).pipe(Effect.provide(nodeFiles), Effect.orDie)
      const refused = (session: string) => new JournalWriteFailed({ session, reason: "injected: the held append failed" })
      const append: JournalShape["append"] = (session, entries, options) =>
        Effect.suspend(() => {
          if (hold.broken) return Effect.fail(refused(session))
          if (hold.taken || !entries.some((e) => e.kind === hold.kind)) return base.append(session, entries, options)
          hold.taken = true
          return Deferred.succeed(hold.reached, undefined).pipe(
            Effect.zipRight(Deferred.await(hold.release)),
            Effect.flatMap((how) => {
              if (how === "land") return base.append(session, entries, options)
              hold.broken = true
              return Effect.fail(refused(session))
            })
          )
        })
      const reset: JournalShape["reset"] = (session) =>
        Effect.suspend(() => {
          hold.broken = false
          return base.reset(session)
        })
      return { ...base, append, reset } satisfies JournalShape
    })
  )

/** Node's file driver whose fdatasync waits, once `stall` is set, until that Deferred is done. */
const stallingDriver = () => {
  let gate: Deferred.Deferred<void> | undefined
  const driver: FileDriverShape = {
    ...nodeDriver,
    fdatasync: (fd) => Effect.suspend(() => (gate ? Effect.zipRight(Deferred.await(gate), nodeDriver.fdatasync(fd)) : nodeDriver.fdatasync(fd))),
    syncMany: (items, onDone, log) => syncManyVia(driver)(items, onDone, log)
  }
  return { driver, stall: (until: Deferred.Deferred<void>) => void (gate = until) }
}

// ---------------------------------------------------------------------------------------------
// The probe loop and model

/** What the probe loop saw, in order: the model's answer or failure, then each later host call's. */
type Seen = Either.Either<unknown, HostCallFailed>

const probeLoop = (seen: Array<Seen>): AgentloopShape => ({
  activate: (input, host) =>
    Effect.gen(function*() {
      const message = input.input?.message ?? ""
      const answer = yield* Effect.either(host.model({ messages: [{ role: "user", content: message }] }))
      seen.push(answer)
      if (Either.isRight(answer)) {
        yield* host.setTranscript([...input.transcript, { role: "user", content: message }, { role: "assistant", content: answer.right.text }])
        return { text: answer.right.text }
      }
      // Everything else it tries now must be refused: nothing more is written through the cell.
      const attempts: ReadonlyArray<Effect.Effect<unknown, HostCallFailed>> = [
        host.emit("probe_after", { n: 1 }),
        host.kvPut("k", 1),
        host.setTranscript([...input.transcript, { role: "user", content: message }]),
        host.model({ messages: [{ role: "user", content: "again" }] }),
        host.dispatch([{ id: "c1", name: "echo", input: {} }])
      ]
      for (const attempt of attempts) seen.push(yield* Effect.either(attempt))
      return yield* Effect.fail(answer.left)
    })
})

/** Answers every call with SECRET; counts the calls; `onCall` runs first. */
const countingModel = (counter: { calls: number }, onCall: () => Effect.Effect<void> = () => Effect.void): ModelsShape => ({
  call: () =>
    Effect.gen(function*() {
      counter.calls++
      yield* onCall()
      return { text: SECRET, tool_calls: [], stop_reason: "end" as const }
    })
})

const CREATE = { model: { provider: "scripted" as const }, agentloop: "probe", tools: [{ name: "echo" }] }

const runtime = (journal: Layer.Layer<Journal>, seen: Array<Seen>, models: ModelsShape) =>
  runtimeLayer({
    journal,
    loops: { probe: probeLoop(seen) },
    tools: { echo: (input) => Effect.succeed({ outcome: "ok" as const, output: input }) },
    models,
    config: { cleanupDeadlineMs: DEADLINE_MS, cancelGraceMs: 500 }
  })

// ---------------------------------------------------------------------------------------------
// Checks

const readAll = (journal: JournalShape, session: SessionId) =>
  Effect.gen(function*() {
    const out: Array<JournalRecord> = []
    for (;;) {
      const page = yield* journal.read(session, { after: out.length, limit: 1000 })
      if (page.length === 0) return out
      out.push(...page)
    }
  })

const OPENERS = new Set(["turn_started", "activation_started", "model_call_started", "tool_call_started"])

/** Every opening record is closed exactly once, and no record closes one that is not open. */
const closings = (records: ReadonlyArray<JournalRecord>) => {
  const count = new Map<number, number>()
  for (const r of records) {
    const target = r.payload?.sequence
    if (typeof target === "number" && !OPENERS.has(r.kind) && r.kind !== "session_creation_ended") {
      count.set(target, (count.get(target) ?? 0) + 1)
    }
  }
  return records.filter((r) => OPENERS.has(r.kind)).map((r) => `${r.sequence} ${r.kind}: closed ${count.get(r.sequence) ?? 0}`)
}

const allClosedOnce = (records: ReadonlyArray<JournalRecord>) =>
  records.filter((r) => OPENERS.has(r.kind)).map((r) => `${r.sequence} ${r.kind}: closed 1`)

const failureOf = (seen: Seen) => (Either.isLeft(seen) ? seen.left.failure : undefined)

/** Every access of the session answers journal_write_failed (the broken cell), none hangs. */
const refusedEverywhere = (s: SessionsShape, session: SessionId) =>
  Effect.gen(function*() {
    const accesses: ReadonlyArray<Effect.Effect<unknown, { readonly code: string }>> = [
      s.get(session),
      s.send(session, { message: "again" }),
      s.transcript(session),
      s.events(session, { after: 0, limit: 10 })
    ]
    const codes: Array<string> = []
    for (const access of accesses) {
      const r = yield* Effect.either(Effect.timeout(access, Duration.millis(ANSWER_WITHIN_MS)))
      codes.push(Either.isLeft(r) ? ("code" in r.left ? r.left.code : "hung") : "answered")
    }
    return codes
  })

/** Retries `get` until the session opens again (the turn lets go once the late append settled). */
const reopened = (s: SessionsShape, session: SessionId) =>
  Effect.gen(function*() {
    const until = (yield* Clock.currentTimeMillis) + REOPEN_WITHIN_MS
    while ((yield* Clock.currentTimeMillis) < until) {
      const r = yield* Effect.either(s.get(session))
      if (Either.isRight(r)) return r.right
      expect(r.left.code).toBe("journal_write_failed")
      yield* Effect.sleep(Duration.millis(10))
    }
    throw new Error(`the session did not reopen within ${REOPEN_WITHIN_MS} ms after the late append settled`)
  })

/** The send's answer, which must come while the append is still in flight. */
const answered = <A, E>(send: Fiber.RuntimeFiber<A, E>) =>
  Fiber.join(send).pipe(
    Effect.timeoutFail({ duration: Duration.millis(ANSWER_WITHIN_MS), onTimeout: () => new Error("the caller was not answered while the outcome append was held") })
  )

/** What the loop saw first must be the failure, never the result; everything after, refused. */
const expectWithheld = (seen: ReadonlyArray<Seen>) => {
  expect(JSON.stringify(seen)).not.toContain(SECRET)
  expect(failureOf(seen[0]!)).toMatchObject({ code: "journal_write_failed", ambiguous: true })
  expect(seen.slice(1).map((x) => failureOf(x)?.code)).toEqual(Array(5).fill("journal_write_failed"))
}

// ---------------------------------------------------------------------------------------------

describe("an effect's outcome that misses BRAIN_CLEANUP_DEADLINE_MS", () => {
  it.live("is never observed: the loop and the caller get journal_write_failed (ambiguous), the stale cell commits nothing more, every access is refused until the append lands, then the next access recovers around the late record without closing the effect twice", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("brain-outcome-")
      const hold = yield* makeHold("model_call_ended")
      const seen: Array<Seen> = []
      const model = { calls: 0 }
      const context = yield* Layer.build(runtime(holdingJournal(dir, hold), seen, countingModel(model)))
      const s = Context.get(context, Sessions)
      const j = Context.get(context, Journal)
      const { session_id } = yield* s.create(CREATE)

      const send = yield* Effect.fork(s.send(session_id, { message: "hello" }))
      yield* Deferred.await(hold.reached)
      const outcome = yield* answered(send)
      expect(outcome.turn.status).toBe("failed")
      expect(outcome.turn.failure).toMatchObject({ code: "journal_write_failed", ambiguous: true })
      expectWithheld(seen)

      // Nothing after the model call's start was committed by the stale cell.
      const during = yield* readAll(j, session_id)
      expect(during.at(-1)?.kind).toBe("model_call_started")
      expect(yield* refusedEverywhere(s, session_id)).toEqual(Array(4).fill("journal_write_failed"))
      expect((yield* readAll(j, session_id)).length).toBe(during.length)

      // The disk answers: the late record lands, and recovery closes only what it left open.
      yield* Deferred.succeed(hold.release, "land")
      const summary = yield* reopened(s, session_id)
      expect(summary.status).toBe("idle")
      const after = yield* readAll(j, session_id)
      expect(after.slice(during.length).map((r) => r.kind)).toEqual(["model_call_ended", "activation_failed", "turn_failed"])
      expect(after.at(-1)!.payload.failure).toMatchObject({ code: "interrupted", ambiguous: true })
      expect(after.at(-1)!.payload.failure.message).toContain("a journal write failed")
      expect(closings(after)).toEqual(allClosedOnce(after))
      expect(model.calls).toBe(1)

      const next = yield* s.send(session_id, { message: "after" })
      expect(next.turn.status).toBe("ended")
      expect(model.calls).toBe(2)
      expect(closings(yield* readAll(j, session_id))).toEqual(allClosedOnce(yield* readAll(j, session_id)))
    })))

  it.live("whose append then fails: the next access reopens the journal and records the effect as an ambiguous failure, once", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("brain-outcome-")
      const hold = yield* makeHold("model_call_ended")
      const seen: Array<Seen> = []
      const model = { calls: 0 }
      const context = yield* Layer.build(runtime(holdingJournal(dir, hold), seen, countingModel(model)))
      const s = Context.get(context, Sessions)
      const j = Context.get(context, Journal)
      const { session_id } = yield* s.create(CREATE)

      const send = yield* Effect.fork(s.send(session_id, { message: "hello" }))
      yield* Deferred.await(hold.reached)
      const outcome = yield* answered(send)
      expect(outcome.turn.failure).toMatchObject({ code: "journal_write_failed", ambiguous: true })
      expectWithheld(seen)
      const during = yield* readAll(j, session_id)

      yield* Deferred.succeed(hold.release, "fail")
      yield* reopened(s, session_id)
      const after = yield* readAll(j, session_id)
      const recovery = after.slice(during.length)
      expect(recovery.map((r) => r.kind)).toEqual(["model_call_failed", "activation_failed", "turn_failed"])
      expect(recovery[0]!.payload.failure).toMatchObject({ code: "interrupted", ambiguous: true })
      expect(closings(after)).toEqual(allClosedOnce(after))
      expect(model.calls).toBe(1)
      expect((yield* s.send(session_id, { message: "after" })).turn.status).toBe("ended")
    })))

  it.live("is recovered by a restart while its append is still held: the effect is an ambiguous failure, nothing is re-sent, and the next turn works", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("brain-outcome-")
      const hold = yield* makeHold("model_call_ended")
      const seen: Array<Seen> = []
      const model = { calls: 0 }
      const scope = yield* Scope.make()
      yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
      const context = yield* Layer.buildWithScope(runtime(holdingJournal(dir, hold), seen, countingModel(model)), scope)
      const s = Context.get(context, Sessions)
      const { session_id } = yield* s.create(CREATE)
      const send = yield* Effect.fork(s.send(session_id, { message: "hello" }))
      yield* Deferred.await(hold.reached)
      yield* answered(send)
      expectWithheld(seen)

      // The process stops while the append is held; the append lands nowhere (the journal is closed).
      yield* Scope.close(scope, Exit.void).pipe(Effect.timeoutFail({ duration: Duration.millis(ANSWER_WITHIN_MS), onTimeout: () => new Error("the stop hung") }))
      yield* Deferred.succeed(hold.release, "land")

      const restarted = runtime(JournalFile.layerNode({ dataDir: dir, lockWaitMs: 2_000 }).pipe(Layer.orDie), [], countingModel(model))
      yield* Effect.gen(function*() {
        const s2 = yield* Sessions
        const j2 = yield* Journal
        const before = (yield* readAll(j2, session_id)).length
        expect((yield* s2.get(session_id)).status).toBe("idle")
        const after = yield* readAll(j2, session_id)
        const recovery = after.slice(before)
        expect(recovery.map((r) => r.kind)).toEqual(["model_call_failed", "activation_failed", "turn_failed"])
        expect(recovery[0]!.payload.failure).toMatchObject({ code: "interrupted", ambiguous: true })
        expect(recovery.at(-1)!.payload.failure.message).toContain("the server stopped")
        expect(closings(after)).toEqual(allClosedOnce(after))
        expect(model.calls).toBe(1)
        expect((yield* s2.send(session_id, { message: "after" })).turn.status).toBe("ended")
        expect(model.calls).toBe(2)
      }).pipe(Effect.provide(restarted))
    })))

  it.live("on a stalled disk (fdatasync not answering) the loop gets journal_write_failed while the write is in flight, and once the disk answers the session reopens with the late outcome and no second one", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("brain-outcome-")
      const disk = stallingDriver()
      const stalled = yield* Deferred.make<void>()
      const seen: Array<Seen> = []
      const model = { calls: 0 }
      // The first model call stalls the disk as it answers: its outcome's sync does not return.
      const models = countingModel(model, () => Effect.sync(() => model.calls === 1 && disk.stall(stalled)))
      const journal = JournalFile.layer({ dataDir: dir, lockWaitMs: 0 }).pipe(Layer.provide(Layer.succeed(FileDriver, disk.driver)), Layer.orDie)
      const context = yield* Layer.build(runtime(journal, seen, models))
      const s = Context.get(context, Sessions)
      const j = Context.get(context, Journal)
      const { session_id } = yield* s.create(CREATE)

      const outcome = yield* s.send(session_id, { message: "hello" }).pipe(
        Effect.timeoutFail({ duration: Duration.millis(ANSWER_WITHIN_MS), onTimeout: () => new Error("the caller waited for the stalled disk") })
      )
      expect(outcome.turn.failure).toMatchObject({ code: "journal_write_failed", ambiguous: true })
      expectWithheld(seen)
      expect(yield* refusedEverywhere(s, session_id)).toEqual(Array(4).fill("journal_write_failed"))

      yield* Deferred.succeed(stalled, undefined)
      yield* reopened(s, session_id)
      const after = yield* readAll(j, session_id)
      const started = after.findIndex((r) => r.kind === "model_call_started")
      expect(after.slice(started).map((r) => r.kind)).toEqual([
        "model_call_started",
        "model_call_ended",
        "activation_failed",
        "turn_failed"
      ])
      expect(closings(after)).toEqual(allClosedOnce(after))
      expect((yield* s.send(session_id, { message: "after" })).turn.status).toBe("ended")
      expect(model.calls).toBe(2)
    })))
})

describe("a turn whose closing records miss BRAIN_CLEANUP_DEADLINE_MS", () => {
  it.live("answers journal_write_failed (ambiguous), refuses the session until the records land, then opens it idle with them and nothing recorded twice", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir("brain-outcome-")
      const hold = yield* makeHold("turn_ended")
      const seen: Array<Seen> = []
      const model = { calls: 0 }
      const context = yield* Layer.build(runtime(holdingJournal(dir, hold), seen, countingModel(model)))
      const s = Context.get(context, Sessions)
      const j = Context.get(context, Journal)
      const { session_id } = yield* s.create(CREATE)

      const send = yield* Effect.fork(s.send(session_id, { message: "hello" }))
      yield* Deferred.await(hold.reached)
      const outcome = yield* answered(send)
      expect(outcome.turn.status).toBe("failed")
      expect(outcome.turn.failure).toMatchObject({ code: "journal_write_failed", ambiguous: true })
      expect(outcome.turn.failure?.message).toContain(`within ${DEADLINE_MS} ms`)
      expect(yield* refusedEverywhere(s, session_id)).toEqual(Array(4).fill("journal_write_failed"))

      const during = (yield* readAll(j, session_id)).length
      yield* Deferred.succeed(hold.release, "land")
      expect((yield* reopened(s, session_id)).status).toBe("idle")
      const after = yield* readAll(j, session_id)
      expect(after.slice(during).map((r) => r.kind)).toEqual(["activation_ended", "turn_ended"])
      expect(closings(after)).toEqual(allClosedOnce(after))
      expect((yield* s.send(session_id, { message: "after" })).turn.status).toBe("ended")
    })))
})
