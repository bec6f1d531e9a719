/**
 * Agentloops: the built-in loops (`official`, and any an embedder or a test registers) and the
 * uploaded WebAssembly modules (docs/abi.md), named by the SHA-256 of their bytes.
 *
 * - Admission validates and compiles a module (WasmHost.admit: the ABI, its marker, its imports,
 *   its size) before it is stored; the store's total is bounded (`storeBytes`). Admitting the same
 *   bytes twice stores them once.
 * - A session may name an uploaded module only if it exports `brain_run`; `check` says so at
 *   create (a 400 then, never a 500 at the first turn), and `use` records the session's use of it
 *   before its creation is journaled. A module is removed only when no live session uses it.
 * - The store's check-then-act steps hold one lock, so that each is atomic against the others:
 *   an admission's bound check and write (concurrent uploads never pass `storeBytes`; identical
 *   ones all find one stored copy), a removal's check of the module's users and the removal, and a
 *   use's check that the module is stored and its marker. A removal and a create that names the
 *   module are therefore ordered: the removal first, and the create's `use` is refused (the create
 *   answers 400); the use first, and the removal sees it (409).
 * - Compiled modules are kept in memory, least recently used dropped past MODULE_CACHE_ENTRIES or
 *   past `cacheBytes` of module bytes (BRAIN_MODULE_CACHE_BYTES: V8 keeps a module's bytes beside
 *   its code), on admission as on a compile; the one just used is always kept, so a module larger
 *   than the bound is not compiled again on every use. One dropped is read and admitted again on
 *   its next use. A module's `loop` and `tool` flags are
 *   kept by id once known (at admission, or its first compile), so a list compiles none it knows.
 */
import { Effect, Either, Layer, Option } from "effect"
import { failure } from "../domain/Failure.js"
import { officialLoop } from "../loops/official.js"
import {
  AgentloopFailed,
  AgentloopInUse,
  AgentloopRejected,
  Agentloops,
  type AgentloopShape,
  type AgentloopsShape,
  AgentloopStoreFailed,
  type ModuleInfo
} from "../services/Agentloop.js"
import { Journal } from "../services/Journal.js"
import type { SessionId } from "../domain/Ids.js"
import { type AdmittedModule, WasmHost } from "../services/WasmHost.js"
import { memoryStore, type ModuleStoreShape, type StoreFailed } from "./agentloops/ModuleStore.js"

export const OFFICIAL = "official"

/** Modules. Compiled modules kept in memory before the least recently used is dropped. */
export const MODULE_CACHE_ENTRIES = 64

const MODULE_ID = /^[0-9a-f]{64}$/

export interface AgentloopsOptions {
  /** Built-in loops by name; `official` is the WebAssembly loop with `officialModule`, else the TypeScript one. */
  readonly loops?: Readonly<Record<string, AgentloopShape>>
  /**
   * The official loop's module (built from loops/official by `npm run build`): run in the
   * WebAssembly host. Without it (tests, embedders without a host) the TypeScript loop stands in.
   */
  readonly officialModule?: Uint8Array
  readonly store?: ModuleStoreShape
  /** Bytes: all stored modules together. */
  readonly storeBytes?: number
  /** Bytes: compiled modules kept in memory (BRAIN_MODULE_CACHE_BYTES); unbounded but by count without it. */
  readonly cacheBytes?: number
}

const infoOf = (m: AdmittedModule): ModuleInfo => ({ id: m.hash, bytes: m.bytes, loop: m.loop, tool: m.tool })

/** An admitted loop module as a loop: `activate`, with the input the module's exports ask for. */
const moduleLoop = (module: AdmittedModule, activate: AgentloopShape["activate"]): AgentloopShape => ({
  activate,
  eventsFromEnd: module.eventsFromEnd,
  input: { tailMessages: module.tail ? module.tailMessages : undefined, configurationRead: !module.configurationUnread },
  ...(module.eventKinds === undefined ? {} : { eventKinds: module.eventKinds })
})

