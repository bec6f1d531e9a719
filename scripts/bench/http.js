#!/usr/bin/env node
// HTTP benchmark: the real server (`brain serve`, a child process) over loopback, next to a
// plain node:http server doing one fdatasync per request, measured in the same run.
//
//   npm run bench:http [-- --seconds 5] [--memory-sessions 4000] [--no-profile]
//
// Measures: admission latency (202 for `Prefer: respond-async`), first SSE frame after submit,
// complete text turn latency (sync send, scripted instant model), turns/s at 64 and 256 concurrent
// sessions, private memory per warm and per suspended session, and a short CPU profile of the
// server under the 64-session load.
import { execSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { measure, ms, pct, numberFlag } from "./stats.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const args = process.argv.slice(2)
const seconds = numberFlag("--seconds", 4)
/** Sessions created for the memory slopes, in steps of MEMORY_STEP. */
const memorySessions = numberFlag("--memory-sessions", 4000)
const MEMORY_STEP = 1000
const profile = !args.includes("--no-profile")
const CLK_TCK = (() => {
  try {
    return Number(execSync("getconf CLK_TCK").toString().trim()) || 100
  } catch {
    return 100
  }
})()

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bench-http-"))
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }))

// ---------------------------------------------------------------------------------------------
// Processes

const freePort = () =>
  new Promise((resolve, reject) => {
    const probe = net.createServer()
    probe.on("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address()
      probe.close(() => resolve(port))
    })
  })

