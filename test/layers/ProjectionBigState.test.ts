/**
 * A released session's state larger than a quarter of the state cache is still kept (the most
 * recently released such state, while it fits the whole cache): its next turn does not rebuild it
 * from its checkpoint and journal. Before, a state past a quarter was never kept, so every turn of
 * a big session (thousands of idempotency keys) parsed its checkpoint and folded again.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"

/** A session with `turns` conversational turns. */
const writeSession = (journal: JournalShape, session: SessionId, turns: number) =>
  Effect.gen(function*() {
    yield* journal.create(session)
    yield* journal.append(session, [entry("session_creation_started", { configuration: { agentloop: "official", model: "m" } })])
    yield* journal.append(session, [entry("session_creation_ended", { sequence: 1 })])
    for (let t = 0; t < turns; t++) {
      const [turn] = yield* journal.append(session, [entry("turn_started", { input: { message: `m${t}` }, mode: "send" })])
      yield* journal.append(session, [
        entry("transcript_delta", { keep: 2 * t, append: [{ role: "user", content: `m${t}` }, { role: "assistant", content: `a${t}` }] })
      ])
      yield* journal.append(session, [entry("turn_ended", { sequence: turn! })])
    }
  })

/** The journal and checkpoint store, with a projection of `cacheBytes` over a journal that counts its reads. */
const setup = (cacheBytes: number) =>
  Effect.gen(function*() {
    const journal = yield* Journal
    let reads = 0
    const counting: JournalShape = { ...journal, read: (session, options) => Effect.suspend(() => (reads++, journal.read(session, options))) }
    const projection = yield* ProjectionCheckpointed.make(cacheBytes).pipe(Effect.provideService(Journal, counting))
    return { journal, projection, reads: () => reads }
  })

const services = Layer.merge(JournalMemory.layer, CheckpointStore.layerMemory)

describe("the released-state cache", () => {
  it.scoped("keeps a released state above a quarter of the cache, so its next open reads nothing from the journal", () =>
    Effect.gen(function*() {
      const session = yield* mintSessionId
      const { journal, projection, reads } = yield* setup(1)
      yield* writeSession(journal, session, 50)
      const first = yield* projection.state(session)
      expect(first.source).toBe("journal")
      // A cache of twice the state: the state is above its quarter, within its whole.
      const big = yield* ProjectionCheckpointed.make(2 * first.state.bytes).pipe(
        Effect.provideService(Journal, { ...journal, read: (s, o) => Effect.suspend(() => (counted++, journal.read(s, o))) })
      )
      let counted = 0
      yield* big.remember(session, first.state)
      expect(big.cached!(session)).toBe(first.state)
      const again = yield* big.state(session)
      expect(again.source).toBe("memory")
      expect(again.state).toBe(first.state)
      expect(counted).toBe(0)
      expect(reads()).toBeGreaterThan(0)
    }).pipe(Effect.provide(services)))

  it.scoped("keeps one such big state at a time, and none larger than the whole cache", () =>
    Effect.gen(function*() {
      const a = yield* mintSessionId
      const b = yield* mintSessionId
      const small = yield* mintSessionId
      const { journal, projection } = yield* setup(1)
      yield* writeSession(journal, a, 50)
      yield* writeSession(journal, b, 50)
      yield* writeSession(journal, small, 1)
      const sa = (yield* projection.state(a)).state
      const sb = (yield* projection.state(b)).state
      const ss = (yield* projection.state(small)).state
      const cacheBytes = 3 * Math.max(sa.bytes, sb.bytes)
      expect(sa.bytes).toBeGreaterThan(cacheBytes / 4)
      expect(ss.bytes).toBeLessThanOrEqual(cacheBytes / 4)
      const cache = yield* ProjectionCheckpointed.make(cacheBytes).pipe(Effect.provideService(Journal, journal))
      yield* cache.remember(small, ss)
      yield* cache.remember(a, sa)
      expect(cache.cached!(a)).toBe(sa)
      yield* cache.remember(b, sb)
      // b took a's place; the small one stays.
      expect(cache.cached!(b)).toBe(sb)
      expect(cache.cached!(a)).toBeUndefined()
      expect(cache.cached!(small)).toBe(ss)

      const tiny = yield* ProjectionCheckpointed.make(sa.bytes - 1).pipe(Effect.provideService(Journal, journal))
      yield* tiny.remember(a, sa)
      expect(tiny.cached!(a)).toBeUndefined()
    }).pipe(Effect.provide(services)))
})
