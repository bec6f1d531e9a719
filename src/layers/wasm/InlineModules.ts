/**
 * The instrumented twin (Instrument.ts) of each admitted module, by content hash: made once per
 * process on a worker thread, started when the module is admitted. Until it is ready — or if
 * Binaryen cannot instrument the module, or it would cost Binaryen too much (TwinCost.ts), or the
 * thread took past TWIN_DEADLINE_MS on it (then terminated and replaced, the module remembered:
 * `overdue`, and a mark beside the kept twins) — the module's activations run on the worker pool
 * blocking their threads in host calls; once it is, the pool runs the twin too, pinned (Pinned.ts).
 *
 * The shipped modules (the official loop, the examples) have their twins made by the build
 * (`dist/loops/twins/`, named by the module's SHA-256 and TWIN_FORMAT): those are read and compiled,
 * not made again, so a server that starts — after a crash too — runs the official loop on the main
 * thread from its first turn instead of on the pool for the seconds Binaryen takes. Uploaded
 * modules' twins are kept the same way in a cache directory (the data directory's
 * `agentloops/twins/`) once made. Both are files of one form (TwinExports.ts, `twinFile`): one that
 * does not match its digest is ignored and the twin made again.
 *
 * A session whose activation of a module was moved off the main thread (Inline.ts) runs its next
 * activations of that module on the pool before the main thread tries them again: 2 after its
 * first move, doubling with each move in a row up to MOVED_COOLDOWN, back to none once one of its
 * activations of the module completes on the main thread. A guest that always computes that much
 * for the session (its long transcript, its heavy loop) would otherwise spend the main thread's
 * allowance on every turn and then run again anyway; one that moved once (a busy machine) is soon
 * back. The rule is the session's, not the module's: the official loop is one module shared by
 * every session, and one session's heavy turns must not send the others' to the pool, where a loop
 * needs a compute slot and each host call crosses a thread (docs/operations.md, "Concurrent turns
 * and the Wasm thread limit"). Sessions cooling down are kept in a map bounded by MOVED_SESSIONS (the
 * session that moved last is kept longest), each with at most MOVED_MODULES_PER_SESSION modules;
 * one forgotten is tried on the main thread again, which
 * costs at most one more allowance and move. A session none of whose activations moved has no
 * entry: the lookup on each activation finds none, allocating nothing. A Wasm tool's call is first tried on the main thread to its end (`tryable`; Inline.ts,
 * `tryInline`); a try that gives up at a host call is paid for twice, so after one the module's
 * next calls are not tried, as many in a row as a move's cooldown, back to every call once a try
 * goes to its end.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import { DIST_ROOT } from "../../DistRoot.js"
import type { InstrumentRequest } from "./InstrumentWorker.js"
import { type Answer, oneThread } from "./OneThread.js"
import { TWIN_DEADLINE_MS } from "../../domain/Limits.js"
import { overdueMarkerName, prebuiltTwinName, twinFile, twinInFile } from "./TwinExports.js"

/** Activations of a module a session runs on the pool, at most, after one of them was moved. */
export const MOVED_COOLDOWN = 64

/**
 * Sessions whose moves are remembered (each with one small entry per module it moved in): past it
 * the one whose last move is oldest is forgotten. Far above the sessions that move at once on a
 * busy server; about a hundred bytes each.
 */
export const MOVED_SESSIONS = 4096

/** Modules whose cooldown one session keeps (its loop and its Wasm tools): past it its oldest is forgotten. */
export const MOVED_MODULES_PER_SESSION = 16

/** A session's cooldown for one module after its activations moved (see the module's comment). */
interface Cooling {
  /** Activations still to run on the pool. */
  cooldown: number
  /** Moves in a row, without an activation completed on the main thread between. */
  moves: number
}

/**
 * Bytes of the largest module given a twin: Binaryen's memory grows with the module (its IR is
 * several times the binary), and the instrumenting thread shares the process's memory. Larger
 * modules run on the worker pool.
 */
