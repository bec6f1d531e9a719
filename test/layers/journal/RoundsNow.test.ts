/**
 * The journal's writer starts a round without its fiber when the store can (Store.ts `commitNow`,
 * Writer.ts `startRound`): the round's writes are submitted in the scheduler's step that takes the
 * queue, and its appenders are answered from the writes' callbacks. What group commit promised
 * stays: the appends of one step share a round, a round starts only once the one before has ended
 * (what it left as an effect included), a bug in the start fails only that round's appends, and a
 * close answers every queued append. Over the file store, only the Node driver's own `syncMany`
 * starts rounds so; a driver that wraps it sees every round as an effect.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Scope } from "effect"
import { mintSessionId, type SessionId } from "../../../src/domain/Ids.js"
import { entry } from "../../../src/domain/Records.js"
import * as Core from "../../../src/layers/journal/Core.js"
import { nodeDriver, syncManyVia } from "../../../src/layers/journal/FileDriver.js"
import * as FileStore from "../../../src/layers/journal/FileStore.js"
import * as MemoryStore from "../../../src/layers/journal/MemoryStore.js"
import type { CommitItem, JournalStore } from "../../../src/layers/journal/Store.js"
import { type Prepared, prepareEntries } from "../../../src/layers/journal/Encode.js"
import { tempDir } from "../../support/journals.js"

const kv = (key: string) => entry("kv_put", { key, value: "x" })

/** A round the controlled store was handed: its sessions, and how to end it. */
interface HeldRound {
  readonly sessions: ReadonlyArray<string>
  /** Makes every item durable (the memory store's commit) and ends the round with `rest`. */
  readonly end: (rest?: Effect.Effect<void>) => void
  /** Fails every item (nothing of it durable) and ends the round. */
  readonly fail: (reason: string) => void
}

/** The memory store, with rounds started now and held until the test ends them; `commit` (the fiber's) counted. */
const controlled = (options: { readonly throwOnce?: boolean } = {}) => {
  const { store: inner } = MemoryStore.make()
  const rounds: Array<HeldRound> = []
  let fiberRounds = 0
  let throwNext = options.throwOnce === true
  const store: JournalStore<MemoryStore.MemorySession> = {
    ...inner,
    commit: (items, onDone) => {
      fiberRounds++
      return inner.commit(items, onDone)
    },
    commitNow: (items: ReadonlyArray<CommitItem<MemoryStore.MemorySession>>, onDone, onEnd) => {
      if (throwNext) {
        throwNext = false
        throw new Error("a bug in the round's start")
      }
      rounds.push({
        sessions: items.map((i) => i.session),
        end: (rest) => {
          Effect.runSync(inner.commit(items, onDone))
          onEnd(rest)
        },
        fail: (reason) => {
          items.forEach((_, i) => onDone(i, reason))
          onEnd(undefined)
        }
      })
      return undefined
    }
  }
  return { store, rounds, fiberRounds: () => fiberRounds }
}

/** Lets the scheduler run what is due (fibers, a round's start) until `check` holds. */
const until = (check: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1000 && !check(); i++) yield* Effect.yieldNow()
    expect(check()).toBe(true)
  })

const sessionsOn = (journal: Effect.Effect.Success<ReturnType<typeof Core.make>>, n: number) =>
  Effect.gen(function*() {
    const ids: Array<SessionId> = []
    for (let i = 0; i < n; i++) {
      const s = yield* mintSessionId
      yield* journal.create(s)
      ids.push(s)
    }
    return ids
  })

