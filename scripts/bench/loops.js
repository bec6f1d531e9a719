#!/usr/bin/env node
// Whole turns over HTTP with the official loop as WebAssembly (as served: a session naming no
// agentloop) beside its TypeScript reference run in the main thread (agentloop "official-ts"),
// in ONE server process (scripts/bench/loopsServer.js; one each with --two-servers), next to plain node:http doing one
// fdatasync per request, all measured in the same run.
//
//   npm run bench:loops [-- --seconds 4] [--turns-per-session 20] [--schemas 30] [--answer-bytes 2000]
//                       [--two-servers] [--shapes text,schemas,answers,tools]
//
// Each sync send is a complete turn with the scripted instant model. The "schemas" rows are text
// turns of sessions that declare --schemas tools with their input schemas, as agents' sessions
// do (a Wasm loop that reads its configuration is given it every turn; the official loop, since
// brain_configuration_unread, is not); the "answers" rows, text turns
// whose answer is --answer-bytes of prose, as a model's usually is. Conversations are
// `--turns-per-session` turns long: a client starts a new session after that many, so a
// transcript never grows past it (creation is outside the timed calls). At one session a single
// client alternates a Wasm turn and a TypeScript turn; at 64, both loops are first run untimed at
// that concurrency, then phases alternate between the loops and are pooled per loop; either way
// neither loop gets the quieter stretch of a noisy machine, nor pays the server's warm-up.
// `--two-servers`: each loop in a server process of its own (the Wasm loop's server as served, the
// TypeScript loop's the same program), phases alternating between them as they do in one: what a
// deployment of either loop alone would do, without the other loop's code and objects in the same
// heap and caches. `--shapes`: only those rows.
// Targets (the WasmHost issue): the Wasm turn's p50 at one session ≤ 1.15× the in-process turn's;
// its turns/s at 64 sessions ≥ 0.9× the in-process loop's.
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { ms, pct, numberFlag } from "./stats.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const seconds = numberFlag("--seconds", 4)
const TURNS_PER_SESSION = numberFlag("--turns-per-session", 20)
const SCHEMAS = numberFlag("--schemas", 30)
const ANSWER_BYTES = numberFlag("--answer-bytes", 2000)
const TWO_SERVERS = process.argv.includes("--two-servers")
const shapesAt = process.argv.indexOf("--shapes")
const SHAPE_NAMES = shapesAt > 0 ? process.argv[shapesAt + 1].split(",") : ["text", "schemas", "answers", "tools"]

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bench-loops-"))
const children = []
process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL")
  fs.rmSync(tmp, { recursive: true, force: true })
})

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
const request = (port, method, p, body) =>
  new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const req = http.request(
      { host: "127.0.0.1", port, method, path: p, agent, headers: data ? { "content-type": "application/json", "content-length": data.length } : {} },
      (res) => {
        const chunks = []
        res.on("data", (c) => chunks.push(c))
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString()
          if (res.statusCode >= 300) return reject(new Error(`${method} ${p}: ${res.statusCode} ${text.slice(0, 300)}`))
          resolve(text ? JSON.parse(text) : undefined)
        })
      }
    )
    req.on("error", reject)
    req.end(data)
  })

