import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { foldAll } from "../../src/domain/Projection.js"
import { serializeState } from "../../src/domain/SerializedState.js"
import { entry } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { Journal } from "../../src/services/Journal.js"
import { Projection } from "../../src/services/Projection.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import * as FileDriver from "../../src/layers/journal/FileDriver.js"
import { crc32 } from "../../src/layers/journal/Frame.js"
import { forgetCommitLog, tempDir } from "../support/journals.js"

const layerFor = (dataDir: string, rotateBytes?: number) => {
  const journal = JournalFile.layerNode({ dataDir, ...(rotateBytes === undefined ? {} : { limits: { rotateBytes } }) })
  const checkpoints = CheckpointStore.layerFile(dataDir).pipe(Layer.provide(FileDriver.layerNode))
  return Layer.merge(journal, ProjectionCheckpointed.layer.pipe(Layer.provide(Layer.mergeAll(journal, checkpoints, ServerConfig.layerWith({})))))
}

const u = (content: string) => ({ role: "user" as const, content })

/** Writes a session with a conversation, kv and an effect, in several appends. */
const writeSession = (session: SessionId, turns: number) =>
  Effect.gen(function*() {
    const journal = yield* Journal
    if (!(yield* journal.exists(session))) {
      yield* journal.create(session)
      yield* journal.append(session, [entry("session_creation_started", { configuration: { agentloop: "official", model: "m" } })])
      yield* journal.append(session, [entry("session_creation_ended", { sequence: 1 })])
    }
    for (let t = 0; t < turns; t++) {
      const [turn] = yield* journal.append(session, [entry("turn_started", { input: { message: `m${t}` }, mode: "send" })])
      yield* journal.append(session, [
        entry("transcript_delta", { keep: t === 3 ? 1 : 2 * t, append: [u(`m${t}`), { role: "assistant", content: `a${t}` }] }),
        entry("kv_put", { key: `k${t % 3}`, value: t % 2 === 0 ? null : t })
      ])
      yield* journal.append(session, [entry("turn_ended", { sequence: turn! })])
    }
  })

const wholeFold = (session: SessionId) =>
  Effect.gen(function*() {
    const journal = yield* Journal
    return foldAll(yield* journal.read(session, { after: 0, limit: 100_000 }))
  })

/** Runs `body` with the file journal and projection on dataDir, closing them afterwards. */
const withServices = <A, E>(dataDir: string, body: Effect.Effect<A, E, Journal | Projection>, rotateBytes?: number) =>
  Effect.scoped(Effect.provide(body, layerFor(dataDir, rotateBytes)))

/** The session's segment files as [first sequence, bytes], in order. */
const segmentFiles = (dataDir: string, session: SessionId) => {
  const dir = path.join(dataDir, "sessions", session, "journal")
  return fs.readdirSync(dir).filter((n) => n.endsWith(".seg")).sort().map((n) => [Number.parseInt(n, 10), fs.statSync(path.join(dir, n)).size] as const)
}

