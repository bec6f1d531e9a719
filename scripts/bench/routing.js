#!/usr/bin/env node
// The cost of routing a request to the process or thread that owns its session, measured against
// answering it where it arrives, all in one run (docs/scaling.md).
//
//   node scripts/bench/routing.js [--seconds 4]
//
// Every target answers `POST /s/{key}` with a small JSON body after `--work` (default 1) durable
// commits: an append of ~200 B to the owner's own file and an fdatasync (group-committed per
// owner, as the journal does), so the figures include what an owner really waits for. Targets:
// - direct: one node:http process owns every key and answers it;
// - http-uds: a front node:http process forwards each request to the owner process (2 owners,
//   key-hashed) over keep-alive HTTP on a unix socket, and relays the answer;
// - http-tcp: the same over loopback TCP;
// - frames-uds: the same, but front and owners speak length-prefixed JSON frames over one unix
//   socket per owner (no HTTP between them);
// - thread: the front forwards each request to an owner worker_thread (2 owners) by postMessage
//   and answers with what the worker posts back;
// - peer-forward: 2 owner processes both accept clients (SO_REUSEPORT-like, the client picks one
//   at random per connection); a request for a key the receiving process does not own is
//   forwarded to the owner with frames over a unix socket (about half the requests hop).
// The client is this process: C closed-loop keep-alive connections, each on its own key, after a
// 1 s warm-up. CPU is user+sys of every process of the target, per request (from /proc).
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { measure, ms, numberFlag } from "./stats.js"

const seconds = numberFlag("--seconds", 4)
/** Durable commits per request; 0 answers at once (the routing's own cost alone). */
const WORK = (() => {
  const i = process.argv.indexOf("--work")
  return i >= 0 ? Math.max(0, Math.floor(Number(process.argv[i + 1]) || 0)) : 1
})()
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bench-routing-"))
const children = []
process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL")
  fs.rmSync(tmp, { recursive: true, force: true })
})

