/**
 * The `telemetry` host service reaches the sink BRAIN_TELEMETRY names, in a real server process,
 * and never the journal (DESIGN §5: fire and forget, not journaled, goes to a configured sink).
 * The fixture's `telemetry` loop reports a marker that exists nowhere else: it must reach the
 * sink, and no file of the data directory may contain it.
 */
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, ServerProcess, startServer } from "../support/server.js"

/** Every file under `dir` whose bytes contain `needle`. */
const filesContaining = (dir: string, needle: string): Array<string> => {
  const found: Array<string> = []
  const walk = (d: string) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, entry.name)
      if (entry.isDirectory()) walk(p)
      else if (entry.isFile() && fs.readFileSync(p).includes(needle)) found.push(path.relative(dir, p))
    }
  }
  walk(dir)
  return found
}

/** Creates a session of the `telemetry` loop, runs one turn with `token`, and returns the ids it needs. */
const runTelemetryTurn = async (server: ServerProcess, token: string) => {
  const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" }, agentloop: "telemetry" } })
  expect(created.status, created.text).toBe(201)
  const session: string = created.body.session_id
  const sent = await request(server.baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: token } } })
  expect(sent.status, sent.text).toBe(200)
  expect(sent.body.turn.status).toBe("ended")
  const events = await request(server.baseUrl, `/v1/sessions/${session}/events`)
  const activation: number = events.body.events.find((e: { kind: string }) => e.kind === "activation_started").sequence
  return { session, activation }
}

interface Received {
  readonly url: string
  readonly contentType: string | undefined
  readonly body: any
}

/** A fake OTLP/HTTP collector on loopback: answers 200 `{}` and keeps every request. */
const fakeCollector = async () => {
  const received: Array<Received> = []
  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      received.push({ url: req.url ?? "", contentType: req.headers["content-type"], body: JSON.parse(Buffer.concat(chunks).toString("utf8")) })
      res.writeHead(200, { "content-type": "application/json" })
      res.end("{}")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return { received, url: `http://127.0.0.1:${port}`, close: () => new Promise<void>((resolve) => server.close(() => resolve())) }
}

/** A JSON attribute value of OTLP (AnyValue) as plain JSON. */
const plain = (v: any): unknown =>
  v.kvlistValue
    ? Object.fromEntries(v.kvlistValue.values.map((kv: any) => [kv.key, plain(kv.value)]))
    : v.arrayValue
    ? v.arrayValue.values.map(plain)
    : v.stringValue ?? v.intValue ?? v.doubleValue ?? v.boolValue ?? null

describe("telemetry from a real server process", () => {
  it("BRAIN_TELEMETRY=file:PATH appends the loop's telemetry as JSON lines {session_id, activation, at_ms, data}, and nothing of it reaches the data directory", async () => {
    ensureBuilt()
    const sink = path.join(os.tmpdir(), `brain-telemetry-${randomUUID()}.jsonl`)
    const server = await startServer({ env: { BRAIN_TELEMETRY: `file:${sink}` } })
    try {
      const token = randomUUID()
      const before = Date.now()
      const { activation, session } = await runTelemetryTurn(server, token)
      const lines = await eventually("three telemetry lines in the sink", async () => {
        const text = fs.existsSync(sink) ? fs.readFileSync(sink, "utf8") : ""
        const ls = text.split("\n").filter((l) => l.length > 0)
        return ls.length >= 3 ? ls : undefined
      })
      const records = lines.map((l) => JSON.parse(l))
      expect(records.map((r) => ({ ...r, at_ms: typeof r.at_ms }))).toEqual(
        [0, 1, 2].map((i) => ({ session_id: session, activation, at_ms: "number", data: { marker: `telemetry:${token}`, i } }))
      )
      for (const r of records) expect(r.at_ms).toBeGreaterThanOrEqual(before - 1_000)
      expect(filesContaining(server.dataDir, `telemetry:${token}`)).toEqual([])
      expect(server.output).toContain(`telemetry: JSON lines appended to ${sink}`)
    } finally {
      await server.dispose()
      fs.rmSync(sink, { force: true })
    }
  })

  it("BRAIN_TELEMETRY=otlp:URL sends the loop's telemetry as OTLP/HTTP log records to {URL}/v1/logs, received by a fake collector on loopback, and nothing of it reaches the data directory", async () => {
    ensureBuilt()
    const collector = await fakeCollector()
    const server = await startServer({ env: { BRAIN_TELEMETRY: `otlp:${collector.url}` } })
    try {
      const token = randomUUID()
      const { activation, session } = await runTelemetryTurn(server, token)
      const logRecords = await eventually("three OTLP log records at the collector", async () => {
        const all = collector.received.flatMap((r) => r.body.resourceLogs.flatMap((rl: any) => rl.scopeLogs.flatMap((sl: any) => sl.logRecords)))
        return all.length >= 3 ? all : undefined
      })
      for (const r of collector.received) {
        expect(r.url).toBe("/v1/logs")
        expect(r.contentType).toContain("application/json")
        const resource = plain({ kvlistValue: { values: r.body.resourceLogs[0].resource.attributes } })
        expect(resource).toMatchObject({ "service.name": "brain" })
      }
      expect(logRecords.map((r: any) => plain(r.body))).toEqual([0, 1, 2].map((i) => ({ marker: `telemetry:${token}`, i })))
      for (const r of logRecords) {
        expect(plain({ kvlistValue: { values: r.attributes } })).toEqual({ "brain.session_id": session, "brain.activation": activation })
        expect(r.timeUnixNano).toMatch(/^\d+000000$/)
      }
      expect(filesContaining(server.dataDir, `telemetry:${token}`)).toEqual([])
    } finally {
      await server.dispose()
      await collector.close()
    }
  })

  it("with BRAIN_TELEMETRY unset the loop's telemetry is dropped: the turn ends and nothing of it is written anywhere in the data directory", async () => {
    ensureBuilt()
    const server = await startServer()
    try {
      const token = randomUUID()
      await runTelemetryTurn(server, token)
      expect(filesContaining(server.dataDir, `telemetry:${token}`)).toEqual([])
      expect(server.output).toContain("telemetry: none (BRAIN_TELEMETRY unset)")
    } finally {
      await server.dispose()
    }
  })

  it("a BRAIN_TELEMETRY the server cannot use refuses the start with a reason: a scheme that is not file: or otlp:, a file whose directory does not exist", async () => {
    ensureBuilt()
    for (const [value, reason] of [
      ["http://127.0.0.1:4318", "otlp:http://127.0.0.1:4318"],
      [`file:${path.join(os.tmpdir(), randomUUID(), "t.jsonl")}`, "cannot open"]
    ] as const) {
      const refused = new ServerProcess({ entry: "product", env: { BRAIN_TELEMETRY: value } })
      try {
        const r = await refused.spawn()
        expect(r.listening, refused.output).toBe(false)
        expect(refused.output).toContain("BRAIN_TELEMETRY")
        expect(refused.output).toContain(reason)
      } finally {
        await refused.dispose()
      }
    }
  })
})
