/**
 * The journal core: the Journal contract over any store (Store.ts). Everything but keeping the
 * records is here, once: validation before anything is queued, sequencing and group commit
 * (Writer.ts), the recent tails, live subscribers, sticky write failures, and which sessions are
 * open. A session is opened (the store validates it, a torn final write repaired) on its first
 * access; concurrent first accesses share one open; past `maxHandles` the least recently used
 * sessions with nothing in flight are dropped from memory. A damaged session is refused on its own.
 *
 * Over a store several owners share (one with `claim`, Store.ts), the core claims each session at
 * its first open and keeps that claim for as long as it runs, through the session being dropped
 * from memory and opened again: all its commits carry it, so once another owner claims the
 * session they are refused (a sticky write failure here) and never land after the other owner's
 * recovery. The core never claims a session again by itself; it lets go of a claim only when the
 * session is deleted.
 *
 * Debris (Store.ts): over a store with `sweep`, an open that finds no record of a session no
 * request of this process is creating (from its `create` until an open finds a record of it) is
 * a creation a crash cut off: the store removes it, and the session is not found. The open is the
 * session's only one meanwhile (a create of its id is refused, other accesses share the open), so
 * nothing of this process's can be under way in what is removed.
 */
import { Deferred, Effect, Exit, FiberId, FiberRef, type Scope } from "effect"
import type { SessionId } from "../../domain/Ids.js"
import type { JournalRecord } from "../../domain/Records.js"
import { OPEN_JOURNAL_BYTES, OPEN_JOURNAL_HANDLES } from "../../domain/Limits.js"
import {
  type JournalAppendError,
  type JournalReadError,
  type JournalShape,
  JournalUnavailable,
  JournalWriteFailed,
  type Staged,
  RecordRejected,
  SessionAlreadyExists,
  SessionNotFound,
  type StoredJournal
} from "../../services/Journal.js"
import { type Prepared, prepareEntries } from "./Encode.js"
import type { JournalStore } from "./Store.js"
import { Listing } from "./Listing.js"
import { Subscribers } from "./Subscribers.js"
import { defaultWriterLimits, HANDLE_EVICTED, OpenSession, type StagedRecords, Writer, type WriterLimits } from "./Writer.js"

export interface CoreOptions {
  readonly limits?: Partial<WriterLimits>
  /** Opened journals kept in memory (default OPEN_JOURNAL_HANDLES). */
  readonly maxHandles?: number
  /**
   * Heap the opened journals kept in memory may hold together (OPEN_JOURNAL_BYTES each, plus what
   * the store says it keeps of each: `JournalStore.weight`), besides their recent tails (counted
   * by the writer); past it the least recently used idle ones are dropped. Default: no bound.
   */
  readonly maxHandleBytes?: number
  /** Sessions the in-memory listing index holds at most (Listing.ts); default: no bound. */
  readonly maxListed?: number
}

/**
 * The records `prepared` became when staged (the last of the session's staged records, after any
 * staged before them, which they joined): their sequences, and the staged records' time.
 */
const stagedRecords = <S>(open: OpenSession<S>, staged: StagedRecords, prepared: ReadonlyArray<Prepared>): Array<JournalRecord> => {
  let sequence = open.lastSequence + staged.prepared.length - prepared.length
  return prepared.map((p): JournalRecord => ({
    sequence: ++sequence,
    recorded_at_ms: staged.recordedAt,
    kind: p.kind,
    payload: JSON.parse(p.jsonText)
  }))
}

