/**
 * A session kept warm (`idle_ttl_ms: 0`, or turns coming faster than its TTL) is never released
 * while the server runs, so its release never wrote a checkpoint: after a `kill -9` its next open
 * folded its whole journal. Now a checkpoint of its state as a turn left it is written in the
 * background once its journal has grown by BRAIN_CHECKPOINT_AFTER_BYTES (and by its state's bytes)
 * since the last one (sessions/Registry.ts, `checkpointWarmLater`; sessions/Checkpoints.ts,
 * `warmCheckpointDue`), by one saver for the whole server, never failing or holding a turn.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, FiberId } from "effect"
import fc from "fast-check"
import * as fs from "node:fs"
import * as path from "node:path"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { rebuiltStates } from "../../src/layers/ProjectionCheckpointed.js"
import { commit } from "../../src/layers/sessions/Cell.js"
import { warmCheckpointDue } from "../../src/layers/sessions/Checkpoints.js"
import { makeRegistry } from "../../src/layers/sessions/Registry.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { CheckpointStore as CheckpointStoreTag, CheckpointWriteFailed, type ProjectionShape } from "../../src/services/Projection.js"
import { Sessions } from "../../src/services/Sessions.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

/** A text turn that keeps the transcript: its state grows with the conversation. */
const talking: AgentloopShape = {
  activate: (input, host) =>
    Effect.gen(function*() {
      const said = { role: "user" as const, content: input.input!.message }
      const reply = yield* host.model({ messages: [...input.transcript, said] })
      yield* host.setTranscriptAtEnd([...input.transcript, said, { role: "assistant", content: reply.text }])
      return { text: reply.text }
    })
}

/** The sequence the session's checkpoint file covers, or undefined when it has none. */
const checkpointThrough = (dataDir: string, session: string): number | undefined => {
  const file = path.join(dataDir, "sessions", session, "checkpoint")
  if (!fs.existsSync(file)) return undefined
  const text = fs.readFileSync(file, "utf8")
  return JSON.parse(text.slice(text.indexOf("\n") + 1)).through.sequence
}

/** Polls until `done()` holds, at most a few thousand times (a hang guard; no time is asserted). */
const eventually = (done: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 3_000 && !done(); i++) yield* Effect.sleep(Duration.millis(10))
  })

