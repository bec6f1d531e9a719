/**
 * Group commit: one writer per journal takes every pending append, across sessions, assigns
 * their sequences and time, and hands the round to the store, which makes each touched session's
 * share durable (the file store: one vectored write and one sync per touched file, all files
 * concurrently); each session's appends are acknowledged as soon as its own share is. Appends
 * arriving during a round wait for the next one, so the batch grows with the load.
 *
 * Two lanes: a round serves the latency lane (effect fences, state writes) whenever it has
 * anything, and the background lane only when it is empty. Sequences and timestamps are assigned
 * here, at write time, so a session's records are always in sequence order whatever the lanes do.
 *
 * Queues are bounded (appends and bytes); a full queue makes appenders wait.
 */
import { Clock, Deferred, Effect, Exit, FiberId } from "effect"
import {
  JOURNAL_BATCH_APPENDS,
  JOURNAL_QUEUE_APPENDS,
  JOURNAL_QUEUE_BYTES,
  RECENT_TOTAL_BYTES
} from "../../domain/Limits.js"
import type { SessionId } from "../../domain/Ids.js"
import { parseKept } from "../../domain/JsonText.js"
import type { JournalRecord } from "../../domain/Records.js"
import { type JournalAppendError, JournalWriteFailed, type Lane } from "../../services/Journal.js"
import type { Prepared } from "./Encode.js"
import { frameBytes } from "./Frame.js"
import type { CommitItem, JournalStore, StoredRecord } from "./Store.js"
import type { Subscribers } from "./Subscribers.js"
import { type RecentRecord, RecentTail } from "./Tail.js"

/** One open session as the core keeps it; `state` is the store's. */
export class OpenSession<S> {
  readonly tail = new RecentTail()
  broken: JournalWriteFailed | undefined = undefined
  /**
   * The failure that broke it may have left its records standing (the store could not take back
   * what landed, Store.ts): the durable end is not known until the session is opened again.
   */
  outcomeUnknown = false
  /** Appends queued or being written; an open session is dropped from memory only at zero. */
  inflight = 0
  /** Dropped from memory: appends must go to a freshly opened one. */
  evicted = false
  /** Records staged (`Journal.stage`): the next round writes them ahead of this session's first append. */
  staged: StagedRecords | undefined = undefined
  constructor(
    readonly session: SessionId,
    readonly state: S,
    public lastSequence: number,
    public lastRecordedAtMs: number,
    /** The core's claim on the session, carried by every commit (stores with `claim`). */
    readonly generation: number | undefined
  ) {}
}

/** Staged records: their sequences follow the durable end; their time was assigned when staged. */
export interface StagedRecords {
  readonly prepared: ReadonlyArray<Prepared>
  readonly recordedAt: number
}

interface Pending<S> {
  readonly open: OpenSession<S>
  readonly prepared: ReadonlyArray<Prepared>
  readonly bytes: number
  /** Answers the appender (the resume of its `Effect.async`, or `Journal.enqueue`'s callback); called exactly once. */
  readonly done: (result: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void
  /** `Journal.enqueue`'s `sequenced`: told the sequences once the round has submitted its writes, unless answered first. */
  readonly sequenced: ((sequences: ReadonlyArray<number>) => void) | undefined
  /** `done` has been called. */
  answered: boolean
}

interface RoundShare<S> {
  readonly open: OpenSession<S>
  readonly appends: ReadonlyArray<Pending<S>>
  readonly sequences: Array<Array<number>>
  readonly recordedAt: number
  readonly next: number
  /** The session's staged records, written ahead of its appends (sequences from the share's first). */
  readonly staged: StagedRecords | undefined
}

export interface WriterLimits {
  readonly queueAppends: number
  readonly queueBytes: number
  readonly batchAppends: number
  /** All sessions' recent tails together, in bytes. */
  readonly recentTotalBytes: number
}

export const defaultWriterLimits: WriterLimits = {
  queueAppends: JOURNAL_QUEUE_APPENDS,
  queueBytes: JOURNAL_QUEUE_BYTES,
  batchAppends: JOURNAL_BATCH_APPENDS,
  recentTotalBytes: RECENT_TOTAL_BYTES
}

/** Answered to an append on a session dropped from memory; the journal retries on a fresh open. */
export const HANDLE_EVICTED = new JournalWriteFailed({ session: "", reason: "the journal handle was dropped from memory" })

/**
 * Tells an appender its sequences. Its own code, not the round's: a throw is dropped, since the
 * round's writes are already submitted and must be answered as they land (the appender then has
 * nothing made ahead, which `sequenced` never promises).
 */
const tellSequences = (sequenced: (sequences: ReadonlyArray<number>) => void, sequences: ReadonlyArray<number>) => {
  try {
    sequenced(sequences)
  } catch {
    // Nothing made ahead; `done` answers as ever.
  }
}

export class Writer<S> {
  private readonly latency: Array<Pending<S>> = []
  private readonly background: Array<Pending<S>> = []
  private queuedBytes = 0
  /** A round is under way (started on callbacks, or run by the fiber): the next one waits for its end. */
  private inRound = false
  /** The next round's start is scheduled (`startRound`). */
  private starting = false
  /** What the writer's fiber is to run next: a round as an effect, or what is left of one started on callbacks. */
  private job: Effect.Effect<void> | undefined
  /** Resumes the fiber waiting for a job (the resume of its `Effect.async`), when it waits. */
  private wake: ((go: Effect.Effect<void>) => void) | undefined
  private spaceWaiters: Array<Deferred.Deferred<void>> = []
  private closed = false
  /** Sessions holding a recent tail, least recently written first, and their total bytes. */
  private readonly recentOrder = new Set<OpenSession<S>>()
  private recentTotal = 0

