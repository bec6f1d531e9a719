/**
 * The memory store: records in arrays, no durability. For fast unit tests (through the same
 * journal core as the file store, so the same sequencing, group commit, tails and failures);
 * never the embedded default. `failNextWrite` makes a session's next round fail as a failed write
 * would, for fault injection.
 *
 * Several journal cores can share one store's sessions (`make(shared)`), as owners in separate
 * processes would share a database: the store has `claim`, and refuses a commit from an owner
 * whose claim on the session was overtaken (Store.ts, "Ownership").
 */
import { Effect } from "effect"
import type { SessionId } from "../../domain/Ids.js"
import type { JournalRecord, RecordKind } from "../../domain/Records.js"
import { JournalWriteFailed, SessionAlreadyExists, SessionNotFound } from "../../services/Journal.js"
import { frameBytes } from "./Frame.js"
import type { JournalStore } from "./Store.js"
import type { RecentRecord } from "./Tail.js"

/** A session as the memory store keeps it. */
export interface MemorySession {
  readonly session: SessionId
  readonly records: Array<RecentRecord>
  /** The records' frame bytes, as the file store would write them. */
  bytes: number
  removed: boolean
  /** The latest claim on the session (0: never claimed). */
  generation: number
}

/** The sessions a memory store keeps, which several stores (one per owner) may share. */
export type MemorySessions = Map<string, MemorySession>

export interface MemoryStoreControl {
  /** The session's next round fails as a write failure would (and the failure sticks until reset). */
  readonly failNextWrite: (session: SessionId) => void
}

const overtaken = (latest: number, own: number | undefined, consequence: string) =>
  `another owner claimed the session (generation ${latest}, this owner's ${own}); ${consequence}`

export const make = (
  sessions: MemorySessions = new Map()
): { readonly store: JournalStore<MemorySession>; readonly control: MemoryStoreControl } => {
  const failing = new Set<string>()
  const store: JournalStore<MemorySession> = {
    create: (session) =>
      Effect.suspend(() => {
        if (sessions.has(session)) return Effect.fail(new SessionAlreadyExists({ session }))
        sessions.set(session, { session, records: [], bytes: 0, removed: false, generation: 0 })
        return Effect.void
      }),
    exists: (session) => Effect.sync(() => sessions.has(session)),
    list: Effect.sync(() => [...sessions.keys()] as Array<SessionId>),
    open: (session) =>
      Effect.suspend(() => {
        const s = sessions.get(session)
        if (!s) return Effect.fail(new SessionNotFound({ session }))
        const last = s.records[s.records.length - 1]
        return Effect.succeed({ state: s, lastSequence: s.records.length, lastRecordedAtMs: last?.recordedAtMs ?? 0, recent: [] })
      }),
    claim: (session) =>
      Effect.suspend(() => {
        const s = sessions.get(session)
        return s ? Effect.succeed(++s.generation) : Effect.fail(new SessionNotFound({ session }))
      }),
    commit: (items, onDone) =>
      Effect.sync(() => {
        for (let i = 0; i < items.length; i++) {
          const { generation, recordedAtMs, records, state } = items[i]!
          if (state.removed) {
            onDone(i, "the session was deleted")
            continue
          }
          if (generation !== state.generation) {
            onDone(i, overtaken(state.generation, generation, "nothing of this append was written"))
            continue
          }
          if (failing.delete(state.session)) {
            onDone(i, "injected write failure")
            continue
          }
          for (const r of records) {
            const size = frameBytes(r.prepared.kindBytes, r.prepared.json)
            state.records.push({
              sequence: r.sequence,
              recordedAtMs: r.recordedAtMs ?? recordedAtMs,
              kind: r.prepared.kind,
              json: r.prepared.jsonText,
              size
            })
            state.bytes += size
          }
          onDone(i, undefined)
        }
      }),
    read: (state, after, last, limit, maxBytes) =>
      Effect.sync(() => {
        const out: Array<JournalRecord> = []
        let bytes = 0
        for (let i = Math.max(0, after); i < last && out.length < limit; i++) {
          const r = state.records[i]!
          bytes += r.size
          if (maxBytes !== undefined && out.length > 0 && bytes > maxBytes) break
          out.push({ sequence: r.sequence, recorded_at_ms: r.recordedAtMs, kind: r.kind as RecordKind, payload: JSON.parse(r.json) })
        }
        return out
      }),
    remove: (session, state, generation) =>
      Effect.suspend((): Effect.Effect<void, SessionNotFound | JournalWriteFailed> => {
        const s = sessions.get(session)
        if (!s) {
          if (state) state.removed = true
          return Effect.fail(new SessionNotFound({ session }))
        }
        if (generation !== s.generation) {
          return Effect.fail(new JournalWriteFailed({ session, reason: overtaken(s.generation, generation, "the session was not removed") }))
        }
        if (state) state.removed = true
        s.removed = true
        sessions.delete(session)
        return Effect.void
      }),
    size: (state) => state.bytes,
    readBytes: (state, after) => state.records[Math.max(0, after)]?.size ?? 0,
    release: () => Effect.void,
    close: Effect.void
  }
  return { store, control: { failNextWrite: (session) => void failing.add(session) } }
}
