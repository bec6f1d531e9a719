/**
 * Helpers for the SDK's tests against a real server: a `fetch` that records what the SDK sent and
 * says when a live stream has opened, a free port for a server that must come back on the same
 * address, and a reader of a session's whole history through pages only.
 */
import * as net from "node:net"
import { afterAll, beforeAll } from "@effect/vitest"
import { Brain, type Event, type Fetch } from "../../src/sdk/index.js"
import { ensureBuilt, type ServerProcess, startServer } from "../support/server.js"

export interface Sent {
  readonly url: string
  readonly method: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string | undefined
}

/** A request as the SDK sent it: its headers as a record (names in lower case), its body as text (JSON bodies are sent as bytes). */
export const sentOf = (url: string, init: RequestInit): Sent => ({
  url,
  method: init.method ?? "GET",
  headers: Object.fromEntries(new Headers(init.headers as ConstructorParameters<typeof Headers>[0]).entries()),
  body: init.body === undefined || init.body === null
    ? undefined
    : typeof init.body === "string"
    ? init.body
    : new TextDecoder().decode(init.body as Uint8Array)
})

/**
 * A real server and a Promise client on it for the enclosing `describe`: started (with `env`)
 * before its tests and handed to `got`, closed after them.
 */
export const serverAndClient = (got: (started: { readonly server: ServerProcess; readonly brain: Brain }) => void, env?: Record<string, string>) => {
  let started: { readonly server: ServerProcess; readonly brain: Brain } | undefined
  beforeAll(async () => {
    ensureBuilt()
    const server = await startServer(env === undefined ? {} : { env })
    started = { server, brain: new Brain({ baseUrl: server.baseUrl }) }
    got(started)
  }, 120_000)
  afterAll(async () => {
    await started?.brain.close()
    await started?.server.dispose()
  })
}

/**
 * A fetch over the global one that records every request, counts the live streams it opened,
 * and can drop an answer: `dropAnswer(match)` makes the next request `match` accepts reach the
 * server and be answered in full, and then fail as a reset connection would. `answerOnce(match,
 * answer)` answers the next request `match` accepts itself, as a proxy or a loaded server would,
 * without sending it.
 */
export class RecordingFetch {
  readonly sent: Array<Sent> = []
  streamsOpened = 0
  private drop: ((s: Sent) => boolean) | undefined
  private fake: { readonly match: (s: Sent) => boolean; readonly answer: () => Response } | undefined
  private streamWaiters: Array<{ readonly count: number; readonly resolve: () => void }> = []

  readonly fetch: Fetch = async (url, init) => {
    const sent = sentOf(url, init)
    const headers = sent.headers
    this.sent.push(sent)
    if (this.fake?.match(sent)) {
      const { answer } = this.fake
      this.fake = undefined
      return answer()
    }
    const response = await globalThis.fetch(url, init)
    if (this.drop?.(sent)) {
      this.drop = undefined
      await response.arrayBuffer()
      throw new TypeError("fetch failed (the test dropped the answer after the server sent it)")
    }
    if (headers.accept === "text/event-stream" && response.ok) {
      this.streamsOpened++
      for (const w of this.streamWaiters.filter((w) => this.streamsOpened >= w.count)) w.resolve()
    }
    return response
  }

  dropAnswer(match: (s: Sent) => boolean) {
    this.drop = match
  }

  answerOnce(match: (s: Sent) => boolean, answer: () => Response) {
    this.fake = { match, answer }
  }

  /** Resolves once `count` live streams have opened. */
  streams(count: number): Promise<void> {
    if (this.streamsOpened >= count) return Promise.resolve()
    return new Promise((resolve) => this.streamWaiters.push({ count, resolve }))
  }
}

/** An answer with a JSON body (a refusal's, say). */
export const jsonAnswer = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } })

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

/** Every Event of a session, read through pages only. */
export const history = async (brain: Brain, id: string): Promise<Array<Event>> => {
  const session = await brain.sessions.get(id)
  const events: Array<Event> = []
  for await (const e of session.events(0, { live: false })) events.push(e)
  return events
}

/** Takes items from `it` until `stop` accepts one (included). */
export const takeUntil = async <A>(it: AsyncIterator<A>, stop: (a: A) => boolean): Promise<Array<A>> => {
  const items: Array<A> = []
  for (;;) {
    const r = await it.next()
    if (r.done) return items
    items.push(r.value)
    if (stop(r.value)) return items
  }
}

/** A promise with its resolve at hand: a gate a test opens, or a signal a tool gives. */
export interface Gate<A = void> {
  readonly promise: Promise<A>
  readonly open: (a: A) => void
  opened: boolean
}

export const gate = <A = void>(): Gate<A> => {
  let open!: (a: A) => void
  const promise = new Promise<A>((resolve) => (open = resolve))
  const g: Gate<A> = {
    promise,
    open: (a) => {
      g.opened = true
      open(a)
    },
    opened: false
  }
  return g
}

/**
 * A fetch that records every request (as RecordingFetch) and can cut a host's command stream the
 * way a dropped connection does: `cut()` aborts the body of the latest `/commands` response, and
 * `streams(n)` resolves once `n` command streams have opened.
 */
export class HostFetch {
  readonly sent: Array<Sent> = []
  private commands: Array<AbortController> = []
  private waiters: Array<{ readonly count: number; readonly resolve: () => void }> = []

  readonly fetch: Fetch = async (url, init) => {
    this.sent.push(sentOf(url, init))
    if (!url.endsWith("/commands")) return globalThis.fetch(url, init)
    const own = new AbortController()
    init.signal?.addEventListener("abort", () => own.abort(init.signal!.reason), { once: true })
    const response = await globalThis.fetch(url, { ...init, signal: own.signal })
    if (response.ok) {
      this.commands.push(own)
      for (const w of this.waiters.filter((w) => this.commands.length >= w.count)) w.resolve()
    }
    return response
  }

  get streamsOpened() {
    return this.commands.length
  }

  /** Resolves once `count` command streams have opened. */
  streams(count: number): Promise<void> {
    if (this.commands.length >= count) return Promise.resolve()
    return new Promise((resolve) => this.waiters.push({ count, resolve }))
  }

  /** Drops the latest command stream. */
  cut() {
    this.commands.at(-1)?.abort(new Error("the test cut the command stream"))
  }

  /** The results posted for a call, by the body's `{session_id, sequence}`. */
  resultsFor(session: string, sequence: number): Array<unknown> {
    return this.sent
      .filter((s) => s.method === "POST" && s.url.endsWith("/results"))
      .flatMap((s) => {
        const body = JSON.parse(s.body!)
        return body.results ?? [body]
      })
      .filter((b) => b.session_id === session && b.sequence === sequence)
  }
}
