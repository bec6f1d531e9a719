/**
 * Clients that ask for large answers and stop reading cannot exhaust the server's memory (docs/
 * operations.md, "Memory", "Answers nobody takes"): on a real server process under a small heap
 * (`--max-old-space-size=256`), sessions each holding one 4 MiB turn (an 8 MiB transcript, two
 * 4 MiB Events), then dozens of raw connections per session that send `GET …/transcript` or open
 * an SSE stream from the start, read their answer's first bytes and nothing more. The server stays
 * up and serves a client that reads; each stalled transcript is either answered 200 (it holds its
 * share of the answer memory, BRAIN_ANSWER_BYTES) or refused 503 `overloaded`, retryable, with
 * Retry-After; the stalled connections are cut at their stall bounds, and then a reader gets the
 * whole transcript again. (Before: each stalled transcript held its transcript, pieces of its JSON
 * and their encoding, about 24 MiB, and each stalled stream its session's whole state; thirty
 * such clients killed a 512 MiB server in 4 s, long before the stall bound.)
 */
import * as net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { closedBy, ensureBuilt, eventually, request, type ServerProcess, startServer } from "../support/server.js"

const SESSIONS = 4
/** One turn's message, echoed by the scripted model: the transcript holds it twice. */
const MESSAGE_CHARS = 4 * 1024 * 1024 - 256
/** Stalled transcript readers per session, and SSE streams per session. */
const TRANSCRIPT_READERS = 10
const STREAMS = 40
/** Both stall bounds: short, so that the cut is seen within the test. */
const STALL_MS = 3_000

interface Stalled {
  readonly socket: net.Socket
  /** The first bytes of the answer (its status line and headers, perhaps more). */
  readonly head: Promise<string>
}

/**
 * Sends `path`'s GET on a raw connection, reads the first chunk of the answer and then nothing
 * (a refusal, whole in that chunk, is read to its end and the connection let go).
 */
const stall = (port: number, path: string, accept: string): Stalled => {
  const socket = net.connect(port, "127.0.0.1")
  socket.on("error", () => {})
  const head = new Promise<string>((resolve) => {
    socket.once("data", (chunk: Buffer) => {
      const text = chunk.toString("latin1")
      if (!text.startsWith("HTTP/1.1 200")) socket.on("data", () => {})
      else socket.pause()
      resolve(text)
    })
    socket.once("close", () => resolve(""))
  })
  socket.on("connect", () => socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nAccept: ${accept}\r\n\r\n`))
  return { socket, head }
}

describe("clients that stop reading large answers", () => {
  let server: ServerProcess
  let port: number
  const ids: Array<string> = []
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({
      nodeArgs: ["--max-old-space-size=256"],
      env: { BRAIN_RESPONSE_STALL_MS: String(STALL_MS), BRAIN_SSE_STALL_MS: String(STALL_MS), BRAIN_SSE_CLOSE_GRACE_MS: "1000" }
    })
    port = Number(new URL(server.baseUrl).port)
    for (let i = 0; i < SESSIONS; i++) {
      const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
      expect(created.status, created.text).toBe(201)
      const sent = await request(server.baseUrl, `/v1/sessions/${created.body.session_id}/messages`, {
        json: { input: { message: String.fromCharCode(97 + i).repeat(MESSAGE_CHARS) } }
      })
      expect(sent.status, sent.text.slice(0, 300)).toBe(200)
      ids.push(created.body.session_id)
    }
  }, 240_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("a 256 MiB server stays up: each stalled transcript is answered 200 or refused 503 overloaded with Retry-After, the stalled are cut at the stall bound, then a reader gets the whole transcript", async () => {
    const stalled = Array.from({ length: SESSIONS * TRANSCRIPT_READERS }, (_, i) =>
      stall(port, `/v1/sessions/${ids[i % SESSIONS]}/transcript`, "application/json"))
    const heads = await Promise.all(stalled.map((s) => s.head))
    const statuses = heads.map((h) => h.slice(0, 12))
    expect(server.exited, server.output.slice(-2000)).toBeUndefined()
    expect(statuses.every((s) => s === "HTTP/1.1 200" || s === "HTTP/1.1 503"), statuses.join(", ")).toBe(true)
    expect(statuses.filter((s) => s === "HTTP/1.1 200").length).toBeGreaterThan(0)
    for (const h of heads.filter((h) => h.startsWith("HTTP/1.1 503"))) {
      expect(h).toMatch(/\r\nretry-after: \d+\r\n/i)
      expect(h).toContain("\"code\":\"overloaded\"")
      expect(h).toContain("\"retryable\":true")
      expect(h).toContain("BRAIN_ANSWER_BYTES")
    }
    // A client that reads is served meanwhile.
    const summary = await request(server.baseUrl, `/v1/sessions/${ids[0]}`)
    expect(summary.status, summary.text).toBe(200)
    // The stalled are cut at their bound (the server says so), and their share is given back.
    const held = stalled.filter((_, i) => statuses[i] === "HTTP/1.1 200").map((s) => s.socket.localPort!)
    await eventually("the stalled transcripts cut at BRAIN_RESPONSE_STALL_MS", async () =>
      held.every((p) => closedBy(server, p) === "response_stall") ? true : undefined, 60_000, 200)
    for (const s of stalled) s.socket.destroy()
    const whole = await eventually("the transcript read whole once the stalled are gone", async () => {
      const r = await request(server.baseUrl, `/v1/sessions/${ids[1]}/transcript`)
      return r.status === 200 ? r : undefined
    }, 30_000, 200)
    expect(whole.body.messages.map((m: { content: string }) => m.content.length)).toEqual([MESSAGE_CHARS, MESSAGE_CHARS])
    expect(server.exited, server.output.slice(-2000)).toBeUndefined()
  }, 240_000)

  it("a 256 MiB server stays up under SSE streams from the start that stop reading, and serves a reader meanwhile", async () => {
    const streams = Array.from({ length: SESSIONS * STREAMS }, (_, i) =>
      stall(port, `/v1/sessions/${ids[i % SESSIONS]}/events?after=0`, "text/event-stream"))
    const heads = await Promise.all(streams.map((s) => s.head))
    expect(server.exited, server.output.slice(-2000)).toBeUndefined()
    expect(heads.filter((h) => h.startsWith("HTTP/1.1 200")).length, heads.map((h) => h.slice(0, 12)).join(", ")).toBe(SESSIONS * STREAMS)
    // Every stream's catch-up reads its Events (4 MiB each) while the others stall: a reader of them all is served.
    for (const id of ids) {
      const page = await request(server.baseUrl, `/v1/sessions/${id}/events?after=0`)
      expect(page.status, page.text.slice(0, 300)).toBe(200)
    }
    for (const s of streams) s.socket.destroy()
    const again = await request(server.baseUrl, `/v1/sessions/${ids[2]}/events?after=0`)
    expect(again.status, again.text.slice(0, 300)).toBe(200)
    expect(server.exited, server.output.slice(-2000)).toBeUndefined()
  }, 240_000)
})
