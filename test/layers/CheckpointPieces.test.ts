/**
 * A state can be larger than V8's largest string (about 512 MiB of JSON: a long conversation of
 * large messages). One `JSON.stringify` of it threw `RangeError: Invalid string length`, so such a
 * session could never be checkpointed again. A checkpoint is now written and read piece by piece
 * (projection/Checkpoint.ts), every piece within a string limit that tests set small; its text is
 * still exactly one `JSON.stringify` of its body, under the same checksum, so checkpoints written
 * before read as they did.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { afterEach, vi } from "vitest"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { foldAll } from "../../src/domain/Projection.js"
import { entry } from "../../src/domain/Records.js"
import { serializeState } from "../../src/domain/SerializedState.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { FileDriver, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { crc32 } from "../../src/layers/journal/Frame.js"
import {
  CHECKPOINT_FORMAT,
  type CheckpointBody,
  decodeCheckpoint,
  encodeCheckpoint
} from "../../src/layers/projection/Checkpoint.js"
import { Journal } from "../../src/services/Journal.js"
import { CheckpointStore as CheckpointStoreTag } from "../../src/services/Projection.js"
import { tempDir } from "../support/journals.js"

afterEach(() => void vi.restoreAllMocks())

/** Text with what JSON escapes, multi-byte characters and surrogate pairs, `n` characters or so. */
const awkward = (n: number, seed: number) => {
  const parts = ["plain ", "quote\" ", "back\\slash ", "tab\t nl\n ", "\u0001ctl ", "é ", "日本語 ", "😀🎉 ", "\u2028 "]
  let out = ""
  for (let i = seed; out.length < n; i++) out += parts[i % parts.length]
  return out
}

const u = (content: string) => ({ role: "user" as const, content })
const a = (content: string) => ({ role: "assistant" as const, content })

/** A session whose state's JSON is many times `limit`, with single strings longer than it too. */
const writeSession = (session: SessionId) =>
  Effect.gen(function*() {
    const journal = yield* Journal
    yield* journal.create(session)
    yield* journal.append(session, [entry("session_creation_started", { configuration: { agentloop: "official", model: { provider: "scripted" } } })])
    yield* journal.append(session, [entry("session_creation_ended", { sequence: 1 })])
    for (let t = 0; t < 12; t++) {
      const [turn] = yield* journal.append(session, [entry("turn_started", { input: { message: `m${t}` }, mode: "send" })])
      yield* journal.append(session, [
        entry("transcript_delta", { keep: 2 * t, append: [u(awkward(40 + 97 * t, t)), a(`a${t}`)] }),
        entry("kv_put", { key: `k${t % 3}`, value: { nested: [awkward(300, t), t, null, true] } })
      ])
      yield* journal.append(session, [entry("turn_ended", { sequence: turn! })])
    }
  })

const LIMIT = 200

const bodyOf = (state: ReturnType<typeof foldAll>, session: string): CheckpointBody => ({
  format: CHECKPOINT_FORMAT,
  session,
  through: { sequence: state.lastSequence, digest: 7 },
  state: serializeState(state)
})

const sampleBody = Effect.gen(function*() {
  const dataDir = yield* tempDir()
  const session = yield* mintSessionId
  const state = yield* Effect.gen(function*() {
    yield* writeSession(session)
    return foldAll(yield* (yield* Journal).read(session, { after: 0, limit: 10_000 }))
  }).pipe(Effect.provide(JournalFile.layerNode({ dataDir })))
  return { body: bodyOf(state, session), session }
})

/** The pieces' bytes, each chunk's text as it was written. */
const written = (body: CheckpointBody) => {
  const pieces = encodeCheckpoint(body, { maxStringChars: LIMIT, chunkChars: LIMIT })
  const chunks = [...pieces.rest].map((c) => Buffer.from(c))
  return { chunks, head: Buffer.from(pieces.head()), headBytes: pieces.headBytes }
}

