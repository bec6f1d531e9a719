/**
 * Sessions with a `host` Environment, in process over the real registry and driver: a host
 * registers, opens its command stream (read here as SSE text) and answers the commands through the
 * registry, exactly as the HTTP routes do. Each call is written once and never replayed; its
 * outcome is what docs/environments.md ("The `host` driver") gives it.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, type Layer, ManagedRuntime } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import type { HostId, SessionId } from "../../src/domain/Ids.js"
import * as HostsFile from "../../src/layers/HostsFile.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import type { MemorySessions } from "../../src/layers/JournalMemory.js"
import { Hosts, type HostsShape } from "../../src/services/Hosts.js"
import type { Journal } from "../../src/services/Journal.js"
import type { ModelCall } from "../../src/services/Models.js"
import { Sessions, type SessionsShape } from "../../src/services/Sessions.js"
import { type Frames, framesOf } from "../support/hosts.js"
import { runtimeLayer } from "../support/runtime.js"

const GRACE_MS = 300
/** Milliseconds a test waits for an idle registration to expire: a hang guard, far past the expiry. */
const EXPIRY_WAIT_MS = 30_000

type Runtime = ManagedRuntime.ManagedRuntime<Sessions | Hosts, unknown>
const runtimes: Array<Runtime> = []
afterEach(async () => {
  for (const rt of runtimes.splice(0)) await rt.dispose()
})

const start = (modelCalls: Array<ModelCall> = [], dataDir?: string, journal?: Layer.Layer<Journal>, hostIdleExpiryMs?: number) => {
  const layer = runtimeLayer({
    ...(journal !== undefined ? { journal } : {}),
    hosts: dataDir !== undefined ? { dataDir } : {},
    config: { cancelGraceMs: GRACE_MS, ...(hostIdleExpiryMs !== undefined ? { hostIdleExpiryMs } : {}) },
    onModelCall: (call) => void modelCalls.push(call)
  }) as unknown as Layer.Layer<Sessions | Hosts, unknown>
  const rt = ManagedRuntime.make(layer)
  runtimes.push(rt)
  const run = <A, E>(effect: Effect.Effect<A, E, Sessions | Hosts>) => rt.runPromise(effect)
  return {
    run,
    sessions: () => run(Sessions),
    hosts: () => run(Hosts)
  }
}

/** A registered host with its command stream open (the `ready` frame read). */
const connectedHost = async (hosts: HostsShape, run: <A, E>(e: Effect.Effect<A, E, never>) => Promise<A>, id?: HostId) => {
  const host_id = id ?? (await run(hosts.register)).host_id
  const stream = await run(hosts.connect(host_id))
  const frames = framesOf(stream.body)
  expect((await frames.expect("ready")).data).toEqual({ host_id, heartbeat_ms: 0 })
  return { host_id, stream, frames }
}

const createWith = (sessions: SessionsShape, host: HostId, replies: ReadonlyArray<unknown>, tools = ["lookup"]) =>
  sessions.create({
    model: { provider: "scripted", replies: replies as any },
    environments: [{ name: "app", driver: "host", host }],
    tools: tools.map((name) => ({ name, description: name, environment: "app" }))
  })

const eventsOf = (sessions: SessionsShape, id: SessionId) => Effect.map(sessions.events(id, { after: 0, limit: 1000 }), (p) => p.events)

const callOnce = [{ tool_calls: [{ name: "lookup", input: { q: 42 } }] }, { text: "done" }]

const answer = (hosts: HostsShape, host: HostId, frame: Frames extends { next(): Promise<infer F> } ? F : never, a: any) =>
  hosts.result(host, { session: frame.data.session_id, sequence: frame.data.sequence }, a)

