#!/usr/bin/env node
// What owning sessions in more than one process could give on this machine, before any routing
// exists: N independent Brain servers (each `bin/brain.js serve` on its own data directory), the
// 64 sessions split evenly between them, and a client that sends each turn straight to its
// session's server (the "redirect" model of docs/scaling.md: no forwarding hop). That is the
// ceiling of N owner processes; forwarding (scripts/bench/routing.js) only takes from it.
//
//   npm run build && node scripts/bench/owners.js [--seconds 4] [--rounds 3] [--sessions 64] [--owners 1,2] [--tools]
//
// Rounds alternate the owner counts so each sees the same machine. Each row: turns/s, p50, the
// servers' CPU per turn (all their threads, from /proc), the client's CPU per turn, and how busy
// the machine's cores were. With --tools the turn is the 2 rounds × 4 calls tool loop of the
// example Wasm tool (in a `brain` Environment) instead of a text turn.
import fs from "node:fs"
import os from "node:os"
import { admitEchoTool, cpuSeconds, createSessions, expectStatus, keyed, request, settle, startBrain, toolLoop } from "./lib.js"
import { ms, measure, numberFlag } from "./stats.js"

const seconds = numberFlag("--seconds", 4)
const rounds = numberFlag("--rounds", 3)
const sessions = numberFlag("--sessions", 64)
const tools = process.argv.includes("--tools")
const ownerCounts = (() => {
  const i = process.argv.indexOf("--owners")
  return i >= 0 ? process.argv[i + 1].split(",").map(Number) : [1, 2]
})()

const SEND = { input: { message: "hello" } }
const CLK_BUSY = () => {
  const [, ...t] = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).map(Number)
  const [user, nice, system, idle, iowait, irq, softirq, steal] = t
  return { busy: user + nice + system + irq + softirq + steal, all: user + nice + system + idle + iowait + irq + softirq + steal }
}

/** Starts `n` servers and `sessions` sessions spread round-robin over them. */
const setUp = async (n) => {
  const servers = []
  for (let k = 0; k < n; k++) servers.push(await startBrain())
  const perServer = await Promise.all(servers.map(async (s, k) => {
    const count = Math.floor(sessions / n) + (k < sessions % n ? 1 : 0)
    const body = tools
      ? toolLoop({ name: "wasm", driver: "brain" }, { module: await admitEchoTool(s.port) })
      : { model: { provider: "scripted" } }
    return (await createSessions(s.port, count, body)).map((id) => ({ port: s.port, id }))
  }))
  // Interleave so worker i's session is on server i mod n.
  const targets = []
  for (let i = 0; targets.length < sessions; i++) for (const list of perServer) if (list[i]) targets.push(list[i])
  return { servers, targets }
}

const send = ({ port, id }) => expectStatus(request(port, "POST", `/v1/sessions/${id}/messages`, SEND, keyed()), 200)

const run = async (n) => {
  const { servers, targets } = await setUp(n)
  // Warm-up: JIT, file handles, the twins.
  await measure((i) => send(targets[i]), sessions, 2000)
  const cpu0 = servers.map((s) => cpuSeconds(s.pid))
  const client0 = process.cpuUsage()
  const m0 = CLK_BUSY()
  const r = await measure((i) => send(targets[i]), sessions, seconds * 1000)
  const m1 = CLK_BUSY()
  const client = process.cpuUsage(client0)
  const serverCpu = servers.reduce((sum, s, k) => sum + cpuSeconds(s.pid) - cpu0[k], 0)
  await Promise.all(servers.map((s) => s.stop("SIGKILL")))
  await settle(300)
  return {
    n,
    rate: r.rate,
    p50: r.p50,
    samples: r.n,
    serverMs: (1000 * serverCpu) / r.n,
    clientMs: ((client.user + client.system) / 1000) / r.n,
    busy: (m1.busy - m0.busy) / (m1.all - m0.all)
  }
}

console.log(
  `method: ${sessions} sessions sending ${tools ? "tool-loop turns (2 rounds × 4 calls of the example Wasm tool)" : "keyed text turns"} back to back (scripted model),`
)
console.log(
  `  split evenly over N independent Brain servers, each turn sent straight to its session's server; ${seconds} s per row after 2 s of warm-up;`
)
console.log(`  ${rounds} rounds alternating N = ${ownerCounts.join(", ")}; ${os.cpus().length} cores, load average ${os.loadavg()[0].toFixed(2)} at start`)
console.log("")
console.log("| round | owners | turns/s | p50 ms | servers' CPU ms/turn (all threads) | client CPU ms/turn | machine busy |")
console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for (let round = 1; round <= rounds; round++) {
  for (const n of ownerCounts) {
    const r = await run(n)
    console.log(`| ${round} | ${r.n} | ${r.rate.toFixed(0)} | ${ms(r.p50)} | ${r.serverMs.toFixed(2)} | ${r.clientMs.toFixed(2)} | ${(100 * r.busy).toFixed(0)} % |`)
  }
}
process.exit(0)