/** Spawns a server process and waits until it prints `ready` on a line. */
const spawnServer = async (argv, ready, env = {}) => {
  const child = spawn(process.execPath, argv, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } })
  let log = ""
  child.stdout.on("data", (d) => void (log = (log + d).slice(-20_000)))
  child.stderr.on("data", (d) => void (log = (log + d).slice(-20_000)))
  const deadline = Date.now() + 20_000
  while (!ready.test(log)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${argv.join(" ")} did not start:\n${log}`)
    await new Promise((r) => setTimeout(r, 20))
  }
  const stop = () =>
    new Promise((resolve) => {
      if (child.exitCode !== null) return resolve(child.exitCode)
      child.once("exit", (code) => resolve(code))
      child.kill("SIGTERM")
    })
  return { child, pid: child.pid, log: () => log, stop, match: ready.exec(log) }
}

// A preload that lets the benchmark ask the server for a full GC before reading its memory.
const GC_PRELOAD = path.join(tmp, "gc-on-sigusr2.cjs")
fs.writeFileSync(GC_PRELOAD, "process.on('SIGUSR2', () => { if (global.gc) global.gc() })\n")

const startBrain = async ({ nodeArgs = [], gc = false } = {}) => {
  const port = await freePort()
  const dataDir = fs.mkdtempSync(path.join(tmp, "data-"))
  const argv = [
    ...(gc ? ["--expose-gc", "--require", GC_PRELOAD] : []),
    // As `npm start` and the bin's shebang run it.
    "--max-semi-space-size=32",
    ...nodeArgs,
    path.join(ROOT, "bin/brain.js"),
    "serve",
    "--listen",
    `127.0.0.1:${port}`,
    "--data-dir",
    dataDir
  ]
  const server = await spawnServer(argv, /brain listening/)
  return { ...server, port, dataDir }
}

// The baseline: plain node:http, one ~200-byte write + one fdatasync per request, JSON answer.
const BASELINE = `
const http = require("node:http"), fs = require("node:fs")
const fd = fs.openSync(process.argv[1], "a")
const record = Buffer.alloc(200, 120)
let n = 0
const server = http.createServer((req, res) => {
  const chunks = []
  req.on("data", (c) => chunks.push(c))
  req.on("end", () => {
    try { JSON.parse(Buffer.concat(chunks).toString() || "null") } catch {}
    fs.write(fd, record, 0, record.length, null, (err) => {
      if (err) { res.writeHead(500); return res.end() }
      fs.fdatasync(fd, (err2) => {
        const body = JSON.stringify({ ok: !err2, n: ++n })
        res.writeHead(err2 ? 500 : 200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
        res.end(body)
      })
    })
  })
})
server.keepAliveTimeout = 5000
server.listen(0, "127.0.0.1", () => console.log("listening " + server.address().port))
`

// ---------------------------------------------------------------------------------------------
// Client

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 1024 })

const request = (port, method, p, body, headers = {}) =>
  new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(typeof body === "string" ? body : JSON.stringify(body))
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        method,
        path: p,
        agent,
        headers: { ...(data ? { "content-type": "application/json", "content-length": data.length } : {}), ...headers }
      },
      (res) => {
        const chunks = []
        res.on("data", (c) => chunks.push(c))
        res.on("end", () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }))
        res.on("error", reject)
      }
    )
    req.on("error", reject)
    req.end(data)
  })

const expectStatus = async (promise, status) => {
  const r = await promise
  if (r.status !== status) throw new Error(`expected ${status}, got ${r.status}: ${r.text.slice(0, 300)}`)
  return r.text.length > 0 ? JSON.parse(r.text) : undefined
}

/** Opens an SSE stream and calls onFrame(kind, receivedAt) for each recorded frame. */
const openSse = (port, p, onFrame) =>
  new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, path: p, headers: { accept: "text/event-stream" } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`SSE answered ${res.statusCode}`))
      let pending = ""
      res.setEncoding("utf8")
      res.on("data", (chunk) => {
        const at = performance.now()
        pending += chunk
        let end
        while ((end = pending.indexOf("\n\n")) >= 0) {
          const frame = pending.slice(0, end)
          pending = pending.slice(end + 2)
          const kind = /^event: (.*)$/m.exec(frame)
          if (kind) onFrame(kind[1], at)
        }
      })
      resolve({ close: () => req.destroy() })
    })
    req.on("error", (err) => {
      if (err.code !== "ECONNRESET") reject(err)
    })
    req.end()
  })

/** CPU seconds (user + system) a process has used so far. */
const cpuSeconds = (pid) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK
}

/** CPU seconds the whole machine has spent busy (all cores; idle and iowait excluded). */
const machineBusySeconds = () => {
  const [, ...t] = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).map(Number)
  const [user, nice, system, , , irq, softirq, steal] = t
  return (user + nice + system + irq + softirq + steal) / CLK_TCK
}

/**
 * The same measurement, plus how busy the server process was (100% = one core), this client, and
 * everything else on the machine (in cores: other processes disturbing the run).
 */
const measureWithCpu = async (pid, body, concurrency, durationMs) => {
  const c0 = cpuSeconds(pid)
  const m0 = machineBusySeconds()
  const client0 = process.cpuUsage()
  const t0 = performance.now()
  const r = await measure(body, concurrency, durationMs)
  const wall = (performance.now() - t0) / 1000
  const client = process.cpuUsage(client0)
  const server = cpuSeconds(pid) - c0
  const clientSeconds = (client.user + client.system) / 1e6
  return {
    ...r,
    cpu: (100 * server) / wall,
    clientCpu: (100 * clientSeconds) / wall,
    others: Math.max(0, machineBusySeconds() - m0 - server - clientSeconds) / wall
  }
}

/** Private memory (not shared with other processes), bytes: Private_Clean + Private_Dirty. */
const privateBytes = (pid) => {
  try {
    const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, "utf8")
    const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(rollup)?.[1] ?? 0)
    return (kb("Private_Clean") + kb("Private_Dirty")) * 1024
  } catch {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8")
    return Number(/^RssAnon:\s+(\d+) kB/m.exec(status)[1]) * 1024
  }
}

const settle = (ms) => new Promise((r) => setTimeout(r, ms))

/** Full GC in the server (through the preload), then its private memory. */
const settledPrivateBytes = async (pid) => {
  for (let i = 0; i < 3; i++) {
    process.kill(pid, "SIGUSR2")
    await settle(300)
  }
  return privateBytes(pid)
}

/** Least-squares slope of y over x. */
const slope = (points) => {
  const n = points.length
  const mx = points.reduce((s, [x]) => s + x, 0) / n
  const my = points.reduce((s, [, y]) => s + y, 0) / n
  const num = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0)
  const den = points.reduce((s, [x]) => s + (x - mx) ** 2, 0)
  return num / den
}

const createSessions = async (port, count, body, concurrency = 32) => {
  const ids = []
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < count) {
      next++
      ids.push((await expectStatus(request(port, "POST", "/v1/sessions", body), 201)).session_id)
    }
  }))
  return ids
}

const SCRIPTED = { model: { provider: "scripted" } }
const SEND = { input: { message: "hello" } }

// ---------------------------------------------------------------------------------------------
// 1. The baseline: node:http + one fdatasync per request.

const results = []
const baseline = await spawnServer(["-e", BASELINE, path.join(tmp, "baseline.log")], /listening (\d+)/, { UV_THREADPOOL_SIZE: "64" })
const baselinePort = Number(baseline.match[1])
for (const concurrency of [1, 64]) {
  const r = await measureWithCpu(
    baseline.pid,
    () => request(baselinePort, "POST", "/", SEND).then((x) => x.status === 200 || Promise.reject(new Error(x.text))),
    concurrency,
    seconds * 1000
  )
  results.push({ what: `baseline: node:http + write 200 B + fdatasync, ${concurrency} concurrent`, ...r })
}
await baseline.stop()

// 2. Brain: turns, admission and SSE on one server.

const brain = await startBrain()
{
  const [one] = await createSessions(brain.port, 1, SCRIPTED)
  // Warm-up: JIT and file handles, not measured.
  for (let i = 0; i < 200; i++) await expectStatus(request(brain.port, "POST", `/v1/sessions/${one}/messages`, SEND), 200)
  const turn = await measureWithCpu(
    brain.pid,
    () => expectStatus(request(brain.port, "POST", `/v1/sessions/${one}/messages`, SEND), 200),
    1,
    seconds * 1000
  )
  results.push({ what: "brain: complete text turn (sync send), 1 session", ...turn })

  for (const concurrency of [64, 256]) {
    const ids = await createSessions(brain.port, concurrency, SCRIPTED)
    const r = await measureWithCpu(
      brain.pid,
      (i) => expectStatus(request(brain.port, "POST", `/v1/sessions/${ids[i]}/messages`, SEND), 200),
      concurrency,
      seconds * 1000
    )
    results.push({ what: `brain: turns (sync send), ${concurrency} sessions back to back`, ...r })
  }

  // The HTTP stack's own cost, no journal write: a health check and a session summary.
  const [probe] = await createSessions(brain.port, 1, SCRIPTED)
  for (const [what, p, status] of [["GET /health/live", "/health/live", 204], ["GET /v1/sessions/{id} (summary, no write)", `/v1/sessions/${probe}`, 200]]) {
    const r = await measureWithCpu(brain.pid, () => expectStatus(request(brain.port, "GET", p), status), 64, Math.min(seconds, 3) * 1000)
    results.push({ what: `brain: ${what}, 64 concurrent`, ...r })
  }

  // Admission and first SSE frame, in one loop on one session with one SSE reader: submit
  // (timed until the 202), time until the reader sees turn_started, then wait for turn_ended.
  const [s] = await createSessions(brain.port, 1, SCRIPTED)
  let waiting
  const sse = await openSse(brain.port, `/v1/sessions/${s}/events?after=2`, (kind, at) => waiting?.(kind, at))
  const admission = []
  const firstFrame = []
  const deadline = performance.now() + seconds * 1000
  let warm = 50
  while (performance.now() < deadline || warm > 0) {
    let started
    const ended = new Promise((resolve) => {
      waiting = (kind, at) => {
        if (kind === "turn_started" && started === undefined) started = at
        if (kind === "turn_ended") resolve()
      }
    })
    const t0 = performance.now()
    await expectStatus(request(brain.port, "POST", `/v1/sessions/${s}/messages`, SEND, { prefer: "respond-async" }), 202)
    const t1 = performance.now()
    await ended
    if (warm > 0) {
      warm--
      continue
    }
    admission.push(t1 - t0)
    firstFrame.push(started - t0)
  }
  sse.close()
  for (const [what, xs] of [["brain: admission, 202 for Prefer: respond-async, 1 session", admission], [
    "brain: first SSE frame (turn_started) after submit, 1 session",
    firstFrame
  ]]) {
    xs.sort((a, b) => a - b)
    results.push({ what, p50: pct(xs, 50), p99: pct(xs, 99), n: xs.length })
  }
}
const brainExit = await brain.stop()
if (brainExit !== 0) console.error(`brain exited ${brainExit}:\n${brain.log()}`)

// 3. Memory per warm session (idle_ttl_ms: 0 keeps the actor) and per suspended session (default:
//    released after creation), each on a fresh server: private memory after a full GC at
//    N = 0, 1000, 2000, … sessions; the slope of the least-squares line.

const memory = []
for (const [label, body] of [["warm (idle_ttl_ms: 0)", { ...SCRIPTED, idle_ttl_ms: 0 }], ["suspended (default release)", SCRIPTED]]) {
  const server = await startBrain({ gc: true })
  // Warm-up so that code, JIT and pools are in place before N = 0 is read.
  const warmup = await createSessions(server.port, 200, { ...SCRIPTED, idle_ttl_ms: 1 })
  void warmup
  await settle(500)
  const points = [[0, await settledPrivateBytes(server.pid)]]
  for (let n = MEMORY_STEP; n <= memorySessions; n += MEMORY_STEP) {
    await createSessions(server.port, MEMORY_STEP, body)
    points.push([n, await settledPrivateBytes(server.pid)])
  }
  memory.push({ label, points, perSession: slope(points) })
  await server.stop()
}
// Sessions with history: each runs HISTORY_TURNS turns (7 records each) and is then released.
const HISTORY_TURNS = 20
const HISTORY_STEP = 250
{
  const server = await startBrain({ gc: true })
  const warmup = await createSessions(server.port, 64, SCRIPTED)
  await Promise.all(warmup.map(async (id) => {
    for (let t = 0; t < HISTORY_TURNS; t++) await expectStatus(request(server.port, "POST", `/v1/sessions/${id}/messages`, SEND), 200)
  }))
  await settle(500)
  const points = [[0, await settledPrivateBytes(server.pid)]]
  for (let n = HISTORY_STEP; n <= 2 * HISTORY_STEP; n += HISTORY_STEP) {
    const ids = await createSessions(server.port, HISTORY_STEP, SCRIPTED)
    let next = 0
    await Promise.all(Array.from({ length: 64 }, async () => {
      while (next < ids.length) {
        const id = ids[next++]
        for (let t = 0; t < HISTORY_TURNS; t++) await expectStatus(request(server.port, "POST", `/v1/sessions/${id}/messages`, SEND), 200)
      }
    }))
    points.push([n, await settledPrivateBytes(server.pid)])
  }
  memory.push({ label: `suspended after ${HISTORY_TURNS} turns each (${2 + 7 * HISTORY_TURNS} records)`, points, perSession: slope(points) })
  await server.stop()
}

// 4. A CPU profile of the server under the 64-session turn load.

let profileReport = ""
if (profile) {
  const dir = path.join(tmp, "profile")
  const spawnedAt = performance.now()
  const server = await startBrain({ nodeArgs: ["--cpu-prof", "--cpu-prof-dir", dir] })
  const ids = await createSessions(server.port, 64, SCRIPTED)
  const load = (ms) => measure((i) => expectStatus(request(server.port, "POST", `/v1/sessions/${ids[i]}/messages`, SEND), 200), 64, ms)
  await load(1000) // warm-up, outside the window
  const from = performance.now() - spawnedAt
  await load(Math.min(seconds, 5) * 1000)
  const to = performance.now() - spawnedAt
  await server.stop()
  const file = fs.readdirSync(dir).find((f) => f.endsWith(".cpuprofile"))
  profileReport = file ? summarizeProfile(JSON.parse(fs.readFileSync(path.join(dir, file), "utf8")), from * 1000, to * 1000) : "(no profile written)"
}

/**
 * Self time per function and per area from a .cpuprofile, counting only samples inside the load
 * window [fromUs, toUs] (microseconds since the process started; the profile starts with it).
 */
function summarizeProfile(p, fromUs, toUs) {
  const byId = new Map(p.nodes.map((n) => [n.id, n]))
  const self = new Map()
  const areas = new Map()
  let total = 0
  const areaOf = (url, name) => {
    if (name === "(garbage collector)") return "GC"
    if (name === "(idle)") return "idle (waiting: I/O, fdatasync in the threadpool)"
    if (name === "(program)") return "V8/native (program)"
    if (url.includes("/node_modules/effect/")) return "effect (runtime, Schema, …)"
    if (url.includes("/node_modules/@effect/platform")) return "@effect/platform(-node)"
    if (url.includes("/node_modules/")) return "other dependencies"
    if (url.includes("/dist/")) return "brain (dist/)"
    if (url.startsWith("node:")) return "node internals (http, net, fs, streams)"
    return "native / builtins"
  }
  const files = new Map()
  let at = 0
  for (let i = 0; i < p.samples.length; i++) {
    const node = byId.get(p.samples[i])
    const dt = p.timeDeltas[i] ?? 0
    at += dt
    if (at < fromUs || at > toUs) continue
    total += dt
    const { functionName, url, lineNumber } = node.callFrame
    const where = url ? `${url.replace(/^file:\/\/.*?\/(node_modules|dist)\//, "$1/")}:${lineNumber + 1}` : ""
    const key = `${functionName || "(anonymous)"} ${where}`.trim()
    self.set(key, (self.get(key) ?? 0) + dt)
    const area = areaOf(url, functionName)
    areas.set(area, (areas.get(area) ?? 0) + dt)
    if (url) {
      const file = url.replace(/^file:\/\/.*?\/(node_modules|dist)\//, "$1/")
      files.set(file, (files.get(file) ?? 0) + dt)
    }
  }
  const busy = total - (areas.get("idle (waiting: I/O, fdatasync in the threadpool)") ?? 0)
  const pctOf = (x, of) => `${((100 * x) / of).toFixed(1)}%`
  const top = [...self.entries()].filter(([k]) => k !== "(idle)").sort((a, b) => b[1] - a[1]).slice(0, 20)
  return [
    `profile: ${(total / 1e6).toFixed(1)} s sampled on the server's main thread, ${pctOf(busy, total)} busy`,
    "",
    "| area | share of busy time |",
    "| --- | --- |",
    ...[...areas.entries()].filter(([a]) => !a.startsWith("idle")).sort((a, b) => b[1] - a[1]).map(([a, t]) => `| ${a} | ${pctOf(t, busy)} |`),
    "",
    "| top files by self time | share of busy time |",
    "| --- | --- |",
    ...[...files.entries()].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([f, t]) => `| \`${f}\` | ${pctOf(t, busy)} |`),
    "",
    "| top self time (function, file:line) | share of busy time |",
    "| --- | --- |",
    ...top.map(([k, t]) => `| \`${k}\` | ${pctOf(t, busy)} |`)
  ].join("\n")
}

agent.destroy()

// ---------------------------------------------------------------------------------------------
// Report

let disk = ""
try {
  disk = execSync(`df -T ${tmp} | tail -1`).toString().trim().split(/\s+/).slice(0, 2).join(" ")
} catch {}
console.log(`# HTTP benchmark
command: npm run bench:http -- --seconds ${seconds} --memory-sessions ${memorySessions}
method: the server is \`node --max-semi-space-size=32 bin/brain.js serve\` (a child process, its own data directory in ${os.tmpdir()},
  UV_THREADPOOL_SIZE=64 as bin/brain.js sets it); the client is this process over loopback with a keep-alive
  http.Agent. "Turn" = POST /v1/sessions/{id}/messages {"input":{"message":"hello"}}, sync (200 with the outcome),
  scripted model with no replies (echo, instant), the official loop: 7 journal records, every commit fdatasync'd.
  Each of N sessions sends back to back for ${seconds}s. Admission = POST … with Prefer: respond-async until its 202;
  first SSE frame = from sending that POST until an SSE reader of the session (opened before) has the turn_started
  frame; both in one loop that waits for turn_ended before the next submit. The baseline is a plain node:http
  server in a child process that writes 200 bytes and fdatasyncs once per request, then answers JSON.
  server cpu = the server process's CPU time / wall time (100% = one core, all its threads), from /proc/<pid>/stat;
  client cpu = this load generator's, from process.cpuUsage(); both share the machine's cores. others = cores
  that everything else on the machine kept busy meanwhile (/proc/stat minus the two; includes the kernel's own I/O
  threads working for our fdatasyncs, so it is not zero even on a quiet machine).
machine: ${os.cpus().length} cpus (${os.cpus()[0]?.model ?? "?"}), node ${process.version}, ${os.platform()} ${os.release()}, data on ${disk}
`)
console.log("| what | n | p50 ms | p99 ms | per second | server cpu | server cpu ms per op | client cpu | others (cores) |")
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
const pc = (x) => (x ? `${Math.round(x)}%` : "—")
for (const r of results) {
  console.log(`| ${r.what} | ${r.n} | ${ms(r.p50)} | ${ms(r.p99)} | ${r.rate ? Math.round(r.rate) : "—"} | ${pc(r.cpu)} | ${r.cpu && r.rate ? ms((10 * r.cpu) / r.rate) : "—"} | ${pc(r.clientCpu)} | ${r.others !== undefined ? r.others.toFixed(2) : "—"} |`)
}
console.log(`
memory: private memory (smaps_rollup Private_Clean + Private_Dirty) of a fresh server after a full GC
  (--expose-gc and a SIGUSR2 preload), at N = 0, ${MEMORY_STEP}, … ${memorySessions} created sessions (each: session_creation_started +
  session_creation_ended, no turn) and at N = 0, ${HISTORY_STEP}, ${2 * HISTORY_STEP} sessions that each ran ${HISTORY_TURNS} turns
  (64 at a time, then released); per session = least-squares slope.
`)
console.log("| sessions | private MiB at each N | per session |")
console.log("| --- | --- | --- |")
for (const m of memory) {
  console.log(`| ${m.label} | ${m.points.map(([n, b]) => `${n}: ${(b / 2 ** 20).toFixed(1)}`).join(", ")} | ${(m.perSession / 1024).toFixed(1)} KiB |`)
}
if (profileReport) {
  console.log(`
cpu profile: node --cpu-prof of the server while 64 sessions send back to back; self time inside the ${Math.min(seconds, 5)}s
  measured window only (after a 1 s warm-up; startup excluded)
`)
  console.log(profileReport)
}
