#!/usr/bin/env node
/**
 * Compiles the AssemblyScript guests (docs/agentloops.md).
 *
 *   node scripts/build-guests.js [--force]              the shipped loops: loops/official → dist/loops/official.wasm,
 *                                                       loops/examples/<name>.ts → dist/loops/examples/<name>.wasm
 *   node scripts/build-guests.js <entry.ts> <out.wasm>  one module of your own, with the same flags and checks
 *
 * The shipped loops are rebuilt only when a source (guest/, loops/, this script, the lockfile that
 * pins asc) is newer than an output, or with --force: an optimized build takes seconds, and
 * `npm test` builds every time.
 *
 * Every module is built with the stub runtime (a bump allocator that never frees: each activation
 * gets a fresh instance, so freeing would only cost time), imported memory, `abort` routed to
 * `brain.fail`, and `--optimize`; its data segments are then merged into one (mergeDataSegments).
 * It is then checked by admission's own check (`refusalOf` in src/layers/wasm/Module.ts, as tsc
 * compiled it into dist/, with the server's default limits): a module an upload would refuse fails
 * the build with the reason the upload would get, and is not written.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import * as crypto from "node:crypto"
import { fileURLToPath, pathToFileURL } from "node:url"

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

/** The flags every guest is compiled with; paths are relative to ROOT, which is asc's base directory. */
export const ASC_FLAGS = [
  "--importMemory",
  // Brain gives every activation a fresh memory, which WebAssembly zero-fills: zero bytes need no data segment.
  "--zeroFilledMemory",
  "--runtime", "stub",
  // Two pages (128 KiB) at start: a text turn, or two rounds of tool calls, fits without growing, and
  // an instance whose memory is left at its initial size is put back for the next activation instead
  // of a new one whose pages must all be mapped again; the put-back writes the whole initial size, so
  // it is no larger than a usual turn needs (docs/agentloops.md, "Build").
  "--initialMemory", "2",
  // No bulk memory instructions (asc copies and fills with its own loops instead, as fast for a
  // turn's strings): a module whose every write is a plain store has its writes counted on the main
  // thread, and an instance put back has only what it wrote zeroed (src/layers/wasm/Instrument.ts,
  // "Written"; docs/agentloops.md, "Build").
  "--disable", "bulk-memory",
  "--optimize",
  "--use", "abort=guest/brain/abi/brainAbort",
  "--noColors"
]

/** Admission's check and the server's default limits, from dist/ (tsc's output). */
const admission = async () => {
  const moduleJs = path.join(ROOT, "dist", "layers", "wasm", "Module.js")
  if (!fs.existsSync(moduleJs)) throw new Error("dist/layers/wasm/Module.js is missing: compile first (npm run build), the build checks a module with admission's own code")
  const { refusalOf, NO_ENTRY } = await import(pathToFileURL(moduleJs).href)
  const { defaults } = await import(pathToFileURL(path.join(ROOT, "dist", "services", "ServerConfig.js")).href)
  return { refusalOf, NO_ENTRY, limits: { maxModuleBytes: defaults.maxWasmModuleBytes, maxMemoryBytes: defaults.maxWasmMemoryBytes } }
}

/**
 * Why admission would refuse `bytes` with the server's default limits (its own reason), or
 * undefined when it would not; `entry: false` lets a module through that exports neither
 * `brain_run` nor `brain_tool` (a test probe, run only by test/guest/harness.ts).
 */
export const admissionProblem = async (bytes, { entry = true } = {}) => {
  const { refusalOf, NO_ENTRY, limits } = await admission()
  const reason = refusalOf(new Uint8Array(bytes), limits)
  return !entry && reason === NO_ENTRY ? undefined : reason
}

