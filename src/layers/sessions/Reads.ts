/**
 * The reads of sessions: a summary (`get`), the paged listing, the transcript, Events and their
 * live feed, how many cells are warm, and the wait for a session's turns to close. A read neither activates a session nor keeps it warm
 * (Registry.reading); a released session's summary and Events are answered from the view its
 * release kept when that is still current.
 */
import { Effect } from "effect"
import { Internal, Overloaded, type SessionStorageError, toFailure } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import type { SessionStatus } from "../../domain/Projection.js"
import type { JournalListError } from "../../services/Journal.js"
import type { ListError, SessionsShape, SessionSummary } from "../../services/Sessions.js"
import type { Cell } from "./Cell.js"
import { readEvents } from "./Events.js"
import { fromJournal } from "./FromJournal.js"
import { type Shared, summary } from "./Shared.js"

export const makeReads = (shared: Shared): Pick<SessionsShape, "get" | "list" | "transcript" | "events" | "follow" | "warm" | "whenIdle"> => {
  const { feeds, journal, open, reading, registry } = shared

  /** Each turn of the session until none is open (one closing may be followed by the next's start). */
  const whenIdle = (session: SessionId): Effect.Effect<void> =>
    Effect.suspend(() => {
      const turn = open.get(session)
      return turn === undefined ? Effect.void : Effect.zipRight(turn.closed.await, whenIdle(session))
    })

  /**
   * The summary, its `last_sequence` durable: while a turn's opening is only staged, the journal's
   * durable end (a client reading Events after it must not skip the opening once it lands).
   */
  const durableSummary = (cell: Cell): Effect.Effect<SessionSummary> => {
    const opening = cell.opening
    if (opening === undefined) return Effect.succeed(summary(cell))
    return Effect.map(
      Effect.orElseSucceed(journal.lastSequence(cell.session), () => opening[0]!.sequence - 1),
      (durable) => ({ ...summary(cell), last_sequence: Math.min(durable, cell.state.lastSequence) })
    )
  }

  // A released session's status is its view's when nothing was written since (Registry.currentView).
  const get: SessionsShape["get"] = (session) =>
    Effect.flatMap(registry.currentView(session), (view) =>
      view === undefined
        ? reading(session, durableSummary)
        : Effect.succeed<SessionSummary>({ session_id: session, status: view.status as SessionStatus, last_sequence: view.lastSequence }))

  return {
    get,
    list: ({ after, limit }) =>
      Effect.gen(function*() {
        // One more than the page: whether another follows.
        const ids = journal.listPage !== undefined
          ? yield* journal.listPage(after, limit + 1).pipe(Effect.mapError(listingFailed))
          : [...(yield* journal.list.pipe(Effect.mapError(listingFailed)))].sort().filter((id) => after === undefined || id > after)
        const page = ids.slice(0, limit)
        const sessions: Array<SessionSummary> = []
        for (const id of page) {
          const s = yield* Effect.either(get(id))
          if (s._tag === "Right") sessions.push(s.right)
          // A damaged session is listed as such (GET of it names the damage); a vanished one is not;
          // one that cannot be read now fails the list, which without it would say it is gone.
          else if (s.left._tag === "JournalCorrupt") {
            sessions.push({ session_id: id, status: "corrupt", last_sequence: 0, failure: toFailure(s.left) })
          } else if (s.left._tag !== "NotFound") return yield* Effect.fail(unlisted(id, s.left))
        }
        return { sessions, next_cursor: ids.length > limit ? page[page.length - 1] : undefined }
      }),
    transcript: (session) =>
      reading(session, (cell) =>
        Effect.succeed({ messages: cell.state.transcript, through_sequence: cell.state.transcriptThrough })),
    events: (session, { after, limit }) =>
      Effect.flatMap(registry.view(session), (view) =>
        readEvents(journal, session, view, after, limit).pipe(
          Effect.mapError((e) => (e._tag === "InvalidRequest" ? e : fromJournal(e)))
        )),
    follow: (session, after) => feeds.follow(session, after, reading(session, (cell) => Effect.succeed(cell.state))),
    warm: Effect.sync(() => registry.size),
    whenIdle
  }
}

/** The sessions directory could not be listed: an error, never an empty list. */
const listingFailed = (e: JournalListError): Overloaded | Internal =>
  e._tag === "JournalUnavailable"
    ? new Overloaded({ message: e.message })
    : new Internal({ message: e.message, retryable: false })

/** A listed session that cannot be read now (other than damaged or gone), as the list's failure. */
const unlisted = (session: SessionId, e: Exclude<SessionStorageError, { readonly _tag: "NotFound" | "JournalCorrupt" }>): ListError =>
  e._tag === "InvalidRequest" ? new Internal({ message: `session ${session} cannot be read: ${e.message}`, retryable: false }) : e
