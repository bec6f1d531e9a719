/**
 * What a keyed request leaves under its key (src/http/Idempotent.ts), one branch per test, over
 * the memory store: a 2xx answer is recorded; a failure that may have had effects is recorded as
 * 409 ambiguous; a failure where nothing happened that is 5xx or retryable releases the key; any
 * other refusal is recorded as it is. The store's own failures refuse the request before any work.
 */
import type { HttpServerResponse } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { type ApiError, JournalCorrupt, JournalWriteFailed, NotFound, SessionBusy, SessionEnded } from "../../src/domain/Errors.js"
import { statusOf } from "../../src/http/Errors.js"
import { hashRequest, idempotent, idempotentTurn, jsonAnswer } from "../../src/http/Idempotent.js"
import * as IdempotencyMemory from "../../src/layers/IdempotencyMemory.js"
import {
  type Answer,
  IdempotencyLogDamaged,
  type IdempotencyShape,
  IdempotencyStoreFailed
} from "../../src/services/Idempotency.js"
import type { Keyed, TurnRequest } from "../../src/services/Sessions.js"

const textOf = (res: HttpServerResponse.HttpServerResponse) =>
  res.body._tag === "Uint8Array" ? new TextDecoder().decode(res.body.body) : ""

/** A unit of work that counts its runs and ends with `outcome`. */
const counted = (outcome: Effect.Effect<Answer, ApiError>) => {
  const state = { runs: 0 }
  return { state, work: Effect.suspend(() => Effect.zipRight(Effect.sync(() => state.runs++), outcome)) }
}

const call = (store: IdempotencyShape, work: Effect.Effect<Answer, ApiError>, body: unknown = { input: "x" }) =>
  idempotent(store, "send:ses_x", "key-1", body, work).pipe(
    Effect.map((res) => ({ status: res.status, text: textOf(res) })),
    Effect.catchAll((e) => Effect.succeed({ status: statusOf(e.code), text: JSON.stringify({ code: e.code, retryable: e.retryable, details: e.details }) }))
  )

const memory = IdempotencyMemory.make({ retentionMs: 60_000 })

