/**
 * Live feeds: one per followed session, shared by every SSE subscriber of that session (Tap.ts).
 *
 * - A feed holds the session's one journal subscription, tracks the transcript length once, and
 *   encodes each commit's public Events as SSE frames once; every subscriber is pushed the same
 *   bytes, so a subscriber costs about a socket write per commit. The feed opens with the
 *   session's first subscriber and closes with its last.
 * - Before a stream is answered: the session is opened (404, 500 journal_corrupt, recovery), the
 *   cursor checked against the last durable sequence (400 with it), a subscriber slot taken
 *   (503 beyond BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION or BRAIN_SSE_MAX_SUBSCRIBERS), and the first
 *   catch-up page read (a corrupt journal is a 500, not a 200 that ends at once). The slot is
 *   held as long as the response: until it has been sent, or its client has gone.
 * - If the journal cuts a feed off (it fell behind: only a starved process does), each of its
 *   subscribers is cut off with `stream_lagged`, and the next subscriber opens a fresh feed.
 * - A fan-out costs each subscriber a socket write (a system call) per commit, and a turn commits
 *   an Event at a time. A fan-out that took t ms (SSE_FAN_OUT_PACE_MIN_MS or more: many
 *   subscribers) paces the feed: the commits of the next min(3t, SSE_FAN_OUT_PACE_MAX_MS) are
 *   gathered and go out together, one write per subscriber. So one session's subscribers take at
 *   most about a quarter of the main thread, whatever their number; each still gets every Event once, in
 *   order, the same bytes as every other subscriber. What no backlog holds at once goes in parts
 *   that one does (whole Events), so a subscriber's backlog is bounded as it is commit by commit.
 *   The cost is measured in wall time (it is the time the main thread spent), not on the Clock
 *   (`Pacing`: tests give their own).
 * - While a feed is open, one fiber sends each of its subscribers a heartbeat comment every
 *   BRAIN_SSE_HEARTBEAT_MS (nothing runs for sessions nobody follows).
 * - Catch-up pages are read SSE_CATCH_UP_READS at a time in the whole process, each about
 *   SSE_CATCH_UP_BYTES and at most BRAIN_SSE_BACKLOG_BYTES (a larger Event comes alone): decoding
 *   large Events is main-thread work, and readers reconnecting by the dozen must not hold the
 *   other sessions' requests up for seconds (docs/operations.md, "SSE streams").
 */
import { Readable } from "node:stream"
import { Deferred, Duration, Effect, ExecutionStrategy, Exit, FiberId, FiberSet, Option, Scope, Stream } from "effect"
import { Internal, type JournalCorrupt, type NotFound, Overloaded, type SessionStorageError } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import { Permits } from "../../domain/Permits.js"
import { sseHeldPageBytes } from "../MemoryBudget.js"
import { HeldPages } from "./HeldPages.js"
import {
  PAGE_EVENTS,
  SSE_CATCH_UP_BYTES,
  SSE_FAN_OUT_PACE_MAX_MS,
  SSE_FAN_OUT_PACE_MIN_MS,
  SSE_CATCH_UP_READS,
  SSE_WRITE_BYTES,
  SUBSCRIBER_BACKLOG_RECORDS
} from "../../domain/Limits.js"
import { type SessionState } from "../../domain/Projection.js"
import { toEvent } from "../../domain/Events.js"
import { isFinalKind, type JournalRecord } from "../../domain/Records.js"
import type { ModelDelta } from "../../domain/Model.js"
import type { JournalReadError, JournalShape, SubscriberLagged } from "../../services/Journal.js"
import { type ServerConfigShape, sessionStreams } from "../../services/ServerConfig.js"
import type { Following, FollowError } from "../../services/Sessions.js"
import { checkCursor, type Folded, lengthAfter, readPage, transcriptLengthThrough } from "./Events.js"
import { deltaFrame, encode, eventFrame, frameParts } from "./SseFrames.js"
import { type CatchUpPage, Tap, type TapLimits } from "./Tap.js"

interface Feed {
  readonly session: SessionId
  /** The last sequence published; everything up to it is in the journal. */
  through: number
  /** The transcript's length just after `through`. */
  length: number
  readonly taps: Set<Tap<FollowError>>
  readonly scope: Scope.CloseableScope
  /** The journal cut it off; nothing more will be published. */
  failed: boolean
  /** Deltas of a model call whose `model_call_started` the feed has not published yet, and their bytes. */
  early: Array<{ readonly sequence: number; readonly bytes: Uint8Array }>
  earlyBytes: number
  /** Records committed while the feed is paced, not yet published (all after `through`). */
  held: Array<JournalRecord>
  /** Until when (`Pacing.now`) commits are held, after a costly fan-out. */
  pacedUntil: number
  /** Cancels the publishing of what is held once the pace is over; undefined when nothing waits. */
  pause: (() => void) | undefined
}

