/**
 * A host tool's one result reaches Brain, or the application is told it did not, against a real
 * server process: a result whose posts fail (connections refused while the command stream stays
 * up) is posted again, the same result, until the server answers it; a result that could not be
 * delivered before its stream dropped is told to the tool's `onUnrecorded`; a tool that throws a
 * value that cannot be described is still answered `tool_error`; an output that is not JSON is
 * answered `invalid_output` saying so; and a client whose host the server no longer knows
 * registers a new one for its next session.
 */
import { Schema } from "effect"
import { describe, expect, it } from "@effect/vitest"
import { Brain, type Event, type Fetch, MAX_ATTEMPTS, tool, type ToolResultUnrecorded } from "../../src/sdk/index.js"
import { sharedServer } from "../support/server.js"
import { freePort, gate, history, HostFetch } from "./support.js"

const kindOf = (events: ReadonlyArray<Event>, kind: string) => events.filter((e) => e.kind === kind)

/** The scripted model calls `name` with `{}` once, then answers "done". */
const callsOnce = (name: string) => ({
  model: { provider: "scripted" as const, replies: [{ tool_calls: [{ name, input: {} }] }, { text: "done" }] }
})

const isResultPost = (url: string, init: RequestInit) => init.method === "POST" && url.endsWith("/results")

/** A refused connection: a port nothing listens on. */
const refused = async () => globalThis.fetch(`http://127.0.0.1:${await freePort()}/`, { method: "POST" })

