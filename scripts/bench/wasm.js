#!/usr/bin/env node
// WebAssembly host benchmark, in-process (the pool's worker threads, no HTTP):
//
//   npm run bench:wasm [-- --activations 2000 --calls 20000] [--inline-ms 10]
//
// - activation overhead: a guest that answers at once, run N times one after the other through
//   the pool (a fresh instance and memory each time): wall time per activation, beside a plain
//   in-process call of a function doing the same, measured in the same run;
// - host-call round trip: one activation making N `kv_read` calls answered at once by the host
//   side (the bridge's decode/encode included, no journal): the time between one call's arrival
//   and the next one's, i.e. answer delivery + the guest taking it + the next request reaching
//   the main thread; and the same with the real HostBridge over an in-memory kv;
// - instantiation of the official loop (dist/loops/official.wasm) on this thread: with a new
//   memory (its first pages mapped as the data segments are written) and with a memory that was
//   used and zero-filled, as a worker hands one on (wasm/GuestWorker.ts); p50 and mean, since an
//   instance of a reused memory lives until a full GC and what that costs shows in the mean only;
// - the official loop's text turn through the WasmHost (runLoop, the bridge) with an instant Host
//   (no journal), one at a time and 64 at once: on the main thread (as served, its instrumented
//   twin, BRAIN_WASM_INLINE_MS 10) and on a pool of 2 worker threads (BRAIN_WASM_INLINE_MS=0),
//   beside its TypeScript reference (src/loops/official.ts) with the same Host: wall time and CPU
//   per activation, the main thread's and the whole process's.
import * as fs from "node:fs"
import { Effect, Exit, Scope } from "effect"
import wabtInit from "wabt"
import { activate, jsonBytes } from "../../dist/layers/wasm/Activation.js"
import { loopServices } from "../../dist/layers/wasm/HostBridge.js"
import { make as makeWasmHost } from "../../dist/layers/WasmHostWorkers.js"
import { officialLoop } from "../../dist/loops/official.js"
import { diffTranscript } from "../../dist/domain/TranscriptDelta.js"
import { admitModule } from "../../dist/layers/wasm/Module.js"
import { Pool } from "../../dist/layers/wasm/Pool.js"
import { runInline } from "../../dist/layers/wasm/Inline.js"
import { twinOf } from "../../dist/layers/wasm/InlineModules.js"
import { ms, pct, numberFlag } from "./stats.js"

const ACTIVATIONS = numberFlag("--activations", 2000)
const TURNS = numberFlag("--turns", 3000)
const CALLS = numberFlag("--calls", 20000)
// What the main thread lends an inline activation (BRAIN_WASM_INLINE_MS; 10 as served). A test
// raises it, so that a loaded machine's pauses do not move activations it checks ran inline.
const INLINE_MS = numberFlag("--inline-ms", 10)
const LIMITS = { computeMs: 60_000, ioBytes: 16 << 20, memoryBytes: 64 << 20 }
const now = () => Number(process.hrtime.bigint()) / 1e6

const wabt = await wabtInit()
const compile = (text) => {
  const m = wabt.parseWat("bench.wat", text, { bulk_memory: true })
  try {
    return new Uint8Array(m.toBinary({}).buffer)
  } finally {
    m.destroy()
  }
}
const prelude = `
  (import "env" "memory" (memory 1))
  (import "brain" "call" (func $call (param i32 i32 i32 i32) (result i64)))
  (global (export "brain_abi_v1") i32 (i32.const 1))
  (global $heap (mut i32) (i32.const 4096))
  (func $alloc (export "brain_alloc") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $n)))
    (block $fits
      (br_if $fits (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
      (drop (memory.grow (i32.add (i32.div_u (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536))) (i32.const 65536)) (i32.const 1)))))
    (local.get $p))`
const answer = compile(`(module ${prelude}
  (data (i32.const 100) "{\\"ok\\":1}")
  (func (export "brain_run") (param i32 i32) (result i64) (i64.or (i64.shl (i64.const 100) (i64.const 32)) (i64.const 8))))`)
const caller = compile(`(module ${prelude}
  (data (i32.const 100) "kv_read")
  (data (i32.const 120) "{\\"key\\":\\"k\\"}")
  (data (i32.const 200) "{\\"ok\\":1}")
  (func (export "brain_run") (param i32 i32) (result i64)
    (local $n i32)
    (local.set $n (i32.const ${CALLS}))
    (loop $more
      (drop (call $call (i32.const 100) (i32.const 7) (i32.const 120) (i32.const 11)))
      (global.set $heap (i32.const 4096)) ;; the answers are read: reuse their memory
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $more (local.get $n)))
    (i64.or (i64.shl (i64.const 200) (i64.const 32)) (i64.const 8))))`)

