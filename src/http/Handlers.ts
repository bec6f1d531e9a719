/**
 * The handlers: thin, they decode nothing themselves (the contract does), call the services and
 * shape answers. Every mutating route runs under its Idempotency-Key.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Deferred, Effect, Either, FiberId, Layer, ParseResult, Schema, type Scope } from "effect"
import { type HostId, mintSessionId, type SessionId } from "../domain/Ids.js"
import { Permits } from "../domain/Permits.js"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import {
  type ApiError,
  Conflict,
  Internal,
  InvalidRequest,
  NotFound,
  Overloaded,
  PayloadTooLarge,
  Unauthorized,
  UnsupportedMediaType
} from "../domain/Errors.js"
import { type AgentloopInUse, type AgentloopRejected, Agentloops, type AgentloopStoreFailed } from "../services/Agentloop.js"
import { type CallName, type HostAnswer, Hosts, type HostsShape } from "../services/Hosts.js"
import { type AdoptedKey, type Answer, Idempotency, type IdempotencyShape } from "../services/Idempotency.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { type EventPage, type KeptRequest, type Receipt, Sessions, type SessionsShape, type TurnOutcome } from "../services/Sessions.js"
import { BrainApi } from "./Api.js"
import type * as Schemas from "./Schemas.js"
import { EventPage as EventPageSchema, MutatingHeaders } from "./Schemas.js"
import { transcriptAnswer } from "./TranscriptAnswer.js"
import { AnswerMemory, answerBytes } from "./AnswerMemory.js"
import { emptyAnswer, idempotent, type IdempotentOptions, idempotentTurn, jsonAnswer, respond, storeFailure } from "./Idempotent.js"
import { bearerToken, HOST_TOKEN_NEEDED } from "./Tokens.js"
import { decodeRefused, invalid } from "./Errors.js"
import { sseResponse } from "./Sse.js"
import { prefersEventStream } from "./Accept.js"
import { LIST_PAGE_SESSIONS, PAGE_EVENTS } from "../domain/Limits.js"

/** What an Admission bounds: SSE streams, by the connections not kept for other requests. */
export interface StreamConnections {
  /** Connections SSE streams may hold at most: the connections served less the reserve. */
  readonly streams: number
  /** Connections kept for requests other than SSE streams (BRAIN_RESERVED_CONNECTIONS). */
  readonly reserved: number
  /** Of `streams`, those kept for hosts' command streams: sessions' streams never take them (none when absent). */
  readonly forHosts?: number
}

/**
 * Whether the server is draining (the gate refuses new work, readiness answers 503), the signal
 * that ends long-lived streams when it stops, and the SSE streams it holds (sessions' streams and
 * hosts' command streams alike): each is a connection, and streams never take the last `reserved`
 * ones, so that they cannot lock every other client out (a stream holds its connection for as
 * long as its reader stays). Sessions' streams never take the last `forHosts` of the streams'
 * connections either, so that readers cannot lock hosts out of their command streams (their
 * sessions' tool calls would fail `host_disconnected`); command streams may take every one.
 */
export class Admission {
  draining = false
  readonly stopped = Deferred.unsafeMake<void>(FiberId.none)
  private streams = 0
  constructor(readonly connections: StreamConnections = { streams: Number.POSITIVE_INFINITY, reserved: 0 }) {}
  stop() {
    Deferred.unsafeDone(this.stopped, Effect.void)
  }
  /** Streams sessions' readers may hold at once: all the streams' connections but those kept for command streams. */
  get readerStreams(): number {
    return this.connections.streams - (this.connections.forHosts ?? 0)
  }
  /** Takes a connection for a host's command stream for as long as the scope (the response) lasts; refused 503 when streams hold all they may. */
  readonly commandStream: Effect.Effect<void, Overloaded, Scope.Scope> = this.take(() => this.connections.streams, () =>
    `SSE streams (sessions' and hosts' command streams) hold all the connections they may (${this.connections.streams}): the server keeps ${this.connections.reserved} (BRAIN_RESERVED_CONNECTIONS) of its BRAIN_MAX_CONNECTIONS for other requests; retry later`)
  /** Takes a connection for a session's stream for as long as the scope lasts; refused 503 past the readers' streams. */
  readonly stream: Effect.Effect<void, Overloaded, Scope.Scope> = this.take(() => this.readerStreams, () =>
    `sessions' SSE streams hold all the connections they may (${this.readerStreams}): of the ${this.connections.streams} SSE streams may hold, ${
      this.connections.forHosts ?? 0
    } are kept for hosts' command streams, and the server keeps ${this.connections.reserved} (BRAIN_RESERVED_CONNECTIONS) of its BRAIN_MAX_CONNECTIONS for other requests; retry later`)
  private take(bound: () => number, refusal: () => string): Effect.Effect<void, Overloaded, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.suspend(() => {
        if (this.streams >= bound()) return Effect.fail(new Overloaded({ message: refusal() }))
        this.streams++
        return Effect.void
      }),
      () => Effect.sync(() => void this.streams--)
    )
  }
}

