#!/usr/bin/env node
// In-process turn benchmark: turns/s and turn latency through Sessions on the file
// journal, next to the journal's durable-commit floor measured in the same run, for the official
// loop as it ships (the WebAssembly guest dist/loops/official.wasm in the worker pool) and as its
// TypeScript reference (src/loops/official.ts, run in the main thread).
//
//   npm run bench:turns [-- --seconds 5] [--loop wasm|ts]
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { execSync } from "node:child_process"
import { Effect, Layer, ManagedRuntime } from "effect"
import { sessionServices } from "../../dist/Composition.js"
import * as AgentloopsModules from "../../dist/layers/AgentloopsModules.js"
import * as CheckpointStore from "../../dist/layers/CheckpointStore.js"
import * as JournalFile from "../../dist/layers/JournalFile.js"
import * as ModelsScripted from "../../dist/layers/ModelsScripted.js"
import * as ToolsInProcess from "../../dist/layers/ToolsInProcess.js"
import * as WasmHostWorkers from "../../dist/layers/WasmHostWorkers.js"
import * as FileDriver from "../../dist/layers/journal/FileDriver.js"
import { Journal } from "../../dist/services/Journal.js"
import { Sessions } from "../../dist/services/Sessions.js"
import * as ServerConfig from "../../dist/services/ServerConfig.js"
import { mintSessionId } from "../../dist/domain/Ids.js"
import { measure, ms, pct } from "./stats.js"

const args = process.argv.slice(2)
const seconds = Number(args[args.indexOf("--seconds") + 1]) || 4
const only = args.includes("--loop") ? args[args.indexOf("--loop") + 1] : undefined
const loops = ["wasm", "ts"].filter((l) => only === undefined || l === only)
const officialModule = new Uint8Array(fs.readFileSync(new URL("../../dist/loops/official.wasm", import.meta.url)))

/** Sessions on the file journal, composed as the server composes them; `loop` "wasm" runs the official guest, "ts" its TypeScript reference. */
const layerFor = (dataDir, loop) =>
  sessionServices({
    config: ServerConfig.defaults,
    journal: JournalFile.layerNode({ dataDir }),
    checkpoints: CheckpointStore.layerFile(dataDir).pipe(Layer.provide(FileDriver.layerNode)),
    base: Layer.empty,
    models: ModelsScripted.layer,
    wasm: WasmHostWorkers.layer,
    agentloops: AgentloopsModules.layer(loop === "wasm" ? { officialModule } : {}),
    tools: { t: ToolsInProcess.succeedAfter(0) },
    beside: Layer.empty
  })

const rows = []
let commit
for (const loop of loops) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bench-turns-"))
  const runtime = ManagedRuntime.make(layerFor(dataDir, loop))
  const run = (eff) => runtime.runPromise(eff)

  // The floor: one durable commit of one small record, sequential, on one session.
  const floorSession = await run(Effect.gen(function*() {
    const journal = yield* Journal
    const s = yield* mintSessionId
    yield* journal.create(s)
    return s
  }))
  const journal = await run(Journal)
  commit ??= await measure(
    () => run(journal.append(floorSession, [{ kind: "kv_put", payload: { key: "k", value: "x".repeat(150) } }])),
    1,
    Math.min(2000, seconds * 500)
  )

  const shapes = [
    { tools: 0, commits: 5, replies: undefined },
    {
      tools: 4,
      commits: 11,
      replies: [{ tool_calls: [0, 1, 2, 3].map((i) => ({ name: "t", input: { i } })) }, { text: "done" }]
    }
  ]
  for (const shape of shapes) {
    for (const concurrency of [1, 64]) {
      const sessions = await run(Effect.gen(function*() {
        const s = yield* Sessions
        const ids = []
        for (let i = 0; i < concurrency; i++) {
          ids.push((yield* s.create({
            model: { provider: "scripted", ...(shape.replies ? { replies: shape.replies } : {}) },
            tools: [{ name: "t" }]
          })).session_id)
        }
        return { s, ids }
      }))
      const turn = (i) => run(sessions.s.send(sessions.ids[i], { message: "hello" }))
      // Warm up: one round at this concurrency starts the pool's threads and the JIT before timing.
      await Promise.all(sessions.ids.map((_, i) => turn(i)))
      const elu = performance.eventLoopUtilization()
      const r = await measure(turn, concurrency, seconds * 1000)
      // The main thread's busy time per turn: what bounds throughput when it is saturated.
      const busy = performance.eventLoopUtilization(elu)
      r.mainMs = busy.active / r.n
      rows.push({ ...shape, loop, concurrency, ...r, floor: shape.commits * commit.p50 })
    }
  }
  await runtime.dispose()
  fs.rmSync(dataDir, { recursive: true, force: true })
}

let disk = ""
try {
  disk = execSync(`df -T ${os.tmpdir()} | tail -1`).toString().trim().split(/\s+/).slice(0, 2).join(" ")
} catch {}
console.log(`# In-process turns through Sessions on the file journal
method: each of N sessions runs turns back to back for ${seconds}s (sync send; scripted instant model;
  the official loop, "wasm" = the guest in the worker pool as served, "ts" = its TypeScript reference
  in the main thread; "4 tools" = the model asks for 4 tool calls at once, each an instant in-process tool,
  then answers). Every commit is fdatasync'd. "main-thread ms/turn" is the main event loop's busy
  time (performance.eventLoopUtilization) over the run divided by the turns: guests run on other threads. The floor is the number of sequential durable commits a
  turn needs x the p50 of one durable commit of one record, measured in this run on the same disk.
node ${process.version}, ${os.cpus().length} cpus, UV_THREADPOOL_SIZE=${process.env.UV_THREADPOOL_SIZE ?? "4 (default)"}, tmp on ${disk}
one durable commit: p50 ${ms(commit.p50)} ms, p99 ${ms(commit.p99)} ms (${Math.round(commit.rate)}/s sequential)
`)
console.log("| loop | tools | sessions | turns/s | p50 ms | p99 ms | main-thread ms/turn | commits/turn | floor ms | p50 / floor |")
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (const r of rows) {
  console.log(`| ${r.loop} | ${r.tools} | ${r.concurrency} | ${Math.round(r.rate)} | ${ms(r.p50)} | ${ms(r.p99)} | ${ms(r.mainMs)} | ${r.commits} | ${ms(r.floor)} | ${(r.p50 / r.floor).toFixed(2)} |`)
}