// Admission compiles off the main thread (wasm/Compiler.ts): asynchronous.
const admit = (bytes) => Effect.runPromise(admitModule(bytes, { maxModuleBytes: 1 << 20, maxMemoryBytes: LIMITS.memoryBytes }))
const pool = new Pool(1)
const input = { input: { message: "x" }, transcript: [], configuration: {}, events: [], runtime: {} }

/** An activation on the pool. */
const onPool = (activation) => activate(pool, activation, LIMITS)

/** The same on the main thread (Inline.ts): the module's instrumented twin, no thread crossed. */
const INLINE_LIMITS = { ...LIMITS, inlineMs: 10_000 }
const inline = async (bytes, module) => {
  const t = await twinOf(module.hash, bytes)
  if (!("module" in t)) throw new Error(`no twin: ${t.failure}`)
  return (activation) =>
    runInline(t.module, activation, INLINE_LIMITS, {
      done: Effect.succeed,
      moved: (reason) => Effect.die(new Error(`moved: ${reason}`)),
      failed: Effect.fail
    })
}

const activationOf = (module, perform) => ({ moduleId: module.hash, module: module.module, memory: module.memory, entry: "brain_run", input: jsonBytes(input), perform })

/** `n` activations one after another through `run`; wall time of each. */
const activations = async (run, module, n) => {
  const times = []
  for (let i = 0; i < n; i++) {
    const t0 = now()
    await Effect.runPromise(run(activationOf(module, () => Effect.succeed("{}"))))
    times.push(now() - t0)
  }
  return times.sort((a, b) => a - b)
}

/** One activation through `run`; the intervals between its host calls' arrivals, in µs. */
const roundTrips = async (run, module, perform) => {
  const arrivals = []
  await Effect.runPromise(run(activationOf(module, (op, request) =>
    Effect.suspend(() => {
      arrivals.push(now())
      return perform(op, request)
    }))))
  const gaps = []
  for (let i = 1; i < arrivals.length; i++) gaps.push((arrivals[i] - arrivals[i - 1]) * 1000)
  return gaps.sort((a, b) => a - b)
}

const answering = await admit(answer)
const answeringInline = await inline(answer, answering)
await activations(answeringInline, answering, 200) // warm-up
const timesInline = await activations(answeringInline, answering, ACTIVATIONS)
await activations(onPool, answering, 200) // warm-up
const times = await activations(onPool, answering, ACTIVATIONS)
const plain = []
const plainCall = (text) => JSON.parse(JSON.stringify({ ok: JSON.parse(text).input }))
for (let i = 0; i < ACTIVATIONS; i++) {
  const t0 = now()
  plainCall(JSON.stringify(input))
  plain.push(now() - t0)
}
plain.sort((a, b) => a - b)

const calling = await admit(caller)
const fixed = await roundTrips(onPool, calling, () => Effect.succeed('{"ok":{"found":false}}'))
const host = {
  kvRead: () => Effect.succeed({ _tag: "None" }),
  telemetry: () => Effect.void,
  refusal: () => undefined
}
const bridged = await roundTrips(onPool, calling, loopServices({ ...host, kvRead: () => Effect.sync(() => ({ _id: "Option", _tag: "None" })) }, []))
const callingInline = await inline(caller, calling)
const fixedInline = await roundTrips(callingInline, calling, () => Effect.succeed('{"ok":{"found":false}}'))
const bridgedInline = await roundTrips(callingInline, calling, loopServices({ ...host, kvRead: () => Effect.sync(() => ({ _id: "Option", _tag: "None" })) }, []))
await Effect.runPromise(pool.close)

const admittedOfficial = await admit(new Uint8Array(fs.readFileSync(new URL("../../dist/loops/official.wasm", import.meta.url))))
const official = admittedOfficial.module
const officialImports = (memory) => ({ env: { memory }, brain: { call: () => 0n, fail: () => {} } })
const OFFICIAL_LIMITS = { initial: admittedOfficial.memory.initial, maximum: LIMITS.memoryBytes / 65536 }
const instantiations = (reuse) => {
  const times = []
  let spare
  for (let i = 0; i < ACTIVATIONS; i++) {
    const t0 = now()
    let memory = spare
    if (memory === undefined) memory = new WebAssembly.Memory(OFFICIAL_LIMITS)
    new WebAssembly.Instance(official, officialImports(memory))
    times.push(now() - t0)
    if (reuse) {
      // As a worker does after the activation, off its path: zero-filled for the next instance.
      new Uint8Array(memory.buffer).fill(0)
      spare = memory
    }
  }
  return times.sort((a, b) => a - b)
}
const newMemory = instantiations(false)
const reusedMemory = instantiations(true)
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length

