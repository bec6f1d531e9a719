#!/usr/bin/env node
// The benchmark harness: every figure Brain claims about its whole server, from one command.
//
//   npm run bench [-- --seconds 4] [--peer [--peer-rounds 3]] [--quick] [--no-profile] [--only text,profile]
//
// `--only` runs just the named parts, comma-separated: baseline, create, text (1 and 64/256
// sessions), admission (with the first SSE frame), tools, growth, cold, startup, memory, profile,
// peer (the peer still needs --peer). Without it, every part runs. `--profile-dir DIR` keeps the
// profile's .cpuprofile file in DIR; `--profile-tools` profiles the tool loop of the example Wasm
// tool instead of text turns, `--profile-host-tools` that of an echo host served by this process;
// `--profile-sessions N` profiles N sessions instead of 64.
//
// It starts real servers (`bin/brain.js serve`, as `npm start` runs it, each on a fresh data
// directory) and drives them only through HTTP and SSE, with the scripted instant model and an
// echo tool (a host tool over HTTP, a tool of an http Environment, and the example Wasm tool in Brain's own pool); every mutating request carries a fresh Idempotency-Key, as the SDK's do. The
// baseline, measured in the same run: plain node:http answering after K group-committed
// fdatasyncs of ~200 B (K = 1, 4, and at one client K = 3, the sequential commits of a text turn,
// keyed or not, against which its one-session p50 is printed as a ratio). `--peer`
// adds Restate and the durable-request floor from ../shared/peer, driven by the peer's own
// client, in the same run; `--peer-rounds N` runs Restate's rows and Brain's N times in
// alternating order (both servers up throughout) and gives each round's ratio and their median,
// for a machine whose speed drifts between one run and the next. `--quick` runs every probe small and short: CI checks that the harness
// runs, not what it measures. A probe with fewer than 100 samples prints no p99.
import { execSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import {
  admitEchoTool,
  agent,
  createSessions,
  diskOf,
  duBytes,
  echoEnvironment,
  echoHost,
  expectStatus,
  keyed,
  mainThreadCpuSeconds,
  measureWithCpu,
  openSse,
  peerAvailable,
  peerFloor,
  peerLoad,
  restateRows,
  startRestate,
  request,
  ROOT,
  settle,
  slope,
  startBaseline,
  startBrain,
  summarizeProfile,
  toolLoop,
  tmp
} from "./lib.js"
import { ms, numberFlag, pct } from "./stats.js"

const args = process.argv.slice(2)
const quick = args.includes("--quick")
const withPeer = args.includes("--peer")
/** Rounds of the side by side (`--peer-rounds N`): each runs Restate's rows and Brain's, in alternating order. */
const peerRounds = numberFlag("--peer-rounds", 1)
const only = (() => {
  const i = args.indexOf("--only")
  return i >= 0 ? new Set((args[i + 1] ?? "").split(",").map((p) => p.trim()).filter(Boolean)) : undefined
})()
/** Whether the part named `part` runs (every part unless `--only` names some). */
const runs = (part) => only === undefined || only.has(part)
const profile = !args.includes("--no-profile") && !quick && runs("profile")
const seconds = numberFlag("--seconds", quick ? 0.5 : 4)
const COLD_RECORDS = quick ? 300 : 10_000
const COLD_SESSIONS = quick ? 2 : 5
const STARTUP_SESSIONS = quick ? 100 : 10_000
const MEMORY_STEP = quick ? 20 : 250
const MEMORY_TURNS = quick ? 3 : 20
const GROWTH_TURNS = quick ? 40 : 400
/** Tool-loop turns of the growth probe: 12 messages each, so 2,400 messages at its end. */
const GROWTH_TOOL_TURNS = quick ? 8 : 200
/** Samples a probe with its own loop takes at least, past its time. */
const MIN_SAMPLES = quick ? 3 : 100
const CONCURRENCY = quick ? [64] : [64, 256]
const ROUNDS = 2
const CALLS = 4

const SCRIPTED = { model: { provider: "scripted" } }
/** The loop with a host tool served by the host `hostId` (this process's echo host). */
const toolLoopSession = (hostId) => toolLoop({ name: "app", driver: "host", host: hostId }, {}, ROUNDS, CALLS)
/** The same loop with Brain running the tool itself: the example Wasm tool (`moduleId`) in a `brain` Environment. */
const wasmToolLoopSession = (moduleId) => toolLoop({ name: "wasm", driver: "brain" }, { module: moduleId }, ROUNDS, CALLS)
const SEND = { input: { message: "hello" } }
const started = new Date()
/** The commit measured: read before anything runs (the build under test is the one made before this starts). */
const commit = (() => {
  try {
    return execSync("git rev-parse --short HEAD", { cwd: ROOT, stdio: ["ignore", "pipe", "ignore"] }).toString().trim()
  } catch {
    return "(not a git checkout)"
  }
})()
const rows = []
const notes = []
/** One line of the main table. `xs` are latencies in ms (sorted here) when the probe has its own loop. */
const row = (probe, r) => rows.push(probe === undefined ? r : { probe, ...r })
const fromSamples = (xs) => {
  xs.sort((a, b) => a - b)
  return { n: xs.length, p50: pct(xs, 50), p99: pct(xs, 99) }
}

const send = (port, id) => expectStatus(request(port, "POST", `/v1/sessions/${id}/messages`, SEND, keyed()), 200)
/** `turns` turns on each session (one after another on a session), `concurrency` sessions at a time. */
const turnsOn = async (port, ids, turns, concurrency = 32) => {
  let next = 0
  await Promise.all(Array.from({ length: Math.min(concurrency, ids.length) }, async () => {
    while (next < ids.length) {
      const id = ids[next++]
      for (let t = 0; t < turns; t++) await send(port, id)
    }
  }))
}

// ---------------------------------------------------------------------------------------------
// Baselines

// K = 3 at one client only: the floor a keyed text turn's p50 is set against (three durable
// commits in a row: docs/benchmarks.md, "Commit logs sized ahead").
for (const K of runs("baseline") ? [1, 3, 4] : []) {
  const b = await startBaseline(K)
  for (const c of K === 3 ? [1] : [1, ...CONCURRENCY]) {
    const r = await measureWithCpu(b.pid, () => expectStatus(request(b.port, "POST", "/", SEND), 200), c, seconds * 1000)
    row(`baseline: node:http + ${K} group-committed fdatasync${K > 1 ? "s in a row" : ""}, ${c} concurrent`, r)
  }
  await b.stop()
}

// ---------------------------------------------------------------------------------------------
// Brain: requests, turns, SSE, tools on one server

if (["create", "text", "admission", "tools", "growth"].some(runs)) {
  // An echo http Environment served by this process, bound as `echo` (the tool loop's http row).
  const echoEnv = runs("tools") ? await echoEnvironment() : undefined
  const brain = await startBrain(echoEnv ? { env: { BRAIN_ENVIRONMENTS: echoEnv.bindings } } : {})
  const { port, pid } = brain
  const checkTurn = (outcome) => {
    if (outcome.turn.status !== "ended") throw new Error(`a turn did not end: ${JSON.stringify(outcome.turn)}`)
  }
  // Create, one at a time.
  if (runs("create")) row("brain: create a session (201), 1 at a time", await measureWithCpu(pid, () => expectStatus(request(port, "POST", "/v1/sessions", SCRIPTED, keyed()), 201), 1, seconds * 1000))

  if (runs("text")) {
    const [one] = await createSessions(port, 1, SCRIPTED)
    for (let i = 0; i < (quick ? 20 : 200); i++) await send(port, one) // warm-up: JIT, file handles
    row("brain: text turn (sync send, 200 with the outcome), 1 session", await measureWithCpu(pid, () => send(port, one), 1, seconds * 1000))
    // What a key costs: sends with and without an Idempotency-Key, alternating on one session, so
    // both see the same machine (its claim rides on the turn's own appends).
    const pair = { keyed: [], unkeyed: [] }
    const until = performance.now() + seconds * 1000
    for (let i = 0; performance.now() < until || pair.unkeyed.length < MIN_SAMPLES; i++) {
      const k = i % 2 === 0
      const t0 = performance.now()
      await expectStatus(request(port, "POST", `/v1/sessions/${one}/messages`, SEND, k ? keyed() : {}), 200)
      pair[k ? "keyed" : "unkeyed"].push(performance.now() - t0)
    }
    row("brain: text turn with an Idempotency-Key, 1 session, alternating with the next row", fromSamples(pair.keyed))
    row("brain: text turn without a key, 1 session, alternating with the row above", fromSamples(pair.unkeyed))
    for (const c of CONCURRENCY) {
      const ids = await createSessions(port, c, SCRIPTED)
      row(`brain: text turns, ${c} sessions back to back`, await measureWithCpu(pid, (i) => send(port, ids[i]), c, seconds * 1000))
    }
  }

  if (runs("admission")) {
    // Admission (202) and first SSE frame, in one loop on one session with one SSE reader: submit
    // (timed until the 202), time until the reader has turn_started, wait for turn_ended.
    const [s] = await createSessions(port, 1, SCRIPTED)
    let waiting
    const sse = await openSse(port, `/v1/sessions/${s}/events?after=2`, (kind, at) => waiting?.(kind, at))
    const admission = []
    const firstFrame = []
    const deadline = performance.now() + seconds * 1000
    let warm = quick ? 5 : 50
    while (performance.now() < deadline || warm > 0 || admission.length < MIN_SAMPLES) {
      let startedAt
      const ended = new Promise((resolve) => {
        waiting = (kind, at) => {
          if (kind === "turn_started" && startedAt === undefined) startedAt = at
          if (kind === "turn_ended") resolve()
        }
      })
      const t0 = performance.now()
      await expectStatus(request(port, "POST", `/v1/sessions/${s}/messages`, SEND, { prefer: "respond-async", ...keyed() }), 202)
      const t1 = performance.now()
      await ended
      if (warm > 0) {
        warm--
        continue
      }
      admission.push(t1 - t0)
      firstFrame.push(startedAt - t0)
    }
    sse.close()
    row("brain: admission (202 for Prefer: respond-async), 1 session", fromSamples(admission))
    row("brain: first SSE frame (turn_started) after submit, 1 session", fromSamples(firstFrame))
  }

  if (runs("tools")) {
    // The tool loop: the model asks for CALLS echo calls, ROUNDS times, then answers; the tools run
    // in a host Environment served by this process.
    const host = await echoHost(port)
    const TOOLS = toolLoopSession(host.host_id)
    for (const c of [1, 64]) {
      const ids = await createSessions(port, c, TOOLS)
      await Promise.all(ids.map(async (id) => checkTurn(await send(port, id)))) // warm-up
      row(`brain: tool loop ${ROUNDS} rounds × ${CALLS} parallel host-tool calls, ${c} session${c > 1 ? "s" : ""}`,
        await measureWithCpu(pid, async (i) => checkTurn(await send(port, ids[i])), c, seconds * 1000))
    }
    const { answered, refused } = host.counts()
    if (refused > 0) throw new Error(`the echo host had ${refused} results refused`)
    notes.push(`tool loop: the echo host answered ${answered} calls, none refused`)
    host.close()
    // The same loop with Brain running the tool itself, in its Wasm pool: what Restate's peer
    // service does (each call a durable step in the service's own process), with Brain's sandbox.
    const WASM_TOOLS = wasmToolLoopSession(await admitEchoTool(port))
    for (const c of [1, 64]) {
      const ids = await createSessions(port, c, WASM_TOOLS)
      await Promise.all(ids.map(async (id) => checkTurn(await send(port, id)))) // warm-up
      row(`brain: tool loop ${ROUNDS} rounds × ${CALLS} parallel Wasm-tool calls, ${c} session${c > 1 ? "s" : ""}`,
        await measureWithCpu(pid, async (i) => checkTurn(await send(port, ids[i])), c, seconds * 1000))
    }
    // The same loop with the tool in an http Environment (docs/environments.md, "The http
    // protocol"): one POST per call from Brain to the echo Environment this process serves.
    const HTTP_TOOLS = toolLoop(echoEnv.environment, {}, ROUNDS, CALLS)
    for (const c of [1, 64]) {
      const ids = await createSessions(port, c, HTTP_TOOLS)
      await Promise.all(ids.map(async (id) => checkTurn(await send(port, id)))) // warm-up
      row(`brain: tool loop ${ROUNDS} rounds × ${CALLS} parallel http-tool calls, ${c} session${c > 1 ? "s" : ""}`,
        await measureWithCpu(pid, async (i) => checkTurn(await send(port, ids[i])), c, seconds * 1000))
    }
    notes.push(`tool loop: the echo http Environment answered ${echoEnv.answered} calls`)
    echoEnv.close()
  }

  if (runs("growth")) {
    // Journal bytes and main-thread CPU per turn as one conversation grows: linear if every
    // quarter costs the same. Text turns, then a tool loop (12 messages a turn, 8 of them tool results).
    const growth = async (label, spec, turns) => {
      const [g] = await createSessions(port, 1, spec)
      const dir = path.join(brain.dataDir, "sessions", g, "journal")
      const quarters = []
      const cpu = []
      let before = duBytes(dir)
      for (let q = 0; q < 4; q++) {
        const cpu0 = mainThreadCpuSeconds(brain.pid)
        for (let t = 0; t < turns / 4; t++) checkTurn(await send(port, g))
        cpu.push((mainThreadCpuSeconds(brain.pid) - cpu0) / (turns / 4))
        const now = duBytes(dir)
        quarters.push((now - before) / (turns / 4))
        before = now
      }
      const checkpoint = fs.statSync(path.join(brain.dataDir, "sessions", g, "checkpoint"), { throwIfNoEntry: false })?.size
      notes.push(`${label}: journal bytes per turn over ${turns} turns of one conversation, by quarter: ${quarters.map((b) => Math.round(b)).join(", ")} (last / first ${(quarters[3] / quarters[0]).toFixed(2)}; 1.00 = linear growth); its checkpoint file (rewritten, not appended) ${checkpoint ?? "none"} bytes`)
      notes.push(`${label}: main-thread cpu per turn of the same conversation, by quarter: ${cpu.map((c) => `${(c * 1000).toFixed(2)} ms`).join(", ")} (last / first ${(cpu[3] / cpu[0]).toFixed(2)}; one client, one turn at a time; flat = a turn costs the same however long the conversation; the kernel counts in 10 ms ticks)`)
    }
    await growth("text turns", SCRIPTED, GROWTH_TURNS)
    await growth(`tool loop ${ROUNDS} × ${CALLS} of the example Wasm tool`, wasmToolLoopSession(await admitEchoTool(port)), GROWTH_TOOL_TURNS)
  }
  await brain.stop()
}

// ---------------------------------------------------------------------------------------------
// Cold open: sessions of COLD_RECORDS records, first read after a restart, with and without the
// checkpoint a released session keeps.

if (runs("cold")) {
  const brain = await startBrain()
  const ids = await createSessions(brain.port, COLD_SESSIONS, SCRIPTED)
  // A turn's records are counted from the first turn's journal, not assumed: creation is 2
  // records, and a keyed text turn of the official loop is 10 today (its transcript saved twice).
  await Promise.all(ids.map((id) => send(brain.port, id)))
  const perTurn = (await expectStatus(request(brain.port, "GET", `/v1/sessions/${ids[0]}`), 200)).last_sequence - 2
  const turns = Math.ceil((COLD_RECORDS - 2) / perTurn)
  await Promise.all(ids.map(async (id) => {
    for (let t = 1; t < turns; t++) await send(brain.port, id)
  }))
  const last = (await expectStatus(request(brain.port, "GET", `/v1/sessions/${ids[0]}`), 200)).last_sequence
  await brain.stop()
  for (const checkpoint of [true, false]) {
    if (!checkpoint) for (const id of ids) fs.rmSync(path.join(brain.dataDir, "sessions", id, "checkpoint"), { force: true })
    const again = await startBrain({ dataDir: brain.dataDir })
    const xs = []
    for (const id of ids) {
      const t0 = performance.now()
      await expectStatus(request(again.port, "GET", `/v1/sessions/${id}/transcript`), 200)
      xs.push(performance.now() - t0)
    }
    row(`brain: cold open (first transcript read after a restart) of a session of ${last} records, ${checkpoint ? "with" : "without"} its checkpoint`, fromSamples(xs))
    await again.stop()
  }
}

// ---------------------------------------------------------------------------------------------
// Startup with STARTUP_SESSIONS stored sessions: spawn until the health check answers.

if (runs("startup")) {
  const brain = await startBrain()
  await createSessions(brain.port, STARTUP_SESSIONS, SCRIPTED, 64)
  // Killed, not stopped: the journal's commit log still holds the creations' writes, and the next
  // start writes them into their segments again before it is ready (docs/journal.md).
  await brain.stop("SIGKILL")
  const t = performance.now()
  const recovering = await startBrain({ dataDir: brain.dataDir })
  await expectStatus(request(recovering.port, "GET", "/health/ready"), 204)
  const afterKill = performance.now() - t
  await recovering.stop()
  const xs = []
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now()
    const again = await startBrain({ dataDir: brain.dataDir })
    await expectStatus(request(again.port, "GET", "/health/ready"), 204)
    xs.push(performance.now() - t0)
    await again.stop()
  }
  const empty = []
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now()
    const fresh = await startBrain()
    await expectStatus(request(fresh.port, "GET", "/health/ready"), 204)
    empty.push(performance.now() - t0)
    await fresh.stop()
  }
  row(`brain: startup until /health/ready answers after kill -9 just after creating ${STARTUP_SESSIONS} sessions (its commit log written again)`, fromSamples([afterKill]))
  row(`brain: startup until /health/ready answers, ${STARTUP_SESSIONS} stored sessions`, fromSamples(xs))
  row("brain: startup until /health/ready answers, empty data directory", fromSamples(empty))
}

