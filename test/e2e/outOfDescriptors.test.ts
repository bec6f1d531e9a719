/**
 * A real server at its open-file limit (every descriptor taken: the fixture's SIGUSR2 opens
 * /dev/null until the kernel answers EMFILE), asked over a connection it accepted before:
 *
 * - a session's Events (its segment must be opened) answer 503 `overloaded`, `retryable: true`,
 *   naming EMFILE — not 500 `journal_corrupt`: the journal is healthy;
 * - a create answers 503 `overloaded`, not 500 `journal_write_failed`, and creates nothing;
 * - the list of sessions answers 503 `overloaded`, never 200 with an empty list;
 * - once the descriptors are given back, the same requests answer as before, without a restart.
 */
import * as http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, type ServerProcess, startServer } from "../support/server.js"

interface Answer {
  readonly status: number
  readonly body: any
}

describe("a server at its open-file limit", () => {
  let server: ServerProcess
  // One connection, opened before the limit is reached and reused after: a new one could not be accepted then.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const ask = (method: string, path: string, json?: unknown) =>
    new Promise<Answer>((resolve, reject) => {
      const body = json === undefined ? undefined : JSON.stringify(json)
      const req = http.request(`${server.baseUrl}${path}`, {
        method,
        agent,
        headers: body === undefined ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(body) }
      }, (res) => {
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (c: string) => void (text += c))
        res.on("end", () => resolve({ status: res.statusCode!, body: text.length > 0 ? JSON.parse(text) : undefined }))
      })
      req.on("error", reject)
      req.end(body)
    })
  const hog = async (what: "holding" | "released") => {
    process.kill(server.pid, "SIGUSR2")
    await eventually(`the fixture ${what} its descriptors`, async () => server.lines.some((l) => l.startsWith(`fd hog: ${what}`)) || undefined)
  }

  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ fileLimit: 512 })
  }, 120_000)
  afterAll(async () => {
    agent.destroy()
    await server?.dispose()
  })

  it("answers 503 overloaded (retryable) for Events, creates and the list, never journal_corrupt or an empty list, and serves them again once descriptors are back", async () => {
    // A transcript larger than the journal's recent tail: reading the Events from the start opens the segment.
    const created = await ask("POST", "/v1/sessions", {
      model: { provider: "scripted" },
      transcript: [{ role: "user", content: "m".repeat(64 * 1024) }, { role: "assistant", content: "ok" }]
    })
    expect(created.status).toBe(201)
    const id = created.body.session_id as string
    const page = await ask("GET", `/v1/sessions/${id}/events?after=0&limit=100`)
    expect(page.status).toBe(200)
    expect(page.body.events.length).toBeGreaterThan(0)

    await hog("holding")
    const events = await ask("GET", `/v1/sessions/${id}/events?after=0&limit=100`)
    expect(events.status, JSON.stringify(events.body)).toBe(503)
    expect(events.body).toMatchObject({ code: "overloaded", retryable: true })
    expect(events.body.message).toContain("EMFILE")
    const create = await ask("POST", "/v1/sessions", { model: { provider: "scripted" } })
    expect(create.status, JSON.stringify(create.body)).toBe(503)
    expect(create.body).toMatchObject({ code: "overloaded", retryable: true })
    const list = await ask("GET", "/v1/sessions")
    expect(list.status, JSON.stringify(list.body)).toBe(503)
    expect(list.body).toMatchObject({ code: "overloaded", retryable: true })

    await hog("released")
    const again = await ask("GET", `/v1/sessions/${id}/events?after=0&limit=100`)
    expect(again.status).toBe(200)
    expect(again.body.events).toEqual(page.body.events)
    const listed = await ask("GET", "/v1/sessions")
    expect(listed.status).toBe(200)
    // The refused create left no session behind.
    expect(listed.body.sessions.map((s: { session_id: string }) => s.session_id)).toEqual([id])
    expect((await ask("POST", "/v1/sessions", { model: { provider: "scripted" } })).status).toBe(201)
  }, 60_000)
})
