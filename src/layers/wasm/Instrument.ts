/**
 * Makes an admitted guest module fit to run on Brain's main thread (Inline.ts): the same code,
 * with two things added by Binaryen that the guest cannot see.
 *
 * - **Metering.** Every function entry and loop header takes fuel from a global for the code it
 *   guards: the function's instructions outside its loops, the loop body's outside nested loops,
 *   one unit per INSTRUCTIONS_PER_UNIT (64) of them, at least one (Metering.ts); when the fuel runs
 *   out, the guest calls the host's `brain.tick`, which answers the next allowance or throws (the
 *   guest has computed past what the main thread lends it). A guest can therefore never hold the
 *   main thread longer than one allowance (or one site's charge, when larger) past its bound:
 *   every unbounded computation in core Wasm goes through a loop or a call, and within one entry
 *   or iteration each instruction runs at most once (forward branches only skip code already
 *   charged). Charging by length rather than one unit a site is what bounds a guest of long
 *   straight-line bodies: at one unit a site, a function of 600,000 instructions called in a loop
 *   held the thread 2.4 s with a 100 ms budget, a loop of 60,000 instructions an iteration 5.3 s
 *   (test/layers/wasm/Metering.test.ts); charged by length, about the budget. Sending such modules
 *   to worker threads instead would leave a bound (how long is too long) to pick and pass; the
 *   charge costs a guest of ordinary code nothing (64 instructions a unit: the official loop spends
 *   what it did at one unit a site, about 5,300 a turn) and its instrumentation one walk of the
 *   code. A bulk operation is one instruction whose cost is its
 *   length, so `memory.fill` and `memory.copy` take one unit more per BULK_BYTES_PER_UNIT of it,
 *   before they run (Binaryen's `llvm-memory-copy-fill-lowering` turns each into a call of one
 *   function per operation, whose body is replaced here by the charge and the operation itself,
 *   then inlined): one allowance of them is 20 MiB, not 20,000 times the memory. A module whose
 *   code has a bulk operation this does not charge (`memory.init`, `table.fill`, `table.copy`,
 *   `table.init`), or `memory.fill`/`memory.copy` beside a passive data segment (which the lowering
 *   does not take), gets no twin: it runs on worker threads, where the budget is a timer.
 * - **Asyncify** on `brain.call`: a host call can unwind the guest's stack into its own memory and
 *   return to the host, which performs the call asynchronously and later rewinds the guest into the
 *   same call, which then returns the answer. No thread is held while a host call is performed.
 *   The twin drives Asyncify itself, entered through a step of each entry (addSteps, STEP_EXPORTS).
 *
 * - **A reset** (RESET_EXPORTS), for a module whose code cannot change what a reset cannot restore
 *   (no `table.set`, `table.grow`, `table.fill`, `table.copy`, `table.init`, `elem.drop`,
 *   `data.drop` or `memory.init`): `brain$save` copies every mutable global into a shadow global
 *   of its own, `brain$restore` copies them back. Saved right after instantiation and restored
 *   with the memory's image of that moment, an instance is again exactly as instantiation left it
 *   (Inline.ts): its globals, its memory, its tables (which its code cannot change) and its
 *   segments (which it cannot drop or copy from).
 *
 * - **Written** (WRITTEN_EXPORT and LOW_EXPORT), for a module whose every store to memory is a
 *   plain load-store instruction (no `memory.copy`, `memory.fill`, atomic or SIMD store): each
 *   store raises a global to one past the last byte it writes, and lowers another to the first
 *   (Binaryen's `instrument-memory` pass, its imports defined here and inlined, as the metering's
 *   are), so that an instance put back has only that span of its memory written again: what its
 *   guest never wrote above its image is still zero, and writing it again cost a turn of the
 *   official loop about 20 µs of cache (docs/benchmarks.md, "The cost of zeroing a memory the guest
 *   did not touch"); its image (the official loop's 19.7 KB of static data, which no turn of it
 *   writes) is copied back only when something was written below its end. A store whose end wraps
 *   past 2^32 traps (its start then wraps too, or lies past the memory), and a failed activation's
 *   memory is zeroed whole.
 *
 * The twin exports only what the host calls (the entry points, the allocator, and the exports
 * above): an instance of a module with fewer exports is made faster, and a guest never sees its
 * own exports. Every other export of the guest's is dropped before anything is added, and its
 * custom sections (its names among them) before Binaryen reads it, so that no name of the guest's
 * is one the instrumentation uses (TwinExports.ts, HOST_NAME_PREFIX): the host's exports on a twin
 * are the instrumentation's, never a guest's own `brain$written` or `brain$restore` (which would
 * have the host skip zeroing its memory or restoring its globals). Each name added is checked
 * free first.
 *
 * None of this changes what the guest computes: a guest run instrumented and one run plain make the same
 * host calls with the same requests and give the same output, which is what lets an activation
 * move from the main thread to a worker thread and replay its host answers there (Inline.ts).
 *
 * Runs in a worker thread (InstrumentWorker.ts): Binaryen's passes take tens to hundreds of
 * milliseconds, which the main thread must not spend. A module whose functions are too many or nest
 * too deeply for Binaryen to instrument in bounded time and memory (TwinCost.ts) is refused first.
 */
