/**
 * The free-disk watermark (BRAIN_MIN_FREE_DISK_BYTES), over HTTP in a real server process: set
 * above what the data directory's file system has free (it cannot be filled in a test, so the
 * watermark is raised past it instead), a create, a send and a submit are 503 `overloaded`,
 * retryable, the message naming the setting, and nothing is written — no session directory, the
 * session's journal byte for byte as it was. Reads and an end are still served. Started again with
 * the watermark off, the same requests run.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, type Reply, ServerProcess } from "../support/server.js"

/** Every file under `dir` with its bytes, so that a write anywhere in it shows. */
const filesUnder = (dir: string): Record<string, number> => {
  const out: Record<string, number> = {}
  const walk = (d: string) => {
    for (const name of fs.readdirSync(d)) {
      const p = path.join(d, name)
      const st = fs.statSync(p)
      if (st.isDirectory()) walk(p)
      else out[path.relative(dir, p)] = st.size
    }
  }
  if (fs.existsSync(dir)) walk(dir)
  return out
}

describe("the free-disk watermark", () => {
  const servers: Array<ServerProcess> = []
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    // The first owns the data directory: disposed last.
    for (const s of servers.reverse()) await s.dispose()
  })

  it("below BRAIN_MIN_FREE_DISK_BYTES a create, send or submit is 503 overloaded naming the setting and writes nothing; reads and an end are served; with the watermark off the same requests run", async () => {
    const first = await new ServerProcess({ env: { BRAIN_MIN_FREE_DISK_BYTES: "0" } }).start()
    servers.push(first)
    const dataDir = first.dataDir
    const create = (s: ServerProcess) => request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    const send = (s: ServerProcess, id: string, message: string, async = false) =>
      request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message } }, headers: async ? { prefer: "respond-async" } : {} })
    const made = await create(first)
    expect(made.status, made.text).toBe(201)
    const a = made.body.session_id as string
    const other = await create(first)
    expect(other.status, other.text).toBe(201)
    const b = other.body.session_id as string
    expect((await send(first, a, "hello")).status).toBe(200)
    await first.stop()

    // Past any disk's free bytes: the watermark refuses whatever is free.
    const low = await new ServerProcess({ dataDir, env: { BRAIN_MIN_FREE_DISK_BYTES: String(Number.MAX_SAFE_INTEGER) } }).start()
    servers.push(low)
    const sessionsDir = path.join(dataDir, "sessions")
    const before = filesUnder(sessionsDir)
    const expectLow = (r: Reply) => {
      expect(r.status, r.text).toBe(503)
      expect(r.body).toMatchObject({ code: "overloaded", retryable: true, details: { setting: "BRAIN_MIN_FREE_DISK_BYTES", limit: Number.MAX_SAFE_INTEGER } })
      expect(r.body.message).toContain("BRAIN_MIN_FREE_DISK_BYTES")
      expect(r.headers.get("retry-after")).toBe("1")
    }
    expectLow(await create(low))
    expectLow(await send(low, a, "again"))
    expectLow(await send(low, a, "again", true))
    expect(filesUnder(sessionsDir)).toEqual(before)
    // Reads are served, and so is an end: it starts no turn, and its records are what the watermark keeps room for.
    const read = await request(low.baseUrl, `/v1/sessions/${a}`)
    expect([read.status, read.body.status], read.text).toEqual([200, "idle"])
    const ended = await request(low.baseUrl, `/v1/sessions/${b}/end`, { method: "POST" })
    expect([ended.status, ended.body.status], ended.text).toEqual([200, "ended"])
    await low.stop()

    const off = await new ServerProcess({ dataDir, env: { BRAIN_MIN_FREE_DISK_BYTES: "0" } }).start()
    servers.push(off)
    expect((await create(off)).status).toBe(201)
    const sent = await send(off, a, "again")
    expect([sent.status, sent.body.turn?.status], sent.text).toEqual([200, "ended"])
  }, 180_000)
})