export const make = (options: AgentloopsOptions = {}) =>
  Effect.gen(function*() {
    const wasm = yield* Effect.serviceOption(WasmHost)
    const journal = yield* Effect.serviceOption(Journal)
    const store = options.store ?? memoryStore()
    // Leftovers of an earlier process (an orphaned twin, a write a crash cut short) take only disk.
    yield* store.sweep.pipe(Effect.catchAll((e) => Effect.logWarning(`the module store's leftovers were not swept: ${e.reason}`)))
    let official: AgentloopShape = officialLoop
    if (options.officialModule) {
      if (Option.isNone(wasm)) return yield* Effect.dieMessage("the official WebAssembly loop needs a WebAssembly host")
      const host = wasm.value
      // Shipped, not uploaded: the upload limit (BRAIN_MAX_WASM_MODULE_BYTES) does not bound it. A
      // refusal stops startup with its reason, which names what to change: a deployment's
      // BRAIN_MAX_WASM_MEMORY_BYTES below the memory the loop asks for at start (or a broken build).
      const module = yield* host.admit(options.officialModule, { shipped: true }).pipe(
        Effect.mapError((e) => new AgentloopRejected({ reason: `the official loop cannot be admitted: ${e.reason}` }))
      )
      official = moduleLoop(module, (input, h) => host.runLoop(module, input, h))
    }
    const builtins = new Map<string, AgentloopShape>([[OFFICIAL, official], ...Object.entries(options.loops ?? {})])
    const compiled = new Map<string, AdmittedModule>()
    let compiledBytes = 0
    const uncache = (id: string) => {
      const m = compiled.get(id)
      if (m === undefined) return
      compiled.delete(id)
      compiledBytes -= m.bytes
    }
    /** What each known module exports, by id: what a list reports, without compiling. */
    const flags = new Map<string, { readonly loop: boolean; readonly tool: boolean }>()
    /** Removals so far: a compile that read a module before its removal does not cache it after. */
    let removals = 0
    const lock = yield* Effect.makeSemaphore(1)
    const exclusive = lock.withPermits(1)

    const rejected = (reason: string, extra: { missing?: boolean; full?: boolean; overloaded?: boolean } = {}) => new AgentloopRejected({ reason, ...extra })
    /** The store could not answer (a module that exists but cannot be read now is never "no such module"). */
    const storeFailed = (e: StoreFailed) => new AgentloopStoreFailed({ reason: e.reason, ...(e.exhausted === true ? { exhausted: true } : {}) })

    /** The compiled module of a stored id, if it is cached (and now the most recently used). */
    const cachedModule = (id: string): AdmittedModule | undefined => {
      const cached = compiled.get(id)
      if (cached) {
        compiled.delete(id)
        compiled.set(id, cached)
      }
      return cached
    }

    /** The compiled module of a stored id. */
    const load = (id: string): Effect.Effect<AdmittedModule, AgentloopRejected | AgentloopStoreFailed> => {
      const cached = cachedModule(id)
      return cached !== undefined ? Effect.succeed(cached) : compile(id)
    }

    /**
     * Caches a compiled module (the most recently used), dropping the least recently used past
     * MODULE_CACHE_ENTRIES or `cacheBytes`; the newest is kept whatever its size.
     */
    const cache = (admitted: AdmittedModule) => {
      uncache(admitted.hash)
      compiled.set(admitted.hash, admitted)
      compiledBytes += admitted.bytes
      flags.set(admitted.hash, { loop: admitted.loop, tool: admitted.tool })
      const maxBytes = options.cacheBytes ?? Number.POSITIVE_INFINITY
      for (const oldest of compiled.keys()) {
        if (compiled.size <= 1 || (compiled.size <= MODULE_CACHE_ENTRIES && compiledBytes <= maxBytes)) break
        uncache(oldest)
      }
    }

    /** Reads and admits a stored module that is not cached, and caches it (unless `keep` is false). */
    const compile = Effect.fnUntraced(function*(id: string, keep: boolean = true) {
      if (Option.isNone(wasm)) return yield* Effect.fail(rejected("this server runs no WebAssembly host"))
      const before = removals
      const bytes = yield* store.read(id).pipe(Effect.mapError(storeFailed))
      if (Option.isNone(bytes)) return yield* Effect.fail(rejected(`no uploaded module ${JSON.stringify(id)} (POST /v1/agentloops uploads one)`, { missing: true }))
      const admitted = yield* wasm.value.admit(bytes.value).pipe(
        Effect.mapError((e) =>
          e.overloaded === true
            ? rejected(`the stored module ${id} cannot be compiled now: ${e.reason}`, { overloaded: true })
            : rejected(`the stored module ${id} no longer passes admission: ${e.reason}`)
        )
      )
      // A removal meanwhile may have taken the module: what was read is not kept.
      if (removals === before) {
        if (keep) cache(admitted)
        else flags.set(id, { loop: admitted.loop, tool: admitted.tool })
      }
      return admitted
    })

    const loopModule = (id: string) =>
      Effect.filterOrFail(load(id), (m) => m.loop, () => rejected(`the module ${id} exports no brain_run: it is not an Agentloop`))

    const service: AgentloopsShape = {
      resolve: (id) =>
        Effect.suspend(() => {
          const builtin = builtins.get(id)
          if (builtin) return Effect.succeed(builtin)
          return loopModule(id).pipe(
            Effect.map((module) =>
              moduleLoop(module, (input, host) => Effect.flatMap(Effect.orDie(Effect.fromNullable(Option.getOrUndefined(wasm))), (w) => w.runLoop(module, input, host)))
            ),
            Effect.mapError((e) =>
              new AgentloopFailed({
                failure: e._tag === "AgentloopRejected"
                  ? e.overloaded === true
                    ? failure("overloaded", e.reason, { retryable: true })
                    : failure("agentloop_failed", e.reason)
                  // Stored, but not readable now: a retry can run it.
                  : e.exhausted === true
                  ? failure("overloaded", `the module ${id} cannot be read now: ${e.reason}`, { retryable: true })
                  : failure("agentloop_failed", `the module ${id} cannot be read now: ${e.reason}`, { retryable: true })
              })
            )
          )
        }),
      check: (id) =>
        builtins.has(id)
          ? Effect.void
          : MODULE_ID.test(id)
          ? Effect.asVoid(loopModule(id))
          : Effect.fail(rejected(`no agentloop ${JSON.stringify(id)}: name a built-in loop (${[...builtins.keys()].join(", ")}) or an uploaded module's id`, { missing: true })),
      use: (id, session) =>
        builtins.has(id) ? Effect.void : exclusive(Effect.gen(function*() {
          // Checked with the marker's write, under the lock: a removal is before both or after both.
          if (!(yield* store.has(id).pipe(Effect.mapError(storeFailed)))) {
            return yield* Effect.fail(rejected(`no uploaded module ${JSON.stringify(id)}: it was removed (POST /v1/agentloops uploads one)`, { missing: true }))
          }
          yield* store.use(id, session).pipe(Effect.mapError(storeFailed))
        })),
      unuse: (id, session) => (builtins.has(id) ? Effect.void : store.unuse(id, session)),
      admit: (bytes) =>
        Effect.gen(function*() {
          if (Option.isNone(wasm)) return yield* Effect.fail(rejected("this server runs no WebAssembly host"))
          const admitted = yield* wasm.value.admit(bytes, { upload: true }).pipe(
            Effect.mapError((e) => rejected(e.reason, e.overloaded === true ? { overloaded: true } : {}))
          )
          // The bound's check and the write under the lock: concurrent uploads are counted one after another.
          return yield* exclusive(Effect.gen(function*() {
            const stored = yield* store.list.pipe(Effect.mapError(storeFailed))
            if (!stored.some((m) => m.id === admitted.hash) && options.storeBytes !== undefined) {
              const total = stored.reduce((n, m) => n + m.bytes, 0)
              if (total + admitted.bytes > options.storeBytes) {
                return yield* Effect.fail(
                  rejected(`the module store holds ${total} bytes; this module would pass BRAIN_MAX_WASM_STORE_BYTES (${options.storeBytes}): remove unused modules first`, { full: true })
                )
              }
            }
            // Stored already (the same bytes uploaded before, or meanwhile): kept as it is.
            yield* store.write(admitted.hash, bytes).pipe(Effect.mapError(storeFailed))
            cache(admitted)
            return infoOf(admitted)
          }))
        }),
      list: Effect.gen(function*() {
        const stored = yield* store.list.pipe(Effect.mapError(storeFailed))
        const out: Array<ModuleInfo> = []
        for (const m of stored) {
          // Known flags are reported as they are; a module not yet known is compiled once, not cached.
          const known = flags.get(m.id) ?? Either.getOrUndefined(yield* Effect.either(compile(m.id, false)))
          out.push({ id: m.id, bytes: m.bytes, loop: known?.loop ?? false, tool: known?.tool ?? false })
        }
        return out
      }),
      remove: (id) =>
        Effect.gen(function*() {
          if (builtins.has(id)) return yield* Effect.fail(rejected(`${JSON.stringify(id)} is built in and cannot be removed`))
          // The users' check and the removal under the lock: a use is recorded before both or after both.
          return yield* exclusive(Effect.gen(function*() {
            if (!(yield* store.has(id).pipe(Effect.mapError(storeFailed)))) return yield* Effect.fail(rejected(`no uploaded module ${JSON.stringify(id)}`, { missing: true }))
            // A use whose session no longer exists (deleted, or a create that never finished) is swept.
            const live: Array<string> = []
            const users = yield* store.users(id).pipe(Effect.mapError(storeFailed))
            for (const session of users) {
              const exists = Option.isSome(journal) ? yield* journal.value.exists(session as SessionId) : true
              if (exists) live.push(session)
              else yield* store.unuse(id, session)
            }
            if (live.length > 0) {
              return yield* Effect.fail(new AgentloopInUse({ reason: `${live.length} session(s) use this module (${live.slice(0, 3).join(", ")}${live.length > 3 ? ", …" : ""}); delete them first` }))
            }
            removals++
            uncache(id)
            flags.delete(id)
            yield* store.remove(id).pipe(Effect.mapError(storeFailed))
          }))
        }),
      tool: (id) => {
        if (!MODULE_ID.test(id)) return Effect.fail(rejected(`no module ${JSON.stringify(id)}`, { missing: true }))
        const notTool = () => rejected(`the module ${id} exports no brain_tool: it is not a tool`)
        // A tool call's usual case, with no effect of its own: the module compiled and cached.
        const cached = cachedModule(id)
        if (cached !== undefined) return cached.tool ? Effect.succeed(cached) : Effect.fail(notTool())
        return Effect.filterOrFail(compile(id), (m) => m.tool, notTool)
      }
    }
    return service
  })

export const layer = (options: AgentloopsOptions = {}) => Layer.effect(Agentloops, make(options))
