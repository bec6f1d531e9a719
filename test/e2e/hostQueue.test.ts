/**
 * Host calls queued in Brain for a host that does not read its command stream, through a real
 * server process and real sockets (docs/environments.md, "The command stream"). The host reads its
 * `ready` and stops reading; a turn dispatches more call bytes than the sockets' buffers hold, so
 * some frames reach the connection and the rest wait in Brain's queue. When the turn is cancelled,
 * the calls' deadline passes or the stream is replaced, every call still waiting is taken back:
 * recorded not sent (not ambiguous), never written, and no `cancel` is sent for it. The calls that
 * reached the connection are recorded ambiguous and each gets its `cancel`. When the host reads
 * again it gets a `call` frame only for those.
 */
import * as http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Frames } from "../support/hosts.js"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

/** Enough call bytes to pass what the kernel's socket buffers (a few MB on loopback) and Node's take. */
const CALLS = 60
const INPUT_BYTES = 200 * 1024
/**
 * Milliseconds of the calls' budget in the deadline case. The round's deadline starts before the
 * calls' starts (12 MB of them) are durable and their frames offered; it must pass after that, or
 * nothing is ever sent and the case checks nothing. What is checked is that order, not a speed: a
 * loaded machine can take over a second to make the starts durable, so the budget is far past it.
 */
const DEADLINE_BUDGET_MS = 8_000

interface Registered {
  readonly host_id: string
  readonly token: string
}

/** A host's command stream, read through `ready` and then paused (its socket buffers fill). */
interface PausedStream {
  readonly frames: Frames
  readonly resume: () => void
  readonly ended: Promise<void>
  readonly destroy: () => void
}

type Event = { readonly sequence: number; readonly kind: string; readonly data: any }

const until = async (what: string, done: () => boolean | Promise<boolean>) => {
  while (!(await done())) await new Promise((r) => setTimeout(r, 20))
  return what
}

