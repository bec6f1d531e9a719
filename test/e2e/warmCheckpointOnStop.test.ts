/**
 * A session kept warm (`BRAIN_SESSION_IDLE_TTL_MS`) is never released while the server runs, so its
 * release never wrote its checkpoint; a graceful stop writes it, within the drain deadline. Before,
 * a warm session stopped by SIGTERM had no checkpoint and its next open folded its whole journal.
 * Against a real server process: SIGTERM, the checkpoint on disk covers the session's last record
 * (its next open folds nothing after it), and a restart serves the same session.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { sessionDir } from "../../src/layers/journal/DataDir.js"
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

describe("a graceful stop with warm sessions", () => {
  it("writes the checkpoint a warm session is due, covering its last record, and the restarted server opens it", async () => {
    server = await startServer({ entry: "product", env: { BRAIN_SESSION_IDLE_TTL_MS: "600000" } })
    const s = server
    const created = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    // Enough records that a release would write a checkpoint (CHECKPOINT_EVERY_RECORDS, 256).
    for (let i = 0; i < 60; i++) {
      const sent = await request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: `m${i}` } } })
      expect(sent.status, sent.text).toBe(200)
    }
    const before = await request(s.baseUrl, `/v1/sessions/${id}`)
    const last = before.body.last_sequence as number
    expect(last).toBeGreaterThan(256)
    // Warm: no release, so no checkpoint yet.
    expect(checkpointThrough(s.dataDir, id)).toBeUndefined()

    expect(await s.stop()).toEqual({ code: 0, signal: null })
    expect(s.output).toContain("checkpointed 1 warm session(s)")
    expect(checkpointThrough(s.dataDir, id)).toBe(last)

    await s.start()
    const after = await request(s.baseUrl, `/v1/sessions/${id}`)
    expect(after.status, after.text).toBe(200)
    expect(after.body.last_sequence).toBe(last)
    const transcript = await request(s.baseUrl, `/v1/sessions/${id}/transcript`)
    expect(transcript.status, transcript.text).toBe(200)
    expect(transcript.text).toContain("m59")
  }, 120_000)

  it("writes none with a drain deadline of 0, and still exits 0", async () => {
    server = await startServer({ entry: "product", env: { BRAIN_SESSION_IDLE_TTL_MS: "600000", BRAIN_DRAIN_DEADLINE_MS: "0" } })
    const s = server
    const created = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    const id = created.body.session_id as string
    for (let i = 0; i < 60; i++) await request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: `m${i}` } } })
    expect(await s.stop()).toEqual({ code: 0, signal: null })
    expect(s.output).not.toContain("checkpointed")
    expect(checkpointThrough(s.dataDir, id)).toBeUndefined()
  }, 120_000)
})
