/**
 * Sessions over a file journal that cannot open files (the process at its open-file limit, EMFILE)
 * or cannot list its sessions directory. What a client is told must stay true:
 *
 * - a session's Events (read from its segment) and a create are refused with 503 `overloaded`, `retryable: true`
 *   — never 500 `journal_corrupt` (the journal is healthy) nor `journal_write_failed`;
 * - the list of sessions fails (503 `overloaded` for EMFILE, 500 `internal` for a directory that
 *   refuses otherwise) rather than answer fewer sessions than there are — an empty list would tell
 *   a client its sessions are gone; a session in it that cannot be read now fails the list too;
 * - nothing of the refusal is remembered: once descriptors are back, everything answers as before.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver } from "../../src/layers/journal/FileDriver.js"
import { Sessions } from "../../src/services/Sessions.js"
import { refusingDriver, tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

/** A transcript too large for the journal's recent tail: reading the session's Events from the start opens its segment. */
const transcript = [{ role: "user" as const, content: "m".repeat(64 * 1024) }, { role: "assistant" as const, content: "ok" }]

const withSessions = <A, E>(body: (files: ReturnType<typeof refusingDriver>, dataDir: string) => Effect.Effect<A, E, Sessions>) =>
  Effect.gen(function*() {
    const dataDir = yield* tempDir("brain-emfile-")
    const files = refusingDriver()
    // A data directory that cannot be opened is the test's own bug.
    const journal = JournalFile.layer({ dataDir }).pipe(Layer.provide(Layer.succeed(FileDriver, files.driver)), Layer.orDie)
    return yield* body(files, dataDir).pipe(Effect.provide(runtimeLayer({ journal })))
  })

describe("sessions at the open-file limit", () => {
  it.scoped("Events read from disk, creates and the list are 503 overloaded (retryable), never journal_corrupt or journal_write_failed, and answer again once descriptors are back", () =>
    withSessions((files, dataDir) =>
      Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create({ model: { provider: "scripted" }, transcript })
        const page = yield* sessions.events(session_id, { after: 0, limit: 100 })
        expect(page.events.length).toBeGreaterThan(0)

        // Every open of a file fails, as at the process's limit.
        files.set((op) => op === "open" || op === "readFile" || op === "readdir" ? "EMFILE" : undefined)
        const events = yield* Effect.flip(sessions.events(session_id, { after: 0, limit: 100 }))
        expect(events).toMatchObject({ code: "overloaded", retryable: true })
        expect(events.message).toContain("EMFILE")
        const created = yield* Effect.flip(sessions.create({ model: { provider: "scripted" } }))
        expect(created).toMatchObject({ code: "overloaded", retryable: true })
        const listed = yield* Effect.flip(sessions.list({ limit: 10 }))
        expect(listed).toMatchObject({ code: "overloaded", retryable: true })

        files.clear()
        expect((yield* sessions.events(session_id, { after: 0, limit: 100 })).events).toEqual(page.events)
        expect((yield* sessions.list({ limit: 10 })).sessions.map((s) => s.session_id)).toEqual([session_id])
        // The refused create left nothing behind.
        expect(fs.readdirSync(path.join(dataDir, "sessions"))).toEqual([session_id])
      })))

  it.scoped("a list whose sessions directory refuses otherwise (EACCES) is 500 internal, never an empty list", () =>
    withSessions((files, dataDir) =>
      Effect.gen(function*() {
        const sessions = yield* Sessions
        yield* sessions.create({ model: { provider: "scripted" } })
        files.set((op, file) => op === "readdir" && file === path.join(dataDir, "sessions") ? "EACCES" : undefined)
        const refused = yield* Effect.flip(sessions.list({ limit: 10 }))
        expect(refused).toMatchObject({ code: "internal" })
        expect(refused.message).toContain("EACCES")
      })))

  it.scoped("a listed session that cannot be read now fails the list instead of being left out of it", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-emfile-")
      const created = yield* Effect.scoped(Effect.gen(function*() {
        const sessions = yield* Sessions
        return [yield* sessions.create({ model: { provider: "scripted" } }), yield* sessions.create({ model: { provider: "scripted" } })]
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } }))))
      // A server started again: the sessions are opened from their files when listed.
      const files = refusingDriver()
      const journal = JournalFile.layer({ dataDir }).pipe(Layer.provide(Layer.succeed(FileDriver, files.driver)), Layer.orDie)
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        // The sessions directory lists; the sessions' own files cannot be opened.
        files.set((_op, file) => created.some((c) => file.includes(c.session_id)) ? "EMFILE" : undefined)
        const refused = yield* Effect.flip(sessions.list({ limit: 10 }))
        expect(refused).toMatchObject({ code: "overloaded", retryable: true })
        files.clear()
        expect((yield* sessions.list({ limit: 10 })).sessions.map((s) => s.session_id).sort()).toEqual(created.map((c) => c.session_id).sort())
      }).pipe(Effect.provide(runtimeLayer({ journal })))
    }))

  it.scoped("a session whose segment the file system refuses to read (EACCES) answers 503 overloaded, never 500 journal_corrupt, and answers again once it can be read", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("brain-eacces-")
      const { session_id } = yield* Effect.scoped(Effect.gen(function*() {
        const sessions = yield* Sessions
        return yield* sessions.create({ model: { provider: "scripted" }, transcript })
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } }))))
      // A server started again, its sessions opened from their files on their first access.
      const files = refusingDriver()
      const journal = JournalFile.layer({ dataDir }).pipe(Layer.provide(Layer.succeed(FileDriver, files.driver)), Layer.orDie)
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        files.set((op, file) => op === "readFile" && file.endsWith(".seg") ? "EACCES" : undefined)
        const refused = yield* Effect.flip(sessions.get(session_id))
        expect(refused).toMatchObject({ code: "overloaded", retryable: true })
        expect(refused.message).toContain("EACCES")
        files.clear()
        expect((yield* sessions.get(session_id)).session_id).toBe(session_id)
      }).pipe(Effect.provide(runtimeLayer({ journal })))
    }))
})
