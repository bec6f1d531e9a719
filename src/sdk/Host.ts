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
 * - A call is run once: a `{session_id, sequence}` this host has seen is never run again. When the
 *   stream that carried a call is over, Brain has recorded the call `unknown`: its signal aborts
 *   (`connection_lost`) and nothing is posted for it, ever — not on the new stream, not late.
 * - A run decodes the input, runs the tool, encodes its output and posts one result: `ok`, or
 *   `error` with `code` `invalid_input` / `tool_error` / `invalid_output` / `unknown_tool`. Its
 *   Events are posted first: the result waits until every `emit` has been answered. A result the
 *   server refuses (too large) is answered once more, so that the call does not wait for its
 *   deadline: an output as the error `invalid_output`, an error cut down to its code and the
 *   start of its message (REFUSED_ERROR_MESSAGE_CHARS). A result taken whose outcome Brain could
 *   not record (`outcome_unrecorded`) is posted no more (a repeat would be refused) and told to
 *   the tool's `onUnrecorded` as a `ToolResultUnrecorded`.
 * - `cancel` aborts the run's signal; a run that then throws is confirmed `{"stopped": true}`, one
 *   that returns anyway is answered with its output. A local deadline aborts the signal at
 *   `deadline_at_ms`; Brain sends a cancel at the same time, and the stop is confirmed to it.
 * - A call over before its tool would start is never started: the frames of one read are all
 *   taken before any of its calls starts, and a call cancelled by then (its `cancel` came in the
 *   same read, or while its input was being decoded), or whose `deadline_at_ms` has passed, is
 *   not run. Its stop is confirmed `{"stopped": true}` to its cancel — at once, or when Brain's
 *   cancel for the passed deadline comes (`stopped` is refused before a cancel). This is what a
 *   host that was slow or paused meets: frames Brain wrote before it stopped the call, waiting in
 *   the socket's buffers.
 * - `close` aborts every run's signal, removes the host's registration (`DELETE /v1/hosts/{id}`,
 *   waited for at most UNREGISTER_WAIT_MS, its failure ignored: the host is over either way) and
 *   ends the stream: it never waits for a tool, and no result or Event is posted after it.
 */
import type { SessionId } from "../domain/Ids.js"
import type * as Schemas from "../http/Schemas.js"
import { BrainClosed, BrainError, fromAnswer, isOutcomeUnrecorded, networkError } from "./Errors.js"
import { sseReads } from "./Sse.js"
import { type HostTool, ToolAborted, type ToolContext, ToolResultUnrecorded } from "./Tool.js"
import { sleep, Transport } from "./Transport.js"
import { decode, describeIssues, encode } from "./Validate.js"

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
/** Call names remembered to refuse a second run of the same call, oldest forgotten first. */
const SEEN_CALLS = 4096

interface CallCommand {
  readonly session_id: string
  readonly sequence: number
  readonly environment: string
  readonly name: string
  readonly call_id: string
  readonly input: unknown
  readonly deadline_at_ms: number
}

interface CancelCommand {
  readonly session_id: string
  readonly sequence: number
  readonly reason: "cancel" | "deadline"
}

type Answer = { readonly ok: unknown } | { readonly error: unknown } | { readonly stopped: true }

interface Run {
  readonly call: CallCommand
  readonly connection: number
  readonly controller: AbortController
  /** A cancel command arrived for it. */
  cancelled: boolean
  /** Its stream is over (or the client closed): nothing may be posted for it any more. */
  lost: boolean
  /** It stopped on its own deadline and waits for Brain's cancel to confirm the stop to. */
  awaitingCancel: boolean
  /** The result is being posted: later emits are refused. */
  settled: boolean
  readonly emits: Set<Promise<unknown>>
  timer: ReturnType<typeof setTimeout> | undefined
}

type HostResult = typeof Schemas.HostResult.Type

interface ResultBatch {
  readonly transport: Transport
  readonly items: Array<{ readonly result: HostResult; readonly run: Run; readonly resolve: () => void; readonly reject: (e: unknown) => void }>
}

/** Runs `f` once this turn of the event loop is over (its I/O callbacks and their microtasks). */
const soon = (f: () => void): void => void (typeof setImmediate === "function" ? setImmediate(f) : setTimeout(f, 0))

export interface Registered {
  readonly host_id: string
  readonly token: string
}