/** Resumes on a later turn of the event loop: what waits for I/O (a health check, other sessions' requests) goes first. */
const laterTurn = Effect.async<void>((resume) => {
  const pending = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(pending))
})

/**
 * The answer the contract gives `value` (its schema's JSON encoding), built now, so that the
 * work — encoding every Event or message, then the JSON text — is done while its builder holds
 * its turn (`pageTurn`), not after it as the router would. An encoding that fails is a bug (the
 * value has the contract's type), answered 500 `internal`.
 */
const builtAnswer = <A, I>(schema: Schema.Schema<A, I>, value: A) =>
  Effect.map(Effect.orDie(Schema.encode(schema)(value)), (encoded) => HttpServerResponse.unsafeJson(encoded))

/**
 * Bytes. An Events page's answer at most this large is not weighed against the answer memory: a
 * small page costs less than the weighing, and a client polling for new Events is never refused.
 */
const UNWEIGHED_ANSWER_BYTES = 64 * 1024

/**
 * `builtAnswer`, holding its encoded bytes of `answers` until the response is written or its
 * connection closed (a client that does not read holds them until BRAIN_RESPONSE_STALL_MS cuts it);
 * refused 503 `overloaded` when they do not fit beside the answers held.
 */
const heldAnswer = <A, I>(answers: AnswerMemory, schema: Schema.Schema<A, I>, value: A) =>
  Effect.flatMap(builtAnswer(schema, value), (response) => {
    const bytes = response.body._tag === "Uint8Array" ? response.body.body.byteLength : 0
    return bytes <= UNWEIGHED_ANSWER_BYTES ? Effect.succeed(response) : Effect.as(answers.hold(bytes, "this page of Events"), response)
  })

/*
 * Handlers may answer with a ready HttpServerResponse (a replayed idempotent answer, a 202, an SSE
 * stream): a handler's success type is the route's success or an HttpServerResponse, which the
 * builder sends as it is. Their errors are the refusals the route declares (Api.ts); a mutating
 * route's work answers its own refusals as recorded answers (Idempotent.ts), so only the
 * idempotency refusals fail such a handler.
 */

/**
 * A page as the contract types it. The domain's Events carry their session id as a plain string
 * (domain/Events.ts, shared with the loops' ABI); here every Event is of the session the
 * decoded path names, and the builder's encoder checks each id against the contract's pattern again.
 * The only type assertion among the handlers, and on a success, never an error.
 */
const onTheWire = (page: EventPage): typeof Schemas.EventPage.Type => page as typeof Schemas.EventPage.Type

/**
 * An admission refused: a module that is not one (400) or a full store (409); a store that failed
 * (500). A full store is retryable: it lasts only until modules are removed, so the refusal is not
 * kept as its Idempotency-Key's answer (Idempotent.ts frees the key of a retryable refusal), and the
 * same keyed upload runs once there is room.
 */
/** An upload refused: a full store (409, retryable), too many compiling (503 `overloaded`, Retry-After), a bad module (400), a store that failed. */
export const admitRefused = (e: AgentloopRejected | AgentloopStoreFailed) =>
  e._tag === "AgentloopRejected"
    ? e.full
      ? new Conflict({ message: e.reason, retryable: true })
      : e.overloaded === true
      ? new Overloaded({ message: e.reason })
      : new InvalidRequest({ message: e.reason })
    : storeRefused(e)