/** Spawns a process and waits until its output matches `ready`; returns the match. */
const spawnUntil = async (argv, ready, env = {}) => {
  const child = spawn(process.execPath, argv, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } })
  children.push(child)
  let log = ""
  child.stdout.on("data", (d) => void (log = (log + d).slice(-20_000)))
  child.stderr.on("data", (d) => void (log = (log + d).slice(-20_000)))
  const deadline = Date.now() + 30_000
  while (!ready.test(log)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${argv.join(" ")} did not start:\n${log}`)
    await new Promise((r) => setTimeout(r, 20))
  }
  return { child, match: ready.exec(log) }
}

const BASELINE = `
const http = require("node:http"), fs = require("node:fs")
const fd = fs.openSync(process.argv[1], "a")
const record = Buffer.alloc(200, 120)
http.createServer((req, res) => {
  const chunks = []
  req.on("data", (c) => chunks.push(c))
  req.on("end", () => {
    try { JSON.parse(Buffer.concat(chunks).toString() || "null") } catch {}
    fs.write(fd, record, 0, record.length, null, () => fs.fdatasync(fd, () => {
      const body = JSON.stringify({ ok: true })
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
      res.end(body)
    }))
  })
}).listen(0, "127.0.0.1", function () { console.log("listening " + this.address().port) })
`

/** `concurrency` clients run `turn(i)` back to back for `durationMs`. */
const closedLoop = async (turn, concurrency, durationMs) => {
  const latencies = []
  const deadline = performance.now() + durationMs
  const t0 = performance.now()
  await Promise.all(Array.from({ length: concurrency }, async (_, i) => {
    while (performance.now() < deadline) {
      const t = await turn(i)
      if (t !== undefined) latencies.push(t)
    }
  }))
  const elapsed = (performance.now() - t0) / 1000
  latencies.sort((a, b) => a - b)
  return { rate: latencies.length / elapsed, p50: pct(latencies, 50), p99: pct(latencies, 99), n: latencies.length, latencies, elapsed }
}

// ---------------------------------------------------------------------------------------------

const baseline = await spawnUntil(["-e", BASELINE, path.join(tmp, "baseline.log")], /listening (\d+)/)
const baselinePort = Number(baseline.match[1])

const freePort = () =>
  new Promise((resolve) => {
    const probe = http.createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address()
      probe.close(() => resolve(port))
    })
  })
/** The server each loop's sessions live on: one for both, or one each (--two-servers). */
const servers = {}
for (const loop of TWO_SERVERS ? ["wasm", "ts"] : ["wasm"]) {
  const port = await freePort()
  // As bin/brain.js and `npm start` run the server: its young generation and threadpool size.
  const started = await spawnUntil(["--max-semi-space-size=32", path.join(ROOT, "scripts/bench/loopsServer.js")], /listening/i, {
    UV_THREADPOOL_SIZE: "64",
    BRAIN_LISTEN: `127.0.0.1:${port}`,
    BRAIN_DATA_DIR: path.join(tmp, `data-${loop}`)
  })
  servers[loop] = { port, pid: started.child.pid }
}
if (!TWO_SERVERS) servers.ts = servers.wasm

/** A tool as agents declare them: a description and an input schema of three described properties (about 470 bytes of JSON). */
const declared = (i) => ({
  name: i === 0 ? "t" : `read_file_${i}`,
  description: `Reads the file at the given path and returns its contents, or an error when the path does not exist or cannot be read (tool ${i}).`,
  input_schema: {
    type: "object",
    properties: {
      path: { type: "string", description: "The absolute path of the file to read" },
      offset: { type: "integer", description: "The line to start at, 1-based" },
      limit: { type: "integer", description: "How many lines to read at most" }
    },
    required: ["path"]
  }
})

/** `bytes` of English prose in short paragraphs (newlines, which JSON escapes, among them). */
function prose(bytes) {
  const paragraph = "The function reads the configuration file, checks each entry against its schema and returns the errors it found.\nIt never throws: a caller checks the list it gets back.\n\n"
  return paragraph.repeat(Math.ceil(bytes / paragraph.length)).slice(0, bytes)
}

const SHAPES = {
  text: { tools: 0, model: { provider: "scripted" } },
  // Text turns of a session that declares SCHEMAS tools with their schemas, as agents do.
  schemas: { tools: 0, model: { provider: "scripted" }, declared: Array.from({ length: SCHEMAS }, (_, i) => declared(i)) },
  // Text turns whose answer is ANSWER_BYTES of prose in paragraphs, as a model's usually is: the loop reads it and saves it.
  answers: { tools: 0, model: { provider: "scripted", replies: [{ text: prose(ANSWER_BYTES) }] } },
  tools: {
    tools: 4,
    model: { provider: "scripted", replies: [{ tool_calls: [0, 1, 2, 3].map((i) => ({ name: "t", input: { i } })) }, { text: "done" }] }
  }
}
const LOOPS = { wasm: {}, ts: { agentloop: "official-ts" } }

/** A client's turns: a new session every TURNS_PER_SESSION turns (untimed), then timed sync sends. */
const client = (loop, shape) => {
  const state = []
  return async (i) => {
    const s = (state[i] ??= { id: undefined, turns: 0 })
    if (s.id === undefined || s.turns >= TURNS_PER_SESSION) {
      s.id = (await request(servers[loop].port, "POST", "/v1/sessions", { model: SHAPES[shape].model, tools: SHAPES[shape].declared ?? [{ name: "t" }], ...LOOPS[loop] })).session_id
      s.turns = 0
    }
    const t0 = performance.now()
    await request(servers[loop].port, "POST", `/v1/sessions/${s.id}/messages`, { input: { message: "hello" } })
    s.turns++
    return performance.now() - t0
  }
}

// Before any phase: the server makes the official loop's instrumented twin in the background after
// it starts (docs/abi.md, "Where a guest runs"), and runs it on worker threads until then. Three
// seconds of turns first, so that every phase measures the loop as a running server serves it.
await closedLoop(client("wasm", "text"), 4, 3000)
// A server of the TypeScript loop's own is warmed the same way.
if (TWO_SERVERS) await closedLoop(client("ts", "text"), 4, 3000)

/**
 * The server's main thread's CPU so far, in ms, as the kernel counts it (user + system; the
 * clock ticks of /proc are 10 ms, so a figure is read over many turns). Its per-turn figure moves
 * less with the machine's load than rates and latencies do.
 */
const TICK_MS = 10
const mainThreadCpuMs = (loop) => {
  const { pid } = servers[loop]
  const fields = fs.readFileSync(`/proc/${pid}/task/${pid}/stat`, "utf8").split(") ")[1].split(" ")
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS
}

/** Pools phases of one loop: rates over the summed time, percentiles over all latencies. */
const pooled = (phases) => {
  const latencies = phases.flatMap((p) => p.latencies).sort((a, b) => a - b)
  const elapsed = phases.reduce((t, p) => t + p.elapsed, 0)
  const cpuMs = phases.reduce((t, p) => t + p.cpuMs, 0)
  return { rate: latencies.length / elapsed, p50: pct(latencies, 50), p99: pct(latencies, 99), n: latencies.length, cpuUs: (cpuMs / latencies.length) * 1000 }
}

/**
 * One session: one client sends a turn to a Wasm session and one to a TypeScript session in turn
 * (the order swapped every pair), so both loops meet the machine as it is at the same moments; a
 * loop's rate is its turns over the time its own turns took.
 */
const paired = async (shape, durationMs) => {
  const turns = { wasm: client("wasm", shape), ts: client("ts", shape) }
  await turns.wasm(0)
  await turns.ts(0)
  const runs = { wasm: { latencies: [], elapsed: 0, cpuMs: 0 }, ts: { latencies: [], elapsed: 0, cpuMs: 0 } }
  const deadline = performance.now() + durationMs
  for (let i = 0; performance.now() < deadline; i++) {
    for (const loop of i % 2 === 0 ? ["wasm", "ts"] : ["ts", "wasm"]) {
      const c0 = mainThreadCpuMs(loop)
      const t = await turns[loop](0)
      runs[loop].cpuMs += mainThreadCpuMs(loop) - c0
      runs[loop].latencies.push(t)
      runs[loop].elapsed += t / 1000
    }
  }
  return { wasm: pooled([runs.wasm]), ts: pooled([runs.ts]) }
}

/**
 * Many sessions: phases alternate wasm, ts, … (PHASES of each, one session per client, warmed up
 * at that concurrency before each is timed), pooled per loop, so a slow stretch of the machine
 * falls on both loops.
 */
const PHASES = 4
/** Each loop's warm-up at a concurrency, before its first timed phase there (WARM_UP_MS each, untimed). */
const WARM_UP_MS = 2000
const alternated = async (shape, concurrency, durationMs) => {
  const runs = { wasm: [], ts: [] }
  // Both loops warmed up at this concurrency first, untimed: the server's first seconds of it (its
  // code for that many turns in flight compiled, its heap grown to hold them, the Wasm loop's spare
  // instances made) are paid by neither loop's timed phases. Without it, they fell on the phase run
  // first, always the Wasm loop's: a median of 583 µs of main-thread CPU a turn there, 400 with
  // this warm-up (docs/benchmarks.md, "Wasm text turn, stop 64").
  for (const loop of ["ts", "wasm"]) await closedLoop(client(loop, shape), concurrency, WARM_UP_MS)
  for (let phase = 0; phase < PHASES; phase++) {
    for (const loop of phase % 2 === 0 ? ["wasm", "ts"] : ["ts", "wasm"]) {
      const turn = client(loop, shape)
      await Promise.all(Array.from({ length: concurrency }, (_, i) => turn(i)))
      const c0 = mainThreadCpuMs(loop)
      const r = await closedLoop(turn, concurrency, durationMs / PHASES)
      runs[loop].push({ ...r, cpuMs: mainThreadCpuMs(loop) - c0 })
    }
  }
  return { wasm: pooled(runs.wasm), ts: pooled(runs.ts) }
}

const results = []
for (const shape of SHAPE_NAMES) {
  results.push({ shape, concurrency: 1, ...(await paired(shape, seconds * 2000)) })
  results.push({ shape, concurrency: 64, ...(await alternated(shape, 64, seconds * 1000)) })
}

const floor1 = await closedLoop(async () => {
  const t0 = performance.now()
  await request(baselinePort, "POST", "/", { input: { message: "hello" } })
  return performance.now() - t0
}, 1, seconds * 500)
const floor64 = await closedLoop(async () => {
  const t0 = performance.now()
  await request(baselinePort, "POST", "/", { input: { message: "hello" } })
  return performance.now() - t0
}, 64, seconds * 500)

let disk = ""
try {
  const { execSync } = await import("node:child_process")
  disk = execSync(`df -T ${os.tmpdir()} | tail -1`).toString().trim().split(/\s+/).slice(0, 2).join(" ")
} catch {}

console.log(`# Whole turns over HTTP: the official loop in WebAssembly beside its in-process TypeScript reference
method: ${TWO_SERVERS ? "two server processes, one per loop (--two-servers; each" : "one server process ("}scripts/bench/loopsServer.js: brain serve + the TypeScript loop as "official-ts"),
  closed-loop clients over keep-alive HTTP, sync sends (a whole turn each), the scripted instant model;
  "schemas" = text turns of sessions that declare ${SCHEMAS} tools, each with a description and an input schema
  (about 470 bytes of JSON each: --schemas N), as agents' sessions do; "answers" = text turns whose answer is
  ${ANSWER_BYTES} bytes of prose in paragraphs (--answer-bytes N); "tools" = the model asks for 4 calls
  of an instant in-process tool at once, then answers. Conversations
  of ${TURNS_PER_SESSION} turns (a new session after that many; creation untimed). At 1 session one client
  alternates a Wasm turn and a TypeScript turn (the order swapped every pair) for ${seconds * 2} s; at 64 sessions
  ${PHASES * 2} phases alternate the loops (${seconds / PHASES} s each, after ${WARM_UP_MS / 1000} s untimed of each loop at that concurrency) and each loop's phases are pooled. The server runs
  as bin/brain.js does (--max-semi-space-size=32, UV_THREADPOOL_SIZE=64). Every commit is fdatasync'd.
  Main-thread cpu: the kernel's count (/proc, 10 ms ticks) for the server's JavaScript thread over each
  loop's timed turns, per turn; it moves less with the machine's load than the rates do.
  Baseline: plain node:http, one 200-byte write + fdatasync per request, same client, same run.