/**
 * How a feed measures what a fan-out cost and waits out its pace. The server's (`wallPacing`) is
 * the wall clock and a timer: the cost is the main thread's time, which the Clock does not see.
 * Tests give their own, to say what a fan-out costs and when a pause is over.
 */
export interface Pacing {
  /** Milliseconds, monotonic. */
  readonly now: () => number
  /** Runs `f` once the socket writes a fan-out queued have been made. */
  readonly afterWrites: (f: () => void) => void
  /** Runs `f` in `ms` milliseconds; what it answers cancels that. */
  readonly after: (ms: number, f: () => void) => () => void
}

export const wallPacing: Pacing = {
  now: () => performance.now(),
  // A response's writes reach its socket in a tick queued by its write (Node corks them until
  // then); this tick comes after all of them, so the cost counts the system calls too.
  afterWrites: (f) => process.nextTick(f),
  after: (ms, f) => {
    const timer = setTimeout(f, ms)
    return () => clearTimeout(timer)
  }
}

/**
 * Milliseconds the commits after a fan-out that took `costMs` wait to go out together: none after
 * a cheap one, else three times as long as it took (the fan-out's share of the main thread at most
 * a quarter), at most SSE_FAN_OUT_PACE_MAX_MS.
 */
export const paceAfter = (costMs: number): number =>
  costMs < SSE_FAN_OUT_PACE_MIN_MS ? 0 : Math.min(3 * costMs, SSE_FAN_OUT_PACE_MAX_MS)

/** Bytes. Deltas held for a call whose start the feed has not yet published (it is a moment behind). */
const EARLY_DELTA_BYTES = 256 * 1024

interface Entry {
  /** Subscribers holding or opening this feed. */
  users: number
  readonly feed: Deferred.Deferred<Feed, FollowError>
  /** The feed, once open. */
  opened: Feed | undefined
}

export interface LiveFeeds {
  /**
   * The sink for the live deltas of the model call started at `sequence`: each is encoded once and
   * offered to the session's live subscribers; with none, it costs nothing.
   */
  readonly delta: (session: SessionId, sequence: number) => (delta: ModelDelta) => void
  readonly follow: (
    session: SessionId,
    after: number,
    snapshot: Effect.Effect<SessionState, SessionStorageError>
  ) => Effect.Effect<Following, FollowError, Scope.Scope>
}

/** Records read at most, per open feed, for what its stream is sent before the feeds close. */
const FINAL_RECORDS = 1000

const internal = (defect: unknown) =>
  new Internal({ message: `reading the journal failed unexpectedly: ${String(defect)}`, retryable: false })

const tooMany = (setting: string, limit: number) =>
  new Overloaded({ message: `${setting} (${limit}) SSE streams are open already; retry later` })

