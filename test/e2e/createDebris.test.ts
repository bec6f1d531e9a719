/**
 * A real `kill -9` of a real server in the middle of creates: what a creation cut off before its
 * first record leaves (FileStore.ts `create`: the session's directory, its `journal/`, an empty
 * segment) is no session. The restarted server lists none of it, answers 404 `not_found` to a
 * GET, a send and a DELETE of it, and removes it as it meets it (not at its start); every session
 * whose create was answered 201 is whole. (test/runtime/CreateDebris.test.ts lays out each state
 * by hand; this test makes them as a crash does.)
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, type ServerProcess, sleep, startServer } from "../support/server.js"

/** Creates kept in flight at once while the server is killed. */
const IN_FLIGHT = 48
/** Kills tried before giving up on catching a creation between its directory and its first record. */
const MAX_KILLS = 12

/** A session directory that holds no record: no journal, or only empty segments. */
const isDebris = (dir: string) => {
  const names = fs.readdirSync(dir)
  if (names.length === 0) return true
  if (names.length !== 1 || names[0] !== "journal") return false
  return fs.readdirSync(path.join(dir, "journal")).every((n) => n.endsWith(".seg") && fs.statSync(path.join(dir, "journal", n)).size === 0)
}

describe("a kill -9 in the middle of creates", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer()
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("leaves creations cut off before their first record, which the restarted server lists as none, answers 404 to, and removes as it meets them; every answered create is whole", async () => {
    const sessionsDir = path.join(server.dataDir, "sessions")
    const answered = new Set<string>()
    let debris: Array<string> = []
    for (let kill = 0; kill < MAX_KILLS && debris.length === 0; kill++) {
      if (server.exited !== undefined) await server.start()
      const base = server.baseUrl
      let stop = false
      const loops = Array.from({ length: IN_FLIGHT }, async () => {
        while (!stop) {
          const r = await request(base, "/v1/sessions", { json: { model: { provider: "scripted" } } }).catch(() => undefined)
          if (r?.status === 201) answered.add(r.body.session_id)
          else if (r === undefined) return
        }
      })
      // Killed once creates are being answered: the others are somewhere between their directory and their answer.
      const before = answered.size
      for (let waited = 0; answered.size < before + 8 + 8 * kill && waited < 20_000; waited += 5) await sleep(5)
      expect((await server.kill()).signal).toBe("SIGKILL")
      stop = true
      await Promise.all(loops)
      debris = fs.readdirSync(sessionsDir).filter((id) => isDebris(path.join(sessionsDir, id)))
    }
    expect(debris.length, `no creation was caught between its directory and its first record in ${MAX_KILLS} kills`).toBeGreaterThan(0)
    for (const id of debris) expect(answered.has(id), `${id} was answered 201 and left no record`).toBe(false)

    await server.start()
    // The start removed none of it.
    for (const id of debris) expect(fs.existsSync(path.join(sessionsDir, id)), `${id} removed at start`).toBe(true)
    const [first, second, ...rest] = debris
    const get = await request(server.baseUrl, `/v1/sessions/${first}`)
    expect(get.status, get.text).toBe(404)
    expect(get.body.code).toBe("not_found")
    expect(fs.existsSync(path.join(sessionsDir, first!))).toBe(false)
    if (second !== undefined) {
      const sent = await request(server.baseUrl, `/v1/sessions/${second}/messages`, { json: { input: { message: "hello" } } })
      expect(sent.status, sent.text).toBe(404)
      expect(sent.body.code).toBe("not_found")
      expect(fs.existsSync(path.join(sessionsDir, second))).toBe(false)
    }
    // The list meets the rest: none is listed, and none is left.
    const listed = new Set<string>()
    for (let after: string | null = null;;) {
      const page = await request(server.baseUrl, `/v1/sessions?limit=1000${after === null ? "" : `&after=${after}`}`)
      expect(page.status, page.text).toBe(200)
      for (const s of page.body.sessions) listed.add(s.session_id)
      after = page.body.next_cursor
      if (after === null) break
    }
    for (const id of debris) expect(listed.has(id), `${id} listed`).toBe(false)
    for (const id of rest) expect(fs.existsSync(path.join(sessionsDir, id)), `${id} left after the list`).toBe(false)
    for (const id of answered) expect(listed.has(id), `${id}, answered 201, not listed`).toBe(true)
    const deleted = await request(server.baseUrl, `/v1/sessions/${first}`, { method: "DELETE" })
    expect(deleted.status, deleted.text).toBe(404)
    // A session answered before the kill still works.
    const [some] = answered
    if (some !== undefined) {
      const turn = await request(server.baseUrl, `/v1/sessions/${some}/messages`, { json: { input: { message: "still here" } } })
      expect(turn.status, turn.text).toBe(200)
    }
  }, 180_000)
})
