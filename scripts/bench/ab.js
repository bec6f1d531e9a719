#!/usr/bin/env node
// Two builds side by side: each root's `bin/brain.js serve` (as `npm start` runs it; a fresh data
// directory each) is started, and 64 sessions of keyed text turns (scripted model) drive one
// server at a time, in alternating phases (the order swapped every phase) so that the machine's
// drift falls on both alike. Prints each build's turns/s and its main thread's CPU per turn as the
// kernel counts it (/proc/<pid>/task/<pid>/stat), pooled over its phases. For a change's A/B:
//
//   git worktree add /tmp/before <commit> && (cd /tmp/before && ln -s $PWD/node_modules && npm run build)
//   node scripts/bench/ab.js /tmp/before . [phases 6] [ms per phase 3000] [--tools]
//
// --tools: tool-loop turns (2 rounds × 4 calls of the example Wasm tool) instead of text turns;
// --http-tools: the same loop with an echo http Environment served by this process (BRAIN_ENVIRONMENTS);
// --host-tools: the same loop with an echo host served by this process (its command stream, its
// results POSTed), as the harness's host-tool row runs it. --sessions N: N sessions instead of 64
// (at 1, the p50 is the figure: each phase's p50 is printed, and their median).
import fs from "node:fs"
import path from "node:path"
import { admitEchoTool, createSessions, echoEnvironment, echoHost, expectStatus, freePort, keyed, mainThreadCpuSeconds, request, spawnProcess, tmp, toolLoop } from "./lib.js"
import { measure, numberFlag } from "./stats.js"
const hostTools = process.argv.includes("--host-tools")
const httpTools = process.argv.includes("--http-tools")
const tools = process.argv.includes("--tools") || hostTools || httpTools
const sessions = numberFlag("--sessions", 64)
const flagValues = new Set(process.argv.slice(2).flatMap((a, i) => (a === "--sessions" ? [i + 1] : [])))
const positional = process.argv.slice(2).filter((a, i) => !a.startsWith("--") && !flagValues.has(i))
const roots = positional.slice(0, 2).map((r) => path.resolve(r))
if (roots.length !== 2) throw new Error("usage: node scripts/bench/ab.js <root A> <root B> [phases] [ms per phase]")
const phases = Number(positional[2] ?? 6)
const phaseMs = Number(positional[3] ?? 3000)
const environment = httpTools ? await echoEnvironment() : undefined
console.log(`method: both servers started; ${sessions} sessions of keyed ${hostTools ? "tool-loop turns (2 rounds × 4 calls of an echo host's tool)" : httpTools ? "tool-loop turns (2 rounds × 4 calls of an echo http Environment's tool, in this process)" : tools ? "tool-loop turns (2 rounds × 4 calls of the example Wasm tool)" : "text turns"} drive one at a time, ${phases} phases of ${phaseMs} ms each, alternating (after 3 s of warm-up each); main-thread CPU from /proc`)
const servers = []
for (const root of roots) {
  const port = await freePort()
  const s = await spawnProcess(process.execPath, ["--max-semi-space-size=32", path.join(root, "bin/brain.js"), "serve", "--listen", `127.0.0.1:${port}`, "--data-dir", fs.mkdtempSync(path.join(tmp, "ab-"))], { ready: /brain listening/, env: { UV_THREADPOOL_SIZE: "64", ...(environment ? { BRAIN_ENVIRONMENTS: environment.bindings } : {}) } })
  const host = hostTools ? await echoHost(port) : undefined
  const body = host
    ? toolLoop({ name: "app", driver: "host", host: host.host_id })
    : environment
    ? toolLoop(environment.environment)
    : tools
    ? toolLoop({ name: "wasm", driver: "brain" }, { module: await admitEchoTool(port) })
    : { model: { provider: "scripted" } }
  const ids = await createSessions(port, sessions, body)
  const send = (i) => expectStatus(request(port, "POST", `/v1/sessions/${ids[i]}/messages`, { input: { message: tools ? "go" : "hello" } }, keyed()), 200)
  servers.push({ root, s, send, host, n: 0, cpu: 0, ms: 0, p50s: [] })
}
for (const sv of servers) await measure(sv.send, sessions, 3000)
for (let p = 0; p < phases; p++) {
  const order = p % 2 === 0 ? servers : [...servers].reverse()
  for (const sv of order) {
    const c0 = mainThreadCpuSeconds(sv.s.pid)
    const t0 = performance.now()
    const r = await measure(sv.send, sessions, phaseMs)
    sv.ms += performance.now() - t0
    sv.cpu += mainThreadCpuSeconds(sv.s.pid) - c0
    sv.n += r.n
    sv.p50s.push(r.p50)
  }
}
for (const sv of servers) {
  const p50s = [...sv.p50s].sort((a, b) => a - b)
  const shown = sv.p50s.map((p) => p.toFixed(2)).join(" ")
  console.log(`${sv.root}: ${(sv.n / (sv.ms / 1000)).toFixed(0)} turns/s, main-thread cpu ${(sv.cpu * 1e6 / sv.n).toFixed(0)} µs/turn (n ${sv.n}); p50 ms by phase ${shown}, median ${p50s[Math.floor(p50s.length / 2)].toFixed(2)}`)
  sv.host?.close()
  await sv.s.stop()
}
environment?.close()
