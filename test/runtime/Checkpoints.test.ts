/**
 * When a released session writes its checkpoint (sessions/Registry.ts, `checkpointDue`): every
 * 256 records folded at least, and at least one record per 256 bytes of its state. A checkpoint
 * encodes the whole state, so at a fixed interval a long conversation paid for its whole
 * transcript again every few dozen turns, quadratic over its life; with the interval growing with
 * the state, the bytes encoded stay linear in the records folded, and an open after a crash folds
 * at most one interval of records after the checkpoint.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import fc from "fast-check"
import * as fs from "node:fs"
import * as path from "node:path"
import type { SessionId } from "../../src/domain/Ids.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import { Sessions } from "../../src/services/Sessions.js"
import { CHECKPOINT_BYTES_PER_RECORD, CHECKPOINT_EVERY_RECORDS, checkpointDue } from "../../src/layers/sessions/Registry.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

describe("checkpointDue", () => {
  it("a state up to 64 KiB is due every 256 records; one of 1 MiB only after 4,096", () => {
    expect(checkpointDue(255, 1_000)).toBe(false)
    expect(checkpointDue(256, 1_000)).toBe(true)
    expect(checkpointDue(256, 64 * 1024)).toBe(true)
    expect(checkpointDue(256, 1 << 20)).toBe(false)
    expect(checkpointDue(4_095, 1 << 20)).toBe(false)
    expect(checkpointDue(4_096, 1 << 20)).toBe(true)
  })

  it("over any life of a session, the bytes its checkpoints encode are at most 256 per record folded, and fewer than max(256, state / 256) records are ever past the last checkpoint", () => {
    fc.assert(
      fc.property(
        // The state's size after each record: it grows, shrinks (a kv delete, a rewritten transcript) or stays.
        fc.array(fc.integer({ min: -20_000, max: 20_000 }), { minLength: 1, maxLength: 3_000 }),
        fc.integer({ min: 0, max: 5_000_000 }),
        (changes, start) => {
          let bytes = start
          let last = 0
          let encoded = 0
          for (let record = 1; record <= changes.length; record++) {
            bytes = Math.max(0, bytes + changes[record - 1]!)
            if (checkpointDue(record - last, bytes)) {
              encoded += bytes
              last = record
            }
            expect(record - last).toBeLessThan(Math.max(CHECKPOINT_EVERY_RECORDS, Math.ceil(bytes / CHECKPOINT_BYTES_PER_RECORD)))
          }
          expect(encoded).toBeLessThanOrEqual(CHECKPOINT_BYTES_PER_RECORD * changes.length)
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

describe("a released session's checkpoint", () => {
  it.scopedLive("a small session has one after 256 records; one whose state is 200 KB only after about ceil(200 KB / 256) records", () =>
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
            return (yield* sessions.get(id)).last_sequence
          })
        // 40 turns: about 280 records each.
        expect(yield* turns(small, 40)).toBeGreaterThan(CHECKPOINT_EVERY_RECORDS)
        expect(yield* turns(large, 40)).toBeGreaterThan(CHECKPOINT_EVERY_RECORDS)
        expect(checkpointed(small)).toBe(true)
        expect(checkpointed(large)).toBe(false)
        // It comes once about one record per 256 bytes of its state was folded: past
        // ceil(200,000 / 256) = 782 records (the transcript adds a little to the state meanwhile).
        let at = 0
        for (let i = 0; i < 200 && !checkpointed(large); i++) at = yield* turns(large, 1)
        expect(at).toBeGreaterThanOrEqual(Math.ceil(200_000 / CHECKPOINT_BYTES_PER_RECORD))
        expect(at).toBeLessThan(1.2 * Math.ceil(200_000 / CHECKPOINT_BYTES_PER_RECORD))
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir }, loops: { small: keeping(0), large: keeping(200_000) } })))
    }), 60_000)
})
