/**
 * An application that composes Brain's services into its own runtime and disposes it while turns
 * run and streams are open: every caller waiting on a turn gets its answer, and what it is told is
 * what the journal recorded before it closed (not left for the next start's recovery to find);
 * every open stream ends, as a server's stop ends it (DESIGN: "close subscriptions").
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, Exit, type Layer, ManagedRuntime, Scope } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import type { SessionId } from "../../src/domain/Ids.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import type { MemorySessions } from "../../src/layers/JournalMemory.js"
import type { AgentloopShape } from "../../src/services/Agentloop.js"
import type { ModelsShape } from "../../src/services/Models.js"
import { Hosts } from "../../src/services/Hosts.js"
import { Sessions } from "../../src/services/Sessions.js"
import { framesOf } from "../support/hosts.js"
import { runtimeLayer, type RuntimeOptions } from "../support/runtime.js"

const GRACE_MS = 200
const CLEANUP_MS = 500

type Runtime = ManagedRuntime.ManagedRuntime<Sessions, unknown>
const runtimes: Array<Runtime> = []
afterEach(async () => {
  for (const rt of runtimes.splice(0)) await rt.dispose()
})

/** A runtime of the server's composition with this file's grace and cleanup deadline, disposed after the test. */
const runtimeOf = (options: RuntimeOptions) => {
  const rt = ManagedRuntime.make(
    runtimeLayer({
      ...options,
      config: { cancelGraceMs: GRACE_MS, cleanupDeadlineMs: CLEANUP_MS, ...options.config }
    }) as unknown as Layer.Layer<Sessions, unknown>
  )
  runtimes.push(rt)
  return rt
}

/** A runtime over the memory store `shared`, which later runtimes can open again. */
const runtimeOver = (shared: MemorySessions, options: RuntimeOptions = {}) => runtimeOf({ ...options, journal: JournalMemory.layerOver(shared) })

/** A model that tells when it is called and never answers. */
const hangingModel = () => {
  let called!: () => void
  const calledOnce = new Promise<void>((resolve) => (called = resolve))
  const models: ModelsShape = { call: () => Effect.zipRight(Effect.sync(() => called()), Effect.never) }
  return { models, calledOnce }
}

/** A loop that tells when it runs, then does `rest` (it never returns). */
const loopThat = (rest: Effect.Effect<never>) => {
  let entered!: () => void
  const inLoop = new Promise<void>((resolve) => (entered = resolve))
  const loop: AgentloopShape = { activate: () => Effect.zipRight(Effect.sync(() => entered()), rest) }
  return { loop, inLoop }
}

/** Settles as `p` does, or with "pending" if it has not after `ms`. */
const within = <A>(p: Promise<A>, ms: number): Promise<A | "pending"> =>
  Promise.race([p, new Promise<"pending">((resolve) => setTimeout(() => resolve("pending"), ms))])

/** Creates a session on `rt`, sends to it, disposes `rt` once `reached`: the session and the send's answer ("pending" if none came). */
const sendThenDispose = async (rt: Runtime, reached: Promise<void>, agentloop?: string) => {
  const sessions = await rt.runPromise(Sessions)
  const { session_id: id } = await rt.runPromise(sessions.create({ model: { provider: "scripted" }, ...(agentloop ? { agentloop } : {}) }))
  const sent = rt.runPromise(sessions.send(id, { message: "go" }))
  await reached
  await rt.dispose()
  return { id, answer: await within(sent, 2 * GRACE_MS + CLEANUP_MS + 2000) }
}

/** How the stopping runtime itself closes a turn (recovery would say "nothing was re-run"). */
const STOPPING = { code: "interrupted", message: "the server is stopping" }

/** The session's Events as a new runtime reads them (its recovery runs first). */
const eventsIn = async (rt: Runtime, id: SessionId) => (await rt.runPromise(Effect.flatMap(Sessions, (s) => s.events(id, { after: 0, limit: 1000 })))).events

/** The one turn_failed the journal holds, written by the stopping runtime. */
const closedByTheStop = (events: ReadonlyArray<{ readonly kind: string; readonly data: unknown }>) => {
  const failed = events.filter((e) => e.kind === "turn_failed")
  expect(failed).toHaveLength(1)
  expect(failed[0]!.data).toMatchObject({ failure: STOPPING })
}

