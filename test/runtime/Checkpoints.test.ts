/**
 * When a released session writes its checkpoint (sessions/Registry.ts, by `checkpointDue` in sessions/Checkpoints.ts): every
 * 256 records folded at least, and at least one record per 256 bytes of its state; or every
 * 64 KiB of journal folded at least, and at least the state's bytes. A checkpoint encodes the
 * whole state, so at a fixed interval a long conversation paid for its whole transcript again
 * every few dozen turns, quadratic over its life; with the interval growing with the state, the
 * bytes encoded stay linear in the records and journal bytes folded, and an open after a crash
 * folds at most one interval after the checkpoint. Counting records alone, a session of large
 * records (MiB messages, kv values) never checkpointed and was folded from its start on every access.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import fc from "fast-check"
import * as fs from "node:fs"
import * as path from "node:path"
import type { SessionId } from "../../src/domain/Ids.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Sessions } from "../../src/services/Sessions.js"
import { CHECKPOINT_BYTES_PER_RECORD, CHECKPOINT_EVERY_BYTES, CHECKPOINT_EVERY_RECORDS, checkpointDue } from "../../src/layers/sessions/Checkpoints.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as FileDriver from "../../src/layers/journal/FileDriver.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { Projection } from "../../src/services/Projection.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

/** A fold of `records` records of `each` journal bytes apiece. */
const folded = (records: number, each: number) => ({ records, bytes: records * each })

describe("checkpointDue", () => {
  it("a state up to 64 KiB of small records is due every 256 records; one of 1 MiB only after 4,096", () => {
    expect(checkpointDue(folded(255, 200), 1_000)).toBe(false)
    expect(checkpointDue(folded(256, 200), 1_000)).toBe(true)
    expect(checkpointDue(folded(256, 200), 64 * 1024)).toBe(true)
    expect(checkpointDue(folded(256, 200), 1 << 20)).toBe(false)
    expect(checkpointDue(folded(4_095, 200), 1 << 20)).toBe(false)
    expect(checkpointDue(folded(4_096, 200), 1 << 20)).toBe(true)
  })

  it("large records are due once the journal bytes folded reach the state's bytes (64 KiB at least), however few they are", () => {
    expect(checkpointDue(folded(1, 4 << 20), 84 << 20)).toBe(false)
    expect(checkpointDue(folded(20, 4 << 20), 84 << 20)).toBe(false)
    expect(checkpointDue(folded(21, 4 << 20), 84 << 20)).toBe(true)
    expect(checkpointDue(folded(1, 10 << 20), 10 << 20)).toBe(true)
    expect(checkpointDue(folded(1, CHECKPOINT_EVERY_BYTES - 1), 1_000)).toBe(false)
    expect(checkpointDue(folded(1, CHECKPOINT_EVERY_BYTES), 1_000)).toBe(true)
  })

  it("records of 256 journal bytes or fewer are due exactly when the records' bound says, as before bytes were counted", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 100_000 }), fc.integer({ min: 0, max: CHECKPOINT_BYTES_PER_RECORD }), fc.integer({ min: 0, max: 50_000_000 }), (records, each, state) => {
        const byRecords = records >= Math.max(CHECKPOINT_EVERY_RECORDS, Math.ceil(state / CHECKPOINT_BYTES_PER_RECORD))
        expect(checkpointDue(folded(records, each), state)).toBe(byRecords)
      })
    )
  })

  it("over any life of a session, its checkpoints encode at most 256 bytes per record plus one per journal byte folded, and past the last one stay fewer than max(256, state / 256) records and max(64 KiB, state) journal bytes", () => {
    fc.assert(
      fc.property(
        // Each record: how it changes the state's size (it grows, shrinks or stays) and its journal bytes.
        fc.array(fc.tuple(fc.integer({ min: -20_000, max: 20_000 }), fc.integer({ min: 30, max: 3_000_000 })), { minLength: 1, maxLength: 3_000 }),
        fc.integer({ min: 0, max: 5_000_000 }),
        (changes, start) => {
          let bytes = start
          let last = { records: 0, bytes: 0 }
          let journal = 0
          let encoded = 0
          for (let record = 1; record <= changes.length; record++) {
            const [change, size] = changes[record - 1]!
            bytes = Math.max(0, bytes + change)
            journal += size
            if (checkpointDue({ records: record - last.records, bytes: journal - last.bytes }, bytes)) {
              encoded += bytes
              last = { records: record, bytes: journal }
            }
            expect(record - last.records).toBeLessThan(Math.max(CHECKPOINT_EVERY_RECORDS, Math.ceil(bytes / CHECKPOINT_BYTES_PER_RECORD)))
            expect(journal - last.bytes).toBeLessThan(Math.max(CHECKPOINT_EVERY_BYTES, bytes))
          }
          expect(encoded).toBeLessThanOrEqual(CHECKPOINT_BYTES_PER_RECORD * changes.length + journal)
        }
      )
    )
  })
})

