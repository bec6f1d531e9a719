#!/usr/bin/env node
// How many instructions Effect's runtime runs, and how many fibers it starts, per keyed text turn
// (or per tool-loop turn with --tools: the example Wasm tool; with --host-tools: an echo host over
// HTTP served by this process, whose own work is not counted): deterministic where timings are not. The server is the
// unbundled build (`dist/cli/main.js serve`, the same code as bin/brain.js's bundle) with
// scripts/bench/effectOpsPreload.mjs counting on the main thread.
//
//   npm run build && node scripts/bench/effectOps.js [--tools | --host-tools] [--ts-loop] [--sessions 16] [--seconds 3] [--top 40]
//
// --ts-loop: text turns of the official loop's TypeScript reference (scripts/bench/loopsServer.js)
// instead of the WebAssembly loop: what the Wasm turn adds is the difference.
//
// Prints instructions and fibers per turn, by instruction kind, the sites (the source of the
// function an instruction runs) with the most instructions per turn, and the instructions by the
// fiber that ran them (named by where it was started: the nearest frames of Brain's code).
//
// BRAIN_BENCH_OPS_ROOT=<text>: the sites table counts only fibers whose name holds <text> (e.g.
// "SocketRoutes", the requests taken at the socket). BRAIN_BENCH_OPS_TRACE=<file>: the first
// 20,000 instructions counted (of those fibers), in order, each with its fiber's number, written
// to <file>: one fiber's lines are one turn's path through the runtime, instruction by instruction.
import fs from "node:fs"
import path from "node:path"
import { admitEchoTool, createSessions, echoHost, toolLoop, expectStatus, freePort, keyed, request, ROOT, settle, spawnProcess, tmp } from "./lib.js"
import { measure, numberFlag } from "./stats.js"

const hostTools = process.argv.includes("--host-tools")
const tools = process.argv.includes("--tools") || hostTools
const tsLoop = process.argv.includes("--ts-loop")
const sessions = numberFlag("--sessions", 16)
const seconds = numberFlag("--seconds", 3)
const top = numberFlag("--top", 40)
const out = path.join(tmp, "effect-ops.json")
const turnsFile = path.join(tmp, "effect-ops-turns.txt")
const port = await freePort()
const dataDir = fs.mkdtempSync(path.join(tmp, "data-"))
const server = await spawnProcess(
  process.execPath,
  [
    "--allow-natives-syntax",
    "--max-semi-space-size=32",
    "--import",
    path.join(ROOT, "scripts/bench/effectOpsPreload.mjs"),
    // --ts-loop: the server bench:loops runs, which also serves the TypeScript reference loop.
    ...(tsLoop ? [path.join(ROOT, "scripts/bench/loopsServer.js")] : [path.join(ROOT, "dist/cli/main.js"), "serve", "--listen", `127.0.0.1:${port}`, "--data-dir", dataDir])
  ],
  {
    ready: /brain listening/,
    env: { BRAIN_BENCH_OPS: out, BRAIN_BENCH_OPS_ROOT: process.env.BRAIN_BENCH_OPS_ROOT ?? "", BRAIN_BENCH_OPS_TRACE: process.env.BRAIN_BENCH_OPS_TRACE ?? "", BRAIN_BENCH_OPS_TURNS: turnsFile, UV_THREADPOOL_SIZE: "64", ...(tsLoop ? { BRAIN_LISTEN: `127.0.0.1:${port}`, BRAIN_DATA_DIR: dataDir } : {}) }
  }
)
let body = { model: { provider: "scripted" }, ...(tsLoop ? { agentloop: "official-ts" } : {}) }
let send = { input: { message: "hello" } }
let host
if (hostTools) {
  host = await echoHost(port)
  body = toolLoop({ name: "app", driver: "host", host: host.host_id })
  send = { input: { message: "go" } }
} else if (tools) {
  body = toolLoop({ name: "wasm", driver: "brain" }, { module: await admitEchoTool(port) })
  send = { input: { message: "go" } }
}
const ids = await createSessions(port, sessions, body)
const turn = (i) => expectStatus(request(port, "POST", `/v1/sessions/${ids[i]}/messages`, send, keyed()), 200)
await measure(turn, sessions, 3000)
process.kill(server.pid, "SIGTTIN")
await settle(50)
const r = await measure(turn, sessions, seconds * 1000)
await settle(50)
fs.writeFileSync(turnsFile, String(r.n))
process.kill(server.pid, "SIGTTOU")
for (let i = 0; i < 250 && !fs.existsSync(out); i++) await settle(20)
await settle(100)
host?.close()
await server.stop()
const c = JSON.parse(fs.readFileSync(out, "utf8"))
const per = (n) => (n / c.turns).toFixed(1)
console.log(`method: ${sessions} sessions send keyed ${hostTools ? "tool-loop (2 rounds × 4 calls of an echo host's tool)" : tools ? "tool-loop (2 rounds × 4 calls of the example Wasm tool)" : "text"} turns back to back (scripted model);
  the runtime's instructions and fibers on the server's main thread counted over ${seconds} s after a 3 s warm-up
turns: ${c.turns}; instructions per turn: ${per(c.total)}; fibers per turn: ${per(c.fibers)}; generator functions run for the first time per turn: ${per(c.newGenerators)}

| instruction kind | per turn |
| --- | ---: |
${c.byKind.sort((a, b) => b[1] - a[1]).map(([k, n]) => `| ${k} | ${per(n)} |`).join("\n")}

| site (kind, the function it runs) | per turn |
| --- | ---: |
${c.bySite.sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, n]) => `| \`${k.replace(/\|/g, "\\|").replace(/`/g, "'")}\` | ${per(n)} |`).join("\n")}

| fibers by where they were started (the nearest frames of Brain's code when they first resumed) | per turn |
| --- | ---: |
${c.byRoot.sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, n]) => `| \`${k.replace(/\|/g, "\\|").replace(/`/g, "'")}\` | ${per(n)} |`).join("\n")}

| instructions by the root of the fiber that ran them | per turn |
| --- | ---: |
${c.byFiberRoot.sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, n]) => `| \`${k.replace(/\|/g, "\\|").replace(/`/g, "'")}\` | ${per(n)} |`).join("\n")}

| generator functions run for the first time (each a prototype and a hidden class of its own), by source | per turn |
| --- | ---: |
${c.newBySource.sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, n]) => `| \`${k.replace(/\|/g, "\\|").replace(/`/g, "'")}\` | ${per(n)} |`).join("\n")}`)
