/**
 * DELETE against a real server, racing reads and other DELETEs, many rounds (DESIGN §6, §7): one
 * DELETE answers 204 and the others 404; a read racing it answers 200 or 404, never a 5xx or a
 * "corrupt" journal; and after the 204 nothing of the session is served, then or later.
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer, sleep } from "../support/server.js"

const ROUNDS = 10
const READERS = 20
const DELETERS = 30

describe("DELETE races", () => {
  const server = sharedServer()

  const ended = async () => {
    const id = (await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id
    expect((await request(server().baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "hi" } } })).status).toBe(200)
    expect((await request(server().baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
    return id as string
  }
  const reads = (id: string) => [`/v1/sessions/${id}`, `/v1/sessions/${id}/events?after=0`, `/v1/sessions/${id}/transcript`]

  it(`over ${ROUNDS} rounds: one DELETE beside ${READERS} reads, and ${DELETERS} concurrent DELETEs, leave no zombie and answer one 204`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const [a, b] = [await ended(), await ended()]
      const [deleted, ...raced] = await Promise.all([
        request(server().baseUrl, `/v1/sessions/${a}`, { method: "DELETE" }),
        ...Array.from({ length: READERS }, (_, i) => request(server().baseUrl, reads(a)[i % 3]!))
      ])
      expect(deleted!.status, `round ${round}: ${deleted!.text}`).toBe(204)
      for (const r of raced) expect([200, 404], `round ${round}: ${r.status} ${r.text.slice(0, 200)}`).toContain(r.status)

      const deletes = await Promise.all(Array.from({ length: DELETERS }, () => request(server().baseUrl, `/v1/sessions/${b}`, { method: "DELETE" })))
      const statuses = deletes.map((r) => r.status)
      expect(statuses.filter((s) => s === 204), `round ${round}: ${statuses.join(",")}`).toHaveLength(1)
      expect(statuses.filter((s) => s === 404), `round ${round}: ${deletes.map((r) => r.text).join(" ")}`).toHaveLength(DELETERS - 1)

      for (const wait of [0, 200]) {
        await sleep(wait)
        for (const id of [a, b]) {
          for (const p of reads(id)) {
            const r = await request(server().baseUrl, p)
            expect(r.status, `round ${round}, ${wait} ms after: ${p} answered ${r.text.slice(0, 200)}`).toBe(404)
          }
        }
      }
    }
    expect(server().exited).toBeUndefined()
  }, 120_000)
})