export const MAX_TWIN_MODULE_BYTES = 4 << 20

/** Twins kept in the process (the oldest is dropped past this; it is made again when admitted again). */
const KEPT = 256

/** The instrumenting thread's module (compiled; under the tests too). */
export const WORKER_URL = new URL("layers/wasm/InstrumentWorker.js", DIST_ROOT)

/** Where the build puts the shipped modules' twins. */
export const PREBUILT_TWINS = new URL("loops/twins/", DIST_ROOT)

/** Modules handed to the instrumenting thread in this process (prebuilt twins are not). */
export const instrumenterStats = { requests: 0 }

/** A twin, or why there is none. */
export type Twin = { readonly module: WebAssembly.Module } | { readonly failure: string }

/**
 * The instrumenting thread's deadline for one module (TWIN_DEADLINE_MS; read as each module
 * becomes the thread's, so a test can shorten it).
 */
export const instrumentingDeadline = { ms: TWIN_DEADLINE_MS }

/**
 * The one instrumenting thread of the process (OneThread.ts): a module still unanswered at the
 * deadline has its thread terminated and replaced, the modules behind it handed to the new one.
 */
const instrumenting = oneThread<InstrumentRequest, Uint8Array>(WORKER_URL, { deadlineMs: () => instrumentingDeadline.ms })

/** Binaryen's answer for `bytes`; `transient` when the thread failed, not the module; `overdue` past the deadline. */
const instrumenter = (bytes: Uint8Array): Promise<Answer<Uint8Array>> => {
  instrumenterStats.requests++
  // A copy of its own (OneThread keeps it to hand to a new thread, should the deadline replace one):
  // the caller's bytes are not held.
  return instrumenting({ bytes: new Uint8Array(bytes) })
}

const twins = new Map<string, Promise<Twin>>()

/**
 * Modules whose twin took the instrumenting thread past its deadline in this process (besides the
 * mark kept with the twins, when there is a cache directory): never handed to it again. At most
 * OVERDUE_KEPT (the oldest forgotten; one forgotten costs one more deadline).
 */
const overdue = new Set<string>()
const OVERDUE_KEPT = 4096

const overdueFailure = (hash: string): Twin => ({
  failure: `making its twin took the instrumenting thread past its deadline (TWIN_DEADLINE_MS, ${instrumentingDeadline.ms} ms) in this process or an earlier one: it runs on worker threads (module ${hash.slice(0, 12)}…)`
})

/**
 * `hash`'s twin, made from `bytes` the first time it is asked for in this process: the build's,
 * else the one kept in `cacheDir`, else made by the instrumenting thread (and then kept there).
 */
export const twinOf = (hash: string, bytes: Uint8Array, cacheDir?: string): Promise<Twin> => {
  const known = twins.get(hash)
  if (known !== undefined) return known
  if (bytes.length > MAX_TWIN_MODULE_BYTES) return Promise.resolve({ failure: `it is above ${MAX_TWIN_MODULE_BYTES} bytes: it runs on worker threads` })
  const made = cachedTwin(fileURLToPath(PREBUILT_TWINS), hash)
    .then((ahead) => ahead ?? (cacheDir !== undefined ? cachedTwin(cacheDir, hash) : undefined))
    .then((found) =>
      found !== undefined
        ? found
        : overdue.has(hash)
        ? overdueFailure(hash)
        : markedOverdue(cacheDir, hash).then((marked) => marked ? overdueFailure(hash) : instrumenter(bytes).then((answer): Promise<Twin> | Twin => {
          if (!("error" in answer)) {
            const twin = compiled(answer.ok)
            // Kept only once it compiles; a failure to keep it costs only its making again.
            if (cacheDir !== undefined) void twin.then((t) => ("module" in t ? keepTwin(cacheDir, hash, answer.ok) : undefined))
            return twin
          }
          if (answer.overdue === true) {
            remember(hash)
            if (cacheDir !== undefined) void markOverdue(cacheDir, hash)
            return overdueFailure(hash)
          }
          // A thread that failed says nothing about the module: the next admission tries again.
          if (answer.transient === true && twins.get(hash) === made) twins.delete(hash)
          return { failure: `Binaryen could not instrument it: ${answer.error}` }
        }))
    )
  twins.set(hash, made)
  if (twins.size > KEPT) twins.delete(twins.keys().next().value!)
  return made
}

