/**
 * The in-memory Journal: the journal core over the memory store (journal/MemoryStore.ts), so the
 * same semantics as the file journal (dense sequences, atomic multi-record appends, group commit,
 * sticky write failure, live feed after commit) without durability. For fast unit tests; never
 * the embedded default.
 */
import { Effect, Layer } from "effect"
import { Journal } from "../services/Journal.js"
import * as Core from "./journal/Core.js"
import * as MemoryStore from "./journal/MemoryStore.js"

export type MemoryJournalControl = MemoryStore.MemoryStoreControl

export type MemorySessions = MemoryStore.MemorySessions

/**
 * The journal and its fault-injection control; the writer lives as long as the scope. Journals
 * made over the same `shared` sessions are separate owners of one store (MemoryStore.ts).
 */
export const makeOver = (shared?: MemorySessions, options?: Core.CoreOptions) =>
  Effect.gen(function*() {
    const { control, store } = MemoryStore.make(shared)
    const journal = yield* Core.make(store, options)
    return { journal, control }
  })

export const make = makeOver()

export const layer = Layer.scoped(Journal, Effect.map(make, (m) => m.journal))

/** A journal owning sessions of a store shared with other owners (made with the same `shared`). */
export const layerOver = (shared: MemorySessions) => Layer.scoped(Journal, Effect.map(makeOver(shared), (m) => m.journal))
