/**
 * The sessions a journal holds, in order, kept in memory once listed: a page of `GET /v1/sessions`
 * is a binary search and a slice, where every page read and sorted the whole sessions directory
 * (a walk of 20,000 sessions took 23 s, 3.7 times the time of 10,000).
 *
 * The index is built from the store's own listing on the first page, and kept true by the journal
 * core's creates, removes and sweeps (Core.ts), which are the only ways a session comes or goes
 * while the store is this process's (Store.ts). Those made while the first listing is read are
 * replayed on it once it is in. Held only while it has at most `maxIds` sessions (about
 * LISTED_ID_BYTES each): past that every page lists the store again, as before.
 */
import { Deferred, Effect, Exit, FiberId } from "effect"
import type { SessionId } from "../../domain/Ids.js"
import type { JournalListError } from "../../services/Journal.js"

/** The first index in `ids` (sorted) whose id is greater than `after`. */
const above = (ids: ReadonlyArray<string>, after: string): number => {
  let lo = 0
  let hi = ids.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (ids[mid]! <= after) lo = mid + 1
    else hi = mid
  }
  return lo
}

const insert = (ids: Array<SessionId>, session: SessionId) => {
  const at = above(ids, session)
  if (at > 0 && ids[at - 1] === session) return
  ids.splice(at, 0, session)
}

const remove = (ids: Array<SessionId>, session: SessionId) => {
  const at = above(ids, session) - 1
  if (at >= 0 && ids[at] === session) ids.splice(at, 1)
}

type Change = readonly [added: boolean, session: SessionId]

export class Listing {
  private ids: Array<SessionId> | undefined
  private building: Deferred.Deferred<ReadonlyArray<SessionId>, JournalListError> | undefined
  private changes: Array<Change> = []

  constructor(
    private readonly list: Effect.Effect<ReadonlyArray<SessionId>, JournalListError>,
    private readonly maxIds: number,
    /** Whether the store lists a session of this name (the file store lists only well-formed ids). */
    private readonly listable: (session: SessionId) => boolean = () => true
  ) {}

  /** Sessions indexed now (0 when none is held). */
  get size() {
    return this.ids?.length ?? 0
  }

  added(session: SessionId) {
    this.change([true, session])
  }

  removed(session: SessionId) {
    this.change([false, session])
  }

  private change(change: Change) {
    if (!this.listable(change[1])) return
    if (this.building !== undefined) this.changes.push(change)
    else if (this.ids !== undefined) {
      apply(this.ids, change)
      if (this.ids.length > this.maxIds) this.ids = undefined
    }
  }

  /** Up to `limit` sessions after `after`, in order. */
  page(after: SessionId | undefined, limit: number): Effect.Effect<ReadonlyArray<SessionId>, JournalListError> {
    return Effect.map(this.sorted(), (ids) => {
      const from = after === undefined ? 0 : above(ids, after)
      return ids.slice(from, from + limit)
    })
  }

  private sorted(): Effect.Effect<ReadonlyArray<SessionId>, JournalListError> {
    return Effect.suspend(() => {
      if (this.ids !== undefined) return Effect.succeed(this.ids)
      if (this.building !== undefined) return Deferred.await(this.building)
      const building = Deferred.unsafeMake<ReadonlyArray<SessionId>, JournalListError>(FiberId.none)
      this.building = building
      this.changes = []
      return this.list.pipe(
        Effect.exit,
        Effect.map((exit) => {
          this.building = undefined
          const changes = this.changes
          this.changes = []
          if (Exit.isFailure(exit)) return exit
          const ids = [...exit.value].sort()
          for (const c of changes) apply(ids, c)
          if (ids.length <= this.maxIds) this.ids = ids
          return Exit.succeed<ReadonlyArray<SessionId>>(ids)
        }),
        Effect.tap((exit) => Deferred.done(building, exit)),
        Effect.uninterruptible,
        Effect.flatten
      )
    })
  }
}

const apply = (ids: Array<SessionId>, [added, session]: Change) => (added ? insert(ids, session) : remove(ids, session))
