/**
 * How long and how many connections the transport keeps, on a real server process and raw
 * sockets (docs/operations.md, "Connections"):
 *
 * - a client that takes none of its answer for BRAIN_RESPONSE_STALL_MS loses its connection (and
 *   the server the answer's bytes), while one that reads slowly throughout gets all of it;
 * - SSE streams never take the connections kept for other requests (BRAIN_RESERVED_CONNECTIONS),
 *   and `/health/ready` says 503 while a new client would be refused;
 * - an idle keep-alive connection lasts BRAIN_KEEP_ALIVE_TIMEOUT_MS, not a second more, and its
 *   clients are told a whole second less.
 */
import * as http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { closedBy, ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"
import { connect, exchange, expectBrainError, portOf, tcpEntry } from "../support/wire.js"

describe("answers a client does not take, connections SSE streams may not take, keep-alive", () => {
  const STALL_MS = 1_500
  const KEEP_ALIVE_MS = 2_500
  const MAX_CONNECTIONS = 10
  const RESERVED = 4
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({
      env: {
        BRAIN_RESPONSE_STALL_MS: String(STALL_MS),
        BRAIN_KEEP_ALIVE_TIMEOUT_MS: String(KEEP_ALIVE_MS),
        BRAIN_MAX_CONNECTIONS: String(MAX_CONNECTIONS),
        BRAIN_RESERVED_CONNECTIONS: String(RESERVED),
        // Every stream here is on one session, which by default may hold only a share of them.
        BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION: String(MAX_CONNECTIONS - RESERVED)
      }
    })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  /** A session whose transcript is `bytes` long: its answer is larger than the kernel's socket buffers take. */
  const largeTranscript = async (bytes: number) => {
    const r = await request(server.baseUrl, "/v1/sessions", {
      json: { model: { provider: "scripted" }, transcript: [{ role: "user", content: "x".repeat(bytes) }] }
    })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }

  it("a client that takes none of a large answer has its connection closed by the response stall (by the server's word), its bytes let go; one that reads with pauses shorter than that gets all of it", async () => {
    const id = await largeTranscript(12 * 1024 * 1024)
    const port = portOf(server)
    const ask = `GET /v1/sessions/${id}/transcript HTTP/1.1\r\nhost: brain\r\n\r\n`

    const still = await connect(port)
    still.socket.pause()
    still.socket.write(ask)
    // The answer fills the kernel's queues (and the rest waits in the server); once the server
    // lets go of the connection, no process owns its side.
    const stillPort = still.socket.localPort!
    await eventually("the answer to start", async () => ((tcpEntry(port, stillPort)?.tx ?? 0) > 0 ? true : undefined), 10_000, 20)
    await eventually("the server's side to let go", async () => {
      const entry = tcpEntry(port, stillPort)
      return entry === undefined || !entry.owned ? true : undefined
    }, STALL_MS + 8_000, 50)
    // Let go by the stall bound, not by another timer (keep-alive, a request timeout) or a failure.
    expect(await eventually("the server to say what closed it", async () => closedBy(server, stillPort)), server.output).toBe("response_stall")
    still.socket.destroy()

    const slow = await connect(port)
    const slowPort = slow.socket.localPort!
    slow.socket.write(ask)
    // Reads a while, pauses for a third of the stall bound, and again, until the whole answer is in.
    for (;;) {
      slow.socket.pause()
      await sleep(STALL_MS / 3)
      if (slow.responses().length > 0 || slow.ended) break
      slow.socket.resume()
      await sleep(50)
    }
    const [answer] = slow.responses()
    expect(answer?.status).toBe(200)
    expect(answer!.body.messages[0].content.length).toBe(12 * 1024 * 1024)
    expect(closedBy(server, slowPort), "a slow reader is not cut").toBeUndefined()
    slow.socket.destroy()
  })

  it(`SSE streams take at most BRAIN_MAX_CONNECTIONS − BRAIN_RESERVED_CONNECTIONS (${MAX_CONNECTIONS - RESERVED}) connections: the next is refused 503 naming the setting, and other requests are still served`, async () => {
    const id = (await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id as string
    const streams: Array<http.ClientRequest> = []
    const open = () =>
      new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.get(`${server.baseUrl}/v1/sessions/${id}/events?after=0`, { headers: { accept: "text/event-stream" }, agent: false }, resolve)
        req.on("error", reject)
        streams.push(req)
      })
    try {
      for (let i = 0; i < MAX_CONNECTIONS - RESERVED; i++) expect((await open()).statusCode).toBe(200)
      const refused = await open()
      expect(refused.statusCode).toBe(503)
      const text = await new Promise<string>((resolve) => {
        let t = ""
        refused.setEncoding("utf8")
        refused.on("data", (c: string) => (t += c))
        refused.on("end", () => resolve(t))
      })
      expect(JSON.parse(text)).toMatchObject({ code: "overloaded", retryable: true, message: expect.stringContaining("BRAIN_RESERVED_CONNECTIONS") })
      const summary = await request(server.baseUrl, `/v1/sessions/${id}`)
      expect(summary.status, summary.text).toBe(200)
      expect((await request(server.baseUrl, "/health/ready")).status).toBe(204)
    } finally {
      for (const s of streams) s.destroy()
    }
  })

  it("a read whose client closes its sending side is abandoned as a client gone: an SSE stream ends at once and gives its connection back, though the client could still read", async () => {
    const id = (await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id as string
    const port = portOf(server)
    const streams = await Promise.all(Array.from({ length: MAX_CONNECTIONS - RESERVED }, async () => {
      const wire = await connect(port, { allowHalfOpen: true })
      wire.socket.write(`GET /v1/sessions/${id}/events?after=0 HTTP/1.1\r\nhost: brain\r\naccept: text/event-stream\r\n\r\n`)
      await wire.until("the stream's 200", () => wire.responses().length > 0 || wire.received().includes("200 OK"))
      return wire
    }))
    try {
      const [leaving, ...staying] = streams
      leaving!.socket.end()
      await leaving!.until("the server to end the stream", () => leaving!.ended, 5_000)
      // Its connection is free for another stream at once; the others go on.
      const next = await connect(port)
      next.socket.write(`GET /v1/sessions/${id}/events?after=0 HTTP/1.1\r\nhost: brain\r\naccept: text/event-stream\r\n\r\n`)
      await next.until("the next stream's 200", () => next.received().includes("200 OK") || next.received().includes("503"))
      expect(next.received().toString("latin1").slice(0, 600)).toContain("200 OK")
      next.socket.destroy()
      expect(staying.every((w) => !w.ended)).toBe(true)
    } finally {
      for (const w of streams) w.socket.destroy()
    }
  })

  it("/health/ready answers 503 while every connection is taken (a new client would be refused), /health/live 204; ready again once they go", async () => {
    const port = portOf(server)
    const held = await Promise.all(Array.from({ length: MAX_CONNECTIONS }, () => connect(port)))
    try {
      // Each holds its connection: a request in flight would free it soon, so these just hold it open.
      await sleep(100)
      const [ready] = await exchange(port, "GET /health/ready HTTP/1.1\r\nhost: brain\r\n\r\n")
      expectBrainError(ready, 503, "overloaded")
      expect(ready!.body.message).toContain("BRAIN_MAX_CONNECTIONS")
      const [live] = await exchange(port, "GET /health/live HTTP/1.1\r\nhost: brain\r\n\r\n")
      expect(live?.status).toBe(204)
    } finally {
      for (const h of held) h.socket.destroy()
    }
    await eventually("ready again", async () => ((await request(server.baseUrl, "/health/ready")).status === 204 ? true : undefined))
  })

  it("an idle keep-alive connection is kept for its next request, then closed by the keep-alive timeout (by the server's word); the answer tells clients a whole second less", async () => {
    const wire = await connect(portOf(server))
    const own = wire.socket.localPort!
    wire.socket.write("GET /health/live HTTP/1.1\r\nhost: brain\r\n\r\n")
    await wire.until("the answer", () => wire.responses().length > 0)
    await sleep(KEEP_ALIVE_MS / 2)
    expect(wire.ended).toBe(false)
    wire.socket.write("GET /health/live HTTP/1.1\r\nhost: brain\r\n\r\n")
    await wire.until("the second answer", () => wire.responses().length > 1)
    // A hang guard, far above the bound: what closed it is the server's to say.
    await wire.until("the close", () => wire.ended, KEEP_ALIVE_MS + 30_000)
    expect(await eventually("the server to say what closed it", async () => closedBy(server, own)), server.output).toBe("keep_alive")
    expect(wire.responses()[1]!.headers["keep-alive"]).toBe("timeout=1")
    wire.socket.destroy()
  }, 60_000)
})
