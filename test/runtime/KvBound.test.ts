/**
 * A session's kv is bounded by its bytes across turns (BRAIN_MAX_SESSION_KV_BYTES): a loop putting
 * fresh keys turn after turn would otherwise grow the session's state, held in memory whole, until
 * the server ran out of it (one turn's writes are bounded by BRAIN_MAX_TURN_WRITE_BYTES, but the
 * kv stays). Each entry counts as the state counts it (Projection.ts `kvEntryBytes`), and the
 * count is the state's, so a session reopened from its checkpoint or its journal counts the same.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, HashMap, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import type { SessionId } from "../../src/domain/Ids.js"
import { empty, foldAll, kvBytesOf, kvEntryBytes } from "../../src/domain/Projection.js"
import { deserializeState, serializeState } from "../../src/domain/SerializedState.js"
import type { JournalRecord } from "../../src/domain/Records.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as FileDriver from "../../src/layers/journal/FileDriver.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Journal } from "../../src/services/Journal.js"
import { Projection } from "../../src/services/Projection.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions } from "../../src/services/Sessions.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

/** A value of `n` characters; its entry under a one-character key weighs 64 + 17 + 16 + n bytes. */
const value = (n: number, fill = "x") => fill.repeat(n)
const entry = (n: number) => kvEntryBytes("a", value(n))
/** Two entries of 400 characters fit, and 6 bytes are left: a third, or a value grown by 7, does not. */
const BOUND = 2 * entry(400) + 6

type Op = readonly ["put", string, number, string?] | readonly ["del", string] | readonly ["read", string]

/**
 * A loop that runs the ops its message holds (JSON), each answered into `answers`: a put or delete
 * as "ok" or its failure, a read as its value's length (or null). Every answer is taken, so the
 * turn goes on past a refusal and ends "done".
 */
const opsLoop = (answers: Array<unknown>): AgentloopShape => ({
  activate: (input, host) =>
    Effect.gen(function*() {
      for (const op of JSON.parse(input.input!.message) as ReadonlyArray<Op>) {
        if (op[0] === "read") {
          const got = yield* host.kvRead(op[1])
          answers.push(got._tag === "Some" ? (got.value as string).length : null)
          continue
        }
        const done = yield* Effect.either(op[0] === "put" ? host.kvPut(op[1], value(op[2], op[3])) : host.kvDelete(op[1]))
        answers.push(Either.isRight(done) ? "ok" : done.left.failure)
      }
      return "done"
    })
})

const run = (session: SessionId, ops: ReadonlyArray<Op>) =>
  Effect.flatMap(Sessions, (sessions) => sessions.send(session, { message: JSON.stringify(ops) }))

const kvRecords = (session: SessionId) =>
  Effect.map(Effect.flatMap(Journal, (j) => Effect.orDie(j.read(session, { after: 0, limit: 100_000 }))), (rs) => rs.filter((r) => r.kind.startsWith("kv_")))

const refusedAt = (kvBytes: number, growth: number) => ({
  code: "kv_limit",
  retryable: false,
  ambiguous: false,
  message: expect.stringContaining("BRAIN_MAX_SESSION_KV_BYTES"),
  details: { setting: "BRAIN_MAX_SESSION_KV_BYTES", limit: BOUND, kv_bytes: kvBytes, growth }
})

/** The projection over a data directory no server holds. */
const projectionOver = (dataDir: string) => {
  const journal = JournalFile.layerNode({ dataDir })
  const checkpoints = CheckpointStore.layerFile(dataDir).pipe(Layer.provide(FileDriver.layerNode))
  return ProjectionCheckpointed.layer.pipe(Layer.provide(Layer.mergeAll(journal, checkpoints, ServerConfig.layerWith({}))))
}