// The official loop's text turn, Wasm (as served) beside TypeScript, with an instant Host.
const scope = Effect.runSync(Scope.make())
const HOST_LIMITS = { workers: 2, memoryBytes: 128 << 20, computeMs: 10_000, ioBytes: 16 << 20, moduleBytes: 8 << 20 }
const officialBytes = new Uint8Array(fs.readFileSync(new URL("../../dist/loops/official.wasm", import.meta.url)))
const poolHost = Effect.runSync(Scope.extend(makeWasmHost({ ...HOST_LIMITS, inlineMs: 0 }), scope))
const poolModule = await Effect.runPromise(poolHost.admit(officialBytes))
const inlineHost = Effect.runSync(Scope.extend(makeWasmHost({ ...HOST_LIMITS, inlineMs: INLINE_MS, inlineAtAdmission: true }), scope))
const inlineModule = await Effect.runPromise(inlineHost.admit(officialBytes))
const transcript = []
for (let i = 0; i < 10; i++) transcript.push({ role: "user", content: "hello" }, { role: "assistant", content: `echo: hello ${i}` })
const turnInput = {
  input: { message: "hello" },
  transcript,
  configuration: { model: { provider: "scripted" }, tools: [{ name: "t" }] },
  events: ["turn_started", "activation_started", "model_call_started", "model_call_ended", "activation_ended", "turn_ended"].map((kind, i) => ({
    // Events as the journal's projection gives them (domain/Projection.ts, Event): Brain's own have no origin.
    session_id: "s_bench", sequence: 100 + i, recorded_at_ms: 1764590000000 + i, kind, data: { sequence: 99 + i }
  })),
  runtime: { session_id: "s_bench", turn: 120, activation: 121, now_ms: 1764590000000, seed: 1 }
}
const instantHost = () => {
  let saved = transcript
  return {
    model: () => Effect.succeed({ text: "echo: hello", tool_calls: [], stop_reason: "end_turn" }),
    setTranscript: (messages) => Effect.sync(() => void (diffTranscript(saved, messages), (saved = messages))),
    setTranscriptAtEnd: (messages) => Effect.sync(() => void (diffTranscript(saved, messages), (saved = messages))),
    dispatch: () => Effect.succeed([]),
    emit: () => Effect.succeed(1),
    telemetry: () => Effect.void,
    refusal: () => undefined,
    kvRead: () => Effect.succeedNone,
    kvPut: () => Effect.void,
    kvDelete: () => Effect.void,
    events: () => Effect.succeed([])
  }
}
const loopsUnderTest = {
  inline: (host) => inlineHost.runLoop(inlineModule, turnInput, host),
  pool: (host) => poolHost.runLoop(poolModule, turnInput, host),
  ts: (host) => officialLoop.activate(turnInput, host)
}
const LOOPS = Object.keys(loopsUnderTest)
/** The main thread's CPU (user + system) in µs, from /proc (Linux); undefined elsewhere. */
const mainCpu = () => {
  try {
    const f = fs.readFileSync(`/proc/self/task/${process.pid}/stat`, "utf8").split(") ")[1].split(" ")
    return (Number(f[11]) + Number(f[12])) * 1e6 / 100
  } catch {
    return undefined
  }
}
const turns = async (loop, n, concurrency) => {
  const times = []
  let started = 0
  const main0 = mainCpu()
  const cpu0 = process.cpuUsage()
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (started++ < n) {
      const t0 = now()
      const result = await Effect.runPromise(loopsUnderTest[loop](instantHost()))
      if (result?.text !== "echo: hello") throw new Error(`unexpected result ${JSON.stringify(result)}`)
      times.push(now() - t0)
    }
  }))
  const cpu = process.cpuUsage(cpu0)
  const main1 = mainCpu()
  times.sort((a, b) => a - b)
  return { p50: pct(times, 50) * 1000, main: main0 === undefined ? undefined : (main1 - main0) / n, process: (cpu.user + cpu.system) / n }
}
const turnRows = []
for (const concurrency of [1, 64]) {
  for (const loop of LOOPS) await turns(loop, 300, concurrency) // warm-up
  const best = {}
  // Alternating, the better of two each: neither gets the quieter half of a noisy machine.
  for (let round = 0; round < 2; round++) {
    for (const loop of LOOPS) {
      const r = await turns(loop, TURNS, concurrency)
      const b = best[loop]
      best[loop] = b === undefined ? r : { p50: Math.min(b.p50, r.p50), main: Math.min(b.main ?? Infinity, r.main ?? Infinity), process: Math.min(b.process, r.process) }
    }
  }
  turnRows.push({ concurrency, ...best })
}
await Effect.runPromise(Scope.close(scope, Exit.void))
const us = (x) => (x === undefined || !Number.isFinite(x) ? "n/a" : ms(x))

