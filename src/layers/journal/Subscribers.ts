/**
 * Live feeds of committed records, per session. Publishing never waits: each subscriber has a
 * bounded backlog, and one that falls SUBSCRIBER_BACKLOG_RECORDS behind is cut off with
 * SubscriberLagged (it resumes by cursor) so a slow reader never slows the writer or others.
 */
import { Deferred, Effect, Queue, Scope, Stream } from "effect"
import { SUBSCRIBER_BACKLOG_RECORDS } from "../../domain/Limits.js"
import type { JournalRecord } from "../../domain/Records.js"
import { SubscriberLagged } from "../../services/Journal.js"

interface Subscriber {
  readonly queue: Queue.Queue<JournalRecord>
  readonly lagged: Deferred.Deferred<never, SubscriberLagged>
  last: number
}

export class Subscribers {
  private readonly bySession = new Map<string, Set<Subscriber>>()

  constructor(private readonly backlog: number = SUBSCRIBER_BACKLOG_RECORDS) {}

  subscribe(session: string, lastSequence: number): Effect.Effect<Stream.Stream<JournalRecord, SubscriberLagged>, never, Scope.Scope> {
    return Effect.gen(this, function*() {
      const queue = yield* Queue.bounded<JournalRecord>(this.backlog)
      const lagged = yield* Deferred.make<never, SubscriberLagged>()
      const sub: Subscriber = { queue, lagged, last: lastSequence }
      yield* Effect.acquireRelease(
        Effect.sync(() => {
          let set = this.bySession.get(session)
          if (!set) {
            set = new Set()
            this.bySession.set(session, set)
          }
          set.add(sub)
        }),
        () =>
          Effect.zipRight(
            Effect.sync(() => {
              const set = this.bySession.get(session)
              set?.delete(sub)
              if (set && set.size === 0) this.bySession.delete(session)
            }),
            Queue.shutdown(queue)
          )
      )
      return Stream.fromQueue(queue).pipe(Stream.interruptWhenDeferred(lagged))
    })
  }

  /** Called by the writer after the records are durable, in sequence order. */
  publish(session: string, records: ReadonlyArray<JournalRecord>): void {
    const set = this.bySession.get(session)
    if (!set) return
    for (const sub of set) {
      for (const record of records) {
        if (record.sequence <= sub.last) continue
        if (!Queue.unsafeOffer(sub.queue, record)) {
          Deferred.unsafeDone(sub.lagged, Effect.fail(new SubscriberLagged({ session, after: sub.last })))
          set.delete(sub)
          break
        }
        sub.last = record.sequence
      }
    }
  }

  has(session: string): boolean {
    return this.bySession.has(session)
  }
}