describe("Projection with checkpoints on the file journal", () => {
  it.scoped("a checkpoint of the current state is used on open and matches the whole fold", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const session = yield* mintSessionId
      yield* withServices(dir, Effect.gen(function*() {
        yield* writeSession(session, 5)
        const projection = yield* Projection
        const first = yield* projection.state(session)
        expect(first.source).toBe("journal")
        yield* projection.checkpoint(session, first.state)
      }))
      yield* withServices(dir, Effect.gen(function*() {
        const projection = yield* Projection
        const again = yield* projection.state(session)
        expect(again.source).toBe("checkpoint")
        expect(again.folded).toBe(0)
        expect(serializeState(again.state)).toEqual(serializeState(yield* wholeFold(session)))
      }))
    }))

  it.scoped("a stale checkpoint (the journal grew) is used and only the tail is folded", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const session = yield* mintSessionId
      yield* withServices(dir, Effect.gen(function*() {
        yield* writeSession(session, 3)
        const projection = yield* Projection
        yield* projection.checkpoint(session, (yield* projection.state(session)).state)
        yield* writeSession(session, 4)
      }))
      yield* withServices(dir, Effect.gen(function*() {
        const projected = yield* (yield* Projection).state(session)
        expect(projected.source).toBe("checkpoint")
        expect(projected.folded).toBe(4 * 4)
        expect(serializeState(projected.state)).toEqual(serializeState(yield* wholeFold(session)))
      }))
    }))

  it.scoped("a cold open of a long session with a checkpoint is weighed as its largest segment or the checkpoint and the segments that may hold records after its sequence, whichever is larger, never the whole journal; without a checkpoint, as the whole journal", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const session = yield* mintSessionId
      const rotateBytes = 1024
      let through = 0
      yield* withServices(dir, Effect.gen(function*() {
        yield* writeSession(session, 60)
        const projection = yield* Projection
        const { state } = yield* projection.state(session)
        through = state.lastSequence
        yield* projection.checkpoint(session, state)
        yield* writeSession(session, 2)
      }), rotateBytes)
      const segments = segmentFiles(dir, session)
      expect(segments.length).toBeGreaterThan(10)
      expect(segments[0]![0]).toBe(1)
      const journalBytes = segments.reduce((n, [, b]) => n + b, 0)
      const largest = Math.max(...segments.map(([, b]) => b))
      // The segment holding the record after the checkpoint's, and every later one.
      const from = segments.filter(([first]) => first <= through + 1).length - 1
      const tail = segments.slice(from).reduce((n, [, b]) => n + b, 0)
      const checkpointBytes = fs.statSync(path.join(dir, "sessions", session, "checkpoint")).size
      expect(tail).toBeLessThan(journalBytes / 4)
      yield* withServices(dir, Effect.gen(function*() {
        const projection = yield* Projection
        const weight = yield* projection.openBytes!(session)
        expect(weight).toBe(Math.max(largest, checkpointBytes + tail))
        expect(weight).toBeLessThan(journalBytes)
        // What the open then reads: the checkpoint and the tail.
        const projected = yield* projection.state(session)
        expect(projected.source).toBe("checkpoint")
        expect(projected.folded).toBe(2 * 4)
      }), rotateBytes)
      // Without its checkpoint the open folds the whole journal, and is weighed so.
      fs.rmSync(path.join(dir, "sessions", session, "checkpoint"))
      yield* withServices(dir, Effect.gen(function*() {
        expect(yield* (yield* Projection).openBytes!(session)).toBe(journalBytes)
      }), rotateBytes)
    }))

  it.scoped("a damaged, missing or mismatched checkpoint is ignored and the state is rebuilt from the journal", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const a = yield* mintSessionId
      const b = yield* mintSessionId
      yield* withServices(dir, Effect.gen(function*() {
        yield* writeSession(a, 4)
        // b differs from a from sequence 3 on, so a's checkpoint does not describe b's journal.
        yield* writeSession(b, 0)
        yield* (yield* Journal).append(b, [entry("kv_put", { key: "only-b", value: 1 })])
        yield* writeSession(b, 4)
        const projection = yield* Projection
        yield* projection.checkpoint(a, (yield* projection.state(a)).state)
      }))
      const file = (s: string) => path.join(dir, "sessions", s, "checkpoint")
      const good = fs.readFileSync(file(a), "utf8")

      const expectRebuilt = (s: SessionId) =>
        withServices(dir, Effect.gen(function*() {
          const projected = yield* (yield* Projection).state(s)
          expect(projected.source).toBe("journal")
          expect(serializeState(projected.state)).toEqual(serializeState(yield* wholeFold(s)))
        }))

      // Damaged: one byte of the body changed, so the checksum fails.
      fs.writeFileSync(file(a), good.replace("\"lastSequence\"", "\"lastSequencf\""))
      yield* expectRebuilt(a)
      // Truncated.
      fs.writeFileSync(file(a), good.slice(0, good.length / 2))
      yield* expectRebuilt(a)
      // Missing.
      fs.rmSync(file(a))
      yield* expectRebuilt(a)
      // Mismatched prefix: a's checkpoint, re-labelled for b (same length, different records).
      const relabelled = good.slice(9).replaceAll(a, b)
      const body = relabelled
      fs.writeFileSync(file(b), `${crc32(Buffer.from(body)).toString(16).padStart(8, "0")}\n${body}`)
      yield* expectRebuilt(b)
      // Covering more than the journal holds (the checkpoint is from a longer history).
      fs.writeFileSync(file(a), good)
      const seg = path.join(dir, "sessions", a, "journal", "00000000000000000001.seg")
      fs.writeFileSync(seg, Buffer.alloc(0))
      forgetCommitLog(dir)
      yield* withServices(dir, Effect.gen(function*() {
        const projected = yield* (yield* Projection).state(a)
        expect(projected.source).toBe("journal")
        expect(projected.state.lastSequence).toBe(0)
      }))
    }))
})
