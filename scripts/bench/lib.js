// The benchmark harness's parts: processes (Brain, the baseline, the peer's Restate and floor),
// a keep-alive HTTP client, SSE, an echo host, CPU and memory readings, and a CPU-profile summary.
import { execFile, execFileSync, execSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { SourceMap } from "node:module"
import { fileURLToPath, pathToFileURL } from "node:url"
import { promisify } from "node:util"
import { makeSseParser } from "../../dist/domain/SseParser.js"
import { measure } from "./stats.js"

export const ROOT = fileURLToPath(new URL("../..", import.meta.url))
export const PEER = path.resolve(ROOT, "../shared/peer")
export const CLK_TCK = (() => {
  try {
    return Number(execSync("getconf CLK_TCK").toString().trim()) || 100
  } catch {
    return 100
  }
})()

export const settle = (ms) => new Promise((r) => setTimeout(r, ms))

export const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bench-"))
const children = new Set()
const killAll = () => {
  for (const c of children) {
    try {
      process.kill(-c.pid, "SIGKILL")
    } catch {}
  }
}
process.on("exit", () => {
  killAll()
  fs.rmSync(tmp, { recursive: true, force: true })
})
process.on("SIGINT", () => process.exit(130))

export const freePort = () =>
  new Promise((resolve, reject) => {
    const probe = net.createServer()
    probe.on("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address()
      probe.close(() => resolve(port))
    })
  })

/** A child in its own process group (stopped whole); `ready` is matched against its output. */
export const spawnProcess = async (cmd, argv, { ready, env = {}, cwd = ROOT, timeoutMs = 90_000 } = {}) => {
  const child = spawn(cmd, argv, { cwd, detached: true, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } })
  children.add(child)
  child.once("exit", () => children.delete(child))
  let log = ""
  child.stdout.on("data", (d) => void (log = (log + d).slice(-20_000)))
  child.stderr.on("data", (d) => void (log = (log + d).slice(-20_000)))
  const stop = async (signal = "SIGTERM") => {
    if (child.exitCode !== null || child.signalCode !== null) return child.exitCode
    const exited = new Promise((r) => child.once("exit", (code) => r(code)))
    try {
      process.kill(-child.pid, signal)
    } catch {}
    const code = await Promise.race([exited, settle(10_000).then(() => "timeout")])
    if (code === "timeout") {
      try {
        process.kill(-child.pid, "SIGKILL")
      } catch {}
      return exited
    }
    return code
  }
  const started = performance.now()
  if (ready) {
    while (!ready.test(log)) {
      if (child.exitCode !== null || performance.now() - started > timeoutMs) {
        await stop("SIGKILL")
        throw new Error(`${[cmd, ...argv].join(" ").slice(0, 200)} did not start:\n${log}`)
      }
      await settle(10)
    }
  }
  return { child, pid: child.pid, log: () => log, stop, match: ready?.exec(log), startedMs: performance.now() - started }
}

// A preload that answers SIGUSR2 with three full collections, then writes the heap figures.
const GC_PRELOAD = path.join(tmp, "gc-on-sigusr2.cjs")
fs.writeFileSync(
  GC_PRELOAD,
  `process.on("SIGUSR2", () => {
  if (global.gc) { global.gc(); global.gc(); global.gc() }
  const m = process.memoryUsage()
  require("node:fs").writeFileSync(process.env.BRAIN_BENCH_HEAP_FILE, JSON.stringify({ heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers }))
})
`
)

