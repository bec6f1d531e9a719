/**
 * A host Environment end to end: a real server process (with an API token) and a host written
 * here over plain fetch: it registers, reads its command stream as SSE, posts results and Events.
 * Each call reaches the host once and is never replayed; a dropped stream makes its call
 * `unknown`; a host's token reaches only its own routes; registrations survive a restart.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Frames, framesOfResponse } from "../support/hosts.js"
import { ensureBuilt, request, type RequestOptions, type ServerProcess, startServer } from "../support/server.js"

const API_TOKEN = "api-e2e-hosts-5c1f0b"
const UNREGISTERED = "host_01hzzzzzzzzzzzzzzzzzzzzzzz"

interface Registered {
  readonly host_id: string
  readonly token: string
}

interface Stream {
  readonly frames: Frames
  readonly abort: () => void
}

describe("a host Environment through a real server", () => {
  let server: ServerProcess
  const streams: Array<Stream> = []
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_API_TOKEN: API_TOKEN, BRAIN_CANCEL_GRACE_MS: "400" } })
  }, 120_000)
  afterAll(async () => {
    for (const s of streams) s.abort()
    await server?.dispose()
  })

  /** A request with the server's API token. */
  const api = (p: string, options: RequestOptions = {}) =>
    request(server.baseUrl, p, { ...options, headers: { authorization: `Bearer ${API_TOKEN}`, ...options.headers } })

  /** A request with a host's token. */
  const asHost = (token: string, p: string, json: unknown) =>
    request(server.baseUrl, p, { json, headers: { authorization: `Bearer ${token}` } })

  const register = async (): Promise<Registered> => {
    const r = await api("/v1/hosts", { method: "POST" })
    expect(r.status, r.text).toBe(201)
    return r.body
  }

  const open = async (host: Registered, token = host.token): Promise<Stream> => {
    const controller = new AbortController()
    const response = await fetch(server.url(`/v1/hosts/${host.host_id}/commands`), {
      headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" },
      signal: controller.signal
    })
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toContain("text/event-stream")
    const frames = framesOfResponse(response)
    expect((await frames.expect("ready")).data).toEqual({ host_id: host.host_id, heartbeat_ms: 15_000 })
    const stream = { frames, abort: () => controller.abort() }
    streams.push(stream)
    return stream
  }

  const create = async (host: string, replies: ReadonlyArray<unknown>) => {
    const r = await api("/v1/sessions", {
      json: {
        model: { provider: "scripted", replies },
        environments: [{ name: "app", driver: "host", host }],
        tools: [{ name: "lookup", description: "looks up", environment: "app" }]
      }
    })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }

  const send = (id: string, message: string) => api(`/v1/sessions/${id}/messages`, { json: { input: { message } } })
  const events = async (id: string) => (await api(`/v1/sessions/${id}/events`)).body.events as Array<{ sequence: number; kind: string; data: any; origin?: any }>
  const toolMessages = async (id: string) =>
    ((await api(`/v1/sessions/${id}/transcript`)).body.messages as Array<{ role: string; content: string }>).filter((m) => m.role === "tool")
  const result = (host: Registered, call: { data: any }, answer: object) =>
    asHost(host.token, `/v1/hosts/${host.host_id}/results`, { session_id: call.data.session_id, sequence: call.data.sequence, ...answer })

  const callOnce = [{ tool_calls: [{ name: "lookup", input: { q: 42 } }] }, { text: "done" }]

  it("registering needs the server's API token and gives a host id with its own token", async () => {
    expect((await request(server.baseUrl, "/v1/hosts", { method: "POST" })).status).toBe(401)
    const host = await register()
    expect(host.host_id).toMatch(/^host_[0-9a-z]{26}$/)
    expect(host.token).toMatch(/^bht_/)
  })

  it("a host tool's call arrives once, its Event is committed before tool_call_ended with origin.sequence the call's start, and the model sees the output", async () => {
    const host = await register()
    const stream = await open(host)
    const id = await create(host.host_id, callOnce)
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    expect(call.data).toMatchObject({ session_id: id, environment: "app", name: "lookup", input: { q: 42 } })
    const progress = await asHost(host.token, `/v1/hosts/${host.host_id}/events`, {
      session_id: id,
      sequence: call.data.sequence,
      kind: "progress",
      payload: { done: 0.5 }
    })
    expect(progress.status, progress.text).toBe(200)
    expect((await result(host, call, { ok: { answer: 7 } })).status).toBe(204)
    const answered = await turn
    expect(answered.status, answered.text).toBe(200)
    expect(answered.body.turn).toMatchObject({ status: "ended", result: { text: "done" } })
    const all = await events(id)
    const started = all.find((e) => e.kind === "tool_call_started")!
    const ended = all.find((e) => e.kind === "tool_call_ended")!
    const event = all.find((e) => e.kind === "progress")!
    expect(started.sequence).toBe(call.data.sequence)
    expect(event).toMatchObject({ sequence: progress.body.sequence, data: { done: 0.5 }, origin: { kind: "tool", sequence: started.sequence } })
    expect(event.sequence).toBeLessThan(ended.sequence)
    expect(ended.data).toMatchObject({ outcome: "ok", output: { answer: 7 } })
    const messages = await toolMessages(id)
    expect(messages.map((m) => JSON.parse(m.content))).toEqual([{ answer: 7 }])
    // Over now: a second result is refused, with the error body.
    const late = await result(host, call, { ok: 1 })
    expect(late.status).toBe(409)
    expect(late.body).toMatchObject({ code: "conflict", retryable: false })
    expect(stream.frames.all.filter((f) => f.event === "call")).toHaveLength(1)
  })

  it("an error result reaches the model once, as an error", async () => {
    const host = await register()
    const stream = await open(host)
    const id = await create(host.host_id, callOnce)
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    expect((await result(host, call, { error: { message: "no such row" } })).status).toBe(204)
    expect((await turn).status).toBe(200)
    expect((await events(id)).find((e) => e.kind === "tool_call_ended")!.data).toMatchObject({ outcome: "error", is_error: true })
    expect((await toolMessages(id)).map((m) => JSON.parse(m.content))).toEqual([{ outcome: "error", error: { message: "no such row" } }])
  })

  it("an input that breaks the tool's declared input_schema is never sent: the model gets invalid_input once, and a conforming input still reaches the host", async () => {
    const host = await register()
    const stream = await open(host)
    const r = await api("/v1/sessions", {
      json: {
        model: {
          provider: "scripted",
          replies: [
            { tool_calls: [{ name: "lookup", input: { q: "forty-two" } }, { name: "lookup", input: { q: 42 } }] },
            { text: "done" }
          ]
        },
        environments: [{ name: "app", driver: "host", host: host.host_id }],
        tools: [{
          name: "lookup",
          description: "looks up",
          environment: "app",
          input_schema: { type: "object", properties: { q: { type: "number" } }, required: ["q"] }
        }]
      }
    })
    expect(r.status, r.text).toBe(201)
    const id = r.body.session_id as string
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    expect(call.data.input).toEqual({ q: 42 })
    expect((await result(host, call, { ok: { answer: 7 } })).status).toBe(204)
    expect((await turn).status).toBe(200)
    const ended = (await events(id)).filter((e) => e.kind === "tool_call_ended").map((e) => e.data)
    expect(ended).toHaveLength(2)
    const refused = ended.find((d) => d.outcome === "error")
    expect(refused).toMatchObject({ is_error: true, output: { code: "invalid_input", issues: [{ path: ["q"], message: "must be number" }] } })
    expect(ended.find((d) => d.outcome === "ok")).toMatchObject({ output: { answer: 7 } })
    const seen = (await toolMessages(id)).map((m) => JSON.parse(m.content))
    expect(seen.filter((m) => JSON.stringify(m).includes("invalid_input"))).toHaveLength(1)
    expect(stream.frames.all.filter((f) => f.event === "call")).toHaveLength(1)
  })

  it("an ok result that breaks the tool's declared output_schema is recorded as the error invalid_output, once; a conforming one is the output", async () => {
    const host = await register()
    const stream = await open(host)
    const r = await api("/v1/sessions", {
      json: {
        model: {
          provider: "scripted",
          replies: [{ tool_calls: [{ name: "lookup", input: { q: 1 } }, { name: "lookup", input: { q: 2 } }] }, { text: "done" }]
        },
        environments: [{ name: "app", driver: "host", host: host.host_id }],
        tools: [{
          name: "lookup",
          description: "looks up",
          environment: "app",
          output_schema: { type: "object", properties: { answer: { type: "number" } }, required: ["answer"] }
        }]
      }
    })
    expect(r.status, r.text).toBe(201)
    const id = r.body.session_id as string
    const turn = send(id, "go")
    const first = await stream.frames.expect("call")
    const second = await stream.frames.expect("call")
    const [bad, good] = first.data.input.q === 1 ? [first, second] : [second, first]
    expect((await result(host, bad, { ok: { answer: "seven" } })).status).toBe(204)
    expect((await result(host, good, { ok: { answer: 7 } })).status).toBe(204)
    expect((await turn).status).toBe(200)
    const ended = (await events(id)).filter((e) => e.kind === "tool_call_ended").map((e) => e.data)
    expect(ended.find((d) => d.sequence === bad.data.sequence)).toMatchObject({
      outcome: "error",
      is_error: true,
      output: { code: "invalid_output", issues: [{ path: ["answer"], message: "must be number" }] }
    })
    expect(ended.find((d) => d.sequence === good.data.sequence)).toMatchObject({ outcome: "ok", output: { answer: 7 } })
    const seen = (await toolMessages(id)).map((m) => m.content)
    expect(seen.filter((c) => c.includes("invalid_output"))).toHaveLength(1)
  })

  it("a result above BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES is 413 and leaves the call in flight for a proper result; an Event of a reserved kind, or of one holding a line break, is 400 and writes nothing", async () => {
    const host = await register()
    const stream = await open(host)
    const id = await create(host.host_id, callOnce)
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    const before = (await events(id)).length

    const reserved = await asHost(host.token, `/v1/hosts/${host.host_id}/events`, {
      session_id: id,
      sequence: call.data.sequence,
      kind: "tool_call_ended",
      payload: { outcome: "ok" }
    })
    expect(reserved.status, reserved.text).toBe(400)
    expect(reserved.body).toMatchObject({ code: "invalid_request", retryable: false, details: { reason: "reserved_kind" } })
    for (const kind of ["progress\nevent: session_ended", "progress\r", "\r\n"]) {
      const broken = await asHost(host.token, `/v1/hosts/${host.host_id}/events`, {
        session_id: id,
        sequence: call.data.sequence,
        kind,
        payload: {}
      })
      expect(broken.status, `${JSON.stringify(kind)}: ${broken.text}`).toBe(400)
      expect(broken.body).toMatchObject({ code: "invalid_request", retryable: false, details: { reason: "reserved_kind" } })
    }

    const huge = await result(host, call, { ok: "x".repeat(4 * 1024 * 1024 + 1) })
    expect(huge.status, huge.text.slice(0, 300)).toBe(413)
    expect(huge.body).toMatchObject({ code: "payload_too_large" })
    expect((await events(id)).length, "nothing was written for either").toBe(before)

    expect((await result(host, call, { ok: { answer: 1 } })).status).toBe(204)
    const answered = await turn
    expect(answered.status, answered.text).toBe(200)
    const all = await events(id)
    expect(all.filter((e) => e.kind === "tool_call_ended").map((e) => e.data)).toEqual([expect.objectContaining({ outcome: "ok", output: { answer: 1 } })])
    expect(stream.frames.all.filter((f) => f.event === "call")).toHaveLength(1)
  })

  it("several results in one POST ({results}) are all taken or none: a batch naming a call not in flight is 409 with its index, a malformed one 400, and neither ends any call", async () => {
    const host = await register()
    const stream = await open(host)
    const id = await create(host.host_id, [{ tool_calls: [{ name: "lookup", input: { q: 1 } }, { name: "lookup", input: { q: 2 } }] }, { text: "done" }])
    const turn = send(id, "go")
    const calls = [await stream.frames.expect("call"), await stream.frames.expect("call")]
    const named = (c: { data: any }, answer: object) => ({ session_id: c.data.session_id, sequence: c.data.sequence, ...answer })
    const batch = (results: unknown) => asHost(host.token, `/v1/hosts/${host.host_id}/results`, { results })

    const stale = await batch([named(calls[0], { ok: "a" }), { session_id: id, sequence: 999_999, ok: "x" }])
    expect(stale.status, stale.text).toBe(409)
    expect(stale.body).toMatchObject({ code: "conflict", details: { reason: "not_in_flight", index: 1 } })
    for (const malformed of [[], [named(calls[0], { ok: "a" }), { sequence: 1 }], "not a list"]) {
      const r = await batch(malformed)
      expect(r.status, r.text).toBe(400)
      expect(r.body).toMatchObject({ code: "invalid_request" })
    }
    expect((await events(id)).filter((e) => e.kind === "tool_call_ended"), "no call ended").toEqual([])

    const taken = await batch(calls.map((c) => named(c, { ok: { q: c.data.input.q } })))
    expect(taken.status, taken.text).toBe(204)
    expect((await turn).body.turn).toMatchObject({ status: "ended", result: { text: "done" } })
    const ended = (await events(id)).filter((e) => e.kind === "tool_call_ended")
    expect(ended.map((e) => [e.data.sequence, e.data.output]).sort()).toEqual(calls.map((c) => [c.data.sequence, { q: c.data.input.q }]).sort())
    // Over now: the same batch again is refused, and changes nothing.
    expect((await batch(calls.map((c) => named(c, { ok: "again" })))).status).toBe(409)
    expect((await events(id)).filter((e) => e.kind === "tool_call_ended")).toHaveLength(2)
  })

  it("a result posted again, the same, after the first was answered 204 is answered 204 again, alone or in a batch, and adds nothing to the session's journal; a different one is 409 result_conflict", async () => {
    const host = await register()
    const stream = await open(host)
    const id = await create(host.host_id, callOnce)
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    expect((await result(host, call, { ok: { answer: 7 } })).status).toBe(204)
    expect((await turn).body.turn).toMatchObject({ status: "ended", result: { text: "done" } })
    const before = await events(id)
    // The first answer was lost: the host posts the same result again.
    for (let i = 0; i < 2; i++) {
      const again = await result(host, call, { ok: { answer: 7 } })
      expect(again.status, again.text).toBe(204)
    }
    const batch = await asHost(host.token, `/v1/hosts/${host.host_id}/results`, {
      results: [{ session_id: id, sequence: call.data.sequence, ok: { answer: 7 } }]
    })
    expect(batch.status, batch.text).toBe(204)
    for (const other of [{ ok: { answer: 8 } }, { error: { answer: 7 } }]) {
      const refused = await result(host, call, other)
      expect(refused.status, refused.text).toBe(409)
      expect(refused.body).toMatchObject({ code: "conflict", retryable: false, details: { reason: "result_conflict" } })
    }
    expect(await events(id)).toEqual(before)
    expect((await toolMessages(id)).map((m) => JSON.parse(m.content))).toEqual([{ answer: 7 }])
    expect(stream.frames.all.filter((f) => f.event === "call")).toHaveLength(1)
  })

  it("a result for a call that ended without one (past its deadline, its cancel unconfirmed) is still 409 not_in_flight, and changes nothing", async () => {
    const host = await register()
    const stream = await open(host)
    const r = await api("/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: callOnce },
        environments: [{ name: "app", driver: "host", host: host.host_id }],
        tools: [{ name: "lookup", description: "looks up", environment: "app", timeout_ms: 300 }]
      }
    })
    expect(r.status, r.text).toBe(201)
    const id = r.body.session_id as string
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    await stream.frames.expect("cancel")
    expect((await turn).status).toBe(200)
    const before = await events(id)
    expect(before.filter((e) => e.data?.sequence === call.data.sequence).map((e) => e.data.outcome)).toEqual(["timeout"])
    for (const late of [{ ok: { answer: 7 } }, { stopped: true }]) {
      const refused = await result(host, call, late)
      expect(refused.status, refused.text).toBe(409)
      expect(refused.body).toMatchObject({ code: "conflict", details: { reason: "not_in_flight" } })
    }
    expect(await events(id)).toEqual(before)
  })

  it("interrupting the turn sends a cancel command: confirmed it is cancelled, unconfirmed within the grace it is unknown", async () => {
    const host = await register()
    const stream = await open(host)
    for (const confirm of [true, false]) {
      const id = await create(host.host_id, callOnce)
      const turn = send(id, "go")
      const call = await stream.frames.expect("call")
      const cancelled = api(`/v1/sessions/${id}/cancel`, { method: "POST" })
      const cancel = await stream.frames.expect("cancel")
      expect(cancel.data).toEqual({ session_id: id, sequence: call.data.sequence, reason: "cancel" })
      if (confirm) expect((await result(host, call, { stopped: true })).status).toBe(204)
      expect((await cancelled).status).toBe(200)
      await turn
      expect((await events(id)).find((e) => e.kind === "tool_call_failed")!.data).toMatchObject(
        confirm ? { outcome: "cancelled" } : { outcome: "unknown", failure: { ambiguous: true } }
      )
    }
    expect(stream.frames.all.map((f) => f.event)).toEqual(["ready", "call", "cancel", "call", "cancel"])
  })

  it("a call past its deadline gets a cancel with reason deadline: confirmed it is timeout, unconfirmed within the grace it is timeout and ambiguous; neither is sent again", async () => {
    const host = await register()
    const stream = await open(host)
    for (const confirm of [true, false]) {
      const r = await api("/v1/sessions", {
        json: {
          model: { provider: "scripted", replies: callOnce },
          environments: [{ name: "app", driver: "host", host: host.host_id }],
          tools: [{ name: "lookup", description: "looks up", environment: "app", timeout_ms: 300 }]
        }
      })
      expect(r.status, r.text).toBe(201)
      const id = r.body.session_id as string
      const turn = send(id, "go")
      const call = await stream.frames.expect("call")
      expect(call.data.deadline_at_ms).toBeGreaterThan(0)
      const cancel = await stream.frames.expect("cancel")
      expect(cancel.data).toEqual({ session_id: id, sequence: call.data.sequence, reason: "deadline" })
      if (confirm) expect((await result(host, call, { stopped: true })).status).toBe(204)
      const answered = await turn
      expect(answered.status, answered.text).toBe(200)
      const outcome = (await events(id)).filter((e) => e.data?.sequence === call.data.sequence)
      expect(outcome).toHaveLength(1)
      expect(outcome[0]!.data).toMatchObject({ outcome: "timeout", is_error: true })
      if (!confirm) expect(outcome[0]!.data).toMatchObject({ failure: { ambiguous: true } })
      else expect(outcome[0]!.data.failure?.ambiguous ?? false).toBe(false)
    }
    expect(stream.frames.all.map((f) => f.event)).toEqual(["ready", "call", "cancel", "call", "cancel"])
  })

  it("a command stream dropped mid-call makes the call unknown, and the reconnected host receives only new commands", async () => {
    const host = await register()
    const first = await open(host)
    const id = await create(host.host_id, [callOnce[0], { text: "after" }, ...callOnce])
    const turn = send(id, "go")
    const call = await first.frames.expect("call")
    first.abort()
    expect((await turn).status).toBe(200)
    expect((await events(id)).find((e) => e.kind === "tool_call_failed")!.data).toMatchObject({
      sequence: call.data.sequence,
      outcome: "unknown",
      failure: { code: "environment_failed", ambiguous: true }
    })
    expect((await result(host, call, { ok: "late" })).status).toBe(409)
    const second = await open(host)
    const next = send(id, "again")
    const fresh = await second.frames.expect("call")
    expect(fresh.data.sequence).toBeGreaterThan(call.data.sequence)
    expect((await result(host, fresh, { ok: "fine" })).status).toBe(204)
    expect((await next).status).toBe(200)
    expect(second.frames.all.filter((f) => f.event === "call").map((f) => f.data.sequence)).toEqual([fresh.data.sequence])
  })

  it("one host serves two sessions at once", async () => {
    const host = await register()
    const stream = await open(host)
    const ids = [await create(host.host_id, callOnce), await create(host.host_id, callOnce)]
    const turns = ids.map((id) => send(id, "go"))
    const calls = [await stream.frames.expect("call"), await stream.frames.expect("call")]
    expect(calls.map((c) => c.data.session_id).sort()).toEqual([...ids].sort())
    for (const c of [...calls].reverse()) expect((await result(host, c, { ok: c.data.session_id })).status).toBe(204)
    for (const t of turns) expect((await t).status).toBe(200)
    for (const id of ids) expect((await events(id)).find((e) => e.kind === "tool_call_ended")!.data).toMatchObject({ outcome: "ok", output: id })
  })

  it("a result holding more than one of ok, error and stopped, alone or in a batch, is 400 with a one-line message naming the rule, and ends no call", async () => {
    const host = await register()
    const stream = await open(host)
    const id = await create(host.host_id, callOnce)
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    const named = { session_id: call.data.session_id, sequence: call.data.sequence }
    const bodies = [{ ...named, ok: 1, error: 2 }, { ...named, ok: 1, stopped: true }, { results: [{ ...named, ok: "a" }, { ...named, error: 2, stopped: true }] }]
    for (const body of bodies) {
      const r = await asHost(host.token, `/v1/hosts/${host.host_id}/results`, body)
      expect(r.status, r.text).toBe(400)
      expect(r.body.code).toBe("invalid_request")
      expect(r.body.message, r.text).not.toContain("\n")
      expect(r.body.message).toMatch(/exactly one of "ok", "error" or "stopped"/)
    }
    expect((await events(id)).filter((e) => e.kind === "tool_call_ended"), "no call ended").toEqual([])
    expect((await result(host, call, { ok: "fine" })).status).toBe(204)
    expect((await turn).body.turn).toMatchObject({ status: "ended" })
  })

  it("a result holding none of ok, error and stopped (alone or in a batch) and an Event with no payload are 400 naming the fields: nothing is recorded and the call stays in flight", async () => {
    const host = await register()
    const stream = await open(host)
    const id = await create(host.host_id, callOnce)
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    const named = { session_id: call.data.session_id, sequence: call.data.sequence }
    // `{ok: undefined}` is what a JavaScript host posts for a tool that answered nothing: JSON drops the key.
    for (const body of [named, { ...named, ok: undefined }, { results: [named] }, { results: [{ ...named, ok: 1 }, named] }]) {
      const r = await asHost(host.token, `/v1/hosts/${host.host_id}/results`, body)
      expect(r.status, r.text).toBe(400)
      expect(r.body.code).toBe("invalid_request")
      expect(r.body.message, r.text).toMatch(/none of "ok", "error" or "stopped"/)
    }
    const event = await asHost(host.token, `/v1/hosts/${host.host_id}/events`, { ...named, kind: "progress" })
    expect(event.status, event.text).toBe(400)
    expect(event.body.code).toBe("invalid_request")
    expect(event.text).toContain("payload")
    const recorded = await events(id)
    expect(recorded.filter((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed" || e.kind === "progress"), "nothing recorded").toEqual([])
    // Still in flight: the host's real answer is taken.
    expect((await result(host, call, { ok: "fine" })).status).toBe(204)
    expect((await turn).body.turn).toMatchObject({ status: "ended" })
    expect((await events(id)).find((e) => e.kind === "tool_call_ended")!.data).toMatchObject({ outcome: "ok", output: "fine" })
  })

  it("a host's results and Events without its own token are 401 before their body is read: malformed JSON, a wrong shape or an empty body tell nothing of the schema; with the token the same bodies are 400", async () => {
    const a = await register()
    const b = await register()
    const bodies: ReadonlyArray<RequestOptions> = [
      { raw: "{not json", headers: { "content-type": "application/json" } },
      { json: { results: "nope" } },
      { json: [1, 2, 3] },
      { raw: "", headers: { "content-type": "application/json" } }
    ]
    for (const route of ["results", "events"]) {
      for (const body of bodies) {
        for (const token of [undefined, b.token, API_TOKEN]) {
          const r = await request(server.baseUrl, `/v1/hosts/${a.host_id}/${route}`, {
            ...body,
            headers: { ...body.headers, ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}) }
          })
          expect(r.status, `${route} ${JSON.stringify(body)} ${token === undefined ? "no token" : "a wrong token"}: ${r.text}`).toBe(401)
          expect(r.body).toEqual({ code: "unauthorized", message: expect.any(String), retryable: false })
        }
        const own = await request(server.baseUrl, `/v1/hosts/${a.host_id}/${route}`, { ...body, headers: { ...body.headers, authorization: `Bearer ${a.token}` } })
        expect(own.status, `${route} ${JSON.stringify(body)} with the host's token: ${own.text}`).toBe(400)
      }
    }
  })

  it("a host's token reaches only its own routes: another host's token, the API token and an unknown host id are 401", async () => {
    const a = await register()
    const b = await register()
    const streamA = await open(a)
    const id = await create(a.host_id, callOnce)
    const turn = send(id, "go")
    const call = await streamA.frames.expect("call")
    const name = { session_id: id, sequence: call.data.sequence }
    const refusals = [
      await request(server.baseUrl, `/v1/hosts/${a.host_id}/commands`, { headers: { authorization: `Bearer ${b.token}` } }),
      await request(server.baseUrl, `/v1/hosts/${a.host_id}/commands`, { headers: { authorization: `Bearer ${API_TOKEN}` } }),
      await request(server.baseUrl, `/v1/hosts/${a.host_id}/commands`),
      await request(server.baseUrl, `/v1/hosts/${UNREGISTERED}/commands`, { headers: { authorization: `Bearer ${a.token}` } }),
      await asHost(b.token, `/v1/hosts/${a.host_id}/results`, { ...name, ok: "forged" }),
      await asHost(b.token, `/v1/hosts/${a.host_id}/events`, { ...name, kind: "forged", payload: {} }),
      // b's own routes do not reach a's call either.
      await asHost(b.token, `/v1/hosts/${b.host_id}/results`, { ...name, ok: "forged" })
    ]
    expect(refusals.map((r) => r.status)).toEqual([401, 401, 401, 401, 401, 401, 409])
    for (const r of refusals.slice(0, 6)) expect(r.body).toEqual({ code: "unauthorized", message: refusals[0]!.body.message, retryable: false })
    expect((await result(a, call, { ok: "real" })).status).toBe(204)
    expect((await turn).status).toBe(200)
    const all = await events(id)
    expect(all.find((e) => e.kind === "tool_call_ended")!.data).toMatchObject({ output: "real" })
    expect(all.some((e) => e.kind === "forged")).toBe(false)
  })

  it("a session naming an unregistered host is 400 at create", async () => {
    const r = await api("/v1/sessions", {
      json: { model: { provider: "scripted" }, environments: [{ name: "app", driver: "host", host: UNREGISTERED }] }
    })
    expect(r.status).toBe(400)
    expect(r.body).toMatchObject({ code: "invalid_request", retryable: false })
    expect(r.body.message).toContain("no host is registered")
  })

  it("a host removed with its own token (DELETE /v1/hosts/{id}) is gone for good: its stream ends, its token opens nothing, sessions may not name it, a call of an older session is not sent, and a restart keeps it gone", async () => {
    const host = await register()
    const other = await register()
    const stream = await open(host)
    const older = await create(host.host_id, callOnce)
    const remove = (token: string) =>
      request(server.baseUrl, `/v1/hosts/${host.host_id}`, { method: "DELETE", headers: { authorization: `Bearer ${token}` } })
    expect((await remove(other.token)).status).toBe(401)
    expect((await api(`/v1/hosts/${host.host_id}`, { method: "DELETE" })).status).toBe(401)
    const removed = await remove(host.token)
    expect(removed.status, removed.text).toBe(204)
    for (let i = 0; i < 100 && !stream.frames.ended; i++) await new Promise((r) => setTimeout(r, 20))
    expect(stream.frames.ended).toBe(true)
    expect((await remove(host.token)).status).toBe(401)
    expect((await request(server.baseUrl, `/v1/hosts/${host.host_id}/commands`, { headers: { authorization: `Bearer ${host.token}` } })).status).toBe(401)
    const refused = await api("/v1/sessions", {
      json: { model: { provider: "scripted" }, environments: [{ name: "app", driver: "host", host: host.host_id }] }
    })
    expect(refused.status).toBe(400)
    // The older session's call goes nowhere: not sent, an error the model sees.
    expect((await send(older, "go")).status).toBe(200)
    const failed = (await events(older)).find((e) => e.kind === "tool_call_failed")!
    expect(failed.data).toMatchObject({ outcome: "error", failure: { ambiguous: false, details: { reason: "host_unknown" } } })
    await server.restart()
    expect((await request(server.baseUrl, `/v1/hosts/${host.host_id}/commands`, { headers: { authorization: `Bearer ${host.token}` } })).status).toBe(401)
    // The other host is still known: its token is taken (a result for no call in flight is 409, not 401).
    expect((await asHost(other.token, `/v1/hosts/${other.host_id}/results`, { session_id: older, sequence: 1, ok: null })).status).toBe(409)
  }, 60_000)

  it("registrations survive a restart: the host reconnects with its token and new sessions may name it", async () => {
    const host = await register()
    for (const s of streams.splice(0)) s.abort()
    await server.restart()
    const stream = await open(host)
    const id = await create(host.host_id, callOnce)
    const turn = send(id, "go")
    const call = await stream.frames.expect("call")
    expect((await result(host, call, { ok: "after restart" })).status).toBe(204)
    expect((await turn).status).toBe(200)
    const other = await register()
    expect(other.token).not.toBe(host.token)
    expect((await request(server.baseUrl, `/v1/hosts/${host.host_id}/commands`, { headers: { authorization: `Bearer ${other.token}` } })).status).toBe(401)
  }, 60_000)
})
