/**
 * Group commit: one writer per process takes every pending append, across sessions, writes each
 * touched file's share with one vectored write and syncs each touched file once, concurrently,
 * then acknowledges. Appends arriving during a round wait for the next one, so the batch grows
 * with the load and the number of syncs stays near one per touched file per round.
 *
 * Two lanes: a round serves the latency lane (effect fences, state writes) whenever it has
 * anything, and the background lane only when it is empty. Sequences and timestamps are assigned
 * here, at write time, so a session's file is always in sequence order whatever the lanes do.
 *
 * Queues are bounded (appends and bytes); a full queue makes appenders wait.
 */
import { Clock, Deferred, Effect, FiberId } from "effect"
import {
  JOURNAL_BATCH_APPENDS,
  JOURNAL_QUEUE_APPENDS,
  JOURNAL_QUEUE_BYTES,
  OPEN_JOURNAL_FILES,
  RECENT_TOTAL_BYTES,
  SEGMENT_ROTATE_BYTES
} from "../../domain/Limits.js"
import type { JournalRecord } from "../../domain/Records.js"
import { type JournalAppendError, JournalWriteFailed, type Lane } from "../../services/Journal.js"
import type { Prepared } from "./Encode.js"
import type { FileDriverShape, FileError } from "./FileDriver.js"
import { encodeFrame } from "./Frame.js"
import { newSegmentPath, type RecentRecord, type SessionHandle } from "./Handle.js"
import type { Subscribers } from "./Subscribers.js"

interface PreparedWrite {
  readonly handle: SessionHandle
  readonly appends: ReadonlyArray<Pending>
  readonly buffers: Array<Buffer>
  readonly sequences: Array<Array<number>>
  readonly bytes: number
  readonly recordedAt: number
  readonly position: number
  readonly next: number
}

interface Pending {
  readonly handle: SessionHandle
  readonly prepared: ReadonlyArray<Prepared>
  readonly bytes: number
  /** Answers the appender (the resume of its `Effect.async`); called exactly once. */
  readonly done: (result: Effect.Effect<ReadonlyArray<number>, JournalAppendError>) => void
}

export interface WriterLimits {
  readonly queueAppends: number
  readonly queueBytes: number
  readonly batchAppends: number
  readonly openFiles: number
  readonly rotateBytes: number
  /** All sessions' recent tails together, in bytes. */
  readonly recentTotalBytes: number
}

export const defaultWriterLimits: WriterLimits = {
  queueAppends: JOURNAL_QUEUE_APPENDS,
  queueBytes: JOURNAL_QUEUE_BYTES,
  batchAppends: JOURNAL_BATCH_APPENDS,
  openFiles: OPEN_JOURNAL_FILES,
  rotateBytes: SEGMENT_ROTATE_BYTES,
  recentTotalBytes: RECENT_TOTAL_BYTES
}

/** Answered to an append on a handle dropped from memory; the journal retries on a fresh handle. */
export const HANDLE_EVICTED = new JournalWriteFailed({ session: "", reason: "the journal handle was dropped from memory" })

export class Writer {
  private readonly latency: Array<Pending> = []
  private readonly background: Array<Pending> = []
  private queuedBytes = 0
  private wake: Deferred.Deferred<void> | undefined
  private spaceWaiters: Array<Deferred.Deferred<void>> = []
  /** Handles holding an open write descriptor, least recently written first. */
  private readonly openFds = new Set<SessionHandle>()
  private closed = false
  /** Sessions holding a recent tail, least recently written first, and their total bytes. */
  private readonly recentOrder = new Set<SessionHandle>()
  private recentTotal = 0
  /** True while a round's writes are in flight. */
  private inRound = false
  /** Descriptors to close once the round in flight ends. */
  private readonly releasing = new Set<SessionHandle>()

  constructor(
    private readonly driver: FileDriverShape,
    private readonly hub: Subscribers,
    private readonly limits: WriterLimits
  ) {}

  /** Queues an append and waits until it is durable (or refused). */
  append(handle: SessionHandle, prepared: ReadonlyArray<Prepared>, lane: Lane): Effect.Effect<ReadonlyArray<number>, JournalAppendError> {
    return Effect.suspend(() => {
      if (handle.broken) return Effect.fail(handle.broken)
      // Checked in the same synchronous step as the push below, so no append lands on a dropped handle.
      if (handle.evicted) return Effect.fail(HANDLE_EVICTED)
      let bytes = 0
      for (const p of prepared) bytes += p.json.length + p.kindBytes.length + 30
      const queue = lane === "latency" ? this.latency : this.background
      if (this.closed) {
        return Effect.fail(new JournalWriteFailed({ session: handle.session, reason: "the journal is closed" }))
      }
      if (queue.length >= this.limits.queueAppends || (this.queuedBytes > 0 && this.queuedBytes + bytes > this.limits.queueBytes)) {
        // Full: wait for the next round to take some, then try again.
        const space = Deferred.unsafeMake<void>(FiberId.none)
        this.spaceWaiters.push(space)
        return Effect.zipRight(Deferred.await(space), this.append(handle, prepared, lane))
      }
      // The hot path: no Deferred, no generator; the round answers through `done`.
      return Effect.async<ReadonlyArray<number>, JournalAppendError>((resume) => {
        handle.inflight++
        const done = (result: Effect.Effect<ReadonlyArray<number>, JournalAppendError>) => {
          handle.inflight--
          resume(result)
        }
        queue.push({ handle, prepared, bytes, done })
        this.queuedBytes += bytes
        if (this.wake) {
          Deferred.unsafeDone(this.wake, Effect.void)
          this.wake = undefined
        }
      })
    })
  }

