/**
 * Rogue guests (WAT fixtures compiled in the test) behind the WebAssembly host, each run as a
 * session's Agentloop: every one ends its turn in a typed failure, never harms the server or the
 * pool, and the next turn — of another session, on the same pool — completes. Modules that break
 * the ABI are refused at admission.
 */
import { TRANSCRIPT_TAIL } from "../../../src/domain/TranscriptTail.js"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Fiber } from "effect"
import * as WasmHostWorkers from "../../../src/layers/WasmHostWorkers.js"
import { MIN_WASM_MODULE_BYTES } from "../../../src/layers/wasm/Module.js"
import type { AgentloopShape } from "../../../src/services/Agentloop.js"
import { Journal } from "../../../src/services/Journal.js"
import { Sessions } from "../../../src/services/Sessions.js"
import type { AdmittedModule, WasmHostShape } from "../../../src/services/WasmHost.js"
import { runtimeLayer } from "../../support/runtime.js"
import { calling, data, guest, type GuestOptions, wat } from "../../support/wat.js"

const OPTIONS = { workers: 2, memoryBytes: 4 * 1024 * 1024, computeMs: 500, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }

const OK = data(100, '{"ok":"fine"}')
const fine = guest(`${OK.segment}
  (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const ${OK.ptr}) (i32.const ${OK.len})))`)

const ROGUES: Record<string, string> = {
  spin: guest(`(func (export "brain_run") (param i32 i32) (result i64) (loop $l (br $l)) (unreachable))`),
  grow: guest(`(func (export "brain_run") (param i32 i32) (result i64)
    (if (i32.lt_s (memory.grow (i32.const 1000)) (i32.const 0)) (then unreachable))
    (i64.const 0))`),
  trap: guest(`(func (export "brain_run") (param i32 i32) (result i64) (unreachable))`),
  badJson: calling("kv_put", "{not json"),
  reserved: calling("emit", '{"kind":"turn_started","payload":{}}'),
  oversized: calling("emit", JSON.stringify({ kind: "big", payload: { pad: "x".repeat(2000) } })),
  badOutput: guest(`${data(100, "not json").segment}
    (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const 100) (i32.const 8)))`),
  poller: (() => {
    const o = data(200, "kv_read")
    const r = data(300, '{"key":"k"}')
    // Reads kv until a call answers an error (the cancel), then returns that answer as its output.
    return guest(`${o.segment} ${r.segment}
      (func (export "brain_run") (param i32 i32) (result i64)
        (local $ans i64)
        (loop $poll
          (local.set $ans (call $call (i32.const ${o.ptr}) (i32.const ${o.len}) (i32.const ${r.ptr}) (i32.const ${r.len})))
          ;; {"ok"… or {"error"…: the third byte tells
          (br_if $poll (i32.ne (i32.load8_u (i32.add (i32.wrap_i64 (i64.shr_u (local.get $ans) (i64.const 32))) (i32.const 2))) (i32.const 101))))
        (local.get $ans))`)
  })(),
  // Its request (in a data segment past the first page: two pages of memory) one write past the bound.
  pastIo: (() => {
    const o = data(200, "kv_put")
    const r = data(300, JSON.stringify({ key: "k", value: "x".repeat(OPTIONS.ioBytes) }))
    return guest(`${o.segment} ${r.segment}
      (func (export "brain_run") (param i32 i32) (result i64)
        (call $call (i32.const ${o.ptr}) (i32.const ${o.len}) (i32.const ${r.ptr}) (i32.const ${r.len})))`, { memory: "3" })
  })(),
  pastMemory: guest(`(func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const 65000) (i32.const 100000)))`)
}

