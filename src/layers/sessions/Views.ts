/**
 * What reads of a released session need of its state, kept small and apart from the state: its
 * status, its last folded sequence and its transcript's length after each change. An Events page
 * needs the transcript's length at its cursor (a `transcript_delta` that keeps fewer messages is
 * public), and a status GET the status; the whole state (its transcript, kv and keys) is for turns
 * and the transcript route. A released session's state larger than the projection cache's share
 * was rebuilt (its checkpoint read and parsed whole) by every page and GET: seconds of main-thread
 * work per page for a session of a few hundred MB.
 *
 * A view is a prefix of the journal: the journal only grows, so a view stays true of the records
 * it covers, and a read folds on what came after it. It is taken when a cell is released, and
 * dropped when the session is deleted or its cell breaks. All views together hold at most
 * `maxBytes` (VIEW_BYTES each plus their length pairs), least recently kept dropped first.
 */
import type { SessionId } from "../../domain/Ids.js"
import type { Lengths } from "../../domain/Lengths.js"
import type { SessionState, SessionStatus } from "../../domain/Projection.js"

/** Bytes. One view besides its length pairs: the object, its map entry and the session id. */
export const VIEW_BYTES = 256
/** Bytes. One (sequence, length) pair of a view's transcript lengths. */
const LENGTH_PAIR_BYTES = 16

export interface View {
  readonly status: SessionStatus | "none"
  readonly lastSequence: number
  readonly transcriptLengths: Lengths
}

export const viewOf = (state: SessionState): View => ({
  status: state.status,
  lastSequence: state.lastSequence,
  transcriptLengths: state.transcriptLengths
})

export class Views {
  private readonly views = new Map<SessionId, { readonly view: View; readonly bytes: number }>()
  private total = 0

  constructor(private readonly maxBytes: number) {}

  /** Views kept. */
  get size() {
    return this.views.size
  }

  sessions(): IterableIterator<SessionId> {
    return this.views.keys()
  }

  get(session: SessionId): View | undefined {
    return this.views.get(session)?.view
  }

  keep(session: SessionId, state: SessionState) {
    this.forget(session)
    const bytes = VIEW_BYTES + state.transcriptLengths.size * LENGTH_PAIR_BYTES
    if (bytes > this.maxBytes) return
    this.views.set(session, { view: viewOf(state), bytes })
    this.total += bytes
    for (const [oldest] of this.views) {
      if (this.total <= this.maxBytes) break
      this.forget(oldest)
    }
  }

  forget(session: SessionId) {
    const kept = this.views.get(session)
    if (kept === undefined) return
    this.views.delete(session)
    this.total -= kept.bytes
  }
}
