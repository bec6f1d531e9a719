/**
 * The module store's check-then-act steps under concurrency (src/layers/AgentloopsModules.ts),
 * over the real file store and a file journal: a removal and a create that names the module are
 * ordered (the create is refused 400, or the removal 409; never both taken), identical uploads
 * all answer the module, and concurrent uploads never pass BRAIN_MAX_WASM_STORE_BYTES.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Layer, Option } from "effect"
import { MODULE_CACHE_ENTRIES } from "../../../src/layers/AgentloopsModules.js"
import { fileStore, type ModuleStoreShape } from "../../../src/layers/agentloops/ModuleStore.js"
import { Agentloops, type AgentloopsShape } from "../../../src/services/Agentloop.js"
import type { WasmHostShape } from "../../../src/services/WasmHost.js"
import { Journal } from "../../../src/services/Journal.js"
import { Sessions } from "../../../src/services/Sessions.js"
import type { SessionId } from "../../../src/domain/Ids.js"
import { tempDir } from "../../support/journals.js"
import { runtimeLayer } from "../../support/runtime.js"
import { helloLoop, padded } from "../../support/wat.js"

const WASM = { workers: 2, memoryBytes: 4 * 1024 * 1024, computeMs: 5_000, ioBytes: 64 * 1024, moduleBytes: 1024 * 1024 }

/** A runtime over a file journal and a file module store, both in a fresh directory; the store given to the test. */
const withFileStore = <A, E>(
  storeBytes: number | undefined,
  test: (store: ModuleStoreShape, dir: string) => Effect.Effect<A, E, Agentloops | Sessions | Journal>,
  agentloops?: (loops: AgentloopsShape) => AgentloopsShape
) =>
  Effect.gen(function*() {
    const dataDir = yield* tempDir("brain-store-races-")
    const dir = path.join(dataDir, "agentloops")
    const store = fileStore(dir)
    const layer = runtimeLayer({
      journal: { dataDir },
      wasm: WASM,
      modules: { store, ...(storeBytes === undefined ? {} : { storeBytes }) },
      ...(agentloops ? { agentloops } : {})
    })
    return yield* test(store, dir).pipe(Effect.provide(layer as Layer.Layer<Agentloops | Sessions | Journal>))
  })

/** What runs just before and just after a create's `use` of a module (set per trial). */
const useHooks = { before: Effect.void as Effect.Effect<void>, after: Effect.void as Effect.Effect<void> }
const hooked = (loops: AgentloopsShape): AgentloopsShape => ({
  ...loops,
  use: (id, session) => Effect.suspend(() => Effect.zipRight(useHooks.before, Effect.tap(loops.use(id, session), () => useHooks.after)))
})