// ---------------------------------------------------------------------------------------------
// Memory: the heap after full collections (used + external + array buffers), over live sessions.

const memory = []
for (const [label, body, env] of !runs("memory") ? [] : [
  [`warm (idle_ttl_ms: 0 keeps it in memory) after ${MEMORY_TURNS} turns`, { ...SCRIPTED, idle_ttl_ms: 0 }, {}],
  [`suspended (released: the default) after ${MEMORY_TURNS} turns`, SCRIPTED, {}],
  [`suspended after ${MEMORY_TURNS} turns, BRAIN_CACHE_BYTES=0 (no released session's state or records kept)`, SCRIPTED, { BRAIN_CACHE_BYTES: "0" }],
  ["suspended, just created", SCRIPTED, {}]
]) {
  const server = await startBrain({ gc: true, env })
  const turns = label.includes("just created") ? 0 : MEMORY_TURNS
  // The warm-up runs the measured sessions' turns, at the same concurrency, on sessions deleted
  // after: what grows once with the work and is then reused (compiled code, pooled guest memories
  // sized by the conversation) is in every point, so the slope is what each session adds.
  const warmup = await createSessions(server.port, 32, { ...SCRIPTED, idle_ttl_ms: 1 })
  await turnsOn(server.port, warmup, turns)
  for (const id of warmup) {
    await expectStatus(request(server.port, "POST", `/v1/sessions/${id}/end`, undefined, keyed()), 200)
    await expectStatus(request(server.port, "DELETE", `/v1/sessions/${id}`, undefined, keyed()), 204)
  }
  await settle(300)
  const points = [[0, await server.heapAfterGc()]]
  for (let n = MEMORY_STEP; n <= 2 * MEMORY_STEP; n += MEMORY_STEP) {
    const ids = await createSessions(server.port, MEMORY_STEP, body)
    if (turns > 0) await turnsOn(server.port, ids, turns)
    points.push([n, await server.heapAfterGc()])
  }
  memory.push({ label, points, perSession: slope(points) })
  await server.stop()
}