  /**
   * The writer loop. A round, once taken, always completes (it is uninterruptible and bounded
   * by its writes and syncs), so no appender is ever left without an answer.
   */
  readonly run: Effect.Effect<void> = Effect.gen(this, function*() {
    for (;;) {
      if (this.latency.length === 0 && this.background.length === 0) {
        if (this.closed) return
        const wake = yield* Deferred.make<void>()
        this.wake = wake
        yield* Deferred.await(wake)
        continue
      }
      const source = this.latency.length > 0 ? this.latency : this.background
      const batch = source.splice(0, this.limits.batchAppends)
      for (const p of batch) this.queuedBytes -= p.bytes
      const waiters = this.spaceWaiters
      this.spaceWaiters = []
      for (const w of waiters) Deferred.unsafeDone(w, Effect.void)
      yield* Effect.uninterruptible(this.commit(batch))
    }
  })

  /** Refuses new appends and wakes the loop so it can drain what is queued and return. */
  readonly close = Effect.sync(() => {
    this.closed = true
    for (const w of this.spaceWaiters) Deferred.unsafeDone(w, Effect.void)
    this.spaceWaiters = []
    if (this.wake) {
      Deferred.unsafeDone(this.wake, Effect.void)
      this.wake = undefined
    }
  })

  /** Closes every write descriptor; after the loop has returned. */
  readonly closeFiles = Effect.gen(this, function*() {
    for (const p of [...this.latency, ...this.background]) {
      p.done(Effect.fail(new JournalWriteFailed({ session: p.handle.session, reason: "the journal closed" })))
    }
    this.latency.length = 0
    this.background.length = 0
    for (const h of this.openFds) {
      if (h.fd !== undefined) yield* Effect.ignore(this.driver.close(h.fd))
      h.fd = undefined
    }
    this.openFds.clear()
  })

  /**
   * Closes a session's write descriptor (before deleting its files). During a round the close
   * waits for the round's end, so a descriptor is never closed under a write in flight.
   */
  release(handle: SessionHandle) {
    return Effect.suspend(() => {
      if (this.inRound) {
        this.releasing.add(handle)
        return Effect.void
      }
      return this.closeFd(handle)
    })
  }

  /** Lets go of a handle dropped from memory (no appends in flight): its descriptor and recent tail. */
  forget(handle: SessionHandle) {
    return Effect.suspend(() => {
      if (this.recentOrder.delete(handle)) this.recentTotal -= handle.recentBytes
      handle.dropRecent()
      return this.release(handle)
    })
  }

  private closeFd(handle: SessionHandle) {
    return Effect.suspend(() => {
      this.openFds.delete(handle)
      const fd = handle.fd
      handle.fd = undefined
      return fd === undefined ? Effect.void : Effect.ignore(this.driver.close(fd))
    })
  }

  /**
   * One round: prepare every touched session's frames (opening or rotating its segment where
   * needed), write and sync them all with one `syncMany`, and acknowledge each session's appends
   * as soon as its own sync returns. A failure is sticky for its session only; anything
   * unexpected fails the round's appends rather than stopping the writer.
   */
  private commit(batch: ReadonlyArray<Pending>) {
    return Effect.gen(this, function*() {
      const byHandle = new Map<SessionHandle, Array<Pending>>()
      for (const p of batch) {
        const list = byHandle.get(p.handle)
        if (list) list.push(p)
        else byHandle.set(p.handle, [p])
      }
      const now = yield* Clock.currentTimeMillis
      this.inRound = true
      const writes: Array<PreparedWrite> = []
      for (const [handle, appends] of byHandle) {
        const w = yield* this.prepareSession(handle, appends, now)
        if (w) writes.push(w)
      }
      yield* this.driver.syncMany(
        writes.map((w) => ({ fd: w.handle.fd!, buffers: w.buffers, position: w.position, bytes: w.bytes })),
        (i, error) => this.settle(writes[i]!, error)
      )
      this.inRound = false
      for (const h of this.releasing) yield* this.closeFd(h)
      this.releasing.clear()
      yield* this.closeIdleFds(byHandle)
    }).pipe(
      Effect.catchAllCause((cause) =>
        Effect.gen(this, function*() {
          // A bug or a dying driver: never leave an appender without an answer, never stop the loop.
          this.inRound = false
          yield* Effect.logError("journal writer round failed unexpectedly", cause)
          for (const p of batch) {
            if (!p.handle.broken) {
              p.handle.broken = new JournalWriteFailed({ session: p.handle.session, reason: "the writer failed unexpectedly" })
            }
            p.done(Effect.fail(p.handle.broken))
          }
        })
      )
    )
  }

