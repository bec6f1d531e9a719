/**
 * Pages of public Events read from the journal: at most `limit` Events and about PAGE_BYTES of
 * frames; a single larger Event comes alone so the cursor always advances. `next_cursor` is the
 * last sequence examined, so private records between Events are never re-read.
 */
import { Chunk, Effect, Option, Stream } from "effect"
import type { SessionId } from "../../domain/Ids.js"
import { PAGE_BYTES, PAGE_EVENTS } from "../../domain/Limits.js"
import { eventsOf, type Event, transcriptLengthAt, type SessionState } from "../../domain/Projection.js"
import type { JournalRecord } from "../../domain/Records.js"
import type { JournalReadError, JournalShape, SubscriberLagged } from "../../services/Journal.js"
import type { EventPage } from "../../services/Sessions.js"

const RECORDS_PER_READ = 1000

export const readEvents = (
  journal: JournalShape,
  session: SessionId,
  state: SessionState,
  after: number,
  limit: number,
  maxBytes: number = PAGE_BYTES
): Effect.Effect<EventPage, JournalReadError> =>
  Effect.gen(function*() {
    const events: Array<Event> = []
    let cursor = after
    let length = transcriptLengthAt(state, after)
    let bytes = 0
    while (events.length < limit && cursor < state.lastSequence) {
      const records = yield* journal.read(session, {
        after: cursor,
        limit: RECORDS_PER_READ,
        maxBytes: Math.max(1, maxBytes - bytes)
      })
      if (records.length === 0) break
      for (const r of records) {
        const [e] = eventsOf(session, [r], length)
        if (r.kind === "transcript_delta") length = Math.min(length, r.payload.keep) + r.payload.append.length
        if (e) {
          const size = JSON.stringify(e.data).length + 64
          if (events.length > 0 && bytes + size > maxBytes) return { events, next_cursor: cursor }
          events.push(e)
          bytes += size
        }
        cursor = r.sequence
        if (events.length >= limit) break
      }
      if (bytes >= maxBytes) break
    }
    return { events, next_cursor: cursor }
  })

/**
 * Catch-up then live: pages from the journal up to the snapshot, then the subscribed feed (which
 * was registered before the snapshot was taken), skipping what catch-up already delivered.
 * Ends after `session_ended`.
 */
export const followEvents = <E>(
  journal: JournalShape,
  session: SessionId,
  snapshot: SessionState,
  after: number,
  feed: Stream.Stream<JournalRecord, SubscriberLagged>,
  mapError: (e: JournalReadError) => E
): Stream.Stream<Event, SubscriberLagged | E> => {
  let cursor = after
  const catchUp = Stream.paginateChunkEffect(after, (from) =>
    readEvents(journal, session, snapshot, from, PAGE_EVENTS).pipe(
      Effect.mapError(mapError),
      Effect.map((page) => {
        cursor = Math.max(cursor, page.next_cursor)
        const done = page.next_cursor >= snapshot.lastSequence || page.next_cursor === from
        return [Chunk.fromIterable(page.events), done ? Option.none() : Option.some(page.next_cursor)] as const
      })
    ))
  const live = Stream.suspend(() => {
    let length = transcriptLengthAt(snapshot, cursor)
    return feed.pipe(
      Stream.filter((r) => r.sequence > cursor),
      Stream.mapConcat((r) => {
        const events = eventsOf(session, [r], length)
        if (r.kind === "transcript_delta") length = Math.min(length, r.payload.keep) + r.payload.append.length
        cursor = r.sequence
        return events
      })
    )
  })
  // An ended session has nothing more to follow: catch up, then stop.
  return Stream.concat(catchUp, snapshot.status === "ended" ? Stream.empty : live).pipe(
    Stream.takeUntil((e) => e.kind === "session_ended")
  )
}
