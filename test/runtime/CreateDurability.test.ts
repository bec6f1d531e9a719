/**
 * A create makes three directory entries durable before it answers — the session's directory in
 * `sessions/`, its `journal/` and its first segment. A crash that leaves any of them on disk
 * without the rest leaves no session: a directory without its journal, or a journal without a
 * segment or with an empty one, is listed by nobody and read as not found; and the create was
 * never answered, so nobody holds its id. (So the three syncs could run at once; measured, that
 * did not make a create faster here: docs/benchmarks.md, "Creates".)
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { mintSessionId } from "../../src/domain/Ids.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver } from "../../src/layers/journal/FileDriver.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

describe("a create's directory entries", () => {
  it.scopedLive("a crash that left any of them on disk without the rest leaves no session: it is not listed, and reading it is not_found", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      // A whole session beside the partial ones, so the listing is known to work.
      const whole = yield* Effect.gen(function*() {
        return (yield* (yield* Sessions).create({ model: { provider: "scripted" } })).session_id
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } })))
      const segment = fs.readdirSync(path.join(dataDir, "sessions", whole, "journal"))[0]!
      const partial = {
        directoryOnly: yield* mintSessionId,
        journalWithoutSegment: yield* mintSessionId,
        emptySegment: yield* mintSessionId
      }
      const sessionDir = (id: string) => path.join(dataDir, "sessions", id)
      fs.mkdirSync(sessionDir(partial.directoryOnly))
      fs.mkdirSync(path.join(sessionDir(partial.journalWithoutSegment), "journal"), { recursive: true })
      fs.mkdirSync(path.join(sessionDir(partial.emptySegment), "journal"), { recursive: true })
      fs.writeFileSync(path.join(sessionDir(partial.emptySegment), "journal", segment), "")

      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const listed = (yield* sessions.list({ limit: 100 })).sessions.map((s) => s.session_id)
        expect(listed).toEqual([whole])
        for (const id of Object.values(partial)) {
          const got = yield* Effect.either(sessions.get(id))
          expect(Either.isLeft(got) && got.left._tag, id).toBe("NotFound")
          const transcript = yield* Effect.either(sessions.transcript(id))
          expect(Either.isLeft(transcript) && transcript.left._tag, id).toBe("NotFound")
        }
        expect((yield* sessions.get(whole)).status).toBe("idle")
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } })))
    }))

  it.scopedLive("a create answers only once the session's directory, its journal directory and the sessions directory are each synced", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const probe = instrumentedDriver()
      const synced: Array<string> = []
      const driver = { ...probe.driver, syncDir: (p: string) => Effect.zipRight(probe.driver.syncDir(p), Effect.sync(() => void synced.push(p))) }
      const journal = Layer.scoped(Journal, Effect.orDie(JournalFile.make({ dataDir }))).pipe(Layer.provide(Layer.succeed(FileDriver, driver)))
      yield* Effect.gen(function*() {
        const before = synced.length
        const id = (yield* (yield* Sessions).create({ model: { provider: "scripted" } })).session_id
        const dir = path.join(dataDir, "sessions", id)
        expect(synced.slice(before).map((p) => path.resolve(p)).sort()).toEqual(
          [path.join(dataDir, "sessions"), dir, path.join(dir, "journal")].map((p) => path.resolve(p)).sort()
        )
      }).pipe(Effect.provide(runtimeLayer({ journal })))
    }))
})
