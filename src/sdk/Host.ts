/**
 * A client's host: the one connection over which its host tools are called (docs/environments.md,
 * "The `host` driver"; docs/sdk.md, "Host tools").
 *
 * - Lazily, the first session created with host tools registers one host (`POST /v1/hosts`, with
 *   the client's token) and opens its command stream (with the host's own token). Registration,
 *   results and Events go through the Effect client (BrainClient `hosts`); the command stream is
 *   read with `fetch` (Transport.ts says why). From then on the client keeps that one stream
 *   until `close`: after a failed create, after its last session ends, and across drops — a
 *   dropped stream is reopened (backing off from RECONNECT_FIRST_MS up to RECONNECT_MAX_MS) for
 *   as long as the client is open. A stream silent for SILENT_HEARTBEATS of the heartbeat
 *   intervals Brain's `ready` frame names (a half-open connection) is given up and reopened too.
 *   A stream refused 401 says the server no longer knows the host (removed, or expired after
 *   BRAIN_HOST_IDLE_EXPIRY_SECS): its registration is forgotten, and the next create registers a
 *   new host (a create waiting for the stream, at once).
 * - A call is run once: a `{session_id, sequence}` this host has seen is never run again. When the
 *   stream that carried a call is over, Brain has recorded the call `unknown` unless it took its
 *   result already: its signal aborts (`connection_lost`) and nothing new is posted for it, ever.
 *   Only a result already posted whose attempt got no answer is posted once more, to learn whether
 *   it landed (HostCalls.ts, `deliver`): Brain answers it as the first, or refuses it.
 * - Each call is run as HostCalls.ts says, and its result posted with the others ready at the
 *   same time (HostResults.ts).
 * - `close` aborts every run's signal, removes the host's registration (`DELETE /v1/hosts/{id}`,
 *   waited for at most UNREGISTER_WAIT_MS, its failure ignored: the host is over either way) and
 *   ends the stream: it never waits for a tool, and no result or Event is posted after it.
 */
import { BrainClosed, BrainError, fromAnswer, networkError } from "./Errors.js"
import { type CallCommand, type CancelCommand, lose, type Run, takeCall } from "./HostCalls.js"
import { ResultBatches } from "./HostResults.js"
import { sseReads } from "./Sse.js"
import { type HostTool, ToolAborted } from "./Tool.js"
import { sleep, Transport } from "./Transport.js"

/** Milliseconds `close` waits for the host's removal to be answered. */
const UNREGISTER_WAIT_MS = 2_000
/** Milliseconds before reopening a dropped command stream, doubled per failure up to the max: a
 * server restart is ridden out quickly, a server that is gone is not hammered. */
const RECONNECT_FIRST_MS = 50
const RECONNECT_MAX_MS = 2_000
/** Milliseconds a create waits for the command stream to be open before it fails: calls made while
 * it is not are not sent (`host_disconnected`), so a session is not created against a dead host. */
export const HOST_READY_DEADLINE_MS = 30_000
/**
 * Heartbeat intervals a command stream may stay silent before the host gives it up and reopens
 * it: a half-open connection (the server or a proxy gone without a FIN) otherwise looks open for
 * ever, and Brain sends no call on it. Brain's `ready` frame names its interval; 0 means none.
 */
const SILENT_HEARTBEATS = 3
/** Registrations one create may make: its host's, and one more when the server no longer knew
 * that one (a host that is refused at once twice is not registered again in a loop). */
const REREGISTRATIONS = 2
/** Call names remembered to refuse a second run of the same call, oldest forgotten first. */
const SEEN_CALLS = 4096

export interface Registered {
  readonly host_id: string
  readonly token: string
}

export class Host {
  private registration: Promise<Registered> | undefined
  private transport: Transport | undefined
  private closed = false
  /** The host whose stream this client started (its registration answered while the client was open). */
  private startedAs: string | undefined = undefined
  /** Counts opened streams: a run belongs to the one that carried it. */
  private connection = 0
  private open = false
  private lastError: BrainError | undefined
  /** Creates waiting for the stream: told `open`, or `gone` when the server no longer knows the host they waited for. */
  private readyWaiters: Array<{ readonly resolve: (state: "open" | "gone") => void }> = []
  private readonly runs = new Map<string, Run>()
  /** Results waiting for the end of this turn of the event loop. */
  private readonly results = new ResultBatches()
  private readonly seen = new Set<string>()
  /** The tools of each session created through this client, by name. */
  private readonly sessions = new Map<string, ReadonlyMap<string, HostTool>>()
  /** Every tool handed to this host: the fallback for a call of a session not bound (yet). */
  private readonly byName = new Map<string, Set<HostTool>>()

  constructor(private readonly api: Transport) {}

