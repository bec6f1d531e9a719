/**
 * A sync send's turn opening is staged and written with the turn's first write (Journal.stage).
 * A real `kill -9` while the turn runs before that write: nothing of the turn was durable, so
 * nothing of it is left — no turn to recover, no claimed key — and a retry with the same
 * Idempotency-Key runs the turn (its client never had an answer, and nothing was sent). That window
 * is bounded (BRAIN_STAGED_OPENING_MS): a turn that runs past it without a write is durably started,
 * so a kill then leaves it recorded as interrupted and its key claimed, as for any turn.
 */
import { describe, expect, it } from "@effect/vitest"
import { eventually, request, sharedServer } from "../support/server.js"
import { guest, wat } from "../support/wat.js"

const wasm = (raw: Uint8Array) => ({ raw, headers: { "content-type": "application/wasm" } })

/** A loop that computes for ever without a host call: its turn never writes until its budget ends it. */
const spinning = () => wat(guest(`(func (export "brain_run") (param i32 i32) (result i64) (loop $l (br $l)) (unreachable))`))

describe("a sync send killed before its turn's first write", () => {
  // A window far longer than the test: the opening stays staged until the kill.
  const server = sharedServer({ env: { BRAIN_MAX_WASM_COMPUTE_MS: "1500", BRAIN_STAGED_OPENING_MS: "600000" } })

  it("leaves nothing: after restart the session is idle at the same last_sequence with no turn in its Events, and a retry with the same key runs the turn", async () => {
    const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(await spinning()))
    expect(admitted.status).toBe(201)
    const created = await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted" } } })
    expect(created.status).toBe(201)
    const session = created.body.session_id
    const before = created.body.last_sequence
    const send = { json: { input: { message: "spin" } }, headers: { "idempotency-key": "staged-opening-1" } }

    const first = request(server().baseUrl, `/v1/sessions/${session}/messages`, send).catch(() => undefined)
    const running = await eventually("the turn runs", async () => {
      const got = await request(server().baseUrl, `/v1/sessions/${session}`)
      return got.body.status === "running" ? got.body : undefined
    })
    // Running, and nothing of it durable: the summary's last_sequence is still the creation's.
    expect(running.last_sequence).toBe(before)
    await server().kill()
    expect(await first).toBeUndefined()

    await server().restart()
    const recovered = await request(server().baseUrl, `/v1/sessions/${session}`)
    expect(recovered.body).toMatchObject({ status: "idle", last_sequence: before })
    const kinds = async () =>
      ((await request(server().baseUrl, `/v1/sessions/${session}/events?after=0`)).body.events as ReadonlyArray<{ kind: string }>).map((e) => e.kind)
    expect(await kinds()).toEqual(["session_creation_started", "session_creation_ended"])

    // The key was never claimed durably: the retry runs the turn (which the compute budget ends).
    const retry = await request(server().baseUrl, `/v1/sessions/${session}/messages`, send)
    expect(retry.status).toBe(200)
    expect(retry.body.turn.status).toBe("failed")
    expect(await kinds()).toEqual([
      "session_creation_started",
      "session_creation_ended",
      "turn_started",
      "activation_started",
      "activation_failed",
      "turn_failed"
    ])
    // And now it is answered: the same key replays it.
    const replay = await request(server().baseUrl, `/v1/sessions/${session}/messages`, send)
    expect(replay.text).toBe(retry.text)
  }, 60_000)
})

describe("a sync send killed after its opening waited past BRAIN_STAGED_OPENING_MS", () => {
  const server = sharedServer({ env: { BRAIN_MAX_WASM_COMPUTE_MS: "20000", BRAIN_STAGED_OPENING_MS: "50" } })

  it("is recorded as started: after restart its turn failed interrupted and is not rerun, and a retry with the same key is 409 ambiguous", async () => {
    const admitted = await request(server().baseUrl, "/v1/agentloops", wasm(await spinning()))
    const created = await request(server().baseUrl, "/v1/sessions", { json: { agentloop: admitted.body.id, model: { provider: "scripted" } } })
    const session = created.body.session_id
    const before = created.body.last_sequence
    const send = { json: { input: { message: "spin" } }, headers: { "idempotency-key": "staged-opening-2" } }
    const first = request(server().baseUrl, `/v1/sessions/${session}/messages`, send).catch(() => undefined)
    // The opening written on its own once the window passed: the summary's last_sequence moves on.
    await eventually("the opening is durable", async () => {
      const got = await request(server().baseUrl, `/v1/sessions/${session}`)
      return got.body.status === "running" && got.body.last_sequence > before ? got.body : undefined
    })
    await server().kill()
    expect(await first).toBeUndefined()

    await server().restart()
    const events = (await request(server().baseUrl, `/v1/sessions/${session}/events?after=0`)).body.events as ReadonlyArray<{ kind: string; data: any }>
    expect(events.map((e) => e.kind)).toEqual([
      "session_creation_started",
      "session_creation_ended",
      "turn_started",
      "activation_started",
      "activation_failed",
      "turn_failed"
    ])
    expect(events.at(-1)!.data.failure).toMatchObject({ code: "interrupted" })
    const retry = await request(server().baseUrl, `/v1/sessions/${session}/messages`, send)
    expect(retry.status).toBe(409)
    expect(retry.body).toMatchObject({ code: "ambiguous", retryable: false, details: { ambiguous: true, in_flight: false } })

    // Deleted, the session's never-answered key outlives it: still ambiguous, never run, never 404.
    expect((await request(server().baseUrl, `/v1/sessions/${session}/end`, { method: "POST" })).status).toBe(200)
    expect((await request(server().baseUrl, `/v1/sessions/${session}`, { method: "DELETE" })).status).toBe(204)
    const afterDelete = await request(server().baseUrl, `/v1/sessions/${session}/messages`, send)
    expect([afterDelete.status, afterDelete.body.code]).toEqual([409, "ambiguous"])
    const otherBody = await request(server().baseUrl, `/v1/sessions/${session}/messages`, { ...send, json: { input: { message: "other" } } })
    expect([otherBody.status, otherBody.body.code]).toEqual([409, "conflict"])
  }, 60_000)
})