describe("a round started without the writer's fiber", () => {
  it.scoped("the appends of one step share one round; the next starts only once it has ended, and none through the fiber", () =>
    Effect.gen(function*() {
      const c = controlled()
      const journal = yield* Core.make(c.store)
      const ids = yield* sessionsOn(journal, 6)
      const first = yield* Effect.fork(Effect.forEach(ids, (s) => journal.append(s, [kv("a")]), { concurrency: "unbounded" }))
      yield* until(() => c.rounds.length === 1)
      expect([...c.rounds[0]!.sessions].sort()).toEqual([...ids].sort())
      // Appended while the round is under way: they wait for its end.
      const second = yield* Effect.fork(Effect.forEach(ids.slice(0, 3), (s) => journal.append(s, [kv("b")]), { concurrency: "unbounded" }))
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow()
      expect(c.rounds.length).toBe(1)
      c.rounds[0]!.end()
      expect(yield* Fiber.join(first)).toEqual(ids.map(() => [1]))
      yield* until(() => c.rounds.length === 2)
      expect([...c.rounds[1]!.sessions].sort()).toEqual([...ids.slice(0, 3)].sort())
      c.rounds[1]!.end()
      expect(yield* Fiber.join(second)).toEqual([[2], [2], [2]])
      expect(c.fiberRounds()).toBe(0)
    }))

  it.scoped("what a round leaves as an effect is run before the next round starts", () =>
    Effect.gen(function*() {
      const c = controlled()
      const journal = yield* Core.make(c.store)
      const [a] = yield* sessionsOn(journal, 1)
      const first = yield* Effect.fork(journal.append(a!, [kv("a")]))
      yield* until(() => c.rounds.length === 1)
      let restRan = false
      let release: (() => void) | undefined
      const rest = Effect.async<void>((resume) => {
        release = () => {
          restRan = true
          resume(Effect.void)
        }
      })
      c.rounds[0]!.end(rest)
      expect(yield* Fiber.join(first)).toEqual([1])
      const second = yield* Effect.fork(journal.append(a!, [kv("b")]))
      yield* until(() => release !== undefined)
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow()
      expect(c.rounds.length).toBe(1)
      release!()
      yield* until(() => c.rounds.length === 2)
      expect(restRan).toBe(true)
      c.rounds[1]!.end()
      expect(yield* Fiber.join(second)).toEqual([2])
    }))

  it.scoped("a bug thrown while a round starts fails that round's appends, and the writer goes on serving", () =>
    Effect.gen(function*() {
      const c = controlled({ throwOnce: true })
      const journal = yield* Core.make(c.store)
      const [a, b] = yield* sessionsOn(journal, 2)
      const failed = yield* Effect.either(journal.append(a!, [kv("x")]))
      expect(failed._tag === "Left" && failed.left._tag).toBe("JournalWriteFailed")
      const next = yield* Effect.fork(journal.append(b!, [kv("y")]))
      yield* until(() => c.rounds.length === 1)
      c.rounds[0]!.end()
      expect(yield* Fiber.join(next)).toEqual([1])
    }))

  it.effect("closing the journal waits for the round under way and answers every append queued behind it", () =>
    Effect.gen(function*() {
      const c = controlled()
      const scope = yield* Scope.make()
      const journal = yield* Core.make(c.store).pipe(Scope.extend(scope))
      const [a, b] = yield* sessionsOn(journal, 2)
      const first = yield* Effect.fork(journal.append(a!, [kv("a")]))
      yield* until(() => c.rounds.length === 1)
      const queued = yield* Effect.fork(journal.append(b!, [kv("b")]))
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow()
      expect(closing.unsafePoll()).toBe(null)
      c.rounds[0]!.end()
      yield* until(() => c.rounds.length === 2)
      c.rounds[1]!.end()
      yield* Fiber.join(closing)
      expect(yield* Fiber.join(first)).toEqual([1])
      expect(yield* Fiber.join(queued)).toEqual([1])
    }))
})

