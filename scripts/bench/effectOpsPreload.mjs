// Preloaded (--import) into the unbundled server by scripts/bench/effectOps.js: counts the Effect
// runtime's instructions and fibers on the main thread, by wrapping the op handlers of the fiber
// class (reached through a fiber of the same `effect` module the server imports). Each counted
// instruction is keyed by its kind and by the source of the function it runs (a generator's, a
// continuation's, a thunk's), so the sites that cost instructions can be named. SIGTTIN starts
// the count, SIGTTOU stops it and writes it to BRAIN_BENCH_OPS (the turns are in BRAIN_BENCH_OPS_TURNS).
// Needs --allow-natives-syntax (a generator object's function).
import { Effect } from "effect"
import fs from "node:fs"

const proto = Object.getPrototypeOf(Effect.runFork(Effect.never))
const generatorFunction = new Function("g", "return %GeneratorGetFunction(g)")
const byKind = new Map()
const bySite = new Map()
/** Fibers by where they were started (the stack of their first resume). */
const byRoot = new Map()
let fibers = new WeakSet()
let fiberCount = 0
/**
 * Generator functions whose generators the runtime ran, and how many of them it had not run
 * before: an `Effect.gen(function* () {…})` written inside a function makes a new generator
 * function at every call, and V8 gives each one a prototype and a hidden class of its own the
 * first time it runs (about 1.4 µs here, docs/benchmarks.md "Generator bodies made once").
 */
let generatorsSeen = new WeakSet()
let newGenerators = 0
/** The generator functions run for the first time, by their source's start. */
const newBySource = new Map()
let on = false
/** BRAIN_BENCH_OPS_ROOT: count sites only in fibers whose root (as byFiberRoot names it) holds this text. */
const onlyRoot = process.env.BRAIN_BENCH_OPS_ROOT || undefined
/** BRAIN_BENCH_OPS_TRACE (a file): the first instructions counted, in order, each with its fiber's number. */
const trace = process.env.BRAIN_BENCH_OPS_TRACE ? [] : undefined
const traceIds = new WeakMap()
let traceCount = 0

const fnOf = (kind, op) => {
  switch (kind) {
    case "Sync":
    case "Async":
    case "WithRuntime":
      return op.effect_instruction_i0
    case "OnSuccess":
    case "OnFailure":
      return op.effect_instruction_i1
    case "OnSuccessAndFailure":
      return op.effect_instruction_i2
    case "Commit":
      // The committing value's kind names the site (a Tag, an Option, a Ref, an error class…).
      return op.commit
    case "Iterator":
      try {
        return generatorFunction(op.effect_instruction_i0)
      } catch {
        return undefined
      }
    default:
      return undefined
  }
}

// A fiber's first `resume` is given its root effect: that effect's kind and the source of the
// function it runs (or, for a pipe, of the first such function down its first operand) name what
// the fiber was started for.
const src = (fn, n) => fn.toString().replace(/\s+/g, " ").slice(0, n)
const describe = (effect, depth = 0) => {
  if (effect === null || typeof effect !== "object") return String(effect)
  const kind = String(effect._op ?? effect._tag ?? effect.constructor?.name ?? "?")
  const inner = effect.effect_instruction_i0
  if (depth < 3 && inner && typeof inner === "object" && ["OnSuccess", "OnFailure", "OnSuccessAndFailure"].includes(kind)) {
    return describe(inner, depth + 1)
  }
  if (kind === "UpdateRuntimeFlags" && typeof effect.effect_instruction_i1 === "function") return `${kind} ${src(effect.effect_instruction_i1, 140)}`
  const fn = fnOf(kind, effect) ?? (typeof effect.commit === "function" ? effect.commit : undefined)
  return typeof fn === "function" ? `${kind} ${src(fn, 140)}` : kind
}

