/**
 * An Events page reads from the journal about what it answers: its reads ask for bytes and
 * records scaled to the Events it still wants, growing while it has fewer, so that a page of one
 * Event of a journal on disk reads about that Event's frame, not a whole page's PAGE_BYTES. The
 * pages are as complete and ordered as ever: pages of any limit, chained by their cursors, give
 * the Events one large read gives, whatever the mix of sizes and private records between them.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { PAGE_BYTES, PAGE_EVENTS, READ_INDEX_BYTES } from "../../src/domain/Limits.js"
import type { Event } from "../../src/domain/Events.js"
import { empty, foldAll } from "../../src/domain/Projection.js"
import { entry, EXTENSION_KIND, type JournalRecord } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { type Folded, readEvents } from "../../src/layers/sessions/Events.js"
import type { JournalShape } from "../../src/services/Journal.js"
import { tempDir } from "../support/journals.js"

const note = (i: number, bytes: number) =>
  entry(EXTENSION_KIND, { kind: "note", payload: { i, text: "n".repeat(bytes) }, origin: { kind: "agentloop" as const, sequence: 3 } })
const message = (i: number) => ({ role: "user" as const, content: `m${i}` })

/** Bytes of each note, in turn: small, middling and large Events, and one far larger than any first read asks for. */
const SIZES = [40, 3_000, 20_000, 200, 9_000, 60]
const HUGE_AT = 70
const HUGE_BYTES = 1_500_000

/**
 * A session of 150 notes of mixed sizes, with private records (transcript appends, kv writes)
 * and public ones (transcript replacements) between them, written to a file journal whose
 * reads `counting` counts.
 */
const setUp = Effect.gen(function*() {
  const dataDir = yield* tempDir("brain-pages-")
  const read = { bytes: 0 }
  const counting = Layer.succeed(FileDriver, {
    ...nodeDriver,
    read: (fd, buffer, position) => Effect.tap(nodeDriver.read(fd, buffer, position), (n) => Effect.sync(() => (read.bytes += n)))
  })
  const journal = yield* JournalFile.make({ dataDir }).pipe(Effect.provide(counting))
  const session: SessionId = yield* mintSessionId
  yield* journal.create(session)
  yield* journal.append(session, [
    entry("session_creation_started", { configuration: { model: { provider: "scripted" }, agentloop: "official" } }),
    entry("session_creation_ended", { sequence: 1 }),
    entry("turn_started", { input: { message: "go" }, mode: "send" })
  ])
  let length = 0
  for (let i = 0; i < 150; i++) {
    yield* journal.append(session, [note(i, i === HUGE_AT ? HUGE_BYTES : SIZES[i % SIZES.length]!)])
    if (i % 4 === 1) {
      yield* journal.append(session, [entry("transcript_delta", { keep: length, append: [message(i)] })])
      length += 1
    }
    if (i % 7 === 2) yield* journal.append(session, [entry("kv_put", { key: `k${i}`, value: "v".repeat(i * 10) })])
    if (i % 25 === 24) {
      // Keeps fewer messages than there are: public, as transcript_replaced.
      yield* journal.append(session, [entry("transcript_delta", { keep: 0, append: [message(i)] })])
      length = 1
    }
  }
  return { journal, session, read }
})

/** Every record of the session, read in pages of the journal's own. */
const allRecords = (journal: JournalShape, session: SessionId) =>
  Effect.gen(function*() {
    const out: Array<JournalRecord> = []
    for (;;) {
      const page = yield* journal.read(session, { after: out.length === 0 ? 0 : out[out.length - 1]!.sequence, limit: 1000 })
      if (page.length === 0) return out
      out.push(...page)
    }
  })

/** The session's Events from the start, in pages of `limit` (and `maxBytes`) chained by their cursors. */
const chained = (journal: JournalShape, session: SessionId, state: Folded, limit: number, maxBytes?: number) =>
  Effect.gen(function*() {
    const events: Array<Event> = []
    let cursor = 0
    for (let pages = 0;; pages++) {
      if (pages > 10_000) return yield* Effect.dieMessage("the pages do not end")
      const page = yield* readEvents(journal, session, state, cursor, limit, maxBytes)
      if (page.events.length === 0) return events
      expect(page.events.length).toBeLessThanOrEqual(limit)
      events.push(...page.events)
      cursor = page.next_cursor
    }
  })

describe("an Events page reads about what it answers", () => {
  it.scoped("a page of one Event of a journal on disk reads about that Event's frame from the file, not a whole page's bytes", () =>
    Effect.gen(function*() {
      const { journal, session, read } = yield* setUp
      const state = foldAll(yield* allRecords(journal, session), empty)
      for (const after of [0, 3, 40]) {
        read.bytes = 0
        const page = yield* readEvents(journal, session, state, after, 1)
        expect(page.events).toHaveLength(1)
        if (after < 40) expect(read.bytes, `after ${after}`).toBeLessThanOrEqual(64 * 1024)
        // Here the record after the cursor is private and the Event after it larger than the first
        // read asks for: a second read, each going through the frames the read index makes it
        // skip (under READ_INDEX_BYTES), the frames it takes and a little more.
        else expect(read.bytes, `after ${after}`).toBeLessThanOrEqual(2 * (READ_INDEX_BYTES + 64 * 1024))
      }
      // Before, any page read on through up to PAGE_EVENTS records or PAGE_BYTES: here everything after the cursor.
      read.bytes = 0
      yield* journal.read(session, { after: 40, limit: PAGE_EVENTS, maxBytes: PAGE_BYTES })
      expect(read.bytes).toBeGreaterThan(2_000_000)
      // The Event far larger than any first read asks for still comes, alone, and whole.
      const before = (yield* allRecords(journal, session)).find((r) => r.kind === EXTENSION_KIND && (r.payload as { payload: { i: number } }).payload.i === HUGE_AT)!
      const huge = yield* readEvents(journal, session, state, before.sequence - 1, 1)
      expect(huge.events.map((e) => (e.data as { text: string }).text.length)).toEqual([HUGE_BYTES])
    }))

  it.scoped("pages of any limit, chained by their cursors, give the Events one large read gives, in order, none twice, with a far larger one among them", () =>
    Effect.gen(function*() {
      const { journal, session } = yield* setUp
      const records = yield* allRecords(journal, session)
      const state = foldAll(records, empty)
      const whole = yield* readEvents(journal, session, state, 0, PAGE_EVENTS)
      // One read holds them all: 150 notes, 6 replacements, the creation's two and the turn's start.
      expect(whole.events).toHaveLength(159)
      expect(whole.next_cursor).toBe(records[records.length - 1]!.sequence)
      for (const limit of [1, 2, 3, 5, 8, 13, 64, 1000]) {
        const events = yield* chained(journal, session, state, limit)
        expect(events, `limit ${limit}`).toEqual(whole.events)
      }
      // Bounded by bytes as well: the same Events, a large one alone on its page.
      for (const maxBytes of [1, 10_000, 100_000]) {
        const events = yield* chained(journal, session, state, 50, maxBytes)
        expect(events, `maxBytes ${maxBytes}`).toEqual(whole.events)
      }
    }))
})
