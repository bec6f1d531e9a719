#!/usr/bin/env node
// What a keyed text turn allocates on the server's main thread, garbage included: V8's sampling
// heap profiler (one sample per 256 bytes allocated, collected objects kept) over the timed turns,
// per turn, by allocating function and by the nearest of Brain's own functions on the stack
// (Effect's runtime allocates on behalf of whichever effect it runs; its own frames name none).
//
//   npm run build && node scripts/bench/alloc.js [--sessions 16] [--seconds 3] [--top 20] [--tools | --host-tools]
//
// --tools: tool-loop turns (2 rounds × 4 calls of the example Wasm tool), as ab.js --tools runs them;
// --host-tools: the same loop calling an echo host served by this process (its own work not counted).
//
// The server is the product (`bin/brain.js serve`) with scripts/bench/heapSample.cjs preloaded;
// the profiler slows it (about a fifth of its usual rate), so only the bytes are figures here.
import fs from "node:fs"
import path from "node:path"
import { SourceMap } from "node:module"
import { admitEchoTool, createSessions, echoHost, expectStatus, keyed, request, ROOT, settle, startBrain, tmp, toolLoop } from "./lib.js"
import { measure, numberFlag } from "./stats.js"

const sessions = numberFlag("--sessions", 16)
const seconds = numberFlag("--seconds", 3)
const top = numberFlag("--top", 20)
const file = path.join(tmp, "heap-sample.json")
const server = await startBrain({ nodeArgs: ["--require", path.join(ROOT, "scripts/bench/heapSample.cjs")], env: { BRAIN_BENCH_HEAP_SAMPLE: file } })
const hostTools = process.argv.includes("--host-tools")
const tools = process.argv.includes("--tools") || hostTools
const host = hostTools ? await echoHost(server.port) : undefined
const body = host
  ? toolLoop({ name: "app", driver: "host", host: host.host_id })
  : tools
  ? toolLoop({ name: "wasm", driver: "brain" }, { module: await admitEchoTool(server.port) })
  : { model: { provider: "scripted" } }
const ids = await createSessions(server.port, sessions, body)
const send = (i) => expectStatus(request(server.port, "POST", `/v1/sessions/${ids[i]}/messages`, { input: { message: tools ? "go" : "hello" } }, keyed()), 200)
await measure(send, sessions, 3000)
process.kill(server.pid, "SIGTTIN")
await settle(100)
const r = await measure(send, sessions, seconds * 1000)
process.kill(server.pid, "SIGTTOU")
for (let i = 0; i < 500 && !fs.existsSync(file); i++) await settle(20)
await settle(500)
host?.close()
await server.stop()

const profile = JSON.parse(fs.readFileSync(file, "utf8"))
if (profile.error) throw new Error(profile.error)
const mapFile = path.join(ROOT, "dist/brain.mjs.map")
const map = fs.existsSync(mapFile) ? new SourceMap(JSON.parse(fs.readFileSync(mapFile, "utf8"))) : undefined
const named = (frame) => {
  let { url, lineNumber: line } = frame
  if (map && url.endsWith("/dist/brain.mjs")) {
    const e = map.findEntry(frame.lineNumber, frame.columnNumber)
    if (e?.originalSource) [url, line] = [e.originalSource, e.originalLine]
  }
  url = url.replace(/^.*?\/(node_modules|src)\//, "$1/")
  return { key: `${frame.functionName || "(anonymous)"} ${url}${url ? `:${line + 1}` : ""}`, brain: url.startsWith("src/") }
}
const self = new Map()
const byBrain = new Map()
let total = 0
const add = (m, k, v) => m.set(k, (m.get(k) ?? 0) + v)
const walk = (node, brain) => {
  const n = named(node.callFrame)
  const owner = n.brain ? n.key : brain
  total += node.selfSize
  add(self, n.key, node.selfSize)
  add(byBrain, owner ?? "(no Brain function on the stack: Effect's runtime, Node)", node.selfSize)
  for (const c of node.children) walk(c, owner)
}
walk(profile.head, undefined)
const kib = (b) => (b / r.n / 1024).toFixed(1)
const table = (title, m) =>
  [`| ${title} | KiB per turn |`, "| --- | ---: |", ...[...m].sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, v]) => `| \`${k}\` | ${kib(v)} |`)].join("\n")
console.log(`method: ${sessions} sessions send keyed ${tools ? `tool-loop turns (2 rounds × 4 calls of ${host ? "an echo host's tool" : "the example Wasm tool"})` : "text turns"} back to back (scripted model, the official Wasm loop); V8's sampling heap
  profiler on the server's main thread (256-byte interval, collected objects included) over ${seconds} s after a 3 s warm-up
turns: ${r.n}; sampled allocation: ${kib(total)} KiB per turn

${table("allocated by (function, file:line)", self)}

${table("allocated under (the nearest of Brain's functions on the stack)", byBrain)}`)
