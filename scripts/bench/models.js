#!/usr/bin/env node
// Model-call benchmark: what Brain adds to a streamed model call, against a fake OpenAI-compatible
// provider streaming 200 tokens, through the real server and a live SSE subscriber.
//
//   npm run bench:models [-- --turns 60]
//
// Three processes: the fake provider (scripts/bench/fakeOpenAiChat.js), the server
// (`brain serve`, BRAIN_MODELS naming the fake), and this one (HTTP client and SSE subscriber).
// Times come from process.hrtime (CLOCK_MONOTONIC: one clock for every process of the machine).
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { ms, pct, numberFlag } from "./stats.js"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const TURNS = numberFlag("--turns", 60)
const WARMUP = 5
const TOKENS = 200
const now = () => Number(process.hrtime.bigint()) / 1e6

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "brain-bench-models-"))
const children = []
process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL")
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** Spawns `argv` and resolves with the first match of `ready` in its output. */
const start = (argv, ready, env = {}) =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } })
    children.push(child)
    let log = ""
    const onData = (d) => {
      log += d
      const m = ready.exec(log)
      if (m) resolve(m)
    }
    child.stdout.on("data", onData)
    child.stderr.on("data", onData)
    child.on("exit", (code) => reject(new Error(`${argv.join(" ")} exited ${code}:\n${log}`)))
  })

