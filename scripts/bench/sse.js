#!/usr/bin/env node
// SSE fan-out benchmark: the server CPU a turn costs with many SSE subscribers on its session,
// against one subscriber measured in the same run, and what that load does to the latency of an
// unrelated session's sends.
//
//   npm run bench:sse [-- --turns 20 --subscribers 1,500 --profile DIR]
//
// The server is the product (`node bin/brain.js serve`, a child process). The subscribers live in
// a second child process (this file with --client), so their CPU is not the server's; the turns
// and the unrelated sends are made from this process.
import { execSync, fork, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { ms, pct } from "./stats.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const args = process.argv.slice(2)
const option = (name, fallback) => {
  const i = args.indexOf(name)
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : fallback
}

// ---------------------------------------------------------------------------------------------
// The client process: holds N SSE streams on one session and reports what they saw.

if (args.includes("--client")) {
  const streams = []
  /** Opens one stream; counts `turn_ended` frames and frames in total. */
  const open = (port, p) =>
    new Promise((resolve, reject) => {
      const s = { turns: 0, frames: 0, tail: "", status: 0, req: undefined }
      s.req = http.get({ host: "127.0.0.1", port, path: p, headers: { accept: "text/event-stream" }, agent: false }, (res) => {
        s.status = res.statusCode
        if (res.statusCode !== 200) {
          res.resume()
          return reject(new Error(`SSE answered ${res.statusCode}`))
        }
        res.setEncoding("utf8")
        res.on("data", (chunk) => {
          // Count whole frames only: a frame may straddle chunks.
          const text = s.tail + chunk
          const end = text.lastIndexOf("\n\n")
          if (end < 0) {
            s.tail = text
            return
          }
          const whole = text.slice(0, end + 2)
          s.tail = text.slice(end + 2)
          let i = -1
          while ((i = whole.indexOf("\nevent: turn_ended\n", i + 1)) >= 0) s.turns++
          let j = -1
          while ((j = whole.indexOf("\n\n", j + 1)) >= 0) s.frames++
        })
        resolve(s)
      })
      s.req.on("error", (err) => {
        if (s.status === 0) reject(err)
      })
    })
  process.on("message", async (m) => {
    if (m.op === "open") {
      for (let i = 0; i < m.n; i++) streams.push(await open(m.port, m.path))
      process.send({ op: "opened", n: streams.length })
    } else if (m.op === "wait") {
      // Until every stream has seen `turns` turn_ended frames.
      const check = () => {
        if (streams.every((s) => s.turns >= m.turns)) process.send({ op: "seen", turns: m.turns })
        else setTimeout(check, 1)
      }
      check()
    } else if (m.op === "close") {
      for (const s of streams) s.req.destroy()
      streams.length = 0
      process.send({ op: "closed" })
    } else if (m.op === "exit") process.exit(0)
  })
  process.send({ op: "ready" })
} else {
  await main()
}

// ---------------------------------------------------------------------------------------------
// The driver.

async function main() {
  const turns = Number(option("--turns", 20))
  const counts = option("--subscribers", "1,500").split(",").map(Number)
  const profileDir = option("--profile", undefined)
  const CLK_TCK = (() => {
    try {
      return Number(execSync("getconf CLK_TCK").toString().trim()) || 100
    } catch {
      return 100
    }
  })()
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bench-sse-"))
  process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }))

  const freePort = () =>
    new Promise((resolve, reject) => {
      const probe = net.createServer()
      probe.on("error", reject)
      probe.listen(0, "127.0.0.1", () => {
        const { port } = probe.address()
        probe.close(() => resolve(port))
      })
    })

  /** CPU seconds (user, system; every thread) the process has used so far. */
  const cpuTimes = (pid) => {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return { user: Number(fields[11]) / CLK_TCK, system: Number(fields[12]) / CLK_TCK }
  }
  /** CPU seconds the whole machine has spent busy (all cores). */
  const machineBusySeconds = () => {
    const [, ...t] = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).map(Number)
    const [user, nice, system, , , irq, softirq, steal] = t
    return (user + nice + system + irq + softirq + steal) / CLK_TCK
  }

  const port = await freePort()
  const max = String(Math.max(...counts) + 64)
  const serverArgs = [
    "--max-semi-space-size=32",
    ...(profileDir ? ["--cpu-prof", "--cpu-prof-dir", profileDir] : []),
    path.join(ROOT, "bin/brain.js"),
    "serve",
    "--listen",
    `127.0.0.1:${port}`,
    "--data-dir",
    path.join(tmp, "data")
  ]
  const server = spawn(process.execPath, serverArgs, {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION: max, BRAIN_SSE_MAX_SUBSCRIBERS: max }
  })
  let log = ""
  server.stdout.on("data", (d) => void (log = (log + d).slice(-20_000)))
  server.stderr.on("data", (d) => void (log = (log + d).slice(-20_000)))
  for (const deadline = Date.now() + 20_000; !/brain listening/.test(log);) {
    if (server.exitCode !== null || Date.now() > deadline) throw new Error(`the server did not start:\n${log}`)
    await new Promise((r) => setTimeout(r, 20))
  }

  const agent = new http.Agent({ keepAlive: true, maxSockets: 16 })
  const request = (method, p, body) =>
    new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
      const req = http.request(
        {
          host: "127.0.0.1",
          port,
          method,
          path: p,
          agent,
          headers: data ? { "content-type": "application/json", "content-length": data.length } : {}
        },
        (res) => {
          const chunks = []
          res.on("data", (c) => chunks.push(c))
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString()
            if (res.statusCode >= 300) reject(new Error(`${method} ${p}: ${res.statusCode} ${text.slice(0, 300)}`))
            else resolve(text.length > 0 ? JSON.parse(text) : undefined)
          })
        }
      )
      req.on("error", reject)
      req.end(data)
    })
  const create = async () => (await request("POST", "/v1/sessions", { model: { provider: "scripted" } })).session_id
  const send = (id) => request("POST", `/v1/sessions/${id}/messages`, { input: { message: "hello" } })

  const client = fork(fileURLToPath(import.meta.url), ["--client"], { stdio: ["ignore", "inherit", "inherit", "ipc"] })
  const replies = []
  let wake
  client.on("message", (m) => {
    replies.push(m)
    wake?.()
  })
  const reply = async (op) => {
    for (;;) {
      const i = replies.findIndex((m) => m.op === op)
      if (i >= 0) return replies.splice(i, 1)[0]
      await new Promise((r) => (wake = r))
    }
  }
  const ask = (message, op) => {
    client.send(message)
    return reply(op)
  }
  await reply("ready")

  const unrelated = await create()
  for (let i = 0; i < 50; i++) await send(unrelated) // warm-up: JIT, file handles

  const rows = []
  for (const n of counts) {
    const session = await create()
    await ask({ op: "open", n, port, path: `/v1/sessions/${session}/events?after=0` }, "opened")
    let done = 0
    /** One turn on the subscribed session, complete when every subscriber has its turn_ended. */
    const turn = async () => {
      await send(session)
      done++
      await ask({ op: "wait", turns: done }, "seen")
    }
    for (let i = 0; i < 3; i++) await turn() // warm-up

    // CPU: turns back to back, nothing else running.
    const c0 = cpuTimes(server.pid)
    const m0 = machineBusySeconds()
    const t0 = performance.now()
    for (let i = 0; i < turns; i++) await turn()
    const wall = (performance.now() - t0) / 1000
    const c1 = cpuTimes(server.pid)
    const user = c1.user - c0.user
    const system = c1.system - c0.system
    const cpu = user + system
    const others = Math.max(0, machineBusySeconds() - m0 - cpu)

    // Latency of the unrelated session's sends while the same turns run again.
    const latencies = []
    let running = true
    const probe = (async () => {
      while (running) {
        const s0 = performance.now()
        await send(unrelated)
        latencies.push(performance.now() - s0)
      }
    })()
    for (let i = 0; i < turns; i++) await turn()
    running = false
    await probe
    latencies.sort((a, b) => a - b)
    rows.push({
      n,
      cpuPerTurn: (cpu / turns) * 1000,
      userPerTurn: (user / turns) * 1000,
      systemPerTurn: (system / turns) * 1000,
      wallPerTurn: (wall / turns) * 1000,
      othersPerTurn: (others / turns) * 1000,
      p50: pct(latencies, 50),
      p99: pct(latencies, 99),
      max: latencies.at(-1),
      sends: latencies.length
    })
    await ask({ op: "close" }, "closed")
  }
  client.send({ op: "exit" })

  server.kill("SIGTERM")
  await new Promise((r) => server.once("exit", r))
  let disk = ""
  try {
    disk = execSync(`df -T ${os.tmpdir()} | tail -1`).toString().trim().split(/\s+/).slice(0, 2).join(" ")
  } catch {}
  let commit = ""
  try {
    commit = execSync("git rev-parse --short HEAD", { cwd: ROOT }).toString().trim()
  } catch {}
  console.log(`# SSE fan-out: server CPU per turn by subscribers on the turn's session
method: the product server (node bin/brain.js serve) in a child process; N SSE subscribers on one
  session (GET …/events?after=0, Accept: text/event-stream) in a second child process. A turn is a
  sync send of a text message to that session (scripted instant model, official loop: 6 public
  Events, 5 durable commits) and is complete when every subscriber has received its turn_ended
  frame; turns run back to back. Server CPU = utime+stime of the server process from
  /proc/<pid>/stat (all threads, ${1000 / CLK_TCK} ms ticks) over ${turns} turns, after 3 warm-up turns.
  "others" = CPU the rest of the machine (client process included) used meanwhile. Then the same
  ${turns} turns run again while this process sends to an unrelated session back to back (sync
  send, one at a time): its latency is reported. The N = ${counts[0]} row is the baseline of the same run.
node ${process.version}, ${os.cpus().length} cpus, tmp on ${disk}, commit ${commit}
`)
  const base = rows[0]
  console.log(
    "| subscribers | server CPU ms/turn | (user + sys) | × baseline | wall ms/turn | others CPU ms/turn | unrelated send p50 ms | p99 ms | max ms | sends |"
  )
  console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for (const r of rows) {
    console.log(
      `| ${r.n} | ${r.cpuPerTurn.toFixed(1)} | ${r.userPerTurn.toFixed(1)} + ${r.systemPerTurn.toFixed(1)} | ${(r.cpuPerTurn / base.cpuPerTurn).toFixed(2)} | ${r.wallPerTurn.toFixed(1)} | ${r.othersPerTurn.toFixed(1)} | ${ms(r.p50)} | ${ms(r.p99)} | ${ms(r.max)} | ${r.sends} |`
    )
  }
  if (profileDir) console.log(`\nserver CPU profile written to ${profileDir}`)
  process.exit(0)
}