const uleb = (bytes, at) => {
  let value = 0
  let shift = 0
  let b
  do {
    b = bytes[at++]
    value += (b & 0x7f) * 2 ** shift
    shift += 7
  } while (b & 0x80)
  return [value, at]
}
const sleb32 = (bytes, at) => {
  let value = 0
  let shift = 0
  let b
  do {
    b = bytes[at++]
    value |= (b & 0x7f) << shift
    shift += 7
  } while (b & 0x80)
  if (shift < 32 && b & 0x40) value |= -1 << shift
  return [value, at]
}
const encodeUleb = (n) => {
  const out = []
  do {
    let b = n & 0x7f
    n = Math.floor(n / 128)
    if (n > 0) b |= 0x80
    out.push(b)
  } while (n > 0)
  return out
}
const encodeSleb32 = (n) => {
  const out = []
  for (;;) {
    const b = n & 0x7f
    n >>= 7
    if ((n === 0 && !(b & 0x40)) || (n === -1 && b & 0x40)) return [...out, b]
    out.push(b | 0x80)
  }
}

/**
 * `bytes` with its active data segments merged into one that spans them, zeros in the gaps (and
 * the data count section, if any, saying 1); `bytes` itself when there is nothing to merge or a
 * segment is not active on memory 0 at an `i32.const` offset.
 *
 * Why: asc emits a segment per static object, split further at zero runs (`--zeroFilledMemory`):
 * the official loop has over 200. V8 keeps per-instance arrays for every segment and copies each
 * at instantiation, and an instance of a memory the worker reuses lives until a full GC (the
 * memory's weak list of instances keeps it through scavenges), so every segment costs every
 * activation twice: 215 segments took a fresh instance from ~2.5 KiB to ~5 KiB of heap and
 * several times the CPU. One segment gives the guest the same memory: active segments are
 * written in order over a zeroed memory, so one spanning them with zeros in the gaps writes the
 * same bytes, and it traps exactly when they would (its end is theirs). Active segments are
 * dropped once written, so `memory.init`/`data.drop` can only refer to segment 0, which behave
 * the same for any dropped segment; a module naming another no longer validates, and fails the
 * build.
 */
export const mergeDataSegments = (bytes) => {
  const sections = []
  let at = 8
  while (at < bytes.length) {
    const id = bytes[at]
    const [size, start] = uleb(bytes, at + 1)
    sections.push({ id, start, end: start + size, header: at })
    at = start + size
  }
  const data = sections.find((s) => s.id === 11)
  if (data === undefined) return bytes
  let [count, p] = uleb(bytes, data.start)
  if (count < 2) return bytes
  const segments = []
  for (let i = 0; i < count; i++) {
    let flags
    ;[flags, p] = uleb(bytes, p)
    if (flags !== 0 || bytes[p] !== 0x41) return bytes
    let offset
    ;[offset, p] = sleb32(bytes, p + 1)
    if (bytes[p] !== 0x0b) return bytes
    let length
    ;[length, p] = uleb(bytes, p + 1)
    segments.push({ offset: offset >>> 0, bytes: bytes.subarray(p, p + length) })
    p += length
  }
  const low = Math.min(...segments.map((s) => s.offset))
  const high = Math.max(...segments.map((s) => s.offset + s.bytes.length))
  const merged = new Uint8Array(high - low)
  for (const s of segments) merged.set(s.bytes, s.offset - low)
  const section = (id, ...payload) => {
    const length = payload.reduce((n, part) => n + part.length, 0)
    return [Uint8Array.from([id, ...encodeUleb(length)]), ...payload]
  }
  const head = Uint8Array.from([...encodeUleb(1), 0, 0x41, ...encodeSleb32(low | 0), 0x0b, ...encodeUleb(merged.length)])
  const parts = [bytes.subarray(0, 8)]
  for (const s of sections) {
    if (s.id === 11) parts.push(...section(11, head, merged))
    else if (s.id === 12) parts.push(...section(12, Uint8Array.from(encodeUleb(1))))
    else parts.push(bytes.subarray(s.header, s.end))
  }
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0))
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.length
  }
  return out
}