  /**
   * Registers this client's host (once) and resolves with its id when its command stream is open.
   * A registration that failed is tried again by the next call; a stream that does not open
   * within HOST_READY_DEADLINE_MS rejects (the connection keeps trying). A host the server no
   * longer knows (its stream refused 401: removed, or its registration expired) is replaced by a
   * new registration, once per call: a new host refused at once too rejects with that refusal.
   */
  async attach(tools: ReadonlyArray<HostTool>, signal?: AbortSignal): Promise<string> {
    this.api.ensureOpen()
    for (const t of tools) {
      const named = this.byName.get(t.name) ?? new Set()
      named.add(t)
      this.byName.set(t.name, named)
    }
    for (let registrations = 1; ; registrations++) {
      if (this.registration === undefined) {
        // Shared by every create waiting for it, so no one caller's signal may abort it.
        const registering = this.api.call((client) => client.hosts.register())
        this.registration = registering
        registering.then(
          (registered) => this.start(registered),
          () => {
            if (this.registration === registering) this.registration = undefined
          }
        )
      }
      const registered = await this.registration
      if (await this.ready(signal) === "open") return registered.host_id
      if (registrations >= REREGISTRATIONS) throw this.lastError ?? networkError("the host's registration is gone")
    }
  }

  /** Runs `session`'s calls with these tools (its create has answered). */
  bind(session: string, tools: ReadonlyArray<HostTool>): void {
    this.sessions.set(session, new Map(tools.map((t) => [t.name, t])))
  }

  /** Forgets `session`'s tools (it ended or was deleted through this client). */
  unbind(session: string): void {
    this.sessions.delete(session)
  }

  /** The id of the registered host, once registered. */
  async hostId(): Promise<string | undefined> {
    return this.registration === undefined ? undefined : (await this.registration.catch(() => undefined))?.host_id
  }

  /**
   * Aborts every run, removes the host (bounded by UNREGISTER_WAIT_MS; a failure is ignored) and
   * ends its stream; posts no result or Event. Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    for (const run of this.runs.values()) lose(run, "closed", "the client was closed")
    this.runs.clear()
    for (const w of this.readyWaiters.splice(0)) w.resolve("open")
    // Only a host whose stream was started (a registration still in flight when the client closes is left).
    const transport = this.transport
    const hostId = this.startedAs
    if (transport !== undefined && hostId !== undefined) {
      await transport.call((client) => client.hosts.unregister(hostId), AbortSignal.timeout(UNREGISTER_WAIT_MS)).catch(() => undefined)
    }
    transport?.close()
  }

  private ready(signal?: AbortSignal): Promise<"open" | "gone"> {
    if (this.open) return Promise.resolve("open")
    if (this.registration === undefined) return Promise.resolve("gone")
    return new Promise<"open" | "gone">((resolve, reject) => {
      const { controller, release } = this.api.link(signal)
      const timer = setTimeout(() => controller.abort(
        this.lastError ?? networkError(`the host's command stream did not open within ${HOST_READY_DEADLINE_MS} ms`)
      ), HOST_READY_DEADLINE_MS)
      const waiter = {
        resolve: (state: "open" | "gone") => {
          done()
          if (this.closed) reject(new BrainClosed())
          else resolve(state)
        }
      }
      const done = () => {
        clearTimeout(timer)
        release()
        this.readyWaiters = this.readyWaiters.filter((w) => w !== waiter)
      }
      controller.signal.addEventListener("abort", () => {
        done()
        reject(this.api.closed ? new BrainClosed() : controller.signal.reason)
      }, { once: true })
      this.readyWaiters.push(waiter)
    })
  }

  private start(registered: Registered) {
    if (this.closed) return
    this.startedAs = registered.host_id
    this.transport = new Transport({ ...this.api.options, token: registered.token })
    void this.follow(registered.host_id, this.transport)
  }

  /** Holds the command stream open until the client closes. */
  private async follow(hostId: string, transport: Transport): Promise<void> {
    const path = `/v1/hosts/${encodeURIComponent(hostId)}/commands`
    const { controller } = transport.link()
    let pause = RECONNECT_FIRST_MS
    while (!this.closed) {
      const connection = ++this.connection
      // This connection's own abort: the client's close, or the watch below giving up a silent stream.
      const stream = new AbortController()
      const closing = () => stream.abort(controller.signal.reason)
      controller.signal.addEventListener("abort", closing, { once: true })
      let lastBytes = Date.now()
      let watch: ReturnType<typeof setInterval> | undefined
      try {
        const response = await transport.open(path, {
          headers: transport.headers({ accept: "text/event-stream" }),
          signal: stream.signal
        })
        if (response.status === 401) {
          // The host's own token opens nothing more: the server no longer knows this host.
          const refusal = fromAnswer(response.status, await response.text().catch(() => ""))
          this.dropped(connection)
          return this.gone(hostId, transport, refusal)
        } else if (!response.ok || response.body === null) {
          this.lastError = fromAnswer(response.status, await response.text().catch(() => ""))
        } else {
          for await (const frames of sseReads(response.body, () => void (lastBytes = Date.now()))) {
            // The calls of a read start once all of its frames are taken: a cancel read with its call stops it unstarted.
            const starts: Array<() => void> = []
            for (const frame of frames) {
              if (frame.event === "ready") {
                this.open = true
                this.lastError = undefined
                pause = RECONNECT_FIRST_MS
                const heartbeatMs = Number((JSON.parse(frame.data) as { heartbeat_ms?: unknown }).heartbeat_ms)
                if (watch === undefined && Number.isFinite(heartbeatMs) && heartbeatMs > 0) {
                  const silentMs = SILENT_HEARTBEATS * heartbeatMs
                  watch = setInterval(() => {
                    if (Date.now() - lastBytes <= silentMs) return
                    stream.abort(networkError(`the host's command stream was silent for ${silentMs} ms, though Brain sends a heartbeat every ${heartbeatMs} ms`))
                  }, heartbeatMs)
                  // The watch never keeps a process alive by itself.
                  ;(watch as { unref?: () => void }).unref?.()
                }
                for (const w of this.readyWaiters.splice(0)) w.resolve("open")
              } else if (frame.event === "call") {
                const start = this.run(JSON.parse(frame.data) as CallCommand, connection, transport, hostId)
                if (start !== undefined) starts.push(start)
              } else if (frame.event === "cancel") {
                this.cancel(JSON.parse(frame.data) as CancelCommand)
              }
            }
            for (const start of starts) start()
          }
          this.lastError = networkError("the host's command stream ended")
        }
      } catch (e) {
        if (this.closed) return
        const reason = stream.signal.aborted ? stream.signal.reason : e
        this.lastError = reason instanceof BrainError ? reason : networkError(reason)
      } finally {
        if (watch !== undefined) clearInterval(watch)
        controller.signal.removeEventListener("abort", closing)
      }
      this.dropped(connection)
      if (this.closed) return
      await sleep(pause, controller.signal).catch(() => undefined)
      pause = Math.min(pause * 2, RECONNECT_MAX_MS)
    }
  }