/** A removal refused: no such module (404), a module in use (409, retryable: until its sessions are deleted), a store that failed (500). */
const removeRefused = (e: AgentloopRejected | AgentloopInUse | AgentloopStoreFailed) =>
  e._tag === "AgentloopRejected"
    ? e.missing ? new NotFound({ message: e.reason }) : new Conflict({ message: e.reason })
    : e._tag === "AgentloopInUse"
    ? new Conflict({ message: e.reason, retryable: true })
    : storeRefused(e)

/** A module store that failed: 503 `overloaded` out of descriptors (nothing is wrong with it), else a retryable 500. */
const storeRefused = (e: AgentloopStoreFailed) => (e.exhausted === true ? new Overloaded({ message: e.reason }) : new Internal({ message: e.reason }))

/** The one media type of a module upload (docs/api.md): nothing shipped sends another. */
const WASM_TYPE = "application/wasm"

export const healthLive = (admission: Admission) =>
  HttpApiBuilder.group(BrainApi, "health", (h) =>
    h.handle("live", () => Effect.void).handle("ready", () =>
      admission.draining
        ? Effect.fail(new Overloaded({ message: "the server is draining" }))
        : Effect.void))

export const agentloopsLive = (admission: Admission) => HttpApiBuilder.group(BrainApi, "agentloops", (h) =>
  Effect.gen(function*() {
    const agentloops = yield* Agentloops
    const store = yield* Idempotency
    const config = yield* ServerConfig
    // Once the server is stopping, a keyed upload or removal only looks its key up.
    const stopping = { stopping: () => admission.draining }
    return h.handle("admit", ({ headers, request }) =>
      Effect.gen(function*() {
        const type = (request.headers["content-type"] ?? "").toLowerCase().split(";")[0]!.trim()
        if (type !== WASM_TYPE) {
          return yield* Effect.fail(new UnsupportedMediaType({ message: "the body must be application/wasm" }))
        }
        const bytes = new Uint8Array(
          yield* request.arrayBuffer.pipe(
            Effect.mapError(() => new PayloadTooLarge({ message: `the body is larger than ${config.maxRequestBytes} bytes` }))
          )
        )
        const digest = (yield* Effect.promise(() => crypto.subtle.digest("SHA-256", bytes)))
        const hash = Buffer.from(digest).toString("hex")
        return yield* idempotent(
          store,
          "agentloops",
          headers["idempotency-key"],
          { sha256: hash },
          agentloops.admit(bytes).pipe(Effect.map((info) => jsonAnswer(201, info)), Effect.mapError(admitRefused)),
          stopping
        )
      })
    ).handle("list", () =>
      agentloops.list.pipe(
        Effect.map((list) => ({ agentloops: list })),
        Effect.mapError((e) => new Internal({ message: e.reason }))
      )).handle("remove", ({ headers, path }) =>
        idempotent(
          store,
          `agentloops:remove:${path.id}`,
          headers["idempotency-key"],
          {},
          agentloops.remove(path.id).pipe(Effect.as(emptyAnswer(204)), Effect.mapError(removeRefused)),
          stopping
        ))
  }))

/** A turn run without a key, as a keyed one that ran. */
const answered = <A>(value: A) => ({ _tag: "Answered", value }) as const

/** A sync send's answer: its turn's outcome, for the first request and every replay. */
const sendAnswer = (outcome: TurnOutcome) => jsonAnswer(200, outcome)
/** An async send's answer: its receipt. */
const submitAnswer = (receipt: Receipt) => jsonAnswer(202, receipt, { "preference-applied": "respond-async" })

/**
 * A deleted session's keyed sends and submits, as the idempotency store keeps them from then on:
 * under the scopes and with the answers `sendMessage` uses, so a retry after the delete gets the
 * same answer byte for byte (DESIGN §7: keys outlive a deleted session).
 */