export const make = (
  journal: JournalShape,
  config: Pick<
    ServerConfigShape,
    | "sseMaxSubscribersPerSession"
    | "sseMaxSubscribers"
    | "maxConnections"
    | "reservedConnections"
    | "sseBacklogBytes"
    | "sseHeartbeatMs"
    | "sseStallMs"
    | "sseCloseGraceMs"
    | "answerBytes"
  >,
  fromJournal: (e: JournalReadError) => NotFound | JournalCorrupt | Overloaded,
  pacing: Pacing = wallPacing
): Effect.Effect<LiveFeeds, never, Scope.Scope> =>
  Effect.gen(function*() {
    const owner = yield* Effect.scope
    /** Runs the catch-up reads a socket's demand starts, in fibers these feeds own. */
    const run = yield* FiberSet.makeRuntime<never>()
    /** Catch-up reads under way in the process: the rest wait their turn. */
    const reads = new Permits(SSE_CATCH_UP_READS)
    /** Catch-up pages read and not yet taken by their sockets, in the whole process. */
    const held = new HeldPages(sseHeldPageBytes(config.answerBytes))
    const entries = new Map<SessionId, Entry>()
    /** Streams one session may hold: its setting, or its share of the readers' streams. */
    const perSession = sessionStreams(config)
    /**
     * Publishes what the feed's session has committed and the pump (a fiber of its own) has not
     * yet: a stream that stops is sent its session's last records first, the closing records of
     * the turns a stop has just closed among them. Best effort; a record published is skipped.
     */
    const caughtUp = (feed: Feed) =>
      journal.read(feed.session, { after: feed.through, limit: FINAL_RECORDS }).pipe(
        Effect.map((records) => publish(feed, records)),
        Effect.ignore
      )
    // Closed (an application disposing its runtime; a server stops its streams itself first):
    // every open stream ends as a stop ends it, with a retryable stream_error to resume by cursor.
    yield* Effect.addFinalizer(() =>
      Effect.forEach([...entries.values()], (entry) => {
        const feed = entry.opened
        if (feed === undefined || feed.taps.size === 0) return Effect.void
        return Effect.ensuring(caughtUp(feed), Effect.sync(() => {
          for (const tap of feed.taps) tap.stop()
        }))
      }, { discard: true })
    )
    let subscribers = 0
    const limits: TapLimits = {
      events: SUBSCRIBER_BACKLOG_RECORDS,
      bytes: config.sseBacklogBytes,
      writeBytes: SSE_WRITE_BYTES,
      stallMs: config.sseStallMs,
      closeMs: config.sseCloseGraceMs
    }
    /** What one catch-up page holds at most: about a read, and no more than a live backlog (a larger Event comes alone). */
    const pageBytes = Math.min(SSE_CATCH_UP_BYTES, config.sseBacklogBytes)

    /** A heartbeat comment to every subscriber of a feed, each BRAIN_SSE_HEARTBEAT_MS, while it is open. */
    const heartbeats = (feed: Feed) =>
      config.sseHeartbeatMs > 0
        ? Effect.forever(Effect.zipRight(
          Effect.sleep(Duration.millis(config.sseHeartbeatMs)),
          Effect.sync(() => {
            for (const tap of feed.taps) tap.heartbeat()
          })
        ))
        : Effect.void

    /** Publishes committed records: their frames, encoded once, to every subscriber. */
    const publish = (feed: Feed, records: Iterable<JournalRecord>): void => {
      const first = feed.through + 1
      let text = ""
      let events = 0
      let ended = false
      for (const r of records) {
        if (r.sequence <= feed.through) continue
        const e = toEvent(feed.session, r, feed.length)
        feed.length = lengthAfter(feed.length, r)
        feed.through = r.sequence
        if (e) {
          text += eventFrame(e)
          events++
          if (isFinalKind(e.kind)) ended = true
        }
      }
      if (events === 0) return
      const bytes = encode(text)
      if (bytes.length <= limits.bytes && events <= limits.events) {
        const commit = { first, last: feed.through, bytes, events, ended }
        for (const tap of feed.taps) tap.offer(commit)
      } else offerInParts(feed, first, bytes, ended)
      releaseEarly(feed)
    }

    /**
     * Offers frames that no backlog holds at once (commits gathered while the feed was paced, or
     * many in one chunk of the journal's) in parts a backlog can take, whole Events each, as the
     * commits would have come one by one: the backlog's bounds hold for them too, and an empty
     * backlog takes a part past them only when it is one Event. The parts are views of the one encoding.
     */
    const offerInParts = (feed: Feed, first: number, bytes: Uint8Array, ended: boolean) => {
      const parts = frameParts(bytes, limits.bytes, limits.events)
      let from = first
      for (let k = 0; k < parts.length; k++) {
        const final = k === parts.length - 1
        const part = parts[k]!
        const commit = { first: from, last: final ? feed.through : part.last, bytes: part.bytes, events: part.events, ended: ended && final }
        for (const tap of feed.taps) tap.offer(commit)
        from = commit.last + 1
      }
    }

    /**
     * Takes what the journal committed: published at once, unless the last fan-out was costly;
     * then held, with whatever else commits meanwhile, until its pace is over (a bounded wait, and
     * no more than a backlog's worth of records).
     */
    const gather = (feed: Feed, records: Iterable<JournalRecord>) => {
      for (const r of records) feed.held.push(r)
      if (feed.pause !== undefined) {
        if (feed.held.length >= SUBSCRIBER_BACKLOG_RECORDS) fanOut(feed)
        return
      }
      const wait = feed.pacedUntil - pacing.now()
      if (wait <= 0) return fanOut(feed)
      feed.pause = pacing.after(wait, () => fanOut(feed))
    }

    /** Publishes what is held, and sets the pace by what that cost, socket writes included. */
    const fanOut = (feed: Feed) => {
      feed.pause?.()
      feed.pause = undefined
      const records = feed.held
      feed.held = []
      if (feed.failed) return
      const start = pacing.now()
      publish(feed, records)
      pacing.afterWrites(() => {
        const cost = pacing.now() - start
        feed.pacedUntil = start + cost + paceAfter(cost)
      })
    }

    /** Offers the held deltas whose call's start is now published, in the order they came. */
    const releaseEarly = (feed: Feed) => {
      if (feed.early.length === 0 || feed.early[0]!.sequence > feed.through) return
      const ready = feed.early.filter((d) => d.sequence <= feed.through)
      feed.early = feed.early.filter((d) => d.sequence > feed.through)
      feed.earlyBytes = feed.early.reduce((n, d) => n + d.bytes.length, 0)
      for (const d of ready) for (const tap of feed.taps) tap.delta(d.bytes)
    }


    /** Opens a session's feed: subscribes, then starts where the journal is now. */
    const openFeed = (session: SessionId, state: Folded, entry: Entry) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(owner, ExecutionStrategy.sequential)
        return yield* Effect.gen(function*() {
          const records = yield* Scope.extend(journal.subscribe(session), scope)
          const through = yield* journal.lastSequence(session)
          const length = yield* transcriptLengthThrough(journal, session, state, through)
          const feed: Feed = {
            session,
            through,
            length,
            taps: new Set(),
            scope,
            failed: false,
            early: [],
            earlyBytes: 0,
            held: [],
            pacedUntil: 0,
            pause: undefined
          }
          entry.opened = feed
          yield* Scope.addFinalizer(scope, Effect.sync(() => feed.pause?.()))
          // Opening runs uninterruptibly (a slot's acquisition); the feed's fibers must not inherit that.
          yield* Effect.forkIn(Effect.interruptible(pump(feed, entry, records)), scope)
          yield* Effect.forkIn(Effect.interruptible(heartbeats(feed)), scope)
          return feed
        }).pipe(Effect.onError(() => Scope.close(scope, Exit.void)))
      }).pipe(Effect.mapError(fromJournal))

    const pump = (feed: Feed, entry: Entry, records: Stream.Stream<JournalRecord, SubscriberLagged>) =>
      Stream.runForEachChunk(records, (chunk) => Effect.sync(() => gather(feed, chunk))).pipe(
        Effect.onExit((exit) =>
          Exit.isInterrupted(exit) ? Effect.void : Effect.sync(() => {
            // Cut off: the subscribers resume by cursor, and the next one opens a fresh feed.
            if (entries.get(feed.session) === entry) entries.delete(feed.session)
            feed.failed = true
            for (const tap of feed.taps) tap.cutOff("the session's live feed fell behind the journal")
          })
        )
      )

    /** Takes a subscriber slot on the session's feed, opening the feed for the first one. */
    const admit = (session: SessionId, state: Folded) =>
      Effect.suspend(() => {
        if (subscribers >= config.sseMaxSubscribers) {
          return Effect.fail(tooMany("BRAIN_SSE_MAX_SUBSCRIBERS", config.sseMaxSubscribers))
        }
        const existing = entries.get(session)
        if (existing && existing.users >= perSession) {
          return Effect.fail(tooMany("BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION", perSession))
        }
        subscribers++
        if (existing) {
          existing.users++
          return Effect.succeed(existing)
        }
        const entry: Entry = { users: 1, feed: Deferred.unsafeMake(FiberId.none), opened: undefined }
        entries.set(session, entry)
        return openFeed(session, state, entry).pipe(
          Effect.exit,
          Effect.flatMap((exit) => {
            if (Exit.isFailure(exit) && entries.get(session) === entry) entries.delete(session)
            return Deferred.done(entry.feed, exit)
          }),
          Effect.as(entry)
        )
      })

    /** Gives a slot back; the last one closes the feed. */
    const release = (session: SessionId, entry: Entry) =>
      Effect.suspend(() => {
        subscribers--
        entry.users--
        if (entry.users > 0) return Effect.void
        if (entries.get(session) === entry) entries.delete(session)
        const feed = entry.opened
        if (!feed) return Effect.void
        return Scope.close(feed.scope, Exit.void)
      })

    /**
     * A catch-up page, read once the pages streams hold are below their bound (HeldPages.ts) at
     * the moment the read has its turn: held until its stream's socket has taken it (`release`).
     */
    const readCatchUp = (session: SessionId) => (after: number, length: number, until: number): Effect.Effect<CatchUpPage, FollowError> => {
      const read = readPage(journal, session, { after, length }, until, { events: PAGE_EVENTS, bytes: pageBytes }, (e) => {
        const frame = eventFrame(e)
        return { item: frame, size: Buffer.byteLength(frame) }
      }).pipe(
        Effect.map((page): CatchUpPage => {
          if (page.items.length === 0) return { bytes: undefined, next: page.next, length: page.length, ended: page.ended }
          const bytes = encode(page.items.join(""))
          return { bytes, next: page.next, length: page.length, ended: page.ended, release: held.take(bytes.byteLength) }
        }),
        Effect.mapError(fromJournal)
      )
      const attempt: Effect.Effect<CatchUpPage, FollowError> = Effect.zipRight(
        held.whenRoom,
        Effect.flatMap(
          reads.withPermit(Effect.suspend(() => held.room ? Effect.map(read, Option.some) : Effect.succeed(Option.none<CatchUpPage>()))),
          // Read: the next in line may try, if room is left. No room by the time its turn came: in line again.
          (page) => Effect.suspend(() => {
            held.next()
            return Option.isSome(page) ? Effect.succeed(page.value) : attempt
          })
        )
      )
      return attempt
    }

    /**
     * What a stream needs of its session's state: how far it reaches, its transcript's lengths and
     * whether it is over. Never the state itself: a stream lives as long as its reader (one that
     * does not read, until its stall bound), and the closures its scope keeps would keep the whole
     * state (the transcript, a released session's copy of its own) alive with it.
     */
    const streamView = (state: SessionState) => ({
      lastSequence: state.lastSequence,
      transcriptLengths: state.transcriptLengths,
      over: state.status === "ended" || state.status === "failed"
    })

    const follow: LiveFeeds["follow"] = (session, after, snapshot) =>
      Effect.gen(function*() {
        const state = streamView(yield* snapshot)
        yield* checkCursor(journal, session, after).pipe(
          Effect.catchTags({
            SessionNotFound: (e) => Effect.fail(fromJournal(e)),
            JournalCorrupt: (e) => Effect.fail(fromJournal(e)),
            JournalUnavailable: (e) => Effect.fail(fromJournal(e))
          })
        )
        // Over, and the reader has all of it: nothing to stream, so no slot is taken.
        if (state.over && after >= state.lastSequence) {
          return { body: Readable.from([]), stop: Effect.void, over: true }
        }
        const length = yield* transcriptLengthThrough(journal, session, state, after).pipe(Effect.mapError(fromJournal))
        // A slot is held while the response is: until it has been sent, or its client went away.
        const entry = yield* Effect.acquireRelease(admit(session, state), (entry) => release(session, entry))
        const feed = yield* Deferred.await(entry.feed)
        // Registered at the feed's position in the same step that reads it, so no commit falls between.
        const tap = new Tap<FollowError>({
          from: { after, length },
          registeredAt: feed.through,
          // Ended or failed: nothing more of its life will be recorded, so the stream ends once caught up.
          atEnd: state.over,
          limits,
          read: readCatchUp(session),
          run: (read, done) => {
            const fiber = run(Effect.match(Effect.catchAllDefect(read, (defect) => Effect.fail(internal(defect))), {
              onFailure: done,
              onSuccess: done
            }))
            return () => fiber.unsafeInterruptAsFork(FiberId.none)
          },
          position: () => feed.through,
          onDone: () => void feed.taps.delete(tap)
        })
        feed.taps.add(tap)
        yield* Effect.addFinalizer(() => Effect.sync(() => feed.taps.delete(tap)))
        if (feed.failed) tap.cutOff("the session's live feed fell behind the journal")
        yield* tap.prime
        return { body: tap, stop: Effect.ensuring(caughtUp(feed), Effect.sync(() => tap.stop())), over: false }
      })

    const delta: LiveFeeds["delta"] = (session, sequence) => (d) => {
      const feed = entries.get(session)?.opened
      if (!feed || feed.taps.size === 0) return
      const bytes = deltaFrame(session, sequence, d)
      // The call's start is durable, but the feed may not have published it yet: hold the delta
      // until it has, so a reader never sees a delta before the call it belongs to.
      if (sequence > feed.through || feed.early.length > 0) {
        if (feed.earlyBytes + bytes.length <= EARLY_DELTA_BYTES) {
          feed.early.push({ sequence, bytes })
          feed.earlyBytes += bytes.length
        }
        return releaseEarly(feed)
      }
      for (const tap of feed.taps) tap.delta(bytes)
    }

    return { follow, delta }
  })