// ---------------------------------------------------------------------------------------------
// A CPU profile of the server's main thread under 64 sessions of text turns (or, with
// --profile-tools, of tool-loop turns calling the example Wasm tool).
const profileTools = args.includes("--profile-tools") ? "wasm" : args.includes("--profile-host-tools") ? "host" : undefined
const profileSessions = numberFlag("--profile-sessions", 64)

let profileText = ""
let cpuPerTurnMs
let mainCpuPerTurnMs
if (profile) {
  // `--profile-dir DIR` keeps the .cpuprofile (for a bottom-up view in DevTools); a temporary directory otherwise.
  const kept = args.indexOf("--profile-dir")
  const dir = kept >= 0 && args[kept + 1] ? path.resolve(args[kept + 1]) : path.join(tmp, "profile")
  const spawnedAt = performance.now()
  // The profiler slows guests past BRAIN_WASM_INLINE_MS's 10 ms, which would move them to the worker
  // pool and profile a path the server as served does not take: the allowance is raised here.
  const server = await startBrain({ nodeArgs: ["--cpu-prof", "--cpu-prof-dir", dir], env: { BRAIN_WASM_INLINE_MS: "1000" } })
  const host = profileTools === "host" ? await echoHost(server.port) : undefined
  const ids = await createSessions(
    server.port,
    profileSessions,
    profileTools === "wasm" ? wasmToolLoopSession(await admitEchoTool(server.port)) : host ? toolLoopSession(host.host_id) : SCRIPTED
  )
  const load = (ms) => measureWithCpu(server.pid, (i) => send(server.port, ids[i]), profileSessions, ms)
  // The official loop's instrumented twin is made in the background after the server starts (the
  // pool runs its activations until then), more slowly under the profiler: warm up past it.
  await load(quick ? 1000 : 5000)
  const from = performance.now() - spawnedAt
  const r = await load(Math.min(seconds, 5) * 1000)
  const to = performance.now() - spawnedAt
  host?.close()
  await server.stop()
  // The main thread's profile (thread 0: CPU.<date>.<time>.<pid>.0.<n>.cpuprofile), not a worker's.
  const file = fs.readdirSync(dir).find((f) => /\.\d+\.0\.\d+\.cpuprofile$/.test(f))
  if (file) {
    const summary = summarizeProfile(JSON.parse(fs.readFileSync(path.join(dir, file), "utf8")), from * 1000, to * 1000)
    cpuPerTurnMs = summary.busyUs / 1000 / r.n
    mainCpuPerTurnMs = r.mainCpuMsPerOp
    profileText = summary.text
  }
}