const adoptedKeys = (id: SessionId, requests: ReadonlyArray<KeptRequest>): ReadonlyArray<AdoptedKey> =>
  requests.map((r) =>
    r.mode === "send"
      ? { scope: `send:${id}`, key: r.key, bodyHash: r.hash, atMs: r.atMs, answer: r.outcome === undefined ? undefined : sendAnswer(r.outcome) }
      : { scope: `submit:${id}`, key: r.key, bodyHash: r.hash, atMs: r.atMs, answer: submitAnswer(r.receipt) }
  )

/** A send as the contract decodes it. */
export interface SendRequest {
  readonly headers: typeof Schemas.MessageHeaders.Type
  readonly path: typeof Schemas.SessionPath.Type
  readonly payload: typeof Schemas.SendMessageRequest.Type
}

/**
 * `POST /v1/sessions/:id/messages`: a turn, answered with its outcome (200) or, with `Prefer:
 * respond-async`, its receipt (202). The one handler of sends, whether HttpApi routed the request
 * or the gate's route for sends did (FastSend.ts).
 */
export const sendMessage = (sessions: SessionsShape, store: IdempotencyShape) => ({ headers, path, payload }: SendRequest) => {
  const async = /(^|[\s,;])respond-async([\s,;=]|$)/i.test(headers.prefer ?? "")
  const id: SessionId = path.id
  // The key is claimed in the session's journal with the turn (http/Idempotent.ts, idempotentTurn).
  return async
    ? idempotentTurn(
      store,
      `submit:${id}`,
      headers["idempotency-key"],
      payload,
      (r) => r ? sessions.submitKeyed(id, payload.input, r) : Effect.map(sessions.submit(id, payload.input), answered),
      submitAnswer
    )
    : idempotentTurn(
      store,
      `send:${id}`,
      headers["idempotency-key"],
      payload,
      (r) => r ? sessions.sendKeyed(id, payload.input, r) : Effect.map(sessions.send(id, payload.input), answered),
      sendAnswer
    )
}

