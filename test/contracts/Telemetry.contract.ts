/**
 * The Telemetry contract (DESIGN §5: fire and forget, not journaled, goes to a configured sink;
 * best-effort and bounded): every sink must pass this suite. Real time (`it.live`): the sinks
 * write files and talk HTTP.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, type Scope } from "effect"
import { TELEMETRY_RECORD_BYTES } from "../../src/domain/Limits.js"
import type { TelemetryRecord, TelemetryShape } from "../../src/services/Telemetry.js"

export interface TelemetryHarness {
  readonly telemetry: TelemetryShape
  /** Every record the sink has received so far, in order, read back from the sink itself. */
  readonly received: Effect.Effect<ReadonlyArray<TelemetryRecord>>
  /** The sink stops answering (a stalled disk, a collector that does not answer) … */
  readonly stall: Effect.Effect<void>
  /** … and answers again. */
  readonly resume: Effect.Effect<void>
}

export type MakeHarness = (options: { readonly queueBytes: number }) => Effect.Effect<TelemetryHarness, unknown, Scope.Scope>

/** Polls until `probe` holds (10 s at most). */
export const eventually = <A>(what: string, probe: Effect.Effect<A>, holds: (a: A) => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1_000; i++) {
      const a = yield* probe
      if (holds(a)) return a
      yield* Effect.sleep(Duration.millis(10))
    }
    return yield* Effect.dieMessage(`never: ${what}`)
  })

const rec = (i: number, data: unknown = { i, note: "héllo \u2028 😀" }): TelemetryRecord => ({
  session_id: "ses_0000000000test0000000000",
  activation: 4,
  at_ms: 1_700_000_000_000 + i,
  data
})

export const telemetryContract = (name: string, harness: MakeHarness) =>
  describe(`Telemetry contract: ${name}`, () => {
    it.scopedLive("records reach the sink in order, whole: {session_id, activation, at_ms, data}", () =>
      Effect.gen(function*() {
        const h = yield* harness({ queueBytes: 1024 * 1024 })
        const sent = [0, 1, 2, 3, 4].map((i) => rec(i))
        for (const r of sent) yield* h.telemetry.record(r)
        const got = yield* eventually("five records at the sink", h.received, (rs) => rs.length >= 5)
        expect(got).toEqual(sent)
        // The sink may have the records a moment before its answer reaches the queue's consumer.
        const stats = yield* eventually("five records delivered", h.telemetry.stats, (s) => s.delivered >= 5)
        expect(stats).toEqual({ accepted: 5, dropped: 0, delivered: 5, failed: 0 })
      }))

    it.scopedLive("a stalled sink never makes a caller wait: past the queue's bound records are dropped and counted, and what was queued reaches the sink once it answers", () =>
      Effect.gen(function*() {
        const h = yield* harness({ queueBytes: 4 * 1024 })
        yield* h.stall
        // The sink stays stalled until the test lets it answer: a caller that waited for it would never get past here.
        for (let i = 0; i < 1_000; i++) yield* h.telemetry.record(rec(i, { i, pad: "x".repeat(100) }))
        const stats = yield* h.telemetry.stats
        expect(stats.accepted + stats.dropped).toBe(1_000)
        expect(stats.dropped).toBeGreaterThan(900) // about 4 KiB of ~170-byte records, plus one batch in flight
        yield* h.resume
        const got = yield* eventually("the accepted records at the sink", h.received, (rs) => rs.length >= stats.accepted)
        expect(got.map((r) => (r.data as { i: number }).i)).toEqual([...got.map((r) => (r.data as { i: number }).i)].sort((a, b) => a - b))
        const after = yield* eventually("the accepted records delivered", h.telemetry.stats, (s) => s.delivered >= stats.accepted)
        expect(after).toEqual({ ...stats, delivered: stats.accepted })
      }))

    it.scopedLive("a record that is not JSON, or larger than TELEMETRY_RECORD_BYTES, is dropped and counted, never thrown; the next one goes through", () =>
      Effect.gen(function*() {
        const h = yield* harness({ queueBytes: 8 * TELEMETRY_RECORD_BYTES })
        yield* h.telemetry.record(rec(0, { big: 1n }))
        yield* h.telemetry.record(rec(1, { pad: "x".repeat(TELEMETRY_RECORD_BYTES) }))
        yield* h.telemetry.record(rec(2, "fine"))
        const got = yield* eventually("the valid record at the sink", h.received, (rs) => rs.length >= 1)
        expect(got).toEqual([rec(2, "fine")])
        expect(yield* h.telemetry.stats).toMatchObject({ accepted: 1, dropped: 2 })
      }))
  })
