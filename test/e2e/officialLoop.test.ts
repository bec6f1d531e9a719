/**
 * The official Agentloop as it ships — the WebAssembly guest compiled from loops/official and run
 * in the host's worker threads — driven over HTTP by a real server process (test/fixtures/server.mjs
 * with its `slow` and `hang` tools and its BRAIN_TEST_TOOL_LOG dispatch log), with the scripted
 * model. Every session here names no `agentloop`, so it runs the default one; the last test
 * uploads the example loop (dist/loops/examples/echo-with-memory.wasm) instead.
 *
 * What a model was asked is read back from the journal over HTTP: a `model_call_started` Event
 * holds `context.delta` against the saved transcript, and these transcripts only ever grow, so
 * the request is the saved transcript's first `keep` messages followed by `append`.
 *
 * No assertion is timed: every wait is on a condition, with a generous deadline.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, type Reply, request, ROOT, ServerProcess, startServer } from "../support/server.js"
import { guest, wat } from "../support/wat.js"

/** Milliseconds a condition may take to hold on a noisy machine. */
const WAIT_MS = 30_000
/** Milliseconds one test may take: server starts, a kill and a restart included. */
const TEST_MS = 120_000

const EXAMPLE_LOOP = path.join(ROOT, "dist/loops/examples/echo-with-memory.wasm")

const scripted = (replies?: ReadonlyArray<unknown>) => ({ provider: "scripted", ...(replies ? { replies } : {}) })
const TOOLS = [{ name: "slow" }, { name: "hang" }]

interface Message {
  readonly role: string
  readonly content: unknown
  readonly tool_calls?: ReadonlyArray<{ readonly id: string; readonly name: string; readonly input: unknown }>
  readonly tool_call_id?: string
}

// ---------------------------------------------------------------------------------------------
// A thin client over one server

class Api {
  constructor(readonly server: ServerProcess) {}

  private req(p: string, options: Parameters<typeof request>[2] = {}): Promise<Reply> {
    return request(this.server.baseUrl, p, options)
  }

  async create(body: Record<string, unknown>): Promise<string> {
    const r = await this.req("/v1/sessions", { json: body })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id
  }

  /** A synchronous send: answers once the turn is closed. */
  async send(id: string, message: string): Promise<any> {
    const r = await this.req(`/v1/sessions/${id}/messages`, { json: { input: { message } } })
    expect(r.status, r.text).toBe(200)
    return r.body
  }

  /** An asynchronous send: answers the turn_started receipt. */
  async submit(id: string, message: string): Promise<{ readonly session_id: string; readonly sequence: number }> {
    const r = await this.req(`/v1/sessions/${id}/messages`, { json: { input: { message } }, headers: { prefer: "respond-async" } })
    expect(r.status, r.text).toBe(202)
    return r.body
  }

  async get(id: string): Promise<any> {
    const r = await this.req(`/v1/sessions/${id}`)
    expect(r.status, r.text).toBe(200)
    return r.body
  }

  cancel(id: string): Promise<Reply> {
    return this.req(`/v1/sessions/${id}/cancel`, { method: "POST" })
  }

  /** Every public Event, page by page until an empty page. */
  async events(id: string): Promise<Array<any>> {
    const out: Array<any> = []
    let cursor = 0
    for (;;) {
      const r = await this.req(`/v1/sessions/${id}/events?after=${cursor}`)
      expect(r.status, r.text).toBe(200)
      if (r.body.events.length === 0) return out
      out.push(...r.body.events)
      cursor = r.body.next_cursor
    }
  }

  async transcript(id: string): Promise<ReadonlyArray<Message>> {
    const r = await this.req(`/v1/sessions/${id}/transcript`)
    expect(r.status, r.text).toBe(200)
    return r.body.messages
  }
}

// ---------------------------------------------------------------------------------------------
// Reading the journal back

const kinds = (events: ReadonlyArray<any>) => events.map((e) => `${e.sequence}:${e.kind}`).join(" ")

/** The record closing the started record at `sequence` (its `*_ended` or `*_failed`), all of them. */
const closing = (events: ReadonlyArray<any>, sequence: number) =>
  events.filter((e) => e.sequence > sequence && e.data?.sequence === sequence)

