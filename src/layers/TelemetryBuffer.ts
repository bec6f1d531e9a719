/**
 * The bounded queue in front of every telemetry sink, and the one fiber that drains it.
 *
 * - `record` serializes the record on the caller's fiber (its size is what the bound counts),
 *   and queues it if it fits: at most BRAIN_TELEMETRY_QUEUE_BYTES bytes and
 *   TELEMETRY_QUEUE_RECORDS records wait, and no record is above TELEMETRY_RECORD_BYTES.
 *   Otherwise it is dropped and counted. It never waits and never fails: a full queue means the
 *   sink is behind, and telemetry is the one thing a turn must not wait for.
 * - One consumer takes up to TELEMETRY_BATCH_RECORDS at a time and hands them to the sink's
 *   `deliver`, one batch at a time, so the sink never has more than one batch in flight and
 *   memory stays within the queue's bound plus one batch.
 * - A batch the sink could not take is lost (counted as failed); the next batch is tried as
 *   usual. Nothing is retried: the sink decides nothing about the turn.
 * - Drops and failures are logged at most once per TELEMETRY_WARN_INTERVAL_MS, with counts.
 * - On close, the sink gets TELEMETRY_FLUSH_MS to take what is still queued.
 */
import { Clock, Duration, Effect, Queue, type Scope } from "effect"
import {
  TELEMETRY_BATCH_RECORDS,
  TELEMETRY_FLUSH_MS,
  TELEMETRY_QUEUE_RECORDS,
  TELEMETRY_RECORD_BYTES,
  TELEMETRY_WARN_INTERVAL_MS
} from "../domain/Limits.js"
import type { TelemetryShape, TelemetryStats } from "../services/Telemetry.js"

/**
 * A queued record, kept only as its JSON (without the newline): what the bound counts is what is
 * held. `bytes` counts the newline too.
 */
export interface Line {
  readonly json: string
  readonly bytes: number
}

export interface BufferOptions {
  /** The sink, for logs. */
  readonly name: string
  readonly queueBytes: number
  readonly queueRecords?: number
  readonly recordBytes?: number
  readonly batchRecords?: number
  /** Takes one batch; fails with a reason when the batch is lost. */
  readonly deliver: (batch: ReadonlyArray<Line>) => Effect.Effect<void, string>
}

export const make = (options: BufferOptions): Effect.Effect<TelemetryShape, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queueRecords = options.queueRecords ?? TELEMETRY_QUEUE_RECORDS
    const recordBytes = options.recordBytes ?? TELEMETRY_RECORD_BYTES
    const batchRecords = options.batchRecords ?? TELEMETRY_BATCH_RECORDS
    const queue = yield* Queue.dropping<Line>(queueRecords)
    let queuedBytes = 0
    const stats = { accepted: 0, dropped: 0, delivered: 0, failed: 0 }
    const warned = { at: Number.NEGATIVE_INFINITY, dropped: 0, failed: 0, reason: "" }

    /** At most one warning per interval (unless `always`, at close), with what was lost since the last one. */
    const warn = (always: boolean) => Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const dropped = stats.dropped - warned.dropped
      const failed = stats.failed - warned.failed
      if ((dropped === 0 && failed === 0) || (!always && now - warned.at < TELEMETRY_WARN_INTERVAL_MS)) return
      warned.at = now
      warned.dropped = stats.dropped
      warned.failed = stats.failed
      yield* Effect.logWarning(
        `telemetry (${options.name}): ${dropped} record(s) dropped (queue full or record too large), ${failed} lost by the sink${
          failed > 0 ? ` (${warned.reason})` : ""
        }; it is best-effort and never delays a turn`
      )
    })
    const warnIfDue = warn(false)

    const drop = Effect.suspend(() => {
      stats.dropped++
      return warnIfDue
    })

    const record: TelemetryShape["record"] = (r) =>
      Effect.suspend(() => {
        // Not JSON (a BigInt, a cycle): dropped like any record that does not fit.
        const json = Effect.try(() => JSON.stringify(r))
        return Effect.flatMap(Effect.orElseSucceed(json, () => undefined), (text) => {
          if (text === undefined) return drop
          const bytes = Buffer.byteLength(text, "utf8") + 1
          if (bytes > recordBytes || queuedBytes + bytes > options.queueBytes) return drop
          return Effect.flatMap(Queue.offer(queue, { json: text, bytes }), (taken) => {
            if (!taken) return drop
            queuedBytes += bytes
            stats.accepted++
            return Effect.void
          })
        })
      })

    const deliver = (batch: ReadonlyArray<Line>) =>
      Effect.suspend(() => {
        for (const line of batch) queuedBytes -= line.bytes
        return options.deliver(batch).pipe(
          Effect.match({
            onFailure: (reason) => {
              stats.failed += batch.length
              warned.reason = reason
            },
            onSuccess: () => {
              stats.delivered += batch.length
            }
          }),
          // Cut off by a stop: lost like a failed batch, and counted so.
          Effect.onInterrupt(() => Effect.sync(() => void (stats.failed += batch.length))),
          Effect.zipRight(warnIfDue)
        )
      })

    // Added before the consumer starts, so it runs after the consumer is stopped: whatever is
    // left gets one bounded chance. A batch in flight when the consumer stops may be lost.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        for (;;) {
          const batch = yield* Queue.takeUpTo(queue, batchRecords)
          if (batch.length === 0) return
          yield* deliver([...batch])
        }
      }).pipe(
        Effect.interruptible,
        Effect.timeoutOption(Duration.millis(TELEMETRY_FLUSH_MS)),
        // The last word on what was lost, whenever the previous warning was.
        Effect.zipRight(warn(true))
      )
    )
    yield* Effect.forkScoped(
      Effect.forever(Effect.flatMap(Queue.takeBetween(queue, 1, batchRecords), (batch) => deliver([...batch])))
    )

    return {
      record,
      stats: Effect.sync((): TelemetryStats => ({ ...stats }))
    } satisfies TelemetryShape
  })
