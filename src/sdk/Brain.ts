/**
 * The Promise client. `new Brain({ baseUrl, token?, fetch? })` wraps the Effect client
 * (`BrainClient`, BrainClient.ts: `HttpApiClient` over the contract the server serves): every
 * request/response call runs through it on this client's own runtime (Transport.ts), so the
 * contract, the encoding and decoding, the retries and the refusals come from one place; only the
 * SSE streams are read with `fetch` directly. Nothing but web APIs (fetch, streams, Web Crypto),
 * so it runs in Node, browsers, Deno and Bun alike.
 *
 * - Every mutating call sends an `Idempotency-Key`, the caller's or a fresh `crypto.randomUUID()`,
 *   one per call, and retries an uncertain outcome with that same key, body and mode only
 *   (BrainClient.ts); a 409 `ambiguous` that says the request is still running is asked again
 *   under the key until its answer is recorded. A final 409 `ambiguous` (`retryable: false`) is
 *   final: inspect the session before choosing a new key. Every error of a mutating call carries
 *   its key (`idempotencyKey`): a retry by the caller passes it back.
 * - A refusal rejects with a `BrainError` carrying the refusal's `code`, `message`, `retryable`
 *   and `details` and its HTTP `status` (Errors.ts `fromRefusal`); a request the contract refuses
 *   is not sent, and rejects as the server would have answered it (400 `invalid_request`).
 * - A `Session` is a handle: its `summary` is the last one this handle was answered, never
 *   updated by background work; `brain.sessions.get(id)` reads the current one.
 * - Host tools (`tool()`, Tool.ts) given to `sessions.create` are served by this client's one host
 *   (Host.ts): registered with the first such create, its command stream kept until `close()`.
 * - `close()` aborts this client's requests, streams and tool runs and refuses later calls with
 *   `BrainClosed`; it sends nothing to the server, so no stored session is interrupted, ended or
 *   deleted. `withToken(token)` makes an independent client (its own host too): closing either
 *   leaves the other open.
 */
import type { SessionId } from "../domain/Ids.js"
import type * as Schemas from "../http/Schemas.js"
import { BrainClosed, BrainError, withIdempotencyKey } from "./Errors.js"
import { type EventsOptions, eventsOnly, readEvents } from "./Events.js"
import { Host } from "./Host.js"
import {
  answerText,
  BrainOutputInvalid,
  BrainTurnFailed,
  checkAnswer,
  correction,
  maxCorrectionsOf,
  type StructuredOutcome
} from "./Output.js"
import { type HostTool, isHostTool } from "./Tool.js"
import { Transport, type TransportOptions } from "./Transport.js"
import { type Decoded, describeIssues, isValidator, type Validator } from "./Validate.js"
import type {
  CreateSessionRequest,
  Event,
  EventOrDelta,
  Receipt,
  SessionList,
  SessionSummary,
  Transcript,
  TurnInput,
  TurnOutcome
} from "./Types.js"

export type BrainOptions = TransportOptions

/** An iterator that rejects with `e` when it is first read, as a refused request would. */
async function* refusing(e: BrainError): AsyncGenerator<never, void, undefined> {
  throw e
}

/** A tool definition of the wire (`input_schema`, `environment`, `module`, `timeout_ms`). */
export type ToolDefinition = NonNullable<CreateSessionRequest["tools"]>[number]

/** A create body whose `tools` may also hold host tools (`tool()`), served by this client. */
export type CreateSessionBody = Omit<CreateSessionRequest, "tools"> & {
  readonly tools?: ReadonlyArray<ToolDefinition | HostTool>
}

/** The name of the Environment a create adds for this client's host tools. */
export const HOST_ENVIRONMENT = "sdk-host"

export interface MutationOptions {
  /** The request's Idempotency-Key (1–256 bytes); a fresh UUID when omitted. Reuse one only to
   * retry the very same request. */
  readonly idempotencyKey?: string
  /** Stops waiting for the answer (the request, once sent, may still run on the server). */
  readonly signal?: AbortSignal
}

export interface SendOptions {
  /** The request's Idempotency-Key (1–256 bytes); a fresh UUID when omitted. Reuse one only to
   * retry the very same request (with `output`, corrections add `:correction-<n>` to it). */
  readonly idempotencyKey?: string
  /** Cancels the turn: once it is admitted, `POST …/cancel` is sent and answered, then `send`
   * rejects with the signal's reason (see `send`). */
  readonly signal?: AbortSignal
}