/** A text turn's seven records; the first turn also keeps `blob` (of `bytes` characters) in kv, one record more. */
const keeping = (bytes: number): AgentloopShape => ({
  activate: (input, host) =>
    Effect.gen(function*() {
      if (bytes > 0 && (yield* host.kvRead("blob"))._tag === "None") yield* host.kvPut("blob", "x".repeat(bytes))
      const reply = yield* host.model({ messages: [...input.transcript, { role: "user", content: input.input!.message }] })
      yield* host.setTranscriptAtEnd([...input.transcript, { role: "user", content: input.input!.message }, { role: "assistant", content: reply.text }])
      return { text: reply.text }
    })
})

/** A text turn that first puts a fresh value of `bytes` characters under one kv key: the state stays, the journal grows by it. */
const rewriting = (bytes: number): AgentloopShape => ({
  activate: (input, host) =>
    Effect.gen(function*() {
      yield* host.kvPut("blob", `${input.input!.message}:${"x".repeat(bytes)}`)
      const reply = yield* host.model({ messages: [...input.transcript, { role: "user", content: input.input!.message }] })
      yield* host.setTranscriptAtEnd([...input.transcript, { role: "user", content: input.input!.message }, { role: "assistant", content: reply.text }])
      return { text: reply.text }
    })
})

/** The projection over a data directory no server holds. */
const projectionOver = (dataDir: string) => {
  const journal = JournalFile.layerNode({ dataDir })
  const checkpoints = CheckpointStore.layerFile(dataDir).pipe(Layer.provide(FileDriver.layerNode))
  return ProjectionCheckpointed.layer.pipe(Layer.provide(Layer.mergeAll(journal, checkpoints, ServerConfig.layerWith({}))))
}

describe("a released session's checkpoint", () => {
  it.scopedLive("a small session has one after 256 records; one whose 200 KB state came in one record has one once its journal holds as many bytes, at its first release", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const checkpointed = (id: string) => fs.existsSync(path.join(dataDir, "sessions", id, "checkpoint"))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const small = (yield* sessions.create({ agentloop: "small", model: { provider: "scripted" } })).session_id
        const large = (yield* sessions.create({ agentloop: "large", model: { provider: "scripted" } })).session_id
        const turns = (id: SessionId, n: number) =>
          Effect.gen(function*() {
            for (let i = 0; i < n; i++) expect((yield* sessions.send(id, { message: `turn ${i}` })).turn.status).toBe("ended")
            // The release (and its checkpoint) follows the last turn's answer: over once the turn has closed.
            yield* untilIdle(id)
            return (yield* sessions.get(id)).last_sequence
          })
        // 30 turns: about 210 records.
        expect(yield* turns(small, 30)).toBeLessThan(CHECKPOINT_EVERY_RECORDS)
        expect(checkpointed(small)).toBe(false)
        // 10 turns more: about 280 records.
        expect(yield* turns(small, 10)).toBeGreaterThan(CHECKPOINT_EVERY_RECORDS)
        expect(checkpointed(small)).toBe(true)
        expect(yield* turns(large, 1)).toBeLessThan(CHECKPOINT_EVERY_RECORDS)
        expect(checkpointed(large)).toBe(true)
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir }, loops: { small: keeping(0), large: keeping(200_000) } })))
    }), 60_000)

  it.scopedLive("a session whose every turn writes 100 KB keeps a checkpoint within about two turns of its end, and a later open folds only that tail", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const { id, last, perTurn } = yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const id = (yield* sessions.create({ agentloop: "large", model: { provider: "scripted" } })).session_id
        let last = 0
        let perTurn = 0
        for (let i = 0; i < 20; i++) {
          expect((yield* sessions.send(id, { message: `turn ${i}` })).turn.status).toBe("ended")
          const now = (yield* sessions.get(id)).last_sequence
          perTurn = now - last
          last = now
        }
        return { id, last, perTurn }
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir }, loops: { large: rewriting(100_000) } })))
      // Far fewer records than the records' bound: only the journal's bytes make it due.
      expect(last).toBeLessThan(CHECKPOINT_EVERY_RECORDS)
      const projected = yield* Effect.flatMap(Projection, (p) => p.state(id)).pipe(Effect.provide(projectionOver(dataDir)))
      expect(projected.state.lastSequence).toBe(last)
      expect(projected.source).toBe("checkpoint")
      expect(projected.folded).toBeLessThanOrEqual(2 * perTurn)
    }), 60_000)
})
