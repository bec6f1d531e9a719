/**
 * Admission of a guest module (docs/abi.md): before anything runs, the bytes must be a valid core
 * Wasm module of bounded size that speaks ABI version 1 — imports only `env.memory` (a plain
 * 32-bit, unshared memory whose initial size fits Brain's maximum), `brain.call` and `brain.fail`;
 * exports the `brain_abi_v1` marker, `brain_alloc` and `brain_run` and/or `brain_tool`. An admitted
 * module is compiled once and kept by its content hash.
 *
 * The memory import's limits, the tables' and the ABI functions' types are read from the binary
 * (the JS API does not show them): the host creates the memory with the guest's initial size and
 * its own maximum, a function of the wrong type is refused here, not at its first call, and tables
 * (which V8 makes on the JavaScript heap at every instantiation, 16 bytes an entry, up to 10,000,000
 * entries each) must each declare a maximum, all together at most MAX_WASM_TABLE_ENTRIES. A module
 * may export no name in the host's namespace (HOST_NAME_PREFIX, `brain$`: the names its
 * instrumented twin's exports have).
 *
 * Compiling — which validates — is V8's work of seconds for a large module (about 2 s for 28 MiB of
 * nested blocks), so it runs on a thread of its own (Compiler.ts), never the main thread; the main
 * thread only hashes the bytes, a slice at a time. A WasmHost remembers its verdicts by content hash
 * (Verdicts): the same bytes refused again are refused with the same reason without being compiled
 * again, and admitted again while their compiled module is still held, are that module.
 */
import * as crypto from "node:crypto"
import { Effect } from "effect"
import { TRANSCRIPT_TAIL } from "../../domain/TranscriptTail.js"
import { type AdmitOptions, type AdmittedModule, type MemoryLimits, ModuleRejected } from "../../services/WasmHost.js"
import { CompileQueue } from "./Compiler.js"
import { HOST_NAME_PREFIX } from "./TwinExports.js"

/** Bytes of one Wasm page. */
export const PAGE_BYTES = 65536

/**
 * Entries. The most a module's tables may hold together, counting each at its declared maximum
 * (which `table.grow` cannot pass): V8 makes every table whole at each instantiation, on the
 * JavaScript heap (16 bytes an entry), outside BRAIN_MAX_WASM_MEMORY_BYTES, and a heap that runs out
 * ends the process. At this bound an instance's tables take 1 MiB of heap; a compiler's table of
 * function pointers holds one entry per function whose address is taken.
 */
export const MAX_WASM_TABLE_ENTRIES = 65_536

/** The 8 bytes every core WebAssembly module begins with: the magic `\0asm`, then version 1 (little-endian). */
const WASM_HEADER = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00] as const

/**
 * Bytes. Below this no body can be a module the ABI admits: its header (8), its `env.memory`
 * import with its section (17) and its exports of `brain_abi_v1`, `brain_alloc` and `brain_run`
 * (or `brain_tool`) with theirs (44) alone take 69. A body shorter, or without the header, is
 * refused before it is hashed or waits for the compiling thread (BRAIN_WASM_COMPILE_QUEUE), so
 * junk never takes an upload's place there.
 */
export const MIN_WASM_MODULE_BYTES = 64

/** Why `bytes` cannot be a module the ABI admits, told by their first bytes and their length alone; undefined when they may be. */
export const notAModule = (bytes: Uint8Array): string | undefined => {
  const invalid = (why: string) => `the body is not a valid WebAssembly module: ${why}`
  for (let i = 0; i < 4 && i < bytes.length; i++) {
    if (bytes[i] !== WASM_HEADER[i]) return invalid("it does not begin with the WebAssembly magic bytes \\0asm (00 61 73 6d)")
  }
  if (bytes.length < WASM_HEADER.length) return invalid(`it is ${bytes.length} bytes, shorter than the 8-byte WebAssembly header`)
  for (let i = 4; i < WASM_HEADER.length; i++) {
    if (bytes[i] !== WASM_HEADER[i]) {
      const version = [...bytes.subarray(4, 8)].map((b) => b.toString(16).padStart(2, "0")).join(" ")
      return invalid(`its header's version is ${version}, not 01 00 00 00 (version 1, a core module; a component or another version is not admitted)`)
    }
  }
  if (bytes.length < MIN_WASM_MODULE_BYTES) {
    return `the module is ${bytes.length} bytes, fewer than the ${MIN_WASM_MODULE_BYTES} any module the ABI admits takes (its header, its env.memory import and its exports of brain_abi_v1, brain_alloc and an entry; docs/abi.md)`
  }
  return undefined
}