/** A few turns of the event loop: what a background save would have had to start. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.sleep(Duration.millis(5))
})

const rebuilt = () => rebuiltStates.fromCheckpoint + rebuiltStates.fromJournal

describe("warmCheckpointDue", () => {
  it("is due once the journal grew by the floor and by the last checkpoint's bytes; never with the floor 0", () => {
    expect(warmCheckpointDue(1023, 10, 1024)).toBe(false)
    expect(warmCheckpointDue(1024, 10, 1024)).toBe(true)
    expect(warmCheckpointDue(4095, 4096, 1024)).toBe(false)
    expect(warmCheckpointDue(4096, 4096, 1024)).toBe(true)
    expect(warmCheckpointDue(1 << 30, 10, 0)).toBe(false)
  })

  it("over any life of a warm session whose state grows by at most what its journal gains, the checkpoints' bytes stay at most twice the journal bytes appended, and after each turn the journal past the last one holds less than max(floor, that checkpoint's bytes)", () => {
    fc.assert(
      fc.property(
        // Each turn: its journal bytes, and how much of them the state grows by (or how much it shrinks).
        fc.array(fc.tuple(fc.integer({ min: 30, max: 3_000_000 }), fc.double({ min: -1, max: 1, noNaN: true })), { minLength: 1, maxLength: 2_000 }),
        fc.integer({ min: 1, max: 4 << 20 }),
        (turns, floor) => {
          let state = 0
          let journal = 0
          let last = { at: 0, bytes: undefined as number | undefined }
          let written = 0
          for (const [appended, growth] of turns) {
            state = Math.max(0, state + Math.floor(growth * appended))
            journal += appended
            if (warmCheckpointDue(journal - last.at, last.bytes ?? state, floor)) {
              written += state
              last = { at: journal, bytes: state }
            }
            expect(journal - last.at).toBeLessThan(Math.max(floor, last.bytes ?? state))
          }
          expect(written).toBeLessThanOrEqual(2 * journal)
        }
      )
    )
  })
})

describe("a session kept warm", () => {
  it.scopedLive("with idle_ttl_ms 0, has a checkpoint past its creation once its journal grew past BRAIN_CHECKPOINT_AFTER_BYTES, while it stays warm (never released, never reopened)", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const id = (yield* sessions.create({ agentloop: "talking", model: { provider: "scripted" }, idle_ttl_ms: 0 })).session_id
        const created = (yield* sessions.get(id)).last_sequence
        const opens = rebuilt()
        for (let i = 0; i < 40; i++) {
          expect((yield* sessions.send(id, { message: `turn ${i} ${"x".repeat(400)}` })).turn.status).toBe("ended")
        }
        yield* untilIdle(id)
        yield* eventually(() => (checkpointThrough(dataDir, id) ?? 0) > created)
        expect(checkpointThrough(dataDir, id)).toBeGreaterThan(created)
        // Warm the whole time: its state was never rebuilt from a checkpoint or the journal.
        expect(rebuilt()).toBe(opens)
        // And it goes on: the next turns are answered, and a later checkpoint covers more.
        const first = checkpointThrough(dataDir, id)!
        for (let i = 40; i < 80; i++) {
          expect((yield* sessions.send(id, { message: `turn ${i} ${"x".repeat(400)}` })).turn.status).toBe("ended")
        }
        yield* untilIdle(id)
        yield* eventually(() => (checkpointThrough(dataDir, id) ?? 0) > first)
        expect(checkpointThrough(dataDir, id)).toBeGreaterThan(first)
        expect(rebuilt()).toBe(opens)
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir }, loops: { talking }, config: { checkpointAfterBytes: 8 * 1024 } })))
    }), 60_000)

  it.scopedLive("with BRAIN_CHECKPOINT_AFTER_BYTES 0, gets none while it is warm (as before)", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const id = (yield* sessions.create({ agentloop: "talking", model: { provider: "scripted" }, idle_ttl_ms: 0 })).session_id
        for (let i = 0; i < 80; i++) {
          expect((yield* sessions.send(id, { message: `turn ${i} ${"x".repeat(400)}` })).turn.status).toBe("ended")
        }
        yield* untilIdle(id)
        yield* settle
        expect(checkpointThrough(dataDir, id)).toBeUndefined()
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir }, loops: { talking }, config: { checkpointAfterBytes: 0 } })))
    }), 60_000)
})

/**
 * A registry keeping every cell warm (TTL 0) over a memory journal, its checkpoints saved as
 * `save` says (after counting the save and the saves under way at once), due every 2 KiB.
 */
const warmRegistry = (save: (session: SessionId) => Effect.Effect<void, CheckpointWriteFailed>) =>
  Effect.gen(function*() {
    const { journal } = yield* JournalMemory.make
    const checkpoints = yield* CheckpointStore.makeMemory
    const inner = yield* ProjectionCheckpointed.make(0).pipe(
      Effect.provideService(Journal, journal),
      Effect.provideService(CheckpointStoreTag, checkpoints.store)
    )
    const saves = { tried: 0, running: 0, most: 0 }
    const projection: ProjectionShape = {
      ...inner,
      checkpoint: (session) =>
        Effect.suspend(() => {
          saves.tried++
          saves.most = Math.max(saves.most, ++saves.running)
          return Effect.as(save(session), 1_000)
        }).pipe(Effect.ensuring(Effect.sync(() => void saves.running--)))
    }
    const registry = yield* makeRegistry({ journal, projection, idleTtlMs: 0, warmBytes: 1 << 20, viewBytes: 1 << 20, checkpointAfterBytes: 2048 })
    const session = () =>
      Effect.gen(function*() {
        const id = yield* mintSessionId
        yield* journal.create(id)
        yield* journal.append(id, [
          entry("session_creation_started", { configuration: { model: { provider: "scripted" }, agentloop: "official" } }),
          entry("session_creation_ended", { sequence: 1 })
        ])
        return id
      })
    /** A write through the session's cell, as a turn's: answered with the sequence it was given. */
    const write = (id: SessionId, i: number) =>
      registry.using(id, (cell) => Effect.map(commit(journal, cell, [entry("kv_put", { key: `k${i % 5}`, value: "v".repeat(500) })]), (seqs) => seqs[0]!))
    return { registry, saves, session, write }
  })