export const sessionsLive = (admission: Admission) => HttpApiBuilder.group(BrainApi, "sessions", (h) =>
  Effect.gen(function*() {
    const sessions = yield* Sessions
    const store = yield* Idempotency
    /**
     * Pages and transcripts built at once (BRAIN_PAGE_READS), each from a later turn of the event
     * loop: building one is main-thread work (reading and decoding up to 8 MiB of journal frames,
     * encoding the answer), and readers by the hundred must not hold every other request up.
     */
    const config = yield* ServerConfig
    const turns = new Permits(config.pageReads)
    const pageTurn = <A, E, R>(build: Effect.Effect<A, E, R>) => turns.withPermit(Effect.zipRight(laterTurn, build))
    /** Large answers not yet taken by their clients (BRAIN_ANSWER_BYTES): each holds its weight until its response is written or its connection closed. */
    const answers = new AnswerMemory(answerBytes(config.answerBytes))
    /** A body-less lifecycle route on one session, under its own idempotency scope. */
    const lifecycle = <E extends ApiError>(scope: string, run: (id: SessionId) => Effect.Effect<Answer, E>, options: IdempotentOptions = {}) =>
    ({ headers, path }: { readonly headers: { readonly "idempotency-key"?: string | undefined }; readonly path: { readonly id: SessionId } }) =>
      idempotent(store, `${scope}:${path.id}`, headers["idempotency-key"], {}, run(path.id), options)
    // Once the server is stopping, a keyed create, end or delete only looks its key up (a cancel
    // still runs: it ends admitted work and starts none).
    const stopping = { stopping: () => admission.draining }
    return h
      .handle("create", ({ headers, payload }) =>
        // The id is minted before the claim, which records it: a retry whose answer was lost (the
        // server stopped between claim and answer) is told which session to inspect.
        Effect.flatMap(mintSessionId, (id) =>
          idempotent(
            store,
            "create",
            headers["idempotency-key"],
            payload,
            Effect.map(sessions.create(payload, id), (s) => jsonAnswer(201, s)),
            { session: id, ...stopping }
          )))
      .handle("list", ({ urlParams }) =>
        Effect.map(
          sessions.list({ ...(urlParams.after ? { after: urlParams.after } : {}), limit: urlParams.limit ?? LIST_PAGE_SESSIONS }),
          (page) => ({ sessions: page.sessions, next_cursor: page.next_cursor ?? null })
        ))
      .handle("get", ({ path }) => sessions.get(path.id))
      .handle("send", sendMessage(sessions, store))
      .handle("events", ({ path, request, urlParams }) =>
        Effect.gen(function*() {
          if (prefersEventStream(request.headers["accept"])) {
            // A reconnecting EventSource repeats its URL (with its original `after`) and adds the
            // Last-Event-ID it saw: resume after whichever is further on.
            const lastId = request.headers["last-event-id"]
            let after = urlParams.after
            if (lastId !== undefined) {
              if (!/^\d{1,15}$/.test(lastId)) {
                return yield* Effect.fail(invalid("Last-Event-ID must be a sequence", [{ path: ["last-event-id"], message: "expected decimal digits" }]))
              }
              after = Math.max(after ?? 0, Number(lastId))
            }
            yield* admission.stream
            return yield* sseResponse(sessions, path.id, after ?? 0, admission.stopped)
          }
          return yield* pageTurn(Effect.flatMap(
            sessions.events(path.id, { after: urlParams.after ?? 0, limit: urlParams.limit ?? PAGE_EVENTS }),
            (page) => heldAnswer(answers, EventPageSchema, onTheWire(page))
          ))
        }))
      .handle("transcript", ({ path }) =>
        pageTurn(Effect.flatMap(sessions.transcript(path.id), (transcript) => transcriptAnswer(transcript, answers))))
      .handle("cancel", lifecycle("cancel", (id) => Effect.map(sessions.interrupt(id), (s) => jsonAnswer(200, s))))
      .handle("end", lifecycle("end", (id) => Effect.map(sessions.end(id), (s) => jsonAnswer(200, s)), stopping))
      .handle("delete", lifecycle("delete", (id) =>
        Effect.as(
          sessions.delete(id, (requests) => Effect.mapError(store.adopt(adoptedKeys(id, requests)), storeFailure)),
          emptyAnswer(204)
        ), stopping))
  }))

const decodeKey = Schema.decodeUnknownEither(MutatingHeaders)

/**
 * The `Idempotency-Key` of a mutating route that takes none (a host's registration, results and
 * Events): checked as every mutating route's is — 400 `invalid_request` when empty or above 256
 * bytes, with the issues the contract's decoder would give — and otherwise ignored. A
 * registration is never deduplicated (its answer holds the host's token, a secret the idempotency
 * store must never keep); a result or Event names its call, which takes one. The check is here
 * rather than in the contract (`setHeaders`), where it would make `headers` a required argument
 * of these routes in every typed client.
 */
const checkedKey = (headers: Readonly<Record<string, string | Array<string> | undefined>>) =>
  Either.match(decodeKey({ "idempotency-key": headers["idempotency-key"] }), {
    onRight: () => Effect.void,
    onLeft: (error) =>
      Effect.fail(decodeRefused(ParseResult.ArrayFormatter.formatErrorSync(error)))
  })

/**
 * The host routes. Each but `register` needs the host's own token: a missing, wrong or other
 * host's token, and an unknown host id, all answer the same 401 (the gate lets these routes
 * through without the server's API token).
 */
/** A posted result as the registry takes it: the call it names, and the host's answer. */
const postedResult = (posted: Schemas.HostResult): { readonly call: CallName; readonly answer: HostAnswer } => ({
  call: { session: posted.session_id, sequence: posted.sequence },
  answer: "ok" in posted ? { ok: posted.ok } : "error" in posted ? { error: posted.error } : { stopped: true }
})

/**
 * A host's results (`POST /v1/hosts/:id/results`, with the host's own token): the route's
 * handler, also run by the listener that takes requests at the socket (SocketRoutes.ts).
 */
