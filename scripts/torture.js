#!/usr/bin/env node
/**
 * `npm run torture`: kill -9 a Brain server at random moments while sessions run turns whose tools
 * live in an `http` Environment, then check from the journal and the Environment's own log that no
 * acknowledged answer was lost and no effect ran twice (issue 10, item 4).
 *
 * Method:
 * 1. Start the fake http Environment (test/fixtures/httpEnvironment.mjs, never killed; it logs every
 *    request with its {session_id, sequence} and how many times it saw it), a fake model server
 *    speaking OpenAI's Chat Completions stream (test/fixtures/chatModel.mjs, never killed; it logs
 *    every request with how many times it saw that same call) and a Brain server (`node
 *    bin/brain.js serve`, fresh data dir, fixed port, BRAIN_ENVIRONMENTS and BRAIN_MODELS naming
 *    the fakes).
 * 2. `--sessions` clients each create sessions (the model over HTTP: two rounds of two parallel
 *    calls to tool `slow`, answered after a random 5–60 ms, then text) and run sync turns, each request
 *    with its own Idempotency-Key. A killer `kill -9`s the server after 50–800 ms, restarts it on
 *    the same data dir, `--kills` times. A client that loses its connection (or gets 503) waits and
 *    retries the SAME request with the SAME key. Every 200 turn answer is recorded (acknowledged),
 *    every 409 `ambiguous` too; any other unexplained answer is a violation.
 * 3. Then the server is stopped with SIGTERM and started once more, and every session's Events are
 *    read over HTTP (all pages; reading recovers the session). Checks:
 *    - every acknowledged turn is in the journal: its turn_started, and its outcome with that result;
 *    - the Environment never received a (session, sequence) twice, each call it received is a
 *      journaled tool_call_started of that tool, and an `ok` outcome only for a call it received;
 *    - the model server never received the same call (session, user message, round) twice, got
 *      no more calls for a session than its model_call_started records, and at least one for
 *      each model_call_ended;
 *    - every *_started effect (and turn, creation) has exactly one outcome (recovery records the
 *      interrupted ones failed, ambiguous); an outcome never closes something that did not start;
 *    - per session, turn_started records <= distinct idempotency keys the clients sent for it;
 *    - sequences: Events start at 1 and rise, none past last_sequence (private records are not
 *      Events, so the gaps they leave cannot be told from lost records over HTTP).
 * 4. The server is stopped and the journal files are read with `brain journal verify` (clean) and
 *    `brain journal dump`: each session's records are exactly 1..last_sequence, private ones
 *    included, and every Event read over HTTP is its record unchanged.
 * 5. Prints `kills K, turns T, acknowledged A, ambiguous B, violations V` and each violation;
 *    exits 1 when V > 0. Flags: --kills K (20), --sessions N (8), --turns-per-session (15),
 *    --wasm-tools: the example Wasm tool (loops/examples/echo-tool.ts, uploaded once) is offered
 *    too, as `echo` in the built-in environment — alone in the sessions of even-numbered clients
 *    (each round's two calls tried to their end on the main thread, their outcomes in one
 *    append), beside `slow` in the others' (one call of each per round) — and the checks above
 *    hold for its calls as for the others, those that need the Environment's log aside;
 *    --journal-log-bytes N: the server's BRAIN_JOURNAL_LOG_BYTES (docs/journal.md, "The commit
 *    log"): a small log switches many times between kills, so kills land during its switches and
 *    the syncs of the segments they wait for, and every start writes a log's batches again;
 *    --host-tools: a host registered once (`POST /v1/hosts`; its registration outlives every kill)
 *    runs in this process, never killed: it reads its command stream, opened again after each
 *    restart, and answers each `call` with its input after a random 5–60 ms (`POST
 *    .../results`). Tool `hosted` in a `host` Environment is offered alone in even-numbered
 *    clients' sessions (each round's two calls sent together), beside `slow` in the others'. The
 *    host must never receive a call twice, only calls that are journaled `tool_call_started` of
 *    `hosted`, and every call recorded ended ok must be one it received, with its answer.
 */
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import * as readline from "node:readline"
import { isDeepStrictEqual } from "node:util"