describe("host calls queued for a host that does not read, through a real server", () => {
  let server: ServerProcess
  const streams: Array<PausedStream> = []
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({
      env: {
        BRAIN_CANCEL_GRACE_MS: "300",
        BRAIN_MAX_MODEL_OUTPUT_BYTES: String(32 * 1024 * 1024),
        BRAIN_MAX_WASM_IO_BYTES: String(32 * 1024 * 1024)
      }
    })
  }, 120_000)
  afterAll(async () => {
    for (const s of streams) s.destroy()
    await server?.dispose()
  })

  const register = async (): Promise<Registered> => {
    const r = await request(server.baseUrl, "/v1/hosts", { method: "POST" })
    expect(r.status, r.text).toBe(201)
    return r.body
  }

  const openPaused = (host: Registered) =>
    new Promise<PausedStream>((resolve, reject) => {
      const req = http.get(server.url(`/v1/hosts/${host.host_id}/commands`), {
        headers: { authorization: `Bearer ${host.token}`, accept: "text/event-stream" }
      }, (res) => {
        expect(res.statusCode).toBe(200)
        const frames = new Frames()
        let ended: () => void = () => {}
        const stream: PausedStream = {
          frames,
          resume: () => res.resume(),
          ended: new Promise<void>((r) => (ended = r)),
          destroy: () => req.destroy()
        }
        res.setEncoding("utf8")
        let paused = false
        res.on("data", (chunk: string) => {
          frames.feed(chunk)
          // Nothing but `ready` comes before a session calls: the host stops reading after it, once.
          if (!paused && frames.all.length === 1) {
            expect(frames.all[0].event).toBe("ready")
            paused = true
            res.pause()
            resolve(stream)
          }
        })
        res.on("end", () => ended())
        res.on("close", () => ended())
        streams.push(stream)
      })
      req.on("error", reject)
    })

  const create = async (host: string, timeoutMs?: number) => {
    const big = "x".repeat(INPUT_BYTES)
    const calls = Array.from({ length: CALLS }, (_, i) => ({ name: "work", input: { i, big } }))
    const r = await request(server.baseUrl, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: [{ tool_calls: calls }, { text: "done" }] },
        environments: [{ name: "app", driver: "host", host }],
        tools: [{ name: "work", description: "works", environment: "app", ...(timeoutMs !== undefined ? { timeout_ms: timeoutMs } : {}) }]
      }
    })
    expect(r.status, r.text).toBe(201)
    const id = r.body.session_id as string
    created.set(id, r.body.last_sequence as number)
    return id
  }
  /** Each session's last sequence once created: its turn's Events come after it. */
  const created = new Map<string, number>()

  /** The turn's Events, page by page (the calls' starts are large; the creation, holding every reply, is skipped). */
  const events = async (id: string): Promise<Array<Event>> => {
    const all: Array<Event> = []
    for (;;) {
      const after = all.length > 0 ? all[all.length - 1].sequence : created.get(id)!
      const r = await request(server.baseUrl, `/v1/sessions/${id}/events?after=${after}`)
      expect(r.status, r.text.slice(0, 500)).toBe(200)
      const page = r.body.events as Array<Event>
      if (page.length === 0) return all
      all.push(...page)
    }
  }

  const outcomes = async (id: string) => {
    const all = await events(id)
    return all.filter((e) => e.kind === "tool_call_failed" || e.kind === "tool_call_ended")
  }

  const started = async (id: string) => (await events(id)).filter((e) => e.kind === "tool_call_started").length

  /**
   * After the host reads again: the calls it was sent are exactly those recorded ambiguous, each
   * followed by its cancel; those recorded not sent never reached it. The cancels are queued after
   * every call of the turn, so once each sent call's cancel is read no call frame can follow.
   */
  const checkDelivery = async (stream: PausedStream, recorded: Array<Event>, notSent: (e: Event) => void) => {
    const sent = recorded.filter((e) => e.data.failure?.ambiguous === true).map((e) => e.data.sequence as number)
    const unsent = recorded.filter((e) => e.data.failure?.ambiguous !== true)
    for (const e of unsent) notSent(e)
    // The sockets' buffers took some of the calls, and Brain's queue held the rest.
    expect(sent.length, "calls that reached the host's connection").toBeGreaterThan(0)
    expect(unsent.length, "calls still queued in Brain").toBeGreaterThan(0)
    stream.resume()
    const cancels = () => stream.frames.all.filter((f) => f.event === "cancel").map((f) => f.data.sequence as number)
    await until("every sent call's cancel", () => cancels().length >= sent.length)
    const callFrames = stream.frames.all.filter((f) => f.event === "call").map((f) => f.data.sequence as number)
    expect(callFrames.sort((a, b) => a - b)).toEqual([...sent].sort((a, b) => a - b))
    expect(cancels().sort((a, b) => a - b)).toEqual([...sent].sort((a, b) => a - b))
  }

  it("a turn cancelled while its calls wait for a host that does not read: the calls still queued are recorded cancelled, not sent and not ambiguous, and never reach the host; those that reached its connection are ambiguous and each gets its cancel", async () => {
    const host = await register()
    const stream = await openPaused(host)
    const id = await create(host.host_id)
    const turn = request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    await until("every call started", async () => (await started(id)) === CALLS)
    const cancel = await request(server.baseUrl, `/v1/sessions/${id}/cancel`, { method: "POST" })
    expect(cancel.status, cancel.text).toBe(200)
    const answered = await turn
    expect(answered.body.turn).toMatchObject({ status: "failed", failure: { code: "cancelled", ambiguous: true } })
    const recorded = await outcomes(id)
    expect(recorded).toHaveLength(CALLS)
    await checkDelivery(stream, recorded, (e) => {
      expect(e.data).toMatchObject({ outcome: "cancelled", failure: { code: "cancelled" } })
      expect(e.data.failure.message).toMatch(/not sent/)
    })
  }, 120_000)

  it("calls whose deadline passes while they wait for a host that does not read: those still queued are recorded timeout, not sent and not ambiguous, and never reach the host", async () => {
    const host = await register()
    const stream = await openPaused(host)
    const id = await create(host.host_id, DEADLINE_BUDGET_MS)
    const answered = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    expect(answered.body.turn).toMatchObject({ status: "ended" })
    const recorded = await outcomes(id)
    expect(recorded).toHaveLength(CALLS)
    expect(recorded.every((e) => e.data.outcome === "timeout")).toBe(true)
    await checkDelivery(stream, recorded, (e) => {
      expect(e.data.failure.message).toMatch(/not sent/)
    })
  }, 120_000)

  it("a stream replaced while its calls wait unread: the calls still queued are recorded not sent (host_disconnected), the old stream delivers none of them and ends, and the new one carries none", async () => {
    const host = await register()
    const old = await openPaused(host)
    const id = await create(host.host_id)
    const turn = request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    await until("every call started", async () => (await started(id)) === CALLS)
    const next = await openPaused(host)
    const answered = await turn
    expect(answered.body.turn).toMatchObject({ status: "ended" })
    const recorded = await outcomes(id)
    expect(recorded).toHaveLength(CALLS)
    const sent = recorded.filter((e) => e.data.failure?.ambiguous === true)
    const unsent = recorded.filter((e) => e.data.failure?.ambiguous !== true)
    expect(sent.length).toBeGreaterThan(0)
    expect(unsent.length).toBeGreaterThan(0)
    for (const e of sent) expect(e.data).toMatchObject({ outcome: "unknown", failure: { details: { reason: "connection_lost" } } })
    for (const e of unsent) expect(e.data).toMatchObject({ outcome: "error", failure: { code: "environment_failed", details: { reason: "host_disconnected" } } })
    // The old stream, read to its end, carries only what had reached its connection.
    old.resume()
    await old.ended
    const delivered = old.frames.all.filter((f) => f.event === "call").map((f) => f.data.sequence as number)
    expect(delivered.sort((a, b) => a - b)).toEqual(sent.map((e) => e.data.sequence as number).sort((a, b) => a - b))
    expect(next.frames.all.map((f) => f.event)).toEqual(["ready"])
  }, 120_000)
})