const ALLOWED_IMPORTS = new Map([
  ["env.memory", "memory"],
  ["brain.call", "function"],
  ["brain.fail", "function"]
])

export const sha256 = (bytes: Uint8Array) => crypto.createHash("sha256").update(bytes).digest("hex")

/** Bytes hashed in one step of `sha256InSlices`: about a millisecond of the main thread. */
const HASH_SLICE_BYTES = 1 << 20

/** `sha256`, a slice at a time, the event loop turning between slices: a 32 MiB module is never tens of milliseconds of one step. */
export const sha256InSlices = (bytes: Uint8Array): Promise<string> =>
  new Promise((resolve) => {
    const hash = crypto.createHash("sha256")
    let at = 0
    const step = () => {
      const end = Math.min(bytes.length, at + HASH_SLICE_BYTES)
      hash.update(bytes.subarray(at, end))
      at = end
      if (at < bytes.length) setImmediate(step)
      else resolve(hash.digest("hex"))
    }
    step()
  })

/** Reads an unsigned LEB128 at `at`; returns the value and the next offset. */
const leb = (b: Uint8Array, at: number): [number, number] => {
  let result = 0
  let shift = 0
  for (let i = at; i < b.length && shift < 35; i++) {
    const byte = b[i]!
    result += (byte & 0x7f) * 2 ** shift
    if ((byte & 0x80) === 0) return [result, i + 1]
    shift += 7
  }
  throw new Error("a truncated LEB128 number")
}

const VALTYPES: Readonly<Record<number, string>> = { 0x7f: "i32", 0x7e: "i64", 0x7d: "f32", 0x7c: "f64", 0x7b: "v128", 0x70: "funcref", 0x6f: "externref" }

/** A function type as docs/abi.md writes it: `(i32, i32) -> i64`, `(i32, i32) -> ()`. */
const typeText = (params: ReadonlyArray<string>, results: ReadonlyArray<string>) =>
  `(${params.join(", ")}) -> ${results.length === 1 ? results[0] : `(${results.join(", ")})`}`

/** What admission reads from a module's binary that the JS API does not show. */
interface ModuleLayout {
  /** The `env.memory` import's limits (undefined when there is none), and its kind. */
  readonly memory: { readonly limits: MemoryLimits | undefined; readonly shared: boolean; readonly memory64: boolean }
  /** The types of the functions it imports (`module.name`) and exports, by name. */
  readonly imports: Map<string, string>
  readonly exports: Map<string, string>
  /** The index of each exported global, by name, and where the global section's entries are (read only when needed: `i32Global`). */
  readonly globals: Map<string, number>
  readonly globalSection: { readonly start: number; readonly end: number } | undefined
  /** The tables it defines, in order: their initial and maximum sizes (undefined when it declares none). */
  readonly tables: ReadonlyArray<{ readonly initial: number; readonly maximum: number | undefined }>
}

/**
 * Reads a module's layout from its type, import, function and export sections in one walk. Only
 * the plain value types are read: a type section with anything else throws, as does a truncated one.
 */
