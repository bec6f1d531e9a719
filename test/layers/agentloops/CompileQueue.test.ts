/**
 * The bound on uploads waiting for the compiling thread (BRAIN_WASM_COMPILE_QUEUE; Compiler.ts
 * `CompileQueue`): past it an upload is refused `overloaded` (503 with Retry-After) before anything
 * is compiled or stored, and a stored module compiled again for a session is never refused by it.
 */
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, Layer } from "effect"
import { fileStore } from "../../../src/layers/agentloops/ModuleStore.js"
import { compileOffThread } from "../../../src/layers/wasm/Compiler.js"
import type { Answer } from "../../../src/layers/wasm/OneThread.js"
import { admitRefused } from "../../../src/http/Handlers.js"
import { toResponse } from "../../../src/http/Errors.js"
import { Agentloops, AgentloopRejected } from "../../../src/services/Agentloop.js"
import { tempDir } from "../../support/journals.js"
import { runtimeLayer } from "../../support/runtime.js"
import { helloLoop, padded } from "../../support/wat.js"

const WASM = { workers: 2, memoryBytes: 4 * 1024 * 1024, computeMs: 5_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }

describe("the compile queue's bound", () => {
  it.scopedLive("with BRAIN_WASM_COMPILE_QUEUE at 1 and a compile held, a second concurrent upload is refused overloaded and stores nothing, the same bytes again wait for that compile; once it is done, uploads pass again", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-compile-queue-")
      const store = fileStore(path.join(dataDir, "agentloops"))
      const held = yield* Deferred.make<void>()
      const compiling = yield* Deferred.make<void>()
      let compiles = 0
      const compile = (bytes: Uint8Array): Promise<Answer<WebAssembly.Module>> => {
        compiles++
        if (compiles > 1) return compileOffThread(bytes)
        return Effect.runPromise(Effect.zipRight(Deferred.succeed(compiling, undefined), Deferred.await(held))).then(() => compileOffThread(bytes))
      }
      const layer = runtimeLayer({ journal: { dataDir }, wasm: { ...WASM, compileQueue: 1, compile }, modules: { store } })
      yield* Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const first = yield* Effect.promise(() => helloLoop())
        const second = padded(first, first.length + 64) // another module: not answered from the first one's verdict
        const upload = yield* Effect.fork(agentloops.admit(first))
        yield* Deferred.await(compiling)
        const refused = yield* Effect.either(agentloops.admit(second))
        expect(Either.isLeft(refused) && refused.left._tag === "AgentloopRejected" && refused.left.overloaded).toBe(true)
        expect(compiles).toBe(1) // the refused upload was not compiled
        expect(yield* store.list).toEqual([]) // nor stored
        // The same bytes as the one compiling are not another compile: they wait for its answer.
        const same = yield* Effect.fork(agentloops.admit(first))
        yield* Effect.sleep("20 millis")
        expect(compiles).toBe(1)
        yield* Deferred.succeed(held, undefined)
        const admitted = yield* Fiber.join(upload)
        expect((yield* Fiber.join(same)).id).toBe(admitted.id)
        // The bound counts what is compiling now: the next upload passes.
        const again = yield* agentloops.admit(second)
        expect((yield* store.list).map((m) => m.id).sort()).toEqual([admitted.id, again.id].sort())
      }).pipe(Effect.provide(layer as Layer.Layer<Agentloops>))
    }))

  it.scopedLive("with BRAIN_WASM_COMPILE_QUEUE full (at 1, a compile held), a body that is not a module is still refused 400 invalid_request at once, as a module that fails to compile is: it takes no place, is not compiled and stores nothing", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-compile-junk-")
      const store = fileStore(path.join(dataDir, "agentloops"))
      const held = yield* Deferred.make<void>()
      const compiling = yield* Deferred.make<void>()
      let compiles = 0
      const compile = (bytes: Uint8Array): Promise<Answer<WebAssembly.Module>> => {
        compiles++
        if (compiles > 1) return compileOffThread(bytes)
        return Effect.runPromise(Effect.zipRight(Deferred.succeed(compiling, undefined), Deferred.await(held))).then(() => compileOffThread(bytes))
      }
      const layer = runtimeLayer({ journal: { dataDir }, wasm: { ...WASM, compileQueue: 1, compile }, modules: { store } })
      yield* Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const first = yield* Effect.promise(() => helloLoop())
        const upload = yield* Effect.fork(agentloops.admit(first))
        yield* Deferred.await(compiling)
        // The queue is full: a real module is refused overloaded.
        const busy = yield* Effect.either(agentloops.admit(padded(first, first.length + 64)))
        expect(Either.isLeft(busy) && busy.left._tag === "AgentloopRejected" && busy.left.overloaded).toBe(true)
        const header = [0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]
        const junk = [
          new Uint8Array(),
          new TextEncoder().encode('{"module": "not one"}'),
          new Uint8Array(4096).fill(0x41),
          new Uint8Array([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0, ...new Array<number>(4096).fill(0)]),
          new Uint8Array([...header, 1, 2, 3])
        ]
        for (const bytes of junk) {
          const refused = yield* Effect.either(agentloops.admit(bytes))
          expect(Either.isLeft(refused) && refused.left._tag === "AgentloopRejected").toBe(true)
          if (Either.isLeft(refused) && refused.left._tag === "AgentloopRejected") {
            expect(refused.left.overloaded).not.toBe(true)
            const response = toResponse(admitRefused(refused.left))
            expect(response.status).toBe(400)
            expect(admitRefused(refused.left).code).toBe("invalid_request")
            expect(refused.left.reason).toMatch(/not a valid WebAssembly module|fewer than the \d+ any module the ABI admits/)
          }
        }
        expect(compiles).toBe(1) // none of them was compiled
        expect(yield* store.list).toEqual([]) // nor stored
        yield* Deferred.succeed(held, undefined)
        const admitted = yield* Fiber.join(upload)
        expect((yield* store.list).map((m) => m.id)).toEqual([admitted.id])
      }).pipe(Effect.provide(layer as Layer.Layer<Agentloops>))
    }))

  it("an upload refused for the compile queue answers 503 overloaded, retryable, with Retry-After", () => {
    const response = toResponse(admitRefused(new AgentloopRejected({ reason: "busy", overloaded: true })))
    expect(response.status).toBe(503)
    expect(response.headers["retry-after"]).toBe("1")
  })

  it.scopedLive("an upload whose compile thread failed is refused overloaded (the server's fault, retryable), stores nothing and keeps no verdict: the same bytes compile again and are admitted", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-compile-transient-")
      const store = fileStore(path.join(dataDir, "agentloops"))
      let compiles = 0
      const compile = (bytes: Uint8Array): Promise<Answer<WebAssembly.Module>> => {
        compiles++
        return compiles === 1 ? Promise.resolve({ error: "the compile thread exited", transient: true }) : compileOffThread(bytes)
      }
      const layer = runtimeLayer({ journal: { dataDir }, wasm: { ...WASM, compile }, modules: { store } })
      yield* Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const bytes = yield* Effect.promise(() => helloLoop())
        const refused = yield* Effect.either(agentloops.admit(bytes))
        expect(Either.isLeft(refused) && refused.left._tag === "AgentloopRejected" && refused.left.overloaded).toBe(true)
        if (Either.isLeft(refused) && refused.left._tag === "AgentloopRejected") {
          expect(refused.left.reason).toContain("the compile thread failed")
          expect(toResponse(admitRefused(refused.left)).status).toBe(503)
        }
        expect(yield* store.list).toEqual([])
        const admitted = yield* agentloops.admit(bytes)
        expect(compiles).toBe(2)
        expect((yield* store.list).map((m) => m.id)).toEqual([admitted.id])
      }).pipe(Effect.provide(layer as Layer.Layer<Agentloops>))
    }))
})