/** The messages each model call was sent, in order, rebuilt from its started Event and the saved transcript. */
const modelRequests = (events: ReadonlyArray<any>, transcript: ReadonlyArray<Message>): Array<ReadonlyArray<Message>> => {
  expect(events.some((e) => e.kind === "transcript_replaced"), "the transcript only grew").toBe(false)
  return events.filter((e) => e.kind === "model_call_started").map((e) => {
    const { keep, append } = e.data.context.delta
    expect(keep, `the saved transcript held ${keep} messages at ${e.sequence}`).toBeLessThanOrEqual(transcript.length)
    const messages = [...transcript.slice(0, keep), ...append]
    expect(messages.length, `model call ${e.sequence}`).toBe(e.data.message_count)
    return messages
  })
}

const toolResult = (m: Message | undefined) => {
  expect(m?.role).toBe("tool")
  return JSON.parse(String(m!.content))
}

/** The fixture's dispatch log lines for one session. */
const dispatchesOf = (server: ServerProcess, session: string) => server.toolCalls().filter((c) => c.session === session)

const INTERRUPTION_NOTE = /^Note from Brain: the previous turn did not finish \((\w+): (.*)\)\. Effects it started may or may not have happened; check before repeating them\.$/

beforeAll(ensureBuilt, 180_000)

// ---------------------------------------------------------------------------------------------

