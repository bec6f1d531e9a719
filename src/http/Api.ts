/**
 * The whole HTTP contract, shared by the server, the OpenAPI document and the SDK.
 * Free of Node-only imports.
 */
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import type { HttpMethod } from "@effect/platform/HttpMethod"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { checkedKeyHeader, completeDocument, eventStream, moduleBody, preferenceApplied } from "./ApiDocument.js"
import * as E from "./ApiErrors.js"
import {
  AgentloopAdmitted,
  AgentloopList,
  AgentloopPath,
  CreateSessionRequest,
  EventPage,
  HostEvent,
  HostEventCommitted,
  HostPath,
  HostRegistered,
  HostResultBody,
  EventsParams,
  ListParams,
  MessageHeaders,
  MutatingHeaders,
  Receipt,
  SendMessageRequest,
  SessionList,
  SessionPath,
  SessionSummary,
  Transcript,
  TurnOutcome
} from "./Schemas.js"

/*
 * Every route lists exactly the refusals it can answer (ApiErrors.ts: one schema per code, with its
 * status): the gate's (Middleware.ts: a token, draining and connection limits, body size, media
 * type and well-formedness), its decoders' (a malformed id, header or query is 400
 * `invalid_request`), its service's, and, for keyed routes, the idempotency store's. A group lists
 * only what every route in it can answer; `internal` (a defect, 500) is the whole API's.
 */

/** Adds each of `schemas` as an error of the endpoint. */
const addErrors = <const S extends ReadonlyArray<Schema.Schema<any, any, never>>>(...schemas: S) =>
<Name extends string, Method extends HttpMethod, Path, UrlParams, Payload, Headers, Success, Error, R, RE>(
  endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, Method, Path, UrlParams, Payload, Headers, Success, Error, R, RE>
): HttpApiEndpoint.HttpApiEndpoint<Name, Method, Path, UrlParams, Payload, Headers, Success, Error | S[number]["Type"], R, RE> =>
  schemas.reduce((e: any, schema) => e.addError(schema), endpoint)

/** What a route with a body can be refused with by the gate before it is routed. */
const withBody = [E.InvalidRequest, E.PayloadTooLarge, E.UnsupportedMediaType] as const
/** What a keyed (Idempotency-Key) route can be refused with by the idempotency store. */
const keyed = [E.Conflict, E.Ambiguous, E.IdempotencyUnavailable] as const
/** What reaching a session's storage can be refused with. */
const storage = [E.NotFound, E.JournalCorrupt, E.JournalWriteFailed] as const

/**
 * `HttpApi.make` declares its own decode error (`{_tag: "HttpApiDecodeError", …}`) under 400 for
 * every route. Brain never answers it: the gate turns every decode failure into `invalid_request`
 * (DESIGN §7), so a client must not expect it, and the contract drops it. The API's errors are
 * set once here, as `HttpApi.make` sets them (an HttpApi is a plain value with `errorSchema`).
 */
const withoutFrameworkErrors = <Id extends string, Error>(api: HttpApi.HttpApi<Id, never, Error>): HttpApi.HttpApi<Id, never, never> =>
  Object.assign(Object.create(Object.getPrototypeOf(api)), api, { errorSchema: Schema.Never })

export const health = HttpApiGroup.make("health")
  .add(HttpApiEndpoint.get("live", "/health/live").addSuccess(HttpApiSchema.NoContent))
  .add(HttpApiEndpoint.get("ready", "/health/ready").addSuccess(HttpApiSchema.NoContent).addError(E.Overloaded))

export const agentloops = HttpApiGroup.make("agentloops")
  .add(
    HttpApiEndpoint.post("admit", "/v1/agentloops")
      .setHeaders(MutatingHeaders)
      .addSuccess(AgentloopAdmitted, { status: 201 })
      .pipe(addErrors(...withBody, ...keyed))
      .annotate(
        OpenApi.Description,
        "Admit a WebAssembly module (docs/abi.md): an Agentloop (exports brain_run) or a tool (brain_tool). The body is the module's bytes (application/wasm); it is validated and compiled before it is stored."
      )
      .annotate(OpenApi.Transform, moduleBody)
  )
  .add(HttpApiEndpoint.get("list", "/v1/agentloops").addSuccess(AgentloopList))
  .add(
    HttpApiEndpoint.del("remove", "/v1/agentloops/:id")
      .setPath(AgentloopPath)
      .setHeaders(MutatingHeaders)
      .addSuccess(HttpApiSchema.NoContent)
      .pipe(addErrors(...withBody, ...keyed, E.NotFound))
      .annotate(OpenApi.Description, "Remove an uploaded module; refused (409) while a session uses it")
  )
  .addError(E.InvalidRequest)
  .addError(E.Unauthorized)
  .addError(E.Overloaded)

