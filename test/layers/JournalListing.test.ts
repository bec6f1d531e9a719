/**
 * The journal's listing index (journal/Listing.ts): a page of sessions costs a binary search and
 * a slice once the sessions are listed, not a listing and sort of the whole store; and it stays
 * exactly what the store holds through creates, removes and sweeps, also those made while the
 * first listing is read.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as FileDriverModule from "../../src/layers/journal/FileDriver.js"
import { FileDriver, type FileDriverShape } from "../../src/layers/journal/FileDriver.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { tempDir } from "../support/journals.js"

/** Every session a walk of pages of `limit` finds, in the order found. */
const walk = (journal: JournalShape, limit: number) =>
  Effect.gen(function*() {
    const found: Array<SessionId> = []
    let after: SessionId | undefined
    for (;;) {
      const page = yield* journal.listPage!(after, limit)
      found.push(...page)
      if (page.length < limit) return found
      after = page[page.length - 1]
    }
  })

const counting = () => {
  const counts = { listings: 0 }
  const driver: FileDriverShape = {
    ...FileDriverModule.nodeDriver,
    readdir: (p) => Effect.zipRight(Effect.sync(() => void (p.endsWith("sessions") && counts.listings++)), FileDriverModule.nodeDriver.readdir(p))
  }
  return { counts, driver }
}

describe("the journal's listing of sessions", () => {
  it.scoped("list pages stay complete and ordered under concurrent creates and deletes, and read the sessions directory once", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const { counts, driver } = counting()
      const journal = yield* JournalFile.make({ dataDir: dir }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
      const stable: Array<SessionId> = []
      for (let i = 0; i < 40; i++) {
        const s = yield* mintSessionId
        yield* journal.create(s)
        yield* journal.append(s, [entry("kv_put", { key: "k", value: i })])
        stable.push(s)
      }
      const doomed = stable.splice(0, 10)
      // Walks while creates and removes run: every stable session once, in order; the churned ones at most once.
      const churn = Effect.forEach(doomed, (s) =>
        Effect.zipRight(journal.remove(s), Effect.flatMap(mintSessionId, (n) => journal.create(n))), { concurrency: 3, discard: true })
      const [found] = yield* Effect.all([walk(journal, 7), churn], { concurrency: "unbounded" })
      expect([...found].sort()).toEqual(found)
      expect(new Set(found).size).toBe(found.length)
      for (const s of stable) expect(found).toContain(s)
      // Afterwards, exactly what the store holds.
      const after = yield* walk(journal, 7)
      expect(counts.listings).toBe(1)
      expect(after).toEqual([...(yield* journal.list)].sort())
      expect(after.length).toBe(40)
      for (const s of doomed) expect(after).not.toContain(s)
    }))

  it.scoped("past its bound the index is not kept: each page lists the store again, with the same answers", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const { counts, driver } = counting()
      const journal = yield* JournalFile.make({ dataDir: dir, maxListed: 5 }).pipe(Effect.provide(Layer.succeed(FileDriver, driver)))
      for (let i = 0; i < 12; i++) yield* journal.create(yield* mintSessionId)
      const found = yield* walk(journal, 5)
      expect(counts.listings).toBe(3)
      expect(found).toEqual([...(yield* journal.list)].sort())
    }))
})