describe("the official Wasm loop over HTTP (sessions naming no agentloop)", () => {
  let server: ServerProcess
  let api: Api

  beforeAll(async () => {
    server = await startServer()
    api = new Api(server)
  }, 60_000)
  afterAll(async () => {
    await server?.dispose()
  }, TEST_MS)

  it("a plain answer: the turn ends with the model's text, one model call, and the transcript holds the user message then the assistant's", async () => {
    const id = await api.create({ model: scripted([{ text: "Hello there, human." }]) })
    const answered = await api.send(id, "hi")
    expect(answered.turn).toMatchObject({ status: "ended", result: { text: "Hello there, human." } })
    expect(answered.status).toBe("idle")

    const events = await api.events(id)
    expect(events.find((e) => e.kind === "activation_started")?.data, "the default loop ran").toEqual({ agentloop: "official" })
    expect(events.filter((e) => e.kind === "model_call_started")).toHaveLength(1)
    expect(events.some((e) => e.kind === "tool_call_started")).toBe(false)
    const turn = events.find((e) => e.kind === "turn_started")!
    expect(closing(events, turn.sequence)).toMatchObject([{ kind: "turn_ended", data: { result: { text: "Hello there, human." } } }])

    const transcript = await api.transcript(id)
    expect(transcript).toEqual([
      { role: "user", content: "hi" },
      { role: "assistant", content: "Hello there, human." }
    ])
    expect(modelRequests(events, transcript)).toEqual([[{ role: "user", content: "hi" }]])
  }, TEST_MS)

  it("a model failure the loop passes on fails the turn with the failure as recorded (its code, message, flags and details), and the user's message is kept in the transcript", async () => {
    const id = await api.create({ model: scripted([{ fail: { code: "model_unavailable", message: "the provider is down" } }]) })
    const failed = await api.send(id, "hi")
    expect(failed.turn.status).toBe("failed")
    const events = await api.events(id)
    const recorded = events.find((e) => e.kind === "model_call_failed")!.data.failure
    expect(recorded).toMatchObject({ code: "model_unavailable", retryable: true, ambiguous: true })
    expect(failed.turn.failure).toEqual(recorded)
    expect(events.find((e) => e.kind === "turn_failed")!.data.failure).toEqual(recorded)
    // The user's message is kept although the model failed: the next turn's model sees it.
    expect(await api.transcript(id)).toEqual([{ role: "user", content: "hi" }])
  }, TEST_MS)

  it("a long seeded transcript with an unanswered call far before its last messages: the first turn repairs it in place, and the saved transcript keeps every message", async () => {
    const talk: Array<Message> = Array.from({ length: 60 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `message ${i}` }))
    const round: Message = { role: "assistant", content: "", tool_calls: [{ id: "early", name: "slow", input: {} }] }
    const seeded = [...talk.slice(0, 4), round, ...talk.slice(4)]
    const id = await api.create({ model: scripted([{ text: "repaired" }]), transcript: seeded })
    expect((await api.send(id, "go on")).turn).toMatchObject({ status: "ended", result: { text: "repaired" } })
    const interrupted = { role: "tool", tool_call_id: "early", content: JSON.stringify({ outcome: "unknown", error: "the call was interrupted; it may or may not have run" }) }
    expect(await api.transcript(id)).toEqual([
      ...seeded.slice(0, 5),
      interrupted,
      ...seeded.slice(5),
      { role: "user", content: "go on" },
      { role: "assistant", content: "repaired" }
    ])
  }, TEST_MS)

  it("two rounds of tool calls, then the answer: each call dispatched once, results appended in call order, and the 2nd and 3rd model calls see every result so far", async () => {
    // The second round runs two calls together; the first of them finishes last, so an order
    // taken from completion would differ from the call order.
    const id = await api.create({
      model: scripted([
        { text: "round one", tool_calls: [{ name: "slow", input: { ms: 5 } }] },
        { text: "round two", tool_calls: [{ name: "slow", input: { ms: 400 } }, { name: "slow", input: { ms: 1 } }] },
        { text: "all done" }
      ]),
      tools: TOOLS
    })
    const answered = await api.send(id, "work, please")
    expect(answered.turn).toMatchObject({ status: "ended", result: { text: "all done" } })

    const events = await api.events(id)
    const models = events.filter((e) => e.kind === "model_call_started")
    const tools = events.filter((e) => e.kind === "tool_call_started")
    expect(models, kinds(events)).toHaveLength(3)
    expect(tools.map((e) => e.data.input), kinds(events)).toEqual([{ ms: 5 }, { ms: 400 }, { ms: 1 }])
    // Each call has exactly one outcome, ok, with the tool's output; none is re-run.
    for (const t of tools) {
      expect(closing(events, t.sequence)).toMatchObject([{ kind: "tool_call_ended", data: { outcome: "ok", is_error: false, output: { slept: t.data.input.ms } } }])
    }
    const dispatched = dispatchesOf(server, id)
    expect(dispatched.map((d) => d.sequence).sort((a, b) => a - b)).toEqual(tools.map((t) => t.sequence))
    // Round two's calls both started after round one's result and before the third model call.
    const [first, second, third] = models.map((m) => m.sequence)
    expect(tools[0].sequence).toBeGreaterThan(first!)
    expect(tools[0].sequence).toBeLessThan(second!)
    expect(tools[1].sequence).toBeGreaterThan(second!)
    expect(tools[2].sequence).toBeLessThan(third!)

    const ids = tools.map((t) => t.data.call_id as string)
    const transcript = await api.transcript(id)
    const user = { role: "user", content: "work, please" }
    const ask1 = { role: "assistant", content: "round one", tool_calls: [{ id: ids[0], name: "slow", input: { ms: 5 } }] }
    const result1 = { role: "tool", tool_call_id: ids[0], content: JSON.stringify({ slept: 5 }) }
    const ask2 = {
      role: "assistant",
      content: "round two",
      tool_calls: [{ id: ids[1], name: "slow", input: { ms: 400 } }, { id: ids[2], name: "slow", input: { ms: 1 } }]
    }
    const result2 = { role: "tool", tool_call_id: ids[1], content: JSON.stringify({ slept: 400 }) }
    const result3 = { role: "tool", tool_call_id: ids[2], content: JSON.stringify({ slept: 1 }) }
    expect(transcript).toEqual([user, ask1, result1, ask2, result2, result3, { role: "assistant", content: "all done" }])

    const requests = modelRequests(events, transcript)
    expect(requests).toEqual([
      [user],
      [user, ask1, result1],
      [user, ask1, result1, ask2, result2, result3]
    ])
  }, TEST_MS)

  it("a tool past its timeout_ms: the call is recorded as a timeout (is_error), and the next model call is sent its result as an error", async () => {
    const id = await api.create({
      model: scripted([{ tool_calls: [{ name: "slow", input: { ms: 60_000 } }] }, { text: "the tool timed out" }]),
      tools: [{ name: "slow", timeout_ms: 200 }]
    })
    const answered = await api.send(id, "try the slow tool")
    expect(answered.turn).toMatchObject({ status: "ended", result: { text: "the tool timed out" } })

    const events = await api.events(id)
    const started = events.filter((e) => e.kind === "tool_call_started")
    expect(started, kinds(events)).toHaveLength(1)
    // The deadline is taken when the dispatch begins, before its start is recorded.
    expect(started[0].data.deadline_at_ms).toBeGreaterThan(0)
    expect(started[0].data.deadline_at_ms).toBeLessThanOrEqual(started[0].recorded_at_ms + 200)
    expect(closing(events, started[0].sequence)).toMatchObject([{
      kind: "tool_call_failed",
      // The fixture's tool confirms the abort, so the timeout is certain, not ambiguous.
      data: { outcome: "timeout", is_error: true, failure: { code: "timeout", ambiguous: false } }
    }])
    expect(dispatchesOf(server, id)).toHaveLength(1)

    const transcript = await api.transcript(id)
    const requests = modelRequests(events, transcript)
    expect(requests).toHaveLength(2)
    const second = requests[1]!
    expect(second.slice(0, 2)).toEqual([
      { role: "user", content: "try the slow tool" },
      { role: "assistant", content: "", tool_calls: [{ id: started[0].data.call_id, name: "slow", input: { ms: 60_000 } }] }
    ])
    expect(second).toHaveLength(3)
    expect(second[2]!.tool_call_id).toBe(started[0].data.call_id)
    // The official loop marks a failed result as `{outcome, error}` in the tool message's content.
    expect(toolResult(second[2])).toEqual({
      outcome: "timeout",
      error: { code: "timeout", message: "the tool call passed its deadline of 200 ms" }
    })
    expect(transcript.at(-1)).toEqual({ role: "assistant", content: "the tool timed out" })
  }, TEST_MS)

  it("an interrupt while a tool runs: the call is recorded cancelled, the turn fails cancelled, and the next turn works and its model is told the previous turn was interrupted", async () => {
    const id = await api.create({
      model: scripted([{ text: "waiting", tool_calls: [{ name: "hang", input: { forever: true } }] }, { text: "back again" }]),
      tools: TOOLS
    })
    const receipt = await api.submit(id, "start something long")
    await eventually("the hang tool to be dispatched", async () => (dispatchesOf(server, id).length > 0 ? true : undefined), WAIT_MS)
    expect((await api.get(id)).status).toBe("running")

    const cancelled = await api.cancel(id)
    expect(cancelled.status, cancelled.text).toBe(200)
    expect(cancelled.body).toMatchObject({ session_id: id, status: "idle" })

    const events = await api.events(id)
    const started = events.filter((e) => e.kind === "tool_call_started")
    expect(started, kinds(events)).toHaveLength(1)
    expect(closing(events, started[0].sequence)).toMatchObject([{
      kind: "tool_call_failed",
      data: { outcome: "cancelled", is_error: true, failure: { code: "cancelled" } }
    }])
    const activation = events.find((e) => e.kind === "activation_started")!
    expect(closing(events, activation.sequence)).toMatchObject([{ kind: "activation_failed", data: { failure: { code: "cancelled" } } }])
    expect(closing(events, receipt.sequence)).toMatchObject([{ kind: "turn_failed", data: { failure: { code: "cancelled", message: "the turn was cancelled" } } }])

    const next = await api.send(id, "are you there?")
    expect(next.turn).toMatchObject({ status: "ended", result: { text: "back again" } })
    expect(dispatchesOf(server, id), "the interrupted call is not re-run").toHaveLength(1)

    const after = await api.events(id)
    const transcript = await api.transcript(id)
    const requests = modelRequests(after, transcript)
    expect(requests).toHaveLength(2)
    const told = requests[1]!
    const callId = started[0].data.call_id
    // The interrupted call's request, then a result for it (the loop repairs what the cancel left),
    // the note about the failed turn, and the new message.
    expect(told[0]).toEqual({ role: "user", content: "start something long" })
    expect(told[1]).toMatchObject({ role: "assistant", tool_calls: [{ id: callId, name: "hang" }] })
    expect(told[2]).toMatchObject({ role: "tool", tool_call_id: callId })
    // The cancel refuses the loop's save of the cancelled result, so the repair supplies one; either
    // way the model gets a result for the call, marked as an error.
    expect(toolResult(told[2])).toMatchObject({ outcome: expect.stringMatching(/^(unknown|cancelled)$/), error: expect.anything() })
    expect(told[3]?.role).toBe("system")
    expect(String(told[3]!.content)).toMatch(INTERRUPTION_NOTE)
    expect(INTERRUPTION_NOTE.exec(String(told[3]!.content))!.slice(1)).toEqual(["cancelled", "the turn was cancelled"])
    expect(told.slice(4)).toEqual([{ role: "user", content: "are you there?" }])
    expect(transcript.at(-1)).toEqual({ role: "assistant", content: "back again" })
  }, TEST_MS)

  it("an interrupt after one call of a round finished: the next turn's model is shown that call's committed result and the other's committed cancel, not told either may or may not have run", async () => {
    const id = await api.create({
      model: scripted([
        { text: "two at once", tool_calls: [{ name: "slow", input: { ms: 0 } }, { name: "hang", input: { forever: true } }] },
        { text: "back again" }
      ]),
      tools: TOOLS
    })
    await api.submit(id, "start both")
    const started = await eventually("the slow call to end while hang runs", async () => {
      const events = await api.events(id)
      const calls = events.filter((e) => e.kind === "tool_call_started")
      const slow = calls.find((e) => e.data.tool === "slow")
      return calls.length === 2 && slow !== undefined && closing(events, slow.sequence).length === 1 ? calls : undefined
    }, WAIT_MS)
    const cancelled = await api.cancel(id)
    expect(cancelled.status, cancelled.text).toBe(200)
    const events = await api.events(id)
    const [slow, hang] = ["slow", "hang"].map((tool) => started.find((e: any) => e.data.tool === tool)!)
    expect(closing(events, slow.sequence)).toMatchObject([{ kind: "tool_call_ended", data: { outcome: "ok", output: { slept: 0 } } }])
    const [hangOutcome] = closing(events, hang.sequence)
    expect(hangOutcome).toMatchObject({ kind: "tool_call_failed", data: { outcome: "cancelled" } })

    expect((await api.send(id, "what happened?")).turn).toMatchObject({ status: "ended", result: { text: "back again" } })
    expect(dispatchesOf(server, id), "nothing is dispatched again").toHaveLength(2)
    const after = await api.events(id)
    const transcript = await api.transcript(id)
    const told = modelRequests(after, transcript)[1]!
    const results = new Map(told.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, toolResult(m)]))
    expect(results.get(slow.data.call_id)).toEqual({ slept: 0 })
    expect(results.get(hang.data.call_id)).toEqual({ outcome: "cancelled", error: { code: hangOutcome.data.failure.code, message: hangOutcome.data.failure.message } })
    // What the model was shown is what the transcript keeps.
    expect(transcript.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, toolResult(m)])).toEqual([...results])
  }, TEST_MS)

  it("the example loop uploaded: listed by GET /v1/agentloops, and a session naming it counts its turns in kv and answers from the saved transcript across turns and a restart", async () => {
    const bytes = new Uint8Array(fs.readFileSync(EXAMPLE_LOOP))
    const sha = crypto.createHash("sha256").update(bytes).digest("hex")
    const admitted = await request(server.baseUrl, "/v1/agentloops", { raw: bytes, headers: { "content-type": "application/wasm" } })
    expect(admitted.status, admitted.text).toBe(201)
    expect(admitted.body).toEqual({ id: sha, bytes: bytes.length, loop: true, tool: false })
    const listed = await request(server.baseUrl, "/v1/agentloops")
    expect(listed.status, listed.text).toBe(200)
    expect(listed.body.agentloops).toContainEqual({ id: sha, bytes: bytes.length, loop: true, tool: false })

    // The scripted model with no replies echoes the last user message.
    const id = await api.create({ agentloop: sha, model: scripted() })
    const one = await api.send(id, "hello")
    expect(one.turn).toMatchObject({ status: "ended", result: { text: "Turn 1: hello", turn: 1 } })
    const two = await api.send(id, "again")
    expect(two.turn).toMatchObject({ status: "ended", result: { text: "Turn 2: again", turn: 2 } })

    // Nothing lives in the guest between turns: a graceful restart changes nothing.
    await server.restart()
    const three = await api.send(id, "after a restart")
    expect(three.turn).toMatchObject({ status: "ended", result: { text: "Turn 3: after a restart", turn: 3 } })

    const events = await api.events(id)
    const activations = events.filter((e) => e.kind === "activation_started")
    expect(activations.map((e) => e.data.agentloop)).toEqual([sha, sha, sha])
    const echoes = events.filter((e) => e.kind === "echo.turn")
    expect(echoes.map((e) => e.data)).toEqual([{ turn: 1 }, { turn: 2 }, { turn: 3 }])
    expect(echoes.map((e) => e.origin)).toEqual(activations.map((a) => ({ kind: "agentloop", sequence: a.sequence })))

    const transcript = await api.transcript(id)
    const history = [
      { role: "user", content: "hello" },
      { role: "assistant", content: "Turn 1: hello" },
      { role: "user", content: "again" },
      { role: "assistant", content: "Turn 2: again" },
      { role: "user", content: "after a restart" },
      { role: "assistant", content: "Turn 3: after a restart" }
    ]
    expect(transcript).toEqual(history)
    // Each turn's model call is sent the saved conversation plus the new message.
    expect(modelRequests(events, transcript)).toEqual([history.slice(0, 1), history.slice(0, 3), history.slice(0, 5)])
    expect((await request(server.baseUrl, "/v1/agentloops")).body.agentloops).toContainEqual({ id: sha, bytes: bytes.length, loop: true, tool: false })
  }, TEST_MS)
})

