/**
 * Pages of public Events read from the journal: at most `limit` Events and about PAGE_BYTES of
 * frames; a single larger Event comes alone so the cursor always advances. `next_cursor` is the
 * last sequence examined, so private records between Events are never re-read.
 */
import { Effect } from "effect"
import type { SessionId } from "../../domain/Ids.js"
import { PAGE_BYTES } from "../../domain/Limits.js"
import { eventsOf, type Event, transcriptLengthAt, type SessionState } from "../../domain/Projection.js"
import type { JournalReadError, JournalShape } from "../../services/Journal.js"
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
