/**
 * The Telemetry contract run against each sink — the JSON-lines file (over a file driver whose
 * writes can be held or failed) and OTLP/HTTP (against a fake collector on loopback whose answers
 * can be held or turned into errors) — and what each does when its sink fails.
 */
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as path from "node:path"
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Layer } from "effect"
import * as TelemetryFile from "../../src/layers/TelemetryFile.js"
import * as TelemetryOtlp from "../../src/layers/TelemetryOtlp.js"
import { FileDriver, FileError, type FileDriverShape, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Telemetry, type TelemetryRecord } from "../../src/services/Telemetry.js"
import { tempDir } from "../support/journals.js"
import { eventually, type MakeHarness, telemetryContract } from "./Telemetry.contract.js"

// ---------------------------------------------------------------------------------------------
// The file sink

/** Node's driver whose writes wait while a gate is set, or fail (EIO) while `failing` is set. */
const gatedDriver = () => {
  const state = { gate: undefined as Deferred.Deferred<void> | undefined, failing: false }
  const driver: FileDriverShape = {
    ...nodeDriver,
    writev: (fd, buffers, position) =>
      Effect.suspend(() => {
        if (state.failing) return Effect.fail(new FileError({ op: "write", path: `fd ${fd}`, code: "EIO", detail: "injected" }))
        const gate = state.gate
        return gate ? Effect.zipRight(Deferred.await(gate), nodeDriver.writev(fd, buffers, position)) : nodeDriver.writev(fd, buffers, position)
      })
  }
  return { driver, state }
}

/**
 * The file's complete lines. It is read while the sink may be writing (a poll): a line whose write
 * is still under way is not there yet, however much of it the read saw.
 */
const readLines = (file: string) =>
  Effect.sync(() => {
    if (!fs.existsSync(file)) return []
    const text = fs.readFileSync(file, "utf8")
    return text.slice(0, text.lastIndexOf("\n") + 1).split("\n").filter((l) => l.length > 0)
  })

const fileHarness = (options: { readonly queueBytes: number }) =>
  Effect.gen(function*() {
    const dir = yield* tempDir("brain-telemetry-")
    const file = path.join(dir, "telemetry.jsonl")
    const { driver, state } = gatedDriver()
    const telemetry = yield* Layer.build(TelemetryFile.layer(file).pipe(
      Layer.provide(Layer.merge(Layer.succeed(FileDriver, driver), ServerConfig.layerWith({ telemetryQueueBytes: options.queueBytes })))
    )).pipe(Effect.map((ctx) => Context.get(ctx, Telemetry)))
    return {
      file,
      state,
      telemetry,
      received: Effect.map(readLines(file), (ls) => ls.map((l) => JSON.parse(l) as TelemetryRecord)),
      stall: Effect.map(Deferred.make<void>(), (gate) => void (state.gate = gate)),
      resume: Effect.suspend(() => {
        const gate = state.gate
        state.gate = undefined
        return gate ? Deferred.succeed(gate, undefined) : Effect.succeed(true)
      }).pipe(Effect.asVoid)
    }
  })

// ---------------------------------------------------------------------------------------------
// The OTLP sink

/** A JSON attribute value of OTLP (AnyValue) as plain JSON. */
const plain = (v: any): unknown =>
  v.kvlistValue
    ? Object.fromEntries(v.kvlistValue.values.map((kv: any) => [kv.key, plain(kv.value)]))
    : v.arrayValue
    ? v.arrayValue.values.map(plain)
    : v.stringValue ?? v.intValue ?? v.doubleValue ?? v.boolValue ?? null

/** An OTLP log record read back as the telemetry record it carries. */
const fromLogRecord = (r: any): TelemetryRecord => {
  const attributes = plain({ kvlistValue: { values: r.attributes } }) as Record<string, unknown>
  return {
    session_id: attributes["brain.session_id"] as string,
    activation: attributes["brain.activation"] as number,
    at_ms: Number(String(r.timeUnixNano).slice(0, -6)),
    data: plain(r.body)
  }
}

