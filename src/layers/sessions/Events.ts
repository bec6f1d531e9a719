/**
 * Public Events read from the journal, a page at a time: at most `limit` Events and about
 * `maxBytes`; a single larger Event comes alone so the cursor always advances. The journal is
 * read in steps scaled to the Events still wanted, so a small page reads about its own frames. A page's
 * `next_cursor` is the last sequence examined, so private records between Events are never re-read.
 *
 * A cursor may be anywhere from 0 to the journal's last durable sequence — which can be ahead of
 * the actor's folded state for the moment between a commit and its fold, so the transcript length
 * a projection needs is read from the journal when the state does not reach that far. A cursor
 * past the last durable sequence is refused with that sequence, never answered empty or waited on.
 */
import { Effect } from "effect"
import { InvalidRequest } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import { stringifyKept } from "../../domain/JsonText.js"
import { PAGE_BYTES, PAGE_READ_BYTES_PER_EVENT, PAGE_READ_RECORDS_PER_EVENT } from "../../domain/Limits.js"
import { type SessionState, transcriptLengthAt } from "../../domain/Projection.js"
import { type Event, toEvent } from "../../domain/Events.js"
import { isFinalKind, type JournalRecord } from "../../domain/Records.js"
import type { JournalReadError, JournalShape } from "../../services/Journal.js"
import type { EventPage } from "../../services/Sessions.js"

const RECORDS_PER_READ = 1000

/** What reading Events needs of a folded state: how far it reaches, and its transcript's lengths (a view, Views.ts, is enough). */
export type Folded = Pick<SessionState, "lastSequence" | "transcriptLengths">

/** The transcript's length just after `record`, given its length just before. */
export const lengthAfter = (length: number, record: JournalRecord) =>
  record.kind === "transcript_delta" ? Math.min(length, record.payload.keep) + record.payload.append.length : length

/** The transcript's length just after `sequence`: from the state, or folded on from the journal. */
export const transcriptLengthThrough = Effect.fnUntraced(function*(journal: JournalShape, session: SessionId, state: Folded, sequence: number) {
  if (sequence <= state.lastSequence) return transcriptLengthAt(state, sequence)
  let length = transcriptLengthAt(state, state.lastSequence)
  let cursor = state.lastSequence
  while (cursor < sequence) {
    const records = yield* journal.read(session, { after: cursor, limit: Math.min(RECORDS_PER_READ, sequence - cursor) })
    if (records.length === 0) break
    for (const r of records) length = lengthAfter(length, r)
    cursor = records[records.length - 1]!.sequence
  }
  return length
})

/** The refusal of a cursor past `last`. */
const beyond = (after: number, last: number) =>
  new InvalidRequest({ message: `the cursor ${after} is beyond the session's last sequence ${last}`, details: { last_sequence: last } })

/** Refuses a cursor past the journal's last durable sequence; answers that sequence otherwise. */
export const checkCursor = (
  journal: JournalShape,
  session: SessionId,
  after: number
): Effect.Effect<number, JournalReadError | InvalidRequest> =>
  Effect.flatMap(journal.lastSequence(session), (last) => after > last ? Effect.fail(beyond(after, last)) : Effect.succeed(last))

export interface Page<A> {
  readonly items: Array<A>
  /** The last sequence examined. */
  readonly next: number
  /** The transcript's length just after `next`. */
  readonly length: number
  /** Whether the page holds the session's final Event (`session_ended` or `session_creation_failed`). */
  readonly ended: boolean
  /** The items' sizes, summed. */
  readonly bytes: number
}

/**
 * The public Events of the records in (`after`, `until`], each turned into an item and its size
 * by `project`, given the transcript's length just after `after`.
 */
export const readPage = <A>(...args: Parameters<typeof readPageOf<A>>): Effect.Effect<Page<A>, JournalReadError> =>
  Effect.gen(() => readPageOf(...args))

function* readPageOf<A>(
  journal: JournalShape,
  session: SessionId,
  from: { readonly after: number; readonly length: number },
  until: number,
  limits: { readonly events: number; readonly bytes: number },
  project: (e: Event) => { readonly item: A; readonly size: number }
) {
  const items: Array<A> = []
  let cursor = from.after
  let length = from.length
  let bytes = 0
  let ended = false
  // Each read asks for about what the Events still wanted take, and twice as much as the read
  // before it (PAGE_READ_BYTES_PER_EVENT): a small page reads about its own frames, not a whole
  // page's bytes. Where the reads end changes nothing of the page: each record is taken in order,
  // the page's bounds checked at each.
  let scale = 1
  while (items.length < limits.events && cursor < until) {
    const wanted = (limits.events - items.length) * scale
    scale *= 2
    const records = yield* journal.read(session, {
      after: cursor,
      limit: Math.min(RECORDS_PER_READ, until - cursor, wanted * PAGE_READ_RECORDS_PER_EVENT),
      maxBytes: Math.max(1, Math.min(limits.bytes - bytes, wanted * PAGE_READ_BYTES_PER_EVENT))
    })
    if (records.length === 0) break
    for (const r of records) {
      if (r.sequence > until) break
      const e = toEvent(session, r, length)
      if (e) {
        const { item, size } = project(e)
        if (items.length > 0 && bytes + size > limits.bytes) return { items, next: cursor, length, ended, bytes }
        items.push(item)
        bytes += size
        if (isFinalKind(e.kind)) ended = true
      }
      length = lengthAfter(length, r)
      cursor = r.sequence
      if (items.length >= limits.events) break
    }
    if (bytes >= limits.bytes) break
  }
  return { items, next: cursor, length, ended, bytes }
}

const eventSize = (e: Event) => stringifyKept(e.data).length + 64

/**
 * A page of the page route: Events after `after`, through the journal's last durable sequence.
 * A turn reading its own Events passes its opening while it is only staged (`Cell.opening`): its
 * records past the durable end follow the durable ones, and a cursor may reach them.
 */
export const readEvents = Effect.fnUntraced(function*(
  journal: JournalShape,
  session: SessionId,
  state: Folded,
  after: number,
  limit: number,
  maxBytes: number = PAGE_BYTES,
  staged: ReadonlyArray<JournalRecord> = []
) {
  const durable = yield* journal.lastSequence(session)
  const pending = staged.filter((r) => r.sequence > durable)
  const last = pending.length > 0 ? pending[pending.length - 1]!.sequence : durable
  if (after > last) return yield* Effect.fail(beyond(after, last))
  const length = yield* transcriptLengthThrough(journal, session, state, after)
  const page = yield* readPage(journal, session, { after, length }, durable, { events: limit, bytes: maxBytes }, (e) => ({
    item: e,
    size: eventSize(e)
  }))
  const events = page.items
  let next = page.next
  // The staged records follow only a page that reached the durable end.
  if (pending.length === 0 || next < durable) return { events, next_cursor: next }
  let bytes = page.bytes
  let transcriptLength = page.length
  for (const r of pending) {
    if (r.sequence <= after) continue
    if (events.length >= limit) break
    const e = toEvent(session, r, transcriptLength)
    if (e) {
      const size = eventSize(e)
      if (events.length > 0 && bytes + size > maxBytes) break
      events.push(e)
      bytes += size
    }
    transcriptLength = lengthAfter(transcriptLength, r)
    next = r.sequence
  }
  return { events, next_cursor: next } satisfies EventPage
})