/** Structured output on `send`: the answer's schema and how many corrections to ask for. */
export interface StructuredOptions<V extends Validator> {
  readonly output: V
  /** Corrections at most (0–10, default 2) before rejecting with BrainOutputInvalid. */
  readonly maxCorrections?: number
}

export interface ListOptions {
  /** The last session id of the previous page (its `next_cursor`). */
  readonly after?: string
  /** Sessions per page, 1–1000 (the server's default is 100). */
  readonly limit?: number
}

const newKey = () => globalThis.crypto.randomUUID()

/** The caller's Idempotency-Key, if any: the Effect client makes one per call otherwise. */
const keyOf = (options: MutationOptions) => ({ idempotencyKey: options.idempotencyKey })

const inputOf = (input: TurnInput | string): TurnInput => (typeof input === "string" ? { message: input } : input)

export class Brain {
  readonly sessions: Sessions
  readonly agentloops: Agentloops
  private readonly transport: Transport
  private readonly host: Host

  constructor(readonly options: BrainOptions) {
    this.transport = new Transport(options)
    this.host = new Host(this.transport)
    this.sessions = new Sessions(this.transport, this.host)
    this.agentloops = new Agentloops(this.transport)
  }

  /** The id of this client's host, once a create with host tools has registered it. */
  hostId(): Promise<string | undefined> {
    return this.host.hostId()
  }

  /**
   * A new client for the same server with another token and its own lifetime. Like every call
   * after `close`, refused (it throws BrainClosed) once this client is closed.
   */
  withToken(token: string): Brain {
    if (this.transport.closed) throw new BrainClosed()
    return new Brain({ ...this.options, token })
  }

  get closed(): boolean {
    return this.transport.closed
  }

  /**
   * Aborts this client's requests, streams, host connection and tool runs (their signals abort;
   * a tool that ignores its signal is not waited for, and nothing it returns is posted); later
   * calls reject with BrainClosed. Idempotent.
   */
  async close(): Promise<void> {
    await this.host.close()
    this.transport.close()
  }
}

/** An uploaded WebAssembly module: its id (the SHA-256 of its bytes, hex), size, and whether it is an Agentloop (`loop`) or a tool (`tool`). */
export type UploadedModule = typeof Schemas.AgentloopAdmitted.Type

/** Uploaded WebAssembly modules (docs/abi.md): an Agentloop a create names as `agentloop`, or a Wasm tool's `module`. */
export class Agentloops {
  constructor(private readonly transport: Transport) {}

  /**
   * `POST /v1/agentloops`: uploads the module's bytes; the server validates and compiles them
   * before it stores them. Resolves with `{id, bytes, loop, tool}`; the same bytes give the same id.
   */
  upload(module: Uint8Array, options: MutationOptions = {}): Promise<UploadedModule> {
    if (!(module instanceof Uint8Array)) return Promise.reject(new TypeError("agentloops.upload(): module must be a Uint8Array of the module's bytes"))
    return this.transport.call((client) => client.agentloops.upload(module, keyOf(options)), options.signal)
  }

  /** `GET /v1/agentloops`: every uploaded module. */
  async list(options: { readonly signal?: AbortSignal } = {}): Promise<ReadonlyArray<UploadedModule>> {
    return (await this.transport.call((client) => client.agentloops.list(), options.signal)).agentloops
  }

  /** `DELETE /v1/agentloops/{id}`: removes a module no session uses (409 `conflict` while one does). */
  remove(id: string, options: MutationOptions = {}): Promise<void> {
    return this.transport.call((client) => client.agentloops.remove(id, keyOf(options)), options.signal)
  }
}

export class Sessions {
  constructor(private readonly transport: Transport, private readonly host: Host) {}

