/**
 * What one turn of a hostile WebAssembly loop may write to its session's journal: each host call
 * is cheap for the guest (a pointer) and costs the host its whole request, parsed and journaled,
 * so the turn's writes are bounded by their bytes in the journal (BRAIN_MAX_TURN_WRITE_BYTES), and
 * its Events by their records' bytes (BRAIN_MAX_EMITTED_BYTES), not by their payloads alone.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import { EXTENSION_KIND, type JournalRecord } from "../../src/domain/Records.js"
import * as WasmHostWorkers from "../../src/layers/WasmHostWorkers.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import type * as ServerConfig from "../../src/services/ServerConfig.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"
import { data, guest, wat } from "../support/wat.js"

const MiB = 1024 * 1024
const OPTIONS = { workers: 2, memoryBytes: 32 * MiB, computeMs: 10_000, ioBytes: 16 * MiB, moduleBytes: MiB }

/** A record's bytes in the journal, as the bounds count them (docs/operations.md): frame, record kind, payload JSON. */
const recordBytes = (r: JournalRecord) => 30 + Buffer.byteLength(r.kind, "utf8") + Buffer.byteLength(JSON.stringify(r.payload), "utf8")

/**
 * A loop that makes the host call `op` with `request` at most `times` times, and returns the first
 * error it is answered (passed on whole, so the turn fails with its code), or `{"ok":"done"}`.
 * `request` is the text at `at` of `length` bytes, built by `build` (WAT instructions) first.
 */
const repeating = (op: string, times: number, request: { readonly segment: string; readonly ptr: number; readonly len: number; readonly build?: string; readonly heap: number }) => {
  const o = data(200, op)
  const ok = data(100, '{"ok":"done"}')
  return guest(`${o.segment} ${ok.segment} ${request.segment}
    (func (export "brain_run") (param i32 i32) (result i64)
      (local $i i32) (local $answer i64)
      ${request.build ?? ""}
      (global.set $heap (i32.const ${request.heap}))
      (block $done (loop $again
        (br_if $done (i32.ge_u (local.get $i) (i32.const ${times})))
        (local.set $answer (call $call (i32.const ${o.ptr}) (i32.const ${o.len}) (i32.const ${request.ptr}) (i32.const ${request.len})))
        ;; {"ok"… or {"error"…: the third byte tells
        (if (i32.eq (i32.load8_u (i32.add (i32.wrap_i64 (i64.shr_u (local.get $answer) (i64.const 32))) (i32.const 2))) (i32.const 101))
          (then (return (local.get $answer))))
        (global.set $heap (i32.const ${request.heap}))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $again)))
      (call $out (i32.const ${ok.ptr}) (i32.const ${ok.len})))`)
}

/** `{"key":"k","value":"xxx…"}` with a value of `size` bytes, built at 64 KiB in the guest's memory (grown to hold it). */
const largePut = (size: number) => {
  const head = data(400, '{"key":"k","value":"')
  const at = 65536
  const len = head.len + size + 2
  const pages = Math.ceil((at + len) / 65536) + 1
  return {
    segment: head.segment,
    ptr: at,
    len,
    heap: pages * 65536,
    build: `(drop (memory.grow (i32.const ${pages})))
      (memory.copy (i32.const ${at}) (i32.const ${head.ptr}) (i32.const ${head.len}))
      (memory.fill (i32.const ${at + head.len}) (i32.const 120) (i32.const ${size}))
      (i32.store16 (i32.const ${at + head.len + size}) (i32.const 0x7d22))`
  }
}