export const moduleLayout = (b: Uint8Array): ModuleLayout => {
  let at = 8
  const name = (): string => {
    const [len, next] = leb(b, at)
    at = next + len
    return Buffer.from(b.subarray(next, next + len)).toString("utf8")
  }
  const valtypes = (): Array<string> => {
    const [count, next] = leb(b, at)
    at = next
    const out: Array<string> = []
    for (let i = 0; i < count; i++) {
      const t = VALTYPES[b[at++]!]
      if (t === undefined) throw new Error("a value type this host does not read")
      out.push(t)
    }
    return out
  }
  const types: Array<string> = []
  /** The type index of each function, imported ones first (the function index space). */
  const functions: Array<number> = []
  const imports = new Map<string, string>()
  const exports = new Map<string, string>()
  const globals = new Map<string, number>()
  const tables: Array<{ initial: number; maximum: number | undefined }> = []
  let globalSection: ModuleLayout["globalSection"]
  let memory: ModuleLayout["memory"] = { limits: undefined, shared: false, memory64: false }
  while (at < b.length) {
    const id = b[at]!
    const [size, start] = leb(b, at + 1)
    const end = start + size
    at = start
    if (id === 1) {
      const [count, first] = leb(b, at)
      at = first
      for (let i = 0; i < count; i++) {
        if (b[at++] !== 0x60) throw new Error("a type that is not a function type")
        const params = valtypes()
        types.push(typeText(params, valtypes()))
      }
    } else if (id === 2) {
      const [count, first] = leb(b, at)
      at = first
      for (let i = 0; i < count; i++) {
        const full = `${name()}.${name()}`
        const kind = b[at++]!
        if (kind === 0) {
          const [type, next] = leb(b, at)
          at = next
          functions.push(type)
          imports.set(full, types[type] ?? "?")
        } else if (kind === 1) {
          at++
          const flags = b[at++]!
          ;[, at] = leb(b, at)
          if (flags & 1) [, at] = leb(b, at)
        } else if (kind === 2) {
          const flags = b[at++]!
          const [initial, afterInitial] = leb(b, at)
          at = afterInitial
          let maximum: number | undefined
          if (flags & 1) [maximum, at] = leb(b, at)
          if (full === "env.memory") memory = { limits: { initial, maximum }, shared: (flags & 2) !== 0, memory64: (flags & 4) !== 0 }
        } else if (kind === 3) at += 2
        else throw new Error(`an import of unknown kind ${kind}`)
      }
    } else if (id === 3) {
      const [count, first] = leb(b, at)
      at = first
      for (let i = 0; i < count; i++) {
        const [type, next] = leb(b, at)
        at = next
        functions.push(type)
      }
    } else if (id === 7) {
      const [count, first] = leb(b, at)
      at = first
      for (let i = 0; i < count; i++) {
        const exported = name()
        const kind = b[at++]!
        const [index, next] = leb(b, at)
        at = next
        if (kind === 0) exports.set(exported, types[functions[index] ?? -1] ?? "?")
        else if (kind === 3) globals.set(exported, index)
      }
    } else if (id === 6) {
      globalSection = { start, end }
    } else if (id === 4) {
      const [count, first] = leb(b, at)
      at = first
      for (let i = 0; i < count; i++) {
        // funcref or externref, then limits: flags (bit 0: a maximum follows), the initial size, the maximum.
        const type = b[at++]
        if (type !== 0x70 && type !== 0x6f) throw new Error("a table of a type this host does not read")
        const flags = b[at++]!
        if (flags > 1) throw new Error("a table whose limits this host does not read")
        const [initial, next] = leb(b, at)
        at = next
        let maximum: number | undefined
        if (flags & 1) [maximum, at] = leb(b, at)
        tables.push({ initial, maximum })
      }
    }
    at = end
  }
  return { memory, imports, exports, globals, globalSection, tables }
}