  /**
   * `POST /v1/sessions`: a new session, as a handle holding its summary. Host tools among `tools`
   * are declared in an Environment `sdk-host` (HOST_ENVIRONMENT) naming this client's host, which
   * is registered and connected first; a retry of the create sends the same body.
   */
  async create(body: CreateSessionBody, options: MutationOptions = {}): Promise<Session> {
    this.transport.ensureOpen()
    const hostTools = (body.tools ?? []).filter(isHostTool)
    let wire = body as CreateSessionRequest
    if (hostTools.length > 0) {
      const host = await this.host.attach(hostTools, options.signal)
      wire = {
        ...body,
        environments: [...(body.environments ?? []), { name: HOST_ENVIRONMENT, driver: "host", host }],
        tools: (body.tools ?? []).map((t): ToolDefinition =>
          isHostTool(t)
            ? {
              name: t.name,
              ...(t.description !== undefined ? { description: t.description } : {}),
              input_schema: t.inputSchema,
              ...(t.outputSchema !== undefined ? { output_schema: t.outputSchema } : {}),
              environment: HOST_ENVIRONMENT,
              ...(t.timeoutMs !== undefined ? { timeout_ms: t.timeoutMs } : {})
            }
            : t
        )
      } as CreateSessionRequest
    }
    // The Effect client encodes the body, and so checks it against the contract.
    const summary = await this.transport.call(
      (client) => client.sessions.create(wire as typeof Schemas.CreateSessionRequest.Type, keyOf(options)),
      options.signal
    )
    if (hostTools.length > 0) this.host.bind(summary.session_id, hostTools)
    return new Session(this.transport, summary, this.host)
  }

  /** `GET /v1/sessions/{id}`: the session's current summary, as a handle. */
  async get(id: string, options: { readonly signal?: AbortSignal } = {}): Promise<Session> {
    const summary = await this.transport.call((client) => client.sessions.get(id), options.signal)
    return new Session(this.transport, summary, this.host)
  }

  /** `GET /v1/sessions`: one page of summaries; pass its `next_cursor` as `after` for the next. */
  async list(options: ListOptions & { readonly signal?: AbortSignal } = {}): Promise<SessionList> {
    const params = {
      ...(options.after !== undefined ? { after: options.after as SessionId } : {}),
      ...(options.limit !== undefined ? { limit: options.limit } : {})
    }
    return this.transport.call((client) => client.sessions.list(params), options.signal)
  }
}

export class Session {
  readonly id: string
  private latest: SessionSummary

  constructor(private readonly transport: Transport, summary: SessionSummary, private readonly host: Host) {
    this.id = summary.session_id
    this.latest = summary
  }

  /** The last summary this handle was answered (not refreshed by background work). */
  get summary(): SessionSummary {
    return this.latest
  }

  /**
   * `POST …/messages`: runs a turn and resolves with its outcome, ended or failed (a failed turn
   * is an outcome, not a rejection; refusals such as `session_busy` reject).
   *
   * With `signal` (say a host tool's `ctx.signal`, for a child session it owns), an abort cancels
   * the turn: the client waits until the turn is admitted (its `turn_started` committed), sends
   * `POST …/cancel`, waits for that to be answered (the turn is closed then), and rejects with the
   * signal's reason. A turn that answers before it was seen admitted resolves as usual. An abort
   * before the call rejects at once and sends nothing.
   *
   * With `output` (an Effect Schema or Standard Schema), the answer is parsed as JSON and decoded;
   * an answer that does not decode is followed by a correction message naming the problems, at
   * most `maxCorrections` (default 2) times, under keys derived from the Idempotency-Key
   * (`<key>:correction-<n>`), and then rejects with `BrainOutputInvalid`. A failed turn rejects
   * with `BrainTurnFailed`. Resolves with the outcome plus `output` (decoded) and `corrections`.
   *
   * A BrainError it rejects with carries the send's Idempotency-Key (`idempotencyKey`, for a
   * correction's failure too): pass it back to retry the same send without running it twice.
   */
  send(input: TurnInput | string, options?: SendOptions): Promise<TurnOutcome>
  send<V extends Validator>(input: TurnInput | string, options: SendOptions & StructuredOptions<V>): Promise<StructuredOutcome<Decoded<V>>>
  async send<V extends Validator>(
    input: TurnInput | string,
    options: SendOptions & Partial<StructuredOptions<V>> = {}
  ): Promise<TurnOutcome | StructuredOutcome<Decoded<V>>> {
    this.transport.ensureOpen()
    const key = options.idempotencyKey ?? newKey()
    const schema = options.output
    if (schema === undefined) return this.turn(inputOf(input), key, options.signal)
    // Refused before anything is sent, as `tool()` refuses it: a Schema of another Effect line
    // (effect 4's) is neither this line's Schema nor a Standard Schema, and cannot be read.
    if (!isValidator(schema)) throw new TypeError("send(): output must be an Effect Schema (of effect 3, this package's line) or a Standard Schema validator")
    try {
      return await this.structured(inputOf(input), key, schema, options)
    } catch (e) {
      // One send, one key: a correction's own error names the send's key, the one a retry of the
      // whole send passes back (its corrections' keys follow from it).
      throw e instanceof BrainError ? withIdempotencyKey(e, key) : e
    }
  }

