/**
 * Host tools through the Promise client against a real server process: `tool()` with Effect
 * Schema or Standard Schema validators, run in this process over the client's one host
 * connection. Each test names the invariant it checks: an Event committed before the outcome with
 * the call's origin, each kind of error reaching the model once, cancel reaching `ctx.signal`
 * with no second run, one host serving two sessions, a dropped connection giving `unknown` with no
 * replay and no late answer, `close` not waiting for a tool that ignores its signal, and the one
 * shared connection outliving a failed create and the last session.
 */
import { Schema } from "effect"
import { describe, expect, it } from "@effect/vitest"
import { Brain, BrainClosed, BrainError, type Event, type StandardSchemaV1, tool, ToolAborted, type ToolContext } from "../../src/sdk/index.js"
import type { ServerProcess } from "../support/server.js"
import { gate, history, HostFetch, serverAndClient } from "./support.js"

const Lookup = Schema.Struct({ q: Schema.Number })
const Answer = Schema.Struct({ answer: Schema.Number })

/** The scripted model calls `name` with `input` once, then answers "done". */
const callsOnce = (name: string, input: unknown) => ({
  model: { provider: "scripted" as const, replies: [{ tool_calls: [{ name, input }] }, { text: "done" }] }
})

const kindOf = (events: ReadonlyArray<Event>, kind: string) => events.filter((e) => e.kind === kind)

/** The tool messages the model was given, parsed. */
const toolMessages = async (brain: Brain, id: string) =>
  (await (await brain.sessions.get(id)).transcript()).messages.filter((m) => m.role === "tool").map((m) => JSON.parse(m.content as string))

/** A Standard Schema validator written by hand (no library): `{ n: integer }`. */
const standardInt: StandardSchemaV1<{ n: number }, { n: number }> = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate: (v) =>
      typeof v === "object" && v !== null && Number.isInteger((v as { n?: unknown }).n)
        ? { value: v as { n: number } }
        : { issues: [{ message: "n must be an integer", path: ["n"] }] }
  }
}