const report = `# WebAssembly host: activation overhead and host-call round trip
method: in-process, on the main thread (the module's instrumented twin, Inline.ts) and on one pool
  thread (worker_threads), guests in WAT compiled with wabt.
  Activation: ${ACTIVATIONS} activations one after another of a guest that answers at once (a fresh
  instance and memory each, its input written through brain_alloc, its output read back), after
  200 warm-up ones; wall time per activation on the main thread. Baseline in the same run: an
  in-process call that parses the input and encodes an answer.
  Host call: one activation making ${CALLS} kv_read calls; the interval between successive calls'
  arrival at the main thread (answer posted + signal + the guest copying it in + the next request
  posted), with the host side answering at once: fixed text, then through the HostBridge
  (decode the request, call the Host, encode the answer).
node ${process.version}

| measure | p50 µs | p90 µs | p99 µs | n |
| --- | ---: | ---: | ---: | ---: |
| activation on the main thread (the twin), an instance put back (docs/abi.md, "Exports") or a new one per call | ${ms(pct(timesInline, 50) * 1000)} | ${ms(pct(timesInline, 90) * 1000)} | ${ms(pct(timesInline, 99) * 1000)} | ${timesInline.length} |
| activation on a worker thread, a fresh instance per call | ${ms(pct(times, 50) * 1000)} | ${ms(pct(times, 90) * 1000)} | ${ms(pct(times, 99) * 1000)} | ${times.length} |
| baseline: in-process call (parse + encode) | ${ms(pct(plain, 50) * 1000)} | ${ms(pct(plain, 90) * 1000)} | ${ms(pct(plain, 99) * 1000)} | ${plain.length} |
| host call round trip on the main thread, fixed answer | ${ms(pct(fixedInline, 50))} | ${ms(pct(fixedInline, 90))} | ${ms(pct(fixedInline, 99))} | ${fixedInline.length} |
| host call round trip on the main thread, kv_read through the HostBridge | ${ms(pct(bridgedInline, 50))} | ${ms(pct(bridgedInline, 90))} | ${ms(pct(bridgedInline, 99))} | ${bridgedInline.length} |
| host call round trip on a worker thread, fixed answer | ${ms(pct(fixed, 50))} | ${ms(pct(fixed, 90))} | ${ms(pct(fixed, 99))} | ${fixed.length} |
| host call round trip on a worker thread, kv_read through the HostBridge | ${ms(pct(bridged, 50))} | ${ms(pct(bridged, 90))} | ${ms(pct(bridged, 99))} | ${bridged.length} |
| instantiate official.wasm, a new memory | ${ms(pct(newMemory, 50) * 1000)} | ${ms(pct(newMemory, 90) * 1000)} | ${ms(pct(newMemory, 99) * 1000)} | ${newMemory.length} |
| instantiate official.wasm, a zeroed reused memory | ${ms(pct(reusedMemory, 50) * 1000)} | ${ms(pct(reusedMemory, 90) * 1000)} | ${ms(pct(reusedMemory, 99) * 1000)} | ${reusedMemory.length} |

instantiate official.wasm, mean µs (GC included): a new memory ${ms(mean(newMemory) * 1000)}, a zeroed reused memory ${ms(mean(reusedMemory) * 1000)}

Official loop, text turn, instant Host (no journal): ${TURNS} turns per phase, phases alternating ${LOOPS.join(", ")} twice, the better of two.
inline = WasmHost.runLoop on the main thread (as served: the instrumented twin, BRAIN_WASM_INLINE_MS ${INLINE_MS}); pool = the same
on a pool of 2 worker threads (BRAIN_WASM_INLINE_MS=0); ts = src/loops/official.ts in this thread. Bridge included in both Wasm rows.
Where the inline host's activations ran: ${JSON.stringify(inlineHost.stats)}.

| concurrent turns | loop | p50 µs | main-thread CPU µs/turn | process CPU µs/turn | p50 / ts | main CPU / ts |
| ---: | --- | ---: | ---: | ---: | ---: | ---: |
${turnRows.flatMap((r) => LOOPS.map((l) => `| ${r.concurrency} | ${l} | ${ms(r[l].p50)} | ${us(r[l].main)} | ${ms(r[l].process)} | ${(r[l].p50 / r.ts.p50).toFixed(2)} | ${r[l].main === undefined ? "n/a" : (r[l].main / r.ts.main).toFixed(2)} |`)).join("\n")}
`
// Written before exiting: to a pipe, stdout is asynchronous and process.exit would cut it short.
process.stdout.write(report, () => process.exit(0))