/**
 * Compiles `entry` (a path) to `outFile`; throws with asc's diagnostics when it fails or the
 * module would be refused, else returns them (warnings). `checkEntry: false` skips the check for
 * `brain_run`/`brain_tool` (test probes).
 *
 * asc's output is kept in memory, and `outFile` is written only once the module has passed the
 * checks (whole: a file beside it, then renamed over it). A refused module is never written, so
 * nothing at `outFile` can be taken for it: a file already there is left as it was (and stays
 * older than the sources, so the shipped loops are built again next time).
 */
export const compileGuest = async (entry, outFile, { checkEntry = true } = {}) => {
  // Loaded here, not at the top: a start that finds the guests up to date does not pay for it.
  const { default: asc } = await import("assemblyscript/asc")
  let diagnostics = ""
  const sink = { write: (chunk) => void (diagnostics += String(chunk)) }
  const target = path.resolve(outFile)
  let compiled
  const { error } = await asc.main(
    [path.relative(ROOT, path.resolve(entry)), "--outFile", target, "--baseDir", ROOT, ...ASC_FLAGS],
    {
      stdout: sink,
      stderr: sink,
      writeFile: (name, contents, baseDir) => {
        if (path.resolve(baseDir, name) !== target) throw new Error(`asc wrote ${name}, not the module`)
        compiled = contents
      }
    }
  )
  if (error) throw new Error(`asc failed for ${entry}: ${error.message}\n${diagnostics}`)
  if (!(compiled instanceof Uint8Array)) throw new Error(`asc wrote no module for ${entry}\n${diagnostics}`)
  const bytes = mergeDataSegments(compiled)
  const problem = await admissionProblem(bytes, { entry: checkEntry })
  if (problem) throw new Error(`${entry}: Brain would refuse this module: ${problem}`)
  const partial = `${target}.${process.pid}.tmp`
  try {
    fs.writeFileSync(partial, bytes)
    fs.renameSync(partial, target)
  } finally {
    fs.rmSync(partial, { force: true })
  }
  return diagnostics
}

/** The shipped loops: [entry, output] pairs. */
export const shippedGuests = () => {
  const examples = path.join(ROOT, "loops", "examples")
  const out = [[path.join(ROOT, "loops", "official", "index.ts"), path.join(ROOT, "dist", "loops", "official.wasm")]]
  const names = fs.existsSync(examples) ? fs.readdirSync(examples).filter((f) => f.endsWith(".ts")).sort() : []
  for (const name of names) {
    out.push([path.join(examples, name), path.join(ROOT, "dist", "loops", "examples", name.replace(/\.ts$/, ".wasm"))])
  }
  return out
}

const newest = (target) => {
  if (!fs.existsSync(target)) return 0
  const stat = fs.statSync(target)
  if (!stat.isDirectory()) return stat.mtimeMs
  let t = stat.mtimeMs
  for (const e of fs.readdirSync(target)) t = Math.max(t, newest(path.join(target, e)))
  return t
}

/** Whether every shipped output exists and is newer than everything it is built from. */
export const shippedUpToDate = () => {
  const outputs = shippedGuests().map(([, out]) => (fs.existsSync(out) ? fs.statSync(out).mtimeMs : 0))
  const sources = ["guest", "loops", "scripts/build-guests.js", "package-lock.json"].map((p) => newest(path.join(ROOT, p)))
  return Math.min(...outputs) > Math.max(...sources)
}

/** Builds the shipped loops unless they are up to date (or `force`), then their twins; prints what it did. */
export const buildShipped = async ({ force = false, log = (line) => process.stdout.write(`${line}\n`) } = {}) => {
  if (!force && shippedUpToDate()) log("guests up to date (dist/loops)")
  else await buildAll(shippedGuests(), log)
  await buildTwins({ force, log })
}

