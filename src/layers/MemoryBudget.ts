/**
 * How the memory for sessions not in use (BRAIN_CACHE_BYTES) is shared out. Unset, it is a
 * fraction of this process's V8 heap limit, so a server started with a small heap keeps small
 * caches and most of its heap for the requests in flight.
 *
 * - warm: idle actors kept by an idle TTL or, without one, for the release grace
 *   (SESSION_RELEASE_GRACE_MS) or because their state is larger than the projection's whole
 *   share; past it those in their grace, then the least recently used, are released
 *   early (an actor is kept warm for latency only, so releasing one changes nothing but speed);
 * - projection: folded states of released sessions, so their next open reads only the tail;
 * - views: what reads of released sessions need of their states (status, transcript lengths),
 *   so an Events page or a status GET does not rebuild a state too large for the projection's share;
 * - recent: the journals' newest records, for the reads a turn makes of what it just wrote;
 * - journals: opened journals kept in memory (segments, read index), so the next access of the
 *   session reads no file to open it; past it the least recently used idle ones are dropped.
 */
import * as v8 from "node:v8"
import {
  ANSWER_HEAP_FRACTION,
  CACHE_HEAP_FRACTION,
  DEFAULT_CACHE_BYTES_CAP,
  INFLIGHT_BODY_HEAP_FRACTION,
  LISTED_ID_BYTES,
  LISTING_HEAP_FRACTION,
  MODULE_CACHE_HEAP_FRACTION,
  WORKING_MEMORY_HEAP_FRACTION
} from "../domain/Limits.js"

export interface MemoryBudget {
  readonly warmBytes: number
  readonly projectionBytes: number
  readonly viewBytes: number
  readonly recentBytes: number
  readonly journalBytes: number
}

/** Request bodies held at once (BRAIN_INFLIGHT_BODY_BYTES): the setting, or a 32nd of the heap limit. */
export const inflightBodyBytes = (setting: number | undefined): number =>
  setting ?? Math.floor(v8.getHeapStatistics().heap_size_limit * INFLIGHT_BODY_HEAP_FRACTION)

/** Heap session creates, opens and turns may take at once (BRAIN_WORKING_MEMORY_BYTES): the setting, or a quarter of the heap limit. */
export const workingMemoryBytes = (setting: number | undefined): number =>
  setting ?? Math.floor(v8.getHeapStatistics().heap_size_limit * WORKING_MEMORY_HEAP_FRACTION)

/** SSE catch-up pages held until their sockets take them (layers/sessions/HeldPages.ts): BRAIN_ANSWER_BYTES, or an eighth of the heap limit. */
export const sseHeldPageBytes = (setting: number | undefined): number =>
  setting ?? Math.floor(v8.getHeapStatistics().heap_size_limit * ANSWER_HEAP_FRACTION)

/** Compiled uploaded modules kept in memory (BRAIN_MODULE_CACHE_BYTES): the setting, or a sixteenth of the heap limit. */
export const moduleCacheBytes = (setting: number | undefined): number =>
  setting ?? Math.floor(v8.getHeapStatistics().heap_size_limit * MODULE_CACHE_HEAP_FRACTION)

/** Sessions the journal's sorted listing holds in memory at most (journal/Listing.ts): 1/64 of the heap limit. */
export const listedSessions = (): number =>
  Math.floor((v8.getHeapStatistics().heap_size_limit * LISTING_HEAP_FRACTION) / LISTED_ID_BYTES)

export const totalCacheBytes = (cacheBytes: number | undefined): number =>
  cacheBytes ?? Math.min(DEFAULT_CACHE_BYTES_CAP, Math.floor(v8.getHeapStatistics().heap_size_limit * CACHE_HEAP_FRACTION))

export const memoryBudget = (cacheBytes: number | undefined): MemoryBudget => {
  const total = totalCacheBytes(cacheBytes)
  return {
    warmBytes: Math.floor(total / 2),
    projectionBytes: Math.floor((total * 3) / 16),
    viewBytes: Math.floor(total / 16),
    recentBytes: Math.floor(total / 8),
    journalBytes: Math.floor(total / 8)
  }
}
