/**
 * The owner's fence: journal cores (owners) sharing one store, as processes would share a
 * database. Once another owner claims a session, nothing the first one appends lands, and the
 * first one never takes the session back by itself.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import type { MemorySessions } from "../../src/layers/JournalMemory.js"

const kv = (key: string) => entry("kv_put", { key, value: key })

/** Two owners of one store, and a session the first created and appended `a1` to. */
const twoOwners = Effect.gen(function*() {
  const shared: MemorySessions = new Map()
  const a = (yield* JournalMemory.makeOver(shared)).journal
  const b = (yield* JournalMemory.makeOver(shared)).journal
  const s = yield* mintSessionId
  yield* a.create(s)
  expect(yield* a.append(s, [kv("a1")])).toEqual([1])
  return { shared, a, b, s }
})

describe("journal owners over one shared store", () => {
  it.scoped("an owner's appends are refused once another owner claims the session, and nothing of them is written", () =>
    Effect.gen(function*() {
      const { a, b, s, shared } = yield* twoOwners
      // The second owner's first access claims the session; it reads what the first committed.
      expect((yield* b.read(s, { after: 0, limit: 10 })).map((r) => r.payload.key)).toEqual(["a1"])
      expect(yield* b.append(s, [kv("b1")])).toEqual([2])
      const refused = yield* Effect.either(a.append(s, [kv("a2"), kv("a3")]))
      expect(Either.isLeft(refused) && refused.left._tag).toBe("JournalWriteFailed")
      expect(Either.isLeft(refused) && refused.left.message).toContain("another owner claimed the session")
      // Sticky, and not undone by a reset: the first owner does not claim the session back.
      yield* a.reset(s)
      const again = yield* Effect.either(a.append(s, [kv("a4")]))
      expect(Either.isLeft(again) && again.left._tag).toBe("JournalWriteFailed")
      expect(yield* b.append(s, [kv("b2")])).toEqual([3])
      const records = yield* b.read(s, { after: 0, limit: 10 })
      expect(records.map((r) => [r.sequence, r.payload.key])).toEqual([[1, "a1"], [2, "b1"], [3, "b2"]])
      expect(shared.get(s)!.generation).toBe(2)
    }))

  it.scoped("records an owner staged are refused with its appends once another owner claims the session", () =>
    Effect.gen(function*() {
      const { a, b, s } = yield* twoOwners
      const staged = yield* a.stage(s, [kv("staged")])
      expect(staged._tag).toBe("Staged")
      expect(yield* b.append(s, [kv("b1")])).toEqual([2])
      expect(Either.isLeft(yield* Effect.either(a.append(s, [kv("a2")])))).toBe(true)
      const records = yield* b.read(s, { after: 0, limit: 10 })
      expect(records.map((r) => r.payload.key)).toEqual(["a1", "b1"])
    }))

  it.scoped("an owner keeps its claim when the session is dropped from memory and opened again", () =>
    Effect.gen(function*() {
      const shared: MemorySessions = new Map()
      const a = (yield* JournalMemory.makeOver(shared, { maxHandles: 1 })).journal
      const s1 = yield* mintSessionId
      const s2 = yield* mintSessionId
      yield* a.create(s1)
      yield* a.create(s2)
      expect(yield* a.append(s1, [kv("x")])).toEqual([1])
      // Opening the second session drops the first from memory; appending to it opens it again.
      expect(yield* a.append(s2, [kv("y")])).toEqual([1])
      expect(yield* a.append(s1, [kv("z")])).toEqual([2])
      expect(shared.get(s1)!.generation).toBe(1)
      // The claim it kept is still the one another owner's claim overtakes.
      const b = (yield* JournalMemory.makeOver(shared)).journal
      expect(yield* b.append(s1, [kv("b")])).toEqual([3])
      expect(Either.isLeft(yield* Effect.either(a.append(s1, [kv("late")])))).toBe(true)
    }))

  it.scoped("a delete by an owner whose claim was overtaken is refused, and the session stays with its new owner", () =>
    Effect.gen(function*() {
      const { a, b, s, shared } = yield* twoOwners
      expect(yield* b.append(s, [kv("b1")])).toEqual([2])
      const refused = yield* Effect.either(a.remove(s))
      expect(Either.isLeft(refused) && refused.left._tag).toBe("JournalWriteFailed")
      expect(shared.has(s)).toBe(true)
      expect(yield* b.append(s, [kv("b2")])).toEqual([3])
      // An owner that never opened the session claims it to delete it.
      const c = (yield* JournalMemory.makeOver(shared)).journal
      yield* c.remove(s)
      expect(shared.has(s)).toBe(false)
      expect(Either.isLeft(yield* Effect.either(b.append(s, [kv("b3")])))).toBe(true)
    }))

  it.scoped("deleting a session lets go of the claim: a session created again under the same id is claimed afresh", () =>
    Effect.gen(function*() {
      const shared: MemorySessions = new Map()
      const a = (yield* JournalMemory.makeOver(shared)).journal
      const s = yield* mintSessionId
      yield* a.create(s)
      yield* a.append(s, [kv("one")])
      yield* a.remove(s)
      yield* a.create(s)
      expect(yield* a.append(s, [kv("two")])).toEqual([1])
      expect(shared.get(s)!.generation).toBe(1)
    }))
})