const ROOT = new URL("..", import.meta.url).pathname
// The server runs with the Node flags it ships with (src/cli/nodeFlags.ts), as `npm start` runs it.
const { SERVER_NODE_FLAGS } = await import(path.join(ROOT, "dist/cli/nodeFlags.js"))
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}
const KILLS = arg("kills", 20)
const SESSIONS = arg("sessions", 8)
const TURNS_PER_SESSION = arg("turns-per-session", 15)
const WASM_TOOLS = process.argv.includes("--wasm-tools")
const HOST_TOOLS = process.argv.includes("--host-tools")
const JOURNAL_LOG_BYTES = arg("journal-log-bytes", undefined)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
/** Milliseconds a (re)started server may take to listen: generous, a loaded 2-core machine is slow. */
const START_DEADLINE_MS = 90_000
const rand = (lo, hi) => lo + Math.floor(Math.random() * (hi - lo + 1))
const violations = []
const violation = (text) => violations.push(text)

const work = fs.mkdtempSync(path.join(os.tmpdir(), "brain-torture-"))
const dataDir = path.join(work, "data")
const envLog = path.join(work, "environment.jsonl")
const modelLog = path.join(work, "model.jsonl")

// --- the fake Environment: its own process, kept alive through every kill ---------------------
const fake = spawn(process.execPath, [path.join(ROOT, "test/fixtures/httpEnvironment.mjs")], {
  env: { ...process.env, HTTP_ENV_LOG: envLog }, stdio: ["ignore", "pipe", "ignore"]
})
process.on("exit", () => fake.kill()) // also when the run itself fails
process.on("unhandledRejection", (e) => { console.error(e); process.exit(2) })
const fakePort = JSON.parse(await new Promise((r) => readline.createInterface({ input: fake.stdout }).once("line", r))).port
const model = spawn(process.execPath, [path.join(ROOT, "test/fixtures/chatModel.mjs")], {
  env: { ...process.env, CHAT_MODEL_LOG: modelLog }, stdio: ["ignore", "pipe", "ignore"]
})
process.on("exit", () => model.kill())
const modelPort = JSON.parse(await new Promise((r) => readline.createInterface({ input: model.stdout }).once("line", r))).port