describe("the file store's rounds started now", () => {
  /** A file store over `driver`, with one session whose segment is open at its end (one round committed first). */
  const storeWith = (syncMany?: typeof nodeDriver.syncMany) =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const driver = syncMany === undefined ? nodeDriver : { ...nodeDriver, syncMany }
      const store = yield* FileStore.make(driver, dir)
      const session = yield* mintSessionId
      yield* store.create(session)
      const opened = yield* store.open(session)
      const item = (sequence: number): CommitItem<typeof opened.state> => {
        const [prepared] = prepareEntries([kv(`k${sequence}`)]) as ReadonlyArray<Prepared>
        return { session, state: opened.state, generation: undefined, recordedAtMs: 1, records: [{ sequence, prepared: prepared!, continues: false }] }
      }
      yield* store.commit([item(1)], () => {})
      return { store, state: opened.state, item }
    })

  it.scoped("with the Node driver, a round on a file open at its end is under way once commitNow returns, and ends after its item is durable", () =>
    Effect.gen(function*() {
      const { item, state, store } = yield* storeWith()
      const told: Array<string> = []
      const ended = yield* Deferred.make<Effect.Effect<void> | undefined>()
      const slow = store.commitNow!([item(2)], (i, failure) => told.push(`${i}:${failure ?? "ok"}`), (rest) => {
        told.push("end")
        Deferred.unsafeDone(ended, Exit.succeed(rest))
      })
      expect(slow).toBeUndefined()
      expect(told).toEqual([])
      expect(yield* Deferred.await(ended)).toBeUndefined()
      expect(told).toEqual(["0:ok", "end"])
      const records = yield* store.read(state, 0, 2, 10, undefined)
      expect(records.map((r) => r.sequence)).toEqual([1, 2])
    }))

  it.scoped("a driver whose syncMany is its own gets the round as an effect: commitNow starts nothing and never calls onEnd", () =>
    Effect.gen(function*() {
      let rounds = 0
      const { item, state, store } = yield* storeWith((items, onDone, log) => {
        rounds++
        return syncManyVia(nodeDriver)(items, onDone, log)
      })
      const before = rounds
      let endCalled = false
      const slow = store.commitNow!([item(2)], () => {}, () => {
        endCalled = true
      })
      expect(slow).toBeDefined()
      expect(rounds).toBe(before)
      yield* slow!
      expect(rounds).toBe(before + 1)
      expect(endCalled).toBe(false)
      const records = yield* store.read(state, 0, 2, 10, undefined)
      expect(records.map((r) => r.sequence)).toEqual([1, 2])
    }))

  it.scoped("an enqueued append is told its sequences while its round is under way, nothing durable yet; done comes only once the round is durable, or failed", () =>
    Effect.gen(function*() {
      const c = controlled()
      const journal = yield* Core.make(c.store)
      const [a] = yield* sessionsOn(journal, 1)
      for (const how of ["end", "fail"] as const) {
        const seen: Array<string> = []
        let done: ((exit: Exit.Exit<ReadonlyArray<number>, unknown>) => void) | undefined
        const answered = Effect.async<Exit.Exit<ReadonlyArray<number>, unknown>>((resume) => {
          done = (exit) => resume(Effect.succeed(exit))
        })
        const waiting = yield* Effect.fork(answered)
        yield* until(() => done !== undefined)
        const before = yield* journal.lastSequence(a!)
        expect(journal.enqueue!(a!, [kv("x"), kv("y")], (exit) => {
          seen.push(Exit.isSuccess(exit) ? `done ${exit.value.join(",")}` : "failed")
          done!(exit)
        }, { sequenced: (sequences) => void seen.push(`sequenced ${sequences.join(",")}`) })).toBe(true)
        yield* until(() => c.rounds.length > 0 && seen.length > 0)
        expect(seen).toEqual([`sequenced ${before + 1},${before + 2}`])
        expect(yield* journal.lastSequence(a!)).toBe(before)
        const round = c.rounds.shift()!
        if (how === "end") round.end()
        else round.fail("injected")
        yield* Fiber.join(waiting)
        expect(seen).toEqual([`sequenced ${before + 1},${before + 2}`, how === "end" ? `done ${before + 1},${before + 2}` : "failed"])
      }
    }))
})
