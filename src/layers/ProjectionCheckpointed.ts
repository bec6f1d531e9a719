/**
 * Projection over the Journal with checkpoints. A checkpoint is used only when its checksum
 * holds and the journal's record at the sequence it covers is the very record it was folded
 * through; then only the tail is read. Anything else (missing, damaged, stale beyond repair,
 * from another journal) is ignored and the state is rebuilt from the journal.
 */
import { Effect, Layer, Option } from "effect"
import { empty, foldAll, type SessionState } from "../domain/Projection.js"
import { deserializeState, serializeState } from "../domain/SerializedState.js"
import type { SessionId } from "../domain/Ids.js"
import { Journal, type StoredSegment } from "../services/Journal.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { type CheckpointPieces, CheckpointStore, Projection, type Projected, type ProjectionShape } from "../services/Projection.js"
import { memoryBudget } from "./MemoryBudget.js"
import { eventLoopTurn } from "./Waits.js"
import { CHECKPOINT_FORMAT, type CheckpointLimits, decodeCheckpoint, encodeCheckpoint, recordDigest } from "./projection/Checkpoint.js"

const PAGE = 1000

/**
 * The bytes of the segments that may hold a record after `sequence`: the one holding the next
 * record and every one after it (an upper bound: the first of them is counted whole).
 */
export const bytesAfter = (segments: ReadonlyArray<StoredSegment>, sequence: number): number => {
  let bytes = 0
  for (let i = 0; i < segments.length; i++) {
    const next = segments[i + 1]
    if (next === undefined || next.firstSequence > sequence + 1) bytes += segments[i]!.bytes
  }
  return bytes
}

/**
 * States this process rebuilt, from a checkpoint (its text parsed, then the tail folded) or from
 * the journal's start: what a state kept in memory saves. For tests and probes.
 */
export const rebuiltStates = { fromCheckpoint: 0, fromJournal: 0 }

/**
 * The cache of released sessions' states holds at most `cacheBytes`, counted by each state's own
 * byte count (its content, not a guess per message), least recently released dropped first. Of
 * the states larger than a quarter of it only the latest is kept (one larger than the whole is
 * not kept at all): without it, every turn of such a session (thousands of idempotency keys)
 * parsed its whole checkpoint and folded again, hundreds of milliseconds of the main thread. (A
 * session released at once whose state is larger than the whole cache is kept warm by the
 * session registry instead, in the warm share: sessions/Registry.ts, `tooBigToRelease`.)
 * `limits` sets how checkpoints are cut into pieces (projection/Checkpoint.ts); tests set them small.
 */