/** The one outcome Event of the session's one call. */
const outcomeOf = async (brain: Brain, id: string) => {
  const events = await history(brain, id)
  const outcomes = events.filter((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed")
  expect(outcomes).toHaveLength(1)
  return { started: kindOf(events, "tool_call_started")[0]!, outcome: outcomes[0]! }
}

describe("a host tool's result whose posts fail", () => {
  const server = sharedServer()

  it("a finished tool's result whose posts are refused at the connection is posted again, the same result, until Brain takes it: the call ends ok and the tool ran once", async () => {
    const recording = new HostFetch()
    // The first six posts of a result meet a refused connection (more than the client's own
    // retries of one request); the command stream is left alone.
    let refuse = 6
    const fetch: Fetch = async (url, init) => {
      if (isResultPost(url, init) && refuse > 0) {
        refuse--
        recording.sent.push({ url, method: "POST", headers: {}, body: init.body === undefined ? undefined : new TextDecoder().decode(init.body as Uint8Array) })
        return refused()
      }
      return recording.fetch(url, init)
    }
    const client = new Brain({ baseUrl: server().baseUrl, fetch })
    let runs = 0
    const slow = tool({
      name: "slow",
      input: Schema.Struct({}),
      // Well past the posts' backoff: a result dropped would end the call timeout instead.
      timeoutMs: 30_000,
      run: () => {
        runs++
        return { done: 1 }
      }
    })
    try {
      const session = await client.sessions.create({ ...callsOnce("slow"), tools: [slow] })
      expect((await session.send("go")).turn.status).toBe("ended")
      const { started, outcome } = await outcomeOf(client, session.id)
      expect(outcome.kind).toBe("tool_call_ended")
      expect(outcome.data).toMatchObject({ outcome: "ok", output: { done: 1 } })
      expect(runs).toBe(1)
      const posted = recording.resultsFor(session.id, started.sequence)
      expect(posted.length).toBeGreaterThan(6)
      for (const p of posted) expect(p).toEqual({ session_id: session.id, sequence: started.sequence, ok: { done: 1 } })
    } finally {
      await client.close()
    }
  })

  it("a result that could not be delivered before its command stream dropped is told to the tool's onUnrecorded as undelivered, and the tool is not run again", async () => {
    const recording = new HostFetch()
    const attempts = { count: 0, seen: gate() }
    const fetch: Fetch = async (url, init) => {
      if (isResultPost(url, init)) {
        if (++attempts.count >= 6) attempts.seen.open()
        return refused()
      }
      return recording.fetch(url, init)
    }
    const client = new Brain({ baseUrl: server().baseUrl, fetch })
    const told = gate<ToolResultUnrecorded>()
    let runs = 0
    const slow = tool({
      name: "slow",
      input: Schema.Struct({}),
      timeoutMs: 600_000,
      run: () => {
        runs++
        return { done: 1 }
      },
      onUnrecorded: (e) => told.open(e)
    })
    try {
      const session = await client.sessions.create({ ...callsOnce("slow"), tools: [slow] })
      const sent = session.send("go")
      // More attempts than one request's own retries: the result is still being posted.
      await attempts.seen.promise
      recording.cut()
      const error = await told.promise
      expect((await sent).turn.status).toBe("ended")
      const { started, outcome } = await outcomeOf(client, session.id)
      expect(outcome.data).toMatchObject({ outcome: "unknown" })
      expect(error).toMatchObject({ _tag: "ToolResultUnrecorded", reason: "undelivered", sessionId: session.id, sequence: started.sequence })
      expect(error.refusal.code).toBe("network_error")
      expect(runs).toBe(1)
    } finally {
      await client.close()
    }
  })
})

describe("a host tool's result whose answer is lost after Brain took it", () => {
  const server = sharedServer()

  it("a result whose first post's answer is lost after Brain recorded it is posted again and answered as taken: onUnrecorded is never told, the call ends ok once, and the tool ran once", async () => {
    const recording = new HostFetch()
    /** The answers to the result's posts, in order, as the SDK got them (the lost one as 0). */
    const answers: Array<number> = []
    const answeredAgain = gate()
    const fetch: Fetch = async (url, init) => {
      if (!isResultPost(url, init)) return recording.fetch(url, init)
      const response = await recording.fetch(url, init)
      // Read here, so that the SDK is handed an answer it reads at once.
      const text = await response.text()
      if (answers.length === 0) {
        answers.push(0)
        // Brain took it and answered; the connection resets before the answer arrives.
        throw new TypeError("fetch failed (the test lost the answer after the server sent it)")
      }
      answers.push(response.status)
      answeredAgain.open()
      return new Response(text.length === 0 ? null : text, { status: response.status, headers: response.headers })
    }
    const client = new Brain({ baseUrl: server().baseUrl, fetch })
    const told: Array<ToolResultUnrecorded> = []
    let runs = 0
    const once = tool({
      name: "once",
      input: Schema.Struct({}),
      timeoutMs: 600_000,
      run: () => {
        runs++
        return { done: 1 }
      },
      onUnrecorded: (e) => told.push(e)
    })
    try {
      const session = await client.sessions.create({ ...callsOnce("once"), tools: [once] })
      expect((await session.send("go")).turn.status).toBe("ended")
      await answeredAgain.promise
      // The SDK acts on that answer before the next turns of the event loop.
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
      expect(told).toEqual([])
      expect(answers).toEqual([0, 204])
      const { started, outcome } = await outcomeOf(client, session.id)
      expect(outcome.kind).toBe("tool_call_ended")
      expect(outcome.data).toMatchObject({ outcome: "ok", output: { done: 1 } })
      expect(recording.resultsFor(session.id, started.sequence)).toEqual([
        { session_id: session.id, sequence: started.sequence, ok: { done: 1 } },
        { session_id: session.id, sequence: started.sequence, ok: { done: 1 } }
      ])
      expect(runs).toBe(1)
    } finally {
      await client.close()
    }
    // Nothing was left posting when the client closed either.
    expect(told).toEqual([])
  })
})

describe("a host tool's result whose answer is lost as its command stream drops", () => {
  const server = sharedServer()

  it("a result whose post's answer is lost as its command stream drops, its client's own retries refused, is posted once more and answered as taken: onUnrecorded is never told, and the tool ran once", async () => {
    const recording = new HostFetch()
    /** The answers to the result's posts, in order, as the SDK got them (a lost or refused one as 0). */
    const answers: Array<number> = []
    const answeredAgain = gate()
    const fetch: Fetch = async (url, init) => {
      if (!isResultPost(url, init)) return recording.fetch(url, init)
      const attempt = answers.push(0)
      if (attempt === 1) {
        // Brain takes it; the connection resets before its answer arrives, and so does the stream.
        await (await recording.fetch(url, init)).arrayBuffer()
        recording.cut()
        throw new TypeError("fetch failed (the test lost the answer after the server sent it)")
      }
      if (attempt <= MAX_ATTEMPTS) {
        // The client's own retries of that post are refused at the connection, the first once the
        // host has reopened its stream: the run is lost by then (its stream dropped before).
        if (attempt === 2) await recording.streams(2)
        return refused()
      }
      const response = await recording.fetch(url, init)
      const text = await response.text()
      answers[attempt - 1] = response.status
      answeredAgain.open()
      return new Response(text.length === 0 ? null : text, { status: response.status, headers: response.headers })
    }
    const client = new Brain({ baseUrl: server().baseUrl, fetch })
    const told: Array<ToolResultUnrecorded> = []
    const toldOnce = gate()
    let runs = 0
    const once = tool({
      name: "once",
      input: Schema.Struct({}),
      timeoutMs: 600_000,
      run: () => {
        runs++
        return { done: 1 }
      },
      onUnrecorded: (e) => {
        told.push(e)
        toldOnce.open()
      }
    })
    try {
      const session = await client.sessions.create({ ...callsOnce("once"), tools: [once] })
      expect((await session.send("go")).turn.status).toBe("ended")
      // Without the post once more, the tool is told undelivered instead.
      await Promise.race([answeredAgain.promise, toldOnce.promise])
      // The SDK acts on that answer before the next turns of the event loop.
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
      expect(told).toEqual([])
      expect(answers).toEqual([...new Array<number>(MAX_ATTEMPTS).fill(0), 204])
      const { outcome } = await outcomeOf(client, session.id)
      expect(outcome.kind).toBe("tool_call_ended")
      expect(outcome.data).toMatchObject({ outcome: "ok", output: { done: 1 } })
      expect(runs).toBe(1)
    } finally {
      await client.close()
    }
    expect(told).toEqual([])
  })
})

describe("a tool that throws a value that cannot be described", () => {
  const server = sharedServer()

  it("a throw of Object.create(null), of an Error whose message getter throws, or of a Proxy that traps reads is answered tool_error once, and the tool ran once", async () => {
    const brokenMessage = new Error("x")
    Object.defineProperty(brokenMessage, "message", { get: () => { throw new Error("no message") } })
    const trap = new Proxy({}, { get: () => { throw new Error("trapped") }, getPrototypeOf: () => { throw new Error("trapped") } })
    const thrown: Record<string, unknown> = { nullProto: Object.create(null), brokenMessage, trap }
    const runs: Array<string> = []
    const tools = Object.keys(thrown).map((name) =>
      tool({
        name,
        input: Schema.Struct({}),
        // A call left unanswered would end `timeout` here instead of `error`.
        timeoutMs: 20_000,
        run: () => {
          runs.push(name)
          throw thrown[name]
        }
      })
    )
    const recording = new HostFetch()
    const client = new Brain({ baseUrl: server().baseUrl, fetch: recording.fetch })
    try {
      for (const name of Object.keys(thrown)) {
        const session = await client.sessions.create({ ...callsOnce(name), tools })
        expect((await session.send("go")).turn.status).toBe("ended")
        const { started, outcome } = await outcomeOf(client, session.id)
        expect(outcome.data, name).toMatchObject({ outcome: "error", is_error: true, output: { code: "tool_error" } })
        expect(typeof (outcome.data as { output: { message: unknown } }).output.message).toBe("string")
        expect(recording.resultsFor(session.id, started.sequence), name).toHaveLength(1)
      }
      expect(runs).toEqual(Object.keys(thrown))
    } finally {
      await client.close()
    }
  })
})

describe("an output that is not JSON", () => {
  const server = sharedServer()

  it("a tool with no output schema returning a bigint or an object that contains itself is answered invalid_output saying it cannot be encoded as JSON and why, with issues, posted once", async () => {
    const cycle: Record<string, unknown> = { a: 1 }
    cycle.self = cycle
    const outputs: Record<string, unknown> = { big: { n: 10n }, cycle }
    const tools = Object.keys(outputs).map((name) => tool({ name, input: Schema.Struct({}), run: () => outputs[name] }))
    const recording = new HostFetch()
    const client = new Brain({ baseUrl: server().baseUrl, fetch: recording.fetch })
    try {
      for (const [name, path, why] of [["big", ["n"], "bigint"], ["cycle", ["self"], "contains itself"]] as const) {
        const session = await client.sessions.create({ ...callsOnce(name), tools })
        expect((await session.send("go")).turn.status).toBe("ended")
        const { started, outcome } = await outcomeOf(client, session.id)
        const output = (outcome.data as { output: { code: string; message: string; issues?: Array<{ path: Array<unknown>; message: string }> } }).output
        expect(output.code, name).toBe("invalid_output")
        expect(output.message).toContain("cannot be encoded as JSON")
        expect(output.message).toContain(why)
        expect(output.message).not.toContain("server refused")
        expect(output.issues).toEqual([{ path, message: expect.stringContaining(why) }])
        expect(recording.resultsFor(session.id, started.sequence), name).toHaveLength(1)
      }
    } finally {
      await client.close()
    }
  })
})

describe("a client whose host the server no longer knows", () => {
  const server = sharedServer()

  it("registers a new host when its command stream is refused as unknown (the host removed), and its next session's host tools run there", async () => {
    const recording = new HostFetch()
    let registered: { host_id: string; token: string } | undefined
    // Opens once the client tries to reopen its command stream after the removal.
    let removing = false
    const reopening = gate()
    const fetch: Fetch = async (url, init) => {
      if (removing && url.endsWith("/commands")) reopening.open()
      const answer = await recording.fetch(url, init)
      if (init.method === "POST" && new URL(url).pathname === "/v1/hosts" && answer.ok) registered = (await answer.clone().json()) as { host_id: string; token: string }
      return answer
    }
    const client = new Brain({ baseUrl: server().baseUrl, fetch })
    let runs = 0
    const lookup = tool({
      name: "lookup",
      input: Schema.Struct({}),
      run: () => {
        runs++
        return { answer: runs }
      }
    })
    try {
      const first = await client.sessions.create({ ...callsOnce("lookup"), tools: [lookup] })
      expect((await first.send("go")).turn.status).toBe("ended")
      const old = registered!
      expect(await client.hostId()).toBe(old.host_id)
      // Removed behind the client's back (as an expiry or an operator would): its stream ends, and
      // the server answers every request of that host 401 from then on.
      removing = true
      const removed = await globalThis.fetch(`${server().baseUrl}/v1/hosts/${old.host_id}`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${old.token}` }
      })
      expect(removed.status).toBe(204)
      // The client has seen its stream end (a create sent before that would name the removed host).
      await reopening.promise

      const second = await client.sessions.create({ ...callsOnce("lookup"), tools: [lookup] })
      expect((await second.send("go")).turn.status).toBe("ended")
      const { outcome } = await outcomeOf(client, second.id)
      expect(outcome.data).toMatchObject({ outcome: "ok", output: { answer: 2 } })
      expect(registered!.host_id).not.toBe(old.host_id)
      expect(await client.hostId()).toBe(registered!.host_id)
      expect(runs).toBe(2)
    } finally {
      await client.close()
    }
  })
})