// ---------------------------------------------------------------------------------------------
// The peer, same run

const peer = []
if (withPeer && runs("peer")) {
  if (!peerAvailable()) throw new Error("--peer needs ../shared/peer (load.mjs, floor.mjs, restate/)")
  for (const K of [1, 8]) peer.push(...(await peerFloor(K, seconds)))
  // Each round runs Restate's rows and Brain's, in an order that alternates, so that drift on this
  // shared machine falls on both alike. Restate is started afresh for each round's rows, as a
  // single run starts it, and stopped after them; Brain's server (a fresh one) stays up between
  // its rows, idle.
  const brain = await startBrain()
  const url = `http://127.0.0.1:${brain.port}/v1/sessions/{key}/messages`
  const host = await echoHost(brain.port)
  const keys = {
    1: (await createSessions(brain.port, 1, SCRIPTED)).join(","),
    64: (await createSessions(brain.port, 64, SCRIPTED)).join(","),
    tools: (await createSessions(brain.port, 64, toolLoopSession(host.host_id))).join(","),
    wasm: (await createSessions(brain.port, 64, wasmToolLoopSession(await admitEchoTool(brain.port)))).join(",")
  }
  const brainRows = async () => [
    await peerLoad("brain-text", url, SEND, 1, seconds, ["--keys", keys[1]]),
    await peerLoad("brain-text", url, SEND, 64, seconds, ["--keys", keys[64]]),
    await peerLoad(`brain-tools${ROUNDS}x${CALLS}`, url, SEND, 64, seconds, ["--keys", keys.tools]),
    await peerLoad(`brain-wasmtools${ROUNDS}x${CALLS}`, url, SEND, 64, seconds, ["--keys", keys.wasm])
  ]
  for (let round = 0; round < peerRounds; round++) {
    const restateSide = async () => {
      const restate = await startRestate()
      try {
        return await restateRows(restate.url, seconds, ROUNDS, CALLS)
      } finally {
        await restate.stop()
      }
    }
    const sides = [restateSide, brainRows]
    for (const side of round % 2 === 0 ? sides : sides.reverse()) for (const row of await side()) peer.push({ ...row, round })
  }
  host.close()
  await brain.stop()
}

