#!/usr/bin/env node
// Brain beside Restate and the durable-request floor, one run, one client. The shapes of
// ../shared/peer/side-by-side.sh plus the tool loop on Brain:
//
//   npm run bench:peer [-- --seconds 10] [--no-peer] [--no-floor]
//
// - Client: the peer's closed-loop load generator (../shared/peer/load.mjs, unchanged): `-c`
//   clients, each owning one session, every request a sync POST with a fresh Idempotency-Key,
//   a warm-up, then `--seconds` measured. The same process drives every target.
// - floor: the peer's floor.mjs (node:http, each request answered after K group-committed
//   fdatasyncs), K = 1 and K = 8, at c = 1 and c = 64.
// - Restate 1.7.12 (the peer's virtual object: read transcript, one durable model step, rounds of
//   parallel durable tool steps, write transcript): text at c = 1 and 64; tool loop 2 rounds × 4
//   calls at c = 64. Installed once into node_modules/.cache/brain-peer (the peer directory is
//   read-only).
// - Brain (`bin/brain.js serve`, a fresh data directory, as `npm start` runs it): text at c = 1 and
//   64 with the scripted instant model; the tool loop at c = 1 and 64: each turn the scripted model
//   asks for 4 `echo` calls, twice, then answers. The tools run in a `host` Environment: a host
//   process (this script's own process, over plain node:http: the command stream as SSE, each
//   call's result POSTed back) answers every call with its input at once. Sessions as the peer
//   script creates them (`idle_ttl_ms: 0`: released after every turn, reopened from the journal).
//
// Prints one JSON line per measurement (the peer's format) and a table of the ratios.
import { execFile, execFileSync, spawn } from "node:child_process"
import { promisify } from "node:util"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { makeSseParser } from "../../dist/domain/SseParser.js"
import { numberFlag } from "./stats.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const PEER = path.resolve(ROOT, "../shared/peer")
const args = process.argv.slice(2)
const seconds = numberFlag("--seconds", 10)
const withPeer = !args.includes("--no-peer")
const withFloor = !args.includes("--no-floor")
const ROUNDS = 2
const CALLS = 4

if (!fs.existsSync(path.join(PEER, "load.mjs"))) {
  console.error(`the peer benchmark is not at ${PEER} (load.mjs); it holds the shared client`)
  process.exit(2)
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bench-peer-"))
const children = new Set()
const cleanup = () => {
  for (const c of children) {
    try {
      process.kill(-c.pid, "SIGKILL")
    } catch {}
  }
  fs.rmSync(tmp, { recursive: true, force: true })
}
process.on("exit", cleanup)
process.on("SIGINT", () => process.exit(130))

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** A detached child (its own process group, killed whole). */
const start = (cmd, argv, options = {}) => {
  const child = spawn(cmd, argv, { detached: true, stdio: ["ignore", "pipe", "pipe"], ...options })
  let log = ""
  child.stdout.on("data", (d) => void (log = (log + d).slice(-20_000)))
  child.stderr.on("data", (d) => void (log = (log + d).slice(-20_000)))
  children.add(child)
  child.once("exit", () => children.delete(child))
  return {
    child,
    log: () => log,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = new Promise((r) => child.once("exit", r))
      try {
        process.kill(-child.pid, "SIGTERM")
      } catch {}
      await Promise.race([exited, sleep(5000)])
      try {
        process.kill(-child.pid, "SIGKILL")
      } catch {}
    }
  }
}

const waitFor = async (what, check, seconds = 90) => {
  const deadline = Date.now() + seconds * 1000
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return
    await sleep(200)
  }
  throw new Error(`${what} did not start within ${seconds} s`)
}

const results = []
/** The peer's client (a child process, so that this process's host keeps answering); its one JSON line is the measurement. */
const load = async (label, url, body, c, extra = []) => {
  const { stdout: out } = await promisify(execFile)(process.execPath, [
    path.join(PEER, "load.mjs"), "--label", label, "--url-template", url, "--body", JSON.stringify(body),
    "-c", String(c), "-d", String(seconds), ...extra
  ], { encoding: "utf8", maxBuffer: 1 << 24 })
  const line = out.trim().split("\n").pop()
  console.log(line)
  const result = JSON.parse(line)
  results.push(result)
  return result
}

