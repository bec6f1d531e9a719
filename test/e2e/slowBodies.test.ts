/**
 * Request bodies that arrive slowly, against real server processes. The body budget
 * (BRAIN_INFLIGHT_BODY_BYTES) counts the bytes a body holds as they arrive, not the length it
 * declares: slow uploads that declare more than the budget cannot close the server to everyone
 * else's writes, and bytes really held past it are still refused. A body still arriving at
 * BRAIN_REQUEST_TIMEOUT_MS is answered 408 saying that its body (not its headers) was late.
 * Each path that reads a body is exercised: a send (taken at the socket) and a create (the gate).
 */
import * as net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { closedBy, ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"

const BUDGET = 1_000_000

/** A request on its own connection whose body is sent when the test says: what it was answered, once the server closes. */
class SlowBody {
  readonly socket: net.Socket
  private received = ""
  /** The answer's raw text, once the connection is closed. */
  readonly answered: Promise<{ readonly text: string }>
  /** The connection's local port, once connected: how the server's log names it (closedBy). */
  readonly port: Promise<number>
  constructor(port: number, path: string, declared: number | "chunked", first: string) {
    this.socket = net.connect(port, "127.0.0.1")
    this.port = new Promise((resolve) => this.socket.once("connect", () => resolve(this.socket.localPort!)))
    this.socket.setEncoding("utf8")
    this.socket.on("data", (d: string) => void (this.received += d))
    this.socket.on("error", () => {})
    this.answered = new Promise((resolve) => this.socket.on("close", () => resolve({ text: this.received })))
    const length = declared === "chunked" ? "transfer-encoding: chunked" : `content-length: ${declared}`
    this.socket.write(`POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${length}\r\n\r\n${first}`)
  }
  send(bytes: string) {
    if (!this.socket.destroyed) this.socket.write(bytes)
  }
  /** What the server has answered so far. */
  get text() {
    return this.received
  }
  /** Whether the server has answered anything yet. */
  get answeredYet() {
    return this.received.length > 0
  }
}

const statusOf = (raw: string) => Number(/^HTTP\/1\.1 (\d{3}) /.exec(raw)?.[1] ?? 0)
const bodyOf = (raw: string) => JSON.parse(raw.slice(raw.indexOf("\r\n\r\n") + 4)) as { code: string; message: string; retryable: boolean }

const portOf = (server: ServerProcess) => Number(new URL(server.baseUrl).port)

const createBody = (bytes: number) => {
  const head = '{"model":{"provider":"scripted"},"system":"'
  return head + "s".repeat(bytes - head.length - 2) + '"}'
}

const newSession = async (server: ServerProcess) => {
  const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
  expect(created.status, created.text).toBe(201)
  return (created.body as { session_id: string }).session_id
}

describe("slow bodies and the body budget", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_INFLIGHT_BODY_BYTES: String(BUDGET) } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("slow uploads that together declare several times the budget hold only what has arrived: other clients' creates and sends are served while they trickle", async () => {
    const session = await newSession(server)
    const port = portOf(server)
    // Six legal uploads that together declare more than the budget, the first four exactly the
    // budget: sends taken at the socket, creates read by the gate, and one chunked.
    const slow = [
      ...Array.from({ length: 3 }, () => new SlowBody(port, `/v1/sessions/${session}/messages`, BUDGET / 4, "{")),
      ...Array.from({ length: 2 }, () => new SlowBody(port, "/v1/sessions", BUDGET / 4, "{")),
      new SlowBody(port, "/v1/sessions", "chunked", "1\r\n{\r\n")
    ]
    const trickle = setInterval(() => slow.forEach((s, i) => s.send(i === 5 ? "1\r\n \r\n" : " ")), 200)
    try {
      await sleep(500)
      for (let round = 0; round < 3; round++) {
        const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
        expect(created.status, created.text).toBe(201)
        const id = (created.body as { session_id: string }).session_id
        const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "hi" } } })
        expect(sent.status, sent.text).toBe(200)
        await sleep(200)
      }
      // The slow uploads were neither refused nor cut: they are still arriving.
      expect(slow.map((s) => s.answeredYet)).toEqual(slow.map(() => false))
    } finally {
      clearInterval(trickle)
      for (const s of slow) s.socket.destroy()
    }
  }, 60_000)

  it("bytes really held past the budget are refused 503 overloaded (retryable, connection closed), and a refused body's bytes are given back at once", async () => {
    const session = await newSession(server)
    const port = portOf(server)
    // A create read by the gate holds 600 kB of its 900 kB.
    const held = new SlowBody(port, "/v1/sessions", 900_000, createBody(900_000).slice(0, 600_000))
    await sleep(500)
    // A fast body that would take the total past the budget is refused.
    const refused = await eventually("a fast body past the budget to be refused", async () => {
      const r = await request(server.baseUrl, "/v1/sessions", { raw: createBody(600_000), headers: { "content-type": "application/json" } })
      return r.status === 503 ? r : undefined
    })
    expect(refused.body).toMatchObject({ code: "overloaded", retryable: true })
    expect(refused.body.message).toContain("BRAIN_INFLIGHT_BODY_BYTES")
    expect(refused.headers.get("connection")).toBe("close")
    // A send taken at the socket holds 300 kB (900 kB held in all), then 200 kB more arrive: refused.
    const message = JSON.stringify({ input: { message: "m".repeat(900_000 - 24) } })
    expect(Buffer.byteLength(message)).toBe(900_000)
    const grown = new SlowBody(port, `/v1/sessions/${session}/messages`, 900_000, message.slice(0, 300_000))
    await sleep(300)
    grown.send(message.slice(300_000, 500_000))
    // Its bytes were given back when it was refused, before its body ends: 350 kB more fit.
    const served = await eventually("a 350 kB body to fit beside the 600 kB held", async () => {
      const r = await request(server.baseUrl, "/v1/sessions", { raw: createBody(350_000), headers: { "content-type": "application/json" } })
      return r.status === 201 ? r : undefined
    })
    expect(served.status).toBe(201)
    expect(grown.answeredYet).toBe(false)
    grown.send(message.slice(500_000))
    const grownAnswer = (await grown.answered).text
    expect(statusOf(grownAnswer), grownAnswer.slice(0, 300)).toBe(503)
    expect(grownAnswer.toLowerCase()).toContain("connection: close")
    expect(bodyOf(grownAnswer)).toMatchObject({ code: "overloaded", retryable: true })
    // The body that held its bytes all along is served.
    held.send(createBody(900_000).slice(600_000))
    const heldAnswer = await eventually("the held body's answer", async () => {
      await sleep(50)
      return held.answeredYet ? held.text : undefined
    })
    expect(statusOf(heldAnswer), heldAnswer.slice(0, 300)).toBe(201)
    held.socket.destroy()
  }, 60_000)
})