describe("a checkpoint written and read piece by piece", () => {
  it.scoped("its text is the body's JSON and checksum byte for byte, in chunks none longer than the string limit", () =>
    Effect.gen(function*() {
      const { body } = yield* sampleBody
      const whole = JSON.stringify(body)
      expect(whole.length).toBeGreaterThan(40 * LIMIT)
      const { chunks, head, headBytes } = written(body)
      expect(chunks.length).toBeGreaterThan(40)
      for (const chunk of chunks) expect(chunk.toString("utf8").length).toBeLessThanOrEqual(LIMIT)
      const json = Buffer.concat(chunks)
      expect(json.toString("utf8")).toBe(whole)
      expect(head.toString("utf8")).toBe(`${crc32(json).toString(16).padStart(8, "0")}\n`)
      expect(head.byteLength).toBe(headBytes)
    }))

  it.scoped("one longer than the string limit reads back as the body, parsing no string longer than the limit; damaged, it is none", () =>
    Effect.gen(function*() {
      const { body, session } = yield* sampleBody
      const { chunks, head } = written(body)
      const file = Buffer.concat([head, ...chunks])
      const parse = vi.spyOn(JSON, "parse")
      const read = decodeCheckpoint(file, session, { maxStringChars: LIMIT })
      const parsed = parse.mock.calls.map(([text]) => String(text).length)
      parse.mockRestore()
      expect(read).toEqual(JSON.parse(JSON.stringify(body)))
      expect(parsed.length).toBeGreaterThan(40)
      expect(Math.max(...parsed)).toBeLessThanOrEqual(LIMIT)
      // The same bytes read whole (the limit not reached) give the same body.
      expect(decodeCheckpoint(file, session)).toEqual(read)
      // A byte changed anywhere is caught by the checksum; another session's is not this one's.
      const damaged = Buffer.from(file)
      damaged[Math.floor(file.length / 2)] ^= 0x01
      expect(decodeCheckpoint(damaged, session, { maxStringChars: LIMIT })).toBeUndefined()
      expect(decodeCheckpoint(file, yield* mintSessionId, { maxStringChars: LIMIT })).toBeUndefined()
    }))

  it.scoped("a checkpoint written as one string (before pieces) reads back the same, split or whole", () =>
    Effect.gen(function*() {
      const { body, session } = yield* sampleBody
      const json = JSON.stringify(body)
      const old = Buffer.from(`${crc32(Buffer.from(json, "utf8")).toString(16).padStart(8, "0")}\n${json}`, "utf8")
      expect(decodeCheckpoint(old, session, { maxStringChars: LIMIT })).toEqual(JSON.parse(json))
      expect(decodeCheckpoint(old, session)).toEqual(JSON.parse(json))
    }))

  it.scoped("a projection saves a state longer than its string limit to a file and a cold open uses it, to the whole fold's state", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const session = yield* mintSessionId
      const limits = { maxStringChars: LIMIT, chunkChars: LIMIT }
      const journal = JournalFile.layerNode({ dataDir })
      const services = Layer.merge(journal, CheckpointStore.layerFile(dataDir).pipe(Layer.provide(Layer.succeed(FileDriver, nodeDriver))))
      const run = <A, E>(body: Effect.Effect<A, E, Journal | CheckpointStoreTag>) => Effect.scoped(Effect.provide(body, services))
      const whole = yield* run(Effect.gen(function*() {
        yield* writeSession(session)
        const projection = yield* ProjectionCheckpointed.make(0, limits)
        const { state } = yield* projection.state(session)
        yield* projection.checkpoint(session, state)
        return state
      }))
      const { source, state } = yield* run(Effect.flatMap(ProjectionCheckpointed.make(0, limits), (p) => p.state(session)))
      expect(source).toBe("checkpoint")
      expect(serializeState(state)).toEqual(serializeState(whole))
      expect(state.bytes).toBe(whole.bytes)
      const saved = yield* run(Effect.flatMap(CheckpointStoreTag, (s) => s.load(session)))
      expect(Option.getOrThrow(saved).length).toBeGreaterThan(40 * LIMIT)
    }))
})
