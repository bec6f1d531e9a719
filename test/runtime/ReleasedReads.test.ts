/**
 * Reads of a released session (an Events page, a status GET) need only a little of its state:
 * its status, its last sequence and its transcript's lengths (sessions/Views.ts). They are
 * answered from the view its release kept, without folding its state again: a state too large for
 * the projection cache was rebuilt (its checkpoint read and parsed whole) by every page and GET.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { commit } from "../../src/layers/sessions/Cell.js"
import { readEvents } from "../../src/layers/sessions/Events.js"
import { makeRegistry } from "../../src/layers/sessions/Registry.js"
import { Journal } from "../../src/services/Journal.js"
import { CheckpointStore as CheckpointStoreTag, type ProjectionShape } from "../../src/services/Projection.js"

const message = (content: string) => ({ role: "user" as const, content })

/** A registry over a memory journal whose projection caches nothing and counts its folds. */
const setUp = (viewBytes: number) =>
  Effect.gen(function*() {
    const { journal } = yield* JournalMemory.make
    const checkpoints = yield* CheckpointStore.makeMemory
    const inner = yield* ProjectionCheckpointed.make(0).pipe(
      Effect.provideService(Journal, journal),
      Effect.provideService(CheckpointStoreTag, checkpoints.store)
    )
    const folds = { count: 0 }
    const projection: ProjectionShape = { ...inner, state: (s) => Effect.zipRight(Effect.sync(() => void folds.count++), inner.state(s)) }
    const registry = yield* makeRegistry({ journal, projection, idleTtlMs: undefined, warmBytes: 1 << 20, viewBytes })
    const session: SessionId = yield* mintSessionId
    yield* journal.create(session)
    yield* journal.append(session, [
      entry("session_creation_started", { configuration: { model: { provider: "scripted" }, agentloop: "official" } }),
      entry("session_creation_ended", { sequence: 1 }),
      entry("transcript_delta", { keep: 0, append: [message("one"), message("two")] })
    ])
    return { journal, registry, session, folds }
  })

describe("reads of a released session", () => {
  it.scoped("an Events page and a status read of a released session do not fold its state again: the view its release kept answers them", () =>
    Effect.gen(function*() {
      const { journal, registry, session, folds } = yield* setUp(1 << 20)
      // The first access folds the state (and checks for interrupted work); its release keeps a view.
      yield* registry.using(session, () => Effect.void)
      expect(folds.count).toBe(1)
      expect(registry.size).toBe(0)
      for (let i = 0; i < 3; i++) {
        const view = yield* registry.view(session)
        const page = yield* readEvents(journal, session, view, 0, 10)
        expect(page.events.map((e) => e.kind)).toEqual(["session_creation_started", "session_creation_ended"])
        const current = yield* registry.currentView(session)
        expect(current?.status).toBe("idle")
        expect(current?.lastSequence).toBe(3)
      }
      expect(folds.count).toBe(1)
      // A later delta that keeps fewer messages is public; a page after it is read from the view.
      yield* registry.using(session, (cell) => commit(journal, cell, [entry("transcript_delta", { keep: 1, append: [message("three")] })]))
      expect(folds.count).toBe(2)
      const later = yield* readEvents(journal, session, yield* registry.view(session), 3, 10)
      expect(later.events.map((e) => e.kind)).toEqual(["transcript_replaced"])
      expect(folds.count).toBe(2)
    }))

  it.scoped("a view behind the journal still reads Events right (folded on from it), and a status read then reads the state", () =>
    Effect.gen(function*() {
      const { journal, registry, session, folds } = yield* setUp(1 << 20)
      yield* registry.using(session, () => Effect.void)
      // Written past the view (as a process's own write would be before its cell's release).
      yield* journal.append(session, [entry("transcript_delta", { keep: 0, append: [message("again")] })])
      expect(yield* registry.currentView(session)).toBeUndefined()
      const page = yield* readEvents(journal, session, yield* registry.view(session), 3, 10)
      expect(page.events.map((e) => e.kind)).toEqual(["transcript_replaced"])
      expect(folds.count).toBe(1)
    }))

  it.scoped("with no room for views, every read folds the state again (what the views save)", () =>
    Effect.gen(function*() {
      const { registry, session, folds } = yield* setUp(0)
      yield* registry.using(session, () => Effect.void)
      yield* registry.view(session)
      yield* registry.view(session)
      expect(folds.count).toBe(3)
      expect(yield* registry.currentView(session)).toBeUndefined()
    }))
})