export const make = (cacheBytes: number, limits: CheckpointLimits = {}) => Effect.gen(function*() {
  const journal = yield* Journal
  const store = yield* CheckpointStore
  const cache = new Map<SessionId, { readonly state: SessionState; readonly bytes: number }>()
  let cachedBytes = 0
  /** The cached state above a quarter of the cache, if any: at most one is kept. */
  let big: SessionId | undefined
  const drop = (session: SessionId) => {
    const c = cache.get(session)
    if (c) {
      cache.delete(session)
      cachedBytes -= c.bytes
    }
    if (big === session) big = undefined
  }

  const fromCheckpoint = Effect.fnUntraced(function*(session: SessionId) {
    const text = yield* store.load(session)
    if (Option.isNone(text)) return undefined
    const body = decodeCheckpoint(text.value, session, limits)
    if (!body || body.state.lastSequence !== body.through.sequence) return undefined
    const [covered] = yield* journal.read(session, { after: body.through.sequence - 1, limit: 1 })
    if (!covered || covered.sequence !== body.through.sequence || recordDigest(covered) !== body.through.digest) {
      return undefined
    }
    return deserializeState(body.state)
  })

  /**
   * Folds the journal after `start`, a page at a time, with a turn of the event loop between two
   * pages (as the open's scan has between its slices, journal/Scan.ts): a cold open of a long
   * session without a checkpoint folds its whole journal, and over a store whose reads wait for no
   * IO (the memory store, records kept in memory) it held every other request (`/health/live`
   * included) for all of it. A tail of one page, a warm session's usual, folds without one.
   */
  const foldTail = Effect.fnUntraced(function*(session: SessionId, start: SessionState) {
    let state = start
    let folded = 0
    for (;;) {
      const page = yield* journal.read(session, { after: state.lastSequence, limit: PAGE })
      if (page.length === 0) return { state, folded }
      if (folded > 0) yield* eventLoopTurn
      state = foldAll(page, state)
      folded += page.length
    }
  })

  function* stateOf(session: SessionId) {
    const cached = cache.get(session)
    if (cached) {
      const last = yield* journal.lastSequence(session)
      if (last === cached.state.lastSequence) return { state: cached.state, folded: 0, source: "memory" } satisfies Projected
      if (last > cached.state.lastSequence) {
        const { state, folded } = yield* foldTail(session, cached.state)
        return { state, folded, source: "memory" } satisfies Projected
      }
      drop(session)
    }
    const restored = yield* fromCheckpoint(session)
    if (restored) rebuiltStates.fromCheckpoint++
    else rebuiltStates.fromJournal++
    const { state, folded } = yield* foldTail(session, restored ?? empty)
    return { state, folded, source: restored ? "checkpoint" : "journal" } satisfies Projected
  }

  /**
   * What opening `session` reads, told from file names and sizes (O(segments), no record read).
   * Opening its journal (unless open) validates it a segment at a time, so it holds about its
   * largest segment; the fold (unless the state is in memory) holds the checkpoint and reads the
   * journal after the sequence it covers: every segment that may hold a later record, whole. The
   * two come one after the other, so the larger counts.
   */
  function* openBytesOf(session: SessionId) {
    // A journal that cannot say (a session that is not there) weighs nothing: its open fails.
    const stored = journal.stored === undefined ? undefined : yield* Effect.option(journal.stored(session))
    if (stored === undefined || Option.isNone(stored)) return 0
    const { bytes, open, segments } = stored.value
    const opening = open ? 0 : segments === undefined ? bytes : Math.max(0, ...segments.map((s) => s.bytes))
    if (cache.has(session)) return opening
    const checkpointBytes = store.size === undefined ? 0 : yield* store.size(session)
    const through = checkpointBytes === 0 || store.through === undefined ? undefined : yield* store.through(session)
    return Math.max(opening, checkpointBytes + (through === undefined || segments === undefined ? bytes : bytesAfter(segments, through)))
  }

  function* checkpointOf(session: SessionId, state: SessionState) {
    if (state.lastSequence < 1) return undefined
    const [covered] = yield* journal.read(session, { after: state.lastSequence - 1, limit: 1 })
    if (!covered) return undefined
    // Encoded as it is written, across the writes' waits: of a state, which no later fold changes.
    const body = {
      format: CHECKPOINT_FORMAT,
      session,
      through: { sequence: covered.sequence, digest: recordDigest(covered) },
      state: serializeState(state)
    } as const
    const pieces = encodeCheckpoint(body, limits)
    // Counted as the store writes them: what the next checkpoint of a warm session waits on (sessions/Checkpoints.ts).
    let bytes = pieces.headBytes
    const counted: CheckpointPieces = {
      headBytes: pieces.headBytes,
      head: pieces.head,
      rest: {
        *[Symbol.iterator]() {
          for (const chunk of pieces.rest) {
            bytes += chunk.byteLength
            yield chunk
          }
        }
      }
    }
    yield* store.save(session, counted)
    return bytes
  }

  const service: ProjectionShape = {
    state: (session) => Effect.gen(() => stateOf(session)),
    remember: (session, state) =>
      Effect.sync(() => {
        drop(session)
        const bytes = state.bytes
        if (bytes > cacheBytes) return
        if (bytes > cacheBytes / 4) {
          // One big state at a time: a big session's next turn finds its state here instead of
          // parsing its checkpoint and folding again, and big sessions taking turns cannot empty
          // the cache of every small one.
          if (big !== undefined) drop(big)
          big = session
        }
        cache.set(session, { state, bytes })
        cachedBytes += bytes
        for (const [oldest] of cache) {
          if (cachedBytes <= cacheBytes) break
          drop(oldest)
        }
      }),
    cached: (session) => cache.get(session)?.state,
    forget: (session) => Effect.sync(() => drop(session)),
    checkpoint: (session, state) => Effect.gen(() => checkpointOf(session, state)),
    openBytes: (session) => Effect.gen(() => openBytesOf(session))
  }
  return service
})

/** The projection with its cache sized from ServerConfig's BRAIN_CACHE_BYTES. */
export const layer = Layer.effect(
  Projection,
  Effect.flatMap(ServerConfig, (config) => make(memoryBudget(config.cacheBytes).projectionBytes))
)