describe("host tools", () => {
  let server: ServerProcess
  let brain: Brain
  serverAndClient((started) => ({ server, brain } = started), { BRAIN_CANCEL_GRACE_MS: "5000" })

  it("a host tool runs once with its decoded input; its emitted Event is committed before tool_call_ended with origin.sequence the tool_call_started sequence", async () => {
    const runs: Array<ToolContext> = []
    let emitted = 0
    const lookup = tool({
      name: "lookup",
      description: "Looks a number up",
      input: Lookup,
      output: Answer,
      run: async ({ q }, ctx) => {
        runs.push(ctx)
        emitted = await ctx.emit("progress", { done: 0.5 })
        return { answer: q * 2 }
      }
    })
    const session = await brain.sessions.create({ ...callsOnce("lookup", { q: 21 }), tools: [lookup] })
    const outcome = await session.send("go")
    expect(outcome.turn).toMatchObject({ status: "ended", result: { text: "done" } })

    const events = await history(brain, session.id)
    const [started] = kindOf(events, "tool_call_started")
    const [ended] = kindOf(events, "tool_call_ended")
    const [progress] = kindOf(events, "progress")
    expect(runs.map((r) => r.sequence)).toEqual([started!.sequence])
    expect(progress).toMatchObject({ sequence: emitted, data: { done: 0.5 }, origin: { kind: "tool", sequence: started!.sequence } })
    expect(progress!.sequence).toBeLessThan(ended!.sequence)
    expect(ended!.data).toMatchObject({ outcome: "ok", output: { answer: 42 }, is_error: false })
    expect(await toolMessages(brain, session.id)).toEqual([{ answer: 42 }])
    // The create declared the tool with its JSON Schema, derived from the Effect Schema, in the host Environment.
    const created = kindOf(events, "session_creation_started")[0]!.data as { configuration: { tools: Array<unknown>; environments: Array<unknown> } }
    expect(created.configuration.tools).toEqual([
      expect.objectContaining({ name: "lookup", environment: "sdk-host", input_schema: expect.objectContaining({ type: "object", required: ["q"] }) })
    ])
    expect(created.configuration.environments).toEqual([expect.objectContaining({ name: "sdk-host", driver: "host", host: await brain.hostId() })])
  })

  it("a tool that throws, bad input and bad output each reach the model once as the tool's error, with code tool_error, invalid_input, invalid_output", async () => {
    let ran = { boom: 0, strict: 0, liar: 0 }
    const boom = tool({ name: "boom", input: Schema.Struct({}), run: () => {
      ran.boom++
      throw new Error("the disk is full")
    } })
    const strict = tool({ name: "strict", input: standardInt, inputSchema: { type: "object" }, run: ({ n }) => {
      ran.strict++
      return n
    } })
    const liar = tool({ name: "liar", input: Schema.Struct({}), output: Answer, run: () => {
      ran.liar++
      return { answer: "not a number" } as unknown as { answer: number }
    } })
    const cases = [
      { name: "boom", input: {}, code: "tool_error", message: "the disk is full" },
      { name: "strict", input: { n: 1.5 }, code: "invalid_input", message: "n: n must be an integer" },
      { name: "liar", input: {}, code: "invalid_output", message: "answer" }
    ]
    for (const c of cases) {
      const session = await brain.sessions.create({ ...callsOnce(c.name, c.input), tools: [boom, strict, liar] })
      expect((await session.send("go")).turn.status).toBe("ended")
      const events = await history(brain, session.id)
      const outcomes = events.filter((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed")
      expect(outcomes, c.name).toHaveLength(1)
      expect(outcomes[0]!.data).toMatchObject({ outcome: "error", is_error: true, output: { code: c.code } })
      expect((outcomes[0]!.data as { output: { message: string } }).output.message).toContain(c.message)
      const messages = await toolMessages(brain, session.id)
      expect(messages, c.name).toHaveLength(1)
      expect(messages[0]).toMatchObject({ outcome: "error", error: { code: c.code } })
    }
    expect(ran).toEqual({ boom: 1, strict: 0, liar: 1 })
  })

  it("an interrupt reaches ctx.signal as ToolAborted cancel, the stop is confirmed (cancelled), and the tool is not run again", async () => {
    const started = gate<ToolContext>()
    let runs = 0
    const wait = tool({
      name: "wait",
      input: Schema.Struct({}),
      run: (_, ctx) => {
        runs++
        started.open(ctx)
        return new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true }))
      }
    })
    const session = await brain.sessions.create({ ...callsOnce("wait", {}), tools: [wait] })
    const receipt = await session.submit("go")
    const ctx = await started.promise
    await session.interrupt()
    expect(ctx.signal.reason).toBeInstanceOf(ToolAborted)
    expect(ctx.signal.reason).toMatchObject({ reason: "cancel" })
    const events = await history(brain, session.id)
    expect(kindOf(events, "tool_call_failed").map((e) => e.data)).toEqual([
      expect.objectContaining({ sequence: ctx.sequence, outcome: "cancelled" })
    ])
    expect(kindOf(events, "turn_failed")[0]).toMatchObject({ data: { sequence: receipt.sequence } })
    expect(runs).toBe(1)
  })

  it("at its deadline ctx.signal aborts as ToolAborted deadline, and a tool that then stops is recorded timeout, confirmed (not ambiguous), run once", async () => {
    const started = gate<ToolContext>()
    let runs = 0
    const patient = tool({
      name: "patient",
      input: Schema.Struct({}),
      timeoutMs: 300,
      run: (_, ctx) => {
        runs++
        started.open(ctx)
        return new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true }))
      }
    })
    const session = await brain.sessions.create({ ...callsOnce("patient", {}), tools: [patient] })
    expect((await session.send("go")).turn.status).toBe("ended")
    const ctx = await started.promise
    expect(ctx.deadlineAtMs).toBeGreaterThan(0)
    expect(ctx.signal.reason).toBeInstanceOf(ToolAborted)
    expect(ctx.signal.reason).toMatchObject({ reason: "deadline" })
    const outcomes = (await history(brain, session.id)).filter((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed")
    expect(outcomes.map((e) => e.data)).toEqual([expect.objectContaining({ sequence: ctx.sequence, outcome: "timeout" })])
    expect((outcomes[0]!.data as { failure: { ambiguous?: boolean } }).failure.ambiguous ?? false).toBe(false)
    expect(runs).toBe(1)
  })

  it("Events emitted without awaiting them still land before tool_call_ended", async () => {
    const chatty = tool({
      name: "chatty",
      input: Schema.Struct({}),
      run: (_, ctx) => {
        for (let i = 0; i < 5; i++) void ctx.emit("step", { i })
        return "said"
      }
    })
    const session = await brain.sessions.create({ ...callsOnce("chatty", {}), tools: [chatty] })
    expect((await session.send("go")).turn.status).toBe("ended")
    const events = await history(brain, session.id)
    const steps = kindOf(events, "step")
    const [ended] = kindOf(events, "tool_call_ended")
    expect(steps).toHaveLength(5)
    for (const step of steps) expect(step.sequence).toBeLessThan(ended!.sequence)
    expect(ended!.data).toMatchObject({ outcome: "ok", output: "said" })
  })

  it("an emit once the call is over is refused as the server refuses an Event for a call not in flight (BrainError conflict 409), and nothing is sent", async () => {
    let kept: ToolContext | undefined
    const quick = tool({
      name: "quick",
      input: Schema.Struct({}),
      run: (_, ctx) => {
        kept = ctx
        return "done"
      }
    })
    const session = await brain.sessions.create({ ...callsOnce("quick", {}), tools: [quick] })
    expect((await session.send("go")).turn.status).toBe("ended")
    const late = await kept!.emit("late", {}).catch((e) => e)
    expect(late).toBeInstanceOf(BrainError)
    expect(late).toMatchObject({ code: "conflict", status: 409, retryable: false })
    expect(kindOf(await history(brain, session.id), "late")).toEqual([])
  })

  it("one host serves two sessions at once: both calls run concurrently and each answer reaches its own session", async () => {
    const both = gate()
    const arrived: Array<string> = []
    const whoami = tool({
      name: "whoami",
      input: Schema.Struct({}),
      run: async (_, ctx) => {
        arrived.push(ctx.sessionId)
        if (arrived.length === 2) both.open()
        await both.promise // neither answers before the other has started
        return { session: ctx.sessionId }
      }
    })
    const a = await brain.sessions.create({ ...callsOnce("whoami", {}), tools: [whoami] })
    const b = await brain.sessions.create({ ...callsOnce("whoami", {}), tools: [whoami] })
    const outcomes = await Promise.all([a.send("go"), b.send("go")])
    expect(outcomes.map((o) => o.turn.status)).toEqual(["ended", "ended"])
    expect(arrived.sort()).toEqual([a.id, b.id].sort())
    for (const s of [a, b]) {
      expect(kindOf(await history(brain, s.id), "tool_call_ended")[0]!.data).toMatchObject({ outcome: "ok", output: { session: s.id } })
    }
  })

  it("a command stream cut mid-call makes the call unknown; the client reconnects, never posts the old call's answer, and runs only new calls", async () => {
    const recording = new HostFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const started = gate<ToolContext>()
    const release = gate()
    const runs: Array<number> = []
    const slow = tool({
      name: "slow",
      input: Schema.Struct({}),
      run: async (_, ctx) => {
        runs.push(ctx.sequence)
        if (runs.length === 1) {
          started.open(ctx)
          await release.promise // ignores its signal, and answers after the drop
        }
        return "answered"
      }
    })
    try {
      const session = await client.sessions.create({
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "slow", input: {} }] }, { text: "after" }] },
        tools: [slow]
      })
      const first = session.send("go")
      const ctx = await started.promise
      recording.cut()
      expect((await first).turn.status).toBe("ended")
      expect(ctx.signal.reason).toMatchObject({ reason: "connection_lost" })
      const failed = kindOf(await history(client, session.id), "tool_call_failed")
      expect(failed.map((e) => e.data)).toEqual([
        expect.objectContaining({ sequence: ctx.sequence, outcome: "unknown", failure: expect.objectContaining({ ambiguous: true }) })
      ])
      release.open()
      await recording.streams(2)
      const second = await session.send("again")
      expect(second.turn.status).toBe("ended")
      const ended = kindOf(await history(client, session.id), "tool_call_ended")
      expect(ended.map((e) => e.data)).toEqual([expect.objectContaining({ outcome: "ok", output: "answered" })])
      expect(runs).toHaveLength(2)
      expect(runs[1]).toBeGreaterThan(runs[0]!)
      expect(recording.resultsFor(session.id, ctx.sequence), "the lost call was never answered").toEqual([])
    } finally {
      await client.close()
    }
  })

  it("close is idempotent, does not wait for a tool that ignores its signal, aborts that signal, and leaves the session usable from another client", async () => {
    const client = new Brain({ baseUrl: server.baseUrl })
    const started = gate<ToolContext>()
    const never = gate()
    const stubborn = tool({
      name: "stubborn",
      input: Schema.Struct({}),
      run: async (_, ctx) => {
        started.open(ctx)
        await never.promise // ignores its signal
        return "too late"
      }
    })
    const session = await client.sessions.create({
      model: { provider: "scripted", replies: [{ tool_calls: [{ name: "stubborn", input: {} }] }, { text: "done" }] },
      tools: [stubborn]
    })
    const receipt = await session.submit("go")
    const ctx = await started.promise
    await client.close()
    await client.close()
    expect(never.opened).toBe(false)
    expect(ctx.signal.reason).toMatchObject({ reason: "closed" })
    expect(await session.send("again").catch((e) => e)).toBeInstanceOf(BrainClosed)
    expect(await client.sessions.create({ model: { provider: "scripted" }, tools: [stubborn] }).catch((e) => e)).toBeInstanceOf(BrainClosed)

    // Another client reads the session: its call is unknown (the connection went with the client).
    const other = await brain.sessions.get(session.id)
    const events: Array<Event> = []
    for await (const e of other.events(receipt.sequence - 1)) {
      events.push(e)
      if (e.kind === "turn_ended" || e.kind === "turn_failed") break
    }
    expect(kindOf(events, "tool_call_failed").map((e) => e.data)).toEqual([expect.objectContaining({ sequence: ctx.sequence, outcome: "unknown" })])
    never.open()
  })

  it("close removes the client's host from the server: no new session may name it, and a later call of its tool by an older session is not sent", async () => {
    const client = new Brain({ baseUrl: server.baseUrl })
    const lookup = tool({ name: "lookup", input: Lookup, output: Answer, run: async ({ q }) => ({ answer: q }) })
    const session = await client.sessions.create({ ...callsOnce("lookup", { q: 1 }), tools: [lookup] })
    const first: Array<Event> = []
    for await (const e of (await brain.sessions.get(session.id)).events(0)) {
      first.push(e)
      break
    }
    const hostId = (first[0]!.data as any).configuration.environments[0].host as string
    expect(hostId).toMatch(/^host_/)
    await client.close()
    const naming = await fetch(`${server.baseUrl}/v1/sessions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: { provider: "scripted" }, environments: [{ name: "app", driver: "host", host: hostId }] })
    })
    expect(naming.status).toBe(400)
    const outcome = await (await brain.sessions.get(session.id)).send("go")
    expect(outcome.turn.status).toBe("ended")
    const failed = kindOf(await history(brain, session.id), "tool_call_failed")
    expect(failed.map((e) => e.data)).toEqual([expect.objectContaining({ outcome: "error", failure: expect.objectContaining({ details: expect.objectContaining({ reason: "host_unknown" }) }) })])
  })

  it("the client keeps one host connection across a failed create and after its last session ends; withToken derives a client with its own host", async () => {
    const recording = new HostFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const echo = tool({ name: "echo", input: Schema.Struct({ q: Schema.Number }), run: ({ q }) => ({ q }) })
    try {
      const refused = await client.sessions.create({ model: { provider: "scripted" }, tools: [echo], environments: [{ name: "x", driver: "host", host: "host_01hzzzzzzzzzzzzzzzzzzzzzzz" }] })
        .catch((e) => e)
      expect(refused).toBeInstanceOf(BrainError)
      expect(refused).toMatchObject({ status: 400, code: "invalid_request" })
      const host = await client.hostId()
      expect(host).toMatch(/^host_/)

      const session = await client.sessions.create({ ...callsOnce("echo", { q: 1 }), tools: [echo] })
      expect((await session.send("go")).turn.status).toBe("ended")
      await session.end()
      const next = await client.sessions.create({ ...callsOnce("echo", { q: 2 }), tools: [echo] })
      expect((await next.send("go")).turn.status).toBe("ended")
      expect(kindOf(await history(client, next.id), "tool_call_ended")[0]!.data).toMatchObject({ output: { q: 2 } })
      expect(await client.hostId()).toBe(host)
      expect(recording.streamsOpened).toBe(1)
      expect(recording.sent.filter((s) => s.method === "POST" && s.url.endsWith("/v1/hosts"))).toHaveLength(1)

      const derived = client.withToken("unused")
      const other = await derived.sessions.create({ ...callsOnce("echo", { q: 3 }), tools: [echo] })
      expect(await derived.hostId()).not.toBe(host)
      await derived.close()
      // The parent's host is untouched by the derived client's close.
      const again = await client.sessions.create({ ...callsOnce("echo", { q: 4 }), tools: [echo] })
      expect((await again.send("go")).turn.status).toBe("ended")
      expect(kindOf(await history(client, again.id), "tool_call_ended")[0]!.data).toMatchObject({ output: { q: 4 } })
      expect(other.id).toMatch(/^ses_/)
    } finally {
      await client.close()
    }
  })

  it("results of calls that finish together go in one POST; a batch the server refuses is posted again one by one, so each result meets its own answer", async () => {
    const recording = new HostFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: recording.fetch })
    const sized = tool({ name: "sized", input: Schema.Struct({ n: Schema.Number }), run: async ({ n }) => "x".repeat(n) })
    const posts = () => recording.sent.filter((s) => s.method === "POST" && s.url.endsWith("/results")).map((s) => JSON.parse(s.body!))
    const threeCalls = (ns: ReadonlyArray<number>) => ({
      model: { provider: "scripted" as const, replies: [{ tool_calls: ns.map((n) => ({ name: "sized", input: { n } })) }, { text: "done" }] },
      tools: [sized]
    })
    try {
      const together = await client.sessions.create(threeCalls([1, 2, 3]))
      expect((await together.send("go")).turn.status).toBe("ended")
      expect(posts().map((b) => b.results?.length ?? 1), "one POST for the three").toEqual([3])
      const ok = kindOf(await history(client, together.id), "tool_call_ended").map((e) => (e.data as any).output)
      expect(ok.sort()).toEqual(["x", "xx", "xxx"])

      // One output past BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES (4 MiB) makes the server refuse the batch (413), taking none.
      const big = 4 * 1024 * 1024 + 16
      const mixed = await client.sessions.create(threeCalls([1, big, 2]))
      const before = posts().length
      expect((await mixed.send("go")).turn.status).toBe("ended")
      const after = posts().slice(before)
      expect(after[0].results.map((r: any) => r.ok.length), "the batch first").toEqual([1, big, 2])
      expect(after.slice(1).filter((b) => b.results === undefined), "then each alone").toHaveLength(after.length - 1)
      const ended = kindOf(await history(client, mixed.id), "tool_call_ended").map((e) => e.data as any)
      expect(ended.filter((d) => d.outcome === "ok").map((d) => d.output).sort()).toEqual(["x", "xx"])
      expect(ended.filter((d) => d.outcome === "error").map((d) => d.output.code)).toEqual(["invalid_output"])
    } finally {
      await client.close()
    }
  })
})
