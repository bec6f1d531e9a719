/**
 * The refusal a session operation answers for each journal error (`fromJournal`): what the
 * registry, the turns, the lifecycle and the reads fail with when the journal under them does.
 */
import * as Refusal from "../../domain/Errors.js"
import type { JournalAppendError, JournalCorrupt, JournalReadError, JournalUnavailable, RecordRejected, SessionAlreadyExists, SessionNotFound } from "../../services/Journal.js"

export const notFound = () => new Refusal.NotFound({ message: "no such session" })

/** The refusal each journal error stands for. */
export type FromJournal<E> = E extends SessionNotFound ? Refusal.NotFound
  : E extends JournalCorrupt ? Refusal.JournalCorrupt
  : E extends JournalUnavailable ? Refusal.Overloaded
  : E extends RecordRejected ? Refusal.InvalidRequest
  : E extends SessionAlreadyExists ? Refusal.Conflict
  : Refusal.JournalWriteFailed

/** A journal error as the session operation's failure; `ambiguous` when the operation's own write may have landed. */
export const fromJournal = <E extends JournalReadError | JournalAppendError | SessionAlreadyExists>(
  e: E,
  options: { readonly ambiguous: boolean } = { ambiguous: true }
): FromJournal<E> => {
  const j = e as JournalReadError | JournalAppendError | SessionAlreadyExists
  return (
    j._tag === "SessionNotFound"
      ? notFound()
      : j._tag === "JournalCorrupt"
      ? new Refusal.JournalCorrupt({ message: j.message, details: j.details })
      : j._tag === "JournalUnavailable"
      // Nothing was read or written: whatever the operation, retrying it later is safe.
      ? new Refusal.Overloaded({ message: j.message })
      : j._tag === "RecordRejected"
      ? new Refusal.InvalidRequest({ message: j.reason })
      : j._tag === "SessionAlreadyExists"
      ? new Refusal.Conflict({ message: j.message })
      : new Refusal.JournalWriteFailed({
        message: `${j.message}; the session recovers on its next access once the disk accepts writes`,
        ...(options.ambiguous ? { details: { ambiguous: true } } : {})
      })
  ) as FromJournal<E>
}
