/**
 * SSE readers that never read, on a real server (docs/operations.md, "SSE streams"):
 *
 * - One catching up a session of many large Events makes the server hold about one catch-up page
 *   beyond what the kernel has taken: catch-up reads the next page only once the socket has
 *   drained. Measured without RSS: the client reads nothing, so everything the server wrote is
 *   either in the two kernel socket queues (the server's send queue and the client's receive
 *   queue, from /proc/net/tcp) or still in the server's process; what the client receives once it
 *   reads, less what the kernel held, is what the server held.
 * - Its socket undrained for BRAIN_SSE_STALL_MS while catching up, it is cut off with
 *   `stream_lagged` naming the cursor to resume after.
 * - A live reader cut off with `stream_lagged` that never reads has its connection closed by the
 *   server within BRAIN_SSE_CLOSE_GRACE_MS, its unsent bytes let go: the response never completes.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as net from "node:net"
import { ensureBuilt, request, type ServerProcess, sleep, startServer } from "../support/server.js"
import { openSse } from "../support/sse.js"

const STALL_MS = 1_000
const CLOSE_GRACE_MS = 4_000
const BACKLOG_BYTES = 64 * 1024
/** Events of the session, each padded past the backlog (so each catch-up page holds one). */
const EVENTS = 120
const PAD = 100_000
/** Milliseconds between a live reader's Events. */
const PACE_MS = 20

/** A TCP connection's kernel queues from /proc/net/tcp, by its local and remote ports. */
const tcpEntry = (localPort: number, remotePort: number) => {
  const hex = (port: number) => port.toString(16).toUpperCase().padStart(4, "0")
  for (const line of fs.readFileSync("/proc/net/tcp", "utf8").split("\n").slice(1)) {
    const f = line.trim().split(/\s+/)
    if (f.length < 10 || f[1]!.split(":")[1] !== hex(localPort) || f[2]!.split(":")[1] !== hex(remotePort)) continue
    const [tx, rx] = f[4]!.split(":").map((h) => parseInt(h, 16))
    // State 01 is ESTABLISHED; inode 0: no process holds the socket any more (it was closed).
    return { established: f[3] === "01", owned: f[9] !== "0", tx: tx!, rx: rx! }
  }
  return undefined
}

