#!/usr/bin/env node
// Journal benchmark (DESIGN §2): durable appends/s and acknowledge latency of the file journal,
// next to two raw baselines measured in the same run, on the same number of files:
//   (a) unbatched: each append is its own write + fdatasync;
//   (b) ideal batching: a tiny hand-written group commit (one write + one fdatasync per touched
//       file per round, all files concurrently).
//   (d) ideal batching with O_DSYNC files: as (b), the write itself durable, no fdatasync (what the
//       journal's file store does since segments are opened with O_DSYNC);
// and, in a second table, (c) a shared write-ahead log (one fdatasync per round for all files,
// per-file copies written behind without sync), plus, on request, the journal over a driver
// that does no IO (`--systems ...,nullio`: the journal's own CPU ceiling).
// Two shapes: (A) N appenders on one session (one file); (B) one appender on each of N sessions.
//
//   npm run bench:journal                       # the full run (sets UV_THREADPOOL_SIZE=64)
//   node scripts/bench/journal.js --quick       # 1 s per cell
//   node scripts/bench/journal.js --seconds 2 --shapes B --appenders 64,512 --systems journal,b,nullio
//
// Not a timed test: it prints its method and numbers. It needs `npm run build` first (dist/).
import { execSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { performance } from "node:perf_hooks"
import { Effect, Layer } from "effect"
import { mintSessionId } from "../../dist/domain/Ids.js"
import { entry } from "../../dist/domain/Records.js"
import * as JournalFile from "../../dist/layers/JournalFile.js"
import { FileDriver, nodeDriver } from "../../dist/layers/journal/FileDriver.js"
import { frameBytes } from "../../dist/layers/journal/Frame.js"
import { Journal } from "../../dist/services/Journal.js"

// ---------------------------------------------------------------------------------------------
// Options

const argv = process.argv.slice(2)
const flag = (name) => argv.includes(name)
const option = (name) => {
  const i = argv.indexOf(name)
  return i >= 0 ? argv[i + 1] : undefined
}
const quick = flag("--quick")
const seconds = Number(option("--seconds") ?? (quick ? 1 : 2.5))
const levels = (option("--appenders") ?? "1,8,64,512").split(",").map(Number)
const shapes = (option("--shapes") ?? "A,B").split(",")
const systems = (option("--systems") ?? "journal,a,b,c,d").split(",")
const warmupSeconds = Math.min(0.5, seconds * 0.2)
const known = ["journal", "a", "b", "c", "d", "nullio"]
if (
  !(seconds > 0) || levels.some((n) => !Number.isInteger(n) || n < 1) ||
  shapes.some((s) => s !== "A" && s !== "B") || systems.some((s) => !known.includes(s))
) {
  console.error("usage: journal.js [--quick] [--seconds N] [--appenders 1,8,64,512] [--shapes A,B] [--systems journal,a,b,c,d,nullio]")
  process.exit(2)
}

// ---------------------------------------------------------------------------------------------
// The record: kind "kv_put", payload {key, value: string} whose JSON is PAYLOAD_BYTES long.

const PAYLOAD_BYTES = 200
const KIND = "kv_put"
const keyOf = (i) => `k${String(i).padStart(6, "0")}`
const valueLength = PAYLOAD_BYTES - JSON.stringify({ key: keyOf(0), value: "" }).length
const payloadOf = (i) => ({ key: keyOf(i), value: "v".repeat(valueLength) })
const jsonBytes = Buffer.byteLength(JSON.stringify(payloadOf(0)))
// On-disk frame size in the journal; the raw baselines write exactly this many bytes per append.
const FRAME_BYTES = frameBytes(Buffer.from(KIND), Buffer.alloc(jsonBytes))
const rawRecord = Buffer.alloc(FRAME_BYTES, 0x61)

// ---------------------------------------------------------------------------------------------
// Measurement: appenders loop until `end`. Throughput (and CPU per append) counts the appends
// acknowledged inside [measureFrom, end]; latency percentiles are over the appends that both
// started and were acknowledged inside it.

class Recorder {
  constructor(measureFrom, end) {
    this.measureFrom = measureFrom
    this.end = end
    this.samples = new Float64Array(1 << 16)
    this.count = 0
    this.completed = 0
    this.total = 0
    this.cpu = process.cpuUsage()
    // Process CPU (all threads) from the end of the warm-up until the appenders are done.
    this.timer = setTimeout(() => (this.cpu = process.cpuUsage()), Math.max(0, measureFrom - performance.now()))
  }
  stop() {
    clearTimeout(this.timer)
    this.cpu = process.cpuUsage(this.cpu)
  }
  add(t0, t1) {
    this.total++
    if (t1 < this.measureFrom || t1 > this.end) return
    this.completed++
    if (t0 < this.measureFrom) return
    if (this.count === this.samples.length) {
      const bigger = new Float64Array(this.samples.length * 2)
      bigger.set(this.samples)
      this.samples = bigger
    }
    this.samples[this.count++] = t1 - t0
  }
  result() {
    const s = this.samples.subarray(0, this.count).sort()
    const pct = (p) => (s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor(p * s.length))])
    return {
      perSecond: this.completed / ((this.end - this.measureFrom) / 1000),
      p50: pct(0.5),
      p99: pct(0.99),
      samples: this.count,
      total: this.total,
      userUsPerAppend: this.cpu.user / this.completed,
      sysUsPerAppend: this.cpu.system / this.completed
    }
  }
}