  constructor(
    private readonly store: JournalStore<S>,
    private readonly hub: Subscribers,
    private readonly limits: WriterLimits,
    /** Read directly, not through the fiber's services: a round's time costs no instructions. */
    private readonly clock: Clock.Clock,
    /**
     * Runs a task on the runtime's scheduler, after the fibers already scheduled (the scheduler of
     * the fiber that built the journal): a round starts there, so that the appends of one step
     * share it, as they did when the writer's fiber was woken to start it.
     */
    private readonly schedule: (task: () => void) => void
  ) {}

  /** Queues an append and waits until it is durable (or refused). */
  append(open: OpenSession<S>, prepared: ReadonlyArray<Prepared>, lane: Lane): Effect.Effect<ReadonlyArray<number>, JournalAppendError> {
    // The hot path: no Deferred, no generator; the round answers through `resume`.
    return Effect.async<ReadonlyArray<number>, JournalAppendError>((resume) => {
      const taken = this.tryPush(open, prepared, lane, resume)
      if (taken === "evicted") resume(Exit.fail(HANDLE_EVICTED))
      else if (taken === "full") {
        // Full: wait for the next round to take some, then try again.
        const space = Deferred.unsafeMake<void>(FiberId.none)
        this.spaceWaiters.push(space)
        resume(Effect.zipRight(Deferred.await(space), this.append(open, prepared, lane)))
      }
    })
  }

