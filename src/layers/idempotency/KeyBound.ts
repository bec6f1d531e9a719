/**
 * The bound on an idempotency store's live keys (BRAIN_MAX_IDEMPOTENCY_KEYS), one implementation
 * for both stores: the file store's index (Index.ts) and the memory store (IdempotencyMemory.ts).
 *
 * - An entry claimed or reserved by this process and not yet answered is a request in flight
 *   (`inFlight`): it never expires under it. An entry whose request is never run again under its
 *   key and has no answer to give but that (`unresolved`: a claim never answered, an ambiguous
 *   verdict) never expires either: expiring it would let a retry run the request a second time.
 *   Any other entry expires `retentionMs` after its time (its answer's); retention 0 keeps
 *   everything.
 * - The entries are bounded by `maxKeys`: `hasRoom` says whether more fit, first dropping the
 *   expired ones when they stand in the way. A live entry is never dropped to make room.
 * - Room is made from the front of the map, where the entries that expire first are, passing over
 *   requests in flight and unresolved entries (`sweepFront`: a few steps, not a walk over every
 *   key); when that is not
 *   enough, by a full sweep, made at most once per `fullSweepEveryMs`. With `fullSweepEveryMs` 0
 *   (the memory store, whose map is not kept in expiry order) every lack of room is a full sweep.
 */
import * as v8 from "node:v8"

/**
 * Milliseconds: the shortest interval between the full sweeps a full index makes for expired
 * entries its front sweep cannot reach (a full sweep of half a million keys takes tens of ms).
 */
export const IDEMPOTENCY_FULL_SWEEP_MS = 60_000

/** Entries in flight a front sweep passes over at most, before it stops. */
const FRONT_SWEEP_SKIPS = 4_096

/**
 * Bytes of heap the default bound allows a live key: the measured 320 B (docs/operations.md, "The
 * idempotency log") with room for the map's growth and the collector's slack.
 */
const KEY_HEAP_BYTES = 512

/** The default bound's share of the heap limit: a sixteenth. */
const KEYS_HEAP_FRACTION = 1 / 16

/**
 * Live keys the store holds at most (BRAIN_MAX_IDEMPOTENCY_KEYS): the setting, or as many as a
 * sixteenth of the heap limit holds at KEY_HEAP_BYTES each (530,432 under Node's 4,144 MiB limit
 * for a 4 GiB old space).
 */
export const maxIdempotencyKeys = (setting: number | undefined): number =>
  setting ?? Math.max(1, Math.floor(v8.getHeapStatistics().heap_size_limit * KEYS_HEAP_FRACTION / KEY_HEAP_BYTES))

/** A store's entries by id, bounded in number, each expiring `retentionMs` after its `atMs` unless in flight. */
export abstract class KeyBound<E extends { readonly atMs: number }> {
  readonly entries = new Map<string, E>()
  private lastFullSweepMs = Number.NEGATIVE_INFINITY

  constructor(
    private readonly retentionMs: number,
    readonly maxKeys: number,
    private readonly fullSweepEveryMs: number
  ) {}

  /** Claimed or reserved by this process and not yet answered: it never expires under the request. */
  protected abstract inFlight(e: E): boolean

  /** Never run again under its key and never answered but so (a claim never answered, an ambiguous verdict): it never expires. */
  protected abstract unresolved(e: E): boolean

  expired(e: E, now: number) {
    return this.retentionMs > 0 && !this.inFlight(e) && !this.unresolved(e) && now - e.atMs >= this.retentionMs
  }

  drop(id: string, e: E) {
    if (this.entries.get(id) !== e) return
    this.entries.delete(id)
  }

  /** Drops every expired entry; returns how many. */
  sweep(now: number) {
    this.lastFullSweepMs = now
    let dropped = 0
    for (const [id, e] of this.entries) {
      if (this.expired(e, now)) {
        this.drop(id, e)
        dropped++
      }
    }
    return dropped
  }

  /**
   * Drops the expired entries at the front, passing over requests in flight and unresolved
   * entries (at most FRONT_SWEEP_SKIPS of them); stops at the first entry that is none of these.
   */
  private sweepFront(now: number) {
    let skipped = 0
    for (const [id, e] of this.entries) {
      if (this.expired(e, now)) this.drop(id, e)
      else if (!(this.inFlight(e) || this.unresolved(e)) || ++skipped > FRONT_SWEEP_SKIPS) return
    }
  }

  /**
   * Makes what room expiry allows for `more` entries: the front first, then, when that is not
   * enough, a full sweep unless one ran less than `fullSweepEveryMs` ago (a full index refusing a
   * stream of new keys walks every key at most once per interval).
   */
  makeRoom(now: number, more: () => number) {
    if (this.entries.size + more() <= this.maxKeys) return
    if (this.fullSweepEveryMs > 0) {
      this.sweepFront(now)
      if (this.entries.size + more() <= this.maxKeys) return
    }
    if (now - this.lastFullSweepMs >= this.fullSweepEveryMs || now < this.lastFullSweepMs) this.sweep(now)
  }

  /** Whether `more` entries fit beside those held, once the expired ones in the way are dropped. */
  hasRoom(now: number, more: number) {
    this.makeRoom(now, () => more)
    return this.entries.size + more <= this.maxKeys
  }

  /**
   * Whether the entries `ids` name all fit (an adoption: all or none), counted against the entries
   * as they stand (one held already is replaced in place) once the expired ones in the way are
   * dropped. Adding none is never refused.
   */
  hasRoomFor(now: number, ids: ReadonlyArray<string>) {
    // Counted again after room is made: an expired entry it dropped is then added, not replaced.
    const added = () => new Set(ids.filter((id) => !this.entries.has(id))).size
    this.makeRoom(now, added)
    const n = added()
    return n === 0 || this.entries.size + n <= this.maxKeys
  }
}