describe("the module store under concurrency", () => {
  it.scoped("a module's removal racing a create that names it never leaves a session naming a missing module: the create is refused 400, or the removal 409 (many trials, both orders)", () =>
    withFileStore(undefined, (store) =>
      Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const sessions = yield* Sessions
        const bytes = yield* Effect.promise(() => helloLoop())
        const outcomes = new Map<string, number>()
        for (let trial = 0; trial < 60; trial++) {
          const { id } = yield* agentloops.admit(bytes)
          let remove = Effect.either(agentloops.remove(id))
          const create = Effect.either(sessions.create({ agentloop: id, model: { provider: "scripted" } }))
          useHooks.before = Effect.void
          useHooks.after = Effect.void
          const mode = trial % 3
          if (mode === 1) {
            // The removal runs while the create is between its check and its use: the removal first.
            const atUse = yield* Deferred.make<void>()
            const removedFirst = yield* Deferred.make<void>()
            useHooks.before = Effect.zipRight(Deferred.succeed(atUse, undefined), Deferred.await(removedFirst))
            remove = Effect.zipRight(Deferred.await(atUse), Effect.ensuring(remove, Deferred.succeed(removedFirst, undefined)))
          } else if (mode === 2) {
            // The removal runs as soon as the create's use is recorded: the use first.
            const used = yield* Deferred.make<void>()
            useHooks.after = Deferred.succeed(used, undefined).pipe(Effect.asVoid)
            remove = Effect.zipRight(Deferred.await(used), remove)
          }
          // Raced freely (mode 0), each with a few yields before it: the steps interleave differently.
          const delay = (n: number) => Effect.forEach(Array.from({ length: n }), () => Effect.yieldNow(), { discard: true })
          const [removed, created] = trial % 2 === 0
            ? yield* Effect.all([Effect.zipRight(delay(trial % 5), remove), create], { concurrency: 2 })
            : yield* Effect.map(Effect.all([Effect.zipRight(delay(trial % 7), create), remove], { concurrency: 2 }), ([c, r]) => [r, c] as const)
          const stored = Option.isSome(yield* store.read(id))
          outcomes.set(`${removed._tag}/${created._tag}`, (outcomes.get(`${removed._tag}/${created._tag}`) ?? 0) + 1)
          if (Either.isRight(created)) {
            // The create won: the module is still there, the removal was refused 409, and the session runs.
            expect(removed, `trial ${trial}`).toMatchObject({ _tag: "Left", left: { _tag: "AgentloopInUse" } })
            expect(stored, `trial ${trial}: the module a session names is stored`).toBe(true)
            const session = created.right.session_id as SessionId
            const outcome = yield* sessions.send(session, { message: "hi" })
            expect(outcome.turn.status, `trial ${trial}`).toBe("ended")
            yield* sessions.end(session)
            yield* sessions.delete(session)
          } else {
            // The removal won: the create is refused with its clear 400 at the field, and wrote nothing.
            expect(removed, `trial ${trial}`).toMatchObject({ _tag: "Right" })
            expect(stored, `trial ${trial}`).toBe(false)
            expect(created.left).toMatchObject({ code: "invalid_request", details: [{ path: ["agentloop"] }] })
          }
          expect((yield* sessions.list({ limit: 10 })).sessions, `trial ${trial}`).toHaveLength(0)
          if (stored) yield* agentloops.remove(id)
          expect(yield* store.users(id), `trial ${trial}: no use marker is left`).toEqual([])
        }
        // Both orders happened.
        expect([...outcomes.keys()].sort(), JSON.stringify([...outcomes])).toEqual(["Left/Right", "Right/Left"])
      }), hooked))

  it.scoped("N identical concurrent uploads all answer the module, and one copy is stored", () =>
    withFileStore(undefined, (store, dir) =>
      Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const bytes = padded(yield* Effect.promise(() => helloLoop()), 200_000)
        for (let round = 0; round < 5; round++) {
          const answers = yield* Effect.all(Array.from({ length: 20 }, () => Effect.either(agentloops.admit(bytes))), { concurrency: "unbounded" })
          const ids = new Set(answers.map((a) => (Either.isRight(a) ? a.right.id : `refused: ${JSON.stringify(a.left)}`)))
          expect([...ids], `round ${round}`).toHaveLength(1)
          const [id] = ids
          expect(id).toMatch(/^[0-9a-f]{64}$/)
          expect(fs.readdirSync(dir).filter((n) => n.endsWith(".wasm") || n.endsWith(".tmp")), `round ${round}`).toEqual([`${id}.wasm`])
          expect(yield* store.list).toEqual([{ id, bytes: bytes.length }])
          expect(Buffer.from(Option.getOrThrow(yield* store.read(id!))).equals(Buffer.from(bytes))).toBe(true)
          yield* agentloops.remove(id!)
        }
      })))

  it.scoped("concurrent distinct uploads never pass the store's bound: those past it are refused full, the rest are stored", () =>
    withFileStore(350_000, (store) =>
      Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const loop = yield* Effect.promise(() => helloLoop())
        // Ten distinct modules of about 100 kB: three fit.
        const modules = Array.from({ length: 10 }, (_, i) => padded(loop, 100_000 + i))
        const answers = yield* Effect.all(modules.map((m) => Effect.either(agentloops.admit(m))), { concurrency: "unbounded" })
        const admitted = answers.filter(Either.isRight)
        for (const a of answers) if (Either.isLeft(a)) expect(a.left).toMatchObject({ _tag: "AgentloopRejected", full: true })
        expect(admitted).toHaveLength(3)
        const stored = yield* store.list
        expect(stored.map((m) => m.id).sort()).toEqual(admitted.map((a) => a.right.id).sort())
        expect(stored.reduce((n, m) => n + m.bytes, 0)).toBeLessThanOrEqual(350_000)
      })))
})