  /**
   * Queues an append in this synchronous step, without an effect: `done` is called exactly once,
   * when it is durable or refused. False, with nothing queued and `done` not called, when it
   * cannot be queued at once (the session dropped from memory, or the queue full): `append` then.
   */
  enqueue(
    open: OpenSession<S>,
    prepared: ReadonlyArray<Prepared>,
    lane: Lane,
    done: (result: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void,
    sequenced?: (sequences: ReadonlyArray<number>) => void
  ): boolean {
    return this.tryPush(open, prepared, lane, done, sequenced) === "answered"
  }

  /**
   * Queues the append (its answer to come through `answer`), or refuses it through `answer` at
   * once (a broken session, a closed journal): "answered" either way. "evicted" (the session
   * dropped from memory) and "full" (the queue at its bound) leave `answer` uncalled. Checked in
   * the same synchronous step as the push, so no append lands on a dropped session.
   */
  private tryPush(
    open: OpenSession<S>,
    prepared: ReadonlyArray<Prepared>,
    lane: Lane,
    answer: (result: Exit.Exit<ReadonlyArray<number>, JournalAppendError>) => void,
    sequenced?: (sequences: ReadonlyArray<number>) => void
  ): "answered" | "evicted" | "full" {
    if (open.broken) {
      answer(Exit.fail(open.broken))
      return "answered"
    }
    if (open.evicted) return "evicted"
    if (this.closed) {
      answer(Exit.fail(new JournalWriteFailed({ session: open.session, reason: "the journal is closed" })))
      return "answered"
    }
    let bytes = 0
    for (const p of prepared) bytes += p.json.length + p.kindBytes.length + 30
    const queue = lane === "latency" ? this.latency : this.background
    if (queue.length >= this.limits.queueAppends || (this.queuedBytes > 0 && this.queuedBytes + bytes > this.limits.queueBytes)) return "full"
    open.inflight++
    const pending: Pending<S> = {
      open,
      prepared,
      bytes,
      done: (result) => {
        pending.answered = true
        open.inflight--
        answer(result)
      },
      sequenced,
      answered: false
    }
    queue.push(pending)
    this.queuedBytes += bytes
    this.poke()
    return "answered"
  }

  /**
   * Stages records on a session with nothing in flight: they take the sequences after its durable
   * end and the time now, and the next round writes them ahead of the session's first append (see
   * `Journal.stage`). A staged session counts as in flight, so it is never dropped from memory.
   * Records staged while others are, with no append in flight (the staged ones are all it has
   * in flight, not yet taken by a round), join them: the sequences after theirs, their time (a
   * sync send's opening, then the transcript save riding on the turn's first model call, both
   * written with the call's start). Answers the session's staged records, the new ones last, or
   * undefined when an append is in flight: append then, so that nothing staged overtakes it.
   */
  stage(open: OpenSession<S>, prepared: ReadonlyArray<Prepared>, now: number): StagedRecords | JournalWriteFailed | undefined {
    if (open.broken) return open.broken
    if (open.evicted) return HANDLE_EVICTED
    if (this.closed) return new JournalWriteFailed({ session: open.session, reason: "the journal is closed" })
    const already = open.staged
    if (already !== undefined && open.inflight === 1) {
      open.staged = { prepared: [...already.prepared, ...prepared], recordedAt: already.recordedAt }
      return open.staged
    }
    if (open.inflight > 0) return undefined
    const staged: StagedRecords = { prepared, recordedAt: Math.max(now, open.lastRecordedAtMs) }
    open.staged = staged
    open.inflight++
    return staged
  }

  /** Drops what is staged on a session (it will never be written). */
  dropStaged(open: OpenSession<S>) {
    if (open.staged === undefined) return
    open.staged = undefined
    open.inflight--
  }

  /** Something was queued: the next round starts once the one under way, if any, has ended. */
  private poke() {
    if (this.inRound || this.starting) return
    this.starting = true
    this.schedule(this.startRound)
  }

  private wakeFiber() {
    const wake = this.wake
    if (wake) {
      this.wake = undefined
      wake(Effect.void)
    }
  }

  /** Nothing queued, no round under way or about to start, nothing for the fiber to run. */
  private get idle() {
    return !this.inRound && !this.starting && this.job === undefined && this.latency.length === 0 && this.background.length === 0
  }

  /**
   * Starts a round with what is queued, on the scheduler, without the fiber: the store submits its
   * writes in this step (`commitNow`) and answers the appenders from the writes' callbacks, so a
   * commit costs no fiber's wake-up before its writes nor after them. A store that cannot (a file
   * to open, a log to switch, no `commitNow`) answers the round as an effect, which the fiber runs.
   * Either way a round, once taken, always completes, and the next starts only after it has.
   */
  private readonly startRound = () => {
    this.starting = false
    if (this.inRound) return
    const source = this.latency.length > 0 ? this.latency : this.background.length > 0 ? this.background : undefined
    if (source === undefined) {
      if (this.closed) this.wakeFiber()
      return
    }
    const batch = source.splice(0, this.limits.batchAppends)
    for (const p of batch) this.queuedBytes -= p.bytes
    const waiters = this.spaceWaiters
    this.spaceWaiters = []
    for (const w of waiters) Deferred.unsafeDone(w, Effect.void)
    this.inRound = true
    const onEnd = (rest: Effect.Effect<void> | undefined) => {
      if (rest === undefined) this.roundEnded()
      else this.onFiber(this.guarded(rest, batch))
    }
    // A bug in the step that starts the round fails its appends, as one in the fiber's round does.
    let slow: Effect.Effect<void> | undefined
    try {
      slow = this.begin(batch, onEnd)
    } catch (defect) {
      slow = this.guarded(Effect.die(defect), batch)
    }
    if (slow !== undefined) this.onFiber(this.guarded(slow, batch))
  }

  /** A round's effect (or what is left of one) for the fiber to run; the round ends when it has. */
  private onFiber(effect: Effect.Effect<void>) {
    this.job = Effect.ensuring(effect, Effect.sync(() => this.roundEnded()))
    this.wakeFiber()
  }

  private roundEnded() {
    this.inRound = false
    if (this.latency.length > 0 || this.background.length > 0) {
      this.starting = true
      this.schedule(this.startRound)
    } else if (this.closed) this.wakeFiber()
  }

  /**
   * The writer's fiber: it runs the rounds (and the ends of rounds) that need an effect, each
   * uninterruptible, so no appender is ever left without an answer; once the journal is closed and
   * nothing is queued or under way, it returns. Each turn of the loop is a plain effect that ends by
   * running the loop again (stack-safe in Effect's run loop).
   */
  readonly run: Effect.Effect<void> = Effect.suspend(() => {
    const job = this.job
    if (job !== undefined) {
      this.job = undefined
      return Effect.zipRight(Effect.uninterruptible(job), this.run)
    }
    if (this.closed && this.idle) return Effect.void
    return Effect.zipRight(
      Effect.async<void>((resume) => {
        // Checked again where the wait starts: the run loop may yield between the check above and here.
        if (this.job !== undefined || (this.closed && this.idle)) resume(Effect.void)
        else this.wake = resume
      }),
      this.run
    )
  })

  /** Refuses new appends and wakes the loop so it can drain what is queued and return. */
  readonly close = Effect.sync(() => {
    this.closed = true
    for (const w of this.spaceWaiters) Deferred.unsafeDone(w, Effect.void)
    this.spaceWaiters = []
    this.wakeFiber()
  })

  /** Answers what is still queued (after the loop has returned). */
  readonly refuseQueued = Effect.sync(() => {
    for (const p of [...this.latency, ...this.background]) {
      p.done(Exit.fail(new JournalWriteFailed({ session: p.open.session, reason: "the journal closed" })))
    }
    this.latency.length = 0
    this.background.length = 0
  })

  /**
   * Seeds a freshly opened session's recent tail with the newest records its open read, counted
   * with every other tail (an open's tail was kept outside the bound: a walk opening thousands of
   * sessions kept each one's, about 24 KiB apiece, for as long as it stayed open).
   */
  seed(open: OpenSession<S>, records: ReadonlyArray<RecentRecord>) {
    if (records.length === 0) return
    open.tail.keep(records)
    this.recentTotal += open.tail.bytes
    this.recentOrder.add(open)
    this.trimRecent()
  }

  /** Past the bound on all tails: drops the least recently written sessions' tails. */
  private trimRecent() {
    for (const oldest of this.recentOrder) {
      if (this.recentTotal <= this.limits.recentTotalBytes) break
      this.recentTotal -= oldest.tail.bytes
      oldest.tail.drop()
      this.recentOrder.delete(oldest)
    }
  }

  /** Lets go of a session dropped from memory (no appends in flight): its recent tail. */
  forget(open: OpenSession<S>) {
    if (this.recentOrder.delete(open)) this.recentTotal -= open.tail.bytes
    open.tail.drop()
    this.dropStaged(open)
  }

  /**
   * One round: sequences and time for every touched session's appends, then the store makes each
   * session's share durable and answers it as soon as it is. A failure is sticky for its session
   * only. Started now when the store can (`commitNow`: undefined answered, `onEnd` called with what
   * is left once its writes are done); otherwise the round is answered as an effect for the fiber.
   */
  private begin(
    batch: ReadonlyArray<Pending<S>>,
    onEnd: (rest: Effect.Effect<void> | undefined) => void
  ): Effect.Effect<void> | undefined {
    const now = this.clock.unsafeCurrentTimeMillis()
    const bySession = new Map<OpenSession<S>, Array<Pending<S>>>()
    for (const p of batch) {
      const list = bySession.get(p.open)
      if (list) list.push(p)
      else bySession.set(p.open, [p])
    }
    const shares: Array<RoundShare<S>> = []
    const items: Array<CommitItem<S>> = []
    for (const [open, appends] of bySession) {
      if (open.broken) {
        this.dropStaged(open)
        for (const p of appends) p.done(Exit.fail(open.broken))
        continue
      }
      const staged = open.staged
      open.staged = undefined
      const recordedAt = Math.max(now, open.lastRecordedAtMs, staged?.recordedAt ?? 0)
      const records: Array<StoredRecord> = []
      const sequences: Array<Array<number>> = []
      let next = open.lastSequence + 1
      if (staged) {
        // One atomic group with the first append: each staged record continues into it.
        for (const prepared of staged.prepared) {
          records.push({ sequence: next++, prepared, continues: true, recordedAtMs: staged.recordedAt })
        }
      }
      for (const p of appends) {
        const seqs: Array<number> = []
        for (let i = 0; i < p.prepared.length; i++) {
          records.push({ sequence: next, prepared: p.prepared[i]!, continues: i < p.prepared.length - 1 })
          seqs.push(next++)
        }
        sequences.push(seqs)
      }
      // Staged records written by an append of nothing (`Journal.flush`): they end their group.
      const last = records[records.length - 1]
      if (last !== undefined && last.continues) records[records.length - 1] = { ...last, continues: false }
      shares.push({ open, appends, sequences, recordedAt, next, staged })
      items.push({ session: open.session, state: open.state, generation: open.generation, recordedAtMs: recordedAt, records })
    }
    if (items.length === 0) {
      onEnd(undefined)
      return undefined
    }
    const settle = (i: number, failure: string | undefined, unknown?: boolean) => this.settle(shares[i]!, failure, unknown)
    const rest = this.store.commitNow !== undefined ? this.store.commitNow(items, settle, onEnd) : this.store.commit(items, settle)
    // The writes are submitted (or, for the fiber, made): the appenders who asked learn their
    // sequences now, while the disk writes, unless already answered.
    for (const share of shares) {
      for (let a = 0; a < share.appends.length; a++) {
        const p = share.appends[a]!
        if (p.sequenced !== undefined && !p.answered) tellSequences(p.sequenced, share.sequences[a]!)
      }
    }
    return rest
  }

  /** A round's effect that never fails nor dies: anything unexpected fails the round's appends rather than stopping the writer. */
  private guarded(round: Effect.Effect<void>, batch: ReadonlyArray<Pending<S>>): Effect.Effect<void> {
    return Effect.catchAllCause(round, (cause) =>
      Effect.zipRight(
        // A bug or a dying store: never leave an appender without an answer, never stop the loop.
        Effect.logError("journal writer round failed unexpectedly", cause),
        Effect.sync(() => {
          for (const p of batch) {
            if (!p.open.broken) {
              p.open.broken = new JournalWriteFailed({ session: p.open.session, reason: "the writer failed unexpectedly" })
              // Nothing says how far the store got with it.
              p.open.outcomeUnknown = true
            }
            p.done(Exit.fail(p.open.broken))
          }
        })
      ))
  }

  /** Called by the store when one session's share is durable, or failed. */
  private settle(share: RoundShare<S>, failure: string | undefined, unknown = false) {
    const { appends, open, recordedAt, sequences, staged } = share
    if (staged) open.inflight--
    if (failure !== undefined) {
      open.broken = new JournalWriteFailed({ session: open.session, reason: failure })
      if (unknown) open.outcomeUnknown = true
      for (const p of appends) p.done(Exit.fail(open.broken))
      return
    }
    const published: Array<JournalRecord> | undefined = this.hub.has(open.session) ? [] : undefined
    const recent: Array<RecentRecord> = []
    if (staged) {
      let sequence = open.lastSequence
      for (const r of staged.prepared) {
        sequence++
        recent.push({ sequence, recordedAtMs: staged.recordedAt, kind: r.kind, json: r.jsonText, size: frameBytes(r.kindBytes, r.json) })
        published?.push({ sequence, recorded_at_ms: staged.recordedAt, kind: r.kind, payload: parseKept(r.jsonText) })
      }
    }
    for (let a = 0; a < appends.length; a++) {
      const p = appends[a]!
      const seqs = sequences[a]!
      for (let i = 0; i < p.prepared.length; i++) {
        const r = p.prepared[i]!
        recent.push({ sequence: seqs[i]!, recordedAtMs: recordedAt, kind: r.kind, json: r.jsonText, size: frameBytes(r.kindBytes, r.json) })
        published?.push({ sequence: seqs[i]!, recorded_at_ms: recordedAt, kind: r.kind, payload: parseKept(r.jsonText) })
      }
    }
    this.recentTotal -= open.tail.bytes
    open.tail.keep(recent)
    this.recentTotal += open.tail.bytes
    this.recentOrder.delete(open)
    this.recentOrder.add(open)
    this.trimRecent()
    open.lastSequence = share.next - 1
    open.lastRecordedAtMs = recordedAt
    for (let a = 0; a < appends.length; a++) appends[a]!.done(Exit.succeed(sequences[a]!))
    if (published) this.hub.publish(open.session, published)
  }
}