const timeWindow = () => {
  const start = performance.now()
  return { measureFrom: start + warmupSeconds * 1000, end: start + (warmupSeconds + seconds) * 1000 }
}

/**
 * CPU ticks used so far by each other user process (utime + stime from /proc; Linux only), so a
 * cell run while something else was busy on the machine can be seen as such. Kernel threads are
 * left out (their work, e.g. the ext4 journal, may be ours). A process that exits between two
 * readings is missed.
 */
const otherCpuTicks = () => {
  const ticks = new Map()
  let names = []
  try {
    names = fs.readdirSync("/proc")
  } catch {
    // not Linux
  }
  for (const name of names) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid || name === "2") continue
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8")
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      if (f[1] === "2") continue
      ticks.set(name, Number(f[11]) + Number(f[12]))
    } catch {
      // exited
    }
  }
  return ticks
}
/** Cores other processes kept busy between `before` (from otherCpuTicks) and now. */
const otherCores = (before, seconds) => {
  let ticks = 0
  for (const [pid, t] of otherCpuTicks()) ticks += t - (before.get(pid) ?? 0)
  return ticks / 100 / seconds
}

const tempDir = (tag) => fs.mkdtempSync(path.join(os.tmpdir(), `brain-bench-${tag}-`))

// ---------------------------------------------------------------------------------------------
// The journal: JournalFile.layerNode over a fresh data directory; appenders are fibers.

/**
 * A driver whose writes and syncs touch no disk (they answer on the next turn of the event loop):
 * the journal's own CPU cost per append, i.e. the ceiling it would have on an infinitely fast disk.
 */
const nullIoDriver = {
  ...nodeDriver,
  writev: (_fd, buffers) =>
    Effect.async((resume) => {
      let n = 0
      for (const b of buffers) n += b.length
      setImmediate(() => resume(Effect.succeed(n)))
    }),
  fdatasync: () => Effect.async((resume) => void setImmediate(() => resume(Effect.void)))
}