  /** A send with `output`: the turn, then corrections under `<key>:correction-<n>` while the answer does not decode. */
  private async structured<V extends Validator>(
    input: TurnInput,
    key: string,
    schema: V,
    options: SendOptions & Partial<StructuredOptions<V>>
  ): Promise<StructuredOutcome<Decoded<V>>> {
    const max = maxCorrectionsOf(options.maxCorrections)
    let outcome = await this.turn(input, key, options.signal)
    for (let corrections = 0;; corrections++) {
      if (outcome.turn.status !== "ended") {
        throw new BrainTurnFailed({ message: `the turn failed: ${outcome.turn.failure?.code ?? "unknown"}`, outcome, corrections })
      }
      const text = answerText(outcome)
      const checked = await checkAnswer(schema, text)
      if (checked.ok) return { ...outcome, output: checked.value, corrections }
      if (corrections >= max) {
        throw new BrainOutputInvalid({
          message: `the answer is not valid output after ${corrections} correction(s): ${describeIssues(checked.issues)}`,
          issues: checked.issues,
          text,
          corrections,
          outcome
        })
      }
      outcome = await this.turn({ message: correction(schema, checked.issues) }, `${key}:correction-${corrections + 1}`, options.signal)
    }
  }

  /** One synchronous turn; with `signal`, cancelled after admission (see `send`). */
  private async turn(input: TurnInput, key: string, signal: AbortSignal | undefined): Promise<TurnOutcome> {
    if (signal === undefined) return this.post(input, key, undefined)
    if (signal.aborted) throw signal.reason
    const after = this.latest.last_sequence
    // The request is not the caller's to abort: once sent, it is stopped only by cancelling its turn.
    const request = new AbortController()
    const posting = this.post(input, key, request.signal)
    posting.catch(() => undefined)
    const answered = posting.then(() => "answered" as const, () => "answered" as const)
    let onAbort: () => void = () => undefined
    const aborted = new Promise<"aborted">((resolve) => {
      onAbort = () => resolve("aborted")
      signal.addEventListener("abort", onAbort, { once: true })
    })
    const first = await Promise.race([answered, aborted])
    signal.removeEventListener("abort", onAbort)
    if (first === "answered") return posting

    // Aborted: cancel only once the turn is admitted, or the cancel could pass it and miss it.
    // A server that cannot be reached now can be sent no cancel: the send stops at once (its
    // request, and its retries, aborted) with the signal's reason.
    const watching = new AbortController()
    const admitted = this.admission(after, input, watching.signal).then(() => "admitted" as const, () => "unseen" as const)
    const unreachable = this.unreachable(watching.signal).then((down) => (down ? "unreachable" as const : new Promise<never>(() => {})))
    const next = await Promise.race([answered, admitted, unreachable])
    watching.abort()
    if (next === "unreachable") {
      request.abort()
      throw signal.reason
    }
    if (next !== "admitted") {
      // Its answer could not be read (no answer arrived): nothing says the turn ran, and the caller stopped it.
      const outcome = await posting.catch((e: unknown) => (e instanceof BrainError && e.code === "network_error" ? undefined : Promise.reject(e)))
      if (outcome === undefined) throw signal.reason
      return outcome
    }
    try {
      await this.interrupt()
    } catch (e) {
      request.abort()
      throw e
    }
    // The turn is closed now, and its own answer follows: a turn that ended (or failed) on its own
    // before the cancel reached it resolves as usual, since nothing was cancelled.
    const outcome = await posting.catch(() => undefined)
    if (outcome !== undefined && !(outcome.turn.status === "failed" && outcome.turn.failure?.code === "cancelled")) return outcome
    throw signal.reason
  }

  private async post(input: TurnInput, key: string, signal: AbortSignal | undefined): Promise<TurnOutcome> {
    const outcome = await this.transport.call(
      (client) => client.sessions.send(this.id, input, { idempotencyKey: key }),
      signal
    )
    this.latest = { session_id: outcome.session_id, status: outcome.status, last_sequence: outcome.last_sequence }
    return outcome
  }

