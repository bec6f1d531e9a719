// What a session create holds on the V8 heap at its peak, per byte of its request: the measure
// behind CREATE_HEAP_PER_BODY_BYTE (src/domain/Limits.ts). A real server (`bin/brain.js serve`,
// 4 GiB heap, the working-memory bound set out of the way) takes creates of large requests — a
// long system prompt, a long tools list, a long opening transcript — near the body limit, first
// one at a time, then `--concurrent` at once. Before each, three full collections and the used
// heap (the baseline); while it runs, the used heap sampled every millisecond and before every
// collection (v8.GCProfiler): its peak less the baseline, per request byte (Content-Length) and
// per unit of the weight the create is charged by (jsonWeight, about its strings' and keys'
// characters). Also the most the heap kept after a collection in that time (what was live).
//
//   npm run build && node scripts/bench/createHeap.js [--mib 30] [--repeat 3] [--concurrent 4] [--only system,tools,transcript]
import fs from "node:fs"
import path from "node:path"
import { jsonWeight } from "../../dist/layers/sessions/InputBytes.js"
import { request, settle, startBrain, tmp } from "./lib.js"

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i < 0 ? fallback : Number(process.argv[i + 1])
}
const MIB = arg("mib", 30)
const REPEAT = arg("repeat", 3)
const CONCURRENT = arg("concurrent", 4)
const target = MIB * 1024 * 1024

const PRELOAD = path.join(tmp, "peak-heap.cjs")
fs.writeFileSync(
  PRELOAD,
  `const v8 = require("node:v8"), fs = require("node:fs")
let base = 0, peak = 0, kept = 0, timer, profiler
const used = () => v8.getHeapStatistics().used_heap_size
process.on("SIGTTIN", () => {
  global.gc(); global.gc(); global.gc()
  base = peak = kept = used()
  profiler = new v8.GCProfiler(); profiler.start()
  timer = setInterval(() => { const u = used(); if (u > peak) peak = u }, 1)
})
process.on("SIGTTOU", () => {
  clearInterval(timer)
  const { statistics } = profiler.stop()
  for (const s of statistics) {
    peak = Math.max(peak, s.beforeGC.heapStatistics.usedHeapSize)
    kept = Math.max(kept, s.afterGC.heapStatistics.usedHeapSize)
  }
  peak = Math.max(peak, used())
  fs.writeFileSync(process.env.BRAIN_BENCH_PEAK_FILE, JSON.stringify({ base, peak, kept }))
})
`
)

const filler = (n, seed) => {
  let s = ""
  for (let i = 0; s.length < n; i++) s += `${seed} ${i} lorem ipsum dolor sit amet, consectetur adipiscing elit. `
  return s.slice(0, n)
}
const model = { provider: "scripted", replies: [{ text: "ok" }] }
/** Requests of about `target` bytes: grown by whole items until the next would pass it. */
const grow = (make, item, most = target) => {
  const items = []
  let bytes = 200
  for (let i = 0; ; i++) {
    const it = item(i)
    const b = Buffer.byteLength(JSON.stringify(it)) + 1
    if (bytes + b > most) break
    items.push(it)
    bytes += b
  }
  return make(items)
}
const shapes = {
  system: () => ({ model, system: filler(target - 200, "system") }),
  tools: () =>
    grow((tools) => ({ model, tools }), (i) => ({
      name: `tool_${i}`,
      description: filler(400, `tool ${i}`),
      input_schema: { type: "object", properties: { query: { type: "string", description: filler(200, "q") }, limit: { type: "integer", minimum: 1 } }, required: ["query"] }
    })),
  // Within the room a Wasm loop's input leaves an opening transcript (BRAIN_MAX_WASM_IO_BYTES, set to 32 MiB here).
  transcript: () =>
    grow((transcript) => ({ model, transcript }), (i) =>
      i % 2 === 0
        ? { role: "user", content: filler(200, `user ${i}`) }
        : { role: "assistant", content: filler(150, `assistant ${i}`), tool_calls: [{ id: `call_${i}`, name: "lookup", input: { q: filler(40, "q") } }] }, Math.floor(target * 0.85))
}
const only = process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1].split(",") : Object.keys(shapes)

const server = await startBrain({
  gc: true,
  nodeArgs: ["--max-old-space-size=4096", "--require", PRELOAD],
  env: {
    BRAIN_BENCH_PEAK_FILE: path.join(tmp, "peak.json"),
    BRAIN_WORKING_MEMORY_BYTES: String(64 * 1024 * 1024 * 1024),
    BRAIN_INFLIGHT_BODY_BYTES: String(4 * 1024 * 1024 * 1024),
    BRAIN_MAX_WASM_IO_BYTES: String(32 * 1024 * 1024),
    // Several large creates at once on a busy machine: their bodies may wait for the event loop.
    BRAIN_REQUEST_TIMEOUT_MS: "600000"
  }
})
const peakFile = path.join(tmp, "peak.json")
const measured = async (run) => {
  fs.rmSync(peakFile, { force: true })
  process.kill(server.pid, "SIGTTIN")
  await settle(300)
  await run()
  await settle(100)
  process.kill(server.pid, "SIGTTOU")
  for (let i = 0; i < 500 && !fs.existsSync(peakFile); i++) await settle(10)
  await settle(20)
  return JSON.parse(fs.readFileSync(peakFile, "utf8"))
}

const M = (b) => (b / 1024 / 1024).toFixed(1)
console.log(`node ${process.version}; creates of about ${MIB} MiB, ${REPEAT} one at a time, then ${CONCURRENT} at once; 4 GiB heap`)
console.log("shape | at once | body MiB | weight MiB | base MiB | peak - base MiB | per body byte | per weight unit | kept after GC - base MiB | s")
for (const [name, make] of Object.entries(shapes).filter(([n]) => only.includes(n))) {
  const body = make()
  const text = JSON.stringify(body)
  const bytes = Buffer.byteLength(text)
  const weight = jsonWeight(body)
  for (const n of [...Array(REPEAT).fill(1), CONCURRENT]) {
    let started = 0
    let took = 0
    const r = await measured(async () => {
      started = performance.now()
      const answers = await Promise.all(Array.from({ length: n }, () => request(server.port, "POST", "/v1/sessions", text)))
      took = (performance.now() - started) / 1000
      for (const a of answers) if (a.status !== 201) throw new Error(`${name}: ${a.status} ${a.text.slice(0, 300)}`)
    })
    const held = r.peak - r.base
    console.log(
      `${name} | ${n} | ${M(bytes)} | ${M(weight)} | ${M(r.base)} | ${M(held)} | ${(held / (n * bytes)).toFixed(2)} | ${(held / (n * weight)).toFixed(2)} | ${M(r.kept - r.base)} | ${took.toFixed(1)}`
    )
  }
}
await server.stop()
process.exit(0)