/** Reads a signed LEB128 of at most 32 bits at `at`; returns the value and the next offset. */
const sleb32 = (b: Uint8Array, at: number): [number, number] => {
  let result = 0
  let shift = 0
  for (let i = at; i < b.length && shift < 35; i++) {
    const byte = b[i]!
    result |= (byte & 0x7f) << shift
    shift += 7
    if ((byte & 0x80) === 0) return [shift < 32 && (byte & 0x40) !== 0 ? result | (-1 << shift) : result, i + 1]
  }
  throw new Error("a truncated LEB128 number")
}

/**
 * The value of the exported global `name` when it is an immutable `i32` set by a plain `i32.const`;
 * otherwise why not. The module imports no globals (admission allows none), so its global indices
 * are those of its global section. Only the entries before it are walked, and only the constant
 * forms a global of a plain value type can have are read.
 */
export const i32Global = (b: Uint8Array, layout: ModuleLayout, name: string): number | string => {
  const index = layout.globals.get(name)
  if (index === undefined) return `${name} is not a global`
  if (layout.globalSection === undefined) return `${name} is not in the module's global section`
  const [count, first] = leb(b, layout.globalSection.start)
  let at = first
  if (index >= count) return `${name} is not in the module's global section`
  for (let i = 0; ; i++) {
    const type = b[at++]
    const mutable = b[at++]
    const op = b[at++]
    if (i === index) {
      if (type !== 0x7f || mutable !== 0) return `${name} must be an immutable i32 global`
      if (op !== 0x41) return `${name} must be set by a plain i32.const`
      const [value, next] = sleb32(b, at)
      if (b[next] !== 0x0b) return `${name} must be set by a plain i32.const`
      return value
    }
    // Skip this entry's initializer: one constant instruction, then `end`.
    if (op === 0x41 || op === 0x42) at = slebEnd(b, at)
    else if (op === 0x43) at += 4
    else if (op === 0x44) at += 8
    else if (op === 0x23 || op === 0xd2) [, at] = leb(b, at)
    else if (op === 0xd0) at += 1
    else if (op === 0xfd && b[at] === 0x0c) at += 17
    else return `the global section has an initializer this host does not read (before ${name})`
    if (b[at++] !== 0x0b) return `the global section has an initializer this host does not read (before ${name})`
    if (at > layout.globalSection.end) return "the global section is cut short"
  }
}

/** Where the signed LEB128 at `at` (of any length: an i64.const's) ends. */
const slebEnd = (b: Uint8Array, at: number): number => {
  for (let i = at; i < b.length; i++) if ((b[i]! & 0x80) === 0) return i + 1
  throw new Error("a truncated LEB128 number")
}

/** The type each ABI function must have (docs/abi.md, "Imports" and "Exports"). */
const ABI_TYPES: ReadonlyArray<readonly ["imports" | "exports", string, string]> = [
  ["imports", "brain.call", "(i32, i32, i32, i32) -> i64"],
  ["imports", "brain.fail", "(i32, i32) -> ()"],
  ["exports", "brain_alloc", "(i32) -> i32"],
  ["exports", "brain_run", "(i32, i32) -> i64"],
  ["exports", "brain_tool", "(i32, i32) -> i64"]
]

/** A loop's global named this and then an Event kind: its input carries Events of the kinds so named only (docs/abi.md, "The input's Events"). */
export const EVENT_KIND_EXPORT = "brain_events_kind_"

/** The optional markers a module may export, each a global of any type (docs/abi.md, "Exports"); and those named EVENT_KIND_EXPORT and a kind. */
const OPTIONAL_MARKERS: ReadonlySet<string> = new Set([
  "brain_transcript_tail",
  "brain_transcript_tail_length",
  "brain_events_from_end",
  "brain_configuration_unread",
  "brain_runtime_unread",
  "brain_model_metadata_unread"
])

export interface AdmissionLimits {
  readonly maxModuleBytes: number
  readonly maxMemoryBytes: number
}

/** Modules. Refusals a WasmHost remembers, and admitted modules it can find again (Verdicts). */
export const VERDICTS_KEPT = 1_024