node ${process.version}, ${os.cpus().length} cpus, tmp on ${disk}
baseline (1 durable write per request): 1 client p50 ${ms(floor1.p50)} ms (${Math.round(floor1.rate)}/s); 64 clients ${Math.round(floor64.rate)}/s
`)
console.log("| turn | sessions | wasm turns/s | ts turns/s | wasm / ts turns/s | wasm p50 ms | ts p50 ms | wasm / ts p50 | wasm p99 ms | ts p99 ms | main-thread cpu µs/turn (wasm, ts) | n (wasm, ts) |")
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (const r of results) {
  console.log(
    `| ${r.shape} | ${r.concurrency} | ${Math.round(r.wasm.rate)} | ${Math.round(r.ts.rate)} | ${(r.wasm.rate / r.ts.rate).toFixed(2)} | ${ms(r.wasm.p50)} | ${ms(r.ts.p50)} | ${(r.wasm.p50 / r.ts.p50).toFixed(2)} | ${ms(r.wasm.p99)} | ${ms(r.ts.p99)} | ${Math.round(r.wasm.cpuUs)}, ${Math.round(r.ts.cpuUs)} | ${r.wasm.n}, ${r.ts.n} |`
  )
}
const text1 = results.find((r) => r.shape === "text" && r.concurrency === 1)
const text64 = results.find((r) => r.shape === "text" && r.concurrency === 64)
if (text1 !== undefined && text64 !== undefined) console.log(`
targets: text p50 at 1 session wasm/ts ${(text1.wasm.p50 / text1.ts.p50).toFixed(2)} (≤ 1.15: ${text1.wasm.p50 / text1.ts.p50 <= 1.15 ? "met" : "not met"}); ` +
  `text turns/s at 64 sessions wasm/ts ${(text64.wasm.rate / text64.ts.rate).toFixed(2)} (≥ 0.9: ${text64.wasm.rate / text64.ts.rate >= 0.9 ? "met" : "not met"})`)
process.exit(0)