describe("disposing a runtime that composed Brain's services", () => {
  it("answers a send waiting on its model with the turn interrupted, recorded before the journal closed", async () => {
    const shared: MemorySessions = new Map()
    const { calledOnce, models } = hangingModel()
    const { answer, id } = await sendThenDispose(runtimeOver(shared, { models }), calledOnce)
    expect(answer).toMatchObject({ turn: { status: "failed", failure: STOPPING } })
    const events = await eventsIn(runtimeOver(shared), id)
    closedByTheStop(events)
    expect(events.find((e) => e.kind === "model_call_failed")?.data).toMatchObject({ failure: { ambiguous: true } })
  })

  it("on the file journal, the interrupted turn's closing records are on disk when dispose returns: a new runtime reads them, recovery adds nothing", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-dispose-"))
    try {
      const { calledOnce, models } = hangingModel()
      const { answer, id } = await sendThenDispose(runtimeOf({ models, journal: { dataDir: dir } }), calledOnce)
      expect(answer).toMatchObject({ turn: { status: "failed", failure: STOPPING } })
      const again = runtimeOf({ journal: { dataDir: dir } })
      const events = await eventsIn(again, id)
      closedByTheStop(events)
      expect(events.filter((e) => e.kind === "model_call_failed")).toHaveLength(1)
      await again.dispose()
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("answers a send whose loop ignores the cancel, once its grace has passed", async () => {
    const shared: MemorySessions = new Map()
    // A loop that never returns and never makes another host call: the cancel cannot reach it.
    const { inLoop, loop } = loopThat(Effect.never)
    const { answer, id } = await sendThenDispose(runtimeOver(shared, { loops: { stubborn: loop } }), inLoop, "stubborn")
    expect(answer).toMatchObject({ turn: { status: "failed", failure: STOPPING } })
    closedByTheStop(await eventsIn(runtimeOver(shared), id))
  })

  it("answers a send whose loop is deaf to the cancel and to interruption for longer than the stop waits: the loop is abandoned, the turn recorded closed once, by the stop", async () => {
    const shared: MemorySessions = new Map()
    // Deaf to the cancel, and not to be interrupted for longer than the stop waits (3 × 50 + 50 ms)
    // from whenever the stop begins: on a loaded machine that can be a second after the loop entered.
    const { inLoop, loop } = loopThat(Effect.zipRight(Effect.uninterruptible(Effect.sleep("5 seconds")), Effect.never))
    const rt = runtimeOver(shared, { loops: { stuck: loop }, config: { cancelGraceMs: 50, cleanupDeadlineMs: 50 } })
    const { answer, id } = await sendThenDispose(rt, inLoop, "stuck")
    expect(answer).toMatchObject({ turn: { status: "failed", failure: { code: "interrupted", message: expect.stringContaining("abandoned") } } })
    const events = await eventsIn(runtimeOver(shared), id)
    expect(events.filter((e) => e.kind === "turn_failed" || e.kind === "turn_ended")).toHaveLength(1)
  })

  it("a runtime disposed with no turn running leaves its sessions idle, with no turn recorded failed", async () => {
    const shared: MemorySessions = new Map()
    const rt = runtimeOver(shared)
    const sessions = await rt.runPromise(Sessions)
    const { session_id: id } = await rt.runPromise(sessions.create({ model: { provider: "scripted" } }))
    const answer = await rt.runPromise(sessions.send(id, { message: "hi" }))
    expect(answer.turn.status).toBe("ended")
    await rt.dispose()
    const again = runtimeOver(shared)
    const status = await again.runPromise(Effect.flatMap(Sessions, (s) => s.get(id)))
    expect(status.status).toBe("idle")
    expect((await eventsIn(again, id)).filter((e) => e.kind === "turn_failed")).toHaveLength(0)
  })

  it("ends an open follow stream after the turns' closing records, with a retryable stream_error (resume by cursor), as a server's stop does", async () => {
    const shared: MemorySessions = new Map()
    const { calledOnce, models } = hangingModel()
    const rt = runtimeOver(shared, { models })
    const sessions = await rt.runPromise(Sessions)
    const { session_id: id } = await rt.runPromise(sessions.create({ model: { provider: "scripted" } }))
    const scope = Effect.runSync(Scope.make())
    const following = await rt.runPromise(Scope.extend(sessions.follow(id, 0), scope))
    let text = ""
    const ended = new Promise<void>((resolve) => {
      following.body.on("data", (chunk) => (text += String(chunk)))
      following.body.on("end", () => resolve())
    })
    void rt.runPromise(sessions.send(id, { message: "go" })).catch(() => undefined)
    await calledOnce
    // Live: the model call's start has reached the stream.
    while (!text.includes("model_call_started")) await new Promise((resolve) => setTimeout(resolve, 10))
    await rt.dispose()
    expect(await within(ended, 2000)).not.toBe("pending")
    const kinds = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1])
    expect(kinds.slice(-2)).toEqual(["turn_failed", "stream_error"])
    expect(text).toMatch(/event: stream_error\ndata: \{[^\n]*"retryable":true/)
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })

  it("ends a host's open command stream, as a server's stop does", async () => {
    const rt = ManagedRuntime.make(runtimeLayer({ hosts: {} }) as unknown as Layer.Layer<Hosts, unknown>)
    const hosts = await rt.runPromise(Hosts)
    const { host_id } = await rt.runPromise(hosts.register)
    const stream = await rt.runPromise(hosts.connect(host_id))
    const ended = new Promise<void>((resolve) => stream.body.on("end", () => resolve()))
    expect((await framesOf(stream.body).expect("ready")).data).toMatchObject({ host_id })
    await rt.dispose()
    expect(await within(ended, 2000)).not.toBe("pending")
  })
})