// --- the server: a fixed port, so clients find it again after each restart -------------------
const port = await new Promise((r) => {
  const s = net.createServer().listen(0, "127.0.0.1", () => {
    const p = s.address().port
    s.close(() => r(p))
  })
})
const base = `http://127.0.0.1:${port}`
let server // {child, exited: Promise}
let up = false // clients wait while false
let serverOutput = ""
const startServer = async () => {
  const child = spawn(process.execPath, [...SERVER_NODE_FLAGS, path.join(ROOT, "bin/brain.js"), "serve"], {
    cwd: ROOT,
    env: {
      ...process.env, BRAIN_LISTEN: `127.0.0.1:${port}`, BRAIN_DATA_DIR: dataDir,
      BRAIN_ENVIRONMENTS: JSON.stringify({ fake: { driver: "http", base_url: `http://127.0.0.1:${fakePort}` } }),
      BRAIN_MODELS: JSON.stringify({ fake: { provider: "openai-chat", model: "torture", base_url: `http://127.0.0.1:${modelPort}/v1` } }),
      ...(JOURNAL_LOG_BYTES === undefined ? {} : { BRAIN_JOURNAL_LOG_BYTES: String(JOURNAL_LOG_BYTES) })
    },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const exited = new Promise((r) => child.on("close", (code, signal) => r({ code, signal })))
  child.stderr.on("data", (d) => (serverOutput = (serverOutput + d).slice(-20000)))
  const listening = new Promise((resolve) => {
    readline.createInterface({ input: child.stdout }).on("line", (line) => {
      serverOutput = (serverOutput + line + "\n").slice(-20000)
      if (line.includes("brain listening on")) resolve(true)
    })
  })
  const r = await Promise.race([listening, exited, sleep(START_DEADLINE_MS).then(() => "timeout")])
  if (r !== true) throw new Error(`the server did not start (${JSON.stringify(r)}):\n${serverOutput}`)
  server = { child, exited }
  up = true
}

// --- HTTP: retried through kills --------------------------------------------------------------
const once = async (method, url, body, key, token) => {
  const headers = { "content-type": "application/json" }
  if (key) headers["idempotency-key"] = key
  if (token) headers.authorization = `Bearer ${token}`
  const res = await fetch(base + url, { method, headers, body: body && JSON.stringify(body), signal: AbortSignal.timeout(60000) })
  const text = await res.text()
  let json
  try { json = JSON.parse(text) } catch { json = undefined }
  return { status: res.status, json, text }
}
/** Sends until an answer that is not a lost connection or a 503 (start or drain): then returns it. */
const call = async (method, url, body, key) => {
  for (;;) {
    while (!up) await sleep(20)
    try {
      const r = await once(method, url, body, key)
      if (r.status === 503 && r.json?.code === "overloaded") { await sleep(50); continue }
      return r
    } catch {
      await sleep(50) // connection refused or dropped: the server is being killed or restarted
    }
  }
}

// --- the clients -------------------------------------------------------------------------------
/** The uploaded example Wasm tool's id (`--wasm-tools`). */
let echoModule
const SLOW = { name: "slow", description: "answers ok after input.ms", input_schema: { type: "object" }, environment: "box" }
const HOSTED = { name: "hosted", description: "answers with its input", environment: "app" }
/** The registered host (`--host-tools`). */
let hostId
/** `tag` is the session's system prompt: the model server logs it with every call it receives. */
const createBody = (tag, c) => {
  const echo = echoModule === undefined ? undefined : { name: "echo", description: "answers with its input", module: echoModule }
  const extra = [echo, hostId === undefined ? undefined : HOSTED].filter((t) => t !== undefined)
  return {
    model: "fake",
    system: tag,
    environments: [{ name: "box", driver: "http", binding: "fake" }, ...(hostId === undefined ? [] : [{ name: "app", driver: "host", host: hostId }])],
    tools: extra.length === 0 ? [SLOW] : c % 2 === 0 ? extra : [SLOW, ...extra]
  }
}

// --- the host (`--host-tools`): in this process, never killed -----------------------------------
/** `${session} ${sequence}` → {name, input, count}: every call the host's command stream brought. */
const hostReceived = new Map()
let hostToken
/** Reads the command stream until it ends (the server was killed), answering every call. */
const hostStream = () => new Promise((resolve) => {
  const req = http.request({ host: "127.0.0.1", port, path: `/v1/hosts/${hostId}/commands`, headers: { authorization: `Bearer ${hostToken}`, accept: "text/event-stream" } }, (res) => {
    if (res.statusCode !== 200) { res.resume(); return resolve() }
    res.setEncoding("utf8")
    let buffered = ""
    res.on("data", (text) => {
      buffered += text
      for (let end = buffered.indexOf("\n\n"); end >= 0; end = buffered.indexOf("\n\n")) {
        const frame = buffered.slice(0, end)
        buffered = buffered.slice(end + 2)
        const event = /^event: (.*)$/m.exec(frame)?.[1]
        const data = /^data: (.*)$/m.exec(frame)?.[1]
        if (event !== "call" || data === undefined) continue
        const command = JSON.parse(data)
        const k = `${command.session_id} ${command.sequence}`
        const seen = hostReceived.get(k)
        if (seen !== undefined) seen.count++
        else hostReceived.set(k, { name: command.name, input: command.input, count: 1 })
        setTimeout(() => {
          once("POST", `/v1/hosts/${hostId}/results`, { session_id: command.session_id, sequence: command.sequence, ok: command.input }, undefined, hostToken).catch(() => {})
        }, rand(5, 60))
      }
    })
    res.on("end", resolve)
    res.on("error", resolve)
  })
  req.on("error", resolve)
  req.end()
})
const host = async () => {
  for (;;) {
    while (!up && !stopping) await sleep(20)
    if (stopping) return
    await hostStream()
    await sleep(20)
  }
}
let stopping = false
let keySerial = 0
const acknowledged = [] // {session, key, turn: {sequence, status, result?, failure?}}
const ambiguous = [] // {session, key, what}
const keysBySession = new Map() // session id → Set of keys sent
const tagOf = new Map() // session id → its system prompt
const counted = { turns: 0 }

const client = async (c) => {
  while (!stopping) {
    const ckey = `c${c}-create-${++keySerial}`
    const tag = `torture ${ckey}`
    const created = await call("POST", "/v1/sessions", createBody(tag, c), ckey)
    if (created.status === 409 && created.json?.code === "ambiguous") { ambiguous.push({ key: ckey, what: "create" }); continue }
    if (created.status !== 201) { violation(`create ${ckey}: ${created.status} ${created.text.slice(0, 300)}`); continue }
    progress++
    const id = created.json.session_id
    keysBySession.set(id, new Set())
    tagOf.set(id, tag)
    for (let t = 0; t < TURNS_PER_SESSION && !stopping; t++) {
      const key = `c${c}-turn-${++keySerial}`
      keysBySession.get(id).add(key)
      counted.turns++
      const r = await call("POST", `/v1/sessions/${id}/messages`, { input: { message: `turn ${t}` } }, key)
      if (process.env.TORTURE_DEBUG) console.error(key, r.status, r.text.slice(0, 400))
      if (r.status === 200 && r.json?.turn) progress++, acknowledged.push({ session: id, key, turn: r.json.turn })
      else if (r.status === 409 && r.json?.code === "ambiguous") ambiguous.push({ session: id, key, what: "turn" })
      else if (r.status === 409 && r.json?.code === "session_ended") break
      else if (r.status === 409 && r.json?.code === "session_busy") { t--; counted.turns--; keysBySession.get(id).delete(key); await sleep(50) }
      else violation(`turn ${key} on ${id}: unexplained ${r.status} ${r.text.slice(0, 300)}`)
    }
  }
}

// --- the killer --------------------------------------------------------------------------------
let kills = 0
let progress = 0 // 201s and 200s answered so far
const killer = async () => {
  while (kills < KILLS) {
    // Progress between kills: wait (up to 5 s) for one 201 or 200 from this server's life, else
    // every request would die ambiguous and the run would check nothing; then a random moment.
    const seen = progress
    for (let waited = 0; progress === seen && waited < 5000; waited += 20) await sleep(20)
    await sleep(rand(50, 800))
    up = false
    server.child.kill("SIGKILL")
    await server.exited
    kills++
    await startServer()
  }
}

await startServer()
if (WASM_TOOLS) {
  const bytes = fs.readFileSync(path.join(ROOT, "dist/loops/examples/echo-tool.wasm"))
  const res = await fetch(`${base}/v1/agentloops`, { method: "POST", headers: { "content-type": "application/wasm", "idempotency-key": "torture-echo-tool" }, body: bytes })
  if (res.status !== 201) throw new Error(`uploading the example Wasm tool: ${res.status} ${await res.text()}`)
  echoModule = (await res.json()).id
}
let hosting
if (HOST_TOOLS) {
  const registered = await call("POST", "/v1/hosts", {}, "torture-host")
  if (registered.status !== 201) throw new Error(`registering the host: ${registered.status} ${registered.text}`)
  hostId = registered.json.host_id
  hostToken = registered.json.token
  // A call made while its stream is not open (just after a restart) is not sent: `error`, not a violation.
  hosting = host()
}
const clients = Array.from({ length: SESSIONS }, (_, c) => client(c))
await killer()
stopping = true
await Promise.all(clients)

// --- a clean stop and one more start; then the checks -----------------------------------------
up = false
server.child.kill("SIGTERM")
const stopped = await server.exited
if (stopped.code !== 0) violation(`SIGTERM: the server exited ${JSON.stringify(stopped)}`)
await hosting
await startServer()

const sessions = []
for (let after = ""; ;) {
  const r = await call("GET", `/v1/sessions?limit=100${after ? `&after=${encodeURIComponent(after)}` : ""}`)
  if (r.status !== 200) { violation(`list: ${r.status} ${r.text.slice(0, 300)}`); break }
  sessions.push(...r.json.sessions)
  if (!r.json.next_cursor) break
  after = r.json.next_cursor
}
const journals = new Map() // session id → events
const lastSequence = new Map()
for (const s of sessions) {
  const events = []
  for (let after = 0; ;) {
    const r = await call("GET", `/v1/sessions/${s.session_id}/events?after=${after}&limit=1000`)
    if (r.status !== 200) { violation(`events of ${s.session_id}: ${r.status} ${r.text.slice(0, 300)}`); break }
    if (r.json.events.length === 0) break
    events.push(...r.json.events)
    after = r.json.events.at(-1).sequence
  }
  journals.set(s.session_id, events)
  const now = await call("GET", `/v1/sessions/${s.session_id}`) // after the reads' recovery
  lastSequence.set(s.session_id, now.json?.last_sequence)
}
for (const id of keysBySession.keys()) if (!journals.has(id)) violation(`session ${id} was created (201) but is not listed`)

const CLOSES = {
  session_creation_started: ["session_creation_ended", "session_creation_failed"],
  turn_started: ["turn_ended", "turn_failed"],
  model_call_started: ["model_call_ended", "model_call_failed"],
  tool_call_started: ["tool_call_ended", "tool_call_failed"],
  environment_setup_started: ["environment_setup_ended", "environment_setup_failed"],
  environment_detach_started: ["environment_detach_ended", "environment_detach_failed"],
  environment_teardown_started: ["environment_teardown_ended", "environment_teardown_failed"]
}
const OUTCOME_OF = Object.fromEntries(Object.entries(CLOSES).flatMap(([s, os]) => os.map((o) => [o, s])))
const envLines = (fs.existsSync(envLog) ? fs.readFileSync(envLog, "utf8") : "").split("\n").filter(Boolean).map((l) => JSON.parse(l)).filter((l) => !l.event)
const received = new Map() // `${session} ${sequence}` → the /tools/call lines
for (const l of envLines) {
  const k = `${l.path} ${l.session_id} ${l.sequence}`
  if (l.count > 1) violation(`the Environment received ${l.path} (${l.session_id}, ${l.sequence}) ${l.count} times`)
  if (l.path === "/tools/call") received.set(k, [...(received.get(k) ?? []), l])
}
for (const [k, ls] of received) if (ls.length > 1) violation(`the Environment logged ${k} ${ls.length} times`)
const modelLines = (fs.existsSync(modelLog) ? fs.readFileSync(modelLog, "utf8") : "").split("\n").filter(Boolean).map((l) => JSON.parse(l))
const modelCalls = new Map() // tag → calls the model server received
for (const l of modelLines) {
  if (l.count > 1) violation(`the model server received the call (${l.tag}, ${JSON.stringify(l.user)}, round ${l.round}) ${l.count} times`)
  modelCalls.set(l.tag, (modelCalls.get(l.tag) ?? 0) + 1)
}

for (const [id, events] of journals) {
  const bySeq = new Map(events.map((e) => [e.sequence, e]))
  // Events leave out private records (transcript_delta, kv_*), so over HTTP density is checked as:
  // the first is 1, each is above the one before, none past the session's last_sequence.
  if (events[0]?.sequence !== 1) violation(`${id}: the first Event is #${events[0]?.sequence}`)
  events.forEach((e, i) => { if (i > 0 && e.sequence <= events[i - 1].sequence) violation(`${id}: #${e.sequence} after #${events[i - 1].sequence}`) })
  if ((events.at(-1)?.sequence ?? 0) > lastSequence.get(id)) violation(`${id}: Event #${events.at(-1).sequence} past last_sequence ${lastSequence.get(id)}`)
  const outcomes = new Map() // started sequence → outcome events
  for (const e of events) {
    const startedKind = OUTCOME_OF[e.kind]
    if (!startedKind) continue
    const started = bySeq.get(e.data.sequence)
    if (started?.kind !== startedKind) violation(`${id}: ${e.kind} #${e.sequence} closes #${e.data.sequence}, which is ${started?.kind ?? "missing"}`)
    outcomes.set(e.data.sequence, [...(outcomes.get(e.data.sequence) ?? []), e])
  }
  for (const e of events) {
    if (!CLOSES[e.kind]) continue
    const n = (outcomes.get(e.sequence) ?? []).length
    if (n !== 1) violation(`${id}: ${e.kind} #${e.sequence} has ${n} outcomes`)
    if (e.kind === "tool_call_started") {
      const got = received.get(`/tools/call ${id} ${e.sequence}`)
      const outcome = outcomes.get(e.sequence)?.[0]
      if (got && got[0].name !== e.data.tool) violation(`${id}: call #${e.sequence} is ${e.data.tool} but the Environment got ${got[0].name}`)
      if (!got && e.data.tool === "slow" && outcome?.kind === "tool_call_ended" && outcome.data.outcome === "ok") violation(`${id}: call #${e.sequence} ended ok but never reached the Environment`)
      if (e.data.tool === "hosted" && outcome?.kind === "tool_call_ended" && outcome.data.outcome === "ok") {
        const hosted = hostReceived.get(`${id} ${e.sequence}`)
        if (hosted === undefined) violation(`${id}: call #${e.sequence} ended ok but the host never received it`)
        else if (!isDeepStrictEqual(outcome.data.output, hosted.input)) violation(`${id}: call #${e.sequence} ended ok with ${JSON.stringify(outcome.data.output)}, the host answered ${JSON.stringify(hosted.input)}`)
      }
    }
  }
  for (const l of envLines) {
    if (l.session_id === id && l.path === "/tools/call" && bySeq.get(l.sequence)?.kind !== "tool_call_started") violation(`${id}: the Environment got call #${l.sequence}, which is not a tool_call_started`)
  }
  const modelStarted = events.filter((e) => e.kind === "model_call_started").length
  const modelEnded = events.filter((e) => e.kind === "model_call_ended").length
  const modelReceived = modelCalls.get(tagOf.get(id)) ?? 0
  if (tagOf.has(id) && modelReceived > modelStarted) violation(`${id}: the model server received ${modelReceived} calls for ${modelStarted} model_call_started records`)
  if (tagOf.has(id) && modelReceived < modelEnded) violation(`${id}: ${modelEnded} model calls ended but the model server received ${modelReceived}`)
  const turns = events.filter((e) => e.kind === "turn_started").length
  const keys = keysBySession.get(id)?.size ?? 0
  if (turns > keys) violation(`${id}: ${turns} turn_started records for ${keys} idempotency keys`)
}

for (const [k, got] of hostReceived) {
  const [session, sequence] = k.split(" ")
  if (got.count > 1) violation(`the host received call (${session}, ${sequence}) ${got.count} times`)
  const started = journals.get(session)?.find((e) => e.sequence === Number(sequence))
  if (started?.kind !== "tool_call_started" || started.data.tool !== "hosted" || got.name !== "hosted") {
    violation(`the host got call #${sequence} of ${session} (${got.name}), which is ${started?.kind ?? "missing"} ${started?.data?.tool ?? ""}`)
  }
}

for (const a of acknowledged) {
  const events = journals.get(a.session) ?? []
  const started = events.find((e) => e.sequence === a.turn.sequence)
  const outcome = events.find((e) => (e.kind === "turn_ended" || e.kind === "turn_failed") && e.data.sequence === a.turn.sequence)
  if (started?.kind !== "turn_started") violation(`acknowledged ${a.key}: #${a.turn.sequence} is ${started?.kind ?? "missing"} in ${a.session}`)
  else if (a.turn.status === "ended" && !(outcome?.kind === "turn_ended" && isDeepStrictEqual(outcome.data.result, a.turn.result))) violation(`acknowledged ${a.key}: answered ended ${JSON.stringify(a.turn.result)}, journal has ${JSON.stringify(outcome)}`)
  else if (a.turn.status === "failed" && !(outcome?.kind === "turn_failed" && outcome.data.failure?.code === a.turn.failure?.code)) violation(`acknowledged ${a.key}: answered failed ${a.turn.failure?.code}, journal has ${JSON.stringify(outcome)}`)
  else if (a.turn.status !== "ended" && a.turn.status !== "failed") violation(`acknowledged ${a.key}: a sync turn answered with status ${a.turn.status}`)
}

up = false
server.child.kill("SIGTERM")
const last = await server.exited
if (last.code !== 0) violation(`the final SIGTERM: the server exited ${JSON.stringify(last)}`)
fake.kill()
model.kill()

// --- the journal files themselves, read with the server stopped (`brain journal verify|dump`) ----
const brain = (...args) => spawnSync(process.execPath, [path.join(ROOT, "bin/brain.js"), ...args], { encoding: "utf8", maxBuffer: 1 << 30 })
const verified = brain("journal", "verify", dataDir)
if (verified.status !== 0) violation(`brain journal verify exited ${verified.status}: ${(verified.stdout + verified.stderr).slice(-2000)}`)
let records = 0
for (const [id, events] of journals) {
  const dumped = brain("journal", "dump", dataDir, id)
  if (dumped.status !== 0) { violation(`brain journal dump ${id} exited ${dumped.status}: ${dumped.stderr.slice(-500)}`); continue }
  const recs = dumped.stdout.split("\n").filter(Boolean).map((l) => JSON.parse(l))
  records += recs.length
  // Dense: the records are exactly 1, 2, …, last_sequence, private ones included.
  const gap = recs.findIndex((r, i) => r.sequence !== i + 1)
  if (gap >= 0) violation(`${id}: record ${gap + 1} of the journal has sequence ${recs[gap].sequence}`)
  if (recs.length !== lastSequence.get(id)) violation(`${id}: ${recs.length} records in the journal, last_sequence ${lastSequence.get(id)}`)
  // Every Event read over HTTP is the journal's record at its sequence, unchanged.
  for (const e of events) {
    const r = recs[e.sequence - 1]
    if (!r || r.kind !== e.kind || r.recorded_at_ms !== e.recorded_at_ms || !isDeepStrictEqual(r.payload, e.data)) {
      violation(`${id}: Event #${e.sequence} (${e.kind}) differs from its journal record ${JSON.stringify(r)?.slice(0, 200)}`)
    }
  }
}
if (acknowledged.length === 0) violation("no turn was acknowledged: the run checked nothing")
const allTurns = [...journals.values()].reduce((n, es) => n + es.filter((e) => e.kind === "turn_started").length, 0)
console.log(`kills ${kills}, turns ${allTurns}, acknowledged ${acknowledged.length}, ambiguous ${ambiguous.length}, violations ${violations.length}`)
console.log(`  (${sessions.length} sessions, ${records} journal records, ${counted.turns} turn requests, ${received.size} tool calls${HOST_TOOLS ? `, ${hostReceived.size} host calls` : ""} and ${modelLines.length} model calls received, data in ${work})`)
for (const v of violations.slice(0, 100)) console.log(`violation: ${v}`)
if (violations.length > 100) console.log(`… and ${violations.length - 100} more`)
process.exit(violations.length > 0 ? 1 : 0)