/**
 * The shipped modules' instrumented twins (src/layers/wasm/InlineModules.ts), made here so that a
 * server runs them on its main thread from its first activation instead of making them with
 * Binaryen after it starts: `dist/loops/twins/<sha256 of the module>.v<TWIN_FORMAT>.wasm` (the
 * twin's digest, then the twin, as a server keeps an uploaded module's), made
 * by the compiled Instrument.ts (so after tsc) unless present and made by the same instrumentation
 * (`made-by`: a digest of it and of Binaryen's version). Twins of modules no longer shipped are
 * removed.
 */
export const buildTwins = async ({ force = false, log = (line) => process.stdout.write(`${line}\n`) } = {}) => {
  const instrumentJs = path.join(ROOT, "dist", "layers", "wasm", "Instrument.js")
  if (!fs.existsSync(instrumentJs)) throw new Error("dist/layers/wasm/Instrument.js is missing: compile first (tsc -p tsconfig.build.json)")
  const twinExportsJs = path.join(ROOT, "dist", "layers", "wasm", "TwinExports.js")
  const { prebuiltTwinName, twinFile } = await import(pathToFileURL(twinExportsJs).href)
  const dir = path.join(ROOT, "dist", "loops", "twins")
  fs.mkdirSync(dir, { recursive: true })
  // What made the twins there: the compiled instrumentation and the Binaryen it runs. tsc rewrites
  // its outputs on every build, so their content decides, not their time.
  const stampFile = path.join(dir, STAMP)
  const stamp = crypto.createHash("sha256")
    .update(fs.readFileSync(instrumentJs))
    .update(fs.readFileSync(twinExportsJs))
    .update(fs.readFileSync(path.join(ROOT, "node_modules", "binaryen", "package.json")))
    .digest("hex")
  const current = !force && fs.existsSync(stampFile) && fs.readFileSync(stampFile, "utf8") === stamp
  if (!current) fs.rmSync(stampFile, { force: true })
  const wanted = new Set([STAMP])
  let instrument
  for (const [, out] of shippedGuests()) {
    const bytes = fs.readFileSync(out)
    const name = prebuiltTwinName(crypto.createHash("sha256").update(bytes).digest("hex"))
    wanted.add(name)
    const file = path.join(dir, name)
    if (current && fs.existsSync(file)) continue
    // Loaded only when a twin is made: Binaryen is a large module.
    instrument ??= (await import(pathToFileURL(instrumentJs).href)).instrument
    const twin = instrument(new Uint8Array(bytes))
    fs.writeFileSync(`${file}.tmp`, twinFile(twin))
    fs.renameSync(`${file}.tmp`, file)
    log(`made the twin of ${path.relative(process.cwd(), out)} (${twin.length} bytes)`)
  }
  for (const f of fs.readdirSync(dir)) if (!wanted.has(f)) fs.rmSync(path.join(dir, f))
  fs.writeFileSync(stampFile, stamp)
}

/** The file in dist/loops/twins/ that says what made the twins beside it. */
const STAMP = "made-by"

const buildAll = async (targets, log) => {
  const started = performance.now()
  for (const [entry, outFile] of targets) {
    fs.mkdirSync(path.dirname(path.resolve(outFile)), { recursive: true })
    const warnings = await compileGuest(entry, outFile)
    if (warnings.trim()) log(warnings.trimEnd())
    log(`built ${path.relative(process.cwd(), path.resolve(outFile))} (${fs.statSync(outFile).size} bytes)`)
  }
  log(`guests built in ${Math.round(performance.now() - started)} ms`)
}

const main = async (args) => {
  const log = (line) => process.stdout.write(`${line}\n`)
  if (args.length === 0 || (args.length === 1 && args[0] === "--force")) {
    await buildShipped({ force: args[0] === "--force", log })
    return 0
  }
  if (args.length !== 2 || args.some((a) => a.startsWith("--"))) {
    process.stderr.write("usage: node scripts/build-guests.js [--force] | <entry.ts> <out.wasm>\n")
    return 2
  }
  await buildAll([[args[0], args[1]]], log)
  return 0
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      process.stderr.write(`${e.message}\n`)
      process.exit(1)
    }
  )
}