import binaryen from "binaryen"
import { chargeSites, nextSiteNumber } from "./Metering.js"
import { twinTooCostly } from "./TwinCost.js"
import { ANSWER_GLOBAL, ENTER, LOW_EXPORT, RESET_EXPORTS, STEP_EXPORTS, UNWIND_LEN, WRITTEN_EXPORT } from "./TwinExports.js"

/** The fuel global and the host's refill, as the instrumented module names them. */
export const TICK_IMPORT = { module: "brain", name: "tick" } as const

/** The functions Asyncify exports, called by the twin's own code instead (addSteps; their exports are dropped). */
const ASYNCIFY_FUNCTIONS = ["asyncify_start_unwind", "asyncify_stop_unwind", "asyncify_start_rewind", "asyncify_stop_rewind", "asyncify_get_state"] as const

/**
 * The features Binaryen reads and writes a twin with: all it knows but 64-bit and multiple
 * memories, which no admitted guest has (its one memory is a plain 32-bit import) and which the
 * bulk-memory lowering refuses.
 */
const FEATURES = binaryen.Features.All & ~binaryen.Features.Memory64 & ~binaryen.Features.MultiMemory

/** The exports of a guest's that its twin keeps: what the host calls on it. */
const GUEST_ENTRIES: ReadonlySet<string> = new Set(["brain_run", "brain_tool", "brain_alloc"])

/** Bytes of `memory.fill` or `memory.copy` per unit of fuel (one more for the operation itself). */
export const BULK_BYTES_PER_UNIT = 1024

/** The fuel global, as the instrumented module names it. */
const FUEL_GLOBAL = "brain$fuel"
const TICK_FUNCTION = "brain$tick"