describe("a host Environment's tool calls", () => {
  it("a call is written once to the host's stream, its ok result is tool_call_ended and the next model call sees the output", async () => {
    const modelCalls: Array<ModelCall> = []
    const { run, sessions: s, hosts: h } = start(modelCalls)
    const sessions = await s()
    const hosts = await h()
    const { host_id, frames } = await connectedHost(hosts, run)
    const { session_id: id } = await run(createWith(sessions, host_id, callOnce))
    const turn = run(sessions.send(id, { message: "go" }))
    const call = await frames.expect("call")
    const events = await run(eventsOf(sessions, id))
    const started = events.find((e) => e.kind === "tool_call_started")!
    expect(call.data).toEqual({
      session_id: id,
      sequence: started.sequence,
      environment: "app",
      name: "lookup",
      call_id: (started.data as any).call_id,
      input: { q: 42 },
      deadline_at_ms: (started.data as any).deadline_at_ms
    })
    await run(answer(hosts, host_id, call, { ok: { answer: 7 } }))
    expect((await turn).turn).toMatchObject({ status: "ended", result: { text: "done" } })
    const after = await run(eventsOf(sessions, id))
    expect(after.find((e) => e.kind === "tool_call_ended")!.data).toMatchObject({ sequence: started.sequence, outcome: "ok", output: { answer: 7 }, is_error: false })
    const toolMessages = modelCalls[1]!.request.messages.filter((m) => m.role === "tool")
    expect(toolMessages).toHaveLength(1)
    expect(JSON.parse(toolMessages[0]!.content as string)).toEqual({ answer: 7 })
    expect(frames.all.filter((f) => f.event === "call")).toHaveLength(1)
  })

  it("a tool-origin Event posted during the call is committed before tool_call_ended, with origin.sequence the call's tool_call_started", async () => {
    const { run, sessions: s, hosts: h } = start()
    const sessions = await s()
    const hosts = await h()
    const { host_id, frames } = await connectedHost(hosts, run)
    const { session_id: id } = await run(createWith(sessions, host_id, callOnce))
    const turn = run(sessions.send(id, { message: "go" }))
    const call = await frames.expect("call")
    const name = { session: call.data.session_id, sequence: call.data.sequence }
    const committed = await run(hosts.event(host_id, name, "progress", { done: 0.5 }))
    await run(answer(hosts, host_id, call, { ok: "finished" }))
    await turn
    const events = await run(eventsOf(sessions, id))
    const progress = events.find((e) => e.kind === "progress")!
    const ended = events.find((e) => e.kind === "tool_call_ended")!
    expect(progress).toMatchObject({ sequence: committed, data: { done: 0.5 }, origin: { kind: "tool", sequence: call.data.sequence } })
    expect(progress.sequence).toBeLessThan(ended.sequence)
    // Over now: a later Event or result for it is refused.
    expect((await run(Effect.flip(hosts.event(host_id, name, "progress", {})))).code).toBe("conflict")
    expect((await run(Effect.flip(hosts.result(host_id, name, { ok: 1 })))).code).toBe("conflict")
    expect(events.filter((e) => e.kind === "progress")).toHaveLength(1)
  })

  it("an error result reaches the model once as is_error", async () => {
    const modelCalls: Array<ModelCall> = []
    const { run, sessions: s, hosts: h } = start(modelCalls)
    const sessions = await s()
    const hosts = await h()
    const { host_id, frames } = await connectedHost(hosts, run)
    const { session_id: id } = await run(createWith(sessions, host_id, callOnce))
    const turn = run(sessions.send(id, { message: "go" }))
    const call = await frames.expect("call")
    await run(answer(hosts, host_id, call, { error: { message: "no such row" } }))
    await turn
    const ended = (await run(eventsOf(sessions, id))).find((e) => e.kind === "tool_call_ended")!
    expect(ended.data).toMatchObject({ outcome: "error", output: { message: "no such row" }, is_error: true })
    const toolMessages = modelCalls[1]!.request.messages.filter((m) => m.role === "tool")
    expect(toolMessages).toHaveLength(1)
    // The official loop marks an error result by its outcome.
    expect(JSON.parse(toolMessages[0]!.content as string)).toEqual({ outcome: "error", error: { message: "no such row" } })
  })

  it("an interrupted turn sends one cancel: confirmed by the host it is cancelled, unconfirmed within the grace it is unknown; the call is never resent", async () => {
    const { run, sessions: s, hosts: h } = start()
    const sessions = await s()
    const hosts = await h()
    const { host_id, frames } = await connectedHost(hosts, run)
    for (const confirm of [true, false]) {
      const { session_id: id } = await run(createWith(sessions, host_id, callOnce))
      const turn = run(sessions.send(id, { message: "go" }))
      const call = await frames.expect("call")
      const interrupted = run(sessions.interrupt(id))
      const cancel = await frames.expect("cancel")
      expect(cancel.data).toEqual({ session_id: id, sequence: call.data.sequence, reason: "cancel" })
      if (confirm) await run(answer(hosts, host_id, call, { stopped: true }))
      await interrupted
      await turn.catch(() => undefined)
      const failed = (await run(eventsOf(sessions, id))).find((e) => e.kind === "tool_call_failed")!
      expect(failed.data).toMatchObject(
        confirm ? { outcome: "cancelled", failure: { code: "cancelled" } } : { outcome: "unknown", failure: { code: "unknown", ambiguous: true } }
      )
    }
    expect(frames.all.map((f) => f.event)).toEqual(["ready", "call", "cancel", "call", "cancel"])
  })

  it("a runtime closing while a call waits for its host forwards a cancel and, unconfirmed, records the call unknown (ambiguous) before it stops", async () => {
    const shared: MemorySessions = new Map()
    const first = ManagedRuntime.make(
      runtimeLayer({ journal: JournalMemory.layerOver(shared), hosts: {}, config: { cancelGraceMs: GRACE_MS } }) as unknown as Layer.Layer<Sessions | Hosts, unknown>
    )
    const run = <A, E>(effect: Effect.Effect<A, E, Sessions | Hosts>) => first.runPromise(effect)
    const sessions = await run(Sessions)
    const hosts = await run(Hosts)
    const { frames, host_id } = await connectedHost(hosts, run)
    const { session_id: id } = await run(createWith(sessions, host_id, callOnce))
    void run(sessions.send(id, { message: "go" })).catch(() => undefined)
    const call = await frames.expect("call")
    await first.dispose()
    const { run: again, sessions: s } = start([], undefined, JournalMemory.layerOver(shared))
    const events = await again(eventsOf(await s(), id))
    const failed = events.find((e) => e.kind === "tool_call_failed")!
    expect(failed.data).toMatchObject({ sequence: call.data.sequence, outcome: "unknown", failure: { code: "unknown", ambiguous: true } })
    // Closed by the stopping runtime (DESIGN: shutdown past the drain is a cancellation), not by recovery.
    // Its message names the call that did not confirm its stop.
    expect(events.at(-1)).toMatchObject({
      kind: "turn_failed",
      data: { failure: { code: "interrupted", message: expect.stringMatching(/^the server is stopping; the tool call ".+" did not stop within BRAIN_CANCEL_GRACE_MS/) } }
    })
    expect(frames.all.map((f) => f.event)).toEqual(["ready", "call", "cancel"])
    expect(frames.all[2]!.data).toMatchObject({ sequence: call.data.sequence, reason: "cancel" })
  })

  it("a dropped command stream makes its call unknown, and a reconnecting host receives only new commands", async () => {
    const { run, sessions: s, hosts: h } = start()
    const sessions = await s()
    const hosts = await h()
    const first = await connectedHost(hosts, run)
    const { session_id: id } = await run(createWith(sessions, first.host_id, [...callOnce.slice(0, 1), { text: "after" }, ...callOnce]))
    const turn = run(sessions.send(id, { message: "go" }))
    const call = await first.frames.expect("call")
    first.stream.body.destroy()
    expect((await turn).turn.status).toBe("ended")
    const failed = (await run(eventsOf(sessions, id))).find((e) => e.kind === "tool_call_failed")!
    expect(failed.data).toMatchObject({ sequence: call.data.sequence, outcome: "unknown", failure: { code: "environment_failed", ambiguous: true } })
    // A late result for it is refused: the recorded outcome stands.
    expect((await run(Effect.flip(answer(hosts, first.host_id, call, { ok: 1 })))).code).toBe("conflict")

    const second = await connectedHost(hosts, run, first.host_id)
    const next = run(sessions.send(id, { message: "again" }))
    const fresh = await second.frames.expect("call")
    expect(fresh.data.sequence).toBeGreaterThan(call.data.sequence)
    await run(answer(hosts, first.host_id, fresh, { ok: "fine" }))
    await next
    expect(second.frames.all.filter((f) => f.event === "call").map((f) => f.data.sequence)).toEqual([fresh.data.sequence])
  })

  it("a call made while the host has no command stream is error with nothing sent", async () => {
    const { run, sessions: s, hosts: h } = start()
    const sessions = await s()
    const hosts = await h()
    const { host_id } = await run(hosts.register)
    const { session_id: id } = await run(createWith(sessions, host_id, callOnce))
    await run(sessions.send(id, { message: "go" }))
    const failed = (await run(eventsOf(sessions, id))).find((e) => e.kind === "tool_call_failed")!
    expect(failed.data).toMatchObject({ outcome: "error", failure: { code: "environment_failed", ambiguous: false, details: { reason: "host_disconnected" } } })
  })

  it("one host serves two sessions' calls at once, each answered by its own name", async () => {
    const { run, sessions: s, hosts: h } = start()
    const sessions = await s()
    const hosts = await h()
    const { host_id, frames } = await connectedHost(hosts, run)
    const a = (await run(createWith(sessions, host_id, callOnce))).session_id
    const b = (await run(createWith(sessions, host_id, callOnce))).session_id
    const turns = [run(sessions.send(a, { message: "a" })), run(sessions.send(b, { message: "b" }))]
    const calls = [await frames.expect("call"), await frames.expect("call")]
    expect(calls.map((c) => c.data.session_id).sort()).toEqual([a, b].sort())
    // Answered in reverse order, each with its own session's id.
    for (const c of [...calls].reverse()) await run(answer(hosts, host_id, c, { ok: c.data.session_id }))
    await Promise.all(turns)
    for (const id of [a, b]) {
      expect((await run(eventsOf(sessions, id))).find((e) => e.kind === "tool_call_ended")!.data).toMatchObject({ outcome: "ok", output: id })
    }
  })

  const callThree = [{ tool_calls: [1, 2, 3].map((q) => ({ name: "lookup", input: { q } })) }, { text: "done" }]
  const nameOf = (c: { readonly data: any }) => ({ session: c.data.session_id, sequence: c.data.sequence })

  /** A turn whose model asked for three calls, all three sent to a connected host and in flight. */
  const threeInFlight = async () => {
    const { run, sessions: s, hosts: h } = start()
    const sessions = await s()
    const hosts = await h()
    const { host_id, frames } = await connectedHost(hosts, run)
    const { session_id: id } = await run(createWith(sessions, host_id, callThree))
    const turn = run(sessions.send(id, { message: "go" }))
    const calls = [await frames.expect("call"), await frames.expect("call"), await frames.expect("call")]
    return { run, sessions, hosts, host_id, id, turn, calls }
  }

  it("results posted together in one batch each end their own call, and the turn goes on", async () => {
    const { calls, host_id, hosts, id, run, sessions, turn } = await threeInFlight()
    await run(hosts.results(host_id, calls.map((c) => ({ call: nameOf(c), answer: { ok: c.data.input.q * 10 } }))))
    expect((await turn).turn).toMatchObject({ status: "ended", result: { text: "done" } })
    const ended = (await run(eventsOf(sessions, id))).filter((e) => e.kind === "tool_call_ended")
    expect(ended.map((e) => e.data as any).map((d) => [d.sequence, d.outcome, d.output]).sort()).toEqual(calls.map((c) => [c.data.sequence, "ok", c.data.input.q * 10]).sort())
    // Settled in one step, their outcomes are committed together: one after another, in the calls' order.
    expect(ended.map((e) => (e.data as any).sequence)).toEqual(calls.map((c) => c.data.sequence).sort((a, b) => a - b))
    expect(ended.map((e) => e.sequence - ended[0]!.sequence)).toEqual([0, 1, 2])
  })

  it("a batch with a result that cannot be taken is refused naming it (details.index) and settles none of the others", async () => {
    const { calls, host_id, hosts, id, run, sessions, turn } = await threeInFlight()
    const unknown = { session: id, sequence: 999 }
    const notInFlight = await run(Effect.flip(hosts.results(host_id, [
      { call: nameOf(calls[0]), answer: { ok: "a" } },
      { call: unknown, answer: { ok: "x" } },
      { call: nameOf(calls[1]), answer: { ok: "b" } }
    ])))
    expect(notInFlight).toMatchObject({ code: "conflict", details: { reason: "not_in_flight", index: 1 } })
    const twice = await run(Effect.flip(hosts.results(host_id, [
      { call: nameOf(calls[0]), answer: { ok: "a" } },
      { call: nameOf(calls[0]), answer: { ok: "a again" } }
    ])))
    expect(twice).toMatchObject({ code: "invalid_request", details: { index: 1 } })
    const unasked = await run(Effect.flip(hosts.results(host_id, [
      { call: nameOf(calls[2]), answer: { ok: "c" } },
      { call: nameOf(calls[1]), answer: { stopped: true } }
    ])))
    expect(unasked).toMatchObject({ code: "conflict", details: { reason: "not_cancelled", index: 1 } })
    // Nothing was taken: every call is still in flight, and each takes its own result now.
    expect((await run(eventsOf(sessions, id))).filter((e) => e.kind === "tool_call_ended")).toEqual([])
    for (const [i, c] of calls.entries()) await run(hosts.result(host_id, nameOf(c), { ok: `single ${i}` }))
    expect((await turn).turn.status).toBe("ended")
    const ended = (await run(eventsOf(sessions, id))).filter((e) => e.kind === "tool_call_ended").map((e) => (e.data as any).output)
    expect(ended.sort()).toEqual(["single 0", "single 1", "single 2"])
  })

  it("a session naming an unregistered host is refused at create, before anything is written", async () => {
    const { run, sessions: s } = start()
    const sessions = await s()
    const refused = await run(Effect.flip(createWith(sessions, "host_01hzzzzzzzzzzzzzzzzzzzzzzz" as HostId, callOnce)))
    expect(refused.code).toBe("invalid_request")
    expect(refused.message).toContain("no host is registered")
    expect((await run(sessions.list({ limit: 10 }))).sessions).toEqual([])
  })
})

