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
 * - An entry may have an `owner`, the session its request was about: each session's entries are
 *   counted and bounded by `sessionKeys` (`hasSessionRoom`, room made the same way), so one
 *   session's requests cannot take the whole bound. Entries enter and leave the map through
 *   `put`, `drop` and `forget`, which keep the counts.
 * - Deletes may pass `maxKeys` by up to `reserveKeys` (`hasRoom`/`hasRoomFor` with `reserve`).
 */
import * as v8 from "node:v8"
import { DELETE_RESERVE_KEYS_SHARE, SESSION_LOG_KEYS_SHARE } from "../../domain/Limits.js"

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

/**
 * Keys of requests about one session the store holds at most (BRAIN_MAX_SESSION_LOG_KEYS): the
 * setting, or SESSION_LOG_KEYS_SHARE of the store's bound, at least 1.
 */
const maxSessionLogKeys = (setting: number | undefined, maxKeys: number): number =>
  setting ?? Math.max(1, Math.floor(maxKeys * SESSION_LOG_KEYS_SHARE))

/**
 * Keys deletes may take past the store's bound (BRAIN_DELETE_RESERVE_KEYS): the setting, or
 * DELETE_RESERVE_KEYS_SHARE of the store's bound.
 */
const deleteReserveKeys = (setting: number | undefined, maxKeys: number): number =>
  setting ?? Math.floor(maxKeys * DELETE_RESERVE_KEYS_SHARE)

/**
 * A store's bound from its settings (BRAIN_MAX_IDEMPOTENCY_KEYS, BRAIN_MAX_SESSION_LOG_KEYS,
 * BRAIN_DELETE_RESERVE_KEYS), those unset derived as above: the log's keys, one session's share,
 * the deletes' reserve, in the order a KeyBound takes them.
 */
export const keyBounds = (settings: {
  readonly maxKeys?: number | undefined
  readonly maxSessionKeys?: number | undefined
  readonly deleteReserveKeys?: number | undefined
}): readonly [maxKeys: number, sessionKeys: number, reserveKeys: number] => {
  const maxKeys = maxIdempotencyKeys(settings.maxKeys)
  return [maxKeys, maxSessionLogKeys(settings.maxSessionKeys, maxKeys), deleteReserveKeys(settings.deleteReserveKeys, maxKeys)]
}

/** A store's entries by id, bounded in number, each expiring `retentionMs` after its `atMs` unless in flight. */
export abstract class KeyBound<E extends { readonly atMs: number; owner?: string | undefined }> {
  readonly entries = new Map<string, E>()
  /**
   * Entries per owner (a session), for those that have one, with the owner's id as first counted:
   * every entry of the owner is given that one string, so that each holds no copy of its own.
   */
  private readonly owned = new Map<string, { readonly owner: string; n: number }>()
  private lastFullSweepMs = Number.NEGATIVE_INFINITY

  constructor(
    private readonly retentionMs: number,
    readonly maxKeys: number,
    private readonly fullSweepEveryMs: number,
    /** Entries one owner holds at most. */
    readonly sessionKeys: number = Number.POSITIVE_INFINITY,
    /** Entries deletes may add past `maxKeys`. */
    readonly reserveKeys: number = 0
  ) {}

  /** The entries `owner` holds. */
  ownedBy(owner: string) {
    return this.owned.get(owner)?.n ?? 0
  }

  private count(e: E) {
    if (e.owner === undefined) return
    const c = this.owned.get(e.owner)
    if (c === undefined) this.owned.set(e.owner, { owner: e.owner, n: 1 })
    else {
      c.n++
      e.owner = c.owner
    }
  }

  private uncount(e: E) {
    if (e.owner === undefined) return
    const c = this.owned.get(e.owner)
    if (c === undefined) return
    if (--c.n === 0) this.owned.delete(e.owner)
  }

  /** Puts `e` under `id`, in place of the entry there (at the end of the map when there was none). */
  put(id: string, e: E) {
    const old = this.entries.get(id)
    if (old !== undefined) this.uncount(old)
    this.entries.set(id, e)
    this.count(e)
  }

  /** Makes `owner` the owner of `e`, an entry in the map without one (a reservation being kept). */
  own(id: string, e: E, owner: string) {
    if (this.entries.get(id) !== e || e.owner !== undefined) return
    e.owner = owner
    this.count(e)
  }

  /** Removes the entry under `id`, whatever it is; `drop`'s other bookkeeping is not done. */
  forget(id: string) {
    const old = this.entries.get(id)
    if (old === undefined) return
    this.entries.delete(id)
    this.uncount(old)
  }

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
    this.uncount(e)
    this.dropped(e)
  }

  /** What else goes with an entry `drop` removed (the file index's byte count). */
  protected dropped(_e: E) {}

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
  makeRoom(now: number, fits: () => boolean) {
    if (fits()) return
    if (this.fullSweepEveryMs > 0) {
      this.sweepFront(now)
      if (fits()) return
    }
    if (now - this.lastFullSweepMs >= this.fullSweepEveryMs || now < this.lastFullSweepMs) this.sweep(now)
  }

  /** The bound on the entries: `maxKeys`, plus `reserveKeys` for a delete. */
  private limit(reserve: boolean) {
    return reserve ? this.maxKeys + this.reserveKeys : this.maxKeys
  }

  /**
   * Whether `more` entries fit beside those held, once the expired ones in the way are dropped;
   * with `reserve` (a delete's), within the delete reserve too.
   */
  hasRoom(now: number, more: number, reserve = false) {
    const fits = () => this.entries.size + more <= this.limit(reserve)
    this.makeRoom(now, fits)
    return fits()
  }

  /** Whether one more entry of `owner` fits in its share, once the expired ones in the way are dropped. */
  hasSessionRoom(now: number, owner: string) {
    const fits = () => this.ownedBy(owner) < this.sessionKeys
    this.makeRoom(now, fits)
    return fits()
  }

  /**
   * Whether the entries `ids` name all fit (an adoption: all or none), counted against the entries
   * as they stand (one held already is replaced in place) once the expired ones in the way are
   * dropped. Adding none is never refused.
   */
  hasRoomFor(now: number, ids: ReadonlyArray<string>, reserve = false) {
    // Counted again after room is made: an expired entry it dropped is then added, not replaced.
    const added = () => new Set(ids.filter((id) => !this.entries.has(id))).size
    const fits = () => {
      const n = added()
      return n === 0 || this.entries.size + n <= this.limit(reserve)
    }
    this.makeRoom(now, fits)
    return fits()
  }
}
