/**
 * A cancel while the server drains (seed, Lifecycle: SIGTERM "stops admitting work and drains
 * admitted operations … Deadlines, interrupt, and forced process termination can still interrupt a
 * turn"). An interrupt is not new work: the gate takes `POST /v1/sessions/{id}/cancel` during the
 * drain, and it reaches the running turn and is answered as outside a drain, while every request
 * that would start work is still refused 503 `overloaded`. Against a real server process.
 */
import * as fs from "node:fs"
import * as net from "node:net"
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, type Reply, request, type RequestOptions, type ServerProcess, sleep, startServer } from "../support/server.js"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
afterEach(async () => {
  await server?.dispose()
  server = undefined
})

const expectRefused = (r: Reply, what: string) => {
  expect(r.status, `${what}: ${r.text}`).toBe(503)
  expect(r.body, what).toMatchObject({ code: "overloaded", retryable: true })
}

describe("cancel during a graceful drain", () => {
  it("while the server drains, a cancel reaches the running turn (whose tool never answers on its own) and is answered 200 with the summary; new work is still refused 503 and the process exits 0, the tool call recorded as cancelled", async () => {
    server = await startServer()
    const s = server
    const call = (p: string, options: RequestOptions = {}) => request(s.baseUrl, p, options)
    const created = await call("/v1/sessions", {
      json: {
        // `hang` never answers on its own (test/fixtures/server.mjs): only the cancel ends the turn.
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "hang", input: {} }] }, { text: "never" }] },
        tools: [{ name: "hang" }]
      }
    })
    expect(created.status, created.text).toBe(201)
    const id: string = created.body.session_id
    const ended = await call("/v1/sessions", { json: { model: { provider: "scripted" } } })
    const other: string = ended.body.session_id
    expect((await call(`/v1/sessions/${other}/end`, { method: "POST" })).status).toBe(200)

    const inFlight = call(`/v1/sessions/${id}/messages`, { json: { input: { message: "run long" } } })
    await eventually("the hanging tool to start", async () => (s.toolCalls().length > 0 ? true : undefined))

    s.signal("SIGTERM")
    await eventually("readiness to drop", async () => ((await call("/health/ready")).status === 503 ? true : undefined), 20_000, 10)

    // New work is refused, whatever the route.
    expectRefused(await call("/v1/sessions", { json: { model: { provider: "scripted" } } }), "create")
    expectRefused(await call(`/v1/sessions/${id}/messages`, { json: { input: { message: "more" } } }), "send")
    expectRefused(await call(`/v1/sessions/${other}/end`, { method: "POST" }), "end")
    expectRefused(await call(`/v1/sessions/${other}`, { method: "DELETE" }), "delete")
    expectRefused(await call("/v1/hosts", { method: "POST" }), "host registration")
    expectRefused(
      await call("/v1/agentloops", { raw: new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]), headers: { "content-type": "application/wasm" } }),
      "agentloop admission"
    )
    expect(s.exited, "the drain waits for the running turn").toBeUndefined()

    // The interrupt is taken, reaches the turn, and is answered as outside a drain: the tool never
    // ends on its own, so an answer at all is one that did not wait for it.
    const cancelled = await call(`/v1/sessions/${id}/cancel`, { method: "POST", headers: { "idempotency-key": "stop-during-drain" } })
    expect(cancelled.status, cancelled.text).toBe(200)
    expect(cancelled.body).toEqual({ session_id: id, status: "idle", last_sequence: expect.any(Number) })

    const answered = await inFlight
    expect(answered.status, answered.text).toBe(200)
    expect(answered.body.turn).toMatchObject({ status: "failed", failure: { code: "cancelled" } })

    // With the turn closed the drain ends: the process exits 0 (the tool, which never ends, held nothing).
    expect(await s.waitExit(), s.output).toEqual({ code: 0, signal: null })
    expect(fs.existsSync(s.lockFile)).toBe(false)
    expect(s.toolCalls().length).toBe(1)

    // What the journal holds after a restart: the tool call cancelled, the turn failed as cancelled.
    await s.restart()
    const page = await call(`/v1/sessions/${id}/events?after=0`)
    const events: Array<any> = page.body.events
    expect(events.find((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed")?.data).toMatchObject({ outcome: "cancelled" })
    expect(events.find((e) => e.kind === "turn_failed")?.data.failure.code).toBe("cancelled")
    expect(s.toolCalls().length).toBe(1)
  })
})

describe("answers in flight when a drain ends", () => {
  it("a sync send's answer still being written into a slow reader's socket when the drain begins reaches it whole before the process exits", async () => {
    // A message above the default BRAIN_MAX_INPUT_BYTES (4 MiB): its echo must outgrow the socket's buffers.
    server = await startServer({ env: { BRAIN_MAX_INPUT_BYTES: String(8 * 1024 * 1024) } })
    const s = server
    // The scripted model echoes the message: an answer of ANSWER_BYTES and more, far more than the
    // loopback socket's buffers hold while its reader is paused (and under the activation's 16 MiB
    // input cap).
    const created = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    expect(created.status, created.text).toBe(201)
    const id: string = created.body.session_id
    const ANSWER_BYTES = 5 * 1024 * 1024
    const body = JSON.stringify({ input: { message: "m".repeat(ANSWER_BYTES) } })
    const { hostname: host, port } = new URL(s.baseUrl)
    const socket = net.connect(Number(port), host)
    await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject))
    const chunks: Array<Buffer> = []
    socket.on("data", (c: Buffer) => chunks.push(c))
    socket.pause()
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()))
    socket.write(
      `POST /v1/sessions/${id}/messages HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n`
    )
    socket.write(body)
    // The turn ends, and its answer is written into a socket nobody reads.
    await eventually("the turn's end", async () => {
      const got = await request(s.baseUrl, `/v1/sessions/${id}`)
      return got.body.status === "idle" && got.body.last_sequence > created.body.last_sequence ? true : undefined
    })
    s.signal("SIGTERM")
    // Well past the drain's first look at its connections: the answer is still in flight.
    await sleep(400)
    expect(s.exited, "the drain waits for the answer in flight").toBeUndefined()
    socket.resume()
    await closed
    const raw = Buffer.concat(chunks)
    const split = raw.indexOf("\r\n\r\n")
    const head = raw.subarray(0, split).toString("latin1")
    expect(head.split("\r\n")[0]).toBe("HTTP/1.1 200 OK")
    const length = Number(/content-length: (\d+)/i.exec(head)?.[1])
    const answer = raw.subarray(split + 4)
    expect(answer.length).toBe(length)
    const outcome = JSON.parse(answer.toString("utf8"))
    expect(outcome.turn.status, JSON.stringify(outcome.turn.failure)).toBe("ended")
    expect(outcome.turn.result.text.length).toBeGreaterThanOrEqual(ANSWER_BYTES)
    expect(await s.waitExit(20_000), s.output).toEqual({ code: 0, signal: null })
  }, 60_000)
})