describe("rogue guests", () => {
  const withHost = <A, E>(body: (host: WasmHostShape, loops: Record<string, AdmittedModule>) => Effect.Effect<A, E, Sessions | Journal>, config = {}) =>
    Effect.gen(function*() {
      const host = yield* WasmHostWorkers.make(OPTIONS)
      const modules: Record<string, AdmittedModule> = {}
      for (const [name, text] of Object.entries({ fine, ...ROGUES })) {
        modules[name] = yield* Effect.orDie(host.admit(yield* Effect.promise(() => wat(text))))
      }
      const loops = Object.fromEntries(
        Object.entries(modules).map(([name, m]) => [name, { activate: (input, h) => host.runLoop(m, input, h) } satisfies AgentloopShape])
      )
      return yield* body(host, modules).pipe(Effect.provide(runtimeLayer({ loops, config: { maxEmittedBytes: 1000, ...config } })))
    })

  const turn = (agentloop: string) =>
    Effect.gen(function*() {
      const sessions = yield* Sessions
      const { session_id } = yield* sessions.create({ agentloop, model: { provider: "scripted" } })
      return yield* sessions.send(session_id, { message: "go" })
    })

  it.scopedLive("each rogue ends its turn with a typed failure, and a good guest's turn completes after every one of them", () =>
    withHost(() =>
      Effect.gen(function*() {
        const expected: Record<string, [string, RegExp]> = {
          spin: ["agentloop_failed", /compute budget of 500 ms/],
          grow: ["agentloop_failed", /trapped/],
          trap: ["agentloop_failed", /trapped: unreachable/],
          badJson: ["invalid_request", /not JSON/],
          reserved: ["reserved_kind", /turn_started/],
          oversized: ["emitted_bytes_limit", /BRAIN_MAX_EMITTED_BYTES/],
          badOutput: ["agentloop_failed", /not \{"ok"/],
          pastMemory: ["agentloop_failed", /runs past the guest's memory/]
        }
        for (const [name, [code, message]] of Object.entries(expected)) {
          const outcome = yield* turn(name)
          expect(outcome.turn.status, name).toBe("failed")
          expect(outcome.turn.failure?.code, name).toBe(code)
          expect(outcome.turn.failure?.message, name).toMatch(message)
          const after = yield* turn("fine")
          expect(after.turn, `a turn after ${name}`).toMatchObject({ status: "ended", result: "fine" })
        }
      })))

  it.scopedLive("a host call whose request is past BRAIN_MAX_WASM_IO_BYTES answers invalid_request naming the bound, with the request's bytes and the limit in its details, and nothing of it is done", () =>
    withHost(() =>
      Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create({ agentloop: "pastIo", model: { provider: "scripted" } })
        const outcome = yield* sessions.send(session_id, { message: "go" })
        const bytes = JSON.stringify({ key: "k", value: "x".repeat(OPTIONS.ioBytes) }).length
        expect(outcome.turn.failure).toMatchObject({
          code: "invalid_request",
          message: `the request is above BRAIN_MAX_WASM_IO_BYTES (${OPTIONS.ioBytes})`,
          details: { bytes, limit: OPTIONS.ioBytes }
        })
        const records = yield* Effect.orDie((yield* Journal).read(session_id, { after: 0, limit: 1000 }))
        expect(records.map((r) => r.kind)).toContain("turn_failed")
        expect(records.map((r) => r.kind)).not.toContain("kv_put")
      })))

  it.scopedLive("a spinning guest is stopped within its budget while other sessions' turns keep completing on the pool", () =>
    withHost(() =>
      Effect.gen(function*() {
        const spinning = yield* Effect.fork(turn("spin"))
        const others = yield* Effect.forEach(Array.from({ length: 5 }, () => turn("fine")), (t) => t, { concurrency: 1 })
        for (const o of others) expect(o.turn.status).toBe("ended")
        const spun = yield* Fiber.join(spinning)
        expect(spun.turn.failure?.code).toBe("agentloop_failed")
      })))

  it.scopedLive("a host call after cancellation answers cancelled, and a guest that passes it on ends its turn at once", () =>
    withHost(() =>
      Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create({ agentloop: "poller", model: { provider: "scripted" } })
        const polled = yield* Effect.fork(sessions.send(session_id, { message: "go" }))
        yield* Effect.sleep("50 millis")
        yield* sessions.interrupt(session_id)
        const answered = yield* Fiber.join(polled)
        expect(answered.turn.failure?.code).toBe("cancelled")
        // Stopped by its own answer, not by the host: the grace (ten minutes here, past the test's
        // timeout) was not waited out.
        expect((yield* turn("fine")).turn.status).toBe("ended")
      }), { cancelGraceMs: 600_000 }))

  it.scopedLive("a guest that ignores a cancel (it makes no host call) is stopped after the grace; the pool serves the next turn", () =>
    withHost(() =>
      Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create({ agentloop: "spin", model: { provider: "scripted" } })
        const running = yield* Effect.fork(sessions.send(session_id, { message: "go" }))
        yield* Effect.sleep("50 millis")
        yield* sessions.interrupt(session_id)
        const outcome = yield* Fiber.join(running)
        expect(outcome.turn.failure?.code).toBe("cancelled")
        expect((yield* turn("fine")).turn.status).toBe("ended")
      }), { cancelGraceMs: 50 }))

  it.effect("modules that break the ABI are refused at admission: an import outside it, no marker, no entry, no imported memory, not Wasm, an ABI function of the wrong type, a marker of the wrong kind, a tail length that is not a constant count", () =>
    Effect.gen(function*() {
      const host = yield* WasmHostWorkers.make(OPTIONS)
      const refused = async (text: string) => wat(text)
      const cases: Array<[string, Uint8Array, RegExp]> = [
        ["wasi", yield* Effect.promise(() => refused(guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`, { imports: `(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))` }))), /wasi_snapshot_preview1.fd_write/],
        ["no marker", yield* Effect.promise(() => refused(guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`, { marker: false }))), /brain_abi_v1/],
        ["no entry", yield* Effect.promise(() => refused(guest(``))), /neither brain_run/],
        ["own memory", yield* Effect.promise(() => refused(`(module (memory 1) (global (export "brain_abi_v1") i32 (i32.const 1)) (func (export "brain_alloc") (param i32) (result i32) (i32.const 0)) (func (export "brain_run") (param i32 i32) (result i64) (i64.const 0)))`)), /env.memory/],
        ["not wasm", new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, ...new Array<number>(MIN_WASM_MODULE_BYTES).fill(0xff)]), /not a valid WebAssembly module/],
        // Each ABI function with the wrong type: refused now, not at the first turn.
        ["brain_run's type", yield* Effect.promise(() => refused(guest(`(func (export "brain_run") (result i32) (i32.const 0))`))), /brain_run must be \(i32, i32\) -> i64, not \(\) -> i32/],
        ["brain_tool's type", yield* Effect.promise(() => refused(guest(`(func (export "brain_tool") (param i64 i32) (result i64) (i64.const 0))`))), /brain_tool must be \(i32, i32\) -> i64/],
        ["brain_alloc's type", yield* Effect.promise(() => refused(`(module (import "env" "memory" (memory 1)) (global (export "brain_abi_v1") i32 (i32.const 1)) (func (export "brain_alloc") (param i64) (result i64) (i64.const 0)) (func (export "brain_run") (param i32 i32) (result i64) (i64.const 0)))`)), /brain_alloc must be \(i32\) -> i32, not \(i64\) -> i64/],
        ["brain.call's type", yield* Effect.promise(() => refused(`(module (import "env" "memory" (memory 1)) (import "brain" "call" (func (param i32 i32) (result i32))) (global (export "brain_abi_v1") i32 (i32.const 1)) (func (export "brain_alloc") (param i32) (result i32) (i32.const 0)) (func (export "brain_run") (param i32 i32) (result i64) (i64.const 0)))`)), /brain.call must be \(i32, i32, i32, i32\) -> i64/],
        ["brain.fail's type", yield* Effect.promise(() => refused(guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`, { imports: `(import "brain" "fail" (func (param i32) (result i32)))` }))), /brain.fail must be \(i32, i32\) -> \(\)/],
        ["a marker that is a memory", yield* Effect.promise(() => refused(`(module (memory (import "env" "memory") 1) (export "brain_abi_v1" (memory 0)) (func (export "brain_alloc") (param i32) (result i32) (i32.const 0)) (func (export "brain_run") (param i32 i32) (result i64) (i64.const 0)))`)), /brain_abi_v1 must be a function or a global/],
        // A tail's length must be a number Brain can read without running the guest.
        ...(yield* Effect.forEach(
          [
            ["a tail length without the tail", { tailLength: "i32 (i32.const 2)" }, /only for a loop that also exports the global brain_transcript_tail/],
            ["a mutable tail length", { tail: true, tailLength: "(mut i32) (i32.const 2)" }, /must be an immutable i32 global/],
            ["an i64 tail length", { tail: true, tailLength: "i64 (i64.const 2)" }, /must be an immutable i32 global/],
            ["a negative tail length", { tail: true, tailLength: "i32 (i32.const -1)" }, /is -1: a number of messages cannot be negative/],
            ["a tail length that is a function", { tail: true, extra: `(func (export "brain_transcript_tail_length"))` }, /brain_transcript_tail_length is not a global/],
            // Every optional marker is a global: one of another kind is refused, not ignored.
            ["a tail marker that is a function", { extra: `(func (export "brain_transcript_tail"))` }, /brain_transcript_tail is not a global \(it is a function\)/],
            ["an events-from-end marker that is a function", { extra: `(func (export "brain_events_from_end"))` }, /brain_events_from_end is not a global \(it is a function\)/],
            ["a configuration marker that is a function", { extra: `(func (export "brain_configuration_unread"))` }, /brain_configuration_unread is not a global \(it is a function\)/],
            ["a runtime marker that is a function", { extra: `(func (export "brain_runtime_unread"))` }, /brain_runtime_unread is not a global \(it is a function\)/],
            ["a model metadata marker that is a function", { extra: `(func (export "brain_model_metadata_unread"))` }, /brain_model_metadata_unread is not a global \(it is a function\)/],
            ["an Event kind marker that is a function", { extra: `(func (export "brain_events_kind_turn_failed"))` }, /brain_events_kind_turn_failed is not a global \(it is a function\)/],
            ["an Event kind marker that is a table", { extra: `(table (export "brain_events_kind_note") 1 1 funcref)` }, /brain_events_kind_note is not a global \(it is a table\)/],
            ["an Event kind marker naming no kind", { extra: `(global (export "brain_events_kind_") i32 (i32.const 1))` }, /brain_events_kind_ names no Event kind/]
          ] as const,
          ([name, options, reason]) =>
            Effect.map(
              Effect.promise(() => refused(guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0)) ${"extra" in options ? options.extra : ""}`, options as GuestOptions))),
              (bytes): [string, Uint8Array, RegExp] => [name, bytes, reason]
            )
        ))
      ]
      for (const [name, bytes, reason] of cases) {
        const r = yield* Effect.either(host.admit(bytes))
        expect(Either.isLeft(r) && r.left.reason, name).toMatch(reason)
      }
    }).pipe(Effect.scoped))

  it.effect("brain_transcript_tail_length is read from the module's global section, after globals of every plain type and initializer", () =>
    Effect.gen(function*() {
      const host = yield* WasmHostWorkers.make(OPTIONS)
      const before = `(global i64 (i64.const -9000000000)) (global f32 (f32.const 1.5)) (global f64 (f64.const 2.5)) (global (mut i32) (i32.const -70000))
        (global v128 (v128.const i32x4 1 2 3 4)) (global funcref (ref.null func)) (global i32 (global.get 0))`
      const text = guest(`${before} (func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`, { tail: true, tailLength: "i32 (i32.const 7)" })
      // The helper puts the ABI's globals first: move the others before them, so the length's index is past all of them.
      const reordered = text.replace(before, "").replace(`(global (export "brain_abi_v1")`, `${before.replace("(global.get 0)", "(i32.const 5)")} (global (export "brain_abi_v1")`)
      const module = yield* Effect.orDie(host.admit(yield* Effect.promise(() => wat(reordered, { reference_types: true }))))
      expect([module.tail, module.tailMessages]).toEqual([true, 7])
      const plain = yield* Effect.orDie(host.admit(yield* Effect.promise(() => wat(guest(`(func (export "brain_run") (param i32 i32) (result i64) (i64.const 0))`, { tail: true })))))
      expect([plain.tail, plain.tailMessages]).toEqual([true, TRANSCRIPT_TAIL])
    }).pipe(Effect.scoped))

  it.effect("brain_configuration_unread, a global a loop exports, is read at admission; a tool's global is not it", () =>
    Effect.gen(function*() {
      const host = yield* WasmHostWorkers.make(OPTIONS)
      const loop = (extra: string, entry = "brain_run") => guest(`${extra} (func (export "${entry}") (param i32 i32) (result i64) (i64.const 0))`)
      const mark = `(global (export "brain_configuration_unread") i32 (i32.const 1))`
      const read = (text: string) => Effect.map(Effect.flatMap(Effect.promise(() => wat(text)), (bytes) => Effect.orDie(host.admit(bytes))), (m) => m.configurationUnread)
      expect(yield* read(loop(mark))).toBe(true)
      expect(yield* read(loop(""))).toBe(false)
      expect(yield* read(loop(mark, "brain_tool"))).toBe(false)
    }).pipe(Effect.scoped))

  it.effect("brain_runtime_unread, a global a loop exports, is read at admission; a tool's global is not it, and a module without it is given the envelope", () =>
    Effect.gen(function*() {
      const host = yield* WasmHostWorkers.make(OPTIONS)
      const loop = (extra: string, entry = "brain_run") => guest(`${extra} (func (export "${entry}") (param i32 i32) (result i64) (i64.const 0))`)
      const mark = `(global (export "brain_runtime_unread") i32 (i32.const 1))`
      const read = (text: string) => Effect.map(Effect.flatMap(Effect.promise(() => wat(text)), (bytes) => Effect.orDie(host.admit(bytes))), (m) => m.runtimeUnread)
      expect(yield* read(loop(mark))).toBe(true)
      expect(yield* read(loop(""))).toBe(false)
      expect(yield* read(loop(mark, "brain_tool"))).toBe(false)
    }).pipe(Effect.scoped))

  it.effect("brain_model_metadata_unread, a global a loop exports, is read at admission; a tool's global is not it, and a module without it is given whole model answers", () =>
    Effect.gen(function*() {
      const host = yield* WasmHostWorkers.make(OPTIONS)
      const loop = (extra: string, entry = "brain_run") => guest(`${extra} (func (export "${entry}") (param i32 i32) (result i64) (i64.const 0))`)
      const mark = `(global (export "brain_model_metadata_unread") i32 (i32.const 1))`
      const read = (text: string) => Effect.map(Effect.flatMap(Effect.promise(() => wat(text)), (bytes) => Effect.orDie(host.admit(bytes))), (m) => m.modelMetadataUnread)
      expect(yield* read(loop(mark))).toBe(true)
      expect(yield* read(loop(""))).toBe(false)
      expect(yield* read(loop(mark, "brain_tool"))).toBe(false)
    }).pipe(Effect.scoped))

  it.effect("brain_events_kind_<kind> globals a loop exports are read at admission as the kinds its input Events are limited to; a tool's globals are not", () =>
    Effect.gen(function*() {
      const host = yield* WasmHostWorkers.make(OPTIONS)
      const loop = (extra: string, entry = "brain_run") => guest(`${extra} (func (export "${entry}") (param i32 i32) (result i64) (i64.const 0))`)
      const mark = (kind: string) => `(global (export "brain_events_kind_${kind}") i32 (i32.const 1))`
      const read = (text: string) => Effect.map(Effect.flatMap(Effect.promise(() => wat(text)), (bytes) => Effect.orDie(host.admit(bytes))), (m) => m.eventKinds)
      expect(yield* read(loop(mark("turn_failed")))).toEqual(new Set(["turn_failed"]))
      expect(yield* read(loop(`${mark("turn_failed")} ${mark("note")}`))).toEqual(new Set(["turn_failed", "note"]))
      expect(yield* read(loop(""))).toBeUndefined()
      expect(yield* read(loop(mark("turn_failed"), "brain_tool"))).toBeUndefined()
    }).pipe(Effect.scoped))

  it.scopedLive("every activation gets a fresh instance: a guest counting in a global sees 1 on every turn", () =>
    Effect.gen(function*() {
      const one = data(100, '{"ok":1}')
      const more = data(120, '{"ok":"again"}')
      const counter = guest(`${one.segment} ${more.segment}
        (global $count (mut i32) (i32.const 0))
        (func (export "brain_run") (param i32 i32) (result i64)
          (global.set $count (i32.add (global.get $count) (i32.const 1)))
          (if (result i64) (i32.eq (global.get $count) (i32.const 1))
            (then (call $out (i32.const ${one.ptr}) (i32.const ${one.len})))
            (else (call $out (i32.const ${more.ptr}) (i32.const ${more.len})))))`)
      // Its budget counts the wall time from the guest's start message to its output, the worker
      // instantiating it included: a budget no loaded machine reaches, as this guest never spins.
      const host = yield* WasmHostWorkers.make({ ...OPTIONS, workers: 1, computeMs: 30_000 })
      const module = yield* Effect.orDie(host.admit(yield* Effect.promise(() => wat(counter))))
      const loops = { counter: { activate: (input, h) => host.runLoop(module, input, h) } satisfies AgentloopShape }
      yield* Effect.gen(function*() {
        for (let i = 0; i < 5; i++) expect((yield* turn("counter")).turn.result).toBe(1)
      }).pipe(Effect.provide(runtimeLayer({ loops })))
    }))
})