describe("listing uploaded modules", () => {
  const N = MODULE_CACHE_ENTRIES + 2
  it.scoped(`a list compiles no module whose flags are known: none after their admission, and each once after a restart, also past MODULE_CACHE_ENTRIES (${MODULE_CACHE_ENTRIES}) modules`, () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-store-list-")
      const store = fileStore(path.join(dataDir, "agentloops"))
      let admissions = 0
      const counting = (host: WasmHostShape): WasmHostShape => ({ ...host, admit: (bytes, options) => Effect.suspend(() => (admissions++, host.admit(bytes, options))) })
      const runtime = () => runtimeLayer({ journal: { dataDir }, wasm: WASM, wasmHost: counting, modules: { store } }) as Layer.Layer<Agentloops>
      const loop = yield* Effect.promise(() => helloLoop())
      const expected = yield* Effect.gen(function*() {
        const agentloops = yield* Agentloops
        for (let i = 0; i < N; i++) yield* agentloops.admit(padded(loop, 1_000 + i))
        const before = admissions
        const listed = yield* agentloops.list
        yield* agentloops.list
        expect(admissions - before, "admitted modules are listed without compiling").toBe(0)
        expect(listed.map((m) => [m.loop, m.tool])).toEqual(Array.from({ length: N }, () => [true, false]))
        return listed
      }).pipe(Effect.provide(runtime()), Effect.scoped)
      yield* Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const before = admissions
        expect(yield* agentloops.list).toEqual(expected)
        expect(admissions - before, "each compiled once after a restart").toBe(N)
        expect(yield* agentloops.list).toEqual(expected)
        expect(admissions - before, "and not again").toBe(N)
      }).pipe(Effect.provide(runtime()), Effect.scoped)
    }))
})

describe("the compiled-module cache", () => {
  it.scoped("holds at most BRAIN_MODULE_CACHE_BYTES of modules: past it the least recently used is dropped, on admission as on a compile, and compiled again on its next use; the newest is kept even when larger than the bound", () =>
    Effect.gen(function*() {
      let admissions = 0
      const counting = (host: WasmHostShape): WasmHostShape => ({ ...host, admit: (bytes, options) => Effect.suspend(() => (admissions++, host.admit(bytes, options))) })
      const loop = yield* Effect.promise(() => helloLoop())
      const SIZE = 20_000
      yield* Effect.gen(function*() {
        const agentloops = yield* Agentloops
        const ids: Array<string> = []
        for (let i = 0; i < 3; i++) ids.push((yield* agentloops.admit(padded(loop, SIZE + i))).id)
        // Two fit in the bound: the first admitted was dropped when the third came.
        let before = admissions
        yield* agentloops.resolve(ids[2]!)
        yield* agentloops.resolve(ids[1]!)
        expect(admissions - before, "the two most recent are kept").toBe(0)
        yield* agentloops.resolve(ids[0]!)
        expect(admissions - before, "the oldest was dropped on admission").toBe(1)
        // Its compile dropped the least recently used in turn (ids[2]).
        before = admissions
        yield* agentloops.resolve(ids[1]!)
        expect(admissions - before).toBe(0)
        yield* agentloops.resolve(ids[2]!)
        expect(admissions - before).toBe(1)
        // One larger than the whole bound is kept alone, not compiled on every use.
        const big = (yield* agentloops.admit(padded(loop, 3 * SIZE))).id
        before = admissions
        yield* agentloops.resolve(big)
        yield* agentloops.resolve(big)
        expect(admissions - before).toBe(0)
        yield* agentloops.resolve(ids[2]!)
        expect(admissions - before).toBe(1)
      }).pipe(
        Effect.provide(runtimeLayer({ wasm: WASM, wasmHost: counting, modules: { cacheBytes: Math.floor(2.5 * SIZE) } }) as Layer.Layer<Agentloops>)
      )
    }))
})
