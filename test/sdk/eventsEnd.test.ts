/**
 * When the Events iterator ends, and how it backs off, against a real server process: the server
 * closes the live stream of a session that is over (a cursor at or past `session_ended`, or a
 * failed session, which records no `session_ended`), so the iterator asks for the session's summary
 * when a stream closes and ends if the session is ended or failed; a stream the server opens and
 * closes at once, delivering no recorded Event, does not reset the backoff, so it grows and
 * `reconnectDeadlineMs` is reached; a live session's stream is reopened after the cursor.
 */
import { describe, expect, it } from "@effect/vitest"
import { vi } from "vitest"
import { Brain, BrainError, type Event, type Fetch } from "../../src/sdk/index.js"
import type { ServerProcess } from "../support/server.js"
import { jsonAnswer, RecordingFetch, takeUntil, serverAndClient } from "./support.js"

const scripted = { model: { provider: "scripted" as const } }
const isTurnEnd = (e: Event) => e.kind === "turn_ended" || e.kind === "turn_failed"
const isStream = (init: RequestInit) => new Headers(init.headers as ConstructorParameters<typeof Headers>[0]).get("accept") === "text/event-stream"

/** Every item of `items`, or a rejection naming `what` if they have not ended within `ms`. */
const collectWithin = async <A>(ms: number, what: string, items: AsyncIterable<A>): Promise<Array<A>> => {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still running after ${ms} ms`)), ms)
  })
  const collect = async () => {
    const all: Array<A> = []
    for await (const item of items) all.push(item)
    return all
  }
  try {
    return await Promise.race([collect(), timeout])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * A fetch over the global one that answers every live-stream request itself with a 200 that says
 * `: connected` and closes — what the server does for a session that is over — recording when each
 * was asked for; `status`, when given, replaces the status of every session summary it passes on.
 */
const closingStreams = (status?: string) => {
  const streams: Array<number> = []
  const summaries: Array<string> = []
  const fetch: Fetch = async (url, init) => {
    if (isStream(init)) {
      streams.push(Date.now())
      return new Response(": connected\n\n", { status: 200, headers: { "content-type": "text/event-stream" } })
    }
    const response = await globalThis.fetch(url, init)
    if (init.method === "GET" && /\/v1\/sessions\/ses_[^/?]+$/.test(new URL(url).pathname)) {
      summaries.push(url)
      if (status !== undefined && response.ok) return jsonAnswer(200, { ...(await response.json() as object), status })
    }
    return response
  }
  return { fetch, streams, summaries }
}

describe("the Events iterator's end and backoff", () => {
  let server: ServerProcess
  let brain: Brain
  serverAndClient((started) => ({ server, brain } = started))

  it("on an ended session read from at or past session_ended, the iterator ends after the one stream the server closes, without reconnecting", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    try {
      const session = await client.sessions.create(scripted)
      const ended = await session.end()
      const read = await collectWithin(5_000, "the iterator of an ended session", session.events(ended.last_sequence, { reconnectDeadlineMs: 1_000 }))
      expect(read).toEqual([])
      expect(recording.sent.filter((s) => s.headers.accept === "text/event-stream")).toHaveLength(1)
    } finally {
      await client.close()
    }
  })

  it("a failed session's stream closed by the server ends the iterator, once its summary says failed and the pages after the cursor are read", async () => {
    const faked = closingStreams("failed")
    const client = new Brain({ baseUrl: server.baseUrl, fetch: faked.fetch })
    try {
      const session = await brain.sessions.create(scripted)
      const read = await collectWithin(5_000, "the iterator of a failed session", (await client.sessions.get(session.id)).events(0, { reconnectDeadlineMs: 1_000 }))
      expect(read.map((e) => e.sequence)).toEqual(Array.from({ length: session.summary.last_sequence }, (_, i) => i + 1))
      expect(faked.streams).toHaveLength(1)
    } finally {
      await client.close()
    }
  })

  it("a stream answered 204 No Content (a session over, nothing left after the cursor) ends the iterator, without reconnecting or asking the summary", async () => {
    const streams: Array<string> = []
    const summaries: Array<string> = []
    const fetch: Fetch = async (url, init) => {
      if (isStream(init)) {
        streams.push(url)
        return new Response(null, { status: 204 })
      }
      if (init.method === "GET" && /\/v1\/sessions\/ses_[^/?]+$/.test(new URL(url).pathname)) summaries.push(url)
      return globalThis.fetch(url, init)
    }
    const client = new Brain({ baseUrl: server.baseUrl, fetch })
    try {
      const session = await brain.sessions.create(scripted)
      const ended = await session.end()
      const handle = await client.sessions.get(session.id)
      summaries.length = 0
      const read = await collectWithin(5_000, "the iterator answered 204", handle.events(ended.last_sequence, { reconnectDeadlineMs: 1_000 }))
      expect(read).toEqual([])
      expect(streams).toHaveLength(1)
      expect(summaries).toHaveLength(0)
    } finally {
      await client.close()
    }
  })

  it("a live session's stream that the server keeps closing without a recorded Event meets a doubling backoff (50, 100, 200, 400, 800 ms) and rejects at the first close past reconnectDeadlineMs", async () => {
    const session = await brain.sessions.create(scripted)
    // The session's summary and its page after its last Event, as the server answers them now; then
    // the reader is served them again, and its streams closed, by a fetch that needs no timer, on a
    // fake clock the test alone moves: how the reader waits is seen on that clock, whatever the load.
    const summaryPath = `/v1/sessions/${session.id}`
    const kept = new Map<string, string>()
    for (const url of [summaryPath, `${summaryPath}/events?after=${session.summary.last_sequence}`]) {
      const answer = await globalThis.fetch(`${server.baseUrl}${url}`)
      expect(answer.status).toBe(200)
      kept.set(new URL(url, server.baseUrl).pathname, await answer.text())
    }
    const streams: Array<number> = []
    const summaries: Array<number> = []
    const fetch: Fetch = async (url, init) => {
      if (isStream(init)) {
        streams.push(Date.now())
        return new Response(": connected\n\n", { status: 200, headers: { "content-type": "text/event-stream" } })
      }
      const path = new URL(url).pathname
      const text = kept.get(path)
      if (text === undefined || init.method !== "GET") throw new Error(`not served by this test: ${init.method} ${url}`)
      if (path === summaryPath) summaries.push(Date.now())
      return new Response(text, { status: 200, headers: { "content-type": "application/json" } })
    }
    const client = new Brain({ baseUrl: server.baseUrl, fetch })
    try {
      const handle = await client.sessions.get(session.id)
      summaries.length = 0
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] })
      let failure: unknown = undefined
      let done = false
      try {
        const started = Date.now()
        void (async () => {
          try {
            for await (const _ of handle.events(session.summary.last_sequence, { reconnectDeadlineMs: 1_000 })) failure = new Error("an Event was delivered")
            failure ??= new Error("the iterator ended without rejecting")
          } catch (e) {
            failure = e
          }
          done = true
        })()
        // 10 s of the fake clock at most, a millisecond at a time.
        for (let ms = 0; !done && ms < 10_000; ms++) await vi.advanceTimersByTimeAsync(1)
        expect(done).toBe(true)
        expect(failure).toBeInstanceOf(BrainError)
        expect(failure).toMatchObject({ code: "network_error", retryable: true })
        const at = streams.map((t) => t - started)
        // The first at once; each next after twice the pause before it; the last the first one
        // opened more than 1,000 ms after the failures began (the first stream's close), no later.
        expect(at).toEqual([0, 50, 150, 350, 750, 1_550])
        // Each close asked whether the session was over: it was not (idle), so the reader went on.
        expect(summaries.map((t) => t - started)).toEqual(at)
      } finally {
        vi.useRealTimers()
      }
    } finally {
      await client.close()
    }
  })

  it("a live session's stream closed by the server is reopened after the cursor and delivers the next turn's Events", async () => {
    const recording = new RecordingFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    try {
      const session = await client.sessions.create(scripted)
      recording.answerOnce(
        (s) => s.headers.accept === "text/event-stream",
        () => new Response(": connected\n\n", { status: 200, headers: { "content-type": "text/event-stream" } })
      )
      const live = session.events(session.summary.last_sequence)
      const first = live.next()
      await recording.streams(1) // the second stream, the first the server really opened
      const receipt = await session.submit("after the close")
      const events = [(await first).value as Event, ...await takeUntil(live, isTurnEnd)]
      await live.return()
      expect(events[0]).toMatchObject({ sequence: receipt.sequence, kind: "turn_started" })
      expect(events.at(-1)!.kind).toBe("turn_ended")
      const streams = recording.sent.filter((s) => s.headers.accept === "text/event-stream")
      expect(streams.map((s) => new URL(s.url).searchParams.get("after"))).toEqual([
        String(session.summary.last_sequence),
        String(session.summary.last_sequence)
      ])
    } finally {
      await client.close()
    }
  })
})