export const sessions = HttpApiGroup.make("sessions")
  .add(
    HttpApiEndpoint.post("create", "/v1/sessions")
      .setHeaders(MutatingHeaders)
      .setPayload(CreateSessionRequest)
      .addSuccess(SessionSummary, { status: 201 })
      .pipe(addErrors(...withBody, ...keyed, ...storage, E.CreationFailed))
  )
  .add(HttpApiEndpoint.get("list", "/v1/sessions").setUrlParams(ListParams).addSuccess(SessionList).addError(E.JournalWriteFailed))
  .add(HttpApiEndpoint.get("get", "/v1/sessions/:id").setPath(SessionPath).addSuccess(SessionSummary).pipe(addErrors(...storage)))
  .add(
    HttpApiEndpoint.post("send", "/v1/sessions/:id/messages")
      .setPath(SessionPath)
      .setHeaders(MessageHeaders)
      .setPayload(SendMessageRequest)
      .addSuccess(TurnOutcome)
      .addSuccess(Receipt, { status: 202 })
      .pipe(addErrors(...withBody, ...keyed, ...storage, E.SessionBusy, E.SessionEnded, E.AgentloopFailed))
      .annotate(
        OpenApi.Description,
        "Send a message. Synchronous by default (200 with the turn's outcome); with `Prefer: respond-async`, 202 with the receipt of the committed turn_started and `Preference-Applied: respond-async`."
      )
      .annotate(OpenApi.Transform, preferenceApplied)
  )
  .add(
    HttpApiEndpoint.get("events", "/v1/sessions/:id/events")
      .setPath(SessionPath)
      .setUrlParams(EventsParams)
      .addSuccess(EventPage)
      .pipe(addErrors(...storage))
      .annotate(
        OpenApi.Description,
        "A page of public Events after `after`; a cursor past the session's last sequence is 400 with `details.last_sequence`. With `Accept: text/event-stream`: SSE, catching up from `after` (or Last-Event-ID) then following live; beyond the subscriber limits 503 `overloaded`; a stream that ends other than after `session_ended` says why in a `stream_lagged` or `stream_error` frame without `id`; a session that is over (ended, or its creation failed) whose cursor is at its last record is answered 204 with no body, so an EventSource stops reconnecting (close it on `session_ended` anyway). While a model call streams, live readers also get `event: model_delta` frames without `id` (never journaled, never in a page): `data: {session_id, model_call (the sequence of its model_call_started), type: \"text\", text} | {session_id, model_call, type: \"tool_call\", index, id?, name?, input_delta}`; a reader that reconnects gets the committed model_call_ended instead."
      )
      .annotate(OpenApi.Transform, eventStream)
  )
  .add(
    HttpApiEndpoint.get("transcript", "/v1/sessions/:id/transcript").setPath(SessionPath).addSuccess(Transcript).pipe(
      addErrors(...storage)
    )
  )
  .add(
    HttpApiEndpoint.post("cancel", "/v1/sessions/:id/cancel").setPath(SessionPath).setHeaders(MutatingHeaders).addSuccess(
      SessionSummary
    ).pipe(addErrors(...withBody, ...keyed, ...storage))
  )
  .add(
    HttpApiEndpoint.post("end", "/v1/sessions/:id/end").setPath(SessionPath).setHeaders(MutatingHeaders).addSuccess(
      SessionSummary
    ).pipe(addErrors(...withBody, ...keyed, ...storage))
  )
  .add(
    HttpApiEndpoint.del("delete", "/v1/sessions/:id").setPath(SessionPath).setHeaders(MutatingHeaders).addSuccess(
      HttpApiSchema.NoContent
    ).pipe(addErrors(...withBody, ...keyed, ...storage, E.TeardownFailed))
  )
  .addError(E.InvalidRequest)
  .addError(E.Unauthorized)
  .addError(E.Overloaded)