  /**
   * The server no longer knows host `hostId` (its stream was refused 401: removed — by itself, an
   * operator — or its registration expired after BRAIN_HOST_IDLE_EXPIRY_SECS without a stream and
   * with no session naming it): its registration is forgotten, so the next create registers a new
   * host, and a create waiting for its stream registers one at once. Sessions that named it keep
   * it: their calls of its tools fail `host_unknown` on the server.
   */
  private gone(hostId: string, transport: Transport, refusal: BrainError) {
    if (this.closed || this.startedAs !== hostId) return
    this.registration = undefined
    this.startedAs = undefined
    this.transport = undefined
    this.open = false
    this.lastError = new BrainError({
      code: "unauthorized",
      status: 401,
      retryable: false,
      message: `the server no longer knows this client's host ${hostId} (removed, or its registration expired after BRAIN_HOST_IDLE_EXPIRY_SECS without a command stream): a new host is registered for the sessions created from now on (${refusal.message})`,
      details: { reason: "host_gone", host_id: hostId }
    })
    transport.close()
    for (const w of this.readyWaiters.splice(0)) w.resolve("gone")
  }

  /** The stream `connection` is over: Brain has recorded its calls `unknown`. */
  private dropped(connection: number) {
    this.open = false
    for (const [key, run] of this.runs) {
      if (run.connection !== connection) continue
      this.runs.delete(key)
      lose(run, "connection_lost", "the host's command stream dropped: Brain recorded this call unknown, and its result can no longer be posted")
    }
  }

  private toolFor(session: string, name: string): HostTool | undefined {
    const bound = this.sessions.get(session)
    if (bound !== undefined) return bound.get(name)
    const named = this.byName.get(name)
    return named !== undefined && named.size === 1 ? [...named][0] : undefined
  }

  /** Takes a call; the function returned starts it (nothing, for a call already seen). */
  private run(call: CallCommand, connection: number, transport: Transport, hostId: string): (() => void) | undefined {
    const key = `${call.session_id}/${call.sequence}`
    // Brain never sends a call twice; should anything between it and here, it still runs once.
    if (this.seen.has(key)) return undefined
    this.seen.add(key)
    if (this.seen.size > SEEN_CALLS) this.seen.delete(this.seen.values().next().value!)
    const { run, start } = takeCall(call, connection, {
      transport,
      hostId,
      toolFor: (session, name) => this.toolFor(session, name),
      postResult: (result, run) => this.results.post(transport, hostId, result, run),
      askResult: (result) => transport.call((client) => client.hosts.results(hostId, result)),
      over: (run) => {
        if (!run.awaitingCancel && this.runs.get(key) === run) this.runs.delete(key)
      }
    })
    this.runs.set(key, run)
    return start
  }

  private cancel(cancel: CancelCommand) {
    const key = `${cancel.session_id}/${cancel.sequence}`
    const run = this.runs.get(key)
    if (run === undefined) return
    run.cancelled = true
    if (run.awaitingCancel) {
      this.runs.delete(key)
      void run.confirmStop().catch(() => undefined)
      return
    }
    if (!run.controller.signal.aborted) {
      run.controller.abort(new ToolAborted({ reason: cancel.reason, message: cancel.reason === "deadline" ? "the tool call passed its deadline" : "Brain cancelled the tool call" }))
    }
  }
}