/** A fake OTLP/HTTP collector on loopback: holds its answers while stalled; answers `status`. */
const fakeCollector = Effect.acquireRelease(
  Effect.async<{
    readonly server: http.Server
    readonly url: string
    readonly records: Array<TelemetryRecord>
    readonly state: { stalled: boolean; status: number; held: Array<() => void> }
  }>((resume) => {
    const records: Array<TelemetryRecord> = []
    const state = { stalled: false, status: 200, held: [] as Array<() => void> }
    const server = http.createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => {
        const answer = () => {
          if (state.status === 200) {
            const body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
            for (const rl of body.resourceLogs) for (const sl of rl.scopeLogs) for (const r of sl.logRecords) records.push(fromLogRecord(r))
          }
          res.writeHead(state.status, { "content-type": "application/json" })
          res.end("{}")
        }
        if (state.stalled) state.held.push(answer)
        else answer()
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resume(Effect.succeed({ server, url: `http://127.0.0.1:${port}`, records, state }))
    })
  }),
  ({ server }) =>
    Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
)

const otlpHarness = (options: { readonly queueBytes: number }) =>
  Effect.gen(function*() {
    const collector = yield* fakeCollector
    const telemetry = yield* Layer.build(TelemetryOtlp.layer(`${collector.url}/v1/logs`).pipe(
      Layer.provide(Layer.merge(NodeHttpClient.layerUndici, ServerConfig.layerWith({ telemetryQueueBytes: options.queueBytes })))
    )).pipe(Effect.map((ctx) => Context.get(ctx, Telemetry)))
    return {
      collector,
      telemetry,
      received: Effect.sync(() => [...collector.records]),
      stall: Effect.sync(() => void (collector.state.stalled = true)),
      resume: Effect.sync(() => {
        collector.state.stalled = false
        for (const answer of collector.state.held.splice(0)) answer()
      })
    }
  })

telemetryContract("JSON-lines file", fileHarness satisfies MakeHarness)
telemetryContract("OTLP/HTTP", otlpHarness satisfies MakeHarness)

const rec = (i: number): TelemetryRecord => ({ session_id: "ses_0000000000test0000000000", activation: 4, at_ms: 1_700_000_000_000 + i, data: { i } })

describe("when a telemetry sink fails", () => {
  it.scopedLive("the file sink: a failed write loses its batch (counted as failed), and the next batch is written on lines of its own", () =>
    Effect.gen(function*() {
      const h = yield* fileHarness({ queueBytes: 1024 * 1024 })
      h.state.failing = true
      yield* h.telemetry.record(rec(0))
      yield* eventually("the failed write counted", h.telemetry.stats, (s) => s.failed === 1)
      h.state.failing = false
      yield* h.telemetry.record(rec(1))
      yield* h.telemetry.record(rec(2))
      const got = yield* eventually("the later records in the file", h.received, (rs) => rs.length >= 2)
      expect(got).toEqual([rec(1), rec(2)])
      const stats = yield* eventually("the later records delivered", h.telemetry.stats, (s) => s.delivered >= 2)
      expect(stats).toEqual({ accepted: 3, dropped: 0, delivered: 2, failed: 1 })
    }))

  it.scopedLive("the OTLP sink: an export the collector refuses (500) loses its batch (counted as failed), nothing is retried, and the next batch is sent as usual", () =>
    Effect.gen(function*() {
      const h = yield* otlpHarness({ queueBytes: 1024 * 1024 })
      h.collector.state.status = 500
      yield* h.telemetry.record(rec(0))
      yield* eventually("the refused export counted", h.telemetry.stats, (s) => s.failed === 1)
      h.collector.state.status = 200
      yield* h.telemetry.record(rec(1))
      const got = yield* eventually("the next record at the collector", h.received, (rs) => rs.length >= 1)
      expect(got).toEqual([rec(1)])
      const stats = yield* eventually("the next record delivered", h.telemetry.stats, (s) => s.delivered >= 1)
      expect(stats).toEqual({ accepted: 2, dropped: 0, delivered: 1, failed: 1 })
    }))

  it.scopedLive("the OTLP sink: a collector that is not there loses batches, counted, and callers never wait", () =>
    Effect.gen(function*() {
      const telemetry = yield* Layer.build(TelemetryOtlp.layer("http://127.0.0.1:1/v1/logs").pipe(
        Layer.provide(Layer.merge(NodeHttpClient.layerUndici, ServerConfig.layerWith({})))
      )).pipe(Effect.map((ctx) => Context.get(ctx, Telemetry)))
      for (let i = 0; i < 10; i++) yield* telemetry.record(rec(i))
      const stats = yield* eventually("the lost batches counted", telemetry.stats, (s) => s.failed === 10)
      expect(stats).toEqual({ accepted: 10, dropped: 0, delivered: 0, failed: 10 })
    }))
})