/** Runs the expiry until `host` is gone (bounded by EXPIRY_WAIT_MS of real time, so a registration that never expires fails). */
const expiredBy = async (run: <A, E>(e: Effect.Effect<A, E, never>) => Promise<A>, hosts: HostsShape, host: HostId) => {
  const deadline = Date.now() + EXPIRY_WAIT_MS
  while (hosts.isRegistered(host)) {
    if (Date.now() > deadline) throw new Error(`${host} did not expire within ${EXPIRY_WAIT_MS} ms`)
    await new Promise((r) => setTimeout(r, 50))
    await run(hosts.expire)
  }
}

describe("host registrations", () => {
  it("a session holds the host it names from its creation until its delete: idle past the expiry, the host stands while the session exists and expires once it is deleted", async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
    try {
      const { run, sessions: s, hosts: h } = start([], dataDir, undefined, 200)
      const sessions = await s()
      const hosts = await h()
      // Connected while the session is created, so that a slow create cannot see it expire; its
      // idle time starts when its stream stops.
      const { host_id: named, stream } = await connectedHost(hosts, run)
      const { session_id: id } = await run(createWith(sessions, named, [{ text: "hi" }]))
      const lines = fs.readFileSync(path.join(dataDir, "hosts", "registrations.jsonl"), "utf8").split("\n").filter((l) => l !== "")
      expect(lines.map((l) => JSON.parse(l)).filter((l) => l.session_id !== undefined)).toEqual([
        { host_id: named, session_id: id, named_at_ms: expect.any(Number) }
      ])
      await run(stream.stop)
      // Registered after `named` went idle, never connected and never named: once it has expired,
      // `named` has been idle past the expiry too. (The sweep may come first: what stands is
      // checked, not who removed it.)
      const unnamed = (await run(hosts.register)).host_id
      await expiredBy(run, hosts, unnamed)
      expect(hosts.isRegistered(named)).toBe(true)
      // Ended, the session still exists (it can be read): the host stands until the delete.
      await run(sessions.end(id))
      await run(hosts.expire)
      expect(hosts.isRegistered(named)).toBe(true)
      await run(sessions.delete(id))
      await run(hosts.expire)
      expect(hosts.isRegistered(named)).toBe(false)
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  })

  it("survive a restart by id and token hash; the token itself is not stored, and another token is refused", async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
    try {
      const options = { dataDir, graceMs: GRACE_MS, heartbeatMs: 0, maxResultBytes: 1024 }
      const first = await Effect.runPromise(Effect.scoped(HostsFile.make(options)))
      const one = await Effect.runPromise(first.register)
      const two = await Effect.runPromise(first.register)
      const again = await Effect.runPromise(Effect.scoped(HostsFile.make(options)))
      expect(again.isRegistered(one.host_id)).toBe(true)
      expect(again.authorize(one.host_id, one.token)).toBe(true)
      expect(again.authorize(one.host_id, two.token)).toBe(false)
      expect(again.authorize("host_01hzzzzzzzzzzzzzzzzzzzzzzz", one.token)).toBe(false)
      const stored = fs.readFileSync(path.join(dataDir, "hosts", "registrations.jsonl"), "utf8")
      expect(stored).toContain(one.host_id)
      expect(stored).not.toContain(one.token)
      expect(stored).not.toContain(two.token)
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  })
})
