/**
 * `session.events(cursor)`: the session's recorded Events after `cursor`, in sequence order, each
 * once. First the pages (`GET …/events?after=&limit=`, through the Effect client) up to the end,
 * then the live stream (the same URL with `Accept: text/event-stream`, read with `fetch`: see
 * Transport.ts), which the server catches up from the journal before following new commits.
 *
 * The reader keeps one cursor, the sequence of the last Event it yielded (or the last page's
 * `next_cursor`), and never yields a sequence at or below it. Whenever the stream ends other than
 * after `session_ended` — the connection dropped, the server restarted (a retryable
 * `stream_error`), the reader fell behind (`stream_lagged`), the server closed it — it opens the
 * stream again after that cursor, backing off, until RECONNECT_DEADLINE_MS pass without a stream
 * that worked (one that delivered a recorded Event or stayed open STREAM_HELD_MS). The pages are
 * tried again after the cursor the same way while they fail as a restart makes them fail. It ends after
 * `session_ended`; when the server closes the stream of a session that is over (ended, or failed:
 * a failed session records no `session_ended`), asked by reading its summary, after the pages
 * left after the cursor; when the server answers the stream 204 (over, nothing after the cursor);
 * and at the end of the pages when `live: false`.
 *
 * Recorded Events are passed on as the contract's `Event` (its decoded form is its wire form), so
 * `event.data` and `event.origin` are the same whether they came from a page or the stream. Live
 * model deltas (frames without `id`) are dropped unless `deltas: true`, in which case every item
 * is tagged `{type: "event", event}` or `{type: "delta", delta}`.
 */
import { BrainClosed, BrainError, fromAnswer, isUncertain, networkError } from "./Errors.js"
import { sseFrames } from "./Sse.js"
import { sleep, type Transport } from "./Transport.js"
import type { Event, EventOrDelta, ModelDelta } from "./Types.js"

/** Events per page request: the server's maximum. */
export const PAGE_LIMIT = 1000
/** Milliseconds a live reader keeps trying to reopen its stream before it fails with the last error:
 * long enough for a server restart, short enough that a server that is gone is reported. */
export const RECONNECT_DEADLINE_MS = 30_000
/** Milliseconds between reopening attempts: from the first, doubled up to the last. */
const RECONNECT_FIRST_MS = 50
const RECONNECT_MAX_MS = 2_000
/** Milliseconds a stream must stay open, when it delivers no recorded Event, to count as having
 * opened (and start the backoff afresh): longer than any pause, so a server that answers every
 * stream and closes it at once meets a growing backoff and, in the end, the deadline. */
const STREAM_HELD_MS = RECONNECT_MAX_MS

export interface EventsOptions {
  /** Follow the live stream after the pages (default true); false ends at the end of the pages. */
  readonly live?: boolean
  /** Ends the iteration: the pending `next()` rejects with the signal's reason. */
  readonly signal?: AbortSignal
  /** Milliseconds to keep reopening a dropped stream (default RECONNECT_DEADLINE_MS). */
  readonly reconnectDeadlineMs?: number
}

const SESSION_ENDED = "session_ended"