describe("idempotent: what a request leaves under its key", () => {
  it.effect("a 2xx answer is recorded: retries replay it byte for byte and the work runs once", () =>
    Effect.gen(function*() {
      const store = yield* memory
      const { state, work } = counted(Effect.succeed(jsonAnswer(200, { ok: "é" })))
      const first = yield* call(store, work)
      expect(first).toEqual({ status: 200, text: JSON.stringify({ ok: "é" }) })
      expect(yield* call(store, work)).toEqual(first)
      expect(state.runs).toBe(1)
      expect((yield* call(store, work, { input: "other" })).status).toBe(409)
    }))

  it.effect("a failure that may have had effects (details.ambiguous) is recorded as 409 ambiguous: the first caller gets the failure, retries get 409 ambiguous, the work never runs again", () =>
    Effect.gen(function*() {
      const store = yield* memory
      const failure = new JournalWriteFailed({ message: "the turn's end could not be recorded", details: { ambiguous: true } })
      const { state, work } = counted(Effect.fail(failure))
      const first = yield* call(store, work)
      expect(first.status).toBe(500)
      expect(JSON.parse(first.text)).toMatchObject({ code: "journal_write_failed", details: { ambiguous: true } })
      for (let i = 0; i < 2; i++) {
        const retry = yield* call(store, work)
        expect(retry.status).toBe(409)
        const body = JSON.parse(retry.text)
        expect(body).toMatchObject({
          code: "ambiguous",
          retryable: false,
          details: { ambiguous: true, status: 500, failure: { code: "journal_write_failed", message: "the turn's end could not be recorded" } }
        })
        expect(body.message).toContain("may have taken effect")
      }
      expect(state.runs).toBe(1)
    }))

  it.effect("a 5xx where nothing happened releases the key: the retry with the same key runs", () =>
    Effect.gen(function*() {
      const store = yield* memory
      let fail = true
      const { state, work } = counted(Effect.suspend(() =>
        fail ? Effect.fail(new JournalCorrupt({ message: "the session's journal is corrupt" })) : Effect.succeed(jsonAnswer(200, { ran: true }))
      ))
      expect((yield* call(store, work)).status).toBe(500)
      fail = false
      expect(yield* call(store, work)).toEqual({ status: 200, text: JSON.stringify({ ran: true }) })
      expect(yield* call(store, work)).toEqual({ status: 200, text: JSON.stringify({ ran: true }) })
      expect(state.runs).toBe(2)
    }))

  it.effect("a retryable refusal where nothing happened (409 session_busy) releases the key: the retry with the same key runs", () =>
    Effect.gen(function*() {
      const store = yield* memory
      let busy = true
      const { state, work } = counted(Effect.suspend(() =>
        busy
          ? Effect.fail(new SessionBusy({ message: "a turn is running in this session" }))
          : Effect.succeed(jsonAnswer(200, { ran: true }))
      ))
      const refused = yield* call(store, work)
      expect(refused.status).toBe(409)
      expect(JSON.parse(refused.text)).toMatchObject({ code: "session_busy", retryable: true })
      busy = false
      expect((yield* call(store, work)).status).toBe(200)
      expect(state.runs).toBe(2)
    }))

  it.effect("a non-retryable 4xx refusal is recorded: retries replay it and the work does not run again", () =>
    Effect.gen(function*() {
      const store = yield* memory
      const { state, work } = counted(Effect.fail(new SessionEnded({ message: "the session has ended" })))
      const first = yield* call(store, work)
      expect(first.status).toBe(409)
      expect(yield* call(store, work)).toEqual(first)
      expect(state.runs).toBe(1)
    }))

  it.effect("the store's own failures refuse the request before any work: a failed store is a retryable 500, a damaged log a 503 idempotency_unavailable", () =>
    Effect.gen(function*() {
      const failing = (error: IdempotencyStoreFailed | IdempotencyLogDamaged): IdempotencyShape => ({
        claim: () => Effect.fail(error),
        reserve: () => Effect.fail(error),
        complete: () => Effect.fail(error),
        release: () => Effect.fail(error),
        adopt: () => Effect.fail(error),
        compact: Effect.fail(error)
      })
      const { state, work } = counted(Effect.succeed(jsonAnswer(200, {})))
      const failed = yield* call(failing(new IdempotencyStoreFailed({ reason: "idempotency/claims.log: write failed: ENOSPC" })), work)
      expect(failed.status).toBe(500)
      expect(JSON.parse(failed.text)).toMatchObject({ code: "internal", retryable: true })
      const damaged = yield* call(failing(new IdempotencyLogDamaged({ file: "idempotency/claims.log", offset: 40, reason: "frame body checksum mismatch" })), work)
      expect(damaged.status).toBe(503)
      expect(JSON.parse(damaged.text)).toMatchObject({ code: "idempotency_unavailable", retryable: false })
      expect(state.runs).toBe(0)
    }))
  it.effect("at the store's bound on live keys a new key is 503 overloaded (retryable) before any work, naming the setting; a key already held still replays", () =>
    Effect.gen(function*() {
      const store = yield* IdempotencyMemory.make({ retentionMs: 60_000, maxKeys: 1 })
      const { state, work } = counted(Effect.succeed(jsonAnswer(200, { ok: true })))
      const first = yield* call(store, work)
      expect(first.status).toBe(200)
      const other = idempotent(store, "send:ses_x", "key-2", { input: "x" }, work).pipe(
        Effect.map((res) => ({ status: res.status, text: "" })),
        Effect.catchAll((e) => Effect.succeed({ status: statusOf(e.code), text: JSON.stringify(e) }))
      )
      const refused = yield* other
      expect(refused.status).toBe(503)
      expect(JSON.parse(refused.text)).toMatchObject({ code: "overloaded", retryable: true })
      expect(JSON.parse(refused.text).message).toContain("BRAIN_MAX_IDEMPOTENCY_KEYS")
      expect(yield* call(store, work)).toEqual(first)
      expect(state.runs).toBe(1)
    }))

  it.effect("once the server is stopping a key is only looked up: a key held replays its answer and one in flight is 409 in_flight, while a new key is 503 overloaded with the work not run and nothing claimed or completed in the store, so that it runs once the server is back", () =>
    Effect.gen(function*() {
      const inner = yield* memory
      const writes = { claims: 0, completes: 0 }
      const store: IdempotencyShape = {
        ...inner,
        claim: (...a) => Effect.tap(inner.claim(...a), () => void writes.claims++),
        complete: (...a) => Effect.tap(inner.complete(...a), () => void writes.completes++)
      }
      let stopping = false
      const keyed = (key: string, work: Effect.Effect<Answer, ApiError>) =>
        idempotent(store, "create", key, { input: "x" }, work, { stopping: () => stopping }).pipe(
          Effect.map((res) => ({ status: res.status, text: textOf(res) })),
          Effect.catchAll((e) => Effect.succeed({ status: statusOf(e.code), text: JSON.stringify({ code: e.code, retryable: e.retryable, details: e.details }) }))
        )
      const answered = counted(Effect.succeed(jsonAnswer(201, { session_id: "ses_1" })))
      const first = yield* keyed("held", answered.work)
      const gate = yield* Deferred.make<void>()
      const slow = counted(Effect.as(Deferred.await(gate), jsonAnswer(201, { session_id: "ses_2" })))
      const inFlight = yield* Effect.fork(keyed("in-flight", slow.work))
      yield* Effect.yieldNow()
      const before = { ...writes }

      stopping = true
      const replayed = yield* keyed("held", answered.work)
      const running = yield* keyed("in-flight", slow.work)
      const fresh = counted(Effect.succeed(jsonAnswer(201, { session_id: "ses_3" })))
      const refused = yield* keyed("new", fresh.work)
      const during = { ...writes }
      yield* Deferred.succeed(gate, undefined)
      const ranThrough = yield* Fiber.join(inFlight)

      expect(replayed).toEqual(first)
      expect(answered.state.runs).toBe(1)
      expect(running.status).toBe(409)
      expect(JSON.parse(running.text)).toMatchObject({ code: "ambiguous", retryable: true, details: { in_flight: true } })
      expect(refused.status).toBe(503)
      expect(JSON.parse(refused.text)).toMatchObject({ code: "overloaded", retryable: true })
      expect(fresh.state.runs, "the work never ran").toBe(0)
      expect(during, "nothing written to the store").toEqual(before)
      expect(ranThrough.status).toBe(201)
      stopping = false
      expect(yield* keyed("new", fresh.work)).toEqual({ status: 201, text: JSON.stringify({ session_id: "ses_3" }) })
      expect(fresh.state.runs).toBe(1)
    }))
})

