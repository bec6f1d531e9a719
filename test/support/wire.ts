/**
 * Raw HTTP/1.1 over a socket, for tests of the transport itself: what a client sends byte for byte
 * (no Host, a repeated header, a half-close, a pause in reading), and every response it gets,
 * interim `1xx` ones included, as far as they have come.
 */
import * as fs from "node:fs"
import * as net from "node:net"
import { expect } from "@effect/vitest"
import { sleep } from "./server.js"

export interface Parsed {
  readonly status: number
  readonly head: string
  readonly headers: Readonly<Record<string, string>>
  readonly text: string
  readonly body: any
}

/** The responses in `raw`, in order (interim `1xx` ones included), as far as they are complete. */
export const responsesIn = (raw: Buffer): Array<Parsed> => {
  const out: Array<Parsed> = []
  let at = 0
  for (;;) {
    const end = raw.indexOf("\r\n\r\n", at)
    if (end < 0) return out
    const head = raw.toString("latin1", at, end)
    const [statusLine, ...lines] = head.split("\r\n")
    const status = Number(statusLine!.split(" ")[1])
    const headers: Record<string, string> = {}
    for (const line of lines) {
      const colon = line.indexOf(":")
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
    }
    at = end + 4
    let body: Buffer = Buffer.alloc(0)
    if (status >= 200 && headers["content-length"] !== undefined) {
      const length = Number(headers["content-length"])
      if (raw.length < at + length) return out
      body = raw.subarray(at, at + length)
      at += length
    } else if (status >= 200 && headers["transfer-encoding"] === "chunked") {
      const parts: Array<Buffer> = []
      for (;;) {
        const lineEnd = raw.indexOf("\r\n", at)
        if (lineEnd < 0) return out
        const size = parseInt(raw.toString("latin1", at, lineEnd), 16)
        if (raw.length < lineEnd + 2 + size + 2) return out
        parts.push(raw.subarray(lineEnd + 2, lineEnd + 2 + size))
        at = lineEnd + 2 + size + 2
        if (size === 0) break
      }
      body = Buffer.concat(parts)
    }
    const text = body.toString("utf8")
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    out.push({ status, head, headers, text, body: json })
  }
}

/** A raw connection: what it received, whether the server closed it, and a wait for either. */
export const connect = async (port: number, options: { readonly allowHalfOpen?: boolean } = {}) => {
  const socket = net.connect({ port, host: "127.0.0.1", allowHalfOpen: options.allowHalfOpen ?? false })
  const chunks: Array<Buffer> = []
  let closed = false
  let ended = false
  socket.on("data", (c: Buffer) => chunks.push(c))
  socket.on("end", () => (ended = true))
  socket.on("close", () => (closed = true))
  socket.on("error", () => (closed = true))
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", () => resolve())
    socket.once("error", reject)
  })
  const wire = {
    socket,
    received: () => Buffer.concat(chunks),
    responses: () => responsesIn(Buffer.concat(chunks)),
    get closed() {
      return closed
    },
    /** The server sent its FIN (or the connection is gone). */
    get ended() {
      return ended || closed
    },
    until: async (what: string, done: () => boolean, deadlineMs = 10_000) => {
      const deadline = Date.now() + deadlineMs
      while (!done()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; received:\n${wire.received().toString("latin1").slice(0, 2000)}`)
        await sleep(10)
      }
    }
  }
  return wire
}

/** Writes `bytes` on a fresh connection and waits for `count` final responses (or the server's close). */
export const exchange = async (port: number, bytes: string | Buffer, count = 1) => {
  const wire = await connect(port)
  wire.socket.write(bytes)
  await wire.until(`${count} answer(s)`, () => wire.responses().filter((r) => r.status >= 200).length >= count || wire.ended)
  wire.socket.destroy()
  return wire.responses()
}

/** `r` is a refusal in Brain's error body: `status`, JSON `{code, message, retryable, details?}` with `code`. */
export const expectBrainError = (r: Parsed | undefined, status: number, code: string) => {
  expect(r, "an answer").toBeDefined()
  expect(r!.status, r!.head + "\n" + r!.text).toBe(status)
  expect(r!.headers["content-type"]).toMatch(/^application\/json/)
  expect(r!.body).toMatchObject({ code, retryable: expect.any(Boolean), message: expect.any(String) })
  expect(Object.keys(r!.body).sort().filter((k) => k !== "details")).toEqual(["code", "message", "retryable"])
}

/** The port a server listens on. */
export const portOf = (server: { readonly baseUrl: string }) => Number(new URL(server.baseUrl).port)

/** A TCP connection's entry in /proc/net/tcp, by its local and remote ports (undefined once gone). */
export const tcpEntry = (localPort: number, remotePort: number) => {
  const hex = (port: number) => port.toString(16).toUpperCase().padStart(4, "0")
  for (const line of fs.readFileSync("/proc/net/tcp", "utf8").split("\n").slice(1)) {
    const f = line.trim().split(/\s+/)
    if (f.length < 10 || f[1]!.split(":")[1] !== hex(localPort) || f[2]!.split(":")[1] !== hex(remotePort)) continue
    // Inode 0: no process holds the socket any more (it was closed).
    return { owned: f[9] !== "0", tx: parseInt(f[4]!.split(":")[0]!, 16) }
  }
  return undefined
}

/** A request with a JSON body as raw text: Host, Content-Type and Content-Length set, then `headers`. */
export const json = (method: string, path: string, body: unknown, headers: Record<string, string> = {}) => {
  const text = JSON.stringify(body)
  const lines = Object.entries({ host: "brain", "content-type": "application/json", "content-length": String(Buffer.byteLength(text)), ...headers })
  return `${method} ${path} HTTP/1.1\r\n${lines.map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n${text}`
}