const resume = proto.resume
let resumed = new WeakSet()
/** Each fiber's root (as byRoot names it), kept from its first resume whether counting or not. */
const rootOf = new WeakMap()
/** Instructions by the root of the fiber that ran them. */
const byFiberRoot = new Map()
/** Where a fiber was started: the nearest frames of Brain's code (not the runtime's) on the stack that started it. */
const startedAt = () => {
  const frames = (new Error().stack ?? "").split("\n").slice(2).filter((l) => !l.includes("node_modules") && !l.includes("effectOpsPreload"))
  return frames.slice(0, 3).map((l) => l.trim().replace(/^at /, "").replace(/\(?file:\/\/[^)]*\/(dist|src)\//, "(")).join(" < ") || "(no Brain frame)"
}
const start = proto.start
proto.start = function(effect) {
  if (!rootOf.has(this)) rootOf.set(this, `${startedAt()} :: ${describe(effect).slice(0, 60)}`)
  return start.call(this, effect)
}
proto.resume = function(effect) {
  if (!rootOf.has(this)) rootOf.set(this, `${startedAt()} :: ${describe(effect).slice(0, 60)}`)
  if (on && !resumed.has(this)) {
    resumed.add(this)
    const root = rootOf.get(this)
    byRoot.set(root, (byRoot.get(root) ?? 0) + 1)
  }
  return resume.call(this, effect)
}

for (const kind of ["Sync", "Success", "Failure", "Async", "WithRuntime", "OnSuccess", "OnFailure", "OnSuccessAndFailure", "Iterator", "UpdateRuntimeFlags", "Yield", "While", "Tag", "Commit"]) {
  const handler = proto[kind]
  if (typeof handler !== "function") continue
  proto[kind] = function(op) {
    if (on) {
      byKind.set(kind, (byKind.get(kind) ?? 0) + 1)
      const root = rootOf.get(this) ?? "(a fiber not resumed since the preload)"
      byFiberRoot.set(root, (byFiberRoot.get(root) ?? 0) + 1)
      if (!fibers.has(this)) {
        fibers.add(this)
        fiberCount++
      }
      const fn = fnOf(kind, op)
      if (kind === "Iterator" && typeof fn === "function" && !generatorsSeen.has(fn)) {
        generatorsSeen.add(fn)
        newGenerators++
        const source = fn.toString().replace(/\s+/g, " ").slice(0, 160)
        newBySource.set(source, (newBySource.get(source) ?? 0) + 1)
      }
      const site = typeof fn === "function"
        ? `${kind}${kind === "Commit" ? ` ${op.constructor?.name ?? "?"} ${String(op._op ?? op._tag ?? "")} ${String(op.key ?? "")}` : ""} ${fn.toString().replace(/\s+/g, " ").slice(0, 160)}`
        : undefined
      if (trace !== undefined && trace.length < 20000 && (onlyRoot === undefined || root.includes(onlyRoot))) {
        if (!traceIds.has(this)) traceIds.set(this, traceCount++)
        trace.push(`${traceIds.get(this)} ${kind} ${typeof fn === "function" ? fn.toString().replace(/\s+/g, " ").slice(0, 120) : kind === "Success" ? "" : String(op?.constructor?.name)}`)
      }
      if (site !== undefined && (onlyRoot === undefined || root.includes(onlyRoot))) bySite.set(site, (bySite.get(site) ?? 0) + 1)
    }
    return handler.call(this, op)
  }
}

process.on("SIGTTIN", () => {
  byKind.clear()
  bySite.clear()
  byRoot.clear()
  byFiberRoot.clear()
  resumed = new WeakSet()
  fibers = new WeakSet()
  fiberCount = 0
  newGenerators = 0
  newBySource.clear()
  on = true
})
process.on("SIGTTOU", () => {
  on = false
  const turns = Number(fs.readFileSync(process.env.BRAIN_BENCH_OPS_TURNS, "utf8"))
  const total = [...byKind.values()].reduce((a, b) => a + b, 0)
  if (trace !== undefined) fs.writeFileSync(process.env.BRAIN_BENCH_OPS_TRACE, trace.join("\n"))
  fs.writeFileSync(process.env.BRAIN_BENCH_OPS, JSON.stringify({ turns, total, fibers: fiberCount, newGenerators, newBySource: [...newBySource], byKind: [...byKind], bySite: [...bySite], byRoot: [...byRoot], byFiberRoot: [...byFiberRoot] }))
})
