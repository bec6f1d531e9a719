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

/** The journal and its fault-injection control; the writer lives as long as the scope. */
export const make = Effect.gen(function*() {
  const { control, store } = MemoryStore.make()
  const journal = yield* Core.make(store)
  return { journal, control }
})

export const layer = Layer.scoped(Journal, Effect.map(make, (m) => m.journal))