describe("the official Wasm loop and kill -9", () => {
  it("killed during a turn's first model call (a slow scripted reply): the acknowledged message is in the saved transcript, and the next turn's model is asked with it, then the note, then the new message", async () => {
    const server = await startServer()
    try {
      const api = new Api(server)
      const id = await api.create({ model: scripted([{ text: "too late", delay_ms: 600_000 }, { text: "after the crash" }]) })
      const receipt = await api.submit(id, "what was I asking?")
      await eventually("the first model call to start", async () => ((await api.events(id)).some((e) => e.kind === "model_call_started") ? true : undefined), WAIT_MS)
      const killed = await server.kill()
      expect(killed.signal).toBe("SIGKILL")
      await server.restart()

      const recovered = await api.events(id)
      const [turnOutcome] = closing(recovered, receipt.sequence)
      expect(turnOutcome).toMatchObject({ kind: "turn_failed", data: { failure: { code: "interrupted", ambiguous: true } } })
      expect(await api.transcript(id)).toEqual([{ role: "user", content: "what was I asking?" }])

      const next = await api.send(id, "well?")
      expect(next.turn).toMatchObject({ status: "ended", result: { text: "after the crash" } })
      const events = await api.events(id)
      const requests = modelRequests(events, await api.transcript(id))
      expect(requests).toHaveLength(2)
      const told = requests[1]!
      expect(told[0]).toEqual({ role: "user", content: "what was I asking?" })
      expect(told[1]?.role).toBe("system")
      const note = INTERRUPTION_NOTE.exec(String(told[1]!.content))
      expect(note?.slice(1), String(told[1]!.content)).toEqual(["interrupted", turnOutcome.data.failure.message])
      expect(told.slice(2)).toEqual([{ role: "user", content: "well?" }])
    } finally {
      await server.dispose()
    }
  }, TEST_MS)

  it("killed while the guest waits in its dispatch host call: the restart records the call as unknown (ambiguous) and the turn as interrupted, dispatches nothing again, and the next turn answers the orphaned call with that recorded outcome", async () => {
    const server = await startServer()
    try {
      const api = new Api(server)
      const id = await api.create({
        model: scripted([{ text: "on it", tool_calls: [{ name: "slow", input: { ms: 60_000 } }] }, { text: "after the crash" }]),
        tools: TOOLS
      })
      const receipt = await api.submit(id, "do it once")
      await eventually("the slow tool to be dispatched", async () => (dispatchesOf(server, id).length > 0 ? true : undefined), WAIT_MS)
      const before = await api.get(id)
      expect(before.status).toBe("running")
      const killed = await server.kill()
      expect(killed.signal).toBe("SIGKILL")
      await server.restart()

      // The first access recovers the session without dispatching anything.
      const after = await api.get(id)
      expect(after.status).toBe("idle")
      expect(after.last_sequence).toBeGreaterThan(before.last_sequence)
      const recovered = await api.events(id)
      const started = recovered.filter((e) => e.kind === "tool_call_started")
      expect(started, kinds(recovered)).toHaveLength(1)
      const activation = recovered.find((e) => e.kind === "activation_started")!
      const [toolOutcome] = closing(recovered, started[0].sequence)
      const [activationOutcome] = closing(recovered, activation.sequence)
      const [turnOutcome] = closing(recovered, receipt.sequence)
      expect(closing(recovered, started[0].sequence)).toHaveLength(1)
      expect(toolOutcome).toMatchObject({
        kind: "tool_call_failed",
        data: { outcome: "unknown", is_error: true, failure: { code: "unknown", ambiguous: true } }
      })
      expect(activationOutcome).toMatchObject({ kind: "activation_failed", data: { failure: { code: "interrupted", ambiguous: true } } })
      expect(turnOutcome).toMatchObject({ kind: "turn_failed", data: { failure: { code: "interrupted", ambiguous: true } } })
      // Recovery's records are the last ones: written in one go, after everything the killed process wrote.
      expect(recovered.slice(-3).map((e) => e.kind)).toEqual(["tool_call_failed", "activation_failed", "turn_failed"])
      expect(dispatchesOf(server, id)).toEqual([{ tool: "slow", session: id, sequence: started[0].sequence }])

      const next = await api.send(id, "and now?")
      expect(next.turn).toMatchObject({ status: "ended", result: { text: "after the crash" } })
      expect(dispatchesOf(server, id), "the dispatch log still holds the one call").toHaveLength(1)

      const events = await api.events(id)
      expect(events.filter((e) => e.kind === "tool_call_started")).toHaveLength(1)
      const transcript = await api.transcript(id)
      const requests = modelRequests(events, transcript)
      expect(requests).toHaveLength(2)
      const told = requests[1]!
      const callId = started[0].data.call_id
      expect(told[0]).toEqual({ role: "user", content: "do it once" })
      expect(told[1]).toEqual({ role: "assistant", content: "on it", tool_calls: [{ id: callId, name: "slow", input: { ms: 60_000 } }] })
      expect(told[2]).toMatchObject({ role: "tool", tool_call_id: callId })
      // The outcome recovery committed for it, as a dispatch would have shown it.
      expect(toolResult(told[2])).toEqual({ outcome: "unknown", error: { code: "unknown", message: toolOutcome.data.failure.message } })
      expect(told[3]?.role).toBe("system")
      const note = INTERRUPTION_NOTE.exec(String(told[3]!.content))
      expect(note?.slice(1), String(told[3]!.content)).toEqual(["interrupted", turnOutcome.data.failure.message])
      expect(told.slice(4)).toEqual([{ role: "user", content: "and now?" }])
    } finally {
      await server.dispose()
    }
  }, TEST_MS)
})