describe("a body that does not arrive in time", () => {
  const TIMEOUT_MS = 3_000
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_INFLIGHT_BODY_BYTES: String(BUDGET), BRAIN_HEADERS_TIMEOUT_MS: "1000", BRAIN_REQUEST_TIMEOUT_MS: String(TIMEOUT_MS) } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("is answered 408 saying its body was late, and its connection closed by the request timeout (by the server's word); a refusal before the body is closed by none of the timers; a turn outlasting the timeout is not cut; late headers are said to be headers and closed by the headers timeout", async () => {
    const session = await newSession(server)
    const port = portOf(server)
    const slow = [
      new SlowBody(port, `/v1/sessions/${session}/messages`, 1_000, "{"),
      new SlowBody(port, "/v1/sessions", 1_000, "{"),
      new SlowBody(port, "/v1/sessions", "chunked", "1\r\n{\r\n")
    ]
    // A body declared over BRAIN_MAX_REQUEST_BYTES is answered 413 at once, with `Connection:
    // close`, and its connection closed after the answer, nothing more said on it (docs/api.md).
    const answered = new SlowBody(port, "/v1/sessions", 40 * 1024 * 1024, "{")
    const trickle = setInterval(() => [...slow, answered].forEach((s, i) => s.send(i === 2 ? "1\r\n \r\n" : " ")), 250)
    try {
      const { text: refused } = await answered.answered
      expect(refused.match(/HTTP\/1\.1 /g), refused).toEqual(["HTTP/1.1 "])
      expect(statusOf(refused)).toBe(413)
      expect(refused.toLowerCase()).toContain("connection: close")
      for (const s of slow) {
        const { text } = await s.answered
        expect(statusOf(text), text.slice(0, 300)).toBe(408)
        // Closed by the request's timeout, as the server says, not by another timer or a failure.
        const own = await s.port
        expect(await eventually("the server to say what closed it", async () => closedBy(server, own), 10_000), server.output).toBe("request_timeout")
        const body = bodyOf(text)
        expect(body).toMatchObject({ code: "invalid_request", retryable: true })
        expect(body.message).toMatch(/body did not arrive/)
        expect(body.message).toContain("BRAIN_REQUEST_TIMEOUT_MS")
        expect(body.message).not.toMatch(/headers/)
      }
      // The 413 was answered at once: its connection closed with its client, by none of the timers
      // (the request timeout, which closed the three beside it, would have named it too).
      expect(closedBy(server, await answered.port), server.output).toBeUndefined()
    } finally {
      clearInterval(trickle)
      for (const s of [...slow, answered]) s.socket.destroy()
    }
    // Only a request's arrival is timed: a sync send whose turn outlasts the timeout is answered.
    const long = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies: [{ text: "late", delay_ms: TIMEOUT_MS + 1_500 }] } } })
    expect(long.status, long.text).toBe(201)
    const turn = await request(server.baseUrl, `/v1/sessions/${(long.body as { session_id: string }).session_id}/messages`, { json: { input: { message: "hi" } } })
    expect(turn.status, turn.text).toBe(200)
    expect((turn.body as { turn: { status: string } }).turn.status).toBe("ended")
    // Headers that do not arrive in time are still said to be headers.
    let headersPort = 0
    const headers = net.connect(port, "127.0.0.1", () => {
      headersPort = headers.localPort!
      headers.write("POST /v1/sessions HTTP/1.1\r\nhost: x\r\n")
    })
    let said = ""
    headers.setEncoding("utf8")
    headers.on("data", (d: string) => void (said += d))
    await new Promise((resolve) => headers.on("close", resolve))
    expect(await eventually("the server to say what closed it", async () => closedBy(server, headersPort), 10_000), server.output).toBe("headers_timeout")
    expect(statusOf(said)).toBe(408)
    expect(bodyOf(said).message).toMatch(/headers did not arrive/)
    expect(bodyOf(said).message).toContain("BRAIN_HEADERS_TIMEOUT_MS")
  }, 60_000)
})