/** An SSE request on a raw socket that reads nothing until `read` is called. */
const rawSse = async (port: number, path: string) => {
  const socket = net.connect({ host: "127.0.0.1", port })
  socket.pause()
  const chunks: Array<Buffer> = []
  let ended = false
  socket.on("data", (c: Buffer) => chunks.push(c))
  socket.on("end", () => (ended = true))
  socket.on("close", () => (ended = true))
  socket.on("error", () => (ended = true))
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()))
  socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: text/event-stream\r\n\r\n`)
  const received = () => Buffer.concat(chunks)
  return {
    socket,
    received,
    get ended() {
      return ended
    },
    /** Both kernel queues of this connection: what the server wrote that the client has not read. */
    kernel: () => {
      const server = tcpEntry(port, socket.localPort!)
      const client = tcpEntry(socket.localPort!, port)
      return { server, client, bytes: (server?.tx ?? 0) + (client?.rx ?? 0) }
    },
    /** The response body, its chunked framing removed; `complete` once its last chunk has come. */
    body: () => {
      const raw = received()
      let at = raw.indexOf("\r\n\r\n") + 4
      const parts: Array<Buffer> = []
      for (;;) {
        const lineEnd = raw.indexOf("\r\n", at)
        if (lineEnd < 0) return { text: Buffer.concat(parts).toString("utf8"), complete: false }
        const size = parseInt(raw.toString("latin1", at, lineEnd), 16)
        if (size === 0) return { text: Buffer.concat(parts).toString("utf8"), complete: true }
        if (lineEnd + 2 + size > raw.length) {
          parts.push(raw.subarray(lineEnd + 2))
          return { text: Buffer.concat(parts).toString("utf8"), complete: false }
        }
        parts.push(raw.subarray(lineEnd + 2, lineEnd + 2 + size))
        at = lineEnd + 2 + size + 2
      }
    }
  }
}

const framesOf = (text: string) =>
  text.split("\n\n").filter((b) => b !== "" && !b.startsWith(":")).map((block) => {
    const field = (name: string) => [...block.matchAll(/^(\w+): (.*)$/gm)].find((m) => m[1] === name)?.[2]
    const id = field("id")
    return { id: id === undefined ? undefined : Number(id), event: field("event"), json: JSON.parse(field("data")!), bytes: Buffer.byteLength(block) + 2 }
  })

const waitFor = async (what: string, predicate: () => boolean, deadlineMs: number) => {
  const deadline = Date.now() + deadlineMs
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

describe("SSE readers that never read", () => {
  let server: ServerProcess
  let port: number
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({
      env: {
        BRAIN_MAX_EMITTED_BYTES: "0",
        BRAIN_SSE_BACKLOG_BYTES: String(BACKLOG_BYTES),
        BRAIN_SSE_STALL_MS: String(STALL_MS),
        BRAIN_SSE_CLOSE_GRACE_MS: String(CLOSE_GRACE_MS)
      }
    })
    port = Number(new URL(server.baseUrl).port)
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  const post = (p: string, json: unknown) => request(server.baseUrl, p, { json })
  const emitterSession = async () => (await post("/v1/sessions", { agentloop: "emitter", model: { provider: "scripted" } })).body.session_id as string

  it(`one catching up a session of ${EVENTS} Events of ${PAD / 1000} kB makes the server hold about one page beyond the kernel's buffers, is cut off with stream_lagged after BRAIN_SSE_STALL_MS, and resumes by cursor`, async () => {
    const id = await emitterSession()
    const turn = await post(`/v1/sessions/${id}/messages`, { input: { message: `${EVENTS} ${PAD}` } })
    expect(turn.status, turn.text).toBe(200)
    const client = await rawSse(port, `/v1/sessions/${id}/events?after=0`)

    // The kernel's queues fill, then stay put: the server writes nothing more until they drain.
    let kernel = client.kernel()
    for (let still = 0; still < 5; still++) {
      await sleep(100)
      const now = client.kernel()
      if (now.bytes !== kernel.bytes) still = -1
      kernel = now
    }
    expect(kernel.server?.established).toBe(true)
    expect(client.received().length).toBe(0)
    // Cut off once its socket has stayed undrained for the stall time; then it reads, within the close grace.
    await sleep(STALL_MS + 500)
    client.socket.resume()
    await waitFor("the end of the response", () => client.body().complete, 10_000)
    const frames = framesOf(client.body().text)
    const lagged = frames.at(-1)!
    expect(lagged.event).toBe("stream_lagged")
    expect(lagged.json.message).toMatch(/did not drain/)
    const events = frames.filter((f) => f.id !== undefined)
    expect(events.length).toBeLessThan(EVENTS)
    expect(lagged.json.after).toBe(events.at(-1)!.id)

    // Everything it received was written before it read; what the kernel did not hold, the server did.
    const heldByServer = client.received().length - kernel.bytes
    const largestFrame = Math.max(...events.map((f) => f.bytes))
    expect(largestFrame).toBeGreaterThan(PAD)
    expect(heldByServer, `kernel ${kernel.bytes} B, received ${client.received().length} B`).toBeLessThanOrEqual(largestFrame + 1024)
    client.socket.destroy()

    // It resumes after its cursor: the next Event comes next.
    const resumed = await openSse(server.url(`/v1/sessions/${id}/events`), { "last-event-id": String(lagged.json.after) })
    await resumed.until("the next Event", () => resumed.sequences.length > 0, 10_000)
    const page = await request(server.baseUrl, `/v1/sessions/${id}/events?after=${lagged.json.after}&limit=1`)
    expect(resumed.sequences[0]).toBe(page.body.events[0].sequence)
    resumed.close()
  }, 60_000)

  it("a live reader cut off with stream_lagged that never reads has its connection closed by the server, its response never completed", async () => {
    const id = await emitterSession()
    const last = (await request(server.baseUrl, `/v1/sessions/${id}`)).body.last_sequence as number
    const client = await rawSse(port, `/v1/sessions/${id}/events?after=${last}`)
    client.socket.resume()
    await waitFor("the connected comment", () => client.received().includes(": connected"), 5_000)
    client.socket.pause()

    // Far more than the kernel's buffers and the backlog: the reader is cut off during the turn. The
    // Events come PACE_MS apart, so the socket hands each to the kernel before the next comes and the
    // cut comes once the kernel's queues are full: a cut while they still had room (three commits
    // before one write on a loaded machine) would let them take the rest, and the stream would drain.
    const turn = await post(`/v1/sessions/${id}/messages`, { input: { message: `${EVENTS} ${PAD} ${PACE_MS}` } })
    expect(turn.status, turn.text).toBe(200)
    const open = () => {
      const entry = tcpEntry(port, client.socket.localPort!)
      return entry !== undefined && entry.established && entry.owned
    }
    // A hang guard far above the grace, not a bound on it (the machine is shared): the close is the
    // grace's, as no other timer closes a stream (the response stall leaves SSE streams to their own
    // bounds), and what shows it is the response cut short (below) while its client read nothing.
    await waitFor("the server to close the connection", () => !open(), CLOSE_GRACE_MS + 20_000)

    // Read now: what the kernel held, then the end, without the response's last chunk.
    client.socket.resume()
    await waitFor("the end of the connection", () => client.ended, 10_000)
    const body = client.body()
    expect(body.complete).toBe(false)
    expect(framesOf(body.text.slice(0, body.text.lastIndexOf("\n\n") + 2)).length).toBeGreaterThan(0)
    // The server keeps serving.
    expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
  }, 60_000)
})
