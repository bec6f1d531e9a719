/**
 * What a graceful stop waits for once its turns are closed: the answers still being written, and
 * nothing else. A connection that never sent a byte (a client's spare connection, such as the one
 * a fetch client opens after an aborted SSE stream) has no answer to wait for; Node counts it busy,
 * not idle, so the stop closes it itself rather than wait out its grace for it. Against a real
 * server process.
 */
import * as net from "node:net"
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, logMessages, request, type ServerProcess, startServer } from "../support/server.js"
import { connect, portOf } from "../support/wire.js"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
afterEach(async () => {
  await server?.dispose()
  server = undefined
})

describe("a graceful stop's connections", () => {
  it("a connection that never sent a byte, and one whose SSE stream its client aborted, are closed at once: the stop does not wait out its grace for them, and the client's silent connection is closed", async () => {
    server = await startServer({ entry: "product" })
    const { session_id } = (await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body
    // An SSE stream its client aborts after the first bytes.
    const aborted = new AbortController()
    const stream = await fetch(server.url(`/v1/sessions/${session_id}/events?after=0`), { headers: { accept: "text/event-stream" }, signal: aborted.signal })
    expect(stream.status).toBe(200)
    aborted.abort()
    // A connection that sends nothing.
    const { port, hostname } = new URL(server.baseUrl)
    const silent = net.connect(Number(port), hostname)
    await new Promise<void>((resolve, reject) => silent.once("connect", resolve).once("error", reject))
    const closed = new Promise<void>((resolve) => silent.once("close", () => resolve()))
    silent.on("error", () => undefined)
    expect(await server.stop()).toMatchObject({ code: 0 })
    await closed
    // Closed without waiting out the grace: a connection the stop had waited for would still be
    // open at its end, and be named among those abandoned ("drained; closing 1 connection(s) still
    // open after …").
    expect(logMessages(server).filter((m) => m.startsWith("drained")), server.output).toEqual(["drained; closing"])
  })

  it("a request whose body is still arriving when the stop begins is answered 503 overloaded at once (an upload through the gate, a send taken at the socket), never cut with no answer", async () => {
    server = await startServer({ entry: "product" })
    const { session_id } = (await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body
    const { port, hostname } = new URL(server.baseUrl)
    /** A raw request that declares `length` bytes of body and sends only the first `sent`, keeping everything it is answered. */
    const partial = async (path: string, type: string, length: number, sent: Buffer) => {
      const socket = net.connect(Number(port), hostname)
      await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject))
      socket.on("error", () => undefined)
      let answer = ""
      socket.on("data", (b) => (answer += b.toString("latin1")))
      const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()))
      socket.write(`POST ${path} HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: ${type}\r\ncontent-length: ${length}\r\n\r\n`)
      socket.write(sent)
      return { answer: () => answer, closed }
    }
    const upload = await partial("/v1/agentloops", "application/wasm", 8 << 20, Buffer.alloc(1 << 20))
    const send = await partial(`/v1/sessions/${session_id}/messages`, "application/json", 100, Buffer.from('{"input":{"mess'))
    // Both bodies are on their way before the stop: give the server a moment to have read what was sent.
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(await server.stop()).toMatchObject({ code: 0 })
    await Promise.all([upload.closed, send.closed])
    for (const [what, got] of [["upload", upload.answer()], ["send", send.answer()]] as const) {
      expect([what, got.split("\r\n")[0]], server.output).toEqual([what, "HTTP/1.1 503 Service Unavailable"])
      expect(got).toContain('"code":"overloaded"')
      expect(got).toContain("had not arrived whole")
    }
  })

  /** A server whose session's next turn takes `delayMs`, that turn running on a keep-alive connection `wire`, and the stop begun. */
  const stopDuringATurn = async (delayMs: number) => {
    const s = (server = await startServer({ entry: "product" }))
    const created = await request(s.baseUrl, "/v1/sessions", {
      json: { model: { provider: "scripted", replies: [{ text: "slow", delay_ms: delayMs }] } }
    })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const wire = await connect(portOf(s))
    // A first answer on the connection, kept alive as any before the stop.
    wire.socket.write(`GET /v1/sessions/${id} HTTP/1.1\r\nhost: brain\r\n\r\n`)
    await wire.until("the first answer", () => wire.responses().length === 1)
    expect(wire.responses()[0]!.headers["connection"]).toBe("keep-alive")
    const body = JSON.stringify({ input: { message: "go" } })
    wire.socket.write(`POST /v1/sessions/${id}/messages HTTP/1.1\r\nhost: brain\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
    await eventually("the turn to run", async () => ((await request(s.baseUrl, `/v1/sessions/${id}`)).body?.status === "running" ? true : undefined))
    s.child.kill("SIGTERM")
    await eventually("the stop to begin", async () => (logMessages(s).some((m) => m.startsWith("SIGTERM: draining")) ? true : undefined))
    return { s, id, wire }
  }

  it("once a stop begins every answer closes its connection: a keep-alive client whose turn ends during the drain is told Connection: close and its connection is closed after the answer, so it never sends into a connection the stop closes", async () => {
    const { s, wire } = await stopDuringATurn(3_000)
    await wire.until("the turn's answer", () => wire.responses().length === 2, 30_000)
    const answer = wire.responses()[1]!
    expect(answer.status, answer.text).toBe(200)
    expect(answer.headers["connection"]).toBe("close")
    await wire.until("the server to close the connection", () => wire.ended, 30_000)
    expect(await s.stop()).toMatchObject({ code: 0 })
  }, 60_000)

  it("a connection opened during the drain whose request follows a moment later is answered (Connection: close), not reset as a connection that never sent a byte", async () => {
    const { s, id, wire } = await stopDuringATurn(3_000)
    const fresh = await connect(portOf(s))
    // Longer than the drain's look for unused connections (every 10 ms), shorter than their grace.
    await new Promise((resolve) => setTimeout(resolve, 150))
    expect(fresh.ended, "the fresh connection was closed before it sent its request").toBe(false)
    fresh.socket.write(`GET /v1/sessions/${id} HTTP/1.1\r\nhost: brain\r\n\r\n`)
    await fresh.until("its answer", () => fresh.responses().length === 1 || fresh.ended, 30_000)
    expect(fresh.responses().length, fresh.received().toString("latin1")).toBe(1)
    expect(fresh.responses()[0]!.headers["connection"]).toBe("close")
    await wire.until("the turn's answer", () => wire.responses().length === 2, 30_000)
    expect(await s.stop()).toMatchObject({ code: 0 })
  }, 60_000)
})
