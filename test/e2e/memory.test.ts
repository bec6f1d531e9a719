/**
 * Bounded memory under legal traffic (DESIGN §6, §7): a real server process under a small heap
 * (`--max-old-space-size=256`) takes sessions with large opening transcripts and large messages,
 * far more in total than its heap, and keeps serving: released sessions do not stay in memory
 * (the idle TTL unset releases them once unused for a grace of a second or two, within the warm
 * share of BRAIN_CACHE_BYTES), and what it caches is bounded by the bytes it
 * really holds, not by a guess per message.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

/** Sessions created, the size of each one's opening transcript, and the messages sent to some. */
const SESSIONS = 64
const MESSAGES_PER_TRANSCRIPT = 8
const MESSAGE_BYTES = 512 * 1024
const SENT_BYTES = 1024 * 1024
/**
 * Requests in flight at once: two, for the request bodies a 256 MiB heap holds at once by default
 * (BRAIN_INFLIGHT_BODY_BYTES, a 32nd of its 304 MiB heap limit: 9.5 MiB) are two 4 MiB creates.
 * More would be refused 503 `overloaded` (test/e2e/bodyHeap.test.ts), which is not what this checks.
 */
const PARALLEL = 2
/**
 * Milliseconds the whole run may take: a hang guard. Its 64 creates (4 MiB each to parse, journal
 * and fdatasync, about 60% of the time) and 32 sends (1 MiB and its echo, the rest) took 30-60 s
 * on a 2-core machine beside two busy loops, and near 120 s in a loaded whole-suite run. Fewer
 * bytes would no longer be more than the heap, which is what is checked.
 */
const WHOLE_RUN_MS = 300_000

describe("memory under a small heap", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ nodeArgs: ["--max-old-space-size=256"] })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  const transcriptOf = (i: number) =>
    Array.from({ length: MESSAGES_PER_TRANSCRIPT }, (_, k) => ({
      role: k % 2 === 0 ? "user" : "assistant",
      content: String.fromCharCode(97 + ((i + k) % 26)).repeat(MESSAGE_BYTES)
    }))

  it("sessions holding 4 MiB each (256 MiB in all, plus 64 MiB of messages and their echoes) leave a 256 MiB server serving, each transcript whole", async () => {
    const ids: Array<string> = new Array(SESSIONS)
    for (let start = 0; start < SESSIONS; start += PARALLEL) {
      await Promise.all(Array.from({ length: Math.min(PARALLEL, SESSIONS - start) }, async (_, k) => {
        const i = start + k
        const created = await request(server.baseUrl, "/v1/sessions", {
          json: { model: { provider: "scripted" }, transcript: transcriptOf(i) }
        })
        expect(created.status, created.text.slice(0, 200)).toBe(201)
        ids[i] = created.body.session_id
        if (i % 2 === 0) {
          // The scripted model echoes the message: the turn adds 2 MiB to the transcript.
          const sent = await request(server.baseUrl, `/v1/sessions/${ids[i]}/messages`, {
            json: { input: { message: "z".repeat(SENT_BYTES) } }
          })
          expect(sent.status, sent.text.slice(0, 200)).toBe(200)
          expect(sent.body.turn.status).toBe("ended")
        }
      }))
    }
    expect(server.exited, server.output.slice(-2000)).toBeUndefined()
    expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
    // Every session still reads back whole, from its journal if not from memory.
    for (const i of [0, 1, SESSIONS / 2, SESSIONS - 1]) {
      const t = await request(server.baseUrl, `/v1/sessions/${ids[i]}/transcript`)
      expect(t.status).toBe(200)
      expect(t.body.messages.length).toBe(MESSAGES_PER_TRANSCRIPT + (i % 2 === 0 ? 2 : 0))
      expect(t.body.messages[0].content).toBe(transcriptOf(i)[0]!.content)
    }
    const fresh = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    expect(fresh.status).toBe(201)
  }, WHOLE_RUN_MS)
})