const remember = (hash: string) => {
  overdue.add(hash)
  if (overdue.size > OVERDUE_KEPT) overdue.delete(overdue.values().next().value!)
}

/** Whether `dir` holds the mark of `hash`'s twin past its deadline (remembered in the process once read). */
const markedOverdue = (dir: string | undefined, hash: string): Promise<boolean> =>
  dir === undefined ? Promise.resolve(false) : fs.promises.access(path.join(dir, overdueMarkerName(hash))).then(
    () => {
      remember(hash)
      return true
    },
    () => false
  )

/** Marks in `dir` that `hash`'s twin took past its deadline (an empty file; best effort: one not written costs a later process one more deadline). */
export const markOverdue = (dir: string, hash: string): Promise<void> =>
  fs.promises.mkdir(dir, { recursive: true })
    .then(() => fs.promises.writeFile(path.join(dir, overdueMarkerName(hash)), ""))
    .catch(() => undefined)

/**
 * `hash`'s twin kept in `dir` (twinFile), compiled; undefined when there is none, or its file does
 * not match its digest or does not compile: then it is made again. The name carries the module's
 * hash and TWIN_FORMAT, so a twin is only ever used for the very module, and the instrumentation,
 * it was made from.
 */
export const cachedTwin = (dir: string, hash: string): Promise<Twin | undefined> =>
  fs.promises.readFile(path.join(dir, prebuiltTwinName(hash))).then(
    (file) => {
      const twin = twinInFile(file)
      return twin === undefined ? undefined : compiled(twin).then((t) => ("module" in t ? t : undefined))
    },
    () => undefined
  )