  /**
   * Whether the server cannot be reached now: one `GET /health/live`, not retried, whose connection
   * failed (false when any answer arrived, or the check was stopped).
   */
  private async unreachable(signal: AbortSignal): Promise<boolean> {
    try {
      const answer = await this.transport.open("/health/live", { headers: {}, signal })
      await answer.body?.cancel().catch(() => undefined)
      return false
    } catch (e) {
      return !signal.aborted && e instanceof BrainError && e.code === "network_error"
    }
  }

  /** Resolves once a synchronous turn with `input` is started after sequence `after`. */
  private async admission(after: number, input: TurnInput, signal: AbortSignal): Promise<void> {
    for await (const event of readEvents(this.transport, this.id, after, { signal }, false)) {
      if (event.type !== "event" || event.event.kind !== "turn_started") continue
      const data = event.event.data as { mode?: unknown; input?: { message?: unknown } }
      if (data.mode === "send" && data.input?.message === input.message) return
    }
    throw new Error("the session ended before the turn was admitted")
  }

  /** `POST …/messages` with `Prefer: respond-async`: resolves once the turn's `turn_started` is
   * committed, with its `{session_id, sequence}`; `events(receipt)` follows it from there. */
  async submit(input: TurnInput | string, options: MutationOptions = {}): Promise<Receipt> {
    return this.transport.call(
      (client) => client.sessions.submit(this.id, inputOf(input), keyOf(options)),
      options.signal
    )
  }

  /**
   * The recorded Events, pages then live until `session_ended` (Events.ts): after `from` when it
   * is a sequence (an exclusive cursor, default 0: the last Event handled), or from a submit's
   * receipt on, its `turn_started` first (the seed: "read Events from the receipt's sequence";
   * the same as `events(receipt.sequence - 1)`). With `{ deltas: true }` the live model deltas
   * come too, every item tagged `{type: "event", event}` or `{type: "delta", delta}`.
   */
  events(from?: number | Receipt, options?: EventsOptions & { readonly deltas?: false }): AsyncGenerator<Event, void, undefined>
  events(from: number | Receipt, options: EventsOptions & { readonly deltas: true }): AsyncGenerator<EventOrDelta, void, undefined>
  events(
    from: number | Receipt = 0,
    options: EventsOptions & { readonly deltas?: boolean } = {}
  ): AsyncGenerator<Event, void, undefined> | AsyncGenerator<EventOrDelta, void, undefined> {
    const items = typeof from === "number"
      ? readEvents(this.transport, this.id, from, options, options.deltas === true)
      : from.session_id === this.id
      ? readEvents(this.transport, this.id, from.sequence - 1, options, options.deltas === true)
      : refusing(
        new BrainError({
          code: "invalid_request",
          status: 400,
          retryable: false,
          message: `the receipt is of session ${from.session_id}, not ${this.id}`,
          details: [{ path: ["session_id"], message: `expected ${this.id}` }]
        })
      )
    return options.deltas === true ? items : eventsOnly(items)
  }

  /** `GET …/transcript`: the canonical messages and the sequence they are current through. */
  transcript(options: { readonly signal?: AbortSignal } = {}): Promise<Transcript> {
    return this.transport.call((client) => client.sessions.transcript(this.id), options.signal)
  }

  /** `POST …/cancel`: cancels the work in flight; the session stays open for another turn. */
  interrupt(options: MutationOptions = {}): Promise<SessionSummary> {
    return this.lifecycle("interrupt", options)
  }

  /** `POST …/end`: refuses new messages and detaches the Environments; history stays. */
  end(options: MutationOptions = {}): Promise<SessionSummary> {
    return this.lifecycle("end", options)
  }

  /** `DELETE …`: removes an ended or failed session and tears down its Environments. */
  async delete(options: MutationOptions = {}): Promise<void> {
    await this.transport.call((client) => client.sessions.delete(this.id, keyOf(options)), options.signal)
    this.host.unbind(this.id)
  }

  private async lifecycle(route: "interrupt" | "end", options: MutationOptions): Promise<SessionSummary> {
    const summary = await this.transport.call((client) => client.sessions[route](this.id, keyOf(options)), options.signal)
    this.latest = summary
    if (route === "end") this.host.unbind(this.id)
    return summary
  }
}