agent.destroy()

// ---------------------------------------------------------------------------------------------
// Report


console.log(`# Brain benchmark harness
command: node scripts/bench/harness.js ${args.join(" ")}
when: ${started.toISOString()}; git HEAD: ${commit}
machine: ${os.cpus().length} cpus (${os.cpus()[0]?.model ?? "?"}), node ${process.version}, ${os.platform()} ${os.release()}, data on ${diskOf(tmp)}, load average at the end ${os.loadavg().map((l) => l.toFixed(1)).join(" ")}
method: real server processes (\`node --max-semi-space-size=32 bin/brain.js serve\`, UV_THREADPOOL_SIZE=64 as bin/brain.js sets it,
  a fresh data directory each), driven over loopback by this process with a keep-alive http.Agent; scripted instant model;
  sync sends unless said; every mutating request with a fresh Idempotency-Key. Closed loop: N workers send back to back for
  ${seconds} s. server cpu ms/op = the server process's CPU time (all threads) / operations; main thread cpu ms/op = the same
  for its main (JavaScript) thread alone, as the kernel counts it. others = cores everything else on
  the machine kept busy meanwhile (above ~0.2 the row was disturbed). No p99 below n = 100.
`)
console.log("| probe | n | p50 ms | p99 ms | per second | server cpu ms/op | main thread cpu ms/op | others |")
console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for (const r of rows) {
  console.log(`| ${r.probe} | ${r.n} | ${r.n > 0 ? ms(r.p50) : "—"} | ${r.n >= 100 ? ms(r.p99) : "—"} | ${r.rate ? Math.round(r.rate) : "—"} | ${r.serverCpuMsPerOp !== undefined ? ms(r.serverCpuMsPerOp) : "—"} | ${r.mainCpuMsPerOp !== undefined ? ms(r.mainCpuMsPerOp) : "—"} | ${r.others !== undefined ? r.others.toFixed(2) : "—"} |`)
}
console.log("")
// The one-session target against the floor: a keyed text turn makes three durable commits in a row.
const floorOf3 = rows.find((r) => r.probe === "baseline: node:http + 3 group-committed fdatasyncs in a row, 1 concurrent")
const keyedOne = rows.find((r) => r.probe?.startsWith("brain: text turn with an Idempotency-Key, 1 session"))
if (floorOf3 !== undefined && keyedOne !== undefined) {
  notes.unshift(
    `text p50 at one session against the floor with the same commits: keyed ${ms(keyedOne.p50)} ms / ${ms(floorOf3.p50)} ms (node:http + 3 group-committed fdatasyncs in a row, 1 concurrent) = ${(keyedOne.p50 / floorOf3.p50).toFixed(2)}× (target ≤ 1.5×)`
  )
}
for (const n of notes) console.log(`- ${n}`)
console.log(`
memory: the server's heap after three full collections (--expose-gc; heapUsed + external + arrayBuffers), at N = 0,
  ${MEMORY_STEP}, ${2 * MEMORY_STEP} sessions, after a warm-up of 32 sessions that run the same turns and are deleted;
  per session = the least-squares slope.
`)
console.log("| sessions | heap MiB at each N | per session |")
console.log("| --- | --- | --- |")
for (const m of memory) {
  console.log(`| ${m.label} | ${m.points.map(([n, b]) => `${n}: ${(b / 2 ** 20).toFixed(1)}`).join(", ")} | ${(m.perSession / 1024).toFixed(1)} KiB |`)
}
if (profileText) {
  console.log(`
cpu profile: node --cpu-prof of the server (BRAIN_WASM_INLINE_MS=1000, so guests the profiler slows stay on the main
  thread) while ${profileSessions} session(s) send ${profileTools ? `tool-loop turns (${ROUNDS} rounds × ${CALLS} calls of ${profileTools === "wasm" ? "the example Wasm tool" : "an echo host's tool"})` : "text turns"} back to back, samples inside the measured window only; main-thread busy time per turn: ${ms(cpuPerTurnMs)} ms (the profiler's samples: wall time the thread was not
  idle, which grows while other work keeps it from a core); its CPU time per turn as the kernel counts it: ${ms(mainCpuPerTurnMs)} ms
`)
  console.log(profileText)
}
if (peer.length > 0) {
  console.log(`
side by side, one client (../shared/peer/load.mjs: closed loop, one session per client, ${seconds} s after its warm-up)${peerRounds > 1 ? `; ${peerRounds} rounds, Restate's rows and Brain's in alternating order` : ""}:
`)
  console.log("| target | round | c | turns/s | p50 ms | p99 ms | errors |")
  console.log("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
  for (const p of peer) console.log(`| ${p.target} | ${p.round ?? "—"} | ${p.c} | ${p.turns_per_s} | ${p.p50_ms} | ${p.p99_ms} | ${p.errors} |`)
  const find = (target, c, round) => peer.find((p) => p.target === target && p.c === c && p.round === round)
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]
  const ratio = (name, brainTarget, restateTarget, c, key) => {
    const rs = []
    for (let round = 0; round < peerRounds; round++) {
      const b = find(brainTarget, c, round)
      const r = find(restateTarget, c, round)
      if (b && r) rs.push({ b: b[key], r: r[key], x: b[key] / r[key] })
    }
    if (rs.length === 0) return
    const each = rs.map((q) => `${q.b} / ${q.r} = ${q.x.toFixed(2)}×`).join("; ")
    console.log(`| ${name} | ${each} | ${rs.length > 1 ? `${median(rs.map((q) => q.x)).toFixed(2)}×` : "—"} |`)
  }
  console.log("\n| measure | Brain / Restate, each round | median |\n| --- | --- | ---: |")
  ratio("text p50 ms, c=1", "brain-text", "restate-text", 1, "p50_ms")
  ratio("text turns/s, c=64", "brain-text", "restate-text", 64, "turns_per_s")
  ratio(`tool loop ${ROUNDS}×${CALLS} turns/s, c=64 (Brain: host tools over HTTP)`, `brain-tools${ROUNDS}x${CALLS}`, `restate-tools${ROUNDS}x${CALLS}`, 64, "turns_per_s")
  ratio(`tool loop ${ROUNDS}×${CALLS} turns/s, c=64 (Brain: Wasm tools in its own pool)`, `brain-wasmtools${ROUNDS}x${CALLS}`, `restate-tools${ROUNDS}x${CALLS}`, 64, "turns_per_s")
}
process.exit(0)