const withLoop = <A, E>(
  text: string,
  options: { readonly config: Partial<ServerConfig.ServerConfigShape>; readonly dataDir?: string },
  body: Effect.Effect<A, E, Sessions | Journal>
) =>
  Effect.gen(function*() {
    const host = yield* WasmHostWorkers.make(OPTIONS)
    const module = yield* Effect.orDie(host.admit(yield* Effect.promise(() => wat(text))))
    const loops = { hostile: { activate: (input, h) => host.runLoop(module, input, h) } satisfies AgentloopShape }
    const journal = options.dataDir === undefined ? "memory" as const : { dataDir: options.dataDir }
    return yield* body.pipe(Effect.provide(runtimeLayer({ loops, journal, config: options.config })))
  })

const recordsOf = (session: SessionId) => Effect.flatMap(Journal, (j) => Effect.orDie(j.read(session, { after: 0, limit: 1_000_000 })))

describe("a turn's writes are bounded by their bytes in the journal", () => {
  it.scopedLive("a loop that puts 8 MiB again and again is refused turn_write_limit once past BRAIN_MAX_TURN_WRITE_BYTES: the refused put leaves nothing in the journal, and the session's next turn has the whole bound again", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-turn-writes-")
      const size = 8 * MiB
      // Two puts of 8 MiB fit in 20 MiB, a third does not.
      const limit = 20 * MiB
      const loop = repeating("kv_put", 4, largePut(size))
      const turns = yield* withLoop(loop, { config: { maxTurnWriteBytes: limit }, dataDir }, Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id: s } = yield* sessions.create({ agentloop: "hostile", model: { provider: "scripted" } })
        const first = yield* sessions.send(s, { message: "one" })
        const second = yield* sessions.send(s, { message: "two" })
        return { s, first, second, status: (yield* sessions.get(s)).status }
      }))
      for (const t of [turns.first, turns.second]) {
        expect(t.turn.status).toBe("failed")
        expect(t.turn.failure?.code, JSON.stringify(t.turn.failure)).toBe("turn_write_limit")
        expect(t.turn.failure?.message).toMatch(/BRAIN_MAX_TURN_WRITE_BYTES/)
      }
      expect(turns.status).toBe("idle")
      // Read back from the files by a journal opened afresh: every record whole, two puts per turn.
      const records = yield* recordsOf(turns.s).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } })))
      const puts = records.filter((r) => r.kind === "kv_put")
      expect(puts.map((r) => r.sequence < turns.second.turn.sequence)).toEqual([true, true, false, false])
      for (const put of puts) expect(put.payload).toEqual({ key: "k", value: "x".repeat(size) })
      const [a, b] = puts
      expect(recordBytes(a!) + recordBytes(b!)).toBeLessThanOrEqual(limit)
      expect(records.map((r) => r.sequence)).toEqual(records.map((_, i) => i + 1))
    }), 120_000)

  it.scopedLive("many tiny emits are refused emitted_bytes_limit at the count their records' bytes allow: kind, payload and origin as JSON, plus the record kind and the frame", () =>
    Effect.gen(function*() {
      const limit = 20_000
      const request = data(300, '{"kind":"a","payload":0}')
      const loop = repeating("emit", 100_000, { ...request, heap: 4096 })
      const { outcome, records } = yield* withLoop(loop, { config: { maxEmittedBytes: limit } }, Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id: s } = yield* sessions.create({ agentloop: "hostile", model: { provider: "scripted" } })
        return { outcome: yield* sessions.send(s, { message: "go" }), records: yield* recordsOf(s) }
      }))
      expect(outcome.turn.failure?.code).toBe("emitted_bytes_limit")
      const activation = records.find((r) => r.kind === "activation_started")!.sequence
      // Each Event's record: {"kind":"a","payload":0,"origin":{"kind":"agentloop","sequence":N}} in a frame.
      const weight = 30 + EXTENSION_KIND.length + JSON.stringify({ kind: "a", payload: 0, origin: { kind: "agentloop", sequence: activation } }).length
      const events = records.filter((r) => r.kind === EXTENSION_KIND)
      expect(events.length).toBe(Math.floor(limit / weight))
      for (const e of events) expect(recordBytes(e)).toBe(weight)
    }), 120_000)
})
