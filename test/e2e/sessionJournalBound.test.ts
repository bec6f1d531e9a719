/**
 * The bound on one session's journal across its turns (BRAIN_MAX_SESSION_JOURNAL_BYTES), over HTTP
 * in a real server process with a bound of 32 KiB: a turn whose writes would take the journal past
 * it has them refused `turn_write_limit` (`details.reason: "session_journal_limit"`), nothing of
 * them written; once the journal has reached it, a send or submit is 409 `conflict` with
 * `details.reason: "session_journal_limit"` and nothing is journaled. The bound is the journal's
 * size on disk, so a restart keeps refusing; the session can still be ended and deleted, and
 * other sessions are served. A create whose own records (its configuration, its opening transcript
 * and the record closing its creation) would take its journal to the bound, so that it could start
 * no turn, is refused 413 `payload_too_large` with the same reason and creates nothing.
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

  it("a create whose creation records would take its journal to BRAIN_MAX_SESSION_JOURNAL_BYTES is refused 413 session_journal_limit and creates nothing (keyed or not, by its configuration, its opening transcript or its Environments' setup records); one a byte under it is created and takes a turn", async () => {
    const bound = 8 * 1024
    const s = await new ServerProcess({ env: { BRAIN_MAX_SESSION_JOURNAL_BYTES: String(bound) } }).start()
    try {
      const said = (r: Reply) => r.text.slice(0, 600)
      const sessionsDir = path.join(s.dataDir, "sessions")
      const dirs = () => (fs.existsSync(sessionsDir) ? fs.readdirSync(sessionsDir).sort() : [])
      const listed = async () => {
        const r = await request(s.baseUrl, "/v1/sessions?limit=100")
        expect(r.status, said(r)).toBe(200)
        return (r.body.sessions as Array<{ session_id: string }>).map((x) => x.session_id).sort()
      }
      const create = (body: unknown, key?: string) => request(s.baseUrl, "/v1/sessions", { json: body, headers: key === undefined ? {} : { "idempotency-key": key } })
      const withSystem = (system: string, transcript?: unknown) => ({ model: { provider: "scripted" }, system, ...(transcript === undefined ? {} : { transcript }) })

      // A small create: its journal's bytes on disk are its creation's records.
      const first = await create(withSystem("a"))
      expect(first.status, said(first)).toBe(201)
      const base = bytesUnder(path.join(sessionsDir, first.body.session_id))
      expect(base).toBeGreaterThan(0)
      expect(base).toBeLessThan(bound)
      // Each ASCII character more in `system` is a byte more in the journal.
      const atBound = withSystem("a" + "x".repeat(bound - base))
      const underBound = withSystem("a" + "x".repeat(bound - base - 1))

      const expectRefused = (r: Reply, bytes: number) => {
        expect(r.status, said(r)).toBe(413)
        expect(r.body).toMatchObject({
          code: "payload_too_large",
          retryable: false,
          details: { reason: "session_journal_limit", setting: "BRAIN_MAX_SESSION_JOURNAL_BYTES", limit: bound, journal_bytes: bytes }
        })
        expect(r.body.message).toContain("BRAIN_MAX_SESSION_JOURNAL_BYTES")
      }
      const dirsBefore = dirs()
      const listBefore = await listed()
      const nothingCreated = async () => {
        expect(dirs()).toEqual(dirsBefore)
        expect(await listed()).toEqual(listBefore)
      }

      // Exactly at the bound: it could start no turn, so it is refused, and nothing is left.
      expectRefused(await create(atBound), bound)
      await nothingCreated()
      // Far past it, by the opening transcript this time.
      const past = await create(withSystem("a", [{ role: "user", content: "y".repeat(3 * bound) }]))
      expect(past.status, said(past)).toBe(413)
      expect(past.body.details.reason).toBe("session_journal_limit")
      expect(past.body.details.journal_bytes).toBeGreaterThan(3 * bound)
      await nothingCreated()
      // Past it by an Environment's options, which its configuration and its setup's start record
      // both carry: the configuration alone is under the bound, the two together past it.
      const pad = "o".repeat(Math.ceil(bound / 2) + 100)
      const byOptions = await create({ ...withSystem("a"), environments: [{ name: "w", driver: "brain", options: { pad } }] })
      expect(byOptions.status, said(byOptions)).toBe(413)
      expect(byOptions.body.details.reason).toBe("session_journal_limit")
      expect(byOptions.body.details.journal_bytes).toBeGreaterThanOrEqual(base + 2 * pad.length)
      await nothingCreated()
      // Keyed: the refusal is the key's answer, replayed, and still nothing exists.
      expectRefused(await create(atBound, "too-big"), bound)
      expectRefused(await create(atBound, "too-big"), bound)
      await nothingCreated()

      // A byte under it: created, its journal a byte under the bound, and a turn is admitted.
      const under = await create(underBound)
      expect(under.status, said(under)).toBe(201)
      const id = under.body.session_id as string
      expect(bytesUnder(path.join(sessionsDir, id))).toBe(bound - 1)
      const got = await request(s.baseUrl, `/v1/sessions/${id}`)
      expect([got.status, got.body.status], said(got)).toEqual([200, "idle"])
      const sent = await request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "hi" } } })
      expect(sent.status, said(sent)).toBe(200)
      expect(sent.body.turn).toBeDefined()
      expect(await listed()).toEqual([...listBefore, id].sort())
    } finally {
      await s.dispose()
    }
  }, 150_000)
})