/** `bin/brain.js serve` (as `npm start` runs it) on a free port; `dataDir` fresh unless given. */
export const startBrain = async ({ nodeArgs = [], gc = false, env = {}, dataDir } = {}) => {
  const port = await freePort()
  const dir = dataDir ?? fs.mkdtempSync(path.join(tmp, "data-"))
  const heapFile = path.join(tmp, `heap-${port}.json`)
  const argv = [
    ...(gc ? ["--expose-gc", "--require", GC_PRELOAD] : []),
    "--max-semi-space-size=32",
    ...nodeArgs,
    path.join(ROOT, "bin/brain.js"),
    "serve",
    "--listen",
    `127.0.0.1:${port}`,
    "--data-dir",
    dir
  ]
  const server = await spawnProcess(process.execPath, argv, { ready: /brain listening/, env: { BRAIN_BENCH_HEAP_FILE: heapFile, ...env } })
  /** Heap after full collections: used heap + external + array buffers, in bytes. */
  const heapAfterGc = async () => {
    fs.rmSync(heapFile, { force: true })
    process.kill(server.pid, "SIGUSR2")
    for (let i = 0; i < 500 && !fs.existsSync(heapFile); i++) await settle(10)
    await settle(20)
    const m = JSON.parse(fs.readFileSync(heapFile, "utf8"))
    return m.heapUsed + m.external + m.arrayBuffers
  }
  return { ...server, port, dataDir: dir, heapAfterGc }
}

// The baseline: plain node:http; each POST appends ~200 B and answers after K fdatasyncs in a row
// that cover it (group-committed: one sync covers everything written before it started).
const BASELINE = `
const http = require("node:http"), fs = require("node:fs")
const fd = fs.openSync(process.argv[1], "a")
const K = Number(process.argv[2] || 1)
const record = Buffer.alloc(200, 120)
let pending = [], busy = false, n = 0
const round = () => {
  if (busy || pending.length === 0) return
  busy = true
  const batch = pending; pending = []
  fs.write(fd, Buffer.concat(batch.map(() => record)), () => fs.fdatasync(fd, (err) => {
    busy = false
    for (const done of batch) done(err)
    round()
  }))
}
const server = http.createServer((req, res) => {
  const chunks = []
  req.on("data", (c) => chunks.push(c))
  req.on("end", () => {
    try { JSON.parse(Buffer.concat(chunks).toString() || "null") } catch {}
    if (req.method === "GET") { res.writeHead(200, { "content-type": "application/json", "content-length": 2 }); return res.end("{}") }
    let left = K
    const commit = () => {
      pending.push((err) => {
        if (!err && --left > 0) return commit()
        const body = JSON.stringify({ ok: !err, n: ++n })
        res.writeHead(err ? 500 : 200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
        res.end(body)
      })
      round()
    }
    commit()
  })
})
server.keepAliveTimeout = 5000
server.listen(0, "127.0.0.1", () => console.log("listening " + server.address().port))
`

export const startBaseline = async (K = 1) => {
  const server = await spawnProcess(process.execPath, ["-e", BASELINE, path.join(tmp, `baseline-${K}.log`), String(K)], {
    ready: /listening (\d+)/,
    env: { UV_THREADPOOL_SIZE: "64" }
  })
  return { ...server, port: Number(server.match[1]) }
}

// ---------------------------------------------------------------------------------------------
// Client

export const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 1024 })

export const request = (port, method, p, body, headers = {}) =>
  new Promise((resolve, reject) => {
    const data = body === undefined
      ? undefined
      : body instanceof Uint8Array
      ? Buffer.from(body)
      : Buffer.from(typeof body === "string" ? body : JSON.stringify(body))
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

export const expectStatus = async (promise, status) => {
  const r = await promise
  if (r.status !== status) throw new Error(`expected ${status}, got ${r.status}: ${r.text.slice(0, 300)}`)
  return r.text.length > 0 ? JSON.parse(r.text) : undefined
}

/** Uploads the example Wasm tool (loops/examples/echo-tool.ts, built into dist/) and answers its module id. */
export const admitEchoTool = async (port) => {
  const bytes = fs.readFileSync(path.join(ROOT, "dist", "loops", "examples", "echo-tool.wasm"))
  const admitted = await expectStatus(request(port, "POST", "/v1/agentloops", bytes, { "content-type": "application/wasm", ...keyed() }), 201)
  return admitted.id
}

/**
 * A session whose model asks for `calls` echo calls, `rounds` times, then answers; `echo` runs in
 * `environment` (with `tool`'s fields besides its name, description and environment).
 */
export const toolLoop = (environment, tool = {}, rounds = 2, calls = 4) => {
  const toolCalls = Array.from({ length: calls }, (_, i) => ({ name: "echo", input: { i } }))
  return {
    model: { provider: "scripted", replies: [...Array.from({ length: rounds }, () => ({ tool_calls: toolCalls })), { text: "done" }] },
    environments: [environment],
    tools: [{ name: "echo", description: "answers with its input", environment: environment.name, ...tool }]
  }
}

/** Every mutating request carries a fresh Idempotency-Key, as the SDK's do. */
export const keyed = () => ({ "idempotency-key": crypto.randomUUID() })

export const createSessions = async (port, count, body, concurrency = 32) => {
  const ids = []
  let next = 0
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, async () => {
    while (next < count) {
      next++
      ids.push((await expectStatus(request(port, "POST", "/v1/sessions", body, keyed()), 201)).session_id)
    }
  }))
  return ids
}

