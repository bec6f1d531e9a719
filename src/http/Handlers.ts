/**
 * The handlers: thin, they decode nothing themselves (the contract does), call the services and
 * shape answers. Every mutating route runs under its Idempotency-Key.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Deferred, Effect, FiberId, Layer } from "effect"
import type { SessionId } from "../domain/Ids.js"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Agentloops } from "../services/Agentloop.js"
import { type HostRefused, Hosts } from "../services/Hosts.js"
import { type Answer, Idempotency } from "../services/Idempotency.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { type SessionError, Sessions } from "../services/Sessions.js"
import { BrainApi } from "./Api.js"
import { apiFailure, fromFailure } from "./Errors.js"
import { emptyAnswer, idempotent, jsonAnswer, respond } from "./Idempotent.js"
import { bearerToken } from "./Middleware.js"
import { eventsFailure, sseResponse } from "./Sse.js"
import { PAGE_EVENTS } from "../domain/Limits.js"

/** Whether the server is draining (the gate refuses new work, readiness answers 503), and the
 * signal that ends long-lived streams when it stops. */
export class Admission {
  draining = false
  readonly stopped = Deferred.unsafeMake<void>(FiberId.none)
  stop() {
    Deferred.unsafeDone(this.stopped, Effect.void)
  }
}

const failed = (e: SessionError) => fromFailure(e.failure)

/**
 * Handlers may answer with a ready HttpServerResponse (a replayed idempotent answer, a 202, an
 * SSE stream); the builder sends it as is. The contract's types only know the decoded success
 * shape, so such handlers are typed through this.
 */
const asRaw = <E, R>(effect: Effect.Effect<unknown, E, R>) => effect as Effect.Effect<any, E, R>

const WASM_TYPES = ["application/wasm", "application/octet-stream"]

export const healthLive = (admission: Admission) =>
  HttpApiBuilder.group(BrainApi, "health", (h) =>
    h.handle("live", () => Effect.void).handle("ready", () =>
      admission.draining
        ? Effect.fail(apiFailure("overloaded", "the server is draining", { retryable: true }))
        : Effect.void))

export const agentloopsLive = HttpApiBuilder.group(BrainApi, "agentloops", (h) =>
  Effect.gen(function*() {
    const agentloops = yield* Agentloops
    const store = yield* Idempotency
    const config = yield* ServerConfig
    return h.handle("admit", ({ headers, request }) =>
      Effect.gen(function*() {
        const type = (request.headers["content-type"] ?? "").toLowerCase().split(";")[0]!.trim()
        if (!WASM_TYPES.includes(type)) {
          return yield* Effect.fail(apiFailure("unsupported_media_type", "the body must be application/wasm"))
        }
        const bytes = new Uint8Array(
          yield* request.arrayBuffer.pipe(
            Effect.mapError(() => apiFailure("payload_too_large", `the body is larger than ${config.maxRequestBytes} bytes`))
          )
        )
        const digest = (yield* Effect.promise(() => crypto.subtle.digest("SHA-256", bytes)))
        const hash = Buffer.from(digest).toString("hex")
        return yield* idempotent(
          store,
          "agentloops",
          headers["idempotency-key"],
          { sha256: hash },
          agentloops.admit(bytes).pipe(
            Effect.map((info) => jsonAnswer(201, info)),
            Effect.mapError((e) =>
              e._tag === "AgentloopRejected"
                ? apiFailure(e.full ? "conflict" : "invalid_request", e.reason)
                : apiFailure("internal", e.reason, { retryable: true })
            )
          )
        )
      }).pipe(asRaw)
    ).handle("list", () =>
      agentloops.list.pipe(
        Effect.map((list) => ({ agentloops: list })),
        Effect.mapError((e) => apiFailure("internal", e.reason, { retryable: true }))
      )).handle("remove", ({ headers, path }) =>
        idempotent(
          store,
          `agentloops:remove:${path.id}`,
          headers["idempotency-key"],
          {},
          agentloops.remove(path.id).pipe(
            Effect.as(emptyAnswer(204)),
            Effect.mapError((e) =>
              e._tag === "AgentloopRejected"
                ? apiFailure(e.missing ? "not_found" : "conflict", e.reason)
                : e._tag === "AgentloopInUse"
                ? apiFailure("conflict", e.reason)
                : apiFailure("internal", e.reason, { retryable: true })
            )
          )
        ).pipe(asRaw))
  }))

