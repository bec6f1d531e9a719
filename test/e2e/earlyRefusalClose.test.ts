/**
 * A request refused before its body is read closes its connection (docs/api.md 413,
 * docs/operations.md): a declared Content-Length over BRAIN_MAX_REQUEST_BYTES, a missing token, a
 * method the path does not take, sent without `Expect: 100-continue`, are answered with
 * `Connection: close` and the socket ended after the answer, never kept alive to read a body only
 * to discard it (where a client's next request would be taken for that body). A chunked body that
 * runs past BRAIN_MAX_REQUEST_BYTES is answered 413 as it passes the bound, while its client is
 * still sending, and the connection closed. Closed without a reset: what the client still sends
 * after the answer is read and discarded (while the client makes progress, within LINGER_IDLE_MS,
 * LINGER_MAX_MS and LINGER_BYTES: test/e2e/refusalLinger.test.ts) before the socket is let go, so that a client that uploads before it reads still finds the answer. Checked with raw
 * sockets on a real server process.
 */
import * as net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { sharedServer } from "../support/server.js"

const TOKEN = "early-refusal-token"
const MAX = 64 * 1024

interface Exchange {
  /** Everything the server sent before it ended the connection. */
  readonly received: string
  /** Whether the server ended the connection within the wait. */
  readonly ended: boolean
  /** Bytes of body the client had written when the answer's first byte came. */
  readonly sentBeforeAnswer: number
}

/** Sends `head`, then body chunks of `chunk` bytes (chunked when `chunked`) until `total` or the answer; waits up to `waitMs` for the server to end the connection. */
const exchange = (port: number, head: string, options: { readonly chunk: number; readonly total: number; readonly chunked: boolean; readonly waitMs: number }) =>
  new Promise<Exchange>((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    let received = ""
    let sent = 0
    let sentBeforeAnswer = -1
    let done = false
    const finish = (ended: boolean) => {
      if (done) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resolve({ received, ended, sentBeforeAnswer })
    }
    const timer = setTimeout(() => finish(false), options.waitMs)
    socket.on("data", (d) => {
      if (sentBeforeAnswer < 0) sentBeforeAnswer = sent
      received += d.toString("latin1")
    })
    socket.on("end", () => finish(true))
    socket.on("close", () => finish(true))
    socket.on("error", () => undefined)
    const pump = () => {
      if (done || sentBeforeAnswer >= 0 || socket.destroyed) return
      if (sent >= options.total) {
        if (options.chunked) socket.write("0\r\n\r\n")
        return
      }
      const body = Buffer.alloc(options.chunk, 0x61)
      const ok = socket.write(options.chunked ? Buffer.concat([Buffer.from(`${options.chunk.toString(16)}\r\n`), body, Buffer.from("\r\n")]) : body)
      sent += options.chunk
      if (ok) setTimeout(pump, 5)
      else socket.once("drain", () => setTimeout(pump, 5))
    }
    socket.on("connect", () => {
      socket.write(head)
      setTimeout(pump, 20)
    })
  })

const statusOf = (received: string) => /^HTTP\/1\.1 (\d{3})/.exec(received)?.[1]
const connectionOf = (received: string) => /\r\nconnection: ([^\r]*)\r\n/i.exec(received)?.[1]?.toLowerCase()

describe("a refusal answered before the body is read closes the connection", () => {
  const server = sharedServer({ env: { BRAIN_API_TOKEN: TOKEN, BRAIN_MAX_REQUEST_BYTES: String(MAX) } })
  const port = () => Number(new URL(server().baseUrl).port)

  const declared = (method: string, path: string, length: number, auth = true) =>
    `${method} ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n${auth ? `authorization: Bearer ${TOKEN}\r\n` : ""}\r\n`

  it("413 (declared length over the bound), 401 and 405 without Expect come with Connection: close and the socket ended, the body never waited for", async () => {
    const cases = [
      ["413", declared("POST", "/v1/sessions", MAX + 1)],
      ["401", declared("POST", "/v1/sessions", 1000, false)],
      ["405", declared("PUT", "/v1/sessions", 1000)]
    ] as const
    for (const [status, head] of cases) {
      // The client sends no body at all: the answer must not wait for it, and the socket ends.
      const r = await exchange(port(), head, { chunk: 1, total: 0, chunked: false, waitMs: 3000 })
      expect(statusOf(r.received), `${status}: ${r.received}`).toBe(status)
      expect(connectionOf(r.received), `${status}: ${r.received}`).toBe("close")
      expect(r.ended, `${status}: the server ended the connection`).toBe(true)
    }
  })

  it("a chunked body over BRAIN_MAX_REQUEST_BYTES is answered 413 while its client is still sending, and the connection closed", async () => {
    const total = 64 * MAX
    const head = `POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nauthorization: Bearer ${TOKEN}\r\n\r\n`
    const r = await exchange(port(), head, { chunk: 8 * 1024, total, chunked: true, waitMs: 20_000 })
    expect(statusOf(r.received), r.received).toBe("413")
    expect(connectionOf(r.received), r.received).toBe("close")
    expect(r.sentBeforeAnswer, "the answer came before the client had sent its body").toBeGreaterThan(0)
    expect(r.sentBeforeAnswer, "the answer came before the client had sent its body").toBeLessThan(total)
    expect(r.ended).toBe(true)
  })

  it("a client that writes megabytes of a body over the bound before it reads anything still reads the whole 413, not a reset", async () => {
    // Enough that the server must read past its refusal (its kernel takes it while it discards), and
    // small enough that a loaded machine hands it over well within the linger (LINGER_MAX_MS).
    const upload = 2 * 1024 * 1024
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
        socket.write(declared("POST", "/v1/sessions", 64 * MAX + upload))
        socket.write(Buffer.alloc(upload, 0x20), () => {
          socket.resume()
          socket.end()
        })
      })
    })
    const text = r.received.toString("latin1")
    expect(statusOf(text), `${r.error}: ${text}`).toBe("413")
    expect(connectionOf(text)).toBe("close")
    const [head, body] = text.split("\r\n\r\n") as [string, string]
    const length = Number(/\r\ncontent-length: (\d+)\r\n/i.exec(head + "\r\n")?.[1])
    expect(Buffer.byteLength(body), text).toBe(length)
    expect(JSON.parse(body)).toMatchObject({ code: "payload_too_large", retryable: false })
  })

  it("a refused request that declares no body keeps its connection, and the next request on it is answered", async () => {
    const answers = await new Promise<string>((resolve) => {
      const socket = net.connect(port(), "127.0.0.1")
      let received = ""
      socket.on("data", (d) => {
        received += d.toString("latin1")
        if ((received.match(/HTTP\/1\.1 /g) ?? []).length >= 2) {
          socket.destroy()
          resolve(received)
        }
      })
      socket.on("close", () => resolve(received))
      socket.on("connect", () =>
        socket.write(`DELETE /v1/sessions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${TOKEN}\r\n\r\n` + "GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
      )
    })
    expect(statusOf(answers), answers).toBe("405")
    expect(connectionOf(answers), answers).not.toBe("close")
    expect(answers).toMatch(/HTTP\/1\.1 204/)
  })
})