/** Opens an SSE stream; `onFrame(event, receivedAt)` for each frame with an event name. */
export const openSse = (port, p, onFrame) =>
  new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, path: p, headers: { accept: "text/event-stream" } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`SSE answered ${res.statusCode}`))
      res.setEncoding("utf8")
      let at = 0
      const parser = makeSseParser((frame) => frame.event !== undefined && onFrame(frame.event, at))
      res.on("data", (chunk) => {
        at = performance.now()
        parser.feed(chunk)
      })
      resolve({ close: () => req.destroy() })
    })
    req.on("error", (err) => {
      if (err.code !== "ECONNRESET") reject(err)
    })
    req.end()
  })

/**
 * An http Environment that answers every tool call with its input (`{"ok": input}`), set-ups and
 * the rest with `{"ok": {}}`, in this process on loopback: what a server is given through
 * BRAIN_ENVIRONMENTS (`binding`) and a session through `environment`.
 */
export const echoEnvironment = async () => {
  let answered = 0
  const server = http.createServer((req, res) => {
    const chunks = []
    req.on("data", (c) => chunks.push(c))
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString() || "{}")
      const answer = req.url === "/tools/call" ? (answered++, { ok: body.input }) : req.url === "/tools/cancel" ? { stopped: true } : { ok: {} }
      const text = JSON.stringify(answer)
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
      res.end(text)
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve))
  const url = `http://127.0.0.1:${server.address().port}`
  return {
    /** BRAIN_ENVIRONMENTS for a server, naming this Environment `echo`. */
    bindings: JSON.stringify({ echo: { driver: "http", base_url: url } }),
    /** A session's Environment on it. */
    environment: { name: "app", driver: "http", binding: "echo" },
    get answered() {
      return answered
    },
    close: () => server.close()
  }
}

/**
 * A host over plain HTTP (docs/environments.md, "The `host` driver"): every call answered with its
 * input at once; the calls that arrive in one read of the command stream (the calls of one
 * dispatch) are answered in one POST (`{"results": [...]}`), as the SDK's host does. A command
 * stream that fails (a reset connection, the server gone) ends the host quietly (`ended`): an
 * 'error' with no listener would end the benchmark's process instead.
 */
export const echoHost = async (port) => {
  const registered = await expectStatus(request(port, "POST", "/v1/hosts", {}), 201)
  const auth = { authorization: `Bearer ${registered.token}` }
  let answered = 0
  let refused = 0
  let req
  let endHost
  const ended = new Promise((resolve) => (endHost = resolve))
  await new Promise((resolve, reject) => {
    req = http.request({
      host: "127.0.0.1", port, path: `/v1/hosts/${registered.host_id}/commands`, headers: { ...auth, accept: "text/event-stream" }
    }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`command stream: ${res.statusCode}`))
      // The stream is over, however it ended: the host is done.
      res.on("error", () => req.destroy())
      res.on("close", () => endHost())
      res.setEncoding("utf8")
      let ready = []
      const parser = makeSseParser((frame) => {
        if (frame.event === "ready") return resolve()
        if (frame.event !== "call") return
        const command = JSON.parse(frame.data)
        ready.push({ session_id: command.session_id, sequence: command.sequence, ok: command.input })
      })
      res.on("data", (text) => {
        parser.feed(text)
        if (ready.length === 0) return
        const results = ready
        ready = []
        request(port, "POST", `/v1/hosts/${registered.host_id}/results`, results.length === 1 ? results[0] : { results }, auth)
          .then((r) => (r.status === 204 ? (answered += results.length) : (refused += results.length)), () => (refused += results.length))
      })
    })
    req.on("error", (e) => {
      reject(e)
      endHost()
    })
    req.end()
  })
  return { host_id: registered.host_id, counts: () => ({ answered, refused }), ended, close: () => req.destroy() }
}

