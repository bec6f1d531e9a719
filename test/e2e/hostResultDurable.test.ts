/**
 * A host's acknowledged result is never lost: `POST /v1/hosts/{id}/results` answers 204 only once
 * the call's outcome record is durable, so a `kill -9` of the server right after the 204 keeps the
 * posted outcome (the seed's "nothing acknowledged is lost"). A real server process, a host over
 * plain fetch, and a real SIGKILL as soon as each 204 arrives, several times over to make the race
 * likely (before the fix, 9 kills in 10 lost the answer: the call came back `unknown`).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { framesOfResponse } from "../support/hosts.js"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

const ROUNDS = 10

describe("a host's result through a real server killed -9 right after its 204", () => {
  let server: ServerProcess
  const aborts: Array<AbortController> = []
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer()
  }, 120_000)
  afterAll(async () => {
    for (const a of aborts) a.abort()
    await server?.dispose()
  })

  it("a result answered 204 is the call's recorded outcome after a kill -9 at once and a restart, every time", async () => {
    const registered = await request(server.baseUrl, "/v1/hosts", { method: "POST" })
    expect(registered.status, registered.text).toBe(201)
    const { host_id: host, token } = registered.body as { host_id: string; token: string }
    const auth = { authorization: `Bearer ${token}` }
    const lost: Array<string> = []
    for (let round = 0; round < ROUNDS; round++) {
      const controller = new AbortController()
      aborts.push(controller)
      const response = await fetch(server.url(`/v1/hosts/${host}/commands`), {
        headers: { ...auth, accept: "text/event-stream" },
        signal: controller.signal
      })
      expect(response.status).toBe(200)
      const frames = framesOfResponse(response)
      await frames.expect("ready")
      const created = await request(server.baseUrl, "/v1/sessions", {
        json: {
          model: { provider: "scripted", replies: [{ tool_calls: [{ name: "lookup", input: { round } }] }, { text: "done" }] },
          environments: [{ name: "app", driver: "host", host }],
          tools: [{ name: "lookup", description: "looks up", environment: "app" }]
        }
      })
      expect(created.status, created.text).toBe(201)
      const session = created.body.session_id as string
      // The turn's request dies with the server: its answer is not what this reads.
      const turn = request(server.baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "go" } } }).catch(() => undefined)
      const call = await frames.expect("call")
      const posted = await request(server.baseUrl, `/v1/hosts/${host}/results`, {
        json: { session_id: session, sequence: call.data.sequence, ok: { round } },
        headers: auth
      })
      expect(posted.status, posted.text).toBe(204)
      await server.kill()
      controller.abort()
      await turn
      await server.start()
      const events = await request(server.baseUrl, `/v1/sessions/${session}/events`)
      expect(events.status, events.text).toBe(200)
      const outcome = (events.body.events as Array<{ kind: string; data: any }>).find(
        (e) => (e.kind === "tool_call_ended" || e.kind === "tool_call_failed") && e.data.sequence === call.data.sequence
      )
      if (outcome?.kind !== "tool_call_ended" || JSON.stringify(outcome.data.output) !== JSON.stringify({ round })) {
        lost.push(`round ${round}: ${JSON.stringify(outcome)}`)
      }
    }
    expect(lost).toEqual([])
  }, 600_000)
})