// ---------------------------------------------------------------------------------------------
// A round of large tool outputs, each within its bound

/** A Wasm tool answering `{"ok": "x…x"}` with `n` x's: its output is n + 2 bytes of JSON. */
const bigOutputTool = (n: number) =>
  wat(guest(`
  (func (export "brain_tool") (param i32 i32) (result i64) (local $p i32) (local $i i32)
    (local.set $p (call $alloc (i32.const ${n + 9})))
    (i32.store (local.get $p) (i32.const 0x6b6f227b))
    (i32.store16 (i32.add (local.get $p) (i32.const 4)) (i32.const 0x3a22))
    (i32.store8 (i32.add (local.get $p) (i32.const 6)) (i32.const 34))
    (local.set $i (i32.const 7))
    (block $b (loop $l (br_if $b (i32.ge_u (local.get $i) (i32.const ${n + 7})))
      (i32.store8 (i32.add (local.get $p) (local.get $i)) (i32.const 120))
      (local.set $i (i32.add (local.get $i) (i32.const 1))) (br $l)))
    (i32.store16 (i32.add (local.get $p) (i32.const ${n + 7})) (i32.const 0x7d22))
    (call $out (local.get $p) (i32.const ${n + 9})))`))

/** A session whose model asks for `count` calls of a tool answering `n` bytes, then answers "done". */
const bigRound = async (api: Api, n: number, count: number): Promise<string> => {
  const upload = await request(api.server.baseUrl, "/v1/agentloops", { raw: await bigOutputTool(n), headers: { "content-type": "application/wasm" } })
  expect(upload.status, upload.text).toBe(201)
  const calls = Array.from({ length: count }, (_, i) => ({ name: "big", input: { i } }))
  return api.create({
    model: scripted([{ tool_calls: calls }, { text: "done" }]),
    tools: [{ name: "big", description: "answers a large output", input_schema: { type: "object" }, module: upload.body.id, timeout_ms: 60_000 }]
  })
}

