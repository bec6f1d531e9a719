/**
 * Wasm tools (docs/abi.md, the tool half): a tool whose definition names an admitted module runs
 * in the WebAssembly host with its own limits, emits tool-origin Events, and ends with the same
 * outcomes as other tools: ok, error (an error answer or a trap), timeout (its deadline) and
 * cancelled (a cancel) — the guest stopped at once.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { Agentloops } from "../../../src/services/Agentloop.js"
import { Journal } from "../../../src/services/Journal.js"
import type { TelemetryRecord, TelemetryShape } from "../../../src/services/Telemetry.js"
import { Sessions } from "../../../src/services/Sessions.js"
import { runtimeLayer } from "../../support/runtime.js"
import { data, guest, wat } from "../../support/wat.js"

const WASM = { workers: 2, memoryBytes: 4 * 1024 * 1024, computeMs: 5_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }

/** `{"ok":` + the activation's input + `}`: the tool's output holds its input. */
const echo = guest(`${data(100, '{"ok":').segment} ${data(110, "}").segment}
  (func (export "brain_tool") (param $ip i32) (param $il i32) (result i64)
    (local $p i32)
    (local.set $p (call $alloc (i32.add (local.get $il) (i32.const 7))))
    (memory.copy (local.get $p) (i32.const 100) (i32.const 6))
    (memory.copy (i32.add (local.get $p) (i32.const 6)) (local.get $ip) (local.get $il))
    (memory.copy (i32.add (local.get $p) (i32.add (local.get $il) (i32.const 6))) (i32.const 110) (i32.const 1))
    (call $out (local.get $p) (i32.add (local.get $il) (i32.const 7))))`)

const fails = guest(`${data(100, '{"error":{"message":"nope"}}').segment}
  (func (export "brain_tool") (param i32 i32) (result i64) (call $out (i32.const 100) (i32.const 28)))`)

const traps = guest(`(func (export "brain_tool") (param i32 i32) (result i64) (unreachable))`)

const spins = guest(`(func (export "brain_tool") (param i32 i32) (result i64) (loop $l (br $l)) (unreachable))`)

const emits = (() => {
  const op = data(100, "emit")
  const req = data(120, '{"kind":"progress","payload":{"pct":50}}')
  const ok = data(200, '{"ok":"emitted"}')
  return guest(`${op.segment} ${req.segment} ${ok.segment}
    (func (export "brain_tool") (param i32 i32) (result i64)
      (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${req.ptr}) (i32.const ${req.len})))
      (call $out (i32.const ${ok.ptr}) (i32.const ${ok.len})))`)
})()

const reports = (() => {
  const op = data(100, "telemetry")
  const req = data(120, '{"step":1}')
  const ok = data(200, '{"ok":"reported"}')
  return guest(`${op.segment} ${req.segment} ${ok.segment}
    (func (export "brain_tool") (param i32 i32) (result i64)
      (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${req.ptr}) (i32.const ${req.len})))
      (call $out (i32.const ${ok.ptr}) (i32.const ${ok.len})))`)
})()