const runJournal = (shape, appenders, driver = nodeDriver) => {
  const dataDir = tempDir("journal")
  const sessionCount = shape === "A" ? 1 : appenders
  const program = Effect.gen(function*() {
    const journal = yield* Journal
    const sessions = yield* Effect.forEach(
      Array.from({ length: sessionCount }),
      () => Effect.flatMap(mintSessionId, (s) => Effect.as(journal.create(s), s)),
      { concurrency: 16 }
    )
    // Open every handle before timing (the first access validates the journal).
    yield* Effect.forEach(sessions, (s) => journal.lastSequence(s), { concurrency: 16, discard: true })
    const { measureFrom, end } = timeWindow()
    const rec = new Recorder(measureFrom, end)
    const appender = (i) =>
      Effect.gen(function*() {
        const session = sessions[shape === "A" ? 0 : i]
        const entries = [entry(KIND, payloadOf(i))]
        for (;;) {
          const t0 = performance.now()
          if (t0 >= end) return
          yield* journal.append(session, entries)
          rec.add(t0, performance.now())
        }
      })
    yield* Effect.forEach(Array.from({ length: appenders }, (_, i) => i), appender, {
      concurrency: "unbounded",
      discard: true
    })
    rec.stop()
    // Every acknowledged append must be in the journal, densely sequenced.
    let written = 0
    for (const s of sessions) written += yield* journal.lastSequence(s)
    if (written !== rec.total) throw new Error(`journal holds ${written} records, ${rec.total} were acknowledged`)
    return rec.result()
  })
  const layer = driver === nodeDriver
    ? JournalFile.layerNode({ dataDir })
    : JournalFile.layer({ dataDir }).pipe(Layer.provide(Layer.succeed(FileDriver, driver)))
  return Effect.runPromise(program.pipe(Effect.provide(layer))).finally(() =>
    fs.rmSync(dataDir, { recursive: true, force: true })
  )
}

// ---------------------------------------------------------------------------------------------
// Raw baselines, on the callback `node:fs` API. Each file is { fd, offset }; offsets are
// reserved synchronously when an append starts, and every write is positional (pwrite).

