/**
 * A session kept warm (`idle_ttl_ms: 0`) is never released while the server runs; before, it got no
 * checkpoint until a graceful stop, and after a `kill -9` its next open folded its whole journal.
 * Now one is written in the background once its journal has grown by BRAIN_CHECKPOINT_AFTER_BYTES
 * (sessions/Registry.ts, `checkpointWarmLater`). Against a real server process killed with SIGKILL:
 * the checkpoint on disk covers a sequence past the session's creation, the next open reads it and
 * folds only the records after it, and the restarted server serves the very same transcript and
 * Events.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { sessionDir } from "../../src/layers/journal/DataDir.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as FileDriver from "../../src/layers/journal/FileDriver.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as ProjectionCheckpointed from "../../src/layers/ProjectionCheckpointed.js"
import { Projection } from "../../src/services/Projection.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import type { SessionId } from "../../src/domain/Ids.js"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
afterEach(async () => {
  await server?.dispose()
  server = undefined
})

/** The sequence the session's checkpoint covers, or undefined when it has none. */
const checkpointThrough = (dataDir: string, session: string): number | undefined => {
  const file = path.join(sessionDir(dataDir, session), "checkpoint")
  if (!fs.existsSync(file)) return undefined
  const text = fs.readFileSync(file, "utf8")
  return JSON.parse(text.slice(text.indexOf("\n") + 1)).through.sequence
}

/** The projection over a data directory no live server holds (the killed one's lock is taken over). */
const projectionOver = (dataDir: string) => {
  const journal = JournalFile.layerNode({ dataDir, lockWaitMs: 0 })
  const checkpoints = CheckpointStore.layerFile(dataDir).pipe(Layer.provide(FileDriver.layerNode))
  return ProjectionCheckpointed.layer.pipe(Layer.provide(Layer.mergeAll(journal, checkpoints, ServerConfig.layerWith({}))))
}

/** Every Event of the session, page after page. */
const allEvents = async (baseUrl: string, id: string) => {
  const events: Array<unknown> = []
  let after = 0
  for (;;) {
    const page = await request(baseUrl, `/v1/sessions/${id}/events?after=${after}`)
    expect(page.status, page.text).toBe(200)
    const got = page.body.events as Array<{ sequence: number }>
    if (got.length === 0) return events
    events.push(...got)
    after = got[got.length - 1]!.sequence
  }
}

describe("a warm session killed with SIGKILL", () => {
  it("has a checkpoint written while it ran, and its next open folds only the records after it, serving the same transcript and Events", async () => {
    server = await startServer({ entry: "product", env: { BRAIN_CHECKPOINT_AFTER_BYTES: "16384" } })
    const s = server
    const created = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" }, idle_ttl_ms: 0 } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const creation = (await request(s.baseUrl, `/v1/sessions/${id}`)).body.last_sequence as number
    for (let i = 0; i < 60; i++) {
      const sent = await request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: `m${i} ${"x".repeat(300)}` } } })
      expect(sent.status, sent.text).toBe(200)
    }
    // Written in the background after a turn: polled (a hang guard; no time is asserted).
    for (let i = 0; i < 3_000 && (checkpointThrough(s.dataDir, id) ?? 0) <= creation; i++) await new Promise((r) => setTimeout(r, 10))
    const through = checkpointThrough(s.dataDir, id)
    expect(through).toBeGreaterThan(creation)
    const summary = await request(s.baseUrl, `/v1/sessions/${id}`)
    const last = summary.body.last_sequence as number
    const transcript = (await request(s.baseUrl, `/v1/sessions/${id}/transcript`)).text
    const events = await allEvents(s.baseUrl, id)

    expect(await s.kill()).toMatchObject({ signal: "SIGKILL" })
    // The checkpoint may have moved on since it was read: the open reads the one on disk now.
    const onDisk = checkpointThrough(s.dataDir, id)!
    expect(onDisk).toBeGreaterThanOrEqual(through!)
    const projected = await Effect.runPromise(
      Effect.scoped(Effect.flatMap(Projection, (p) => p.state(id as SessionId))).pipe(Effect.provide(projectionOver(s.dataDir)))
    )
    expect(projected.source).toBe("checkpoint")
    expect(projected.state.lastSequence).toBe(last)
    expect(projected.folded).toBe(last - onDisk)

    await s.start()
    const after = await request(s.baseUrl, `/v1/sessions/${id}`)
    expect(after.status, after.text).toBe(200)
    expect(after.body.last_sequence).toBe(last)
    expect((await request(s.baseUrl, `/v1/sessions/${id}/transcript`)).text).toBe(transcript)
    expect(await allEvents(s.baseUrl, id)).toEqual(events)
  }, 180_000)
})
