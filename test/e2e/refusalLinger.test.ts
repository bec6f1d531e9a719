/**
 * How long a connection closed after an early refusal lingers (src/http/Connections.ts,
 * `lingerOnClose`; docs/operations.md, "Bodies"): what its client still sends after the answer is
 * read and discarded for as long as the client makes progress, so that a slow client that uploads
 * before it reads still reads its 413 instead of a reset; a client that falls silent is let go
 * after LINGER_IDLE_MS, one that dribbles for ever at LINGER_MAX_MS; and lingering connections
 * give way to a new client at BRAIN_MAX_CONNECTIONS rather than keep it out. Raw sockets against
 * real server processes; what is asserted is what the clients receive and which bound the server
 * says closed each connection (its log, ClosedBy in Connections.ts), the waits being hang guards
 * far above the bounds they guard.
 */
import * as net from "node:net"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { LINGER_IDLE_MS, LINGER_MAX_MS } from "../../src/domain/Limits.js"
import { closedBy, eventually, type ServerProcess, sharedServer, sleep, startServer } from "../support/server.js"

const TOKEN = "linger-token"
const MAX = 64 * 1024
const MiB = 1024 * 1024

const statusOf = (received: string) => /^HTTP\/1\.1 (\d{3})/.exec(received)?.[1]

/** Request headers declaring a body far over the bound: answered 413 before any of it is read. */
const oversized = (extra: number) =>
  `POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer ${TOKEN}\r\ncontent-length: ${64 * MAX + extra}\r\n\r\n`

/** Whether `text` holds a whole 413 `payload_too_large` answer, its body as long as it says. */
const expectWhole413 = (text: string, why: string) => {
  expect(statusOf(text), `${why}: ${text}`).toBe("413")
  const [head, body] = text.split("\r\n\r\n") as [string, string]
  const length = Number(/\r\ncontent-length: (\d+)\r\n/i.exec(head + "\r\n")?.[1])
  expect(Buffer.byteLength(body), text).toBe(length)
  expect(JSON.parse(body)).toMatchObject({ code: "payload_too_large" })
}

/** A client holding a connection open after its server has ended its side (its FIN), so that it may go on sending. */
const halfOpen = (port: number) => {
  const socket = net.connect({ port, host: "127.0.0.1", allowHalfOpen: true })
  const state = { received: "", error: undefined as string | undefined, closed: false, port: 0 }
  socket.once("connect", () => (state.port = socket.localPort!))
  socket.on("data", (d) => (state.received += d.toString("latin1")))
  socket.on("error", (e: NodeJS.ErrnoException) => (state.error = e.code ?? e.message))
  const closed = new Promise<void>((resolve) => socket.on("close", () => {
    state.closed = true
    resolve()
  }))
  const connected = new Promise<void>((resolve) => socket.once("connect", () => resolve()))
  return { socket, state, closed, connected }
}

/** Waits until `probe` holds, or `deadlineMs` (a hang guard) passes; answers whether it held. */
const until = async (probe: () => boolean, deadlineMs: number) => {
  const end = Date.now() + deadlineMs
  while (!probe()) {
    if (Date.now() > end) return false
    await sleep(50)
  }
  return true
}

