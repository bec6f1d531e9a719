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
 * `brain.fail`, and `--optimize`. It is then checked the way admission checks it (docs/abi.md):
 * it imports only `env.memory`, `brain.call` and `brain.fail`, exports `brain_abi_v1` and
 * `brain_alloc`, and `brain_run` or `brain_tool`. A module that would be refused fails the build.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

/** The flags every guest is compiled with; paths are relative to ROOT, which is asc's base directory. */
export const ASC_FLAGS = [
  "--importMemory",
  // Brain gives every activation a fresh memory, which WebAssembly zero-fills: zero bytes need no data segment.
  "--zeroFilledMemory",
  "--runtime", "stub",
  "--optimize",
  "--use", "abort=guest/brain/abi/brainAbort",
  "--noColors"
]

const ALLOWED_IMPORTS = new Set(["env.memory:memory", "brain.call:function", "brain.fail:function"])

/** Why admission would refuse `bytes`, or undefined when it would not. */
export const admissionProblem = (bytes, { entry = true } = {}) => {
  const module = new WebAssembly.Module(bytes)
  const imports = WebAssembly.Module.imports(module).map((i) => `${i.module}.${i.name}:${i.kind}`)
  const extra = imports.filter((i) => !ALLOWED_IMPORTS.has(i))
  if (extra.length > 0) return `imports ${extra.join(", ")} (only env.memory, brain.call and brain.fail are allowed)`
  const exports = new Set(WebAssembly.Module.exports(module).map((e) => e.name))
  for (const name of ["brain_abi_v1", "brain_alloc"]) if (!exports.has(name)) return `does not export ${name}`
  if (entry && !exports.has("brain_run") && !exports.has("brain_tool")) return "exports neither brain_run nor brain_tool"
  return undefined
}

/**
 * Compiles `entry` (a path) to `outFile`; throws with asc's diagnostics when it fails or the
 * module would be refused, else returns them (warnings). `checkEntry: false` skips the check for
 * `brain_run`/`brain_tool` (test probes).
 */
export const compileGuest = async (entry, outFile, { checkEntry = true } = {}) => {
  // Loaded here, not at the top: a start that finds the guests up to date does not pay for it.
  const { default: asc } = await import("assemblyscript/asc")
  let diagnostics = ""
  const sink = { write: (chunk) => void (diagnostics += String(chunk)) }
  const { error } = await asc.main(
    [path.relative(ROOT, path.resolve(entry)), "--outFile", path.resolve(outFile), "--baseDir", ROOT, ...ASC_FLAGS],
    { stdout: sink, stderr: sink }
  )
  if (error) throw new Error(`asc failed for ${entry}: ${error.message}\n${diagnostics}`)
  const problem = admissionProblem(fs.readFileSync(outFile), { entry: checkEntry })
  if (problem) throw new Error(`${entry}: Brain would refuse this module: it ${problem}`)
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

/** Builds the shipped loops unless they are up to date (or `force`); prints what it did. */
export const buildShipped = async ({ force = false, log = (line) => process.stdout.write(`${line}\n`) } = {}) => {
  if (!force && shippedUpToDate()) {
    log("guests up to date (dist/loops)")
    return
  }
  await buildAll(shippedGuests(), log)
}

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