// ---------------------------------------------------------------------------------------------
// Readings

/** CPU seconds (user + system) a process has used so far, all its threads. */
export const cpuSeconds = (pid) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK
}

/**
 * CPU seconds (user + system) a process's main thread has used so far: the thread that runs
 * JavaScript, whose time per operation is the figure the performance issue sets a target for.
 * Counted by the kernel, so unlike a profile's busy samples it does not grow when other work on
 * the machine keeps the thread waiting for a core.
 */
export const mainThreadCpuSeconds = (pid) => cpuSeconds(`${pid}/task/${pid}`)

/** CPU seconds the whole machine has spent busy (all cores; idle and iowait excluded). */
const machineBusySeconds = () => {
  const [, ...t] = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).map(Number)
  const [user, nice, system, , , irq, softirq, steal] = t
  return (user + nice + system + irq + softirq + steal) / CLK_TCK
}

/**
 * A closed-loop measurement (stats.measure), plus the server's CPU per operation and how many
 * cores everything else on the machine kept busy meanwhile (others disturbing the run).
 */
export const measureWithCpu = async (pid, body, concurrency, durationMs) => {
  const c0 = cpuSeconds(pid)
  const t0Main = mainThreadCpuSeconds(pid)
  const m0 = machineBusySeconds()
  const client0 = process.cpuUsage()
  const t0 = performance.now()
  const r = await measure(body, concurrency, durationMs)
  const wall = (performance.now() - t0) / 1000
  const client = process.cpuUsage(client0)
  const server = cpuSeconds(pid) - c0
  const main = mainThreadCpuSeconds(pid) - t0Main
  const clientSeconds = (client.user + client.system) / 1e6
  return {
    ...r,
    serverCpuMsPerOp: (1000 * server) / r.n,
    mainCpuMsPerOp: (1000 * main) / r.n,
    others: Math.max(0, machineBusySeconds() - m0 - server - clientSeconds) / wall
  }
}

/** Bytes under a directory. */
export const duBytes = (dir) => {
  let total = 0
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name)
    total += e.isDirectory() ? duBytes(p) : fs.statSync(p).size
  }
  return total
}

/** Least-squares slope of y over x. */
export const slope = (points) => {
  const n = points.length
  const mx = points.reduce((s, [x]) => s + x, 0) / n
  const my = points.reduce((s, [, y]) => s + y, 0) / n
  const num = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0)
  const den = points.reduce((s, [x]) => s + (x - mx) ** 2, 0)
  return num / den
}

export const diskOf = (dir) => {
  try {
    return execSync(`df -T ${dir} | tail -1`).toString().trim().split(/\s+/).slice(0, 2).join(" ")
  } catch {
    return "?"
  }
}

// ---------------------------------------------------------------------------------------------
// The peer (../shared/peer): its closed-loop client, the floor, Restate

export const peerAvailable = () => fs.existsSync(path.join(PEER, "load.mjs"))

/** The peer's load generator (a child process: this process's echo host keeps answering meanwhile). */
export const peerLoad = async (label, url, body, c, seconds, extra = []) => {
  const { stdout } = await promisify(execFile)(process.execPath, [
    path.join(PEER, "load.mjs"), "--label", label, "--url-template", url, "--body", JSON.stringify(body),
    "-c", String(c), "-d", String(seconds), ...extra
  ], { encoding: "utf8", maxBuffer: 1 << 24 })
  return JSON.parse(stdout.trim().split("\n").pop())
}

const waitFor = async (what, check, seconds = 90) => {
  const deadline = Date.now() + seconds * 1000
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return
    await settle(200)
  }
  throw new Error(`${what} did not start within ${seconds} s`)
}