const openFiles = (count, flags = "w+") => {
  const dir = tempDir("raw")
  const files = []
  for (let i = 0; i < count; i++) {
    files.push({ fd: fs.openSync(path.join(dir, `${i}.seg`), flags), offset: 0, pending: [] })
  }
  return {
    files,
    dispose: () => {
      for (const f of files) fs.closeSync(f.fd)
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

const fsWrite = (fd, buf, pos) =>
  new Promise((resolve, reject) =>
    fs.write(fd, buf, 0, buf.length, pos, (err, n) => (err ? reject(err) : n !== buf.length ? reject(new Error("short write")) : resolve()))
  )
const fsSync = (fd) => new Promise((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())))

const loopAppenders = async (appenders, fileOf, append) => {
  const { measureFrom, end } = timeWindow()
  const rec = new Recorder(measureFrom, end)
  await Promise.all(
    Array.from({ length: appenders }, async (_, i) => {
      const file = fileOf(i)
      for (;;) {
        const t0 = performance.now()
        if (t0 >= end) return
        await append(file)
        rec.add(t0, performance.now())
      }
    })
  )
  rec.stop()
  return rec.result()
}

/** (a) Unbatched: each append is its own pwrite at a reserved offset, then its own fdatasync. */
const runRawA = async (shape, appenders) => {
  const { files, dispose } = openFiles(shape === "A" ? 1 : appenders)
  try {
    return await loopAppenders(appenders, (i) => files[shape === "A" ? 0 : i], async (file) => {
      const pos = file.offset
      file.offset += FRAME_BYTES
      await fsWrite(file.fd, rawRecord, pos)
      await fsSync(file.fd)
    })
  } finally {
    dispose()
  }
}

/**
 * (b) Ideal batching: appends wait in their file's list; a round takes everything pending, does
 * one write (the batch concatenated) + one fdatasync per touched file, all files concurrently,
 * acknowledges each file's appends when its sync returns, and starts the next round once every
 * file of this round is done (the same round barrier as the journal's writer).
 */
const runRawB = async (shape, appenders, dsync = false) => {
  const flags = dsync ? fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_DSYNC : "w+"
  const { files, dispose } = openFiles(shape === "A" ? 1 : appenders, flags)
  const touched = new Set()
  let running = false
  let scheduled = false
  const schedule = () => {
    if (running || scheduled || touched.size === 0) return
    scheduled = true
    setImmediate(round)
  }
  const round = () => {
    scheduled = false
    running = true
    const batch = [...touched]
    touched.clear()
    let left = batch.length
    for (const file of batch) {
      const waiters = file.pending
      file.pending = []
      const buf = waiters.length === 1 ? rawRecord : Buffer.concat(waiters.map(() => rawRecord))
      const pos = file.offset
      file.offset += buf.length
      const synced = (err) => {
        if (err) throw err
        for (const w of waiters) w()
        if (--left === 0) {
          running = false
          schedule()
        }
      }
      fs.write(file.fd, buf, 0, buf.length, pos, (err, n) => {
        if (err || n !== buf.length) throw err ?? new Error("short write")
        if (dsync) synced(null)
        else fs.fdatasync(file.fd, synced)
      })
    }
  }
  try {
    return await loopAppenders(appenders, (i) => files[shape === "A" ? 0 : i], (file) =>
      new Promise((resolve) => {
        file.pending.push(resolve)
        touched.add(file)
        schedule()
      }))
  } finally {
    dispose()
  }
}

/**
 * (c) Shared write-ahead log (the design alternative, DESIGN §2 "1 sync or 64 per batch"): a
 * round writes everything pending, from every file, to one log file with one write + one
 * fdatasync and acknowledges when that sync returns; meanwhile each touched segment file gets its
 * share with one write and no sync (recovery would rebuild segments from the log). The next
 * round starts once the log sync and every segment write are done.
 */
const runRawC = async (shape, appenders) => {
  const { files, dispose } = openFiles((shape === "A" ? 1 : appenders) + 1)
  const wal = files.pop()
  const touched = new Set()
  let running = false
  let scheduled = false
  const schedule = () => {
    if (running || scheduled || touched.size === 0) return
    scheduled = true
    setImmediate(round)
  }
  const round = () => {
    scheduled = false
    running = true
    const batch = [...touched]
    touched.clear()
    const acks = []
    let left = batch.length + 1
    const finish = () => {
      if (--left === 0) {
        running = false
        schedule()
      }
    }
    for (const file of batch) {
      const waiters = file.pending
      file.pending = []
      for (const w of waiters) acks.push(w)
      const buf = waiters.length === 1 ? rawRecord : Buffer.concat(waiters.map(() => rawRecord))
      const pos = file.offset
      file.offset += buf.length
      fs.write(file.fd, buf, 0, buf.length, pos, (err, n) => {
        if (err || n !== buf.length) throw err ?? new Error("short write")
        finish()
      })
    }
    const log = acks.length === 1 ? rawRecord : Buffer.concat(acks.map(() => rawRecord))
    const pos = wal.offset
    wal.offset += log.length
    fs.write(wal.fd, log, 0, log.length, pos, (err, n) => {
      if (err || n !== log.length) throw err ?? new Error("short write")
      fs.fdatasync(wal.fd, (err) => {
        if (err) throw err
        for (const w of acks) w()
        finish()
      })
    })
  }
  try {
    return await loopAppenders(appenders, (i) => files[shape === "A" ? 0 : i], (file) =>
      new Promise((resolve) => {
        file.pending.push(resolve)
        touched.add(file)
        schedule()
      }))
  } finally {
    files.push(wal)
    dispose()
  }
}

// ---------------------------------------------------------------------------------------------
// Report

const sh = (cmd) => {
  try {
    return execSync(cmd, { encoding: "utf8" }).trim()
  } catch {
    return "(unavailable)"
  }
}

const fmtRate = (r) => (r === undefined ? "-" : Math.round(r.perSecond).toLocaleString("en-US"))
const fmtMs = (v) => (v === undefined || Number.isNaN(v) ? "-" : v < 10 ? v.toFixed(2) : v.toFixed(1))
const fmtRatio = (x) => (x === undefined || !Number.isFinite(x) ? "-" : x.toFixed(2))

const printMethod = () => {
  const dfLine = sh(`df -T ${os.tmpdir()} | tail -1`)
  console.log(`# Journal benchmark (DESIGN §2)

Method
  record         kind "${KIND}", payload {key, value: string}, JSON ${jsonBytes} B; frame on disk ${FRAME_BYTES} B
                 (the raw baselines write ${FRAME_BYTES} B per append too)
  appender       loops: append one record, await the acknowledgement, repeat
  duration       ${warmupSeconds}s warm-up (not counted) + ${seconds}s measured per cell; appends/s = acks
                 received in the measured window; p50/p99 = acknowledge latency (ms) of the appends
                 that started and were acknowledged in it
  shape A        N appenders on one session (one file)
  shape B        one appender on each of N sessions (N files)
  journal        JournalFile.layerNode({dataDir}) (dist/), appenders are Effect fibers,
                 one runtime and a fresh data dir per cell; checks every ack is in the journal
  raw (a)        unbatched: per append one positional fs.write (offset reserved synchronously, so
                 appenders on one file never interleave and are not serialized) + one fs.fdatasync
  raw (b)        ideal batching: per round one fs.write of everything pending + one fs.fdatasync per
                 touched file, all files concurrently; a file's appends are acked when its sync
                 returns; next round starts when all files of the round are done
  raw (d)        (second table) as (b) on files opened with O_DSYNC: the write returns once durable,
                 no fdatasync (the journal's file store opens its segments so)
  raw (c)        shared log (second table): per round one fs.write + one fs.fdatasync of everything
                 pending to ONE log file, acked when that sync returns; each touched per-session file
                 gets its share with one fs.write and no sync, concurrently (written behind)
  j/(b)          journal appends/s divided by raw (b) appends/s, same shape and N
  j p50/(a) p50  journal p50 over raw (a) p50 (the 1-appender latency target)
  files          callback node:fs API; a fresh temp dir under ${os.tmpdir()} per cell, removed after

Machine
  node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? "?"}), UV_THREADPOOL_SIZE=${process.env.UV_THREADPOOL_SIZE ?? "(unset: 4)"}
  disk  ${dfLine}
  load  ${os.loadavg().map((x) => x.toFixed(2)).join(" ")} (1/5/15 min) at start — other processes on the machine skew every number
`)
}

const header = [
  "shape",
  "N",
  "journal/s",
  "p50",
  "p99",
  "raw(a)/s",
  "p50",
  "p99",
  "raw(b)/s",
  "p50",
  "p99",
  "j/(b)",
  "j p50/(a) p50"
]

const rowOf = (cell) => {
  const { shape, n, journal: j, a, b } = cell
  return [
    shape,
    String(n),
    fmtRate(j),
    fmtMs(j?.p50),
    fmtMs(j?.p99),
    fmtRate(a),
    fmtMs(a?.p50),
    fmtMs(a?.p99),
    fmtRate(b),
    fmtMs(b?.p50),
    fmtMs(b?.p99),
    fmtRatio(j && b ? j.perSecond / b.perSecond : undefined),
    n === 1 ? fmtRatio(j && a ? j.p50 / a.p50 : undefined) : ""
  ]
}

const printTable = (cells) => {
  const rows = cells.map(rowOf)
  console.log(`| ${header.join(" | ")} |`)
  console.log(`| ${header.map((_, i) => (i < 2 ? "---" : "---:")).join(" | ")} |`)
  for (const r of rows) console.log(`| ${r.join(" | ")} |`)
}

const printTargets = (cells) => {
  const find = (shape, n) => cells.find((c) => c.shape === shape && c.n === n)
  const verdict = (ok) => (ok === undefined ? "not measured" : ok ? "HOLDS" : "MISSED")
  console.log("\nTargets")
  for (const shape of ["A", "B"]) {
    const c = find(shape, 64)
    const ratio = c?.journal && c?.b ? c.journal.perSecond / c.b.perSecond : undefined
    console.log(
      `  64 appenders, shape ${shape}: journal ≥ 80% of raw (b) — ${verdict(ratio === undefined ? undefined : ratio >= 0.8)}` +
        (ratio === undefined ? "" : ` (${(ratio * 100).toFixed(0)}%: ${fmtRate(c.journal)} vs ${fmtRate(c.b)} appends/s)`)
    )
  }
  for (const shape of ["A", "B"]) {
    const c = find(shape, 1)
    const ratio = c?.journal && c?.a ? c.journal.p50 / c.a.p50 : undefined
    console.log(
      `  1 appender, shape ${shape}: journal p50 ≤ 1.3× raw (a) p50 — ${verdict(ratio === undefined ? undefined : ratio <= 1.3)}` +
        (ratio === undefined ? "" : ` (${ratio.toFixed(2)}×: ${fmtMs(c.journal.p50)} vs ${fmtMs(c.a.p50)} ms)`)
    )
  }
  const g = find("B", 64)
  console.log(
    `  goal: ≥ 20,000 durable appends/s with 64 sessions (shape B) — ${verdict(g?.journal ? g.journal.perSecond >= 20000 : undefined)}` +
      (g?.journal ? ` (${fmtRate(g.journal)} appends/s; raw (b) on 64 files: ${fmtRate(g.b)})` : "")
  )
}

const printCpu = (cells) => {
  const measured = systems.filter((s) => cells.some((c) => c[s]))
  const names = { journal: "journal", a: "raw(a)", b: "raw(b)", c: "raw(c)", d: "raw(d)", nullio: "journal null-IO" }
  const extra = measured.filter((s) => s === "c" || s === "d" || s === "nullio")
  console.log("\nSecond table: the shared-log baseline (c), ideal batching on O_DSYNC files (d), the journal over a driver that writes nothing" +
    " (null IO: its CPU ceiling), process CPU per append in µs (user + sys, all threads, measured window), and the cores" +
    " other user processes kept busy during each system's run (in column order; > 0.1 means the cell was disturbed)\n")
  const head = [
    "shape",
    "N",
    ...extra.flatMap((s) => [`${names[s]}/s`, "p50", "p99"]),
    ...measured.map((s) => `CPU ${names[s]}`),
    "others"
  ]
  console.log(`| ${head.join(" | ")} |`)
  console.log(`| ${head.map((_, i) => (i < 2 ? "---" : "---:")).join(" | ")} |`)
  for (const c of cells) {
    const row = [c.shape, String(c.n)]
    for (const s of extra) row.push(fmtRate(c[s]), fmtMs(c[s]?.p50), fmtMs(c[s]?.p99))
    for (const s of measured) {
      const r = c[s]
      row.push(r ? `${r.userUsPerAppend.toFixed(0)} + ${r.sysUsPerAppend.toFixed(0)}` : "-")
    }
    row.push(measured.map((s) => (c[s] ? c[s].others.toFixed(2) : "-")).join(" / "))
    console.log(`| ${row.join(" | ")} |`)
  }
}

// ---------------------------------------------------------------------------------------------

const main = async () => {
  printMethod()
  const runners = {
    journal: (shape, n) => runJournal(shape, n),
    a: runRawA,
    b: runRawB,
    c: runRawC,
    d: (shape, n) => runRawB(shape, n, true),
    nullio: (shape, n) => runJournal(shape, n, nullIoDriver)
  }
  const cells = []
  const started = performance.now()
  for (const shape of shapes) {
    for (const n of levels) {
      const cell = { shape, n }
      for (const system of systems) {
        const others = otherCpuTicks()
        const t0 = performance.now()
        cell[system] = await runners[system](shape, n)
        cell[system].others = otherCores(others, (performance.now() - t0) / 1000)
        // Let the disk settle a moment between cells (writeback of the removed directory).
        await new Promise((r) => setTimeout(r, 100))
      }
      cells.push(cell)
      const r = rowOf(cell)
      console.error(`  done ${shape} ${n}: journal ${r[2]}/s  raw(a) ${r[5]}/s  raw(b) ${r[8]}/s`)
    }
  }
  console.log(
    `Results (appends/s; latency in ms; ${((performance.now() - started) / 1000).toFixed(0)} s total; ` +
      `load at end ${os.loadavg().map((x) => x.toFixed(2)).join(" ")})\n`
  )
  printTable(cells)
  printTargets(cells)
  printCpu(cells)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