const MiB = 1024 * 1024

describe("the official loop given a round of large tool outputs, each within its bound", () => {
  let server: ServerProcess
  let api: Api

  beforeAll(async () => {
    server = await startServer()
    api = new Api(server)
  }, 60_000)
  afterAll(async () => {
    await server?.dispose()
  }, TEST_MS)

  it("a round of 20 MiB of outputs (five of 4 MiB) reaches the model whole: the turn ends, the model was asked with every output, and the next turn works", async () => {
    const id = await bigRound(api, 4 * MiB - 2, 5)
    const turn = await api.send(id, "go")
    expect(turn.turn.status, JSON.stringify(turn.turn.failure)).toBe("ended")
    const transcript = await api.transcript(id)
    const requests = modelRequests(await api.events(id), transcript)
    expect(requests).toHaveLength(2)
    const results = requests[1]!.filter((m) => m.role === "tool").map((m) => String(m.content))
    expect(results.map((c) => c.length)).toEqual(Array(5).fill(4 * MiB))
    expect(results.every((c) => c === JSON.stringify("x".repeat(4 * MiB - 2)))).toBe(true)
    const next = await api.send(id, "again")
    expect(next.turn.status, JSON.stringify(next.turn.failure)).toBe("ended")
  }, TEST_MS)

  it("an output of BRAIN_MAX_WASM_IO_BYTES, which no request to Brain can carry beside the rest, reaches the model as a note naming the bound and the Event that holds it; the turn ends", async () => {
    const id = await bigRound(api, 16 * MiB - 9, 1)
    const turn = await api.send(id, "go")
    expect(turn.turn.status, JSON.stringify(turn.turn.failure)).toBe("ended")
    const transcript = await api.transcript(id)
    const told = modelRequests(await api.events(id), transcript)[1]!.filter((m) => m.role === "tool")
    expect(told.map((m) => toolResult(m))).toEqual([
      `[not carried: this output is ${16 * MiB - 7} bytes as JSON, more than a request to Brain holds beside the rest (BRAIN_MAX_WASM_IO_BYTES, ${16 * MiB} bytes); the call's tool_call_ended Event holds it]`
    ])
    const ended = (await api.events(id)).filter((e) => e.kind === "tool_call_ended")
    expect(ended[0].data.output).toBe("x".repeat(16 * MiB - 9))
  }, TEST_MS)

  it("a round the loop's memory cannot hold fails the turn agentloop_failed with a message naming BRAIN_MAX_WASM_MEMORY_BYTES, not a bare trap; the outcomes are recorded and the next turn works", async () => {
    const small = await startServer({ env: { BRAIN_MAX_WASM_MEMORY_BYTES: String(48 * MiB) } })
    try {
      const smallApi = new Api(small)
      const id = await bigRound(smallApi, 4 * MiB - 2, 5)
      const turn = await smallApi.send(id, "go")
      expect(turn.turn.status).toBe("failed")
      expect(turn.turn.failure.code).toBe("agentloop_failed")
      expect(turn.turn.failure.message).toMatch(/does not fit the guest's memory: .*BRAIN_MAX_WASM_MEMORY_BYTES/)
      expect(turn.turn.failure.message).not.toMatch(/unreachable/)
      expect((await smallApi.events(id)).filter((e) => e.kind === "tool_call_ended")).toHaveLength(5)
      const next = await smallApi.send(id, "again")
      expect(next.turn.status, JSON.stringify(next.turn.failure)).toBe("ended")
    } finally {
      await small.dispose()
    }
  }, TEST_MS)
})