// One program, several roles, chosen by argv[2]; run as `node -e <ROLE_SRC> <role> …`.
const ROLE_SRC = String.raw`
const http = require("node:http"), net = require("node:net"), fs = require("node:fs")
const { Worker } = require("node:worker_threads")
const [role, ...args] = process.argv.slice(1)
const WORK = Number(process.env.WORK || 1)

// An owner's durable commits: appends wait for the next group commit of its file.
function committer(file) {
  const fd = fs.openSync(file, "a")
  let pending = [], busy = false
  const record = Buffer.alloc(200, 120)
  const round = () => {
    if (busy || pending.length === 0) return
    busy = true
    const batch = pending; pending = []
    fs.write(fd, Buffer.concat(batch.map(() => record)), (e) => {
      fs.fdatasync(fd, () => { busy = false; for (const cb of batch) cb(); round() })
    })
  }
  return (cb) => {
    if (WORK === 0) return cb()
    let left = WORK
    const one = () => { pending.push(() => (--left === 0 ? cb() : one())); round() }
    one()
  }
}
const answer = (key, n) => JSON.stringify({ session_id: key, status: "idle", n })
const hash = (key, n) => { let h = 0; for (let i = 0; i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) | 0; return Math.abs(h) % n }
const readBody = (req, cb) => { const chunks = []; req.on("data", (c) => chunks.push(c)); req.on("end", () => cb(Buffer.concat(chunks))) }
const send = (res, status, body) => { res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) }); res.end(body) }

// Length-prefixed JSON frames over a stream socket.
function framed(socket, onFrame) {
  let buf = Buffer.alloc(0)
  socket.on("data", (d) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d
    while (buf.length >= 4) {
      const n = buf.readUInt32LE(0)
      if (buf.length < 4 + n) break
      onFrame(JSON.parse(buf.subarray(4, 4 + n).toString()))
      buf = buf.subarray(4 + n)
    }
  })
  return (obj) => { const b = Buffer.from(JSON.stringify(obj)); const h = Buffer.alloc(4); h.writeUInt32LE(b.length); socket.write(Buffer.concat([h, b])) }
}

// A frames client: requests with ids, answers matched back.
function framesClient(sockPath) {
  const socket = net.connect(sockPath)
  const waiting = new Map(); let next = 0
  const write = framed(socket, (m) => { const cb = waiting.get(m.id); waiting.delete(m.id); cb(m) })
  return (msg, cb) => { const id = next++; waiting.set(id, cb); write({ ...msg, id }) }
}

function frameServer(sockPath, commit, quiet) {
  net.createServer((socket) => {
    const write = framed(socket, (m) => commit(() => write({ id: m.id, status: 200, body: answer(m.key, m.body.length) })))
  }).listen(sockPath, () => quiet || console.log("ready"))
}

if (role === "direct") {
  const commit = committer(args[0])
  const server = http.createServer((req, res) => readBody(req, (b) => commit(() => send(res, 200, answer(req.url.slice(3), b.length)))))
  server.listen(0, "127.0.0.1", () => console.log("listening " + server.address().port))
} else if (role === "owner-http") {
  // args: file, socket path or port
  const commit = committer(args[0])
  const server = http.createServer((req, res) => readBody(req, (b) => commit(() => send(res, 200, answer(req.url.slice(3), b.length)))))
  if (args[1] === "tcp") server.listen(0, "127.0.0.1", () => console.log("listening " + server.address().port))
  else server.listen(args[1], () => console.log("ready"))
} else if (role === "owner-frames") {
  frameServer(args[1], committer(args[0]))
} else if (role === "front-http") {
  // args: owner addresses (socket paths or ports)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 })
  const server = http.createServer((req, res) => readBody(req, (b) => {
    const key = req.url.slice(3), owner = args[hash(key, args.length)]
    const target = /^\d+$/.test(owner) ? { host: "127.0.0.1", port: Number(owner) } : { socketPath: owner }
    const fwd = http.request({ ...target, method: "POST", path: req.url, agent, headers: { "content-type": "application/json", "content-length": b.length } }, (r) =>
      readBody(r, (body) => send(res, r.statusCode, body.toString())))
    fwd.end(b)
  }))
  server.listen(0, "127.0.0.1", () => console.log("listening " + server.address().port))
} else if (role === "front-frames") {
  const owners = args.map(framesClient)
  const server = http.createServer((req, res) => readBody(req, (b) => {
    const key = req.url.slice(3)
    owners[hash(key, owners.length)]({ key, body: b.toString() }, (m) => send(res, m.status, m.body))
  }))
  server.listen(0, "127.0.0.1", () => console.log("listening " + server.address().port))
} else if (role === "front-thread") {
  const WORKER = "const { parentPort, workerData } = require('node:worker_threads'); const fs = require('node:fs');" +
    "const WORK = workerData.work;" + committer.toString() + ";const commit = committer(workerData.file);" +
    "parentPort.on('message', (m) => commit(() => parentPort.postMessage({ id: m.id, status: 200, body: JSON.stringify({ session_id: m.key, status: 'idle', n: m.body.length }) })))"
  const owners = args.map((file) => {
    const w = new Worker(WORKER, { eval: true, workerData: { file, work: WORK } })
    const waiting = new Map()
    w.on("message", (m) => { const cb = waiting.get(m.id); waiting.delete(m.id); cb(m) })
    return { w, waiting }
  })
  let next = 0
  const server = http.createServer((req, res) => readBody(req, (b) => {
    const key = req.url.slice(3), o = owners[hash(key, owners.length)], id = next++
    o.waiting.set(id, (m) => send(res, m.status, m.body))
    o.w.postMessage({ id, key, body: b.toString() })
  }))
  server.listen(0, "127.0.0.1", () => console.log("listening " + server.address().port))
} else if (role === "peer") {
  // args: index, file, own socket, every owner's socket
  const [index, file, own, ...all] = args
  const me = Number(index)
  const commit = committer(file)
  frameServer(own, commit, true)
  let peers
  const server = http.createServer((req, res) => readBody(req, (b) => {
    const key = req.url.slice(3), o = hash(key, all.length)
    if (o === me) return commit(() => send(res, 200, answer(key, b.length)))
    peers ??= all.map((p, i) => (i === me ? undefined : framesClient(p)))
    peers[o]({ key, body: b.toString() }, (m) => send(res, m.status, m.body))
  }))
  server.listen(0, "127.0.0.1", () => console.log("listening " + server.address().port))
}
`

const start = async (role, args, env = {}) => {
  const child = spawn(process.execPath, ["-e", ROLE_SRC, role, ...args], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, WORK: String(WORK), ...env }
  })
  children.push(child)
  let out = ""
  await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      out += d
      if (/ready|listening/.test(out)) resolve()
    })
    child.once("exit", (code) => reject(new Error(`${role} exited ${code}`)))
  })
  const port = /listening (\d+)/.exec(out)?.[1]
  return { child, port: port ? Number(port) : undefined }
}

