/**
 * A keyed request refused before anything happened frees its key, durably, in a real server
 * process: a sync send refused with 409 `session_busy` (retryable) can be retried with the same
 * key once the session is free — also after a restart — and then runs exactly once.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, ServerProcess } from "../support/server.js"

const slowModel = (ms: number) => ({
  provider: "scripted",
  replies: [{ tool_calls: [{ name: "slow", input: { ms } }] }, { text: "done" }]
})

describe("idempotency: a refusal where nothing happened", () => {
  let server: ServerProcess | undefined
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("a keyed send refused with 409 session_busy frees its key: retried after the turn and after a restart, it runs once and then replays", async () => {
    server = await new ServerProcess().start()
    const s = server
    const created = await request(s.baseUrl, "/v1/sessions", { json: { model: slowModel(600), tools: [{ name: "slow" }] } })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const send = (message: string, key: string, headers: Record<string, string> = {}) =>
      request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message } }, headers: { "idempotency-key": key, ...headers } })
    const events = async () => (await request(s.baseUrl, `/v1/sessions/${id}/events?limit=1000`)).body.events as Array<{ kind: string }>

    const submitted = await send("first", "submit-1", { prefer: "respond-async" })
    expect(submitted.status, submitted.text).toBe(202)
    for (let i = 0; i < 2; i++) {
      const busy = await send("second", "k")
      expect(busy.status, busy.text).toBe(409)
      expect(busy.body).toMatchObject({ code: "session_busy", retryable: true })
    }
    // A graceful stop drains the running turn; the release of "k" was durable before its answer.
    await s.stop()
    await s.start()
    await eventually("the first turn's end", async () => (await events()).some((e) => e.kind === "turn_ended") || undefined)
    const ran = await send("second", "k")
    expect(ran.status, ran.text).toBe(200)
    expect(ran.body.turn.status).toBe("ended")
    expect((await send("second", "k")).text).toBe(ran.text)
    expect((await events()).filter((e) => e.kind === "turn_started").length).toBe(2)
  }, 60_000)
})