/** Returns the instrumented module's bytes; throws when Binaryen cannot read or instrument `bytes`. */
export const instrument = (bytes: Uint8Array): Uint8Array => {
  // Read for what Binaryen would spend on it before Binaryen reads it (TwinCost.ts).
  const costly = twinTooCostly(bytes)
  if (costly !== undefined) throw new Error(costly)
  settle()
  const m = binaryen.readBinary(withoutCustomSections(bytes))
  try {
    m.setFeatures(FEATURES)
    // The guest's own exports but its entries, before anything is added: a twin's other exports are the instrumentation's.
    for (const name of exportNames(m)) if (!GUEST_ENTRIES.has(name)) m.removeExport(name)
    // The code is read once for what the twin needs to know of it (nothing below adds an instruction these match).
    const [unmetered, bulk, unresettable, uncounted] = codeHas(m, [UNMETERED, BULK_MEMORY, UNRESETTABLE, UNCOUNTED_STORES])
    if (unmetered) throw new Error("its code has memory.init, table.fill, table.copy or table.init, whose cost metering does not charge: it runs on worker threads")
    if (bulk) {
      if (hasPassiveDataSegment(m)) throw new Error("its code has memory.fill or memory.copy beside a passive data segment, which metering does not take: it runs on worker threads")
      fresh(m, ...Object.values(BULK_FUNCTIONS))
      // Each memory.fill and memory.copy a call of one function per operation (charged and made the operation again below).
      m.runPasses(["llvm-memory-copy-fill-lowering"])
      m.setFeatures(FEATURES)
    }
    // A call of an imported `log_execution(i32)` at every function entry, loop header, return and
    // function end, numbered from a counter Binaryen keeps for the process...
    const first = nextSiteNumber()
    m.runPasses(["log-execution"])
    const sites = nextSiteNumber() - 1 - first
    const logName = importedFunctionNamed(m, "log_execution")
    if (logName === undefined) throw new Error("Binaryen's log-execution pass added no import")
    // ...each at an entry or loop header made a charge of the code it guards, which spends fuel and
    // asks the host for more when it runs out, the others removed (Metering.ts); no number of the
    // pass's is left, so a module's twin is the same bytes however many were made before it.
    fresh(m, FUEL_GLOBAL, TICK_FUNCTION)
    m.addGlobal(FUEL_GLOBAL, binaryen.i32, true, m.i32.const(0))
    m.addFunctionImport(TICK_FUNCTION, TICK_IMPORT.module, TICK_IMPORT.name, binaryen.none, binaryen.i32)
    chargeSites(m, logName, first, sites, (units) => spend(m, m.i32.const(units)))
    m.removeFunction(logName)
    // Each bulk operation's function charged by its length, and inlined (settle: functions this
    // small always are), so metering costs a global decrement and a branch.
    if (bulk) meterBulk(m)
    m.runPasses(["inlining", "coalesce-locals", "vacuum"])
    // Asyncify optimizes the code it instruments when asked to (Binaryen runs its local passes on
    // each function it changed): the official loop's twin 78.5 → 56.5 KB, a text turn's guest
    // about a microsecond less (docs/benchmarks.md, "Asyncify's own optimizations"); its
    // instrumentation 0.12 → 0.3 s, once per module, on the instrumenting thread.
    binaryen.setOptimizeLevel(1)
    m.runPasses(["asyncify"])
    binaryen.setOptimizeLevel(0)
    const [startUnwind, stopUnwind, startRewind, stopRewind, getState] = ASYNCIFY_FUNCTIONS.map((name) => binaryen.getExportInfo(m.getExport(name)).value!)
    for (const name of ASYNCIFY_FUNCTIONS) m.removeExport(name)
    addSteps(m, { startUnwind: startUnwind!, stopUnwind: stopUnwind!, startRewind: startRewind!, stopRewind: stopRewind!, getState: getState! })
    // After Asyncify, so that the stores it added (its suspension buffer's) are counted too (they
    // are plain stores, as are what addWritten adds: `uncounted` was read from the guest's code).
    if (!uncounted) addWritten(m)
    if (!unresettable) addReset(m)
    for (const name of exportNames(m)) if (!HOST_CALLS.has(name)) m.removeExport(name)
    if (!m.validate()) throw new Error("the instrumented module does not validate")
    return m.emitBinary()
  } finally {
    m.dispose()
  }
}

/** The exports the host calls on a twin; the rest (the ABI's markers, the memory) are read from the admitted module, never from an instance. */
const HOST_CALLS: ReadonlySet<string> = new Set([...GUEST_ENTRIES, ...Object.values(STEP_EXPORTS), RESET_EXPORTS.save, RESET_EXPORTS.restore, WRITTEN_EXPORT, LOW_EXPORT])

