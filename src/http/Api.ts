/**
 * The whole HTTP contract, shared by the server, the OpenAPI document and the SDK.
 * Free of Node-only imports.
 */
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import {
  AgentloopAdmitted,
  AgentloopList,
  AgentloopPath,
  CreateSessionRequest,
  ErrorBody,
  EventPage,
  HostEvent,
  HostEventCommitted,
  HostPath,
  HostRegistered,
  HostResult,
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

/** One error body shape, documented under each status it is answered with. */
const errorAt = (status: number, description: string) =>
  ErrorBody.annotations({ ...HttpApiSchema.annotations({ status }), description, identifier: `Error${status}` })

export const BadRequest = errorAt(400, "invalid_request: malformed JSON, unknown fields, wrong types, bad ids or cursors")
export const Unauthorized = errorAt(401, "unauthorized")
export const NotFound = errorAt(404, "not_found")
export const Conflict = errorAt(409, "conflict, session_busy, ambiguous, session_ended or teardown_failed")
export const TooLarge = errorAt(413, "payload_too_large")
export const UnsupportedMedia = errorAt(415, "unsupported_media_type")
export const Overloaded = errorAt(
  503,
  "overloaded: the server is draining; idempotency_unavailable: the idempotency log is damaged, requests with an Idempotency-Key are refused until an operator repairs it"
)

export const health = HttpApiGroup.make("health")
  .add(HttpApiEndpoint.get("live", "/health/live").addSuccess(HttpApiSchema.NoContent))
  .add(HttpApiEndpoint.get("ready", "/health/ready").addSuccess(HttpApiSchema.NoContent).addError(Overloaded))

export const agentloops = HttpApiGroup.make("agentloops")
  .add(
    HttpApiEndpoint.post("admit", "/v1/agentloops")
      .setHeaders(MutatingHeaders)
      .addSuccess(AgentloopAdmitted, { status: 201 })
      .addError(BadRequest)
      .addError(TooLarge)
      .addError(UnsupportedMedia)
      .annotate(
        OpenApi.Description,
        "Admit a WebAssembly module (docs/abi.md): an Agentloop (exports brain_run) or a tool (brain_tool). The body is the module's bytes (application/wasm); it is validated and compiled before it is stored."
      )
  )
  .add(HttpApiEndpoint.get("list", "/v1/agentloops").addSuccess(AgentloopList))
  .add(
    HttpApiEndpoint.del("remove", "/v1/agentloops/:id")
      .setPath(AgentloopPath)
      .setHeaders(MutatingHeaders)
      .addSuccess(HttpApiSchema.NoContent)
      .addError(BadRequest)
      .addError(NotFound)
      .addError(Conflict)
      .annotate(OpenApi.Description, "Remove an uploaded module; refused (409) while a session uses it")
  )
  .addError(Unauthorized)
  .addError(Overloaded)

export const sessions = HttpApiGroup.make("sessions")
  .add(
    HttpApiEndpoint.post("create", "/v1/sessions")
      .setHeaders(MutatingHeaders)
      .setPayload(CreateSessionRequest)
      .addSuccess(SessionSummary, { status: 201 })
  )
  .add(HttpApiEndpoint.get("list", "/v1/sessions").setUrlParams(ListParams).addSuccess(SessionList))
  .add(HttpApiEndpoint.get("get", "/v1/sessions/:id").setPath(SessionPath).addSuccess(SessionSummary))
  .add(
    HttpApiEndpoint.post("send", "/v1/sessions/:id/messages")
      .setPath(SessionPath)
      .setHeaders(MessageHeaders)
      .setPayload(SendMessageRequest)
      .addSuccess(TurnOutcome)
      .addSuccess(Receipt, { status: 202 })
      .annotate(
        OpenApi.Description,
        "Send a message. Synchronous by default (200 with the turn's outcome); with `Prefer: respond-async`, 202 with the receipt of the committed turn_started and `Preference-Applied: respond-async`."
      )
  )
  .add(
    HttpApiEndpoint.get("events", "/v1/sessions/:id/events")
      .setPath(SessionPath)
      .setUrlParams(EventsParams)
      .addSuccess(EventPage)
      .annotate(
        OpenApi.Description,
        "A page of public Events after `after`; a cursor past the session's last sequence is 400 with `details.last_sequence`. With `Accept: text/event-stream`: SSE, catching up from `after` (or Last-Event-ID) then following live; beyond the subscriber limits 503 `overloaded`; a stream that ends other than after `session_ended` says why in a `stream_lagged` or `stream_error` frame without `id`. While a model call streams, live readers also get `event: model_delta` frames without `id` (never journaled, never in a page): `data: {session_id, model_call (the sequence of its model_call_started), type: \"text\", text} | {session_id, model_call, type: \"tool_call\", index, id?, name?, input_delta}`; a reader that reconnects gets the committed model_call_ended instead."
      )
  )
  .add(HttpApiEndpoint.get("transcript", "/v1/sessions/:id/transcript").setPath(SessionPath).addSuccess(Transcript))
  .add(
    HttpApiEndpoint.post("cancel", "/v1/sessions/:id/cancel").setPath(SessionPath).setHeaders(MutatingHeaders).addSuccess(
      SessionSummary
    )
  )
  .add(
    HttpApiEndpoint.post("end", "/v1/sessions/:id/end").setPath(SessionPath).setHeaders(MutatingHeaders).addSuccess(
      SessionSummary
    )
  )
  .add(
    HttpApiEndpoint.del("delete", "/v1/sessions/:id").setPath(SessionPath).setHeaders(MutatingHeaders).addSuccess(
      HttpApiSchema.NoContent
    )
  )
  .addError(BadRequest)
  .addError(Unauthorized)
  .addError(NotFound)
  .addError(Conflict)
  .addError(TooLarge)
  .addError(UnsupportedMedia)
  .addError(Overloaded)

export const hosts = HttpApiGroup.make("hosts")
  .add(
    HttpApiEndpoint.post("register", "/v1/hosts")
      .addSuccess(HostRegistered, { status: 201 })
      .annotate(
        OpenApi.Description,
        "Register a host: an application process that runs the tools of `host` Environments (docs/environments.md, \"The `host` driver\"). Needs the server's API token when one is set. Not idempotent: the answer holds a secret the server never stores, so a retry registers another host."
      )
  )
  .add(
    HttpApiEndpoint.get("commands", "/v1/hosts/:id/commands")
      .setPath(HostPath)
      .addSuccess(HttpApiSchema.Text({ contentType: "text/event-stream" }))
      .annotate(
        OpenApi.Description,
        "The host's command stream (SSE), with the host's own token. First `event: ready`, then `event: call` `{session_id, sequence, environment, name, call_id, input, deadline_at_ms}` and `event: cancel` `{session_id, sequence, reason}` frames, and heartbeat comments. Each command is written once: a new stream replaces the previous one, whose calls in flight become `unknown`, and carries only new commands."
      )
  )
  .add(
    HttpApiEndpoint.post("results", "/v1/hosts/:id/results")
      .setPath(HostPath)
      .setPayload(HostResult)
      .addSuccess(HttpApiSchema.NoContent)
      .annotate(OpenApi.Description, "A call's result: `ok`, `error`, or after a cancel `stopped: true`. 409 `conflict` for a call not in flight on this host.")
  )
  .add(
    HttpApiEndpoint.post("events", "/v1/hosts/:id/events")
      .setPath(HostPath)
      .setPayload(HostEvent)
      .addSuccess(HostEventCommitted)
      .annotate(
        OpenApi.Description,
        "Commits a tool-origin Event of a call in flight (`origin: {kind: \"tool\", sequence}`) before the call's outcome; answered once it is durable."
      )
  )
  .addError(BadRequest)
  .addError(Unauthorized)
  .addError(Conflict)
  .addError(TooLarge)
  .addError(UnsupportedMedia)
  .addError(Overloaded)

export const BrainApi = HttpApi.make("brain")
  .add(health)
  .add(agentloops)
  .add(sessions)
  .add(hosts)
  .annotate(OpenApi.Title, "Brain")
  .annotate(OpenApi.Version, "0.1.0")
  .annotate(OpenApi.Description, "A durable session server for AI agents")

export { Schema }
