import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, TestClock } from "effect"
import { SESSION_RELEASE_GRACE_MS } from "../../src/domain/Limits.js"
import { Sessions } from "../../src/services/Sessions.js"
import { Journal } from "../../src/services/Journal.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"
import { tempDir } from "../support/journals.js"

const scripted = { provider: "scripted" as const }

describe("Session lifecycle", () => {
  it.scoped("by default creation and each turn keep the actor only for the release grace: released once unused for it", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ model: scripted })
      expect(yield* sessions.warm).toBe(1)
      // Released between one and two graces after its last use.
      yield* TestClock.adjust(`${2 * SESSION_RELEASE_GRACE_MS} millis`)
      expect(yield* sessions.warm).toBe(0)
      yield* sessions.send(session_id, { message: "hi" })
      yield* untilIdle(session_id)
      expect(yield* sessions.warm).toBe(1)
      // Used again within the grace: kept on from its new last use.
      yield* TestClock.adjust(`${SESSION_RELEASE_GRACE_MS / 2} millis`)
      expect((yield* sessions.send(session_id, { message: "again" })).turn.status).toBe("ended")
      yield* untilIdle(session_id)
      yield* TestClock.adjust(`${SESSION_RELEASE_GRACE_MS} millis`)
      expect(yield* sessions.warm).toBe(1)
      yield* TestClock.adjust(`${SESSION_RELEASE_GRACE_MS} millis`)
      expect(yield* sessions.warm).toBe(0)
      expect((yield* sessions.transcript(session_id)).messages.length).toBe(4)
    }).pipe(Effect.provide(runtimeLayer())))

  it.scoped("with no memory for sessions not in use (BRAIN_CACHE_BYTES=0), creation and each turn release the actor at once", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ model: scripted })
      expect(yield* sessions.warm).toBe(0)
      yield* sessions.send(session_id, { message: "hi" })
      // Released once the turn has closed: its caller is answered first, the release follows.
      yield* untilIdle(session_id)
      expect(yield* sessions.warm).toBe(0)
    }).pipe(Effect.provide(runtimeLayer({ config: { cacheBytes: 0 } }))))

  it.scoped("idle_ttl_ms keeps the actor warm for that long, then releases it", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ model: scripted, idle_ttl_ms: 1000 })
      expect(yield* sessions.warm).toBe(1)
      yield* TestClock.adjust("999 millis")
      expect(yield* sessions.warm).toBe(1)
      yield* sessions.send(session_id, { message: "hi" })
      yield* TestClock.adjust("999 millis")
      expect(yield* sessions.warm).toBe(1)
      yield* TestClock.adjust("2 millis")
      expect(yield* sessions.warm).toBe(0)
    }).pipe(Effect.provide(runtimeLayer())))

  it.scoped("reads neither activate a session nor keep it warm: a released one stays released, a warm one keeps its own TTL", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ model: scripted, idle_ttl_ms: 1000 })
      const readAll = Effect.gen(function*() {
        yield* sessions.get(session_id)
        yield* sessions.transcript(session_id)
        yield* sessions.events(session_id, { after: 0, limit: 10 })
      })
      // Warm: reads do not extend its TTL.
      yield* TestClock.adjust("900 millis")
      yield* readAll
      expect(yield* sessions.warm).toBe(1)
      yield* TestClock.adjust("101 millis")
      expect(yield* sessions.warm).toBe(0)
      // Released: reads open it for themselves only.
      yield* readAll
      expect(yield* sessions.warm).toBe(0)
      expect((yield* sessions.transcript(session_id)).messages).toEqual([])
      // A message does activate it, for its TTL.
      yield* sessions.send(session_id, { message: "hi" })
      expect(yield* sessions.warm).toBe(1)
    }).pipe(Effect.provide(runtimeLayer())))

  it.scoped("idle_ttl_ms 0 keeps the actor indefinitely; the server default follows the same rule", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      yield* sessions.create({ model: scripted, idle_ttl_ms: 0 })
      yield* TestClock.adjust("1000 days")
      expect(yield* sessions.warm).toBe(1)
      const viaDefault = yield* Effect.provide(
        Effect.gen(function*() {
          const s = yield* Sessions
          yield* s.create({ model: scripted })
          yield* TestClock.adjust("499 millis")
          const before = yield* s.warm
          yield* TestClock.adjust("2 millis")
          return [before, yield* s.warm]
        }),
        runtimeLayer({ config: { sessionIdleTtlMs: 500 } })
      )
      expect(viaDefault).toEqual([1, 0])
    }).pipe(Effect.provide(runtimeLayer())))

  it.scoped("actors kept warm by a TTL share a byte budget: past it the least recently used are released, and still answer", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const big = (i: number) => [{ role: "user" as const, content: `${i}`.repeat(100_000) }]
      const ids: Array<string> = []
      for (let i = 0; i < 10; i++) {
        ids.push((yield* sessions.create({ model: scripted, idle_ttl_ms: 0, transcript: big(i) })).session_id)
      }
      // BRAIN_CACHE_BYTES 800 kB gives warm actors 400 kB: three sessions of ~100 kB, not ten.
      const warm = yield* sessions.warm
      expect(warm).toBeGreaterThanOrEqual(1)
      expect(warm).toBeLessThanOrEqual(4)
      // The newest stays warm; the oldest, released, reopens on demand with everything it had.
      const first = yield* sessions.transcript(ids[0] as any)
      expect(first.messages[0]!.content).toBe("0".repeat(100_000))
      expect((yield* sessions.send(ids[0] as any, { message: "still here" })).turn.status).toBe("ended")
      // Small sessions are all kept: the bound is bytes, not a count.
      for (let i = 0; i < 50; i++) yield* sessions.create({ model: scripted, idle_ttl_ms: 0 })
      expect(yield* sessions.warm).toBeGreaterThanOrEqual(50)
    }).pipe(Effect.provide(runtimeLayer({ config: { cacheBytes: 800_000 } }))))

  it.scoped("an opening transcript is recorded once, as the session's first conversation (not copied into its configuration), and the model sees it", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const opening = [{ role: "user" as const, content: "earlier" }, { role: "assistant" as const, content: "noted" }]
      const { session_id } = yield* sessions.create({ model: scripted, transcript: opening })
      const records = yield* journal.read(session_id, { after: 0, limit: 10 })
      expect(records.map((r) => r.kind)).toEqual(["session_creation_started", "transcript_delta", "session_creation_ended"])
      expect(records[0]!.payload.configuration).not.toHaveProperty("transcript")
      expect(records[1]!.payload).toEqual({ keep: 0, append: opening })
      yield* sessions.send(session_id, { message: "now" })
      const t = yield* sessions.transcript(session_id)
      expect(t.messages.map((m) => m.content)).toEqual(["earlier", "noted", "now", "now"])
    }).pipe(Effect.provide(runtimeLayer())))

  it.scoped("bad create input is refused with a typed error and creates nothing", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const journal = yield* Journal
      const unknownLoop = yield* Effect.either(sessions.create({ model: scripted, agentloop: "nope" }))
      expect(Either.isLeft(unknownLoop) && unknownLoop.left.code).toBe("invalid_request")
      expect(yield* journal.list).toEqual([])
    }).pipe(Effect.provide(runtimeLayer())))

  it.scoped("the file journal runtime keeps sessions across a restart: a new runtime reads and continues them", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const id = yield* Effect.scoped(Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create({ model: scripted })
        yield* sessions.send(session_id, { message: "one" })
        return session_id
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir: dir } }))))
      yield* Effect.scoped(Effect.gen(function*() {
        const sessions = yield* Sessions
        expect((yield* sessions.get(id)).status).toBe("idle")
        const out = yield* sessions.send(id, { message: "two" })
        expect(out.turn.status).toBe("ended")
        expect((yield* sessions.transcript(id)).messages.map((m) => m.content)).toEqual(["one", "one", "two", "two"])
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir: dir } }))))
    }))
})
