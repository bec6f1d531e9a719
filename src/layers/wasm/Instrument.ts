/**
 * Makes an admitted guest module fit to run on Brain's main thread (Inline.ts): the same code,
 * with two things added by Binaryen that the guest cannot see.
 *
 * - **Metering.** Every function entry and loop header takes one unit of a fuel global; when it
 *   runs out, the guest calls the host's `brain.tick`, which answers the next allowance or throws
 *   (the guest has computed past what the main thread lends it). A guest can therefore never hold
 *   the main thread longer than one allowance past its bound: every unbounded computation in core
 *   Wasm goes through a loop or a call. (Bulk memory operations are bounded by the memory maximum.)
 * - **Asyncify** on `brain.call`: a host call can unwind the guest's stack into its own memory and
 *   return to the host, which performs the call asynchronously and later rewinds the guest into the
 *   same call, which then returns the answer. No thread is held while a host call is performed.
 *
 * Neither changes what the guest computes: a guest run instrumented and one run plain make the same
 * host calls with the same requests and give the same output, which is what lets an activation
 * move from the main thread to a worker thread and replay its host answers there (Inline.ts).
 *
 * Runs in a worker thread (InstrumentWorker.ts): Binaryen's passes take tens to hundreds of
 * milliseconds, which the main thread must not spend.
 */
import binaryen from "binaryen"

/** The fuel global and the host's refill, as the instrumented module names them. */
export const TICK_IMPORT = { module: "brain", name: "tick" } as const

/** The exports Asyncify adds, which the inline host drives. */
export const ASYNCIFY_EXPORTS = [
  "asyncify_start_unwind",
  "asyncify_stop_unwind",
  "asyncify_start_rewind",
  "asyncify_stop_rewind",
  "asyncify_get_state"
] as const

/** Returns the instrumented module's bytes; throws when Binaryen cannot read or instrument `bytes`. */
export const instrument = (bytes: Uint8Array): Uint8Array => {
  const m = binaryen.readBinary(bytes)
  try {
    m.setFeatures(binaryen.Features.All)
    // Optimizing here would take seconds for little: V8's own compiler optimizes the result.
    binaryen.setOptimizeLevel(0)
    binaryen.setShrinkLevel(0)
    // A call of an imported `log_execution(i32)` at every function entry and loop header...
    m.runPasses(["log-execution"])
    const logName = importedFunctionNamed(m, "log_execution")
    if (logName === undefined) throw new Error("Binaryen's log-execution pass added no import")
    // ...made a defined function that spends fuel and asks the host for more when it runs out,
    m.removeFunction(logName)
    m.addGlobal("brain$fuel", binaryen.i32, true, m.i32.const(0))
    m.addFunctionImport("brain$tick", TICK_IMPORT.module, TICK_IMPORT.name, binaryen.none, binaryen.i32)
    const fuel = () => m.global.get("brain$fuel", binaryen.i32)
    m.addFunction(logName, binaryen.createType([binaryen.i32]), binaryen.none, [], m.block(null, [
      m.global.set("brain$fuel", m.i32.sub(fuel(), m.i32.const(1))),
      m.if(m.i32.lt_s(fuel(), m.i32.const(0)), m.global.set("brain$fuel", m.call("brain$tick", [], binaryen.i32)))
    ]))
    // ...and inlined at every site, so metering costs a global decrement and a branch.
    binaryen.setAlwaysInlineMaxSize(40)
    m.runPasses(["inlining"])
    binaryen.setPassArgument("asyncify-imports", "brain.call")
    m.runPasses(["asyncify"])
    if (!m.validate()) throw new Error("the instrumented module does not validate")
    return m.emitBinary()
  } finally {
    m.dispose()
  }
}

const importedFunctionNamed = (m: binaryen.Module, base: string): string | undefined => {
  for (let i = 0; i < m.getNumFunctions(); i++) {
    const info = binaryen.getFunctionInfo(m.getFunctionByIndex(i))
    if (info.module && info.base === base) return info.name
  }
  return undefined
}
