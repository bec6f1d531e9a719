/**
 * A create whose first record could not be written (the disk refuses it) is no session: nobody
 * was given its id. It leaves nothing behind — no journal on disk, nothing in the registry of
 * session cells (sessions/Registry.ts) — however often it happens, and its caller is told that
 * nothing was created (not an ambiguous failure: a retry under the same key may run). A later
 * access of its id is not_found. The file journal runs over a fault-injecting driver that answers
 * ENOSPC to every write of a session file until the disk is "freed".
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Either, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { mintSessionId } from "../../src/domain/Ids.js"
import { empty } from "../../src/domain/Projection.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { FileDriver } from "../../src/layers/journal/FileDriver.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { Cell, commit } from "../../src/layers/sessions/Cell.js"
import { makeRegistry } from "../../src/layers/sessions/Registry.js"
import { Journal } from "../../src/services/Journal.js"
import { CheckpointStore as CheckpointStoreTag } from "../../src/services/Projection.js"
import { Sessions } from "../../src/services/Sessions.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

/** How many failed creates each test makes: any number must leave nothing. */
const FAILURES = 25

const opening = [entry("session_creation_started", { configuration: { model: { provider: "scripted" }, agentloop: "official" } })]

describe("a create whose first write fails", () => {
  it.scoped("the registry keeps nothing of it (however many fail), its journal is removed, and the next access of its id is not_found", () =>
    Effect.gen(function*() {
      const { journal, control } = yield* JournalMemory.make
      const checkpoints = yield* CheckpointStore.makeMemory
      const projection = yield* ProjectionCheckpointed.make(1 << 20).pipe(
        Effect.provideService(Journal, journal),
        Effect.provideService(CheckpointStoreTag, checkpoints.store)
      )
      const registry = yield* makeRegistry({ journal, projection, idleTtlMs: undefined, warmBytes: 1 << 20 })
      const failed: Array<string> = []
      for (let i = 0; i < FAILURES; i++) {
        // What a create does (sessions/Create.ts): the journal made, the cell registered, the first record refused.
        const session = yield* mintSessionId
        yield* journal.create(session)
        const cell = new Cell(session, empty)
        yield* registry.creating(cell)
        control.failNextWrite(session)
        const written = yield* Effect.either(commit(journal, cell, opening))
        expect(Either.isLeft(written) && written.left._tag).toBe("JournalWriteFailed")
        const removed = yield* registry.abandon(cell)
        failed.push(session)
        expect(registry.remembered, `after ${failed.length} failed creates`).toBe(0)
        expect(removed, "abandon answers that nothing of it is left").toBe(true)
      }
      expect(registry.size).toBe(0)
      expect(yield* journal.list).toEqual([])
      for (const session of failed) {
        const got = yield* Effect.either(registry.acquire(session as never))
        expect(Either.isLeft(got) && got.left._tag, session).toBe("NotFound")
      }
      // Looking did not make it remember them either.
      expect(registry.remembered).toBe(0)
    }))

  it.scoped("a creation that recorded its first record and then failed is kept broken: its next access records the creation failed", () =>
    Effect.gen(function*() {
      const { journal, control } = yield* JournalMemory.make
      const checkpoints = yield* CheckpointStore.makeMemory
      const projection = yield* ProjectionCheckpointed.make(1 << 20).pipe(
        Effect.provideService(Journal, journal),
        Effect.provideService(CheckpointStoreTag, checkpoints.store)
      )
      const registry = yield* makeRegistry({ journal, projection, idleTtlMs: undefined, warmBytes: 1 << 20 })
      const session = yield* mintSessionId
      yield* journal.create(session)
      const cell = new Cell(session, empty)
      yield* registry.creating(cell)
      const [first] = yield* commit(journal, cell, opening)
      control.failNextWrite(session)
      const closing = yield* Effect.either(commit(journal, cell, [entry("session_creation_ended", { sequence: first! })]))
      expect(Either.isLeft(closing)).toBe(true)
      expect(yield* registry.abandon(cell), "a session whose id may be known stays").toBe(false)
      const reopened = yield* registry.acquire(session)
      expect(reopened.state.status).toBe("failed")
      yield* registry.release(reopened)
      const records = yield* journal.read(session, { after: 0, limit: 10 })
      expect(records.map((r) => r.kind)).toEqual(["session_creation_started", "session_creation_failed"])
    }))

  it.scoped("through the service: each answers journal_write_failed saying nothing was created (not ambiguous), leaves no directory and no listing, its id is not_found, and a create works once the disk has room", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const inst = instrumentedDriver()
      const journal = JournalFile.layer({ dataDir, lockWaitMs: 0 }).pipe(Layer.provide(Layer.succeed(FileDriver, inst.driver)), Layer.orDie)
      const context = yield* Layer.build(runtimeLayer({ journal }))
      const sessions = Context.get(context, Sessions)
      const sessionsDir = path.join(dataDir, "sessions")
      inst.diskFull(`${path.sep}sessions${path.sep}`)
      for (let i = 0; i < FAILURES; i++) {
        const created = yield* Effect.either(sessions.create({ model: { provider: "scripted" } }))
        if (Either.isRight(created)) throw new Error("a create succeeded on a full disk")
        const refusal = created.left
        expect(refusal.code).toBe("journal_write_failed")
        expect(refusal.message).toContain("ENOSPC")
        expect(refusal.message).toContain("nothing was created")
        expect(refusal.details, "not ambiguous: nothing exists").toBeUndefined()
        const id = /ses_[0-9a-z]+/.exec(refusal.message)![0]
        const got = yield* Effect.either(sessions.get(id as never))
        expect(Either.isLeft(got) && got.left._tag).toBe("NotFound")
      }
      expect(fs.existsSync(sessionsDir) ? fs.readdirSync(sessionsDir) : []).toEqual([])
      expect((yield* sessions.list({ limit: 100 })).sessions).toEqual([])
      expect(yield* sessions.warm).toBe(0)

      inst.diskFreed(`${path.sep}sessions${path.sep}`)
      const created = yield* sessions.create({ model: { provider: "scripted" } })
      expect(created.status).toBe("idle")
      expect((yield* sessions.list({ limit: 100 })).sessions.map((s) => s.session_id)).toEqual([created.session_id])
    }))
})
