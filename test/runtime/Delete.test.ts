/**
 * Delete is exclusive (DESIGN §6): of concurrent deletes one succeeds and the others answer
 * not_found; reads racing it answer from the session or not_found, never an error that calls the
 * deletion corruption; and once it has succeeded nothing of the session is served from memory.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { Sessions } from "../../src/services/Sessions.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

const ROUNDS = 10

describe("session delete", () => {
  it.scoped("of 30 concurrent deletes beside 20 reads exactly one succeeds, the rest are not_found, and afterwards every access is not_found", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        for (let round = 0; round < ROUNDS; round++) {
          const { session_id: id } = yield* sessions.create({ model: { provider: "scripted" } })
          yield* sessions.send(id, { message: `round ${round}` })
          yield* sessions.end(id)
          const deletes = Array.from({ length: 30 }, () => Effect.either(sessions.delete(id)))
          const reads = Array.from({ length: 20 }, (_, i) =>
            Effect.either(
              i % 3 === 0
                ? Effect.asVoid(sessions.get(id))
                : i % 3 === 1
                ? Effect.asVoid(sessions.events(id, { after: 0, limit: 100 }))
                : Effect.asVoid(sessions.transcript(id))
            ))
          const results = yield* Effect.all([...deletes, ...reads], { concurrency: "unbounded" })
          const deleted = results.slice(0, 30)
          expect(deleted.filter(Either.isRight), `round ${round}`).toHaveLength(1)
          for (const d of deleted.filter(Either.isLeft)) expect(d.left.code, `round ${round}`).toBe("not_found")
          for (const r of results.slice(30)) {
            if (Either.isLeft(r)) expect(r.left.code, `round ${round}`).toBe("not_found")
          }
          const afterwards = [
            Effect.asVoid(sessions.get(id)),
            Effect.asVoid(sessions.events(id, { after: 0, limit: 10 })),
            Effect.asVoid(sessions.transcript(id)),
            sessions.delete(id)
          ]
          for (const after of afterwards) {
            const r = yield* Effect.either(after)
            expect(Either.isLeft(r) && r.left.code, `round ${round}`).toBe("not_found")
          }
        }
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir: dir } })))
    }))
})