/** Throws unless no function, global or export of the module is named any of `names` (the guest's names are Binaryen's own, its custom sections dropped: only a bug here would take one). */
const fresh = (m: binaryen.Module, ...names: ReadonlyArray<string>) => {
  for (const name of names) {
    if (m.getFunction(name) !== 0 || m.getGlobal(name) !== 0 || m.getExport(name) !== 0) throw new Error(`the module already has something named ${name}, which the instrumentation adds`)
  }
}

/**
 * `bytes` without its custom sections (id 0): they change nothing a module computes, and the
 * `name` section would give Binaryen the guest's own names for its functions and globals, any of
 * which could be one the instrumentation adds. Without it they are Binaryen's (`0`, `global$0`, …).
 * The sections are only walked (the module was validated at admission); a length that runs past
 * the end leaves the rest as it is, for Binaryen to refuse.
 */
export const withoutCustomSections = (bytes: Uint8Array): Uint8Array => {
  const kept: Array<Uint8Array> = [bytes.subarray(0, 8)]
  let at = 8
  while (at < bytes.length) {
    const start = at
    let size = 0
    let shift = 0
    let i = at + 1
    for (; i < bytes.length && shift < 35; i++, shift += 7) {
      size += (bytes[i]! & 0x7f) * 2 ** shift
      if ((bytes[i]! & 0x80) === 0) break
    }
    const end = i + 1 + size
    if (end > bytes.length) {
      kept.push(bytes.subarray(start))
      break
    }
    if (bytes[start] !== 0) kept.push(bytes.subarray(start, end))
    at = end
  }
  return kept.length === 1 ? bytes.subarray(0, 8) : new Uint8Array(Buffer.concat(kept))
}

/** Spends `units` (an i32 expression) of fuel; asks the host for more when it runs out (it throws when the guest has computed past what the main thread lends it). */
const spend = (m: binaryen.Module, units: binaryen.ExpressionRef): binaryen.ExpressionRef => {
  const fuel = () => m.global.get(FUEL_GLOBAL, binaryen.i32)
  return m.block(null, [
    m.global.set(FUEL_GLOBAL, m.i32.sub(fuel(), units)),
    m.if(m.i32.lt_s(fuel(), m.i32.const(0)), m.global.set(FUEL_GLOBAL, m.call(TICK_FUNCTION, [], binaryen.i32)))
  ])
}

/** The functions `llvm-memory-copy-fill-lowering` calls in place of each operation, `(dest, source or value, size) -> ()`. */
const BULK_FUNCTIONS = { copy: "__memory_copy", fill: "__memory_fill" } as const

/**
 * Makes each function the lowering called (a loop of byte stores, which would spend a unit per
 * byte and be far slower) the operation itself, charged first: one unit, and one per
 * BULK_BYTES_PER_UNIT of its size. The operands were evaluated in order at the call, and the
 * operation traps where it would have: the guest computes the same.
 */
const meterBulk = (m: binaryen.Module) => {
  const arg = (i: number) => m.local.get(i, binaryen.i32)
  const units = () => m.i32.add(m.i32.shr_u(arg(2), m.i32.const(Math.log2(BULK_BYTES_PER_UNIT))), m.i32.const(1))
  const operations = [
    [BULK_FUNCTIONS.copy, () => m.memory.copy(arg(0), arg(1), arg(2))],
    [BULK_FUNCTIONS.fill, () => m.memory.fill(arg(0), arg(1), arg(2))]
  ] as const
  for (const [name, operation] of operations) {
    const f = m.getFunction(name)
    if (f === 0) continue
    const info = binaryen.getFunctionInfo(f)
    m.removeFunction(name)
    m.addFunction(name, info.params, info.results, [], m.block(null, [spend(m, units()), operation()]))
  }
}