describe("Wasm tools", () => {
  it.scopedLive("ok, error, trap, timeout and a tool-origin Event: each recorded with its outcome, the model told of every failure", () =>
    Effect.gen(function*() {
      const agentloops = yield* Agentloops
      const ids: Record<string, string> = {}
      for (const [name, text] of Object.entries({ echo, fails, traps, spins, emits })) {
        ids[name] = (yield* agentloops.admit(yield* Effect.promise(() => wat(text)))).id
      }
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({
        model: {
          provider: "scripted",
          replies: [
            { tool_calls: [{ name: "echo", input: { n: 1 } }, { name: "fails", input: {} }, { name: "traps", input: {} }, { name: "spins", input: {} }, { name: "emits", input: {} }] },
            { text: "done" }
          ]
        },
        tools: [
          { name: "echo", module: ids.echo },
          { name: "fails", module: ids.fails },
          { name: "traps", module: ids.traps },
          { name: "spins", module: ids.spins, timeout_ms: 200 },
          { name: "emits", module: ids.emits }
        ]
      })
      const outcome = yield* sessions.send(session_id, { message: "go" })
      expect(outcome.turn.status).toBe("ended")
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      const started = records.filter((r) => r.kind === "tool_call_started")
      const closing = (name: string) => {
        const s = started.find((r) => r.payload.tool === name)!
        return records.find((r) => (r.kind === "tool_call_ended" || r.kind === "tool_call_failed") && r.payload.sequence === s.sequence)!
      }
      expect(closing("echo").payload).toMatchObject({ outcome: "ok", output: { input: { n: 1 }, call: { name: "echo" } }, is_error: false })
      expect(closing("fails").payload).toMatchObject({ outcome: "error", output: { message: "nope" }, is_error: true })
      expect(closing("traps").payload).toMatchObject({ outcome: "error", is_error: true })
      expect(closing("traps").payload.output.message).toMatch(/trapped/)
      expect(closing("spins").payload).toMatchObject({ outcome: "timeout", is_error: true, failure: { ambiguous: false } })
      expect(closing("emits").payload).toMatchObject({ outcome: "ok", output: "emitted" })
      const progress = records.find((r) => r.kind === "extension")!
      const emitter = started.find((r) => r.payload.tool === "emits")!
      expect(progress.payload).toEqual({ kind: "progress", payload: { pct: 50 }, origin: { kind: "tool", sequence: emitter.sequence } })
      expect(progress.sequence).toBeLessThan(closing("emits").sequence)
    }).pipe(Effect.provide(runtimeLayer({ wasm: WASM }))))

  it.scopedLive("a tool's telemetry reaches the sink tagged with its session, activation and tool call, and is never journaled", () => {
    const got: Array<TelemetryRecord> = []
    const telemetry: TelemetryShape = {
      record: (r) => Effect.sync(() => void got.push(r)),
      stats: Effect.sync(() => ({ accepted: got.length, dropped: 0, delivered: got.length, failed: 0 }))
    }
    return Effect.gen(function*() {
      const agentloops = yield* Agentloops
      const id = (yield* agentloops.admit(yield* Effect.promise(() => wat(reports)))).id
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "reports", input: {} }] }, { text: "done" }] },
        tools: [{ name: "reports", module: id }]
      })
      expect((yield* sessions.send(session_id, { message: "go" })).turn.status).toBe("ended")
      const records = yield* journal.read(session_id, { after: 0, limit: 100 })
      const started = records.find((r) => r.kind === "tool_call_started")!
      const activation = records.find((r) => r.kind === "activation_started")!
      expect(got).toHaveLength(1)
      expect(got[0]).toMatchObject({ session_id, activation: activation.sequence, tool_call: started.sequence, data: { step: 1 } })
      expect(JSON.stringify(records)).not.toContain("step")
    }).pipe(Effect.provide(runtimeLayer({ wasm: WASM, telemetry })))
  })

  it.scopedLive("a cancel stops a running Wasm tool at once: recorded cancelled, and the pool serves the next call", () =>
    Effect.gen(function*() {
      const agentloops = yield* Agentloops
      const spin = (yield* agentloops.admit(yield* Effect.promise(() => wat(spins)))).id
      const echoId = (yield* agentloops.admit(yield* Effect.promise(() => wat(echo)))).id
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "spin", input: {} }] }, { tool_calls: [{ name: "echo", input: { n: 2 } }] }, { text: "ok" }] },
        tools: [{ name: "spin", module: spin }, { name: "echo", module: echoId }]
      })
      const turn = yield* Effect.fork(sessions.send(session_id, { message: "go" }))
      yield* Effect.sleep("100 millis")
      yield* sessions.interrupt(session_id)
      expect((yield* Fiber.join(turn)).turn.failure?.code).toBe("cancelled")
      const failed = (yield* journal.read(session_id, { after: 0, limit: 100 })).find((r) => r.kind === "tool_call_failed")!
      expect(failed.payload).toMatchObject({ outcome: "cancelled", is_error: true })
      const next = yield* sessions.send(session_id, { message: "again" })
      expect(next.turn.status).toBe("ended")
    }).pipe(Effect.provide(runtimeLayer({ wasm: WASM }))))

  it.scopedLive("a tool naming a module that is not a tool, or no module, is refused at create", () =>
    Effect.gen(function*() {
      const agentloops = yield* Agentloops
      const loopOnly = (yield* agentloops.admit(yield* Effect.promise(() => wat(guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`))))).id
      const sessions = yield* Sessions
      for (const module of [loopOnly, "a".repeat(64)]) {
        const refused = yield* Effect.flip(sessions.create({ model: { provider: "scripted" }, tools: [{ name: "t", module }] }))
        expect(refused.code).toBe("invalid_request")
      }
    }).pipe(Effect.provide(runtimeLayer({ wasm: WASM }))))
})