describe("an early refusal's connection lingers while its client makes progress", () => {
  const server = sharedServer({ env: { BRAIN_API_TOKEN: TOKEN, BRAIN_MAX_REQUEST_BYTES: String(MAX) } })
  const port = () => Number(new URL(server().baseUrl).port)

  it("a client that uploads 8 MiB past the bound at about 500 KB/s before it reads anything still reads its whole 413, not a reset", async () => {
    const upload = 8 * MiB
    const piece = 64 * 1024
    /** Bytes per second the client keeps to: each piece leaves when the schedule says, or at once when the client is behind it. */
    const rate = 500 * 1024
    const r = await new Promise<{ readonly received: Buffer; readonly error: string | undefined }>((resolve) => {
      const socket = net.connect(port(), "127.0.0.1")
      const chunks: Array<Buffer> = []
      let error: string | undefined
      // Nothing is taken from the kernel until the whole upload has been handed to it.
      socket.pause()
      socket.on("data", (d) => chunks.push(d))
      socket.on("error", (e: NodeJS.ErrnoException) => (error = e.code ?? e.message))
      socket.on("close", () => resolve({ received: Buffer.concat(chunks), error }))
      socket.on("connect", () => {
        socket.write(oversized(upload))
        const start = Date.now()
        let sent = 0
        const next = () => {
          if (socket.destroyed) return
          if (sent >= upload) {
            socket.resume()
            socket.end()
            return
          }
          sent += piece
          socket.write(Buffer.alloc(piece, 0x20), () => setTimeout(next, Math.max(0, start + (sent * 1000) / rate - Date.now())))
        }
        next()
      })
    })
    expect(r.error, r.received.toString("latin1")).toBeUndefined()
    expectWhole413(r.received.toString("latin1"), "the slow uploader's answer")
  }, 120_000)

  it("a client that stops sending in the middle of its body is let go after a silence of LINGER_IDLE_MS, well before LINGER_MAX_MS", async () => {
    const c = halfOpen(port())
    await c.connected
    c.socket.write(oversized(4 * MiB))
    c.socket.write(Buffer.alloc(256 * 1024, 0x20))
    expect(await until(() => statusOf(c.state.received) !== undefined, 60_000), "the 413 came").toBe(true)
    // Silent for well past the idle gap, then sending again: a connection let go answers with a reset.
    await sleep(2 * LINGER_IDLE_MS + 2_000)
    let sentAfter = 0
    const cut = await until(() => {
      if (c.state.error !== undefined || c.socket.destroyed) return true
      c.socket.write(Buffer.alloc(16 * 1024, 0x20))
      sentAfter += 16 * 1024
      return false
    }, LINGER_MAX_MS + 60_000)
    expect(cut, "the server let the silent client go").toBe(true)
    expect(["ECONNRESET", "EPIPE"]).toContain(c.state.error)
    const by = await eventually("the server to say what closed it", async () => closedBy(server(), c.state.port))
    expect(by, "let go for its silence, not at LINGER_MAX_MS").toBe("linger_silence")
    expect(sentAfter, "nothing more was read after the silence").toBeLessThan(MiB)
    expectWhole413(c.state.received, "the silent client's answer")
  }, 180_000)

  it("a client that dribbles bytes for ever after its answer is cut at LINGER_MAX_MS", async () => {
    const c = halfOpen(port())
    await c.connected
    c.socket.write(oversized(64 * MiB))
    c.socket.write(Buffer.alloc(64 * 1024, 0x20))
    // A kilobyte every quarter of a second: never silent for LINGER_IDLE_MS, never near LINGER_BYTES.
    const dribble = setInterval(() => {
      if (!c.socket.destroyed && c.state.error === undefined) c.socket.write(Buffer.alloc(1024, 0x20))
    }, 250)
    try {
      const cut = await until(() => c.state.error !== undefined || c.state.closed, LINGER_MAX_MS + 90_000)
      expect(cut, "the server cut the dribbling client").toBe(true)
    } finally {
      clearInterval(dribble)
      c.socket.destroy()
    }
    const by = await eventually("the server to say what closed it", async () => closedBy(server(), c.state.port))
    expect(by, "cut at the cap, never for a silence").toBe("linger_cap")
    expectWhole413(c.state.received, "the dribbling client's answer")
  }, 180_000)
})

describe("lingering connections at the connection bound", () => {
  let own: ServerProcess | undefined
  afterEach(async () => {
    await own?.dispose()
    own = undefined
  })

  it("give way to a new client: with every connection lingering after a 413, a new request is served, not refused as past BRAIN_MAX_CONNECTIONS", async () => {
    const bound = 4
    const s = (own = await startServer({ env: { BRAIN_API_TOKEN: TOKEN, BRAIN_MAX_REQUEST_BYTES: String(MAX), BRAIN_MAX_CONNECTIONS: String(bound) } }))
    const port = Number(new URL(s.baseUrl).port)
    const clients = Array.from({ length: bound }, () => halfOpen(port))
    // Each keeps sending after its 413, so that it lingers until the cap unless it gives way.
    const dribble = setInterval(() => {
      for (const c of clients) if (!c.socket.destroyed && c.state.error === undefined) c.socket.write(Buffer.alloc(1024, 0x20))
    }, 250)
    try {
      for (const c of clients) {
        await c.connected
        c.socket.write(oversized(64 * MiB))
      }
      for (const c of clients) expect(await until(() => statusOf(c.state.received) === "413", 60_000), c.state.received).toBe(true)
      const answer = await new Promise<string>((resolve) => {
        const socket = net.connect(port, "127.0.0.1")
        let received = ""
        socket.on("data", (d) => {
          received += d.toString("latin1")
          if (/\r\n\r\n[\s\S]*\}/.test(received)) {
            socket.destroy()
            resolve(received)
          }
        })
        socket.on("error", () => resolve(received))
        socket.on("close", () => resolve(received))
        socket.on("connect", () => socket.write(`GET /v1/sessions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${TOKEN}\r\n\r\n`))
      })
      expect(statusOf(answer), answer).toBe("200")
      // The one that gave way finds its connection reset at its next write.
      const gaveWay = await until(() => clients.some((c) => c.state.error !== undefined || c.state.closed), 20_000)
      expect(gaveWay, "a lingering connection gave way").toBe(true)
    } finally {
      clearInterval(dribble)
      for (const c of clients) c.socket.destroy()
    }
  }, 120_000)
})
