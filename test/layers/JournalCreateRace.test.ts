/**
 * A session a create of this process is making is not there yet for anyone else: a list or a read
 * that meets its directory before the create returns answers not found and keeps nothing of it, so
 * the creator's first append finds the journal the create made. (A list that opened it half made
 * kept a handle with no segment, and the first append failed `EEXIST` making segment 1 again.)
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, Layer } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { Journal } from "../../src/services/Journal.js"
import { tempDir } from "../support/journals.js"

describe("a session being created", () => {
  it.scopedLive("a read that meets it before its create returns answers not found and keeps nothing; the creator's first append then succeeds", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const reached = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      // The create pauses once its session's journal directory is made, before its first segment.
      const driver = {
        ...nodeDriver,
        mkdir: (p: string) =>
          Effect.zipRight(
            nodeDriver.mkdir(p),
            p.endsWith("journal") ? Effect.zipRight(Deferred.succeed(reached, undefined), Deferred.await(gate)) : Effect.void
          )
      }
      const layer = Layer.scoped(Journal, Effect.orDie(JournalFile.make({ dataDir }))).pipe(Layer.provide(Layer.succeed(FileDriver, driver)))
      yield* Effect.gen(function*() {
        const journal = yield* Journal
        const id = yield* mintSessionId
        const creating = yield* Effect.fork(journal.create(id))
        yield* Deferred.await(reached)
        const read = yield* Effect.either(journal.lastSequence(id))
        expect(Either.isLeft(read) && read.left._tag).toBe("SessionNotFound")
        expect((yield* journal.list).includes(id)).toBe(true)
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(creating)
        const appended = yield* Effect.either(journal.append(id, [entry("session_creation_started", { configuration: { agentloop: "official", model: { provider: "scripted" } } })]))
        expect(appended, JSON.stringify(appended)).toMatchObject({ _tag: "Right" })
        expect(yield* journal.lastSequence(id)).toBe(1)
      }).pipe(Effect.provide(layer))
    }))
})