export const sessionsLive = (admission: Admission) => HttpApiBuilder.group(BrainApi, "sessions", (h) =>
  Effect.gen(function*() {
    const sessions = yield* Sessions
    const store = yield* Idempotency
    /** A body-less lifecycle route on one session, under its own idempotency scope. */
    const lifecycle = (scope: string, run: (id: SessionId) => Effect.Effect<Answer, SessionError>) =>
    ({ headers, path }: { readonly headers: { readonly "idempotency-key"?: string | undefined }; readonly path: { readonly id: SessionId } }) =>
      idempotent(store, `${scope}:${path.id}`, headers["idempotency-key"], {}, Effect.mapError(run(path.id), failed)).pipe(asRaw)
    return h
      .handle("create", ({ headers, payload }) =>
        idempotent(
          store,
          "create",
          headers["idempotency-key"],
          payload,
          sessions.create(payload).pipe(Effect.map((s) => jsonAnswer(201, s)), Effect.mapError(failed))
        ).pipe(asRaw))
      .handle("list", ({ urlParams }) =>
        sessions.list({ ...(urlParams.after ? { after: urlParams.after } : {}), limit: urlParams.limit ?? 100 }).pipe(
          Effect.map((page) => ({ sessions: page.sessions, next_cursor: page.next_cursor ?? null })),
          Effect.mapError(failed)
        ))
      .handle("get", ({ path }) => Effect.mapError(sessions.get(path.id), failed))
      .handle("send", ({ headers, path, payload }) => {
        const async = /(^|[\s,;])respond-async([\s,;=]|$)/i.test(headers.prefer ?? "")
        const id: SessionId = path.id
        return (async
          ? idempotent(
            store,
            `submit:${id}`,
            headers["idempotency-key"],
            payload,
            sessions.submit(id, payload.input).pipe(
              Effect.map((r) => jsonAnswer(202, r, { "preference-applied": "respond-async" })),
              Effect.mapError(failed)
            )
          )
          : idempotent(
            store,
            `send:${id}`,
            headers["idempotency-key"],
            payload,
            sessions.send(id, payload.input).pipe(Effect.map((o) => jsonAnswer(200, o)), Effect.mapError(failed))
          )).pipe(asRaw)
      })
      .handle("events", ({ path, request, urlParams }) =>
        Effect.gen(function*() {
          const accept = request.headers["accept"] ?? ""
          if (accept.includes("text/event-stream")) {
            // A reconnecting EventSource repeats its URL (with its original `after`) and adds the
            // Last-Event-ID it saw: resume after whichever is further on.
            const lastId = request.headers["last-event-id"]
            let after = urlParams.after
            if (lastId !== undefined) {
              if (!/^\d{1,15}$/.test(lastId)) return yield* Effect.fail(apiFailure("invalid_request", "Last-Event-ID must be a sequence"))
              after = Math.max(after ?? 0, Number(lastId))
            }
            return yield* sseResponse(sessions, path.id, after ?? 0, admission.stopped)
          }
          return yield* Effect.mapError(
            sessions.events(path.id, { after: urlParams.after ?? 0, limit: urlParams.limit ?? PAGE_EVENTS }),
            eventsFailure
          )
        }).pipe(asRaw))
      .handle("transcript", ({ path }) => Effect.mapError(sessions.transcript(path.id), failed))
      .handle("cancel", lifecycle("cancel", (id) => Effect.map(sessions.interrupt(id), (s) => jsonAnswer(200, s))))
      .handle("end", lifecycle("end", (id) => Effect.map(sessions.end(id), (s) => jsonAnswer(200, s))))
      .handle("delete", lifecycle("delete", (id) => Effect.as(sessions.delete(id), emptyAnswer(204))))
  }))

const hostRefused = (e: HostRefused) =>
  apiFailure(e.code, e.message, { retryable: e.retryable ?? false, ...(e.details !== undefined ? { details: e.details } : {}) })

/**
 * The host routes. Each but `register` needs the host's own token: a missing, wrong or other
 * host's token, and an unknown host id, all answer the same 401 (the gate lets these routes
 * through without the server's API token).
 */
export const hostsLive = (admission: Admission) => HttpApiBuilder.group(BrainApi, "hosts", (h) =>
  Effect.gen(function*() {
    const hosts = yield* Hosts
    const authorized = (id: string, headers: Readonly<Record<string, string | undefined>>) =>
      hosts.authorize(id, bearerToken(headers["authorization"]))
        ? Effect.void
        : Effect.fail(apiFailure("unauthorized", "this route needs the host's own token: `Authorization: Bearer <host token>`"))
    return h
      .handle("register", () => Effect.mapError(hosts.register, hostRefused).pipe(Effect.map((r) => respond(jsonAnswer(201, r))), asRaw))
      .handle("commands", ({ path, request }) =>
        Effect.gen(function*() {
          yield* authorized(path.id, request.headers)
          const stream = yield* hosts.connect(path.id)
          // A server stop ends the stream; its calls in flight become uncertain.
          yield* Effect.forkScoped(Effect.zipRight(Deferred.await(admission.stopped), stream.stop))
          return HttpServerResponse.raw(stream.body, {
            contentType: "text/event-stream",
            headers: { "cache-control": "no-cache", connection: "keep-alive", "x-accel-buffering": "no" }
          })
        }).pipe(asRaw))
      .handle("results", ({ path, payload, request }) =>
        Effect.gen(function*() {
          yield* authorized(path.id, request.headers)
          const call = { session: payload.session_id, sequence: payload.sequence }
          const answer = "ok" in payload
            ? { ok: payload.ok }
            : "error" in payload
            ? { error: payload.error }
            : { stopped: true as const }
          yield* Effect.mapError(hosts.result(path.id, call, answer), hostRefused)
        }).pipe(asRaw))
      .handle("events", ({ path, payload, request }) =>
        Effect.gen(function*() {
          yield* authorized(path.id, request.headers)
          const call = { session: payload.session_id, sequence: payload.sequence }
          const sequence = yield* Effect.mapError(hosts.event(path.id, call, payload.kind, payload.payload), hostRefused)
          return { sequence }
        }))
  }))

export const apiLive = (admission: Admission) =>
  HttpApiBuilder.api(BrainApi).pipe(
    Layer.provide(healthLive(admission)),
    Layer.provide(agentloopsLive),
    Layer.provide(sessionsLive(admission)),
    Layer.provide(hostsLive(admission))
  )