const post = (base, p, body) =>
  fetch(`${base}${p}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json())

/** The baseline of the same run: write + fdatasync of 200 B, the cost of one durable commit. */
const fdatasyncP50 = () => {
  const fd = fs.openSync(path.join(tmp, "sync"), "w")
  const buf = Buffer.alloc(200, 1)
  const times = []
  for (let i = 0; i < 200; i++) {
    const t0 = now()
    fs.writeSync(fd, buf)
    fs.fdatasyncSync(fd)
    times.push(now() - t0)
  }
  fs.closeSync(fd)
  return pct(times.sort((a, b) => a - b), 50)
}

const main = async () => {
  const [, fakePort] = await start([path.join(ROOT, "scripts/bench/fakeOpenAiChat.js")], /listening (\d+)/, { FAKE_TOKENS: String(TOKENS) })
  const models = JSON.stringify({ fake: { provider: "openai-chat", model: "bench", base_url: `http://127.0.0.1:${fakePort}/v1` } })
  const [, base] = await start(
    ["--max-semi-space-size=32", ...(process.env.BENCH_PROF ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROF}`] : []), path.join(ROOT, "bin/brain.js"), "serve"],
    /brain listening on (http:\/\/[0-9.:]+)/,
    { BRAIN_LISTEN: "127.0.0.1:0", BRAIN_DATA_DIR: path.join(tmp, "data"), BRAIN_MODELS: models }
  )
  const session = (await post(base, "/v1/sessions", { model: "fake" })).session_id

  // The subscriber: when each model call's start, first delta and end frames arrive.
  const calls = new Map()
  await new Promise((resolve) => {
    http.get(`${base}/v1/sessions/${session}/events?after=0`, { headers: { accept: "text/event-stream" } }, (res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (chunk) => {
        const at = now()
        text += chunk
        let end
        while ((end = text.indexOf("\n\n")) >= 0) {
          const frame = text.slice(0, end)
          text = text.slice(end + 2)
          const event = /^event: (.*)$/m.exec(frame)?.[1]
          const data = /^data: (.*)$/m.exec(frame)?.[1]
          if (event === "model_call_started") calls.set(JSON.parse(data).sequence, { started: at, firstDelta: 0, ended: 0, deltas: 0 })
          else if (event === "model_delta") {
            const c = calls.get(JSON.parse(data).model_call)
            if (c && c.deltas++ === 0) c.firstDelta = at
          } else if (event === "model_call_ended") {
            const c = calls.get(JSON.parse(data).data.sequence)
            if (c) c.ended = at
          }
        }
      })
      resolve()
    })
  })
  await new Promise((r) => setTimeout(r, 200))

  for (let i = 0; i < WARMUP + TURNS; i++) {
    const r = await post(base, `/v1/sessions/${session}/messages`, { input: { message: `turn ${i}` } })
    if (r.turn?.status !== "ended") throw new Error(`turn ${i}: ${JSON.stringify(r)}`)
  }
  await new Promise((r) => setTimeout(r, 200))
  const fake = await fetch(`http://127.0.0.1:${fakePort}/timings`).then((r) => r.json())
  const seen = [...calls.values()]
  if (seen.length !== fake.length) throw new Error(`${seen.length} calls seen, ${fake.length} served`)
  const overhead = []
  const head = []
  const tail = []
  const firstDelta = []
  const fakeTime = []
  seen.forEach((c, i) => {
    if (i < WARMUP) return
    const f = fake[i]
    fakeTime.push(f.last - f.arrived)
    overhead.push(c.ended - c.started - (f.last - f.arrived))
    head.push(f.arrived - c.started)
    tail.push(c.ended - f.last)
    firstDelta.push(c.firstDelta - f.first)
    if (c.deltas !== TOKENS) throw new Error(`call ${i}: ${c.deltas} deltas, not ${TOKENS}`)
  })
  for (const a of [overhead, head, tail, firstDelta, fakeTime]) a.sort((x, y) => x - y)
  const sync = fdatasyncP50()

  console.log(`# Model calls: Brain's own time per streamed call, and its first delta at an SSE reader
method: three processes on one machine: a fake OpenAI-compatible provider (scripts/bench/fakeOpenAiChat.js)
  answering each call with ${TOKENS} content chunks, usage and [DONE], written back to back; the server
  (node bin/brain.js serve, BRAIN_MODELS naming the fake as openai-chat); this process sending ${TURNS} sync
  turns one at a time (${WARMUP} warm-up turns first) to one session and reading its SSE stream. Every time
  is process.hrtime (CLOCK_MONOTONIC, shared by all processes).
  The fake streams like a model: one chunk every FAKE_GAP_MS (default 1) ms; FAKE_GAP_MS=0 sends
  them back to back.
  Brain per call = (model_call_ended frame at the reader − model_call_started frame at the reader)
    − (the fake's last byte written − its request's body arrived): what the call took beyond the
    provider's own time: sending the request, reading and folding ${TOKENS} chunks, passing on ${TOKENS}
    deltas, and committing model_call_ended (one durable append, fdatasync included).
  First delta = the first model_delta frame at the reader − the fake's first byte written.
  Baseline of the same run: write + fdatasync of 200 B (the floor of the one commit inside "Brain per call").
node ${process.version}, ${os.cpus().length} cpus

| measure | p50 ms | p90 ms | p99 ms | n |
| --- | ---: | ---: | ---: | ---: |
| Brain per call, beyond the fake's time | ${ms(pct(overhead, 50))} | ${ms(pct(overhead, 90))} | ${ms(pct(overhead, 99))} | ${overhead.length} |
| of which before: model_call_started at the reader → the request's body at the fake | ${ms(pct(head, 50))} | ${ms(pct(head, 90))} | ${ms(pct(head, 99))} | ${head.length} |
| of which after: the fake's last byte → model_call_ended at the reader | ${ms(pct(tail, 50))} | ${ms(pct(tail, 90))} | ${ms(pct(tail, 99))} | ${tail.length} |
| first delta at the SSE reader after the fake's first byte | ${ms(pct(firstDelta, 50))} | ${ms(pct(firstDelta, 90))} | ${ms(pct(firstDelta, 99))} | ${firstDelta.length} |
| the fake's own time per call (request arrived → last byte) | ${ms(pct(fakeTime, 50))} | ${ms(pct(fakeTime, 90))} | ${ms(pct(fakeTime, 99))} | ${fakeTime.length} |
| baseline: write + fdatasync of 200 B | ${ms(sync)} | | | 200 |`)
  // A graceful stop lets a profiled server write its profile.
  for (const c of children) c.kill("SIGTERM")
  await new Promise((r) => setTimeout(r, 1500))
  process.exit(0)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