/** A call's name on the wire (the session id is the server's own, as it sent it). */
const callOf = (c: { readonly session_id: string; readonly sequence: number }) => ({
  session_id: c.session_id as SessionId,
  sequence: c.sequence
})

const errorMessage = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** Characters of an error's message kept when the server refused the whole error result (too
 * large): enough to say what went wrong, far below any result bound a server would set. */
export const REFUSED_ERROR_MESSAGE_CHARS = 4_096

/**
 * What stands in for an error result the server refused: its code, and its message cut to
 * REFUSED_ERROR_MESSAGE_CHARS, saying that it was cut and why; its other fields (`issues`) are
 * left out, and said to be.
 */
const boundedError = (error: unknown, refusal: BrainError): { readonly code: string; readonly message: string } => {
  const fields = typeof error === "object" && error !== null ? (error as { readonly code?: unknown; readonly message?: unknown }) : {}
  const code = typeof fields.code === "string" ? fields.code.slice(0, 64) : "tool_error"
  const message = typeof fields.message === "string" ? fields.message : ""
  const why = `the server refused the whole error (${refusal.code}: ${refusal.message.slice(0, 512)})`
  return {
    code,
    message: message.length > REFUSED_ERROR_MESSAGE_CHARS
      ? `${message.slice(0, REFUSED_ERROR_MESSAGE_CHARS)} [cut: the first ${REFUSED_ERROR_MESSAGE_CHARS} of ${message.length} characters; ${why}]`
      : `${message} [${why}; only its code and message are kept]`
  }
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
  private readyWaiters: Array<{ readonly resolve: () => void }> = []
  private readonly runs = new Map<string, Run>()
  /** Results waiting for the end of this turn of the event loop, by host. */
  private readonly batches = new Map<string, ResultBatch>()
  private readonly seen = new Set<string>()
  /** The tools of each session created through this client, by name. */
  private readonly sessions = new Map<string, ReadonlyMap<string, HostTool>>()
  /** Every tool handed to this host: the fallback for a call of a session not bound (yet). */
  private readonly byName = new Map<string, Set<HostTool>>()

  constructor(private readonly api: Transport) {}

  /**
   * Registers this client's host (once) and resolves with its id when its command stream is open.
   * A registration that failed is tried again by the next call; a stream that does not open
   * within HOST_READY_DEADLINE_MS rejects (the connection keeps trying).
   */
  async attach(tools: ReadonlyArray<HostTool>, signal?: AbortSignal): Promise<string> {
    this.api.ensureOpen()
    for (const t of tools) {
      const named = this.byName.get(t.name) ?? new Set()
      named.add(t)
      this.byName.set(t.name, named)
    }
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
    await this.ready(signal)
    return registered.host_id
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
    for (const run of this.runs.values()) this.lose(run, "closed", "the client was closed")
    this.runs.clear()
    for (const w of this.readyWaiters.splice(0)) w.resolve()
    // Only a host whose stream was started (a registration still in flight when the client closes is left).
    const transport = this.transport
    const hostId = this.startedAs
    if (transport !== undefined && hostId !== undefined) {
      await transport.call((client) => client.hosts.unregister(hostId), AbortSignal.timeout(UNREGISTER_WAIT_MS)).catch(() => undefined)
    }
    transport?.close()
  }

  private ready(signal?: AbortSignal): Promise<void> {
    if (this.open) return Promise.resolve()
    return new Promise<void>((resolve, reject) => {
      const { controller, release } = this.api.link(signal)
      const timer = setTimeout(() => controller.abort(
        this.lastError ?? networkError(`the host's command stream did not open within ${HOST_READY_DEADLINE_MS} ms`)
      ), HOST_READY_DEADLINE_MS)
      const waiter = {
        resolve: () => {
          done()
          if (this.closed) reject(new BrainClosed())
          else resolve()
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
        if (!response.ok || response.body === null) {
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
                for (const w of this.readyWaiters.splice(0)) w.resolve()
              } else if (frame.event === "call") {
                const start = this.run(JSON.parse(frame.data) as CallCommand, connection, transport, hostId)
                if (start !== undefined) starts.push(start)
              } else if (frame.event === "cancel") {
                this.cancel(JSON.parse(frame.data) as CancelCommand, transport, hostId)
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

  /** The stream `connection` is over: Brain has recorded its calls `unknown`. */
  private dropped(connection: number) {
    this.open = false
    for (const [key, run] of this.runs) {
      if (run.connection !== connection) continue
      this.runs.delete(key)
      this.lose(run, "connection_lost", "the host's command stream dropped: Brain recorded this call unknown, and its result can no longer be posted")
    }
  }

  private lose(run: Run, reason: ToolAborted["reason"], message: string) {
    run.lost = true
    if (run.timer !== undefined) clearTimeout(run.timer)
    if (!run.controller.signal.aborted) run.controller.abort(new ToolAborted({ reason, message }))
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

    const run: Run = {
      call,
      connection,
      controller: new AbortController(),
      cancelled: false,
      lost: false,
      awaitingCancel: false,
      settled: false,
      emits: new Set(),
      timer: undefined
    }
    this.runs.set(key, run)
    const untilDeadline = call.deadline_at_ms > 0 ? call.deadline_at_ms - Date.now() : undefined
    if (untilDeadline !== undefined && untilDeadline < 2 ** 31 - 1) {
      run.timer = setTimeout(
        () => run.controller.abort(new ToolAborted({ reason: "deadline", message: "the tool call passed its deadline" })),
        Math.max(0, untilDeadline)
      )
    }
    /** Posts the call's one result; `replacing` marks the stand-in for a refused one, never replaced itself. */
    const post = async (answer: Answer, replacing = false): Promise<void> => {
      run.settled = true
      await Promise.allSettled([...run.emits])
      if (run.lost) return
      try {
        await this.postResult(transport, hostId, { ...callOf(call), ...answer } as HostResult, run)
      } catch (e) {
        // A result the server refuses (too large, not JSON) leaves the call in flight: answer it
        // once more, with a result it takes — an output as the error `invalid_output`, an error cut
        // down to its code and the start of its message — or the call would wait for its deadline
        // and end `timeout`, ambiguous. A 409 means it is over already (an earlier attempt of
        // this very post landed, or its stream closed); a closed client posts nothing.
        // Taken, but its outcome could not be recorded: a repeat would be refused; the tool is told.
        if (isOutcomeUnrecorded(e)) return unrecorded(e)
        if (replacing || !(e instanceof BrainError) || e.status === 409 || e.code === "network_error") return
        if ("ok" in answer) {
          await post({ error: { code: "invalid_output", message: `the server refused the output: ${e.message}` } }, true)
        } else if ("error" in answer) {
          await post({ error: boundedError(answer.error, e) }, true)
        }
      }
    }
    const unrecorded = (refusal: BrainError) => {
      const tool = this.toolFor(call.session_id, call.name)
      const error = new ToolResultUnrecorded({
        message: `Brain took the result of ${call.name} (${call.session_id}/${call.sequence}) but could not record the call's outcome: ${refusal.message}`,
        sessionId: call.session_id,
        sequence: call.sequence,
        refusal
      })
      try {
        tool?.onUnrecorded?.(error)
      } catch {
        // The application's hook threw: nothing of the host's depends on it.
      }
    }
    const ctx: ToolContext = {
      signal: run.controller.signal,
      sessionId: call.session_id,
      sequence: call.sequence,
      callId: call.call_id,
      deadlineAtMs: call.deadline_at_ms,
      emit: (kind, payload) => {
        if (run.settled || run.lost) {
          // Refused here as the server refuses an Event for a call not in flight: nothing is sent.
          return Promise.reject(
            new BrainError({ code: "conflict", status: 409, retryable: false, message: "this tool call is over: its Events can no longer be committed" })
          )
        }
        const sent = transport.call((client) => client.hosts.events(hostId, { ...callOf(call), kind, payload: payload ?? null }))
          .then((r) => r.sequence)
        const tracked = sent.catch(() => undefined)
        run.emits.add(tracked)
        void tracked.then(() => run.emits.delete(tracked))
        return sent
      }
    }

    /** Stopped before its tool started (cancelled, lost, closed, or past its deadline): it is not started. */
    const overBeforeStart = () =>
      run.cancelled || run.controller.signal.aborted || (call.deadline_at_ms > 0 && Date.now() >= call.deadline_at_ms)
    const execute = async (): Promise<void> => {
      if (overBeforeStart()) return stopped()
      const tool = this.toolFor(call.session_id, call.name)
      if (tool === undefined) {
        return post({ error: { code: "unknown_tool", message: `this host has no tool ${JSON.stringify(call.name)} for this session` } })
      }
      const input = await decode(tool.input, call.input)
      if (!input.ok) {
        return post({ error: { code: "invalid_input", message: `the input is not valid: ${describeIssues(input.issues)}`, issues: input.issues } })
      }
      // A cancel may have come while the input was decoded.
      if (overBeforeStart()) return stopped()
      let output: unknown
      try {
        output = await tool.run(input.value, ctx)
      } catch (e) {
        if (run.controller.signal.aborted) return stopped()
        return post({ error: { code: "tool_error", message: errorMessage(e) } })
      }
      if (tool.output === undefined) return post({ ok: output ?? null })
      const encoded = await encode(tool.output, output)
      if (!encoded.ok) {
        return post({ error: { code: "invalid_output", message: `the output is not valid: ${describeIssues(encoded.issues)}`, issues: encoded.issues } })
      }
      return post({ ok: encoded.value ?? null })
    }
    /** The run stopped (or never started): confirm it to Brain's cancel. */
    const stopped = async (): Promise<void> => {
      if (run.cancelled) return post({ stopped: true })
      // Its own deadline came first: Brain's cancel for it follows; `cancel` confirms then.
      run.awaitingCancel = true
    }
    return () =>
      void execute().catch(() => undefined).finally(() => {
        if (run.timer !== undefined) clearTimeout(run.timer)
        if (!run.awaitingCancel && this.runs.get(key) === run) this.runs.delete(key)
      })
  }

  /**
   * Posts one call's result: with the others ready in the same turn of the event loop (the calls
   * of one dispatch that finish together) in one request, `{"results": [...]}`, which Brain takes
   * all or none. A batch refused for any reason but the network or `outcome_unrecorded` (taken,
   * all of it) is posted again one result at a time, so each result meets its own answer; nothing
   * of such a refused batch was taken. Rejects with
   * this result's own refusal, as a single post would. A run lost meanwhile posts nothing.
   */
  private postResult(transport: Transport, hostId: string, result: HostResult, run: Run): Promise<void> {
    return new Promise((resolve, reject) => {
      let waiting = this.batches.get(hostId)
      if (waiting === undefined || waiting.transport !== transport) {
        waiting = { transport, items: [] }
        this.batches.set(hostId, waiting)
        const batch = waiting
        soon(() => {
          if (this.batches.get(hostId) === batch) this.batches.delete(hostId)
          void this.flushResults(hostId, batch)
        })
      }
      waiting.items.push({ result, run, resolve, reject })
    })
  }

  private async flushResults(hostId: string, waiting: ResultBatch) {
    for (const item of waiting.items) if (item.run.lost) item.resolve()
    const batch = { ...waiting, items: waiting.items.filter((i) => !i.run.lost) }
    if (batch.items.length === 0) return
    const single = (item: ResultBatch["items"][number]) =>
      batch.transport.call((client) => client.hosts.results(hostId, item.result)).then(item.resolve, item.reject)
    if (batch.items.length === 1) return single(batch.items[0])
    try {
      await batch.transport.call((client) => client.hosts.results(hostId, { results: batch.items.map((i) => i.result) }))
      for (const item of batch.items) item.resolve()
    } catch (e) {
      // Taken, all of it (a batch is all or none), but not every outcome is known to be recorded:
      // each result is told so; posting them again would be refused.
      if (isOutcomeUnrecorded(e)) for (const item of batch.items) item.reject(e)
      else if (e instanceof BrainError && e.code !== "network_error") await Promise.all(batch.items.map(single))
      else for (const item of batch.items) item.reject(e)
    }
  }

  private cancel(cancel: CancelCommand, transport: Transport, hostId: string) {
    const key = `${cancel.session_id}/${cancel.sequence}`
    const run = this.runs.get(key)
    if (run === undefined) return
    run.cancelled = true
    if (run.awaitingCancel) {
      this.runs.delete(key)
      // Its Events first, as for every result.
      void Promise.allSettled([...run.emits]).then(() =>
        run.lost ? undefined : this.postResult(transport, hostId, { ...callOf(cancel), stopped: true }, run)
      ).catch(() => undefined)
      return
    }
    if (!run.controller.signal.aborted) {
      run.controller.abort(new ToolAborted({ reason: cancel.reason, message: cancel.reason === "deadline" ? "the tool call passed its deadline" : "Brain cancelled the tool call" }))
    }
  }
}
