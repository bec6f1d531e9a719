/**
 * The in-memory Journal: the same semantics as the file journal (dense sequences, atomic
 * multi-record appends, sticky write failure, live feed after commit), no durability.
 * For fast unit tests; never the embedded default.
 */
import { Clock, Effect, Layer } from "effect"
import type { SessionId } from "../domain/Ids.js"
import type { JournalRecord } from "../domain/Records.js"
import {
  Journal,
  JournalWriteFailed,
  SessionAlreadyExists,
  SessionNotFound,
  type JournalShape
} from "../services/Journal.js"
import { prepareEntries } from "./journal/Encode.js"
import { Subscribers } from "./journal/Subscribers.js"

interface MemorySession {
  readonly records: Array<JournalRecord>
  readonly bytes: Array<number>
  broken: JournalWriteFailed | undefined
  lastRecordedAtMs: number
}

export interface MemoryJournalControl {
  /** The next append to this session fails as a write failure would, and the failure sticks. */
  readonly failNextWrite: (session: SessionId) => void
}

export const make = Effect.sync(() => {
  const sessions = new Map<string, MemorySession>()
  const hub = new Subscribers()
  const failing = new Set<string>()

  const get = (session: SessionId) =>
    Effect.suspend(() => {
      const s = sessions.get(session)
      return s ? Effect.succeed(s) : Effect.fail(new SessionNotFound({ session }))
    })

  const journal: JournalShape = {
    create: (session) =>
      Effect.suspend(() => {
        if (sessions.has(session)) return Effect.fail(new SessionAlreadyExists({ session }))
        sessions.set(session, { records: [], bytes: [], broken: undefined, lastRecordedAtMs: 0 })
        return Effect.void
      }),
    exists: (session) => Effect.sync(() => sessions.has(session)),
    list: Effect.sync(() => [...sessions.keys()] as Array<SessionId>),
    append: (session, entries) =>
      Effect.gen(function*() {
        const prepared = yield* prepareEntries(entries)
        const s = yield* get(session)
        if (s.broken) return yield* Effect.fail(s.broken)
        if (failing.delete(session)) {
          s.broken = new JournalWriteFailed({ session, reason: "injected write failure" })
          return yield* Effect.fail(s.broken)
        }
        const now = Math.max(yield* Clock.currentTimeMillis, s.lastRecordedAtMs)
        s.lastRecordedAtMs = now
        const added: Array<JournalRecord> = prepared.map((p, i) => ({
          sequence: s.records.length + 1 + i,
          recorded_at_ms: now,
          kind: p.kind,
          payload: JSON.parse(p.jsonText)
        }))
        s.records.push(...added)
        s.bytes.push(...prepared.map((p) => 30 + p.kindBytes.length + p.json.length))
        hub.publish(session, added)
        return added.map((r) => r.sequence)
      }),
    read: (session, { after, limit, maxBytes }) =>
      Effect.map(get(session), (s) => {
        const out: Array<JournalRecord> = []
        let bytes = 0
        for (let i = Math.max(0, after); i < s.records.length && out.length < limit; i++) {
          bytes += s.bytes[i]!
          if (maxBytes !== undefined && out.length > 0 && bytes > maxBytes) break
          out.push(s.records[i]!)
        }
        return out
      }),
    remove: (session) => Effect.map(get(session), () => void sessions.delete(session)),
    // Memory has no torn writes to find: what was appended is what is stored.
    reset: (session) => Effect.sync(() => {
      const s = sessions.get(session)
      if (s) s.broken = undefined
    }),
    lastSequence: (session) => Effect.map(get(session), (s) => s.records.length),
    subscribe: (session) =>
      Effect.flatMap(get(session), (s) => hub.subscribe(session, s.records.length))
  }
  const control: MemoryJournalControl = { failNextWrite: (session) => void failing.add(session) }
  return { journal, control }
})

export const layer = Layer.effect(Journal, Effect.map(make, (m) => m.journal))