// ---------------------------------------------------------------------------------------------
// plain HTTP

const agent = new http.Agent({ keepAlive: true, maxSockets: 256 })
const call = (port, method, p, body, headers = {}) =>
  new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const req = http.request({
      host: "127.0.0.1", port, method, path: p, agent,
      headers: { ...(data ? { "content-type": "application/json", "content-length": data.length } : {}), ...headers }
    }, (res) => {
      const chunks = []
      res.on("data", (c) => chunks.push(c))
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString()
        resolve({ status: res.statusCode, body: text ? JSON.parse(text) : undefined, text })
      })
    })
    req.on("error", reject)
    req.end(data)
  })

// ---------------------------------------------------------------------------------------------
// floor

const floor = async () => {
  for (const K of [1, 8]) {
    const file = path.join(tmp, `floor-${K}`)
    const p = start(process.execPath, [path.join(PEER, "floor.mjs")], {
      env: { ...process.env, MODE: "fsync", K: String(K), PORT: "9999", FILE: file }
    })
    await waitFor("the floor", async () => (await call(9999, "POST", "/probe", {})).status < 500, 20)
    for (const c of [1, 64]) await load(`floor-k${K}`, "http://127.0.0.1:9999/{key}", { message: "hello" }, c, ["-w", "1"])
    await p.stop()
  }
}

// ---------------------------------------------------------------------------------------------
// Restate

const restate = async () => {
  const dir = path.join(ROOT, "node_modules/.cache/brain-peer/restate")
  if (!fs.existsSync(path.join(dir, "node_modules/.bin/restate-server"))) {
    fs.mkdirSync(dir, { recursive: true })
    for (const f of ["package.json", "package-lock.json", "service.mjs"]) fs.copyFileSync(path.join(PEER, "restate", f), path.join(dir, f))
    console.error("installing Restate into", dir)
    execFileSync("npm", ["ci", "--silent", "--no-audit", "--no-fund"], { cwd: dir, stdio: "inherit" })
  }
  const base = path.join(tmp, "rs-data")
  const server = start(path.join(dir, "node_modules/.bin/restate-server"), ["--base-dir", base], { cwd: dir })
  const service = start(process.execPath, ["service.mjs"], { cwd: dir })
  await waitFor("restate-server", async () => (await fetch("http://127.0.0.1:9070/health")).ok)
  execFileSync(path.join(dir, "node_modules/.bin/restate"), ["-y", "deployments", "register", "http://localhost:9080"], {
    cwd: dir, stdio: "ignore"
  })
  await sleep(2000)
  const url = "http://127.0.0.1:8080/Session/{key}/turn"
  for (const c of [1, 64]) await load("restate-text", url, { message: "hello" }, c)
  await load(`restate-tools${ROUNDS}x${CALLS}`, url, { message: "hello", rounds: ROUNDS, calls: CALLS }, 64)
  await service.stop()
  await server.stop()
}

// ---------------------------------------------------------------------------------------------
// Brain

/** A host over plain HTTP: its command stream as SSE; every call answered with its input. */
const echoHost = async (port) => {
  const registered = (await call(port, "POST", "/v1/hosts", {})).body
  const auth = { authorization: `Bearer ${registered.token}` }
  let answered = 0
  let failed = 0
  const ready = new Promise((resolve, reject) => {
    const req = http.request({
      host: "127.0.0.1", port, path: `/v1/hosts/${registered.host_id}/commands`, headers: { ...auth, accept: "text/event-stream" }
    }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`command stream: ${res.statusCode}`))
      res.setEncoding("utf8")
      const parser = makeSseParser((frame) => {
        if (frame.event === "ready") return resolve()
        if (frame.event !== "call") return
        const command = JSON.parse(frame.data)
        call(port, "POST", `/v1/hosts/${registered.host_id}/results`, {
          session_id: command.session_id, sequence: command.sequence, ok: command.input
        }, auth).then((r) => (r.status === 204 ? answered++ : failed++), () => failed++)
      })
      res.on("data", (text) => parser.feed(text))
    })
    req.on("error", reject)
    req.end()
  })
  await ready
  return { host_id: registered.host_id, counts: () => ({ answered, failed }) }
}