/** Whether the module has a passive data segment (read through Binaryen's C API: its JS wrapper reads an active segment's offset, which need not be a constant). */
const hasPassiveDataSegment = (m: binaryen.Module): boolean => {
  const passive = (binaryen as unknown as { _BinaryenGetDataSegmentPassive: (segment: number) => number })._BinaryenGetDataSegmentPassive
  for (let i = 0; i < (m as unknown as { getNumDataSegments: () => number }).getNumDataSegments(); i++) if (passive(m.getDataSegmentByIndex(i)) !== 0) return true
  return false
}

/** Bulk operations metering charges by their length (meterBulk). */
const BULK_MEMORY = /\(memory\.(copy|fill)\b/

/** Bulk operations it does not: each is one unit however long, so a loop of them could hold the main thread for seconds per allowance. */
const UNMETERED = /\((memory\.init|table\.(fill|copy|init))\b/

const exportNames = (m: binaryen.Module): Array<string> =>
  Array.from({ length: m.getNumExports() }, (_, i) => binaryen.getExportInfo(m.getExportByIndex(i)).name)

/**
 * The instructions that change what `brain$restore` and the memory's image do not restore: a
 * table's contents, and a segment's (dropped, or copied from at run time). Matched in Binaryen's
 * text of each function's body, where an instruction is the only thing that follows `(` with its
 * name (names follow `$`); only code can run them.
 */
const UNRESETTABLE = /\((table\.(set|grow|fill|copy|init)|elem\.drop|data\.drop|memory\.init)\b/

/**
 * The instructions that write memory other than a plain store, which `instrument-memory` does not
 * see: bulk operations, atomics (`i32.atomic.store`, `….atomic.rmw…`, their `cmpxchg`) and SIMD
 * stores (`v128.store`, a lane's). A module with any of them gets no WRITTEN_EXPORT.
 */
const UNCOUNTED_STORES = /\((memory\.(copy|fill|init)|[a-z0-9]+\.atomic\.[a-z0-9_.]+|v128\.store[a-z0-9_]*)\b/

/**
 * For each pattern, whether some function body has an instruction it matches: each body printed
 * once, alone (a large module's whole text is never held), and no longer once every pattern matched.
 */
const codeHas = (m: binaryen.Module, patterns: ReadonlyArray<RegExp>): Array<boolean> => {
  const found = patterns.map(() => false)
  for (let i = 0; i < m.getNumFunctions() && found.includes(false); i++) {
    const body = binaryen.getFunctionInfo(m.getFunctionByIndex(i)).body
    if (body === 0) continue
    const text = binaryen.emitText(body)
    patterns.forEach((p, j) => void (found[j] ||= p.test(text)))
  }
  return found
}

/**
 * Adds WRITTEN_EXPORT and LOW_EXPORT: `instrument-memory` routes every load's and store's address
 * and value through imported functions; each is defined here instead, answering what it was given,
 * and the store's address one also raises the one global to `address + offset + bytes` and lowers
 * the other to `address + offset` (unsigned). Then inlined.
 */
const addWritten = (m: binaryen.Module) => {
  fresh(m, WRITTEN_EXPORT, LOW_EXPORT)
  m.addGlobal(WRITTEN_EXPORT, binaryen.i32, true, m.i32.const(0))
  m.addGlobal(LOW_EXPORT, binaryen.i32, true, m.i32.const(-1))
  m.runPasses(["instrument-memory"])
  for (let i = m.getNumFunctions() - 1; i >= 0; i--) {
    const info = binaryen.getFunctionInfo(m.getFunctionByIndex(i))
    if (info.module !== "env" || !INSTRUMENT_MEMORY_IMPORTS.has(info.base ?? "")) continue
    const params = binaryen.expandType(info.params)
    const last = m.local.get(params.length - 1, params[params.length - 1]!)
    m.removeFunction(info.name)
    if (info.base === "store_ptr") {
      // (id, bytes, offset, address) -> address
      // Locals 4 and 5: the store's first byte, and one past its last.
      const start = () => m.local.get(4, binaryen.i32)
      const end = () => m.local.get(5, binaryen.i32)
      m.addFunction(info.name, info.params, info.results, [binaryen.i32, binaryen.i32], m.block(null, [
        m.local.set(4, m.i32.add(m.local.get(3, binaryen.i32), m.local.get(2, binaryen.i32))),
        m.local.set(5, m.i32.add(start(), m.local.get(1, binaryen.i32))),
        m.if(m.i32.gt_u(end(), m.global.get(WRITTEN_EXPORT, binaryen.i32)), m.global.set(WRITTEN_EXPORT, end())),
        m.if(m.i32.lt_u(start(), m.global.get(LOW_EXPORT, binaryen.i32)), m.global.set(LOW_EXPORT, start())),
        last
      ], info.results))
    } else {
      m.addFunction(info.name, info.params, info.results, [], last)
    }
  }
  // A guest imports no function from `env` (admission): any left is one this host does not define.
  const left = importedEnvFunction(m)
  if (left !== undefined) throw new Error(`instrument-memory imports env.${left}, which this host does not define`)
  m.runPasses(["inlining", "coalesce-locals", "vacuum"])
  m.addGlobalExport(WRITTEN_EXPORT, WRITTEN_EXPORT)
  m.addGlobalExport(LOW_EXPORT, LOW_EXPORT)
}

/** What `instrument-memory` imports from `env` (Binaryen 131): each answers its last argument, `store_ptr` also counting the store. */
const INSTRUMENT_MEMORY_IMPORTS: ReadonlySet<string> = new Set([
  "memory_grow_pre", "memory_grow_post", "load_ptr", "load_val_i32", "load_val_i64", "load_val_f32", "load_val_f64",
  "store_ptr", "store_val_i32", "store_val_i64", "store_val_f32", "store_val_f64",
  "struct_get_val_i32", "struct_get_val_i64", "struct_get_val_f32", "struct_get_val_f64",
  "struct_set_val_i32", "struct_set_val_i64", "struct_set_val_f32", "struct_set_val_f64",
  "array_get_val_i32", "array_get_val_i64", "array_get_val_f32", "array_get_val_f64",
  "array_set_val_i32", "array_set_val_i64", "array_set_val_f32", "array_set_val_f64",
  "array_get_index", "array_set_index"
])

/** The base name of a function the module imports from `env`, if any. */
const importedEnvFunction = (m: binaryen.Module): string | undefined => {
  for (let i = 0; i < m.getNumFunctions(); i++) {
    const info = binaryen.getFunctionInfo(m.getFunctionByIndex(i))
    if (info.module === "env") return info.base ?? ""
  }
  return undefined
}

/** Asyncify's functions, by their names in the module. */
interface AsyncifyFunctions {
  readonly startUnwind: string
  readonly stopUnwind: string
  readonly startRewind: string
  readonly stopRewind: string
  readonly getState: string
}

/** Asyncify's states (its `asyncify_get_state`). */
const UNWINDING = 1
const REWINDING = 2

/** The import every `brain.call` of the guest's calls through, once the guest's own import is the twin's function (addSteps). */
const CALL_IMPORT = "brain$call"

/**
 * Makes the twin drive Asyncify itself, so that a host call costs no crossing between JavaScript
 * and the twin beyond the call itself and the steps (TwinExports.ts, STEP_EXPORTS):
 *
 * - every import of `brain.call` (what Asyncify instrumented the calls of) becomes a function of
 *   the twin's, which Asyncify did not instrument, so its callers treat it as they treated the
 *   import. Rewinding, it stops the rewind and answers ANSWER_GLOBAL (the answer the host gave
 *   the step); else it calls the host's `brain.call` (one import, CALL_IMPORT), and when that
 *   answers a pair whose length is UNWIND_LEN, starts the unwind into the buffer at the pair's
 *   pointer (whose header the host wrote);
 * - each entry the guest exports gets a step, `(ptr, len, answerPtr, answerLen, buffer) -> i64`:
 *   with a buffer (not ENTER), it sets ANSWER_GLOBAL to the answer's pair and starts the rewind
 *   from it; then it calls the
 *   entry, and stops the unwind when the entry returned unwinding.
 *
 * A guest that never calls the host keeps no import of `brain.call`; its steps only call its entries.
 */
const addSteps = (m: binaryen.Module, asyncify: AsyncifyFunctions) => {
  fresh(m, CALL_IMPORT, ANSWER_GLOBAL, ...Object.values(STEP_EXPORTS))
  m.addGlobal(ANSWER_GLOBAL, binaryen.i64, true, m.i64.const(0n))
  const state = () => m.call(asyncify.getState, [], binaryen.i32)
  const imports: Array<string> = []
  for (let i = 0; i < m.getNumFunctions(); i++) {
    const info = binaryen.getFunctionInfo(m.getFunctionByIndex(i))
    if (info.module === "brain" && info.base === "call") imports.push(info.name)
  }
  if (imports.length > 0) {
    const p = (i: number) => m.local.get(i, binaryen.i32)
    const answered = () => m.local.get(4, binaryen.i64)
    m.addFunctionImport(CALL_IMPORT, "brain", "call", binaryen.createType([binaryen.i32, binaryen.i32, binaryen.i32, binaryen.i32]), binaryen.i64)
    for (const name of imports) {
      m.removeFunction(name)
      m.addFunction(name, binaryen.createType([binaryen.i32, binaryen.i32, binaryen.i32, binaryen.i32]), binaryen.i64, [binaryen.i64], m.block(null, [
        m.if(m.i32.eq(state(), m.i32.const(REWINDING)), m.block(null, [
          m.call(asyncify.stopRewind, [], binaryen.none),
          m.return(m.global.get(ANSWER_GLOBAL, binaryen.i64))
        ])),
        m.local.set(4, m.call(CALL_IMPORT, [p(0), p(1), p(2), p(3)], binaryen.i64)),
        m.if(m.i32.eq(m.i32.wrap(answered()), m.i32.const(UNWIND_LEN | 0)), m.block(null, [
          m.call(asyncify.startUnwind, [m.i32.wrap(m.i64.shr_u(answered(), m.i64.const(32n)))], binaryen.none),
          m.return(m.i64.const(0n))
        ])),
        answered()
      ], binaryen.i64))
    }
  }
  for (const [entry, step] of Object.entries(STEP_EXPORTS)) {
    const exported = m.getExport(entry)
    if (exported === 0) continue
    const target = binaryen.getExportInfo(exported).value
    const info = binaryen.getFunctionInfo(m.getFunction(target))
    // Admission held each entry to (i32, i32) -> i64.
    // No i64 parameter: V8 calls a function of i32s from JavaScript without making or reading a BigInt.
    const i32 = (i: number) => m.local.get(i, binaryen.i32)
    m.addFunction(step, binaryen.createType([binaryen.i32, binaryen.i32, binaryen.i32, binaryen.i32, binaryen.i32]), info.results, [info.results], m.block(null, [
      m.if(m.i32.ne(i32(4), m.i32.const(ENTER)), m.block(null, [
        m.global.set(ANSWER_GLOBAL, m.i64.or(m.i64.shl(m.i64.extend_u(i32(2)), m.i64.const(32n)), m.i64.extend_u(i32(3)))),
        m.call(asyncify.startRewind, [i32(4)], binaryen.none)
      ])),
      m.local.set(5, m.call(target, [i32(0), i32(1)], info.results)),
      m.if(m.i32.eq(state(), m.i32.const(UNWINDING)), m.call(asyncify.stopUnwind, [], binaryen.none)),
      m.local.get(5, info.results)
    ], info.results))
    m.addFunctionExport(step, step)
  }
}

/**
 * Adds `brain$save` and `brain$restore` over every mutable global the module defines (Asyncify's
 * and the fuel included). `brain$restore` answers, as an i64, the written marks as they were
 * before it restored them, `(WRITTEN_EXPORT << 32) | LOW_EXPORT` (0 in a twin without them): the
 * put-back's one call into the twin tells it what to write again (reading the two globals from
 * JavaScript is two calls into V8's API).
 */
const addReset = (m: binaryen.Module) => {
  const saved: Array<{ readonly name: string; readonly shadow: string; readonly type: binaryen.Type }> = []
  for (let i = 0; i < m.getNumGlobals(); i++) {
    const info = binaryen.getGlobalInfo(m.getGlobalByIndex(i))
    if (!info.mutable || info.module) continue
    saved.push({ name: info.name, shadow: `${info.name}$brain_saved`, type: info.type })
  }
  fresh(m, RESET_EXPORTS.save, RESET_EXPORTS.restore, ...saved.map((g) => g.shadow))
  for (const g of saved) m.addGlobal(g.shadow, g.type, true, m.copyExpression(binaryen.getGlobalInfo(m.getGlobal(g.name)).init))
  const copy = (from: "name" | "shadow", to: "name" | "shadow") =>
    m.block(null, saved.map((g) => m.global.set(g[to], m.global.get(g[from], g.type))), binaryen.none)
  m.addFunction(RESET_EXPORTS.save, binaryen.none, binaryen.none, [], copy("name", "shadow"))
  const counted = m.getGlobal(WRITTEN_EXPORT) !== 0 && m.getGlobal(LOW_EXPORT) !== 0
  const mark = (name: string) => m.i64.extend_u(m.global.get(name, binaryen.i32))
  const marks = counted ? m.i64.or(m.i64.shl(mark(WRITTEN_EXPORT), m.i64.const(32n)), mark(LOW_EXPORT)) : m.i64.const(0n)
  m.addFunction(RESET_EXPORTS.restore, binaryen.none, binaryen.i64, [binaryen.i64], m.block(null, [
    m.local.set(0, marks),
    copy("shadow", "name"),
    m.local.get(0, binaryen.i64)
  ], binaryen.i64))
  m.addFunctionExport(RESET_EXPORTS.save, RESET_EXPORTS.save)
  m.addFunctionExport(RESET_EXPORTS.restore, RESET_EXPORTS.restore)
}

/**
 * Sets every one of Binaryen's process-wide options its passes read, so that the twin of a module
 * is the same bytes in every process, whatever ran Binaryen there before: the build compiles the
 * shipped loops with asc, which sets its own, in the process that then makes their twins (the
 * official loop's twin came out 11 KB smaller there than a server's).
 */
const settle = () => {
  binaryen.clearPassArguments()
  binaryen.setPassArgument("asyncify-imports", "brain.call")
  // A whole optimization of the twin would take seconds for little (V8 optimizes it); Asyncify alone is run at level 1 (above).
  binaryen.setOptimizeLevel(0)
  binaryen.setShrinkLevel(0)
  binaryen.setDebugInfo(false)
  binaryen.setTrapsNeverHappen(false)
  binaryen.setClosedWorld(false)
  binaryen.setLowMemoryUnused(false)
  binaryen.setZeroFilledMemory(false)
  binaryen.setFastMath(false)
  binaryen.setGenerateStackIR(false)
  binaryen.setOptimizeStackIR(false)
  // The bulk operations' charged functions (meterBulk) are below this: always inlined.
  binaryen.setAlwaysInlineMaxSize(40)
  binaryen.setFlexibleInlineMaxSize(20)
  binaryen.setOneCallerInlineMaxSize(-1)
  binaryen.setAllowInliningFunctionsWithLoops(false)
}

const importedFunctionNamed = (m: binaryen.Module, base: string): string | undefined => {
  for (let i = 0; i < m.getNumFunctions(); i++) {
    const info = binaryen.getFunctionInfo(m.getFunctionByIndex(i))
    if (info.module && info.base === base) return info.name
  }
  return undefined
}
