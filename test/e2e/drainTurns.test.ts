/**
 * Sends and submits at a graceful stop, against a real server process and SIGTERM (seed,
 * Lifecycle: the drain "stops admitting work and drains admitted operations"; docs/operations.md,
 * "Stopping"): a turn that started before the signal runs to its end and its send is answered; a
 * send or submit the server took before the signal but that was still waiting for its share of the
 * working memory (BRAIN_WORKING_MEMORY_BYTES) when the drain began never starts its turn after
 * "admitting no new work": it is answered 503 `overloaded` at once, and its session's journal is
 * left as it was.
 */
import * as fs from "node:fs"
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"
/** What the server logs when it stops admitting work. */
const STOPPING = "admitting no new work"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
afterEach(async () => {
  await server?.dispose()
  server = undefined
})

/** An answer, or how its connection failed: a caller left without an answer shows as `error`. */
const settle = (p: Promise<{ status: number; text: string; body: any }>) =>
  p.then((r) => ({ ...r, error: undefined }), (e: unknown) => ({ status: 0, text: "", body: undefined, error: String((e as Error)?.cause ?? e) }))

describe("sends and submits at a graceful stop", () => {
  it("a send or submit waiting for its share of the working memory when the drain begins is answered 503 overloaded at once and its session's journal is untouched; the turn that started before the signal runs to its end, is answered 200, and then the process exits 0", async () => {
    // One byte: a running turn holds all of it, so every other turn waits for it.
    const s = (server = await startServer({ env: { BRAIN_WORKING_MEMORY_BYTES: "1" } }))
    const call = (p: string, json?: unknown) => request(s.baseUrl, p, json === undefined ? {} : { json })
    // The running turn's tool (`gated`, test/fixtures/server.mjs) ends when the test opens its gate:
    // the parked requests' answers can only come before the turn's end if they did not wait for it.
    const gate = `${s.dataDir}.gate`
    const slow = await call("/v1/sessions", {
      model: { provider: "scripted", replies: [{ tool_calls: [{ name: "gated", input: { path: gate } }] }, { text: "done" }] },
      tools: [{ name: "gated" }]
    })
    expect(slow.status, slow.text).toBe(201)
    const parked = await call("/v1/sessions", { model: { provider: "scripted" } })
    expect(parked.status, parked.text).toBe(201)
    const a: string = slow.body.session_id
    const b: string = parked.body.session_id
    const before = (await call(`/v1/sessions/${b}/events?after=0`)).body.events

    let ranToItsEnd = false
    const running = settle(call(`/v1/sessions/${a}/messages`, { input: { message: "run the gated tool" } })).finally(() => (ranToItsEnd = true))
    await eventually("the gated tool to start", async () => (s.toolCalls().length > 0 ? true : undefined))
    const send = settle(call(`/v1/sessions/${b}/messages`, { input: { message: "parked" } }))
    const submit = settle(request(s.baseUrl, `/v1/sessions/${b}/messages`, { json: { input: { message: "parked too" } }, headers: { prefer: "respond-async" } }))
    // Both are taken and wait for their share (the bound is all held by the running turn). Nothing
    // outside shows a request waiting there: a second gives a loaded machine time to take them.
    await sleep(1_000)

    s.signal("SIGTERM")
    await eventually("the server to stop admitting work", async () => (s.lines.some((l) => l.includes(STOPPING)) ? true : undefined))
    for (const [what, answer] of [["send", await send], ["submit", await submit]] as const) {
      expect(answer.error, `${what}: ${s.output}`).toBeUndefined()
      expect(answer.status, `${what}: ${answer.text}`).toBe(503)
      expect(answer.body, what).toMatchObject({ code: "overloaded", retryable: true })
      expect(answer.body.message, what).toContain("stopping")
    }
    expect(ranToItsEnd, "refused as the drain began, not once the running turn had ended").toBe(false)
    expect(s.exited, "the drain waits for the running turn").toBeUndefined()

    fs.writeFileSync(gate, "")
    const ran = await running
    expect(ran.error, s.output).toBeUndefined()
    expect(ran.status, ran.text).toBe(200)
    expect(ran.body.turn.status).toBe("ended")
    expect(await s.waitExit(15_000), s.output).toEqual({ code: 0, signal: null })

    fs.rmSync(gate, { force: true })
    await s.start()
    expect((await call(`/v1/sessions/${b}/events?after=0`)).body.events, "the parked requests wrote nothing").toEqual(before)
    expect((await call(`/v1/sessions/${b}`)).body.status).toBe("idle")
    const events: Array<{ kind: string }> = (await call(`/v1/sessions/${a}/events?after=0`)).body.events
    expect(events.at(-1)?.kind).toBe("turn_ended")
  }, 60_000)
})