const brain = async () => {
  const port = 3999
  const dataDir = path.join(tmp, "brain-data")
  const server = start(process.execPath, ["--max-semi-space-size=32", path.join(ROOT, "bin/brain.js"), "serve"], {
    cwd: ROOT, env: { ...process.env, BRAIN_LISTEN: `127.0.0.1:${port}`, BRAIN_DATA_DIR: dataDir }
  })
  await waitFor("brain", async () => (await call(port, "GET", "/health/live")).status === 204)
  const create = async (n, config) => {
    const ids = []
    for (let i = 0; i < n; i++) {
      const r = await call(port, "POST", "/v1/sessions", config, { "idempotency-key": crypto.randomUUID() })
      if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
      ids.push(r.body.session_id)
    }
    return ids.join(",")
  }
  const url = `http://127.0.0.1:${port}/v1/sessions/{key}/messages`
  const text = { model: { provider: "scripted" }, idle_ttl_ms: 0 }
  for (const c of [1, 64]) await load("brain-text", url, { input: { message: "hello" } }, c, ["--keys", await create(c, text)])

  const host = await echoHost(port)
  const toolCalls = Array.from({ length: CALLS }, (_, i) => ({ name: "echo", input: { i } }))
  const tools = {
    model: { provider: "scripted", replies: [...Array.from({ length: ROUNDS }, () => ({ tool_calls: toolCalls })), { text: "done" }] },
    environments: [{ name: "app", driver: "host", host: host.host_id }],
    tools: [{ name: "echo", description: "answers with its input", environment: "app" }],
    idle_ttl_ms: 0
  }
  for (const c of [1, 64]) await load(`brain-tools${ROUNDS}x${CALLS}`, url, { input: { message: "hello" } }, c, ["--keys", await create(c, tools)])
  const { answered, failed } = host.counts()
  console.error(`host: ${answered} calls answered, ${failed} refused`)
  // Every turn the load counted has exactly ROUNDS × CALLS calls (a check, not a figure).
  const toolRun = results.filter((r) => r.target.startsWith("brain-tools"))
  if (failed > 0 || toolRun.some((r) => r.errors > 0)) {
    throw new Error(`the tool loop had errors: host refused ${failed}, load ${JSON.stringify(toolRun)}`)
  }
  await server.stop()
}

console.log(`# method: one closed-loop client (${path.relative(ROOT, PEER)}/load.mjs), ${seconds} s per point after its warm-up, every request with a fresh Idempotency-Key; ${os.cpus().length} cores, node ${process.version}, ${new Date().toISOString()}`)
if (withFloor) await floor()
if (withPeer) await restate()
await brain()

const find = (target, c) => results.find((r) => r.target === target && r.c === c)
const row = (name, brainR, peerR, key) =>
  brainR && peerR ? console.log(`| ${name} | ${brainR[key]} | ${peerR[key]} | ${(brainR[key] / peerR[key]).toFixed(2)}× |`) : undefined
console.log("\n| measure | Brain | Restate | Brain / Restate |\n| --- | --- | --- | --- |")
row("text p50 ms, c=1", find("brain-text", 1), find("restate-text", 1), "p50_ms")
row("text turns/s, c=64", find("brain-text", 64), find("restate-text", 64), "turns_per_s")
row(`tool loop ${ROUNDS}×${CALLS} turns/s, c=64`, find(`brain-tools${ROUNDS}x${CALLS}`, 64), find(`restate-tools${ROUNDS}x${CALLS}`, 64), "turns_per_s")
process.exit(0)