  /** Frames for one session's appends, with its segment open and positioned; undefined if refused. */
  private prepareSession(handle: SessionHandle, appends: ReadonlyArray<Pending>, now: number) {
    const driver = this.driver
    return Effect.gen(this, function*() {
      if (handle.broken) {
        for (const p of appends) p.done(Effect.fail(handle.broken))
        return undefined
      }
      const recordedAt = Math.max(now, handle.lastRecordedAtMs)
      const buffers: Array<Buffer> = []
      const sequences: Array<Array<number>> = []
      let next = handle.lastSequence + 1
      let bytes = 0
      for (const p of appends) {
        const seqs: Array<number> = []
        for (let i = 0; i < p.prepared.length; i++) {
          const r = p.prepared[i]!
          const [head, json] = encodeFrame(next, recordedAt, r.kindBytes, r.json, i < p.prepared.length - 1)
          buffers.push(head, json)
          bytes += head.length + json.length
          seqs.push(next++)
        }
        sequences.push(seqs)
      }
      const firstSequence = handle.lastSequence + 1
      const opened = yield* Effect.gen(this, function*() {
        let seg = handle.finalSegment
        if (!seg || (seg.size > 0 && seg.size + bytes > this.limits.rotateBytes)) {
          // Rotate (or start): the new segment is named by the first sequence it will hold.
          if (handle.fd !== undefined) yield* this.closeFd(handle)
          const file = newSegmentPath(handle, firstSequence)
          const fd = yield* driver.open(file, "wx+")
          handle.fd = fd
          yield* driver.syncDir(handle.dir)
          seg = { firstSequence, path: file, size: 0 }
          handle.segments.push(seg)
        } else if (handle.fd === undefined) {
          handle.fd = yield* driver.open(seg.path, "r+")
        }
        this.openFds.delete(handle)
        this.openFds.add(handle)
        return seg
      }).pipe(Effect.either)
      if (opened._tag === "Left") {
        this.fail(handle, appends, opened.left.reason)
        return undefined
      }
      return { handle, appends, buffers, sequences, bytes, recordedAt, position: opened.right.size, next } satisfies PreparedWrite
    })
  }

  private fail(handle: SessionHandle, appends: ReadonlyArray<Pending>, reason: string) {
    handle.broken = new JournalWriteFailed({ session: handle.session, reason })
    this.releasing.add(handle)
    for (const p of appends) p.done(Effect.fail(handle.broken))
  }

  /** Called from the driver's callback when one session's write and sync finished. */
  private settle(w: PreparedWrite, error: FileError | undefined) {
    const { appends, buffers, handle, recordedAt, sequences } = w
    if (error) return this.fail(handle, appends, error.reason)
    const segIndex = handle.segments.length - 1
    const seg = handle.segments[segIndex]!
    let offset = seg.size
    let k = 0
    const published: Array<JournalRecord> | undefined = this.hub.has(handle.session) ? [] : undefined
    const recent: Array<RecentRecord> = []
    for (let a = 0; a < appends.length; a++) {
      const p = appends[a]!
      const seqs = sequences[a]!
      for (let i = 0; i < p.prepared.length; i++) {
        handle.remember(seqs[i]!, segIndex, offset)
        const size = buffers[k]!.length + buffers[k + 1]!.length
        offset += size
        k += 2
        recent.push({ sequence: seqs[i]!, recordedAtMs: recordedAt, kind: p.prepared[i]!.kind, json: p.prepared[i]!.jsonText, size })
        published?.push({
          sequence: seqs[i]!,
          recorded_at_ms: recordedAt,
          kind: p.prepared[i]!.kind,
          payload: JSON.parse(p.prepared[i]!.jsonText)
        })
      }
    }
    seg.size = offset
    this.recentTotal -= handle.recentBytes
    handle.keepRecent(recent)
    this.recentTotal += handle.recentBytes
    this.recentOrder.delete(handle)
    this.recentOrder.add(handle)
    for (const oldest of this.recentOrder) {
      if (this.recentTotal <= this.limits.recentTotalBytes) break
      this.recentTotal -= oldest.recentBytes
      oldest.dropRecent()
      this.recentOrder.delete(oldest)
    }
    handle.lastSequence = w.next - 1
    handle.lastRecordedAtMs = recordedAt
    for (let a = 0; a < appends.length; a++) appends[a]!.done(Effect.succeed(sequences[a]!))
    if (published) this.hub.publish(handle.session, published)
  }

  private closeIdleFds(active: ReadonlyMap<SessionHandle, unknown>) {
    return Effect.gen(this, function*() {
      if (this.openFds.size <= this.limits.openFiles) return
      for (const h of this.openFds) {
        if (this.openFds.size <= this.limits.openFiles) break
        if (active.has(h)) continue
        yield* this.closeFd(h)
      }
    })
  }
}
