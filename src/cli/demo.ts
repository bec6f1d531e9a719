/**
 * `brain demo [data-dir]`: a first look at the journal without the server. Writes one session's
 * creation and a first exchange durably to the data directory (created if missing), reads it back,
 * then verifies every journal there. Exit as `brain journal verify`, or 66 when it cannot use the
 * data directory (not a directory, holding something else, locked by a running server), saying why.
 */
import { Console, Effect } from "effect"
import { mintSessionId } from "../domain/Ids.js"
import { entry } from "../domain/Records.js"
import * as JournalFile from "../layers/JournalFile.js"
import { Journal } from "../services/Journal.js"
import { dataDirAt, EXIT_NOT_FOUND, exitOnRefusal } from "./dataDir.js"
import { verify } from "./journal.js"

export const demo = (dataDir: string) =>
  exitOnRefusal(Effect.gen(function*() {
    // A missing directory is made; one that exists must be empty or a Brain data directory.
    yield* dataDirAt(dataDir, EXIT_NOT_FOUND)
    const session = yield* mintSessionId
    const written = yield* Effect.either(Effect.gen(function*() {
      const journal = yield* Journal
      yield* journal.create(session)
      const [started] = yield* journal.append(session, [
        entry("session_creation_started", {
          configuration: { agentloop: "official", model: { provider: "scripted" } }
        })
      ])
      yield* journal.append(session, [entry("session_creation_ended", { sequence: started! })])
      yield* journal.append(session, [
        entry("transcript_delta", { keep: 0, append: [{ role: "user", content: "hello" }] }),
        entry("kv_put", { key: "greeted", value: true })
      ])
      const records = yield* journal.read(session, { after: 0, limit: 100 })
      yield* Console.log(`wrote ${records.length} durable records to session ${session} in ${dataDir}:`)
      for (const r of records) yield* Console.log(`  ${r.sequence} ${r.kind} ${JSON.stringify(r.payload)}`)
    }).pipe(Effect.provide(JournalFile.layerNode({ dataDir }))))
    if (written._tag === "Left") {
      const e = written.left
      yield* Console.error(e._tag === "DataDirError" ? e.message : `brain demo: ${e.message}`)
      return EXIT_NOT_FOUND
    }
    return yield* verify(dataDir)
  }))
