/**
 * Loops on worker threads that wait on a tool that never answers hold no thread (docs/operations.md,
 * "Concurrent turns and the Wasm thread limit"): a real server (test/fixtures/server.mjs and its
 * `hang` tool) with every activation on worker threads (BRAIN_WASM_INLINE_MS=0) and one loop thread
 * (BRAIN_WASM_WORKERS=1, BRAIN_WASM_THREADS=2) runs more such sessions than loop threads, and another
 * session's turn still completes while all of them wait. The official loop's twin ships with the
 * build, so its activations run pinned (wasm/Pinned.ts) from the first.
 *
 * No assertion is timed: every wait is on a condition, with a generous deadline.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type ServerProcess, startServer } from "../support/server.js"

const WAIT_MS = 30_000
const TEST_MS = 120_000

/** More waiting sessions than the one thread loops without a twin could hold. */
const WAITERS = 4

let server: ServerProcess

beforeAll(async () => {
  ensureBuilt()
  server = await startServer({ env: { BRAIN_WASM_INLINE_MS: "0", BRAIN_WASM_WORKERS: "1", BRAIN_WASM_THREADS: "2" } })
}, 180_000)

afterAll(async () => {
  await server?.stop()
})

const create = async (replies: ReadonlyArray<unknown>): Promise<string> => {
  const r = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies }, tools: [{ name: "hang" }] } })
  expect(r.status, r.text).toBe(201)
  return r.body.session_id
}

describe("loops waiting on a tool that never answers, on worker threads", () => {
  it("more sessions than loop threads wait on the hang tool, and another session's turn completes while every one of them still waits", async () => {
    const waiting: Array<string> = []
    for (let i = 0; i < WAITERS; i++) {
      const id = await create([{ text: "waiting", tool_calls: [{ name: "hang", input: { forever: true } }] }, { text: "back" }])
      const r = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: `wait ${i}` } }, headers: { prefer: "respond-async" } })
      expect(r.status, r.text).toBe(202)
      waiting.push(id)
    }
    for (const id of waiting) {
      await eventually(`${id}'s hang call to be dispatched`, async () => (server.toolCalls().some((c) => c.session === id) ? true : undefined), WAIT_MS)
    }
    const other = await create([{ text: "answered while the others wait" }])
    const answered = await request(server.baseUrl, `/v1/sessions/${other}/messages`, { json: { input: { message: "hi" } } })
    expect(answered.status, answered.text).toBe(200)
    expect(answered.body.turn).toMatchObject({ status: "ended", result: { text: "answered while the others wait" } })
    for (const id of waiting) {
      const r = await request(server.baseUrl, `/v1/sessions/${id}`)
      expect(r.body.status, id).toBe("running")
    }
    // Cancelled, each waiter's loop is rewound with the cancel and its turn closes.
    for (const id of waiting) {
      const r = await request(server.baseUrl, `/v1/sessions/${id}/cancel`, { method: "POST" })
      expect(r.status, r.text).toBe(200)
      expect(r.body).toMatchObject({ session_id: id, status: "idle" })
    }
  }, TEST_MS)
})