export const hostResults = (hosts: HostsShape) =>
({ headers, path, payload }: {
  readonly headers: Readonly<Record<string, string | Array<string> | undefined>>
  readonly path: { readonly id: HostId }
  readonly payload: typeof Schemas.HostResultBody.Type
}) =>
  Effect.zipRight(
    Effect.zipRight(checkedKey(headers), authorizedHost(hosts, path.id, headers)),
    "results" in payload
      ? hosts.results(path.id, payload.results.map(postedResult))
      : Effect.suspend(() => {
        const { answer, call } = postedResult(payload)
        return hosts.result(path.id, call, answer)
      })
  )

/** Passes when `headers` carry host `id`'s own token. */
const authorizedHost = (hosts: HostsShape, id: string, headers: Readonly<Record<string, string | Array<string> | undefined>>) => {
  const header = headers["authorization"]
  return hosts.authorize(id, bearerToken(typeof header === "string" ? header : undefined))
    ? Effect.void
    : Effect.fail(new Unauthorized({ message: HOST_TOKEN_NEEDED }))
}

/** A command stream's response headers (a HEAD's too). */
const COMMAND_STREAM_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive", "x-accel-buffering": "no" }

export const hostsLive = (admission: Admission) => HttpApiBuilder.group(BrainApi, "hosts", (h) =>
  Effect.gen(function*() {
    const hosts = yield* Hosts
    const authorized = (id: string, headers: Readonly<Record<string, string | undefined>>) => authorizedHost(hosts, id, headers)
    const results = hostResults(hosts)
    return h
      .handle("register", ({ request }) =>
        Effect.zipRight(checkedKey(request.headers), Effect.map(hosts.register, (r) => respond(jsonAnswer(201, r)))))
      .handle("unregister", ({ path, request }) =>
        Effect.gen(function*() {
          yield* checkedKey(request.headers)
          yield* authorized(path.id, request.headers)
          yield* hosts.unregister(path.id)
          return respond(emptyAnswer(204))
        }))
      .handle("commands", ({ path, request }) =>
        Effect.gen(function*() {
          yield* authorized(path.id, request.headers)
          // A HEAD (answered wherever GET is) gets the stream's headers and opens nothing: the
          // host's stream, if it has one, stays its own, and no stream without a reader is held.
          if (request.method === "HEAD") return HttpServerResponse.empty({ status: 200, headers: COMMAND_STREAM_HEADERS })
          // A command stream holds its connection as a session's stream does, and shares their
          // bound: hosts that stay connected never take the connections kept for other requests
          // (their own results among them). Sessions' readers never take the streams' connections
          // kept for command streams. Refused before the stream is opened: nothing changes.
          yield* admission.commandStream
          // A host removed since its token was checked gets the same 401 as any unknown host.
          const stream = yield* hosts.connect(path.id).pipe(
            Effect.catchTag("Unauthorized", () => Effect.fail(new Unauthorized({ message: HOST_TOKEN_NEEDED })))
          )
          // A server stop ends the stream; its calls in flight end (not sent if still queued, else uncertain).
          yield* Effect.forkScoped(Effect.zipRight(Deferred.await(admission.stopped), stream.stop))
          // So does the response's end, whatever ends it: a client gone before its body was piped
          // leaves the host disconnected, not holding a stream nobody reads.
          yield* Effect.addFinalizer(() => stream.stop)
          return HttpServerResponse.raw(stream.body, { headers: COMMAND_STREAM_HEADERS })
        }))
      .handle("results", ({ path, payload, request }) => results({ headers: request.headers, path, payload }))
      .handle("events", ({ path, payload, request }) =>
        Effect.gen(function*() {
          yield* checkedKey(request.headers)
          yield* authorized(path.id, request.headers)
          const call = { session: payload.session_id, sequence: payload.sequence }
          const sequence = yield* hosts.event(path.id, call, payload.kind, payload.payload)
          return { sequence }
        }))
  }))

export const apiLive = (admission: Admission) =>
  HttpApiBuilder.api(BrainApi).pipe(
    Layer.provide(healthLive(admission)),
    Layer.provide(agentloopsLive(admission)),
    Layer.provide(sessionsLive(admission)),
    Layer.provide(hostsLive(admission))
  )

