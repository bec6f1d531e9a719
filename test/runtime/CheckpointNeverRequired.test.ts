/**
 * A checkpoint is never required (docs/journal.md, "Checkpoint"): a save that fails, for any
 * reason, is logged and the session goes on. A save that threw (one `JSON.stringify` of a state
 * past V8's largest string: `RangeError: Invalid string length`) escaped as a defect from the
 * release of the cell that a read had opened, and the read answered 500 `internal`.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { mintSessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { makeRegistry } from "../../src/layers/sessions/Registry.js"
import { Journal } from "../../src/services/Journal.js"
import { CheckpointStore as CheckpointStoreTag, CheckpointWriteFailed, type ProjectionShape } from "../../src/services/Projection.js"

/** A registry over a session of 300 records (a checkpoint is due at its first release) whose checkpoint saves fail as `fail` says. */
const setUp = (fail: (session: string) => Effect.Effect<never, CheckpointWriteFailed>) =>
  Effect.gen(function*() {
    const { journal } = yield* JournalMemory.make
    const checkpoints = yield* CheckpointStore.makeMemory
    const inner = yield* ProjectionCheckpointed.make(0).pipe(
      Effect.provideService(Journal, journal),
      Effect.provideService(CheckpointStoreTag, checkpoints.store)
    )
    const saves = { tried: 0 }
    const projection: ProjectionShape = {
      ...inner,
      checkpoint: (session) => Effect.zipRight(Effect.sync(() => void saves.tried++), fail(session))
    }
    const registry = yield* makeRegistry({ journal, projection, idleTtlMs: undefined, warmBytes: 1 << 20, viewBytes: 1 << 20 })
    const session = yield* mintSessionId
    yield* journal.create(session)
    yield* journal.append(session, [
      entry("session_creation_started", { configuration: { model: { provider: "scripted" }, agentloop: "official" } }),
      entry("session_creation_ended", { sequence: 1 })
    ])
    for (let i = 0; i < 300; i++) yield* journal.append(session, [entry("kv_put", { key: `k${i % 7}`, value: i })])
    return { registry, session, saves, checkpoints }
  })

const cases = {
  "throws (a defect: the state's JSON past the largest string)": () => Effect.die(new RangeError("Invalid string length")),
  "fails (the disk)": (session: string) => Effect.fail(new CheckpointWriteFailed({ session, reason: "write failed: ENOSPC" }))
}

describe("a checkpoint save that fails never fails the request that triggered it", () => {
  for (const [how, fail] of Object.entries(cases)) {
    it.scoped(`a save that ${how}: the read that opened the session and the access after it answer the session's state`, () =>
      Effect.gen(function*() {
        const { registry, saves, session, checkpoints } = yield* setUp(fail)
        // A read that opened the session (a status GET's path): its release writes the checkpoint due.
        const read = yield* Effect.exit(registry.reading(session, (cell) => Effect.succeed([cell.state.status, cell.state.lastSequence])))
        expect(read).toEqual(Exit.succeed(["idle", 302]))
        expect(saves.tried).toBe(1)
        // An access (a send's path) after it is answered too; the save is tried again only once due again.
        const used = yield* Effect.exit(registry.using(session, (cell) => Effect.succeed(cell.state.lastSequence)))
        expect(used).toEqual(Exit.succeed(302))
        expect(saves.tried).toBe(1)
        expect(checkpoints.texts.size).toBe(0)
      }))
  }
})
