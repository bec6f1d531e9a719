/**
 * Server-sent Events over a session's follow stream: `id: <sequence>`, `event: <kind>`, `data:`
 * the whole Event envelope; heartbeat comments; the stream ends after the session ends, or when
 * the reader lags too far behind (it reconnects with Last-Event-ID).
 */
import { HttpServerResponse } from "@effect/platform"
import { type Deferred, Duration, Effect, Schedule, Stream } from "effect"
import type { Event } from "../domain/Projection.js"
import type { SessionId } from "../domain/Ids.js"
import type { SessionsShape } from "../services/Sessions.js"
import { fromFailure } from "./Errors.js"

const encoder = new TextEncoder()

export const frame = (e: Event) => `id: ${e.sequence}\nevent: ${e.kind}\ndata: ${JSON.stringify(e)}\n\n`

export const sseResponse = (
  sessions: SessionsShape,
  session: SessionId,
  after: number,
  heartbeatMs: number,
  stopped: Deferred.Deferred<void>
) =>
  Effect.gen(function*() {
    // The follow stream is scoped to the response: it is built inside the response's stream so
    // its subscription lives exactly as long as the connection.
    const events = Stream.unwrapScoped(
      Effect.map(sessions.follow(session, after), (s) => Stream.map(s, frame))
    ).pipe(Stream.catchAll(() => Stream.empty))
    const heartbeat = heartbeatMs > 0
      ? Stream.fromSchedule(Schedule.spaced(Duration.millis(heartbeatMs))).pipe(Stream.as(": heartbeat\n\n"))
      : Stream.never
    const body = Stream.merge(Stream.make(": connected\n\n").pipe(Stream.concat(events)), heartbeat, { haltStrategy: "left" }).pipe(
      Stream.map((text) => encoder.encode(text)),
      Stream.interruptWhenDeferred(stopped)
    )
    // Check the session exists before answering 200, so a bad id is a plain 404.
    yield* sessions.get(session).pipe(Effect.mapError((e) => fromFailure(e.failure)))
    return HttpServerResponse.stream(body, {
      contentType: "text/event-stream",
      headers: { "cache-control": "no-cache", connection: "keep-alive", "x-accel-buffering": "no" }
    })
  })