export const make = <S>(store: JournalStore<S>, options: CoreOptions = {}): Effect.Effect<JournalShape, never, Scope.Scope> =>
  Effect.gen(function*() {
    const hub = new Subscribers()
    // The clock of the fiber that builds the journal, read directly on the hot paths (a round's
    // and a staged opening's time), as the test clock when a test builds it.
    const clock = yield* Effect.clock
    // Rounds start on the scheduler of the fiber that builds the journal, as its fibers run.
    const scheduler = yield* FiberRef.get(FiberRef.currentScheduler)
    const priority = yield* FiberRef.get(FiberRef.currentSchedulingPriority)
    const writer = new Writer(store, hub, { ...defaultWriterLimits, ...options.limits }, clock, (task) => scheduler.scheduleTask(task, priority))
    const handles = new Map<string, Deferred.Deferred<OpenSession<S>, JournalReadError>>()
    const maxHandles = options.maxHandles ?? OPEN_JOURNAL_HANDLES
    const maxHandleBytes = options.maxHandleBytes ?? Number.POSITIVE_INFINITY
    /** The heap each opened session was last weighed at (`weigh`), and their total. */
    const weights = new Map<string, number>()
    let handleBytes = 0
    const weigh = (o: OpenSession<S>) => {
      const w = OPEN_JOURNAL_BYTES + (store.weight?.(o.state) ?? 0)
      handleBytes += w - (weights.get(o.session) ?? 0)
      weights.set(o.session, w)
    }
    const unweigh = (session: string) => {
      handleBytes -= weights.get(session) ?? 0
      weights.delete(session)
    }
    const creating = new Set<string>()
    const listing = new Listing(store.list, options.maxListed ?? Number.POSITIVE_INFINITY, store.listable)
    /** A sweep's answer, the session gone from the listing when it removed it. */
    const swept = (session: SessionId) => Effect.tap(store.sweep!(session), (removed) => void (removed && listing.removed(session)))
    /**
     * Sessions this core created that may still hold no record (the creator's first append under
     * way): never debris. Dropped once an open finds a record, or the session is deleted.
     */
    const fresh = new Set<string>()
    /** A session an open found no record of is debris unless this process is creating it. */
    const mayBeDebris = (session: string) => store.sweep !== undefined && !creating.has(session) && !fresh.has(session)
    /** Sessions being deleted: no new open may start, so nothing of them lingers in memory. */
    const removing = new Set<string>()
    /** This core's claim on each session it has opened (stores with `claim` only). */
    const claims = new Map<string, number>()
    const claimOf = (session: SessionId): Effect.Effect<number | undefined, SessionNotFound> => {
      if (store.claim === undefined) return Effect.succeed(undefined)
      const held = claims.get(session)
      if (held !== undefined) return Effect.succeed(held)
      return Effect.tap(store.claim(session), (generation) => void claims.set(session, generation))
    }

    // Close order: refuse new appends, let the loop drain what was queued, then close the store.
    yield* Effect.addFinalizer(() => Effect.zipRight(writer.refuseQueued, store.close))
    const loop = yield* Effect.forkScoped(writer.run)
    yield* Effect.addFinalizer(() => Effect.zipRight(writer.close, loop.await))

    /** Opened sessions, for a lookup without waiting on the shared open; least recently used first. */
    const ready = new Map<string, Effect.Effect<OpenSession<S>>>()
    const opens = new Map<string, OpenSession<S>>()
    const letGo = (o: OpenSession<S>) => {
      writer.forget(o)
      return store.release(o.state)
    }
    /**
     * Past maxHandles or maxHandleBytes, drops the least recently used sessions with no append in
     * flight. `opened`, the one just opened, which its caller is about to use, only past the count
     * (as before the bytes were counted): a journal alone past the bytes dropped at each open would
     * send an append on it to open it again, and again.
     */
    const dropIdle = (opened: string) => Effect.suspend(() => {
      if (ready.size <= maxHandles && handleBytes <= maxHandleBytes) return Effect.void
      const victims: Array<OpenSession<S>> = []
      let bytes = handleBytes
      for (const session of ready.keys()) {
        if (ready.size - victims.length <= maxHandles && bytes <= maxHandleBytes) break
        const o = opens.get(session)
        if (o && o.inflight === 0 && (session !== opened || ready.size - victims.length > maxHandles)) {
          victims.push(o)
          bytes -= weights.get(session) ?? 0
        }
      }
      for (const o of victims) {
        if (o.lastSequence > 0) fresh.delete(o.session)
        o.evicted = true
        ready.delete(o.session)
        opens.delete(o.session)
        handles.delete(o.session)
        unweigh(o.session)
      }
      return Effect.forEach(victims, letGo, { discard: true })
    })
    const drop = (session: string) => {
      handles.delete(session)
      ready.delete(session)
      opens.delete(session)
      unweigh(session)
    }
    /** Marks an opened session most recently used (last), so the oldest idle ones are dropped first. */
    const touch = (open: OpenSession<S>) => {
      const known = ready.get(open.session)
      if (known) {
        ready.delete(open.session)
        ready.set(open.session, known)
        // Its read index grows with its appends.
        weigh(open)
      }
      return open
    }
    const openOf = (session: SessionId): Effect.Effect<OpenSession<S>, JournalReadError> =>
      Effect.suspend(() => {
        // Nor is one this process is still creating there for anyone but its creator, who opens it
        // once its create has returned: a handle opened half made would lack its first segment.
        if (removing.has(session) || creating.has(session)) return Effect.fail(new SessionNotFound({ session }))
        const known = ready.get(session)
        if (known) {
          // Most recently used last, so the oldest idle sessions are dropped first.
          ready.delete(session)
          ready.set(session, known)
          return known
        }
        const existing = handles.get(session)
        if (existing) return Deferred.await(existing)
        const opened = Deferred.unsafeMake<OpenSession<S>, JournalReadError>(FiberId.none)
        handles.set(session, opened)
        return store.open(session).pipe(
          // No journal: what a crash left of its directory, if anything, is removed.
          Effect.tapErrorTag("SessionNotFound", () => mayBeDebris(session) ? swept(session) : Effect.void),
          Effect.flatMap((o) => {
            if (o.lastSequence > 0) fresh.delete(session)
            else if (mayBeDebris(session)) {
              return Effect.flatMap(swept(session), (removed) =>
                removed ? Effect.zipRight(store.release(o.state), Effect.fail(new SessionNotFound({ session }))) : Effect.succeed(o))
            }
            return Effect.succeed(o)
          }),
          Effect.flatMap((o) =>
            Effect.map(claimOf(session), (generation) => {
              const open = new OpenSession(session, o.state, o.lastSequence, o.lastRecordedAtMs, generation)
              writer.seed(open, o.recent)
              return open
            })
          ),
          Effect.exit,
          Effect.tap((exit) => {
            if (Exit.isFailure(exit)) handles.delete(session)
            else {
              ready.set(session, Effect.succeed(exit.value))
              opens.set(session, exit.value)
              weigh(exit.value)
            }
            return Effect.zipRight(Deferred.done(opened, exit), dropIdle(session))
          }),
          // One caller going away must not abandon an open others are waiting on.
          Effect.uninterruptible,
          Effect.zipRight(Deferred.await(opened))
        )
      })

    const journal: JournalShape = {
      create: (session) =>
        Effect.suspend(() => {
          if (creating.has(session) || handles.has(session)) return Effect.fail(new SessionAlreadyExists({ session }))
          creating.add(session)
          return store.create(session).pipe(
            Effect.tap(() => {
              fresh.add(session)
              listing.added(session)
            }),
            // A create that failed left nothing (the store removed what it made); one refused as taken, the session that has it.
            Effect.tapError((e) => Effect.sync(() => e._tag === "SessionAlreadyExists" ? undefined : listing.removed(session))),
            Effect.ensuring(Effect.sync(() => creating.delete(session)))
          )
        }),
      // Debris is no session: a use recorded by a creation a crash cut off names nothing (Store.ts).
      exists: (session) =>
        Effect.flatMap(store.exists(session), (stored) =>
          !stored || store.isDebris === undefined || !mayBeDebris(session) || opens.has(session)
            ? Effect.succeed(stored)
            : Effect.map(store.isDebris(session), (debris) => !debris)),
      list: store.list,
      listPage: (after, limit) => listing.page(after, limit),
      append: (session, entries, opts) =>
        Effect.suspend(() => {
          const prepared = prepareEntries(entries)
          if (prepared instanceof RecordRejected) return Effect.fail(prepared)
          const lane = opts?.lane ?? "latency"
          const attempt: Effect.Effect<ReadonlyArray<number>, JournalAppendError> = Effect.suspend(() => {
            // An opened session is taken as it is; otherwise wait for (or start) its open.
            const open = opens.get(session)
            const queued = open && !removing.has(session) && ready.has(session)
              ? writer.append(touch(open), prepared, lane)
              : Effect.flatMap(openOf(session), (o) => writer.append(o, prepared, lane))
            // The session was dropped from memory between lookup and queueing: use a fresh open.
            return Effect.catchIf(queued, (e) => e === HANDLE_EVICTED, () => attempt)
          })
          return attempt
        }),
      enqueue(this: JournalShape, session, entries, done, opts) {
        // A journal decorating this one's `append` (spread, with its own) must see every append.
        if (this.append !== journal.append) return false
        // Only an opened session is taken at once; an open to wait for is `append`'s.
        const open = opens.get(session)
        if (!open || removing.has(session) || !ready.has(session)) return false
        const prepared = prepareEntries(entries)
        if (prepared instanceof RecordRejected) {
          done(Exit.fail(prepared))
          return true
        }
        return writer.enqueue(touch(open), prepared, opts?.lane ?? "latency", done, opts?.sequenced)
      },
      stage: (session, entries) =>
        Effect.suspend(() => {
          const prepared = prepareEntries(entries)
          if (prepared instanceof RecordRejected) return Effect.fail(prepared)
          const attempt: Effect.Effect<Staged, JournalAppendError> = Effect.flatMap(
            openOf(session),
            (open) => {
              const staged = writer.stage(touch(open), prepared, clock.unsafeCurrentTimeMillis())
              // Something in flight: the records are appended, as any append would be.
              if (staged === undefined) {
                return Effect.map(writer.append(open, prepared, "latency"), (sequences): Staged => ({ _tag: "Appended", sequences }))
              }
              if (staged instanceof JournalWriteFailed) return Effect.fail(staged)
              return Effect.succeed<Staged>({ _tag: "Staged", records: stagedRecords(open, staged, prepared) })
            }
          )
          // The session was dropped from memory between lookup and staging: use a fresh open.
          const retried: Effect.Effect<Staged, JournalAppendError> = Effect.catchIf(attempt, (e) => e === HANDLE_EVICTED, () => retried)
          return retried
        }),
      stageNow(this: JournalShape, session, entries) {
        // A journal decorating this one's `stage` (spread, with its own) must see every stage.
        if (this.stage !== journal.stage) return undefined
        const open = opens.get(session)
        if (!open || removing.has(session) || !ready.has(session)) return undefined
        const prepared = prepareEntries(entries)
        if (prepared instanceof RecordRejected) return undefined
        const staged = writer.stage(touch(open), prepared, clock.unsafeCurrentTimeMillis())
        if (staged === undefined || staged instanceof JournalWriteFailed) return undefined
        return stagedRecords(open, staged, prepared)
      },
      flush: (session) =>
        Effect.suspend(() => {
          // Only an open session can have records staged (staging keeps it open).
          const open = opens.get(session)
          if (!open || open.staged === undefined || removing.has(session)) return Effect.void
          return Effect.asVoid(writer.append(open, [], "latency"))
        }),
      read: (session, { after, limit, maxBytes }) =>
        Effect.flatMap(openOf(session), (open) => {
          const last = open.lastSequence
          if (after >= last || limit <= 0) return Effect.succeed([])
          const fromMemory = open.tail.read(after, limit, maxBytes)
          return fromMemory ? Effect.succeed(fromMemory) : store.read(open.state, after, last, limit, maxBytes)
        }),
      remove: (session) =>
        Effect.gen(function*() {
          if (removing.has(session)) return yield* Effect.fail(new SessionNotFound({ session }))
          // From here no open starts; one already under way is awaited below and then dropped.
          removing.add(session)
          fresh.delete(session)
          const opened = handles.get(session)
          drop(session)
          let state: S | undefined
          if (opened) {
            const open = yield* Effect.option(Deferred.await(opened))
            if (open._tag === "Some") {
              open.value.broken = new JournalWriteFailed({ session, reason: "the session was deleted" })
              writer.forget(open.value)
              state = open.value.state
            }
          }
          // Gone (or not): later opens find out from the store itself.
          // A delete is a write: under this core's claim, taken now if it never opened the session.
          yield* claimOf(session).pipe(
            Effect.flatMap((generation) => store.remove(session, state, generation)),
            Effect.tap(() => {
              claims.delete(session)
              listing.removed(session)
            }),
            Effect.ensuring(Effect.sync(() => removing.delete(session)))
          )
        }).pipe(Effect.uninterruptible),
      reset: (session) =>
        Effect.suspend(() => {
          const open = opens.get(session)
          if (open) writer.dropStaged(open)
          if (!open || !open.broken) return Effect.void
          // Appends still queued on it are refused by the writer: it is broken.
          drop(session)
          return letGo(open)
        }),
      stored: (session) =>
        Effect.suspend(() => {
          const inMemory = (state: S): StoredJournal => {
            const segments = store.segments?.(state)
            return { bytes: store.size(state), open: true, ...(segments === undefined ? {} : { segments }) }
          }
          const open = opens.get(session)
          if (open !== undefined && !removing.has(session)) return Effect.succeed(inMemory(open.state))
          const opened = Effect.map(openOf(session), (o) => inMemory(o.state))
          if (store.storedBytes === undefined) return opened
          return Effect.flatMap(store.storedBytes(session), (segments): Effect.Effect<StoredJournal, JournalReadError> =>
            segments === undefined
              ? opened
              : Effect.succeed({ bytes: segments.reduce((n, s) => n + s.bytes, 0), open: false, segments }))
        }),
      ...(store.readBytes === undefined ? {} : { readBytes: (session: SessionId, after: number) => Effect.map(openOf(session), (o) => store.readBytes!(o.state, after)) }),
      // After a failed write that may stand all the same, the durable end is not known until a reset reopens the session.
      lastSequence: (session) =>
        Effect.flatMap(openOf(session), (o) =>
          o.outcomeUnknown
            ? Effect.fail(
              new JournalUnavailable({
                session,
                reason: `a failed write's records may stand (${o.broken?.reason ?? "a failed write"}): its outcome is not known`,
                why: "outcome_unknown"
              })
            )
            : Effect.succeed(o.lastSequence)),
      size: (session) =>
        Effect.suspend(() => {
          const open = opens.get(session)
          return open !== undefined && !removing.has(session)
            ? Effect.succeed(store.size(open.state))
            : Effect.map(openOf(session), (o) => store.size(o.state))
        }),
      subscribe: (session) => Effect.flatMap(openOf(session), (o) => hub.subscribe(session, o.lastSequence))
    }
    return journal
  })