describe("a session's kv is bounded by BRAIN_MAX_SESSION_KV_BYTES across its turns", () => {
  it.effect("a put that would grow the kv past the bound is refused kv_limit (not retryable, not ambiguous, naming the setting, the bound and the kv's bytes) with nothing journaled and the state unchanged; the turn goes on", () => {
    const answers: Array<unknown> = []
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id: s } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" } })
      expect((yield* run(s, [["put", "a", 400], ["put", "b", 400]])).turn).toMatchObject({ status: "ended", result: "done" })
      expect(answers.splice(0)).toEqual(["ok", "ok"])
      const before = yield* kvRecords(s)
      // A fresh key in a later turn, and a value grown by 7 bytes: both past the bound; the turn ends normally.
      const second = yield* run(s, [["put", "c", 400], ["put", "a", 407], ["read", "c"], ["read", "a"]])
      expect(second.turn).toMatchObject({ status: "ended", result: "done" })
      expect(answers.splice(0)).toEqual([refusedAt(2 * entry(400), entry(400)), refusedAt(2 * entry(400), 7), null, 400])
      expect(yield* kvRecords(s)).toEqual(before)
      // Exactly at the bound: a value grown by 6 fits, one more byte does not.
      yield* run(s, [["put", "a", 406], ["put", "b", 401]])
      expect(answers.splice(0)).toEqual(["ok", refusedAt(BOUND, 1)])
      expect((yield* kvRecords(s)).length).toBe(before.length + 1)
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: opsLoop(answers) }, config: { maxSessionKvBytes: BOUND } })))
  })

  it.effect("at the bound, a put replacing a value with a smaller or equal one and every delete still work, and what they free makes room for a new key", () => {
    const answers: Array<unknown> = []
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id: s } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" } })
      yield* run(s, [["put", "a", 400], ["put", "b", 406], ["put", "c", 1]])
      expect(answers.splice(0)).toEqual(["ok", "ok", refusedAt(BOUND, entry(1))])
      // At the bound exactly: an equal value (other characters), a smaller one, a delete of a missing key and of a present one.
      yield* run(s, [["put", "b", 406, "y"], ["put", "a", 300], ["del", "nothing"], ["del", "b"], ["put", "c", 400], ["put", "d", 100], ["read", "c"]])
      expect(answers.splice(0)).toEqual(["ok", "ok", "ok", "ok", "ok", refusedAt(entry(300) + entry(400), entry(100)), 400])
      const kinds = (yield* kvRecords(s)).map((r) => `${r.kind}:${(r.payload as { key: string }).key}`)
      expect(kinds).toEqual(["kv_put:a", "kv_put:b", "kv_put:b", "kv_put:a", "kv_delete:nothing", "kv_delete:b", "kv_put:c"])
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: opsLoop(answers) }, config: { maxSessionKvBytes: BOUND } })))
  })

  it.effect("0 means no bound: puts past any size are taken", () => {
    const answers: Array<unknown> = []
    return Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id: s } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" } })
      yield* run(s, [["put", "a", 4000], ["put", "b", 4000], ["put", "c", 4000]])
      expect(answers).toEqual(["ok", "ok", "ok"])
    }).pipe(Effect.provide(runtimeLayer({ loops: { t: opsLoop(answers) }, config: { maxSessionKvBytes: 0 } })))
  })

  it.scopedLive("a session reopened from its checkpoint or from its journal alone counts its kv the same, and refuses the same put with the same kv bytes", () => {
    const answers: Array<unknown> = []
    const over = (dataDir: string) => runtimeLayer({ loops: { t: opsLoop(answers) }, journal: { dataDir }, config: { maxSessionKvBytes: BOUND } })
    return Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-kv-bound-")
      const s = yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create({ agentloop: "t", model: { provider: "scripted" } })
        // Some churn, so that the count is the fold's, not a sum of puts: replaced, deleted, put again.
        yield* run(session_id, [["put", "a", 50], ["put", "a", 400], ["put", "b", 300], ["del", "b"], ["put", "b", 400]])
        expect(answers.splice(0)).toEqual(["ok", "ok", "ok", "ok", "ok"])
        return session_id
      }).pipe(Effect.provide(over(dataDir)))
      const full = 2 * entry(400)

      // A checkpoint written over the journal: read back, it counts the kv as the fold from the start does.
      const fromCheckpoint = yield* Effect.gen(function*() {
        const projection = yield* Projection
        const folded = yield* Effect.orDie(projection.state(s))
        expect(folded.state.kvBytes).toBe(full)
        yield* Effect.orDie(projection.checkpoint(s, folded.state))
        return yield* Effect.orDie(projection.state(s))
      }).pipe(Effect.provide(projectionOver(dataDir)))
      const checkpointed = yield* Effect.gen(function*() {
        const projection = yield* Projection
        return yield* Effect.orDie(projection.state(s))
      }).pipe(Effect.provide(projectionOver(dataDir)))
      expect(checkpointed.source).toBe("checkpoint")
      expect([fromCheckpoint.state.kvBytes, checkpointed.state.kvBytes]).toEqual([full, full])

      // Reopened from the checkpoint: the same refusal, nothing written.
      yield* Effect.gen(function*() {
        yield* run(s, [["put", "c", 400], ["read", "c"]])
        expect(answers.splice(0)).toEqual([refusedAt(full, entry(400)), null])
      }).pipe(Effect.provide(over(dataDir)))

      // Reopened from the journal alone (no checkpoint): the same again.
      const checkpointFile = path.join(dataDir, "sessions", s, "checkpoint")
      expect(fs.existsSync(checkpointFile)).toBe(true)
      fs.rmSync(checkpointFile)
      yield* Effect.gen(function*() {
        yield* run(s, [["put", "c", 400], ["del", "b"], ["put", "c", 400]])
        expect(answers.splice(0)).toEqual([refusedAt(full, entry(400)), "ok", "ok"])
      }).pipe(Effect.provide(over(dataDir)))
    })
  }, 60_000)
})

describe("a state's kvBytes", () => {
  it("is its kv's entries counted afresh after every fold, and a checkpoint's state read back counts the same", () => {
    const records: Array<JournalRecord> = []
    const push = (kind: string, payload: unknown) =>
      records.push({ sequence: records.length + 1, recorded_at_ms: 0, kind, payload } as unknown as JournalRecord)
    push("kv_put", { key: "a", value: "x".repeat(10) })
    push("kv_put", { key: "b", value: { nested: [1, 2, "three"] } })
    push("kv_put", { key: "a", value: null })
    push("kv_delete", { key: "missing" })
    push("kv_put", { key: "c", value: 42 })
    push("kv_delete", { key: "b" })
    push("kv_put", { key: "ü", value: "é".repeat(5) })
    let state = empty
    for (const r of records) {
      state = foldAll([r], state)
      expect(state.kvBytes).toBe(kvBytesOf(state.kv))
    }
    expect(HashMap.size(state.kv)).toBe(3)
    expect(state.kvBytes).toBe(kvEntryBytes("a", null) + kvEntryBytes("c", 42) + kvEntryBytes("ü", "é".repeat(5)))
    expect(deserializeState(serializeState(state)).kvBytes).toBe(state.kvBytes)
    expect(foldAll(records).kvBytes).toBe(state.kvBytes)
  })
})