/** user+sys CPU seconds of the given processes (all their threads), from /proc. */
const cpuOf = (pids) => {
  let ticks = 0
  for (const pid of pids) {
    try {
      const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")
      ticks += Number(f[11]) + Number(f[12])
    } catch {}
  }
  return ticks / 100
}

const BODY = JSON.stringify({ input: { message: "hello" } })
const run = async (label, ports, pids) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 })
  const post = (i) =>
    new Promise((resolve, reject) => {
      const req = http.request(
        { host: "127.0.0.1", port: ports[(i * 7 + 3) % ports.length], method: "POST", path: `/s/ses_${i}`, agent,
          headers: { "content-type": "application/json", "content-length": BODY.length } },
        (res) => {
          res.resume()
          res.on("end", () => (res.statusCode === 200 ? resolve() : reject(new Error(String(res.statusCode)))))
        }
      )
      req.on("error", reject)
      req.end(BODY)
    })
  const rows = []
  for (const c of [1, 64]) {
    await measure(post, c, 1000)
    const cpu0 = cpuOf(pids)
    const r = await measure(post, c, seconds * 1000)
    const cpu = cpuOf(pids) - cpu0
    rows.push({ label, c, ...r, cpuUsPerReq: (cpu * 1e6) / r.n })
  }
  agent.destroy()
  return rows
}

const file = (name) => path.join(tmp, name)
const sock = (name) => path.join(tmp, `${name}.sock`)
const results = []
const loadBefore = os.loadavg().map((l) => l.toFixed(1)).join(" ")
const stopAll = () => {
  for (const c of children.splice(0)) c.kill("SIGKILL")
}

{
  const d = await start("direct", [file("direct")])
  results.push(...(await run("direct (1 process)", [d.port], [d.child.pid])))
  stopAll()
}
{
  const owners = [await start("owner-http", [file("o0"), sock("h0")]), await start("owner-http", [file("o1"), sock("h1")])]
  const f = await start("front-http", [sock("h0"), sock("h1")])
  results.push(...(await run("front → 2 owners, HTTP over unix socket", [f.port], [f.child.pid, ...owners.map((o) => o.child.pid)])))
  stopAll()
}
{
  const owners = [await start("owner-http", [file("o0"), "tcp"]), await start("owner-http", [file("o1"), "tcp"])]
  const f = await start("front-http", owners.map((o) => String(o.port)))
  results.push(...(await run("front → 2 owners, HTTP over loopback TCP", [f.port], [f.child.pid, ...owners.map((o) => o.child.pid)])))
  stopAll()
}
{
  const owners = [await start("owner-frames", [file("o0"), sock("f0")]), await start("owner-frames", [file("o1"), sock("f1")])]
  const f = await start("front-frames", [sock("f0"), sock("f1")])
  results.push(...(await run("front → 2 owners, frames over unix socket", [f.port], [f.child.pid, ...owners.map((o) => o.child.pid)])))
  stopAll()
}
{
  const f = await start("front-thread", [file("t0"), file("t1")])
  results.push(...(await run("front → 2 owner threads, postMessage", [f.port], [f.child.pid])))
  stopAll()
}
{
  const all = [sock("p0"), sock("p1")]
  const p0 = await start("peer", ["0", file("p0"), all[0], ...all])
  const p1 = await start("peer", ["1", file("p1"), all[1], ...all])
  results.push(...(await run("2 owners both accept, forward the other half (frames)", [p0.port, p1.port], [p0.child.pid, p1.child.pid])))
  stopAll()
}

console.log(`# routing: ${os.cpus().length} cores, node ${process.version}, ${new Date().toISOString()}; ${WORK} durable commit(s) per request (200 B + fdatasync, group-committed per owner); ${seconds} s per point after 1 s warm-up; client = this process, closed loop, one key per connection; load average before: ${loadBefore}`)
console.log("| target | c | req/s | p50 ms | p99 ms | CPU µs/req (server side) |")
console.log("| --- | ---: | ---: | ---: | ---: | ---: |")
for (const r of results) console.log(`| ${r.label} | ${r.c} | ${Math.round(r.rate)} | ${ms(r.p50)} | ${ms(r.p99)} | ${Math.round(r.cpuUsPerReq)} |`)
process.exit(0)