describe("a warm session's checkpoint save", () => {
  const failing = {
    "fails (the disk)": (session: string) => Effect.fail(new CheckpointWriteFailed({ session, reason: "write failed: ENOSPC" })),
    "throws (a defect in encoding)": () => Effect.die(new RangeError("Invalid string length"))
  }
  for (const [how, save] of Object.entries(failing)) {
    it.scopedLive(`that ${how} fails no write, and is tried again once due again`, () =>
      Effect.gen(function*() {
        const { registry, saves, session, write } = yield* warmRegistry(save)
        const id = yield* session()
        for (let i = 0; i < 10; i++) expect(yield* Effect.exit(write(id, i))).toEqual(Exit.succeed(i + 3))
        yield* eventually(() => saves.tried >= 1 && saves.running === 0)
        expect(saves.tried).toBeGreaterThanOrEqual(1)
        const tried = saves.tried
        for (let i = 10; i < 20; i++) expect(yield* Effect.exit(write(id, i))).toEqual(Exit.succeed(i + 3))
        yield* eventually(() => saves.tried > tried)
        expect(saves.tried).toBeGreaterThan(tried)
        expect(registry.size).toBe(1)
      }), 60_000)
  }

  it.scopedLive("that never ends holds no write of its session or another, and no second save starts meanwhile, of any session", () =>
    Effect.gen(function*() {
      const hold = Deferred.unsafeMake<void>(FiberId.none)
      const { saves, session, write } = yield* warmRegistry(() => Deferred.await(hold))
      const a = yield* session()
      const b = yield* session()
      for (let i = 0; i < 10; i++) yield* write(a, i)
      yield* eventually(() => saves.running === 1)
      expect(saves.running).toBe(1)
      // While it runs, both sessions' writes are answered, and both are due again and again.
      for (let i = 10; i < 40; i++) {
        expect(yield* Effect.exit(write(a, i))).toEqual(Exit.succeed(i + 3))
        expect(yield* Effect.exit(write(b, i))).toEqual(Exit.succeed(i - 7))
      }
      yield* settle
      expect([saves.tried, saves.most]).toEqual([1, 1])
      // Once it ends, the saver goes on with what is due: one save at a time still.
      yield* Deferred.succeed(hold, undefined)
      yield* eventually(() => saves.tried >= 3 && saves.running === 0)
      expect(saves.tried).toBeGreaterThanOrEqual(3)
      expect(saves.most).toBe(1)
    }), 60_000)

  it.scopedLive("under way holds a delete of its session before the directory's removal, until it is over", () =>
    Effect.gen(function*() {
      const hold = Deferred.unsafeMake<void>(FiberId.none)
      const { registry, saves, session, write } = yield* warmRegistry(() => Deferred.await(hold))
      const id = yield* session()
      for (let i = 0; i < 10; i++) yield* write(id, i)
      yield* eventually(() => saves.running === 1)
      const removed = { at: 0 }
      const deleting = yield* Effect.fork(registry.delete(id, () => undefined, () => Effect.void, Effect.sync(() => void (removed.at = saves.running === 0 ? 1 : -1))))
      yield* settle
      expect(removed.at).toBe(0)
      yield* Deferred.succeed(hold, undefined)
      yield* deleting.await
      // Removed once the save was over, never while it ran.
      expect(removed.at).toBe(1)
    }), 60_000)
})