export const hosts = HttpApiGroup.make("hosts")
  .add(
    HttpApiEndpoint.post("register", "/v1/hosts")
      .addSuccess(HostRegistered, { status: 201 })
      .pipe(addErrors(...withBody))
      .annotate(
        OpenApi.Description,
        "Register a host: an application process that runs the tools of `host` Environments (docs/environments.md, \"The `host` driver\"). Needs the server's API token when one is set. Not idempotent: the answer holds the host's token, a secret the idempotency store must never keep, so no answer is recorded and a retry registers another host. An `Idempotency-Key` is checked as on every mutating route (1 to 256 bytes, else 400) and otherwise ignored."
      )
      .annotate(OpenApi.Transform, checkedKeyHeader)
  )
  .add(
    HttpApiEndpoint.del("unregister", "/v1/hosts/:id")
      .setPath(HostPath)
      .addSuccess(HttpApiSchema.NoContent)
      .pipe(addErrors(...withBody))
      .annotate(
        OpenApi.Description,
        "Removes the host's registration, with the host's own token, durably before it answers 204: its command stream ends (calls in flight on it become `unknown`), its token opens nothing more (a repeat is 401), sessions may no longer name it, and later calls to it are not sent (`host_unknown`). An `Idempotency-Key` is checked (1 to 256 bytes, else 400) and otherwise ignored."
      )
      .annotate(OpenApi.Transform, checkedKeyHeader)
  )
  .add(
    HttpApiEndpoint.get("commands", "/v1/hosts/:id/commands")
      .setPath(HostPath)
      .addSuccess(HttpApiSchema.Text({ contentType: "text/event-stream" }))
      .annotate(
        OpenApi.Description,
        "The host's command stream (SSE), with the host's own token. First `event: ready` `{host_id, heartbeat_ms}` (the interval of the heartbeat comments, 0 when there are none), then `event: call` `{session_id, sequence, environment, name, call_id, input, deadline_at_ms}` and `event: cancel` `{session_id, sequence, reason}` frames, and heartbeat comments. Each command is written once: a new stream replaces the previous one, whose calls in flight become `unknown`, and carries only new commands. 503 `overloaded` (nothing changed) when SSE streams, command streams included, hold all the connections they may: `BRAIN_RESERVED_CONNECTIONS` are kept for other requests."
      )
  )
  .add(
    HttpApiEndpoint.post("results", "/v1/hosts/:id/results")
      .setPath(HostPath)
      .setPayload(HostResultBody)
      .addSuccess(HttpApiSchema.NoContent)
      .pipe(addErrors(...withBody, E.Conflict, E.JournalWriteFailed))
      .annotate(
        OpenApi.Description,
        "A call's result: `ok`, `error`, or after a cancel `stopped: true`; or `{\"results\": [...]}`, several at once, all taken or none. Answered 204 once the outcome record of each call it answers is durable: a crash after the 204 loses nothing. The same result again for a call whose result was taken (a host whose answer was lost posts it again) is answered as the first: 204 once that outcome is durable, and it changes nothing; results taken are remembered for `HOST_TAKEN_RESULTS` results and `HOST_TAKEN_RESULT_MS`, in memory (not across a restart). 409 `conflict` with `details.reason: \"result_conflict\"` for a different result for a call already answered, and `\"not_in_flight\"` for a call not in flight on this host (never sent to it, ended without its result, or forgotten); in a batch `details.index` names the result. 500 `journal_write_failed` (`details.reason: \"outcome_unrecorded\"`) when the answer was taken but its outcome could not be recorded: the call counts as unknown, and a repeat is answered the same. An `Idempotency-Key` is checked (1 to 256 bytes, else 400) and otherwise ignored: a result names its call, which takes one."
      )
      .annotate(OpenApi.Transform, checkedKeyHeader)
  )
  .add(
    HttpApiEndpoint.post("events", "/v1/hosts/:id/events")
      .setPath(HostPath)
      .setPayload(HostEvent)
      .addSuccess(HostEventCommitted)
      .pipe(addErrors(...withBody, ...storage, E.Conflict))
      .annotate(
        OpenApi.Description,
        "Commits a tool-origin Event of a call in flight (`origin: {kind: \"tool\", sequence}`) before the call's outcome; answered once it is durable. An `Idempotency-Key` is checked (1 to 256 bytes, else 400) and otherwise ignored."
      )
      .annotate(OpenApi.Transform, checkedKeyHeader)
  )
  .addError(E.InvalidRequest)
  .addError(E.Unauthorized)
  .addError(E.Overloaded)

export const BrainApi = withoutFrameworkErrors(HttpApi.make("brain"))
  .add(health)
  .add(agentloops)
  .add(sessions)
  .add(hosts)
  .annotate(OpenApi.Title, "Brain")
  .annotate(OpenApi.Version, "0.1.0")
  .annotate(OpenApi.Description, "A durable session server for AI agents")
  .annotate(OpenApi.Transform, completeDocument)
  .addError(E.Internal)

export { Schema }
