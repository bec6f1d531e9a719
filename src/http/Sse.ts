/**
 * Server-sent Events over a session's live feed. Everything that can refuse a stream — a bad or
 * unknown session, a corrupt journal, a cursor past the end, a subscriber limit — is answered
 * before the 200 as a plain error; the subscription then lives as long as the response (the
 * request's scope). The frames themselves, encoded once per commit for every subscriber, and the
 * control frames that end a stream early are the Sessions layer's (layers/sessions/SseFrames.ts).
 * A server stop ends every stream with a retryable `stream_error`. A session that is over, its
 * reader at its last record, is answered 204 with no body: nothing will ever be sent, and an
 * EventSource stops on a 204 where it would reconnect after a 200 that ends.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Deferred, Effect } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { SessionsShape } from "../services/Sessions.js"

export const sseResponse = (
  sessions: SessionsShape,
  session: SessionId,
  after: number,
  stopped: Deferred.Deferred<void>
) =>
  Effect.gen(function*() {
    const following = yield* sessions.follow(session, after)
    // Nothing will ever come: 204 stops an EventSource, which reconnects after a 200 that ends.
    if (following.over) return HttpServerResponse.empty({ status: 204 })
    yield* Effect.forkScoped(Effect.zipRight(Deferred.await(stopped), following.stop))
    return HttpServerResponse.raw(following.body, {
      contentType: "text/event-stream",
      headers: { "cache-control": "no-cache", connection: "keep-alive", "x-accel-buffering": "no" }
    })
  })