/**
 * What one WasmHost decided of the modules it was given, by content hash: why it refused one, and
 * an admitted module while anything else still holds it (a weak reference: the compiled-module
 * cache of AgentloopsModules.ts, a session's activation; this keeps no compiled module alive). At
 * most VERDICTS_KEPT of each, the oldest dropped first. Its limits are the host's, so a verdict
 * holds for every later admission of the same bytes but for the size bound, checked first.
 */
export class Verdicts {
  private readonly refused = new Map<string, string>()
  private readonly admitted = new Map<string, WeakRef<AdmittedModule>>()

  /** Why `hash` was refused, the module admitted under it, or undefined when neither is known. */
  find(hash: string): string | AdmittedModule | undefined {
    const reason = this.refused.get(hash)
    if (reason !== undefined) return reason
    const module = this.admitted.get(hash)?.deref()
    if (module === undefined) this.admitted.delete(hash)
    return module
  }

  refuse(hash: string, reason: string) {
    keep(this.refused, hash, reason)
  }

  admit(module: AdmittedModule) {
    keep(this.admitted, module.hash, new WeakRef(module))
  }
}

const keep = <V>(map: Map<string, V>, key: string, value: V) => {
  map.delete(key)
  map.set(key, value)
  if (map.size > VERDICTS_KEPT) map.delete(map.keys().next().value!)
}

/**
 * Admits a guest module: refused past the size bound or without the Wasm header (`notAModule`), else found among `verdicts` by the SHA-256 of
 * its bytes, else compiled (off the main thread, Compiler.ts; a `shipped` module, which is Brain's
 * own, here with `WebAssembly.compile`) and checked, and the verdict kept.
 */
export const admitModule = (
  bytes: Uint8Array,
  limits: AdmissionLimits,
  verdicts: Verdicts = new Verdicts(),
  options: AdmitOptions = {},
  queue: CompileQueue = new CompileQueue()
): Effect.Effect<AdmittedModule, ModuleRejected> =>
  Effect.gen(function*() {
    const refuse = (reason: string) => Effect.fail(new ModuleRejected({ reason }))
    if (bytes.length > limits.maxModuleBytes) return yield* refuse(tooLarge(bytes, limits))
    // Junk is refused by its first bytes, before it is hashed or takes a place in the compile queue.
    const junk = notAModule(bytes)
    if (junk !== undefined) return yield* refuse(junk)
    const hash = yield* Effect.promise(() => sha256InSlices(bytes))
    const known = verdicts.find(hash)
    if (typeof known === "string") return yield* refuse(known)
    if (known !== undefined) return known
    const underWay = options.shipped === true ? undefined : queue.underWayFor(hash)
    if (options.upload === true && options.shipped !== true && underWay === undefined && queue.full) {
      return yield* Effect.fail(
        new ModuleRejected({
          reason: `BRAIN_WASM_COMPILE_QUEUE (${queue.max}) uploaded modules are already compiling or waiting to; nothing was stored, retry later`,
          overloaded: true
        })
      )
    }
    const compiled = yield* Effect.promise(() =>
      options.shipped === true
        ? WebAssembly.compile(bytes).then((ok) => ({ ok }), (err: Error) => ({ error: err.message }))
        : underWay ?? queue.run(bytes, hash)
    )
    if ("error" in compiled) {
      // A thread that failed says nothing of the module: the next admission compiles it again.
      // Nothing is known wrong with the module: refused as the server's own passing fault (503, retryable), not a bad request.
      if ("transient" in compiled && compiled.transient === true) {
        return yield* Effect.fail(
          new ModuleRejected({ reason: `the module could not be compiled now (the compile thread failed: ${compiled.error}); nothing was stored, retry later`, overloaded: true })
        )
      }
      const reason = `the body is not a valid WebAssembly module: ${compiled.error}`
      verdicts.refuse(hash, reason)
      return yield* refuse(reason)
    }
    const checked = checkModule(bytes, compiled.ok, limits, hash)
    if (typeof checked === "string") {
      verdicts.refuse(hash, checked)
      return yield* refuse(checked)
    }
    verdicts.admit(checked)
    return checked
  })