export async function* readEvents(
  transport: Transport,
  sessionId: string,
  after: number,
  options: EventsOptions,
  withDeltas: boolean
): AsyncGenerator<EventOrDelta, void, undefined> {
  transport.ensureOpen()
  const path = `/v1/sessions/${encodeURIComponent(sessionId)}/events`
  const { controller, release } = transport.link(options.signal)
  let cursor = after
  /** The reader is done with the stream: the client closed, or the caller's signal aborted. */
  const stopped = () => {
    if (transport.closed) return new BrainClosed()
    return controller.signal.aborted ? controller.signal.reason : undefined
  }
  /** The pages after the cursor, up to an empty one; returns whether `session_ended` was among them. */
  async function* pages(): AsyncGenerator<EventOrDelta, boolean, undefined> {
    for (;;) {
      const page = await transport.call(
        (client) => client.sessions.events(sessionId, { after: cursor, limit: PAGE_LIMIT }),
        controller.signal
      )
      if (page.events.length === 0) return false
      for (const event of page.events) {
        if (event.sequence <= cursor) continue
        cursor = event.sequence
        yield { type: "event", event }
        if (event.kind === SESSION_ENDED) return true
      }
      cursor = Math.max(cursor, page.next_cursor)
    }
  }
  const deadlineMs = options.reconnectDeadlineMs ?? RECONNECT_DEADLINE_MS
  let failingSince: number | undefined
  let pause = RECONNECT_FIRST_MS
  /** After a failed attempt: waits its backoff, or throws `failure` once the deadline has passed. */
  const backOff = async (failure: BrainError | undefined) => {
    const now = Date.now()
    failingSince ??= now
    if (now - failingSince > deadlineMs) throw failure ?? networkError("the event stream kept ending")
    await sleep(pause, controller.signal)
    pause = Math.min(pause * 2, RECONNECT_MAX_MS)
  }
  /**
   * The pages after the cursor, as `pages`, tried again after the cursor while they fail with an
   * error a retry may mend (the server restarting, the connection dropped), backing off as the
   * live stream does: a restart during a catch-up (or before it) is waited out, not reported
   * once the transport's own few attempts have failed. A page that arrives starts the backoff afresh.
   */
  async function* pagesUntilRead(): AsyncGenerator<EventOrDelta, boolean, undefined> {
    for (;;) {
      let failure: BrainError
      try {
        for (const reading = pages(); ;) {
          const step = await reading.next()
          failingSince = undefined
          pause = RECONNECT_FIRST_MS
          if (step.done === true) return step.value
          yield step.value
        }
      } catch (e) {
        const done = stopped()
        if (done !== undefined) throw done
        failure = e instanceof BrainError ? e : networkError(e)
        if (!isUncertain(failure)) throw failure
      }
      await backOff(failure)
    }
  }
  try {
    if (yield* pagesUntilRead()) return
    if (options.live === false) return

    // The live stream, reopened after the cursor until `session_ended` or the session is over.
    failingSince = undefined
    pause = RECONNECT_FIRST_MS
    for (;;) {
      let failure: BrainError | undefined
      let openedAt: number | undefined
      let delivered = false
      let closedByServer = false
      try {
        const response = await transport.open(`${path}?after=${cursor}`, {
          headers: transport.headers({ accept: "text/event-stream", "last-event-id": String(cursor) }),
          signal: controller.signal
        })
        if (response.status === 204) {
          // No Content: the session is over and nothing is left after the cursor to stream (an
          // EventSource stops there too); what the pages still hold after the cursor ends it.
          yield* pagesUntilRead()
          return
        } else if (!response.ok || response.body === null) {
          failure = fromAnswer(response.status, await response.text().catch(() => ""))
          if (!isUncertain(failure)) throw failure
        } else {
          openedAt = Date.now()
          closedByServer = true
          for await (const frame of sseFrames(response.body)) {
            if (frame.id !== undefined) {
              const event = JSON.parse(frame.data) as Event
              if (event.sequence <= cursor) continue
              cursor = event.sequence
              delivered = true
              yield { type: "event", event }
              if (event.kind === SESSION_ENDED) return
            } else if (frame.event === "model_delta") {
              if (withDeltas) yield { type: "delta", delta: JSON.parse(frame.data) as ModelDelta }
            } else if (frame.event === "stream_error") {
              const body = JSON.parse(frame.data) as { code: BrainError["code"]; message: string; retryable: boolean }
              failure = new BrainError({ code: body.code, status: response.status, retryable: body.retryable, message: body.message })
              if (!body.retryable) throw failure
              closedByServer = false
              break
            } else if (frame.event === "stream_lagged") {
              // Fell behind: reopen after our own cursor (at or past the one the frame names).
              closedByServer = false
              break
            }
          }
        }
      } catch (e) {
        const done = stopped()
        if (done !== undefined) throw done
        // A read that failed mid-stream (a reset, the server gone) is a dropped connection.
        closedByServer = false
        failure = e instanceof BrainError ? e : networkError(e)
        if (!failure.retryable) throw failure
      }
      // Only a stream that worked starts the backoff afresh: one that delivered a recorded Event,
      // or stayed open a while (an idle session's stream may carry nothing for hours). One the
      // server opened and closed at once is a failed attempt, or the reader would spin on it.
      if (openedAt !== undefined && (delivered || Date.now() - openedAt >= STREAM_HELD_MS)) {
        failingSince = undefined
        pause = RECONNECT_FIRST_MS
      }
      if (closedByServer) {
        // The server ends the stream of a session that is over (after `session_ended`, or after
        // its failure, which records no `session_ended`): ask whether this one is, and if so read
        // what is left after the cursor from the pages and end there.
        try {
          const summary = await transport.call((client) => client.sessions.get(sessionId), controller.signal)
          if (summary.status === "ended" || summary.status === "failed") {
            yield* pagesUntilRead()
            return
          }
          failure = networkError("the server closed the event stream of a session that is not over")
        } catch (e) {
          const done = stopped()
          if (done !== undefined) throw done
          failure = e instanceof BrainError ? e : networkError(e)
          if (!isUncertain(failure)) throw failure
        }
      }
      // The stream ended without `session_ended`, or could not open: reopen after the cursor.
      await backOff(failure)
    }
  } catch (e) {
    throw stopped() ?? e
  } finally {
    release()
    controller.abort()
  }
}

/** The Events alone, for `session.events(cursor)` without deltas. */
export async function* eventsOnly(items: AsyncGenerator<EventOrDelta, void, undefined>): AsyncGenerator<Event, void, undefined> {
  for await (const item of items) if (item.type === "event") yield item.event
}
