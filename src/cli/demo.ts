/**
 * `brain demo`: a first look at the journal without the server. Writes one session's creation and a
 * first exchange durably to the data directory, reads it back, then verifies every journal there.
 */
import { Console, Effect } from "effect"
import { mintSessionId } from "../domain/Ids.js"
import { entry } from "../domain/Records.js"
import * as JournalFile from "../layers/JournalFile.js"
import { Journal } from "../services/Journal.js"
import { verify } from "./journal.js"

export const demo = (dataDir: string) =>
  Effect.gen(function*() {
    const session = yield* mintSessionId
    yield* Effect.gen(function*() {
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
    }).pipe(Effect.provide(JournalFile.layerNode({ dataDir })))
    return yield* verify(dataDir)
  })