const tooLarge = (bytes: Uint8Array, limits: AdmissionLimits) => `the module is ${bytes.length} bytes, above BRAIN_MAX_WASM_MODULE_BYTES (${limits.maxModuleBytes})`

/** Why admission refuses a module that exports neither entry (`checkModule`). */
export const NO_ENTRY = "the module exports neither brain_run (an Agentloop) nor brain_tool (a tool)"

/**
 * Why admission refuses `bytes` with `limits` (the reason an upload gets), or undefined when it
 * admits them: the same checks as `admitModule`, compiled here, synchronously, with no verdicts
 * kept. For scripts/build-guests.js, which checks an author's module before writing it.
 */
export const refusalOf = (bytes: Uint8Array, limits: AdmissionLimits): string | undefined => {
  if (bytes.length > limits.maxModuleBytes) return tooLarge(bytes, limits)
  const junk = notAModule(bytes)
  if (junk !== undefined) return junk
  let module: WebAssembly.Module
  try {
    module = new WebAssembly.Module(bytes)
  } catch (err) {
    return `the body is not a valid WebAssembly module: ${(err as Error).message}`
  }
  const checked = checkModule(bytes, module, limits, sha256(bytes))
  return typeof checked === "string" ? checked : undefined
}

/** The admitted module `module` (compiled from `bytes`) is, or why it is refused. */
const checkModule = (bytes: Uint8Array, module: WebAssembly.Module, limits: AdmissionLimits, hash: string): AdmittedModule | string => {
  const refuse = (reason: string) => reason
  for (const i of WebAssembly.Module.imports(module)) {
    const allowed = ALLOWED_IMPORTS.get(`${i.module}.${i.name}`)
    if (allowed !== i.kind) {
      return refuse(`the module imports ${i.module}.${i.name} (${i.kind}); the ABI allows only env.memory, brain.call and brain.fail (docs/abi.md)`)
    }
  }
  const exports = new Map(WebAssembly.Module.exports(module).map((e) => [e.name, e.kind]))
  // The host's names on a twin (TwinExports.ts): a guest's own would be taken for the instrumentation's.
  for (const name of exports.keys()) {
    if (name.startsWith(HOST_NAME_PREFIX)) {
      return refuse(`the module exports ${name}: names starting with ${HOST_NAME_PREFIX} are reserved for the host (docs/abi.md, "Exports")`)
    }
  }
  if (!exports.has("brain_abi_v1")) return refuse("the module has no brain_abi_v1 export: it does not declare ABI version 1")
  if (exports.get("brain_alloc") !== "function") return refuse("the module does not export the function brain_alloc")
  const marker = exports.get("brain_abi_v1")
  if (marker !== "function" && marker !== "global") return refuse(`brain_abi_v1 must be a function or a global, not a ${marker}`)
  const loop = exports.get("brain_run") === "function"
  const tool = exports.get("brain_tool") === "function"
  if (!loop && !tool) return refuse(NO_ENTRY)
  // The optional markers are globals: one of another kind (a toolchain's function) is refused, not
  // silently ignored, and so is the Event kinds' prefix naming no kind.
  for (const [name, kind] of exports) {
    if (!OPTIONAL_MARKERS.has(name) && !name.startsWith(EVENT_KIND_EXPORT)) continue
    if (kind !== "global") return refuse(`${name} is not a global (it is a ${kind}): the ABI's optional markers are globals (docs/abi.md, "Exports")`)
    if (name === EVENT_KIND_EXPORT) return refuse(`${name} names no Event kind: a global brain_events_kind_<kind> names one (docs/abi.md, "The input's Events")`)
  }
  let layout: ModuleLayout
  try {
    layout = moduleLayout(bytes)
  } catch (err) {
    return refuse(`the module's sections cannot be read: ${(err as Error).message}`)
  }
  // Each ABI function with its type, so that a wrong one is refused now rather than at its first call.
  for (const [where, fn, expected] of ABI_TYPES) {
    const actual = layout[where].get(fn)
    if (actual !== undefined && actual !== expected) return refuse(`${fn} must be ${expected}, not ${actual} (docs/abi.md)`)
  }
  let tableEntries = 0
  for (const [i, table] of layout.tables.entries()) {
    if (table.maximum === undefined) {
      return refuse(`table ${i} declares no maximum: every table must declare one, ${MAX_WASM_TABLE_ENTRIES} entries at most for all of them (docs/abi.md, "Limits")`)
    }
    tableEntries += table.maximum
  }
  if (tableEntries > MAX_WASM_TABLE_ENTRIES) {
    return refuse(`the module's tables may hold ${tableEntries} entries in all (their declared maxima), above ${MAX_WASM_TABLE_ENTRIES} (docs/abi.md, "Limits")`)
  }
  const { memory } = layout
  if (!memory.limits) return refuse("the module does not import its memory as env.memory")
  if (memory.shared || memory.memory64) return refuse("env.memory must be a plain 32-bit memory, neither shared nor 64-bit")
  const maxPages = Math.floor(limits.maxMemoryBytes / PAGE_BYTES)
  if (memory.limits.initial > maxPages) {
    return refuse(
      `the module asks for ${memory.limits.initial * PAGE_BYTES} bytes of memory at start, above BRAIN_MAX_WASM_MEMORY_BYTES (${limits.maxMemoryBytes})`
    )
  }
  // A loop that reads the transcript's tail (docs/abi.md, "The transcript's tail") says so with a
  // global, and may say with another how many of the last messages it needs.
  const tail = loop && exports.get("brain_transcript_tail") === "global"
  let tailMessages = TRANSCRIPT_TAIL
  if (exports.has("brain_transcript_tail_length")) {
    if (!tail) return refuse("brain_transcript_tail_length is only for a loop that also exports the global brain_transcript_tail (docs/abi.md)")
    let value: number | string
    try {
      value = i32Global(bytes, layout, "brain_transcript_tail_length")
    } catch (err) {
      value = `the global section cannot be read: ${(err as Error).message}`
    }
    if (typeof value === "string") return refuse(`${value} (docs/abi.md, "The transcript's tail")`)
    if (value < 0) return refuse(`brain_transcript_tail_length is ${value}: a number of messages cannot be negative`)
    tailMessages = value
  }
  // And one whose input Events start at its predecessor's end ("The input's Events"), with another.
  const eventsFromEnd = loop && exports.get("brain_events_from_end") === "global"
  // And one that reads only some kinds of Event in its input, with a global for each.
  const eventKinds = new Set<string>()
  if (loop) {
    for (const [name, kind] of exports) {
      if (kind === "global" && name.startsWith(EVENT_KIND_EXPORT) && name.length > EVENT_KIND_EXPORT.length) eventKinds.add(name.slice(EVENT_KIND_EXPORT.length))
    }
  }
  // And one that does not read its configuration, which its input then leaves out ("The entries").
  const configurationUnread = loop && exports.get("brain_configuration_unread") === "global"
  // And one that does not read the runtime envelope, which its input then leaves out too.
  const runtimeUnread = loop && exports.get("brain_runtime_unread") === "global"
  // And one that reads of a model's answer only what the official loop reads, whose answers then leave the rest out.
  const modelMetadataUnread = loop && exports.get("brain_model_metadata_unread") === "global"
  return {
    hash,
    module,
    memory: memory.limits,
    loop,
    tool,
    tail,
    tailMessages,
    eventsFromEnd,
    ...(eventKinds.size > 0 ? { eventKinds } : {}),
    configurationUnread,
    runtimeUnread,
    modelMetadataUnread,
    bytes: bytes.length
  }
}
