/**
 * A session released at once (no idle TTL) whose state is larger than the whole cache of released
 * states (its 3/16 share of BRAIN_CACHE_BYTES) is kept warm instead, in the warm share (1/2): its
 * next turn finds its state in memory and rebuilds nothing. Before, the projection's cache dropped
 * such a state at each release, and every turn parsed its checkpoint and folded again (at
 * BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS, about 40 MiB of state against a 36 MiB share, 340-890 ms a
 * turn). The warm share still bounds them: past it the least recently used is released.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import { SESSION_RELEASE_GRACE_MS } from "../../src/domain/Limits.js"
import { memoryBudget } from "../../src/layers/MemoryBudget.js"
import { rebuiltStates } from "../../src/layers/ProjectionCheckpointed.js"
import { Projection } from "../../src/services/Projection.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

const CACHE_BYTES = 256 * 1024
const KEYED_SENDS = 150
const scripted = { model: { provider: "scripted" as const } }
const keyed = (key: string) => ({ key, hash: `hash of ${key}` })
const rebuilt = () => rebuiltStates.fromCheckpoint + rebuiltStates.fromJournal

/** A session with KEYED_SENDS keyed sends (keys `k0`…), idle; answers the first one's answer. */
const bigSession = Effect.gen(function*() {
  const sessions = yield* Sessions
  const id = (yield* sessions.create(scripted)).session_id
  const first = yield* sessions.sendKeyed(id, { message: "m0" }, keyed("k0"))
  for (let i = 1; i < KEYED_SENDS; i++) yield* sessions.sendKeyed(id, { message: `m${i}` }, keyed(`k${i}`))
  yield* untilIdle(id)
  return { id, first }
})

const stateBytes = (id: SessionId) => Effect.map(Effect.flatMap(Projection, (p) => p.state(id)), (p) => p.state.bytes)

describe("a state too large for the released states' cache", () => {
  it.scoped("is kept warm without a TTL: its next turns rebuild nothing, its keys answer as before, and the warm share bounds such sessions", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const budget = memoryBudget(CACHE_BYTES)
      const a = yield* bigSession
      expect(yield* sessions.warm).toBe(1)

      const before = rebuilt()
      for (let i = 0; i < 5; i++) {
        const sent = yield* sessions.sendKeyed(a.id, { message: `more ${i}` }, keyed(`more ${i}`))
        expect(sent._tag).toBe("Answered")
        yield* untilIdle(a.id)
      }
      // The first key's answer, exactly, from the state kept in memory.
      expect(yield* sessions.sendKeyed(a.id, { message: "m0" }, keyed("k0"))).toEqual(a.first)
      expect(rebuilt()).toBe(before)
      expect(yield* sessions.warm).toBe(1)

      // A small session is released once its grace is over, as any is.
      const small = (yield* sessions.create(scripted)).session_id
      yield* sessions.send(small, { message: "hi" })
      yield* untilIdle(small)
      yield* TestClock.adjust(`${2 * SESSION_RELEASE_GRACE_MS} millis`)
      expect(yield* sessions.warm).toBe(1)

      // Two such sessions do not fit the warm share together: the least recently used is released.
      const c = yield* bigSession
      expect(yield* sessions.warm).toBe(1)
      const bytes = yield* stateBytes(a.id)
      expect(bytes).toBeGreaterThan(budget.projectionBytes)
      expect(bytes).toBeLessThanOrEqual(budget.warmBytes)
      expect(bytes + (yield* stateBytes(c.id))).toBeGreaterThan(budget.warmBytes)
    }).pipe(Effect.provide(runtimeLayer({ config: { cacheBytes: CACHE_BYTES } }))))
})