/**
 * A send or submit whose key is claimed in its session's journal (`idempotentTurn`): a fake
 * session stands for the journal, answering from what it recorded per key.
 */
describe("idempotentTurn: a turn's key lives in its session's journal", () => {
  type Seen = Keyed<{ readonly n: number }>
  const fakeSession = (refusal?: ApiError) => {
    const journal = new Map<string, { readonly hash: string; readonly n: number }>()
    const state = { runs: 0, keyedRuns: 0 }
    const work = (request: TurnRequest | undefined): Effect.Effect<Seen, ApiError> =>
      Effect.suspend(() => {
        if (request) {
          const seen = journal.get(request.key)
          if (seen) return Effect.succeed(seen.hash === request.hash ? { _tag: "Answered", value: { n: seen.n } } : { _tag: "Conflict" })
        }
        state.runs++
        if (refusal) return Effect.fail(refusal)
        if (request) {
          state.keyedRuns++
          journal.set(request.key, { hash: request.hash, n: state.runs })
        }
        return Effect.succeed({ _tag: "Answered", value: { n: state.runs } })
      })
    return { state, work }
  }
  const turn = (store: IdempotencyShape, work: (r: TurnRequest | undefined) => Effect.Effect<Seen, ApiError>, key: string | undefined, body: unknown = { input: "x" }) =>
    idempotentTurn(store, "send:ses_x", key, body, work, (v) => jsonAnswer(200, v)).pipe(
      Effect.map((res) => ({ status: res.status, text: textOf(res) })),
      Effect.catchAll((e) => Effect.succeed({ status: statusOf(e.code), text: JSON.stringify({ code: e.code, retryable: e.retryable }) }))
    )
  /** A store that counts what it was asked to write (claims and answers), over the memory store. */
  const counting = Effect.map(memory, (inner) => {
    const writes = { claims: 0, completes: 0 }
    const store: IdempotencyShape = {
      ...inner,
      claim: (...a) => Effect.tap(inner.claim(...a), () => void writes.claims++),
      complete: (...a) => Effect.tap(inner.complete(...a), () => void writes.completes++)
    }
    return { store, writes }
  })

  it.effect("a keyed turn that runs asks the store to write nothing; its retries are answered from the session with the same bytes, and a different body is 409 conflict", () =>
    Effect.gen(function*() {
      const { store, writes } = yield* counting
      const { state, work } = fakeSession()
      const first = yield* turn(store, work, "k")
      expect(first).toEqual({ status: 200, text: JSON.stringify({ n: 1 }) })
      expect(yield* turn(store, work, "k")).toEqual(first)
      expect(JSON.parse((yield* turn(store, work, "k", { input: "other" })).text).code).toBe("conflict")
      expect(state.runs).toBe(1)
      expect(writes).toEqual({ claims: 0, completes: 0 })
      // The reservation is gone: the store itself holds nothing for the key.
      expect(yield* store.claim("send:ses_x", "k", "any")).toEqual({ _tag: "Claimed" })
    }))

  it.effect("while a keyed turn runs, a retry with its key is 409 ambiguous and retryable, and does not reach the session", () =>
    Effect.gen(function*() {
      const store = yield* memory
      const gate = yield* Deferred.make<void>()
      const state = { runs: 0 }
      const slow = (_: TurnRequest | undefined) =>
        Effect.zipRight(Effect.sync(() => state.runs++), Effect.as(Deferred.await(gate), { _tag: "Answered", value: { n: 1 } } as Seen))
      const first = yield* Effect.fork(turn(store, slow, "k"))
      yield* Effect.yieldNow()
      const retry = yield* turn(store, slow, "k")
      expect(retry.status).toBe(409)
      expect(JSON.parse(retry.text)).toEqual({ code: "ambiguous", retryable: true })
      yield* Deferred.succeed(gate, undefined)
      expect((yield* Fiber.join(first)).status).toBe(200)
      expect(state.runs).toBe(1)
    }))

  it.effect("a keyed turn refused before it started (a definite 4xx) is recorded in the store and replayed; a retryable refusal leaves the key free", () =>
    Effect.gen(function*() {
      const { store, writes } = yield* counting
      const ended = fakeSession(new SessionEnded({ message: "the session has ended" }))
      const first = yield* turn(store, ended.work, "k")
      expect(first.status).toBe(409)
      expect(yield* turn(store, ended.work, "k")).toEqual(first)
      expect(ended.state.runs).toBe(1)
      expect(writes.completes).toBe(1)
      const busy = fakeSession(new SessionBusy({ message: "a turn is running in this session" }))
      expect((yield* turn(store, busy.work, "b")).status).toBe(409)
      expect((yield* turn(store, busy.work, "b")).status).toBe(409)
      expect(busy.state.runs).toBe(2)
      expect(writes.completes).toBe(1)
    }))

  it.effect("a keyed turn refused not_found frees its key instead of keeping the refusal, so a deleted session's keys handed over later are not shadowed", () =>
    Effect.gen(function*() {
      const { store, writes } = yield* counting
      const gone = fakeSession(new NotFound({ message: "no such session" }))
      expect((yield* turn(store, gone.work, "k")).status).toBe(404)
      expect((yield* turn(store, gone.work, "k")).status).toBe(404)
      expect(gone.state.runs).toBe(2)
      expect(writes.completes).toBe(0)
      // The delete's hand-over, after the refusal: the retry gets the session's answer.
      yield* store.adopt([{ scope: "send:ses_x", key: "k", bodyHash: hashRequest({ input: "x" }), atMs: 0, answer: jsonAnswer(200, { n: 7 }) }])
      expect(yield* turn(store, gone.work, "k")).toEqual({ status: 200, text: JSON.stringify({ n: 7 }) })
      expect(gone.state.runs).toBe(2)
    }))

  it.effect("a keyed cancel, end or delete of a session that does not exist keeps no key in the log (a session id is never minted twice, so its retry is refused the same way), while a module's removal keeps its 404", () =>
    Effect.gen(function*() {
      // A log of 2 keys, a session's share of 1: if 404s were kept, the second would be refused.
      const store = yield* IdempotencyMemory.make({ retentionMs: 60_000, maxKeys: 2, maxSessionKeys: 1 })
      const gone = counted(Effect.fail(new NotFound({ message: "no such session" })))
      for (let i = 0; i < 5; i++) {
        for (const scope of [`cancel:ses_${i}`, `end:ses_${i}`, `delete:ses_${i}`]) {
          const r = yield* idempotent(store, scope, `k${i}`, {}, gone.work)
          expect(r.status).toBe(404)
        }
      }
      expect(gone.state.runs).toBe(15)
      // The log is empty: two keys fit.
      expect(yield* store.claim("create", "a", "h")).toEqual({ _tag: "Claimed" })
      const removed = counted(Effect.fail(new NotFound({ message: "no such module" })))
      expect((yield* idempotent(store, "agentloops:remove:m1", "k", {}, removed.work)).status).toBe(404)
      expect((yield* idempotent(store, "agentloops:remove:m1", "k", {}, removed.work)).status).toBe(404)
      expect(removed.state.runs).toBe(1)
    }))

  it.effect("a request refused because its session holds its share of the log is 503 overloaded, retryable, naming BRAIN_MAX_SESSION_LOG_KEYS with the session's count and its share; nothing ran", () =>
    Effect.gen(function*() {
      const store = yield* IdempotencyMemory.make({ retentionMs: 60_000, maxKeys: 10, maxSessionKeys: 1 })
      const ok = counted(Effect.succeed(jsonAnswer(200, { ok: true })))
      expect((yield* idempotent(store, "cancel:ses_a", "k1", {}, ok.work)).status).toBe(200)
      const refused = yield* Effect.flip(idempotent(store, "cancel:ses_a", "k2", {}, ok.work))
      expect(refused).toMatchObject({ code: "overloaded", retryable: true, details: { setting: "BRAIN_MAX_SESSION_LOG_KEYS", keys: 1, max_keys: 1 } })
      expect(refused.message).toContain("ses_a")
      expect(ok.state.runs).toBe(1)
      expect((yield* idempotent(store, "cancel:ses_b", "k2", {}, ok.work)).status).toBe(200)
    }))

  it.effect("a keyed turn whose start may have been written (an ambiguous journal failure) is recorded in the store as 409 ambiguous, which retries get before the session is asked", () =>
    Effect.gen(function*() {
      const { store, writes } = yield* counting
      const failed = fakeSession(new JournalWriteFailed({ message: "the write of turn_started failed", details: { ambiguous: true } }))
      const first = yield* turn(store, failed.work, "k")
      expect([first.status, JSON.parse(first.text).code]).toEqual([500, "journal_write_failed"])
      const retry = yield* turn(store, failed.work, "k")
      expect(retry.status).toBe(409)
      expect(JSON.parse(retry.text)).toMatchObject({ code: "ambiguous", retryable: false, details: { ambiguous: true, failure: { code: "journal_write_failed" } } })
      expect(failed.state.runs).toBe(1)
      expect(writes.completes).toBe(1)
    }))

  it.effect("at the store's bound a keyed turn still runs and replays (its key lives in the session); one refused before it started is 503 overloaded and keeps nothing, so its retry runs once there is room; an ambiguous one is kept past the bound", () =>
    Effect.gen(function*() {
      const store = yield* IdempotencyMemory.make({ retentionMs: 60_000, maxKeys: 1 })
      expect(yield* store.claim("other", "filler", "h")).toEqual({ _tag: "Claimed" })
      const { state, work } = fakeSession()
      const first = yield* turn(store, work, "k")
      expect(first).toEqual({ status: 200, text: JSON.stringify({ n: 1 }) })
      expect(yield* turn(store, work, "k")).toEqual(first)
      expect(state.runs).toBe(1)
      const ended = fakeSession(new SessionEnded({ message: "the session has ended" }))
      for (let i = 1; i <= 2; i++) {
        const refused = yield* turn(store, ended.work, "e")
        expect(refused.status).toBe(503)
        expect(JSON.parse(refused.text)).toMatchObject({ code: "overloaded", retryable: true })
        expect(ended.state.runs).toBe(i)
      }
      // Room again: the refusal is kept and replayed, the session no longer asked.
      yield* store.release("other", "filler")
      expect((yield* turn(store, ended.work, "e")).status).toBe(409)
      expect((yield* turn(store, ended.work, "e")).status).toBe(409)
      expect(ended.state.runs).toBe(3)
      // Full again (the refusal kept is the one key): an outcome that may have had effects is kept all the same.
      const failed = fakeSession(new JournalWriteFailed({ message: "the write of turn_started failed", details: { ambiguous: true } }))
      expect((yield* turn(store, failed.work, "a")).status).toBe(500)
      expect(JSON.parse((yield* turn(store, failed.work, "a")).text)).toMatchObject({ code: "ambiguous", retryable: false })
      expect(failed.state.runs).toBe(1)
    }))

  it.effect("without a key the turn runs every time and the store is not asked", () =>
    Effect.gen(function*() {
      const { store, writes } = yield* counting
      const { state, work } = fakeSession()
      expect((yield* turn(store, work, undefined)).text).toBe(JSON.stringify({ n: 1 }))
      expect((yield* turn(store, work, undefined)).text).toBe(JSON.stringify({ n: 2 }))
      expect(state).toEqual({ runs: 2, keyedRuns: 0 })
      expect(writes).toEqual({ claims: 0, completes: 0 })
    }))
})
