/**
 * A host's command stream that goes silent without closing (a half-open connection: the server or
 * a proxy gone without a FIN) is given up after three of the heartbeat intervals Brain's `ready`
 * frame names, and reopened; a quiet stream that keeps its heartbeats is kept. Against a real
 * server with 250 ms heartbeats (given up after 750 ms of silence: long enough that a process
 * starved by a loaded machine does not miss three in a row, which 100 ms heartbeats did at a load
 * average of 20); the silence is made by a fetch that stops handing on the body's bytes without
 * ending it.
 */
import { Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Brain, tool } from "../../src/sdk/index.js"
import { ensureBuilt, type ServerProcess, startServer } from "../support/server.js"

type Fetch = (url: string, init: RequestInit) => Promise<Response>

/** A fetch whose command streams can be frozen: their bytes stop, and nothing ends or errors. */
class FreezingFetch {
  opened = 0
  /** The longest wait, in ms, between two chunks of a command stream handed on (for a failure's message). */
  longestGap = 0
  private frozen: Array<() => void> = []

  readonly fetch: Fetch = async (url, init) => {
    const response = await globalThis.fetch(url, init)
    if (!url.endsWith("/commands") || !response.ok || response.body === null) return response
    this.opened++
    const reader = response.body.getReader()
    let frozen = false
    let last = Date.now()
    const seen = this
    this.frozen.push(() => void (frozen = true))
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        // As a real body does: the request's abort errors it, silent or not.
        init.signal?.addEventListener("abort", () => controller.error(init.signal!.reason), { once: true })
      },
      async pull(controller) {
        const { done, value } = await reader.read()
        if (frozen) return new Promise<void>(() => {}) // silent for ever, never closed
        const now = Date.now()
        seen.longestGap = Math.max(seen.longestGap, now - last)
        last = now
        if (done) controller.close()
        else controller.enqueue(value)
      },
      cancel: (reason) => reader.cancel(reason)
    })
    return new Response(body, { status: response.status, headers: response.headers })
  }

  /** Freezes every command stream opened so far. */
  freeze() {
    for (const f of this.frozen.splice(0)) f()
  }

  async until(check: () => boolean, ms: number) {
    const end = Date.now() + ms
    while (!check()) {
      if (Date.now() > end) throw new Error(`not within ${ms} ms`)
      await new Promise((r) => setTimeout(r, 20))
    }
  }
}

const HEARTBEAT_MS = 250

const echo = tool({ name: "echo", input: Schema.Struct({ n: Schema.Number }), run: async ({ n }) => ({ n }) })
const callsEcho = { model: { provider: "scripted" as const, replies: [{ tool_calls: [{ name: "echo", input: { n: 1 } }] }, { text: "done" }] } }

describe("a host's silent command stream", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_SSE_HEARTBEAT_MS: String(HEARTBEAT_MS) } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("is given up after three heartbeat intervals without a byte and reopened, and host tools work again", async () => {
    const fetch = new FreezingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: fetch.fetch })
    try {
      const session = await client.sessions.create({ ...callsEcho, tools: [echo] })
      expect((await session.send("first")).turn.status).toBe("ended")
      expect(fetch.opened).toBe(1)
      fetch.freeze()
      await fetch.until(() => fetch.opened === 2, 10_000)
      const again = await client.sessions.create({ ...callsEcho, tools: [echo] })
      const outcome = await again.send("second")
      expect(outcome.turn).toMatchObject({ status: "ended", result: { text: "done" } })
    } finally {
      await client.close()
    }
  })

  it("a quiet stream that keeps its heartbeats is kept: no reopen in ten intervals without a call", async () => {
    const fetch = new FreezingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: fetch.fetch })
    try {
      const session = await client.sessions.create({ ...callsEcho, tools: [echo] })
      expect((await session.send("first")).turn.status).toBe("ended")
      await new Promise((r) => setTimeout(r, 10 * HEARTBEAT_MS))
      expect(fetch.opened, `the longest wait between two chunks: ${fetch.longestGap} ms`).toBe(1)
    } finally {
      await client.close()
    }
  })
})