/** The peer's floor.mjs with K sequential commits per request, measured at c = 1 and 64. */
export const peerFloor = async (K, seconds) => {
  const port = await freePort()
  const p = await spawnProcess(process.execPath, [path.join(PEER, "floor.mjs")], {
    env: { MODE: "fsync", K: String(K), PORT: String(port), FILE: path.join(tmp, `floor-${K}`) }
  })
  await waitFor("the floor", async () => (await request(port, "POST", "/probe", {})).status < 500, 20)
  const out = []
  for (const c of [1, 64]) out.push(await peerLoad(`floor-k${K}`, `http://127.0.0.1:${port}/{key}`, { message: "hello" }, c, seconds, ["-w", "1"]))
  await p.stop()
  return out
}

/**
 * Restate 1.7.12 running the peer's virtual object, installed once into
 * node_modules/.cache/brain-peer (the peer directory is read-only): started, with the URL the
 * peer's client sends a turn to and a way to stop it.
 */
export const startRestate = async () => {
  const dir = path.join(ROOT, "node_modules/.cache/brain-peer/restate")
  if (!fs.existsSync(path.join(dir, "node_modules/.bin/restate-server"))) {
    fs.mkdirSync(dir, { recursive: true })
    for (const f of ["package.json", "package-lock.json", "service.mjs"]) fs.copyFileSync(path.join(PEER, "restate", f), path.join(dir, f))
    console.error("installing Restate into", dir)
    execFileSync("npm", ["ci", "--silent", "--no-audit", "--no-fund"], { cwd: dir, stdio: "inherit" })
  }
  const server = await spawnProcess(path.join(dir, "node_modules/.bin/restate-server"), ["--base-dir", fs.mkdtempSync(path.join(tmp, "rs-data-"))], { cwd: dir })
  const service = await spawnProcess(process.execPath, ["service.mjs"], { cwd: dir })
  await waitFor("restate-server", async () => (await fetch("http://127.0.0.1:9070/health")).ok)
  execFileSync(path.join(dir, "node_modules/.bin/restate"), ["-y", "deployments", "register", "http://localhost:9080"], { cwd: dir, stdio: "ignore" })
  await settle(2000)
  return {
    url: "http://127.0.0.1:8080/Session/{key}/turn",
    stop: async () => {
      await service.stop()
      await server.stop()
    }
  }
}

/** Restate's rows: text at c = 1 and 64 and the tool loop (`rounds` × `calls`) at c = 64. */
export const restateRows = async (url, seconds, rounds, calls) => {
  const out = []
  for (const c of [1, 64]) out.push(await peerLoad("restate-text", url, { message: "hello" }, c, seconds))
  out.push(await peerLoad(`restate-tools${rounds}x${calls}`, url, { message: "hello", rounds, calls }, 64, seconds))
  return out
}

// ---------------------------------------------------------------------------------------------
// CPU profile

const bundleMaps = new Map()

/**
 * A call frame of the bundled command (dist/brain.mjs) named by the module it was bundled from,
 * through the source map the build writes beside the bundle: `file:///…/node_modules/effect/…` or
 * `file:///…/dist/…` and that module's line. Other frames, and every frame when the map is
 * missing, are returned as they are.
 */
