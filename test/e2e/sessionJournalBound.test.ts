/**
 * The bound on one session's journal across its turns (BRAIN_MAX_SESSION_JOURNAL_BYTES), over HTTP
 * in a real server process with a bound of 32 KiB: a turn whose writes would take the journal past
 * it has them refused `turn_write_limit` (`details.reason: "session_journal_limit"`), nothing of
 * them written; once the journal has reached it, a send or submit is 409 `conflict` with
 * `details.reason: "session_journal_limit"` and nothing is journaled. The bound is the journal's
 * size on disk, so a restart keeps refusing; the session can still be ended and deleted, and
 * other sessions are served.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, type Reply, ServerProcess } from "../support/server.js"

const LIMIT = 32 * 1024

/** Bytes of every file under `dir` (a session's journal segments), 0 when it is gone. */
const bytesUnder = (dir: string): number => {
  if (!fs.existsSync(dir)) return 0
  let total = 0
  for (const name of fs.readdirSync(dir)) {
    const p = path.join(dir, name)
    const st = fs.statSync(p)
    total += st.isDirectory() ? bytesUnder(p) : st.size
  }
  return total
}

describe("the bound on a session's journal", () => {
  let server: ServerProcess | undefined
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("a turn's writes past BRAIN_MAX_SESSION_JOURNAL_BYTES are refused turn_write_limit; once the journal has reached it a send or submit is 409 session_journal_limit and journals nothing, across a restart; the session still ends and deletes", async () => {
    server = await new ServerProcess({ env: { BRAIN_MAX_SESSION_JOURNAL_BYTES: String(LIMIT) } }).start()
    const s = server
    const create = async () => {
      const r = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
      expect(r.status, r.text).toBe(201)
      return r.body.session_id as string
    }
    const send = (id: string, message: string, async = false) =>
      request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message } }, headers: async ? { prefer: "respond-async" } : {} })
    const journalOf = async (id: string) => {
      const summary = await request(s.baseUrl, `/v1/sessions/${id}`)
      const events = await request(s.baseUrl, `/v1/sessions/${id}/events?after=0&limit=1000`)
      return { summary: summary.body, events: events.text }
    }
    const journalDir = (id: string) => path.join(s.dataDir, "sessions", id)
    const said = (r: Reply) => r.text.slice(0, 600)
    const expectRefused = (r: Reply) => {
      expect(r.status, said(r)).toBe(409)
      expect(r.body).toMatchObject({
        code: "conflict",
        retryable: false,
        details: { reason: "session_journal_limit", setting: "BRAIN_MAX_SESSION_JOURNAL_BYTES", limit: LIMIT }
      })
      expect(r.body.details.journal_bytes).toBeGreaterThanOrEqual(LIMIT)
      expect(r.body.message).toContain("BRAIN_MAX_SESSION_JOURNAL_BYTES")
    }

    const a = await create()
    // A small turn fits.
    const small = await send(a, "hello")
    expect([small.status, small.body.turn?.status], said(small)).toEqual([200, "ended"])
    // A turn whose model call would carry 40 KB into a journal bound at 32 KiB: its writes are
    // refused as the turn's own bound refuses them, and the turn fails with the reason.
    const large = await send(a, "x".repeat(40_000))
    expect(large.status, said(large)).toBe(200)
    expect(large.body.turn.status, said(large)).toBe("failed")
    expect(large.body.turn.failure, said(large)).toMatchObject({
      code: "turn_write_limit",
      details: { reason: "session_journal_limit", setting: "BRAIN_MAX_SESSION_JOURNAL_BYTES", limit: LIMIT }
    })
    // The turn's opening carried its 40 KB input: the journal has reached the bound.
    expect(bytesUnder(journalDir(a))).toBeGreaterThanOrEqual(LIMIT)

    const before = await journalOf(a)
    const bytesBefore = bytesUnder(journalDir(a))
    const refusedNothingDone = async () => {
      expectRefused(await send(a, "one more"))
      expectRefused(await send(a, "one more", true))
      expect(await journalOf(a)).toEqual(before)
      expect(bytesUnder(journalDir(a))).toBe(bytesBefore)
    }
    await refusedNothingDone()

    // Measured from the journal on disk: a restart refuses the same.
    await s.restart()
    await refusedNothingDone()

    // Another session has its own bound.
    const b = await create()
    const other = await send(b, "hello")
    expect([other.status, other.body.turn?.status], said(other)).toEqual([200, "ended"])

    // The session can still end (its closing records are written past the bound) and be deleted.
    const ended = await request(s.baseUrl, `/v1/sessions/${a}/end`, { method: "POST" })
    expect(ended.status, said(ended)).toBe(200)
    expect(ended.body.status).toBe("ended")
    const deleted = await request(s.baseUrl, `/v1/sessions/${a}`, { method: "DELETE" })
    expect(deleted.status, said(deleted)).toBe(204)
    expect((await request(s.baseUrl, `/v1/sessions/${a}`)).status).toBe(404)
  }, 150_000)
})
