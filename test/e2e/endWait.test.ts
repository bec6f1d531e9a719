/**
 * An end waiting for a running turn, through a real server (docs/environments.md, "Ending";
 * docs/api.md, "Idempotency"). Until the end has recorded `session_end_started` nothing of the
 * ending is durable: a crash then leaves the session idle, taking messages. So a message in that
 * wait is refused as any message during a running turn is, 409 `session_busy` (retryable), and a
 * keyed one keeps nothing under its key; only once the ending is recorded is the answer
 * `session_ended`, kept for good. The turn is held by a slow scripted reply (docs/models.md).
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, ServerProcess, sleep } from "../support/server.js"

/** A first reply that takes a minute (the turn it holds is cancelled, or the server killed, long before), then quick ones. */
const SLOW_FIRST = { model: { provider: "scripted", replies: [{ text: "slow", delay_ms: 60_000 }, { text: "fast" }, { text: "fast" }, { text: "fast" }] } }

describe("an end waiting for a running turn", () => {
  const servers: Array<ServerProcess> = []
  beforeAll(ensureBuilt, 120_000)
  afterAll(async () => {
    for (const s of servers) await s.dispose()
  })

  const started = async () => {
    const s = await new ServerProcess().start()
    servers.push(s)
    return s
  }

  /** A session whose first turn is running, held in its model call, and the sync send that started it (unanswered). */
  const heldTurn = async (s: ServerProcess) => {
    const created = await request(s.baseUrl, "/v1/sessions", { json: SLOW_FIRST })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const held = request(s.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "slow" } } })
    held.catch(() => undefined) // a killed server never answers it
    await eventually("the model call to start", async () => (await kindsOf(s, id)).includes("model_call_started") || undefined)
    return { id, held }
  }

  const kindsOf = async (s: ServerProcess, id: string) =>
    ((await request(s.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; sequence: number }>).map((e) => e.kind)

  const message = (s: ServerProcess, id: string, text: string, key?: string, async = false) =>
    request(s.baseUrl, `/v1/sessions/${id}/messages`, {
      json: { input: { message: text } },
      headers: { ...(key === undefined ? {} : { "idempotency-key": key }), ...(async ? { prefer: "respond-async" } : {}) }
    })

  /** Starts an end (its answer waits for the turn), and gives it a chance to reach the session: not an assertion, the answers after it are the same either way. */
  const endInFlight = async (s: ServerProcess, id: string, key: string) => {
    const ending = request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST", headers: { "idempotency-key": key } })
    ending.catch(() => undefined)
    await sleep(300)
    return { ending } // wrapped: an async function returning the promise itself would wait for it
  }

  it("a send or submit, keyed or not, is 409 session_busy (retryable) and journals nothing; a cancel answers the session as recorded; once the end has answered the same keys are 409 session_ended", async () => {
    const s = await started()
    const { held, id } = await heldTurn(s)
    const { ending } = await endInFlight(s, id, "end-1")

    const before = await kindsOf(s, id)
    const during = [
      await message(s, id, "hello", "msg-1"),
      await message(s, id, "later", "sub-1", true),
      await message(s, id, "hello"),
      await message(s, id, "later", undefined, true)
    ]
    for (const r of during) {
      expect(r.status, r.text).toBe(409)
      expect(r.body).toMatchObject({ code: "session_busy", retryable: true })
    }
    expect((await request(s.baseUrl, `/v1/sessions/${id}`)).body.status).toBe("running")
    expect(await kindsOf(s, id)).toEqual(before)
    expect(before).not.toContain("session_end_started")

    // The cancel closes the turn; its summary names no ending its last_sequence does not hold.
    const cancelled = await request(s.baseUrl, `/v1/sessions/${id}/cancel`, { method: "POST" })
    expect(cancelled.status, cancelled.text).toBe(200)
    const through = ((await request(s.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; sequence: number }>)
      .filter((e) => e.sequence <= cancelled.body.last_sequence)
      .map((e) => e.kind)
    expect(cancelled.body.status).toBe(through.includes("session_ended") ? "ended" : through.includes("session_end_started") ? "ending" : "idle")

    const ended = await ending
    expect(ended.status, ended.text).toBe(200)
    expect(ended.body.status).toBe("ended")
    expect((await held).body.turn).toMatchObject({ status: "failed", failure: { code: "cancelled" } })
    const kinds = await kindsOf(s, id)
    expect(kinds.filter((k) => k === "turn_started")).toHaveLength(1)
    expect(kinds.slice(-2)).toEqual(["session_end_started", "session_ended"])

    // The ending recorded, the keys refused busy before run now, and are refused for good.
    for (const [key, async] of [["msg-1", false], ["sub-1", true]] as const) {
      const first = await message(s, id, async ? "later" : "hello", key, async)
      expect(first.status, first.text).toBe(409)
      expect(first.body).toMatchObject({ code: "session_ended", retryable: false })
      const again = await message(s, id, async ? "later" : "hello", key, async)
      expect(again.text).toBe(first.text)
    }
  }, 120_000)

  it("after a kill -9 during the end's wait, the session is idle with nothing of the ending recorded, and the keys refused during the wait run as new ones", async () => {
    const s = await started()
    const { id } = await heldTurn(s)
    await endInFlight(s, id, "end-1")
    const refused = [await message(s, id, "hello", "msg-1"), await message(s, id, "later", "sub-1", true)]
    for (const r of refused) expect(r.body).toMatchObject({ code: "session_busy", retryable: true })

    await s.kill()
    await s.restart()

    const summary = await request(s.baseUrl, `/v1/sessions/${id}`)
    expect(summary.body.status).toBe("idle")
    const kinds = await kindsOf(s, id)
    expect(kinds).not.toContain("session_end_started")
    expect(kinds.at(-1)).toBe("turn_failed")

    // The keyed send refused busy ran nothing and kept nothing: its retry runs now, as an unkeyed one would.
    const sent = await message(s, id, "hello", "msg-1")
    expect(sent.status, sent.text).toBe(200)
    expect(sent.body.turn.status).toBe("ended")
    expect((await message(s, id, "hello", "msg-1")).text).toBe(sent.text)
    const submitted = await message(s, id, "later", "sub-1", true)
    expect(submitted.status, submitted.text).toBe(202)
    await eventually("the submitted turn to close", async () => (await request(s.baseUrl, `/v1/sessions/${id}`)).body.status === "idle" || undefined)
    expect((await message(s, id, "later", "sub-1", true)).text).toBe(submitted.text)

    // The end's own key was claimed and never answered: ambiguous, as documented. A new key ends the session.
    const endRetry = await request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST", headers: { "idempotency-key": "end-1" } })
    expect(endRetry.status, endRetry.text).toBe(409)
    expect(endRetry.body.code).toBe("ambiguous")
    const ended = await request(s.baseUrl, `/v1/sessions/${id}/end`, { method: "POST", headers: { "idempotency-key": "end-2" } })
    expect(ended.body.status).toBe("ended")
    // Answered keys still replay their answers after the end.
    expect((await message(s, id, "hello", "msg-1")).text).toBe(sent.text)
  }, 180_000)
})