function unbundled(frame) {
  if (!frame.url.endsWith("/dist/brain.mjs")) return frame
  let map = bundleMaps.get(frame.url)
  if (map === undefined) {
    const file = fileURLToPath(frame.url) + ".map"
    map = fs.existsSync(file) ? new SourceMap(JSON.parse(fs.readFileSync(file, "utf8"))) : null
    bundleMaps.set(frame.url, map)
  }
  if (map === null) return frame
  const entry = map.findEntry(frame.lineNumber, frame.columnNumber)
  if (!entry || !entry.originalSource) return frame
  const url = pathToFileURL(path.resolve(path.dirname(fileURLToPath(frame.url)), entry.originalSource.replace(/^file:\/\//, ""))).href
  return { ...frame, url, lineNumber: entry.originalLine, columnNumber: entry.originalColumn }
}

/**
 * Self time per area, file and function from a .cpuprofile, counting only samples inside
 * [fromUs, toUs] (microseconds since the process started; the profile starts with it).
 */
export function summarizeProfile(p, fromUs, toUs) {
  const byId = new Map(p.nodes.map((n) => [n.id, n]))
  for (const n of p.nodes) n.callFrame = unbundled(n.callFrame)
  const self = new Map()
  const areas = new Map()
  const files = new Map()
  let total = 0
  const IDLE = "idle (waiting: I/O, fdatasync in the threadpool)"
  const areaOf = (url, name) => {
    if (name === "(garbage collector)") return "GC"
    if (name === "(idle)") return IDLE
    if (name === "(program)") return "V8/native (program)"
    if (url.includes("/node_modules/effect/")) return "effect (runtime, Schema, …)"
    if (url.includes("/node_modules/@effect/platform")) return "@effect/platform(-node)"
    if (url.includes("/node_modules/")) return "other dependencies"
    if (url.includes("/dist/") || url.startsWith(pathToFileURL(path.join(ROOT, "src")).href + "/")) return "brain (src/, dist/)"
    if (url.startsWith("node:")) return "node internals (http, net, fs, streams)"
    return "native / builtins"
  }
  // Inclusive time of Brain's own named functions: a sample counts once for each such function on its stack.
  const parent = new Map()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const inclusive = new Map()
  const brainSrc = pathToFileURL(path.join(ROOT, "src")).href + "/"
  const keyOf = ({ functionName, url, lineNumber }) => {
    const where = url ? `${url.replace(/^file:\/\/.*?\/(node_modules|dist|src)\//, "$1/")}:${lineNumber + 1}` : ""
    return `${functionName || "(anonymous)"} ${where}`.trim()
  }
  let at = 0
  for (let i = 0; i < p.samples.length; i++) {
    const node = byId.get(p.samples[i])
    const dt = p.timeDeltas[i] ?? 0
    at += dt
    if (at < fromUs || at > toUs) continue
    total += dt
    const { functionName, url } = node.callFrame
    const key = keyOf(node.callFrame)
    if (functionName !== "(idle)") {
      const seen = new Set()
      for (let id = node.id; id !== undefined; id = parent.get(id)) {
        const frame = byId.get(id).callFrame
        if (!frame.functionName || !frame.url.startsWith(brainSrc)) continue
        const k = keyOf(frame)
        if (seen.has(k)) continue
        seen.add(k)
        inclusive.set(k, (inclusive.get(k) ?? 0) + dt)
      }
    }
    self.set(key, (self.get(key) ?? 0) + dt)
    const area = areaOf(url, functionName)
    areas.set(area, (areas.get(area) ?? 0) + dt)
    if (url) {
      const file = url.replace(/^file:\/\/.*?\/(node_modules|dist|src)\//, "$1/")
      files.set(file, (files.get(file) ?? 0) + dt)
    }
  }
  const busy = total - (areas.get(IDLE) ?? 0)
  const pctOf = (x, of) => `${((100 * x) / of).toFixed(1)}%`
  const top = [...self.entries()].filter(([k]) => k !== "(idle)").sort((a, b) => b[1] - a[1]).slice(0, 20)
  return {
    busyUs: busy,
    text: [
      `profile: ${(total / 1e6).toFixed(1)} s sampled on the server's main thread, ${pctOf(busy, total)} busy`,
      "",
      "| area | share of busy time |",
      "| --- | --- |",
      ...[...areas.entries()].filter(([a]) => a !== IDLE).sort((a, b) => b[1] - a[1]).map(([a, t]) => `| ${a} | ${pctOf(t, busy)} |`),
      "",
      "| top files by self time | share of busy time |",
      "| --- | --- |",
      ...[...files.entries()].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([f, t]) => `| \`${f}\` | ${pctOf(t, busy)} |`),
      "",
      "| top self time (function, file:line) | share of busy time |",
      "| --- | --- |",
      ...top.map(([k, t]) => `| \`${k}\` | ${pctOf(t, busy)} |`),
      "",
      "| Brain's named functions by inclusive time (what they and everything they call took on the stack; not what their effects took after they returned) | share of busy time |",
      "| --- | --- |",
      ...[...inclusive.entries()].sort((a, b) => b[1] - a[1]).slice(0, 15).map(([k, t]) => `| \`${k}\` | ${pctOf(t, busy)} |`)
    ].join("\n")
  }
}