/** Keeps `twin` as `hash`'s in `dir` (a temporary file renamed over: a reader sees a whole file or none). Best effort. */
export const keepTwin = (dir: string, hash: string, twin: Uint8Array): Promise<void> => {
  const file = path.join(dir, prebuiltTwinName(hash))
  const tmp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`
  return fs.promises.mkdir(dir, { recursive: true })
    .then(() => fs.promises.writeFile(tmp, twinFile(twin)))
    .then(() => fs.promises.rename(tmp, file))
    .catch(() => fs.promises.rm(tmp, { force: true }).catch(() => undefined))
}

const compiled = (bytes: Uint8Array): Promise<Twin> =>
  WebAssembly.compile(bytes).then(
    (module) => ({ module }),
    (err: Error) => ({ failure: `its instrumented twin does not compile: ${err.message}` })
  )

/**
 * One WasmHost's view: the twins ready for its modules, each session's cooldown in a module after
 * its moves, and each module's tries that gave up.
 */
export class InlineModules {
  private readonly ready = new Map<string, { readonly module: WebAssembly.Module; untried: number; giveUps: number }>()
  /** By session, then by module hash: only sessions that moved, at most MOVED_SESSIONS (the oldest move first). */
  private readonly cooling = new Map<string, Map<string, Cooling>>()

  /** `cacheDir`: where twins made here are kept for later processes (none: made again in each). */
  constructor(private readonly cacheDir?: string) {}

  /** Makes (or finds) `hash`'s twin; completes when it is settled, the module runnable here if it was made. */
  prepare(hash: string, bytes: Uint8Array): Effect.Effect<void> {
    return Effect.promise(() => twinOf(hash, bytes, this.cacheDir)).pipe(
      Effect.map((twin) => {
        if ("module" in twin && !this.ready.has(hash)) {
          this.ready.set(hash, { module: twin.module, untried: 0, giveUps: 0 })
          if (this.ready.size > KEPT) this.ready.delete(this.ready.keys().next().value!)
        }
      })
    )
  }

  /** `hash`'s twin when it is ready, wherever it is to run (a worker's pinned activations too, Pinned.ts). */
  twin(hash: string): WebAssembly.Module | undefined {
    return this.ready.get(hash)?.module
  }

  /** `session`'s cooldown in `hash`, when it has one (a map lookup; nothing allocated). */
  private coolingOf(hash: string, session: string): Cooling | undefined {
    const modules = this.cooling.get(session)
    return modules === undefined ? undefined : modules.get(hash)
  }

  /** The twin to run `session`'s next activation of `hash` on the main thread, or none (the pool runs it). */
  take(hash: string, session: string): WebAssembly.Module | undefined {
    const twin = this.ready.get(hash)
    if (twin === undefined) return undefined
    const cooling = this.coolingOf(hash, session)
    if (cooling !== undefined && cooling.cooldown > 0) {
      cooling.cooldown--
      return undefined
    }
    return twin.module
  }

  /**
   * The twin to try `session`'s next call of `hash` on (Inline.ts, `tryInline`), without counting
   * a take: none while the session cools down in it after a move, or after tries of it gave up (it
   * made a host call, and computed twice what it computed before it), as many tries in a row as
   * after as many moves.
   */
  tryable(hash: string, session: string): WebAssembly.Module | undefined {
    const twin = this.ready.get(hash)
    if (twin === undefined) return undefined
    const cooling = this.coolingOf(hash, session)
    if (cooling !== undefined && cooling.cooldown > 0) return undefined
    if (twin.untried > 0) {
      twin.untried--
      return undefined
    }
    return twin.module
  }

  /** A try of one of `hash`'s calls gave up at a host call. */
  gaveUp(hash: string) {
    const twin = this.ready.get(hash)
    if (twin === undefined) return
    twin.giveUps++
    twin.untried = Math.min(MOVED_COOLDOWN, 2 ** twin.giveUps)
  }

  /** One of `session`'s activations of `hash` was moved to the pool. */
  moved(hash: string, session: string) {
    if (!this.ready.has(hash)) return
    let modules = this.cooling.get(session)
    if (modules === undefined) modules = new Map()
    // To the end of the order: the session that moved last is forgotten last.
    else this.cooling.delete(session)
    this.cooling.set(session, modules)
    if (this.cooling.size > MOVED_SESSIONS) this.cooling.delete(this.cooling.keys().next().value!)
    let cooling = modules.get(hash)
    if (cooling === undefined) {
      cooling = { cooldown: 0, moves: 0 }
      modules.set(hash, cooling)
      if (modules.size > MOVED_MODULES_PER_SESSION) modules.delete(modules.keys().next().value!)
    }
    cooling.moves++
    cooling.cooldown = Math.min(MOVED_COOLDOWN, 2 ** cooling.moves)
  }

  /**
   * One of `session`'s activations of `hash` completed on the main thread (`tried`: a try, which
   * made no host call): its moves in a row are over.
   */
  completed(hash: string, session: string, tried = false) {
    if (tried) {
      const twin = this.ready.get(hash)
      if (twin !== undefined) twin.giveUps = 0
    }
    const modules = this.cooling.get(session)
    if (modules === undefined) return
    const cooling = modules.get(hash)
    if (cooling === undefined) return
    // A move of a call running beside it (a round of tool calls) may have begun a cooldown since.
    if (cooling.cooldown > 0) {
      cooling.moves = 0
      return
    }
    modules.delete(hash)
    if (modules.size === 0) this.cooling.delete(session)
  }

  /** Sessions whose moves are remembered now (for tests of the bound). */
  get coolingSessions(): number {
    return this.cooling.size
  }
}
