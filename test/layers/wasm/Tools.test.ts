/**
 * Wasm tools (docs/abi.md, the tool half): a tool whose definition names an admitted module runs
 * in the WebAssembly host with its own limits, emits tool-origin Events, and ends with the same
 * outcomes as other tools: ok, error (an error answer or a trap), timeout (its deadline) and
 * cancelled (a cancel) — the guest stopped at once.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope } from "effect"
import { vi } from "vitest"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { Agentloops } from "../../../src/services/Agentloop.js"
import { Journal } from "../../../src/services/Journal.js"
import type { TelemetryRecord, TelemetryShape } from "../../../src/services/Telemetry.js"
import { Sessions } from "../../../src/services/Sessions.js"
import type { WasmHostShape } from "../../../src/services/WasmHost.js"
import { runtimeLayer } from "../../support/runtime.js"
import { data, guest, wat } from "../../support/wat.js"

const WASM = { workers: 2, memoryBytes: 4 * 1024 * 1024, computeMs: 5_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }
/** The same, with guests on the main thread first (BRAIN_WASM_INLINE_MS), as `serve` runs them. */
const INLINE = { ...WASM, inlineMs: 50, inlineAtAdmission: true }
/** An allowance no busy test machine reaches: no call moves to the pool, so every call of a round is tried to its end. */
const INLINE_ALWAYS = { ...INLINE, inlineMs: 1_000 }

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
  /** On the worker pool, and on the main thread (the echo, error and trap tried there at once; the spin moved; the emit run after its try gave up). */
  const hosts = [["on the worker pool", WASM], ["on the main thread", INLINE]] as const
  it.scopedLive.each(hosts)("ok, error, trap, timeout and a tool-origin Event (%s): each recorded with its outcome, the model told of every failure", ([, wasm]) =>
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
      // Only the emitting tool's Event was written: its try gave up before the call was made.
      expect(records.filter((r) => r.kind === "extension")).toHaveLength(1)
    }).pipe(Effect.provide(runtimeLayer({ wasm }))))

  it.scopedLive("a round of Wasm tools that all run to their end on the main thread: their outcomes recorded right after their starts, in the calls' order, and the loop given each result", () =>
    Effect.gen(function*() {
      const agentloops = yield* Agentloops
      const echoId = (yield* agentloops.admit(yield* Effect.promise(() => wat(echo)))).id
      const failsId = (yield* agentloops.admit(yield* Effect.promise(() => wat(fails)))).id
      // Compiled and at hand, as after a module's first call (a call whose module is still to be compiled is not tried).
      yield* agentloops.tool(echoId)
      yield* agentloops.tool(failsId)
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({
        model: {
          provider: "scripted",
          replies: [{ tool_calls: [{ name: "echo", input: { n: 1 } }, { name: "fails", input: {} }, { name: "echo", input: { n: 2 } }] }, { text: "done" }]
        },
        tools: [{ name: "echo", module: echoId }, { name: "fails", module: failsId }]
      })
      const outcome = yield* sessions.send(session_id, { message: "go" })
      expect(outcome.turn.status).toBe("ended")
      const records = yield* journal.read(session_id, { after: 0, limit: 1000 })
      const at = records.findIndex((r) => r.kind === "tool_call_started")
      const round = records.slice(at, at + 6)
      expect(round.map((r) => r.kind)).toEqual(["tool_call_started", "tool_call_started", "tool_call_started", "tool_call_ended", "tool_call_ended", "tool_call_ended"])
      expect(round.slice(3).map((r) => r.payload.sequence)).toEqual(round.slice(0, 3).map((r) => r.sequence))
      expect(round[3]!.payload).toMatchObject({ outcome: "ok", output: { input: { n: 1 } } })
      expect(round[4]!.payload).toMatchObject({ outcome: "error", output: { message: "nope" } })
      expect(round[5]!.payload).toMatchObject({ outcome: "ok", output: { input: { n: 2 } } })
      // The loop was given each call's result, in order, and saved them before the next model call.
      const saved = records.filter((r) => r.kind === "transcript_delta").flatMap((r) => r.payload.append as Array<{ role: string; tool_call_id?: string }>)
      expect(saved.filter((m) => m.role === "tool").map((m) => m.tool_call_id)).toEqual(round.slice(0, 3).map((r) => r.payload.call_id))
    }).pipe(Effect.provide(runtimeLayer({ wasm: INLINE_ALWAYS }))))

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

  /** Emits `ran` (so a test sees it started), then spins until stopped. */
  const emitsThenSpins = (() => {
    const op = data(100, "emit")
    const req = data(120, '{"kind":"ran"}')
    return guest(`${op.segment} ${req.segment}
      (func (export "brain_tool") (param i32 i32) (result i64)
        (drop (call $call (i32.const ${op.ptr}) (i32.const ${op.len}) (i32.const ${req.ptr}) (i32.const ${req.len})))
        (loop $l (br $l)) (unreachable))`)
  })()
  /**
   * One guest computing at once and two threads, each activation holding its thread through its host
   * calls (not pinned): of a round of three spinning calls the third never gets a thread (the first
   * spins holding one; the second holds the other, started or waiting for the compute slot). Pinned,
   * a guest waiting for its `emit`'s answer holds no thread, and the third could start then.
   */
  const TWO_THREADS = { ...WASM, workers: 1, threads: 2, pinning: false }
  /** The calls' deadline: a delay no other timer of the test uses (its timer is held by the test). */
  const DEADLINE_MS = 43_210

  it.scopedLive.each([["a cancel", "cancel"], ["their deadlines", "deadline"]] as const)(
    "Wasm tool calls stopped by %s before their guest started never ran: recorded not sent and not ambiguous; a call whose guest ran is not",
    ([, by]) =>
      Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const spin = (yield* agentloops.admit(yield* Effect.promise(() => wat(emitsThenSpins)))).id
        const sessions = yield* Sessions
        const journal = yield* Journal
        const { session_id } = yield* sessions.create({
          model: { provider: "scripted", replies: [{ tool_calls: [{ name: "spin", input: { i: 1 } }, { name: "spin", input: { i: 2 } }, { name: "spin", input: { i: 3 } }] }, { text: "ok" }] },
          tools: [{ name: "spin", module: spin, ...(by === "deadline" ? { timeout_ms: DEADLINE_MS } : {}) }]
        })
        // The first round's deadline timer is held here, not armed, and fired by the test once a guest
        // has started: a deadline never passes before any guest could start, however loaded the
        // machine. A later round's (the next turn's, the model's replies come round again) passes at once.
        const held: Array<() => void> = []
        let holding = true
        const original = globalThis.setTimeout as unknown as (...args: Array<unknown>) => unknown
        const set = vi.spyOn(globalThis, "setTimeout").mockImplementation(((fn: () => void, ms?: number, ...rest: Array<unknown>) => {
          if (ms !== DEADLINE_MS) return original(fn, ms, ...rest)
          if (!holding) return original(fn, 0, ...rest)
          held.push(fn)
          return { unref: () => {}, ref: () => {}, refresh: () => {}, hasRef: () => false }
        }) as unknown as typeof setTimeout)
        yield* Effect.addFinalizer(() => Effect.sync(() => set.mockRestore()))
        const turn = yield* Effect.fork(sessions.send(session_id, { message: "go" }))
        const read = journal.read(session_id, { after: 0, limit: 100 })
        // A guest has started (its Event is written): the round's third call cannot have.
        while (!(yield* read).some((r) => r.kind === "extension")) yield* Effect.sleep("10 millis")
        if (by === "cancel") yield* sessions.interrupt(session_id)
        else {
          expect(held.length).toBeGreaterThanOrEqual(1)
          for (const deadline of held) deadline()
        }
        const outcome = yield* Fiber.join(turn)
        holding = false
        const records = yield* read
        const ran = new Set(records.filter((r) => r.kind === "extension").map((r) => (r.payload.origin as { sequence: number }).sequence))
        expect(ran.size).toBeGreaterThanOrEqual(1)
        const closings = records.filter((r) => r.kind === "tool_call_failed").map((r) =>
          r.payload as { sequence: number; outcome: string; failure: { ambiguous: boolean; message: string } }
        )
        expect(closings).toHaveLength(3)
        const unsent = closings.filter((c) => /the call was not sent/.test(c.failure.message))
        expect(unsent.length).toBeGreaterThanOrEqual(1)
        for (const closing of closings) expect(closing.outcome).toBe(by === "cancel" ? "cancelled" : "timeout")
        for (const closing of unsent) {
          expect(ran.has(closing.sequence)).toBe(false)
          expect(closing.failure.ambiguous).toBe(false)
        }
        for (const closing of closings.filter((c) => ran.has(c.sequence))) {
          expect(unsent).not.toContain(closing)
          // Stopped while it ran: a cancel leaves what it did uncertain; its own deadline is confirmed, as before.
          expect(closing.failure.ambiguous).toBe(by === "cancel")
        }
        if (by === "cancel") expect(outcome.turn.failure).toMatchObject({ code: "cancelled", ambiguous: true })
        else expect(outcome.turn.status).toBe("ended")
        const next = yield* sessions.send(session_id, { message: "again" })
        expect(next.turn.status).toBe("ended")
      }).pipe(Effect.provide(runtimeLayer({ wasm: TWO_THREADS })))
  )

  /** The host's calls of Wasm tools go to `closed.host` once a test has set it: a host whose pool closed, as at the end of a server stop. */
  const closed: { host?: WasmHostShape } = {}
  const onClosedPool = (host: WasmHostShape): WasmHostShape => ({
    ...host,
    runTool: (module, activation, services) => (closed.host ?? host).runTool(module, activation, services)
  })

  it.scopedLive("a Wasm tool call refused its thread because the server is stopping is recorded cancelled, interrupted \"the server is stopping\", not sent and not ambiguous, as its loop would fail interrupted; never the tool's error", () =>
    Effect.gen(function*() {
      const agentloops = yield* Agentloops
      const echoId = (yield* agentloops.admit(yield* Effect.promise(() => wat(echo)))).id
      const scope = yield* Scope.make()
      const stopped = yield* Scope.extend(WasmHostWorkers.make({ ...WASM, workers: 1, threads: 2 }), scope)
      yield* Scope.close(scope, Exit.void)
      closed.host = stopped
      const sessions = yield* Sessions
      const journal = yield* Journal
      const { session_id } = yield* sessions.create({
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "echo", input: { n: 1 } }] }, { text: "done" }] },
        tools: [{ name: "echo", module: echoId }]
      })
      yield* sessions.send(session_id, { message: "go" })
      const records = yield* journal.read(session_id, { after: 0, limit: 100 })
      expect(records.filter((r) => r.kind === "tool_call_ended")).toHaveLength(0)
      const failed = records.filter((r) => r.kind === "tool_call_failed")
      expect(failed).toHaveLength(1)
      expect(failed[0]!.payload).toMatchObject({
        outcome: "cancelled",
        is_error: true,
        failure: { code: "interrupted", message: "the server is stopping; the call was not sent", ambiguous: false }
      })
    }).pipe(Effect.ensuring(Effect.sync(() => delete closed.host)), Effect.provide(runtimeLayer({ wasm: WASM, wasmHost: onClosedPool }))))

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
